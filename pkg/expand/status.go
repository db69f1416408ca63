package expand

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-resizer/csi-resizer/pkg/internal/conditions"
)

// Condition reasons written by the resizer besides the gRPC code names of errors.
const (
	ReasonExpansionInProgress = "ControllerExpansionInProgress"
	ReasonNodeExpansionNeeded = "NodeExpansionRequired"
)

// Observe reads the decision inputs from a PVC and its PV.
func Observe(pvc *v1.PersistentVolumeClaim, pv *v1.PersistentVolume, nodeOnly, legacy bool) Observed {
	o := Observed{
		Spec:     pvc.Spec.Resources.Requests[v1.ResourceStorage],
		PVCCap:   pvc.Status.Capacity[v1.ResourceStorage],
		NodeOnly: nodeOnly,
		Legacy:   legacy,
	}
	if pv != nil {
		o.PVCap = pv.Spec.Capacity[v1.ResourceStorage]
		o.Expanded = ReadControllerExpanded(pv)
	}
	if a, ok := pvc.Status.AllocatedResources[v1.ResourceStorage]; ok {
		o.Alloc = &a
	}
	o.State = pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage]
	if c := conditions.Find(pvc.Status.Conditions, v1.PersistentVolumeClaimControllerResizeError); c != nil {
		o.LastError = ClassFromReason(c.Reason)
	}
	if c := conditions.Find(pvc.Status.Conditions, v1.PersistentVolumeClaimFileSystemResizePending); c != nil {
		o.FileSystemResizePending = c.Status == v1.ConditionTrue
	}
	return o
}

// StartedStatus is the status to write before calling the driver (rule 3): the target recorded
// in allocatedResources, ControllerResizeInProgress, and the Resizing condition. A final error
// condition left from the previous attempt is removed, because a crash during this attempt must
// read back as "uncertain" and keep this target (Case 4). A transient one is kept: it already
// reads as uncertain, and not touching it saves a write per retry.
func StartedStatus(st v1.PersistentVolumeClaimStatus, p Plan, legacy bool, now metav1.Time) v1.PersistentVolumeClaimStatus {
	st = *st.DeepCopy()
	if !legacy {
		setAllocated(&st, p.Target, v1.PersistentVolumeClaimControllerResizeInProgress)
	}
	if c := conditions.Find(st.Conditions, v1.PersistentVolumeClaimControllerResizeError); c != nil && (legacy || ClassFromReason(c.Reason).IsFinal()) {
		st.Conditions = conditions.Remove(st.Conditions, v1.PersistentVolumeClaimControllerResizeError)
	}
	st.Conditions = conditions.Set(st.Conditions, v1.PersistentVolumeClaimResizing, ReasonExpansionInProgress,
		fmt.Sprintf("expanding the volume to %s", p.Target.String()), now, false)
	return st
}

// ExpandedStatus is the status after the control plane expansion succeeded (rule 5). With
// nodeExpansionRequired the node takes over (NodeResizePending + FileSystemResizePending);
// otherwise the resize is finished: capacity is the new size and the state is cleared.
func ExpandedStatus(st v1.PersistentVolumeClaimStatus, p Plan, newSize resource.Quantity, nodeExpansionRequired, legacy bool, now metav1.Time) v1.PersistentVolumeClaimStatus {
	st = *st.DeepCopy()
	st.Conditions = conditions.Remove(st.Conditions, v1.PersistentVolumeClaimResizing)
	st.Conditions = conditions.Remove(st.Conditions, v1.PersistentVolumeClaimControllerResizeError)
	// allocatedResources never below the size the volume now has (docs/design.md §2.3 rule 4):
	// quota counts max(request, allocated), and a driver that returns more than asked (a
	// recovery to 3Gi on a backend that already holds 10Gi) would otherwise leave it counting
	// 7Gi less than the volume holds.
	allocated := maxQ(p.Target, newSize)
	if nodeExpansionRequired {
		if !legacy {
			setAllocated(&st, allocated, v1.PersistentVolumeClaimNodeResizePending)
		}
		// A node error from an earlier attempt (Case 2) is history once the node gets a new
		// target.
		st.Conditions = conditions.Remove(st.Conditions, v1.PersistentVolumeClaimNodeResizeError)
		st.Conditions = conditions.Set(st.Conditions, v1.PersistentVolumeClaimFileSystemResizePending, ReasonNodeExpansionNeeded,
			fmt.Sprintf("waiting for the node to expand the file system to %s", newSize.String()), now, false)
		return st
	}
	st.Conditions = conditions.Remove(st.Conditions, v1.PersistentVolumeClaimFileSystemResizePending)
	if st.Capacity == nil {
		st.Capacity = v1.ResourceList{}
	}
	st.Capacity[v1.ResourceStorage] = newSize.DeepCopy()
	if !legacy {
		if st.AllocatedResources == nil {
			st.AllocatedResources = v1.ResourceList{}
		}
		st.AllocatedResources[v1.ResourceStorage] = allocated
		delete(st.AllocatedResourceStatuses, v1.ResourceStorage)
		if len(st.AllocatedResourceStatuses) == 0 {
			st.AllocatedResourceStatuses = nil
		}
	}
	return st
}

