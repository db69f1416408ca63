// Package modify decides what the resizer does about a PVC's VolumeAttributesClass (KEP-3751):
// whether to call ControllerModifyVolume, for which class, whether to wait, and what the PVC's
// status says before and after the call. Like pkg/expand it is a set of pure functions over the
// observed API objects: everything it needs to know about earlier attempts is read back from
// the PVC (status.modifyVolumeStatus and the ModifyVolumeError condition), so a restarted
// resizer decides what the one before it would have. The rules are docs/design.md §2.11.
package modify

import (
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/csi-resizer/csi-resizer/pkg/expand"
	"github.com/csi-resizer/csi-resizer/pkg/internal/conditions"
)

// Observed is what the decision reads of a PVC.
type Observed struct {
	// Spec is spec.volumeAttributesClassName, "" when unset.
	Spec string
	// Current is status.currentVolumeAttributesClassName: the class the driver confirmed
	// (or the PV was bound with), "" when none.
	Current string
	// Status and Target are status.modifyVolumeStatus; Status is "" when it is absent.
	Status v1.PersistentVolumeClaimModifyVolumeStatus
	Target string
	// LastError is the class of the last failed call, read from the ModifyVolumeError
	// condition's reason (ClassifyReason); ClassNone when there is no such condition.
	LastError expand.ErrorClass
}

// Observe reads a PVC.
func Observe(pvc *v1.PersistentVolumeClaim) Observed {
	var o Observed
	if n := pvc.Spec.VolumeAttributesClassName; n != nil {
		o.Spec = *n
	}
	if n := pvc.Status.CurrentVolumeAttributesClassName; n != nil {
		o.Current = *n
	}
	if s := pvc.Status.ModifyVolumeStatus; s != nil {
		o.Status, o.Target = s.Status, s.TargetVolumeAttributesClassName
	}
	if c := conditions.Find(pvc.Status.Conditions, v1.PersistentVolumeClaimVolumeModifyVolumeError); c != nil {
		o.LastError = ClassifyReason(c.Reason)
	}
	return o
}

// InFlight reports whether a call for the recorded target may still be in effect: the status
// says InProgress and no final answer to it is recorded (the resizer stopped during the call,
// or the driver's answer was not final). Such a target is not abandoned for another class
// (docs/design.md §2.11 rule 14).
func (o Observed) InFlight() bool {
	return o.Status == v1.PersistentVolumeClaimModifyVolumeInProgress && o.Target != "" && !o.LastError.IsFinal()
}

// Wants reports whether the PVC asks for work: a class other than the current one, or a
// modification that is not over.
func (o Observed) Wants() bool {
	return o.Status != "" || (o.Spec != "" && o.Spec != o.Current)
}

// Action is what the controller does.
type Action int

const (
	// Nothing: the PVC has the class it asks for, or must wait for something outside.
	Nothing Action = iota
	// MarkPending: the class asked for does not exist (yet); record Pending with the target
	// and tell the user, no call.
	MarkPending
	// Modify: record InProgress, call ControllerModifyVolume for Target, record the answer.
	Modify
	// Cancel: the user rolled back to the current class while the modification was Pending or
	// Infeasible; clear modifyVolumeStatus and the conditions, no call.
	Cancel
	// GiveUp: the class of a modification that may still be in effect was deleted; once no
	// call for it can still be running (ClassGoneWait), record that the modification ended
	// with an unknown outcome (ClassGoneStatus), a final answer, so that the spec is followed
	// again (docs/design.md §2.11 rule 20). No call: there are no parameters to call with.
	GiveUp
	// MarkInfeasible: the class asked for is another driver's (its driverName); record
	// Infeasible with the target and ModifyVolumeError, and tell the user, no call: its
	// parameters are not this driver's to interpret (docs/design.md §2.11 rule 13).
	MarkInfeasible
)

func (a Action) String() string {
	return [...]string{"Nothing", "MarkPending", "Modify", "Cancel", "GiveUp", "MarkInfeasible"}[a]
}

// Plan is the decision.
type Plan struct {
	Action Action
	// Target is the class to modify to (Modify), that is missing (MarkPending) or that is
	// another driver's (MarkInfeasible).
	Target string
	// Class is Target's VolumeAttributesClass (Modify only): its parameters are the call's.
	Class *storagev1.VolumeAttributesClass
	// Why says why, for logs and the Pending event.
	Why string
}

// ClassLookup returns a VolumeAttributesClass by name, nil when it does not exist (a lister).
type ClassLookup func(name string) *storagev1.VolumeAttributesClass

// Decide is the decision of docs/design.md §2.11 for the PVC of a volume of driver.
func Decide(o Observed, classes ClassLookup, driver string) Plan {
	if o.InFlight() {
		// Rule 14: keep working towards the recorded target whatever the spec says now.
		if c := classes(o.Target); c != nil {
			return Plan{Action: Modify, Target: o.Target, Class: c, Why: "the last call for this class has no final answer"}
		}
		return Plan{Action: GiveUp, Target: o.Target, Why: "VolumeAttributesClass " + o.Target + " was deleted while a modification to it may still have been in effect"}
	}
	rollback := o.Spec == "" || o.Spec == o.Current
	switch {
	case rollback && o.Status == v1.PersistentVolumeClaimModifyVolumePending && o.LastError == expand.ClassFinal && o.Current != "":
		// Rule 20: Pending after a call that ended with a final error (its class deleted
		// since): that call may have changed part of the volume, so going back is a call for
		// the current class, as after any final error (rule 15), not a cancel.
		return toClass(o.Current, classes, driver, "the spec was set back to the current class after a call with a final error")
	case rollback && (o.Status == v1.PersistentVolumeClaimModifyVolumePending || o.Status == v1.PersistentVolumeClaimModifyVolumeInfeasible):
		return Plan{Action: Cancel, Target: o.Current, Why: "the spec was set back to the current class"}
	case o.Spec == "" && o.Status == v1.PersistentVolumeClaimModifyVolumeInProgress && o.Target != "":
		// Rule 17: unsetting the class does not undo a modification that failed with a final
		// error: the volume may be partly modified, and without a class there are no
		// parameters to go back to. Keep going towards the target.
		return toClass(o.Target, classes, driver, "the class was unset while a modification is unfinished")
	case o.Spec == "" || (o.Spec == o.Current && o.Status == ""):
		return Plan{Action: Nothing, Why: "the PVC has the class it asks for"}
	}
	// Rule 15: a new class, a retry, or (spec == current after a final error) going back to
	// the current class with a call, since the failed one may have changed the volume.
	return toClass(o.Spec, classes, driver, "the spec asks for this class")
}

// toClass plans a modification to name, Pending when the class does not exist, Infeasible when
// it is another driver's (rule 13).
func toClass(name string, classes ClassLookup, driver, why string) Plan {
	c := classes(name)
	switch {
	case c == nil:
		return Plan{Action: MarkPending, Target: name, Why: "VolumeAttributesClass " + name + " does not exist"}
	case c.DriverName != driver:
		return Plan{Action: MarkInfeasible, Target: name, Why: "VolumeAttributesClass " + name + " is for driver " + c.DriverName + ", not " + driver}
	}
	return Plan{Action: Modify, Target: name, Class: c, Why: why}
}
