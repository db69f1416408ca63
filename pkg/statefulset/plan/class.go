package plan

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// PVC annotations of the VolumeAttributesClass reconciliation
// (docs/design.md §3.10 rule 13). Like the size annotations they are the
// controller's only memory about a PVC's class.
const (
	// AnnotationModifiedClass is the class this controller last wrote to the
	// PVC's spec.volumeAttributesClassName. A class that differs from it was
	// changed by someone else since, and is never set back over them.
	AnnotationModifiedClass = "csi-resizer.io/modified-volume-attributes-class"
	// AnnotationPreModifyClass is the PVC's class before this controller first
	// changed it in the current episode ("" for none); a cancelled desire
	// rolls the class back to it.
	AnnotationPreModifyClass = "csi-resizer.io/pre-modify-volume-attributes-class"
)

// Event reasons of the VolumeAttributesClass reconciliation, on the
// StatefulSet.
const (
	// EventVolumeModifyInfeasible: the resizer marked the modification to the
	// template's class Infeasible (the driver refused the class's parameters).
	EventVolumeModifyInfeasible = "VolumeModifyInfeasible"
	// EventVolumeModifyFailing: the last ControllerModifyVolume call for the
	// template's class failed with an error that is retried. Deduplicated by
	// Event.Key: once per PVC, class and error code.
	EventVolumeModifyFailing = "VolumeModifyFailing"
)

// Replica-level reasons of the class reconciliation.
const (
	// ReasonSettingClass: the PVC's class is being patched to the template's.
	ReasonSettingClass = "SettingVolumeAttributesClass"
	// ReasonRollingBackClass: the template no longer asks for a class, and
	// the class this controller set is being put back to what it was.
	ReasonRollingBackClass = "RollingBackVolumeAttributesClass"
	// ReasonClassSet: the volume has the template's class.
	ReasonClassSet = "VolumeAttributesClassSet"
	// ReasonModifying: the resizer has yet to finish the modification.
	ReasonModifying = "Modifying"
	// ReasonModifyPending: the resizer cannot start: the class does not exist
	// or is another driver's. Pending, since creating the class is enough.
	ReasonModifyPending = "ModifyPending"
	// ReasonModifyFailing: the last modification call failed and is retried.
	ReasonModifyFailing = "ModifyFailing"
	// ReasonModifyInfeasible: the driver cannot give the volume the class.
	ReasonModifyInfeasible = "ModifyInfeasible"
	// ReasonClassChangedByOthers: this controller set the template's class,
	// and someone changed the PVC's class since; it is not set back.
	ReasonClassChangedByOthers = "ClassChangedByOthers"
	// ReasonClassCannotBeUnset: a rollback to no class that the apiserver
	// would refuse (a class is current). Ready: the template asks for none.
	ReasonClassCannotBeUnset = "ClassCannotBeUnset"
)

// observedFailure are the reasons that report what the resizer found, not
// an action of ours: kept on a replica held back behind an unfinished one.
var observedFailure = map[string]bool{
	ReasonResizeInfeasible: true, ReasonResizeFailing: true, ReasonCannotLowerInfeasibleRequest: true,
	ReasonModifyInfeasible: true, ReasonModifyFailing: true,
}

// quoteClass renders a class name for a message; "" is "none".
func quoteClass(class string) string {
	if class == "" {
		return "none"
	}
	return fmt.Sprintf("%q", class)
}

// rollbackWanted reports whether the class on the PVC is the one this
// controller wrote, so that a template without a class rolls it back
// (docs/design.md §3.10 rule 13).
func rollbackWanted(pvc *corev1.PersistentVolumeClaim) bool {
	written, ours := pvc.Annotations[AnnotationModifiedClass]
	have := ptr.Deref(pvc.Spec.VolumeAttributesClassName, "")
	return ours && written == have && have != ""
}

// classWork reports whether the class of pvc is reconciled at all for a
// template asking for class want ("" for none).
func classWork(pvc *corev1.PersistentVolumeClaim, want string) bool {
	return want != "" || rollbackWanted(pvc)
}

