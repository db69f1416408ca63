package expand

import (
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/csi-resizer/csi-resizer/pkg/internal/conditions"
)

// Retry is the retry policy of failed expansions: --retry-interval-start and
// --retry-interval-max.
type Retry struct {
	Start, Max time.Duration
}

// AfterUnrecorded is how long to wait before calling again after an answer of class answer
// that the PVC could not record: what RetryWait would have said right after the answer, had it
// been recorded (the first wait: Max after an infeasible answer, Start after any other).
func (r Retry) AfterUnrecorded(answer ErrorClass) time.Duration {
	if answer == ClassInfeasible {
		return r.Max
	}
	return r.Start
}

// ReasonFailedPrecondition is the condition reason of a FAILED_PRECONDITION answer, which an
// offline-only driver gives while a pod uses the volume (docs/design.md §2.3 rule 9).
const ReasonFailedPrecondition = "FailedPrecondition"

// RetryWait says how long the step p must still wait after the failure the PVC records, so that
// the wait is the same whoever looks and whenever: a restarted resizer, or the same one woken by
// the echo of its own write (docs/design.md §2.3 rule 8). It reads the failure's condition:
//   - an infeasible failure (ControllerResizeInfeasible, NodeResizeInfeasible, or in legacy mode
//     an infeasible ControllerResizeError) is retried retry.Max after the failure;
//   - any other driver error backs off exponentially: the wait before the next attempt is the
//     time the PVC has been failing (from failingSince to the condition's lastProbeTime) plus
//     retry.Start, at most retry.Max, which doubles the interval on every failure as a
//     rate-limited work queue would, without a counter that a restart loses.
//
// A step whose target differs from what failed goes at once: a new request is the user's
// answer to the failure. failed is the size the failed attempt asked for: allocatedResources,
// or, in legacy mode where the PVC does not record it, what the caller remembers (nil: not
// known, so the wait applies).
func RetryWait(pvc *v1.PersistentVolumeClaim, o Observed, p Plan, failed *resource.Quantity, r Retry, now time.Time) time.Duration {
	if !o.Legacy {
		failed = o.Alloc
	}
	if failed != nil && failed.Cmp(p.Target) != 0 && p.Action != RedriveNode {
		return 0
	}
	cond, infeasible := failureCondition(pvc, o)
	if cond == nil {
		return 0
	}
	at := latest(cond.LastProbeTime.Time, cond.LastTransitionTime.Time)
	if at.IsZero() {
		return 0
	}
	interval := r.Max
	if !infeasible {
		interval = min(r.Max, r.Start+at.Sub(failingSince(pvc, cond)))
	}
	// Condition times have a precision of one second (they are truncated): the failure
	// happened before the end of that second, so count from there, never earlier.
	return max(0, at.Add(time.Second+interval).Sub(now))
}

// failureCondition is the condition that records the failure behind the PVC's state, and
// whether that failure is infeasible (slow retry). nil when the PVC records no failure.
func failureCondition(pvc *v1.PersistentVolumeClaim, o Observed) (*v1.PersistentVolumeClaimCondition, bool) {
	switch {
	case o.State == v1.PersistentVolumeClaimNodeResizeInfeasible:
		return conditions.Find(pvc.Status.Conditions, v1.PersistentVolumeClaimNodeResizeError), true
	case o.LastError == ClassNone:
		return nil, false
	}
	infeasible := o.State == v1.PersistentVolumeClaimControllerResizeInfeasible || (o.Legacy && o.LastError == ClassInfeasible)
	return conditions.Find(pvc.Status.Conditions, v1.PersistentVolumeClaimControllerResizeError), infeasible
}

// failingSince is when the run of failed attempts began: the error condition's
// lastTransitionTime, or the Resizing condition's when earlier. Resizing stays True from the
// first attempt until the expansion succeeds or turns infeasible, while a final error's
// condition is removed before each attempt (StartedStatus) and starts again at the next failure.
func failingSince(pvc *v1.PersistentVolumeClaim, cond *v1.PersistentVolumeClaimCondition) time.Time {
	since := cond.LastTransitionTime.Time
	if r := conditions.Find(pvc.Status.Conditions, v1.PersistentVolumeClaimResizing); r != nil && r.Status == v1.ConditionTrue &&
		!r.LastTransitionTime.IsZero() && r.LastTransitionTime.Time.Before(since) {
		since = r.LastTransitionTime.Time
	}
	return since
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// WaitsForPods reports whether an expansion must first wait until no pod uses the volume
// (docs/design.md §2.3 rule 9): with --handle-volume-inuse-error, for a driver that expands
// only offline, or after the driver answered FAILED_PRECONDITION, which the PVC's
// ControllerResizeError condition records.
func WaitsForPods(pvc *v1.PersistentVolumeClaim, handleInUse, offlineOnly bool) bool {
	if !handleInUse {
		return false
	}
	if offlineOnly {
		return true
	}
	c := conditions.Find(pvc.Status.Conditions, v1.PersistentVolumeClaimControllerResizeError)
	return c != nil && c.Reason == ReasonFailedPrecondition
}

// NodeOutcome is what became of a node step, as the PVC tells.
type NodeOutcome int

const (
	// NodePending: the node has not finished.
	NodePending NodeOutcome = iota
	// NodeDone: the node grew the file system to the step's size.
	NodeDone
	// NodeFailed: the node reported NodeResizeInfeasible.
	NodeFailed
	// NodeGone: the PVC left the node's hands without reaching the size (another step
	// started). Neither success nor failure.
	NodeGone
)

// NodeStepOutcome reads the outcome of a node step to size to from the PVC. The kubelet ends a
// node expansion by clearing the resize state and setting status.capacity, in one write; it
// reports a failure it will not retry as NodeResizeInfeasible. In legacy mode there is no state
// and the FileSystemResizePending condition is what says the node still has work.
func NodeStepOutcome(o Observed, to resource.Quantity) NodeOutcome {
	switch o.State {
	case v1.PersistentVolumeClaimNodeResizePending, v1.PersistentVolumeClaimNodeResizeInProgress:
		return NodePending
	case v1.PersistentVolumeClaimNodeResizeInfeasible:
		return NodeFailed
	case "":
		if o.PVCCap.Cmp(to) >= 0 {
			return NodeDone
		}
		if o.FileSystemResizePending {
			return NodePending
		}
	}
	return NodeGone
}

// Failed reports whether the PVC records an expansion that failed for good (infeasible), the
// outcome the duration histogram counts once per expansion.
func Failed(o Observed) bool {
	if o.Legacy {
		return o.LastError == ClassInfeasible
	}
	return o.State == v1.PersistentVolumeClaimControllerResizeInfeasible || o.State == v1.PersistentVolumeClaimNodeResizeInfeasible
}

// NodeRequired says whether a node-only expansion to p.Target leaves the node anything to do:
// the kubelet expands only when the PV is above status.capacity, so a target at or below it
// (the user cancelled back to it) finishes the resize in the control plane.
func NodeRequired(o Observed, p Plan) bool {
	return p.Target.Cmp(o.PVCCap) > 0
}
