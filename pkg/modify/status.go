package modify

import (
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-resizer/csi-resizer/pkg/expand"
	"github.com/csi-resizer/csi-resizer/pkg/internal/conditions"
)

// Condition reasons of ModifyingVolume (ModifyVolumeError's reason is the gRPC code name, or
// ReasonClassDeleted, or ReasonClassOfAnotherDriver).
const (
	ReasonModifyInProgress = "ModifyInProgress"
	ReasonModifyInfeasible = "ModifyInfeasible"
	// ReasonClassDeleted is ModifyVolumeError's reason when the resizer gave up a modification
	// whose class was deleted (rule 20): a final answer, read back as such (ClassifyReason).
	ReasonClassDeleted = "VolumeAttributesClassDeleted"
	// ReasonClassOfAnotherDriver is the ModifyVolumeError reason of a class whose driverName
	// is not the PVC's driver (rule 13): infeasible, and no call was made.
	ReasonClassOfAnotherDriver = "VolumeAttributesClassOfAnotherDriver"
)

// Each function below returns the PVC status the controller writes at one step, computed from
// the observed one. They touch only status.modifyVolumeStatus, currentVolumeAttributesClassName
// and the ModifyingVolume and ModifyVolumeError conditions: the expansion controller writes the
// same status with its own fields and conditions, and each keeps the other's (rule 19).
// Only SucceededStatus changes currentVolumeAttributesClassName (rule 18).

// PendingStatus records that the target class cannot be used yet (rule 13). The conditions of an
// earlier attempt for another class are removed: they no longer describe the PVC. The error of
// an attempt for this same class is kept (a class deleted after a call for it, rule 20): it says
// a call was made, which a rollback must undo with a call, not a cancel.
func PendingStatus(st v1.PersistentVolumeClaimStatus, target string) v1.PersistentVolumeClaimStatus {
	sameTarget := st.ModifyVolumeStatus != nil && st.ModifyVolumeStatus.TargetVolumeAttributesClassName == target
	st = withModifyStatus(st, v1.PersistentVolumeClaimModifyVolumePending, target)
	if sameTarget {
		st.Conditions = conditions.Remove(st.Conditions, v1.PersistentVolumeClaimVolumeModifyingVolume)
		return st
	}
	return clearConditions(st)
}

// StartedStatus is written before the call (rule 12): InProgress for target, ModifyingVolume set
// and the previous attempt's error removed, so that a resizer stopped during the call leaves
// InProgress without a final answer, which keeps the target (rule 14). ModifyingVolume's
// lastProbeTime is this attempt's start: the latest call for the target may run until then
// plus the call timeout (ClassGoneWait).
func StartedStatus(st v1.PersistentVolumeClaimStatus, target string, now metav1.Time) v1.PersistentVolumeClaimStatus {
	st = withModifyStatus(st, v1.PersistentVolumeClaimModifyVolumeInProgress, target)
	st.Conditions = conditions.Remove(st.Conditions, v1.PersistentVolumeClaimVolumeModifyVolumeError)
	st.Conditions = conditions.Set(st.Conditions, v1.PersistentVolumeClaimVolumeModifyingVolume, ReasonModifyInProgress,
		fmt.Sprintf("modifying the volume to VolumeAttributesClass %s", target), now, true)
	return st
}

// ClassGoneWait says how long a GiveUp plan must still wait: until the latest call for the
// recorded target, started at ModifyingVolume's lastProbeTime, is past its deadline
// (callTimeout, --modify-timeout) and so cannot be running from any resizer's side, its
// predecessor's included (rule 20). Times are truncated to the second: count from the end of
// that second. Without the condition (a PVC some other writer changed), nothing to wait for.
func ClassGoneWait(pvc *v1.PersistentVolumeClaim, callTimeout time.Duration, now time.Time) time.Duration {
	c := conditions.Find(pvc.Status.Conditions, v1.PersistentVolumeClaimVolumeModifyingVolume)
	if c == nil {
		return 0
	}
	return max(0, conditions.LastSeen(c).Add(time.Second+callTimeout).Sub(now))
}

// ClassGoneStatus records that the modification to target, whose class was deleted while a call
// for it may have been in effect, ended with an unknown outcome (rule 20): InProgress with a
// final ModifyVolumeError (reason ReasonClassDeleted) that says what the user can do. The next
// decision follows the spec.
func ClassGoneStatus(st v1.PersistentVolumeClaimStatus, target string, now metav1.Time) v1.PersistentVolumeClaimStatus {
	current := "no class"
	if st.CurrentVolumeAttributesClassName != nil && *st.CurrentVolumeAttributesClassName != "" {
		current = *st.CurrentVolumeAttributesClassName
	}
	ce := expand.ClassifiedError{Class: expand.ClassFinal, Reason: ReasonClassDeleted, Message: fmt.Sprintf(
		"VolumeAttributesClass %s was deleted while a modification to it may still have been in effect; its outcome is unknown and it is given up: "+
			"set another class, or set %s back (a call with its parameters), or create %s again", target, current, target)}
	return FailedStatus(st, target, ce, now)
}