// decideClass applies docs/design.md §3.10 rules 13 and 14 to the bound PVC
// of an eligible replica: the class patch to make, or where the class
// stands. It returns nil when the class is left alone.
func decideClass(rd ReplicaDecision, sts *appsv1.StatefulSet, pvc *corev1.PersistentVolumeClaim, want string) *ReplicaDecision {
	if !classWork(pvc, want) {
		return nil
	}
	have := ptr.Deref(pvc.Spec.VolumeAttributesClassName, "")
	var out ReplicaDecision
	switch written, ours := pvc.Annotations[AnnotationModifiedClass]; {
	case want == "":
		out = rollbackClass(rd, sts, pvc, have)
	case have == want:
		out = classProgress(rd, pvc, want)
	case ours && written == want:
		// We set it, someone changed it since: theirs now.
		out = rd.failed(EventFailedToPatchPVC, ReasonClassChangedByOthers,
			"not setting the VolumeAttributesClass back to %q: statefulset-resizer set it and it was changed to %s since; set it to %q yourself, or change the template's class",
			want, quoteClass(have), want)
	default:
		rd.Patch = classPatch(sts, pvc, have, want)
		out = rd.pending(ReasonSettingClass, "setting the VolumeAttributesClass from %s to %q", quoteClass(have), want)
	}
	return &out
}

// rollbackClass puts back the class a PVC had before this controller set
// the one it has, now that the template asks for none (the desire was
// cancelled), and ends the episode: the patch removes both annotations, so
// a class set later by a person is never taken for ours. Unsetting a class is
// refused by the apiserver once the volume has a current class; that case is
// reported, not attempted.
func rollbackClass(rd ReplicaDecision, sts *appsv1.StatefulSet, pvc *corev1.PersistentVolumeClaim, have string) ReplicaDecision {
	pre := pvc.Annotations[AnnotationPreModifyClass]
	if current := pvc.Status.CurrentVolumeAttributesClassName; pre == "" && current != nil {
		rd.State, rd.Reason = Ready, ReasonClassCannotBeUnset
		rd.Message = fmt.Sprintf("not unsetting the VolumeAttributesClass %q that statefulset-resizer set: the volume's class is %s and the apiserver refuses to unset a PVC's class once one is current; the template asks for no class, so the volume keeps it (remove the PVC annotation %s to stop this note)",
			have, quoteClass(*current), AnnotationModifiedClass)
		rd.tell(EventFailedToPatchPVC, "")
		return rd
	}
	rd.Patch = &PVCPatch{
		Namespace: pvc.Namespace, Name: pvc.Name, ResourceVersion: pvc.ResourceVersion,
		Class:             &ClassChange{From: have, To: pre},
		Annotations:       map[string]string{AnnotationStatefulSet: sts.Name},
		RemoveAnnotations: []string{AnnotationModifiedClass, AnnotationPreModifyClass},
	}
	return rd.pending(ReasonRollingBackClass, "setting the VolumeAttributesClass back from %q to %s: the template no longer asks for a class", have, quoteClass(pre))
}

// classPatch sets the PVC's class to want, keeping the class from before the
// first change of the episode (which lasts while the PVC has the class we
// last wrote).
func classPatch(sts *appsv1.StatefulSet, pvc *corev1.PersistentVolumeClaim, have, want string) *PVCPatch {
	pre := have
	if written, ours := pvc.Annotations[AnnotationModifiedClass]; ours && written == have {
		pre = pvc.Annotations[AnnotationPreModifyClass]
	}
	return &PVCPatch{
		Namespace: pvc.Namespace, Name: pvc.Name, ResourceVersion: pvc.ResourceVersion,
		Class: &ClassChange{From: have, To: want},
		Annotations: map[string]string{
			AnnotationStatefulSet:    sts.Name,
			AnnotationModifiedClass:  want,
			AnnotationPreModifyClass: pre,
		},
	}
}