// FailedStatus records a failed ControllerExpandVolume (rule 6): infeasible errors move the
// state to ControllerResizeInfeasible, every other error leaves it as it is; the
// ControllerResizeError condition always describes the last error, with the gRPC code as
// reason and the driver's message. lastProbeTime is the time of this attempt, which is what the
// slow retry of an infeasible PVC counts from after a restart.
func FailedStatus(st v1.PersistentVolumeClaimStatus, ce ClassifiedError, legacy bool, now metav1.Time) v1.PersistentVolumeClaimStatus {
	st = *st.DeepCopy()
	if ce.Class == ClassInfeasible {
		if !legacy {
			if st.AllocatedResourceStatuses == nil {
				st.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{}
			}
			st.AllocatedResourceStatuses[v1.ResourceStorage] = v1.PersistentVolumeClaimControllerResizeInfeasible
		}
		// Nothing is in progress any more: the resize waits for the user or the slow retry.
		st.Conditions = conditions.Remove(st.Conditions, v1.PersistentVolumeClaimResizing)
	}
	st.Conditions = conditions.Set(st.Conditions, v1.PersistentVolumeClaimControllerResizeError, ce.Reason, ce.Message, now, true)
	return st
}

// RedrivenStatus puts a PVC whose node expansion failed back to NodeResizePending, the only way
// forward once the backend has grown the volume (KEP-1790 known failure modes).
func RedrivenStatus(st v1.PersistentVolumeClaimStatus, p Plan, now metav1.Time) v1.PersistentVolumeClaimStatus {
	st = *st.DeepCopy()
	setAllocated(&st, p.Target, v1.PersistentVolumeClaimNodeResizePending)
	st.Conditions = conditions.Remove(st.Conditions, v1.PersistentVolumeClaimNodeResizeError)
	st.Conditions = conditions.Set(st.Conditions, v1.PersistentVolumeClaimFileSystemResizePending, ReasonNodeExpansionNeeded,
		fmt.Sprintf("retrying the node expansion to %s after a node failure", p.Target.String()), now, false)
	return st
}

func setAllocated(st *v1.PersistentVolumeClaimStatus, size resource.Quantity, state v1.ClaimResourceStatus) {
	if st.AllocatedResources == nil {
		st.AllocatedResources = v1.ResourceList{}
	}
	st.AllocatedResources[v1.ResourceStorage] = size.DeepCopy()
	if st.AllocatedResourceStatuses == nil {
		st.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{}
	}
	st.AllocatedResourceStatuses[v1.ResourceStorage] = state
}

// LastAttempt is when the last failed ControllerExpandVolume happened, as recorded in the PVC,
// and false when the PVC records none.
func LastAttempt(pvc *v1.PersistentVolumeClaim) (metav1.Time, bool) {
	c := conditions.Find(pvc.Status.Conditions, v1.PersistentVolumeClaimControllerResizeError)
	if c == nil {
		return metav1.Time{}, false
	}
	return c.LastProbeTime, true
}
