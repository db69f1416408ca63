package policy

import (
	"encoding/json"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// AnnLastResize is the PVC annotation the autoscaler writes in the same patch as the request
// it changes: its record of that change. It is the autoscaler's only memory, so a restarted
// or newly elected autoscaler decides as the previous one would have (cooldown, the wait for
// the file system, the mark left by a recovery).
const AnnLastResize = "csi-resizer.io/autoscale-last-resize"

// Record is the value of AnnLastResize, as JSON:
//
//	{"time":"2026-11-29T07:00:00Z","from":"10Gi","to":"11Gi","reason":"threshold-bytes","fsCapacity":10501771264}
//
// A record with reason "recover" marks the PVC at its limit: the driver refused From, the
// request was lowered to To, and the autoscaler does not grow the volume past To again until
// a person removes the annotation.
type Record struct {
	// Time is when the request was written (UTC, whole seconds).
	Time time.Time `json:"time"`
	// From is the request before, To the request written.
	From resource.Quantity `json:"from"`
	To   resource.Quantity `json:"to"`
	// Reason is the Decision's reason: threshold-bytes, threshold-inodes, siblings, recover.
	Reason Reason `json:"reason"`
	// FSCapacity is the file system's capacity in bytes as the kubelet reported it before
	// the resize, 0 when unknown: the resize is done when the kubelet reports more.
	FSCapacity int64 `json:"fsCapacity,omitempty"`
}

// FormatRecord returns the annotation value for r.
func FormatRecord(r Record) string {
	r.Time = r.Time.UTC().Truncate(time.Second)
	b, _ := json.Marshal(r) // a struct of plain fields and Quantities: cannot fail
	return string(b)
}

// ParseRecord reads the PVC's record: nil and no problem when there is none. A value that does
// not parse, or holds no time, no size or an unknown reason, is a problem (someone edited it):
// the PVC is left alone until the annotation is fixed or removed.
func ParseRecord(pvc *v1.PersistentVolumeClaim) (*Record, *Problem) {
	v, ok := pvc.Annotations[AnnLastResize]
	if !ok {
		return nil, nil
	}
	var r Record
	err := json.Unmarshal([]byte(v), &r)
	if err != nil || r.Time.IsZero() || r.To.Sign() <= 0 || r.From.Sign() < 0 || !recordReasons[r.Reason] ||
		r.FSCapacity < 0 || r.To.Cmp(maxQuantity) > 0 || r.From.Cmp(maxQuantity) > 0 {
		return nil, &Problem{
			Annotation: AnnLastResize, Value: v, Object: pvc.Namespace + "/" + pvc.Name,
			Fix: `want the autoscaler's record like {"time":"2026-11-29T07:00:00Z","from":"10Gi","to":"11Gi","reason":"threshold-bytes"}; remove the annotation to reset it`,
		}
	}
	return &r, nil
}

var recordReasons = map[Reason]bool{
	ReasonThresholdBytes: true, ReasonThresholdInodes: true, ReasonSiblings: true, ReasonRecover: true,
}