// SucceededStatus records the driver's success for target: the class is now current, the
// modification and its conditions are gone.
func SucceededStatus(st v1.PersistentVolumeClaimStatus, target string) v1.PersistentVolumeClaimStatus {
	st = *st.DeepCopy()
	st.CurrentVolumeAttributesClassName = &target
	st.ModifyVolumeStatus = nil
	return clearConditions(st)
}

// FailedStatus records a failed call for target (rule 16): Infeasible for an infeasible error,
// InProgress otherwise, and the error in ModifyVolumeError with the gRPC code as reason.
func FailedStatus(st v1.PersistentVolumeClaimStatus, target string, ce expand.ClassifiedError, now metav1.Time) v1.PersistentVolumeClaimStatus {
	state := v1.PersistentVolumeClaimModifyVolumeInProgress
	if ce.Class == expand.ClassInfeasible {
		state = v1.PersistentVolumeClaimModifyVolumeInfeasible
		st = withModifyStatus(st, state, target)
		st.Conditions = conditions.Set(st.Conditions, v1.PersistentVolumeClaimVolumeModifyingVolume, ReasonModifyInfeasible,
			fmt.Sprintf("the driver refused VolumeAttributesClass %s; set another class, or set the previous one back to roll back", target), now, false)
	} else {
		st = withModifyStatus(st, state, target)
	}
	st.Conditions = conditions.Set(st.Conditions, v1.PersistentVolumeClaimVolumeModifyVolumeError, ce.Reason, ce.Message, now, true)
	return st
}

// OtherDriverStatus records that target is another driver's class (rule 13): Infeasible, as a
// refusal of the driver would be, with why in ModifyVolumeError; no call was made.
func OtherDriverStatus(st v1.PersistentVolumeClaimStatus, target, why string, now metav1.Time) v1.PersistentVolumeClaimStatus {
	return FailedStatus(st, target, expand.ClassifiedError{Class: expand.ClassInfeasible, Reason: ReasonClassOfAnotherDriver, Message: why}, now)
}

// CancelledStatus ends a Pending or Infeasible modification the user rolled back (rule 17).
func CancelledStatus(st v1.PersistentVolumeClaimStatus) v1.PersistentVolumeClaimStatus {
	st = *st.DeepCopy()
	st.ModifyVolumeStatus = nil
	return clearConditions(st)
}

func withModifyStatus(st v1.PersistentVolumeClaimStatus, s v1.PersistentVolumeClaimModifyVolumeStatus, target string) v1.PersistentVolumeClaimStatus {
	st = *st.DeepCopy()
	st.ModifyVolumeStatus = &v1.ModifyVolumeStatus{Status: s, TargetVolumeAttributesClassName: target}
	return st
}

func clearConditions(st v1.PersistentVolumeClaimStatus) v1.PersistentVolumeClaimStatus {
	st.Conditions = conditions.Remove(st.Conditions, v1.PersistentVolumeClaimVolumeModifyingVolume)
	st.Conditions = conditions.Remove(st.Conditions, v1.PersistentVolumeClaimVolumeModifyVolumeError)
	return st
}

// RetryWait says how long a Modify plan must still wait after the failure the PVC records
// (rule 16), the same for whoever looks: an infeasible target is retried retryMax after the
// failure; any other error backs off from retryStart, doubling with the time the PVC has been
// failing (since ModifyingVolume turned True), at most retryMax. A plan for another class than
// the failed one goes at once: the user answered the failure.
func RetryWait(pvc *v1.PersistentVolumeClaim, o Observed, p Plan, r expand.Retry, now time.Time) time.Duration {
	if p.Action != Modify || o.LastError == expand.ClassNone || p.Target != o.Target {
		return 0
	}
	cond := conditions.Find(pvc.Status.Conditions, v1.PersistentVolumeClaimVolumeModifyVolumeError)
	if cond == nil {
		return 0
	}
	at := conditions.LastSeen(cond).Time
	interval := r.Max
	if o.Status != v1.PersistentVolumeClaimModifyVolumeInfeasible {
		since := cond.LastTransitionTime.Time
		if m := conditions.Find(pvc.Status.Conditions, v1.PersistentVolumeClaimVolumeModifyingVolume); m != nil && !m.LastTransitionTime.IsZero() && m.LastTransitionTime.Before(&cond.LastTransitionTime) {
			since = m.LastTransitionTime.Time
		}
		interval = min(r.Max, r.Start+at.Sub(since))
	}
	// Condition times are truncated to the second: count from the end of that second.
	return max(0, at.Add(time.Second+interval).Sub(now))
}