// classProgress applies docs/design.md §3.10 rule 14 to a PVC whose spec
// already names the template's class: read what the resizer reported.
func classProgress(rd ReplicaDecision, pvc *corev1.PersistentVolumeClaim, want string) ReplicaDecision {
	current := ptr.Deref(pvc.Status.CurrentVolumeAttributesClassName, "")
	ms := pvc.Status.ModifyVolumeStatus
	switch {
	case ms == nil && current == want:
		rd.State, rd.Reason, rd.Message = Ready, ReasonClassSet, fmt.Sprintf("VolumeAttributesClass %q", want)
		return rd
	case ms == nil:
		return rd.pending(ReasonModifying, "waiting for the resizer to modify the volume from class %s to %q", quoteClass(current), want)
	case ms.TargetVolumeAttributesClassName != want:
		// The resizer finishes a call that may still be in effect before it
		// follows the spec (docs/design.md §2.11 rule 14).
		return rd.pending(ReasonModifying, "modifying the volume to class %q; the resizer is still on its modification to %q (%s)",
			want, ms.TargetVolumeAttributesClassName, ms.Status)
	}
	cond := condition(pvc, corev1.PersistentVolumeClaimVolumeModifyVolumeError)
	switch {
	case ms.Status == corev1.PersistentVolumeClaimModifyVolumeInfeasible:
		return rd.failed(EventVolumeModifyInfeasible, ReasonModifyInfeasible, "cannot modify the volume to VolumeAttributesClass %q: %s",
			want, describe(corev1.ClaimResourceStatus(ms.Status), cond))
	case ms.Status == corev1.PersistentVolumeClaimModifyVolumePending:
		return rd.pending(ReasonModifyPending, "VolumeAttributesClass %q does not exist or is not for this volume's CSI driver; create it for the driver and the resizer modifies the volume", want)
	case cond != nil:
		// Retried by the resizer: Pending, told once per class and code.
		rd = rd.pending(ReasonModifyFailing, "modification to VolumeAttributesClass %q failing, retried by the resizer: %s", want, describe("", cond))
		rd.tell(EventVolumeModifyFailing, want+" "+cond.Reason)
		return rd
	}
	return rd.pending(ReasonModifying, "modifying the volume to VolumeAttributesClass %q", want)
}

// severity orders states for combining: the worse state wins.
func severity(s State) int {
	switch s {
	case Failed:
		return 2
	case Pending:
		return 1
	}
	return 0
}

// combine makes the one decision of a replica from its size decision and
// its class decision (nil when the class is left alone): Ready only when
// both are, Failed when either is. The worse one (of equal states, the one
// with an event, else the size) gives the reason and leads the message,
// the other's message follows when it says something
// (not Ready, or a note with an event); its event is the worse one's, or
// else the other's (one event per replica). Both patches go in one.
func combine(size ReplicaDecision, class *ReplicaDecision) ReplicaDecision {
	if class == nil {
		return size
	}
	primary, other := size, *class
	if sc, cc := severity(size.State), severity(class.State); cc > sc || (cc == sc && size.Event == nil && class.Event != nil) {
		primary, other = *class, size
	}
	out := primary
	if (other.State != Ready || other.Event != nil) && other.Reason != primary.Reason {
		out.Message += "; " + other.Message
	}
	if out.Event == nil {
		out.Event = other.Event
	}
	out.Patch = mergePatches(size.Patch, class.Patch)
	return out
}

// mergePatches joins two patches of the same PVC (either may be nil), a
// size, a class or a metadata patch, into one merge patch: one
// resourceVersion precondition for all of it, so that nothing is written
// from a PVC that changed meanwhile. Their keys do not overlap.
func mergePatches(a, b *PVCPatch) *PVCPatch {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	out := *a
	if !a.Resizes() {
		out.From, out.To = b.From, b.To
	}
	if out.Class == nil {
		out.Class = b.Class
	}
	out.Annotations = union(a.Annotations, b.Annotations)
	out.Labels = union(a.Labels, b.Labels)
	out.RemoveAnnotations = append(append([]string(nil), a.RemoveAnnotations...), b.RemoveAnnotations...)
	out.RemoveLabels = append(append([]string(nil), a.RemoveLabels...), b.RemoveLabels...)
	return &out
}

// union returns a new map with the entries of a and b; nil when both are
// empty.
func union(a, b map[string]string) map[string]string {
	if len(a)+len(b) == 0 {
		return nil
	}
	out := make(map[string]string, len(a)+len(b))
	for _, m := range []map[string]string{a, b} {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}
