package policy

import (
	"fmt"
	"math"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// VolumeStats is the kubelet's report of one volume's file system (its /stats/summary).
type VolumeStats struct {
	CapacityBytes, AvailableBytes, UsedBytes int64
	Inodes, InodesFree, InodesUsed           int64
	// Time is when the kubelet took the numbers.
	Time time.Time
}

// Input is everything Decide looks at for one PVC.
type Input struct {
	// PVC is the claim as observed: its request, status, annotations (the AnnLastResize record).
	PVC *v1.PersistentVolumeClaim
	// Settings are Parse's result for the PVC.
	Settings Settings
	// Stats is the kubelet's report for the volume, nil when it was not read this round.
	Stats *VolumeStats
	// SiblingSize is SiblingSize of the PVC's siblings (its StatefulSet's other replicas of
	// the same template, or its pvc-autoresizer group), nil when none counts.
	SiblingSize *resource.Quantity
	// Now is the time of the decision; Decide reads no clock.
	Now time.Time
}

// Action is what the caller does.
type Action string

const (
	// Resize: write Decision.To into spec.resources.requests.storage, and Decision.Record
	// into AnnLastResize, in one patch.
	Resize Action = "Resize"
	// Recover: the same patch with a lower To (KEP-1790 recovery from an infeasible size).
	Recover Action = "Recover"
	// Skip: leave the PVC as it is.
	Skip Action = "Skip"
)

// Reason says why; its values label metrics, so they are fixed words.
type Reason string

// The reasons of Resize and Recover.
const (
	ReasonThresholdBytes  Reason = "threshold-bytes"
	ReasonThresholdInodes Reason = "threshold-inodes"
	ReasonSiblings        Reason = "siblings"
	ReasonRecover         Reason = "recover"
)

// The reasons of Skip.
const (
	SkipNotEnabled        Reason = "not-enabled"
	SkipNotBound          Reason = "not-bound"
	SkipBelowThreshold    Reason = "below-threshold"
	SkipCooldown          Reason = "cooldown"
	SkipAtLimit           Reason = "at-limit"
	SkipResizing          Reason = "resizing"
	SkipResizeWaitExpired Reason = "resize-wait-expired"
	SkipInfeasible        Reason = "infeasible"
	SkipStatsMissing      Reason = "stats-missing"
	SkipBadSettings       Reason = "bad-settings"
)

// Decision is the outcome for one PVC.
type Decision struct {
	Action Action
	Reason Reason
	// From is the request now. To is the request to write (Resize, Recover).
	From, To resource.Quantity
	// Record is the AnnLastResize value to write with To (Resize, Recover), "" otherwise.
	Record string
	// Message is one sentence for the event and the log.
	Message string
	// Problems are the bad values of a bad-settings skip, one event each.
	Problems []Problem
}

// volume is what Decide reads of the PVC: sizes in bytes for the rules, and the request and
// capacity as written, for the sentences.
type volume struct {
	spec, capacity   int64
	specQ, capacityQ resource.Quantity
	state            v1.ClaimResourceStatus
	phase            v1.PersistentVolumeClaimPhase
}

func observe(pvc *v1.PersistentVolumeClaim) volume {
	spec := pvc.Spec.Resources.Requests[v1.ResourceStorage]
	capacity := pvc.Status.Capacity[v1.ResourceStorage]
	return volume{
		spec:      bytesOf(spec),
		capacity:  bytesOf(capacity),
		specQ:     spec.DeepCopy(),
		capacityQ: capacity.DeepCopy(),
		state:     pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage],
		phase:     pvc.Status.Phase,
	}
}

// request and capacity write the sizes as the PVC has them ("10G" stays "10G").
func (v volume) request() string {
	return v.specQ.String()
}

func (v volume) capacityText() string {
	return v.capacityQ.String()
}

// bytesOf reads a quantity as bytes, clamped to [0, MaxInt64].
func bytesOf(q resource.Quantity) int64 {
	switch {
	case q.Sign() <= 0:
		return 0
	case q.Cmp(maxQuantity) > 0:
		return math.MaxInt64
	}
	return q.Value()
}

func (v volume) skip(r Reason, format string, args ...any) Decision {
	return Decision{Action: Skip, Reason: r, From: v.specQ.DeepCopy(), Message: fmt.Sprintf(format, args...)}
}

// Decide is the autoscaler's decision for one PVC (docs/autoscaler.md, "Decision"). The rules
// are applied in this order, the first that decides wins: bad settings, not enabled, not
// bound, an infeasible size, a resize not done, then the thresholds and siblings, gated by
// the limit and the cooldown.
func Decide(in Input) Decision {
	s := in.Settings
	v := observe(in.PVC)
	if len(s.Problems) > 0 {
		return badSettings(v, s.Problems)
	}
	if !s.Enabled {
		return v.skip(SkipNotEnabled, "not autoscaled: %s", s.Why)
	}
	last, problem := ParseRecord(in.PVC)
	if problem != nil {
		return badSettings(v, []Problem{*problem})
	}
	if v.phase != v1.ClaimBound {
		return v.skip(SkipNotBound, "the PVC is %s, not Bound: the apiserver takes a new request only on a bound claim", phaseText(v.phase))
	}
	if d, ok := decideInfeasible(in, v, last); ok {
		return d
	}
	if d, ok := decideInFlight(in, v, last); ok {
		return d
	}
	return decideGrowth(in, v, last)
}

func badSettings(v volume, problems []Problem) Decision {
	msgs := make([]string, len(problems))
	for i, p := range problems {
		msgs[i] = p.Error()
	}
	d := v.skip(SkipBadSettings, "left alone: %s", strings.Join(msgs, "; "))
	d.Problems = problems
	return d
}

func phaseText(p v1.PersistentVolumeClaimPhase) string {
	if p == "" {
		return "without a phase"
	}
	return string(p)
}
