// Package plan is the deciding half of statefulset-resizer: a pure function
// from the observed StatefulSet, Pods, PVCs and StorageClasses to what should
// happen (which PVC requests and VolumeAttributesClasses to patch, up or
// down, where an OrderedReady StatefulSet stops, what to report) and to the
// feedback status.
//
// Nothing here talks to the API or keeps memory between calls, so a restarted
// controller decides exactly as the one before it, and every rule can be
// table-tested and fuzzed without a cluster. The controller package gathers
// the inputs from informer caches and carries the decision out.
package plan

import (
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/status"
)

// PVC annotations written by statefulset-resizer. They are the controller's
// only memory about a PVC, kept in the API so that a restart loses nothing.
const (
	// AnnotationStatefulSet names the StatefulSet (same namespace) whose
	// template the PVC follows. It maps PVC updates back to the StatefulSet
	// without relying on the name pattern; it is added on the first patch.
	AnnotationStatefulSet = "csi-resizer.io/statefulset"
	// AnnotationPreResizeStorage is the PVC request before this controller
	// first changed it. Its presence means "raised by statefulset-resizer".
	AnnotationPreResizeStorage = "csi-resizer.io/pre-resize-storage"
	// AnnotationResizedStorage is the request this controller last wrote. A
	// request that differs from it was changed by someone else since, and such
	// a PVC is never lowered.
	AnnotationResizedStorage = "csi-resizer.io/resized-storage"
)

// Event reasons on the StatefulSet.
const (
	// EventFailedToPatchPVC: a PVC cannot be patched to the template size,
	// either because the API rejected the patch or because the plan knows it
	// would be rejected or must not be made (KEP-661 "Errors When Patching").
	EventFailedToPatchPVC = "FailedToPatchPVC"
	// EventVolumeResizeInfeasible: the resizer (CSI driver or kubelet) marked
	// the expansion infeasible (KEP-1790 state or error condition).
	EventVolumeResizeInfeasible = "VolumeResizeInfeasible"
	// EventVolumeResizeFailing: the last attempt of the expansion failed
	// with an error that is not infeasible (a ControllerResizeError or
	// NodeResizeError condition, e.g. Internal), and csi-resizer or the
	// kubelet retries it. Told on the StatefulSet because that is where the
	// user of a StatefulSet looks; deduplicated by Event.Key, so it comes
	// once per PVC, size and error code rather than once per retry.
	EventVolumeResizeFailing = "VolumeResizeFailing"
)

// State is where one replica's PVC of one template stands.
type State string

const (
	// Ready: the PVC's capacity reached the template size, and its volume
	// has the template's VolumeAttributesClass (when it names one).
	Ready State = "Ready"
	// Pending: progressing, or waiting for something that resolves without
	// a user (pod start, rollout, the resizer, the previous replica).
	Pending State = "Pending"
	// Failed: cannot reach the template size or class without a user action.
	Failed State = "Failed"
)

// Replica-level reasons, machine readable (CamelCase like API reasons).
const (
	ReasonResized                   = "Resized"
	ReasonNoSizeInTemplate          = "NoSizeInTemplate"
	ReasonPodMissing                = "PodMissing"
	ReasonPodNotOwned               = "PodNotOwned"
	ReasonPodTerminating            = "PodTerminating"
	ReasonPodNotRunning             = "PodNotRunning"
	ReasonPodNotUpdated             = "PodNotAtUpdateRevision"
	ReasonPVCMissing                = "PVCMissing"
	ReasonPVCTerminating            = "PVCTerminating"
	ReasonPVCNotBound               = "PVCNotBound"
	ReasonExpanding                 = "Expanding"
	ReasonRecovering                = "Recovering"
	ReasonResizing                  = "Resizing"
	ReasonWaitingForPreviousReplica = "WaitingForPreviousReplica"
	ReasonExpansionNotAllowed       = "ExpansionNotAllowed"
	// ReasonShrinkBelowCapacity: the request is above the template and
	// cannot be lowered to it, because the template is not above the
	// volume's capacity (the apiserver refuses such a request, KEP-1790).
	// Ready once the volume has the request; Pending while a request
	// statefulset-resizer raised is still being expanded (docs/design.md
	// §3.2 rule 2).
	ReasonShrinkBelowCapacity = "ShrinkBelowCapacity"
	// ReasonCannotLowerInfeasibleRequest: a request statefulset-resizer
	// raised is infeasible, and the template was lowered to or below the
	// volume's capacity (a revert in Git), so the request cannot be lowered
	// and stays infeasible, retried and counted by quota, until the template
	// is set above the capacity (docs/design.md §3.2 rule 2). Failed.
	ReasonCannotLowerInfeasibleRequest = "CannotLowerInfeasibleRequest"
	ReasonNotRaisedByController        = "NotRaisedByController"
	ReasonPatchRejected                = "PatchRejected"
	ReasonResizeInfeasible             = "ResizeInfeasible"
	// ReasonResizeFailing: the resizer's last attempt at the template size
	// failed and is being retried. Pending, not Failed: no user action is
	// needed for the retry, so it is neither infeasible nor a reason for
	// `wait` to give up.
	ReasonResizeFailing = "ResizeFailing"
)

// Why the whole StatefulSet was left alone this time.
const (
	DeferredNotObserved     = "StatefulSetControllerHasNotObservedGeneration"
	DeferredInvalidSelector = "InvalidSelector"
)

// maxMessageEntries bounds the status message so that a large StatefulSet
// with many failing replicas does not grow the annotation without limit.
const maxMessageEntries = 3

// Input is the observed state the decision is made from. Maps are keyed by
// object name and hold objects of the StatefulSet's namespace; an object that
// is absent from a map is treated as not existing (PVC, Pod) or unknown
// (StorageClass: the apiserver decides).
type Input struct {
	StatefulSet *appsv1.StatefulSet
	// Templates are the volume claim templates to reconcile the PVCs with:
	// the StatefulSet's own, with the sizes and classes of its
	// desired-templates annotation when that is valid (package desired). Nil
	// means the StatefulSet's own templates.
	Templates []corev1.PersistentVolumeClaim
	// Desired is the value of the desired-templates annotation as seen
	// ("" when there is none; recorded even when it is invalid and the
	// live templates are used).
	// The status records it, so that `wait` can tell a document written for
	// other desired sizes at the same generation (the webhook changes only
	// an annotation, which does not bump the generation).
	Desired string
	// OptedIn is true when the StatefulSet is opted in to template changes:
	// the label csi-resizer.io/volume-claim-template-updates=enabled on it,
	// or on its namespace without another value on the StatefulSet (the
	// webhook's opt-in, docs/design.md §3.9). Only then are the templates'
	// labels and annotations set on the PVCs (§3.11 rule 15): a StatefulSet
	// that did not ask for template changes keeps today's PVCs as they are.
	OptedIn        bool
	Pods           map[string]*corev1.Pod
	PVCs           map[string]*corev1.PersistentVolumeClaim
	StorageClasses map[string]*storagev1.StorageClass
}

// Decision is what statefulset-resizer should do for one StatefulSet.
type Decision struct {
	// Deferred, when not empty, says why nothing was decided this time; the
	// caller neither patches nor writes status.
	Deferred string
	// Generation is the StatefulSet generation the decision was made for.
	Generation int64
	// UID is the metadata.uid of that StatefulSet, recorded in the status so
	// that the document is never taken for another object's.
	UID types.UID
	// DesiredReplicas is spec.replicas (default 1).
	DesiredReplicas int32
	// Ordered is true for podManagementPolicy OrderedReady.
	Ordered bool
	// Templates has one entry per volume claim template, in spec order.
	Templates []TemplateDecision
	// Desired is Input.Desired, recorded in the status.
	Desired string

	previous *status.VolumeClaimTemplates
}

// TemplateDecision is the decision for one volume claim template.
type TemplateDecision struct {
	Name string
	// Size is the template's storage request; zero when it has none.
	Size resource.Quantity
	// Class is the template's VolumeAttributesClass; "" when it has none.
	Class string
	// Replicas has one entry per ordinal, in ordinal order.
	Replicas []ReplicaDecision
}

// ReplicaDecision is the decision for the PVC of one replica and template.
type ReplicaDecision struct {
	Ordinal int32
	PodName string
	PVCName string
	State   State
	// Reason is one of the Reason* constants.
	Reason string
	// Message explains Reason to a person.
	Message string
	// Patch is the one PVC patch to make, or nil.
	Patch *PVCPatch
	// Event is what to tell on the StatefulSet, or nil.
	Event *Event
}

// Event is a Warning event to record on the StatefulSet.
type Event struct {
	Reason  string
	Message string
	// Key names the problem the event reports, for deduplication: an event
	// is recorded again for a PVC only when its Reason or Key changes. Empty
	// means the Message is the key. It is set where the message carries
	// details that change without the problem changing (a driver's message
	// may hold a request id), which would otherwise give an event per retry.
	Key string
}

// PVCPatch is a change of a PVC's storage request, of its
// VolumeAttributesClass, or of both, plus the bookkeeping annotations, made
// in one merge patch.
type PVCPatch struct {
	Namespace string
	Name      string
	// ResourceVersion is the version the decision saw; the patch carries it
	// as a precondition so that a PVC changed in the meantime (for example by
	// a person) is re-evaluated instead of overwritten.
	ResourceVersion string
	// From and To are the storage request before and after; To is zero when
	// the patch does not change the request (Resizes).
	From resource.Quantity
	To   resource.Quantity
	// Class, when not nil, changes spec.volumeAttributesClassName.
	Class *ClassChange
	// Annotations are set; RemoveAnnotations are removed (a class rollback
	// ends the episode its annotations recorded). They hold the controller's
	// bookkeeping (keys under csi-resizer.io/) and the template's annotations
	// (every other key, docs/design.md §3.11 rule 15).
	Annotations       map[string]string
	RemoveAnnotations []string
	// Labels are set and RemoveLabels removed: the template's labels
	// (docs/design.md §3.11 rule 15).
	Labels       map[string]string
	RemoveLabels []string
}

// ClassChange is a change of a PVC's spec.volumeAttributesClassName; ""
// stands for unset.
type ClassChange struct {
	From, To string
}

// Resizes reports whether the patch changes the storage request.
func (p *PVCPatch) Resizes() bool { return !p.To.IsZero() }

// Decrease reports whether the patch lowers the request (KEP-1790 recovery).
func (p *PVCPatch) Decrease() bool { return p.Resizes() && p.To.Cmp(p.From) < 0 }

// Describe says what the patch changes, for logs and messages: "the request
// to 2Gi", "the VolumeAttributesClass to \"gold\"", "the template's labels
// and annotations (set label app)", or several of them.
func (p *PVCPatch) Describe() string {
	var parts []string
	if p.Resizes() {
		parts = append(parts, "the request to "+p.To.String())
	}
	if p.Class != nil {
		if p.Class.To == "" {
			parts = append(parts, fmt.Sprintf("the VolumeAttributesClass from %q back to unset", p.Class.From))
		} else {
			parts = append(parts, fmt.Sprintf("the VolumeAttributesClass to %q", p.Class.To))
		}
	}
	if m := p.describeMetadata(); m != "" {
		parts = append(parts, m)
	}
	return strings.Join(parts, " and ")
}

// Decide evaluates every replica of every volume claim template of
// in.StatefulSet. It never mutates its input.
func Decide(in Input) *Decision {
	sts := in.StatefulSet
	d := &Decision{
		Generation:      sts.Generation,
		UID:             sts.UID,
		DesiredReplicas: desiredReplicas(sts),
		Ordered:         sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement,
		Desired:         in.Desired,
	}
	// A status that cannot be parsed, or that was written for another
	// object, is treated as absent: it is ours to rewrite, and failing here
	// would leave the StatefulSet unreconciled. "Another object" is decided
	// by uid, not generation: a StatefulSet re-created from an exported
	// manifest is at generation 1 like the one it replaces and carries its
	// annotation, whose "finished at generation 1" would otherwise be kept
	// (Status) before any PVC of the new template was resized.
	d.previous, _ = status.FromStatefulSet(sts)
	if d.previous != nil && d.previous.ObservedGeneration > sts.Generation {
		// Same uid yet a later generation: cannot come from the apiserver;
		// keep not trusting it.
		d.previous = nil
	}

	// Until the StatefulSet controller has seen the current generation, the
	// update revision may be stale: pods "at the update revision" could be
	// about to be replaced. Wait for its status update (which triggers us).
	if sts.Status.ObservedGeneration < sts.Generation {
		d.Deferred = DeferredNotObserved
		return d
	}
	selector, err := metav1.LabelSelectorAsSelector(sts.Spec.Selector)
	if err != nil {
		d.Deferred = DeferredInvalidSelector
		return d
	}

	start := int32(0)
	if sts.Spec.Ordinals != nil {
		start = sts.Spec.Ordinals.Start
	}
	templates := in.Templates
	if templates == nil {
		templates = sts.Spec.VolumeClaimTemplates
	}
	for i := range templates {
		d.Templates = append(d.Templates, d.decideTemplate(in, selector, &templates[i], start))
	}
	return d
}

// decideTemplate evaluates the replicas of one volume claim template, in
// ordinal order from start.
func (d *Decision) decideTemplate(in Input, selector labels.Selector, tmpl *corev1.PersistentVolumeClaim, start int32) TemplateDecision {
	td := TemplateDecision{Name: tmpl.Name, Class: ptr.Deref(tmpl.Spec.VolumeAttributesClassName, "")}
	if q, ok := tmpl.Spec.Resources.Requests[corev1.ResourceStorage]; ok {
		td.Size = q.DeepCopy()
	}
	// blocked turns true at the first replica of an OrderedReady
	// StatefulSet that is not Ready; later replicas are not touched.
	blocked := false
	for ordinal := start; ordinal < start+d.DesiredReplicas; ordinal++ {
		rd, class := decideReplica(in, selector, tmpl, &td.Size, ordinal)
		if blocked {
			rd = holdBack(rd)
			if class != nil {
				held := holdBack(*class)
				class = &held
			}
		}
		rd = combine(rd, class)
		if d.Ordered && rd.State != Ready {
			blocked = true
		}
		if in.OptedIn {
			// After the walk's bookkeeping: metadata is not a volume
			// change, it goes to every replica at once and holds none back
			// (docs/design.md §3.11 rule 15).
			rd = withMetadata(rd, in.StatefulSet.Name, in.PVCs[rd.PVCName], tmpl)
		}
		td.Replicas = append(td.Replicas, rd)
	}
	return td
}

// holdBack turns a decision for a replica behind an unfinished one (in an
// OrderedReady StatefulSet) into "wait": no patch, and no predicted patch
// failure either, since no patch is being attempted. Observed facts (Ready,
// or infeasible or failing as reported by the resizer) are kept: they are
// true whether or not we act.
func holdBack(rd ReplicaDecision) ReplicaDecision {
	if rd.Patch == nil && rd.State == Ready {
		// A Ready replica left above the template is told about (event)
		// when the ordered walk reaches it, like any other decision not to
		// patch; its status message note stays, it describes the PVC.
		if rd.Event != nil && rd.Event.Reason == EventFailedToPatchPVC {
			rd.Event = nil
		}
		return rd
	}
	if rd.Patch == nil && observedFailure[rd.Reason] {
		return rd
	}
	return ReplicaDecision{
		Ordinal: rd.Ordinal, PodName: rd.PodName, PVCName: rd.PVCName,
		State:   Pending,
		Reason:  ReasonWaitingForPreviousReplica,
		Message: "OrderedReady: waiting for the previous replica's volume to finish resizing or modifying",
	}
}

func desiredReplicas(sts *appsv1.StatefulSet) int32 {
	if sts.Spec.Replicas == nil {
		return 1
	}
	if *sts.Spec.Replicas < 0 {
		return 0
	}
	return *sts.Spec.Replicas
}

// PodName returns the name of the StatefulSet's pod with the given ordinal.
func PodName(stsName string, ordinal int32) string {
	return fmt.Sprintf("%s-%d", stsName, ordinal)
}

// PVCName returns the name the StatefulSet controller gives the PVC of a
// template for a replica: <template>-<statefulset>-<ordinal>.
func PVCName(templateName, stsName string, ordinal int32) string {
	return templateName + "-" + PodName(stsName, ordinal)
}

// pending returns rd as Pending for reason.
func (rd ReplicaDecision) pending(reason, format string, args ...any) ReplicaDecision {
	rd.State, rd.Reason, rd.Message = Pending, reason, fmt.Sprintf(format, args...)
	return rd
}

// failed returns rd as Failed for reason, told on the StatefulSet with event.
func (rd ReplicaDecision) failed(event, reason, format string, args ...any) ReplicaDecision {
	rd.State, rd.Reason, rd.Message = Failed, reason, fmt.Sprintf(format, args...)
	rd.tell(event, "")
	return rd
}

// tell sets the event that reports rd.Message on the StatefulSet; key as in
// Event.Key.
func (rd *ReplicaDecision) tell(reason, key string) {
	rd.Event = &Event{Reason: reason, Message: fmt.Sprintf("PVC %s of pod %s: %s", rd.PVCName, rd.PodName, rd.Message), Key: key}
}

// decideReplica decides for the PVC of one replica: its size and, when the
// template asks for a class or a class of ours is to be rolled back, its
// VolumeAttributesClass (nil otherwise). decideTemplate combines the two.
func decideReplica(in Input, selector labels.Selector, tmpl *corev1.PersistentVolumeClaim, size *resource.Quantity, ordinal int32) (ReplicaDecision, *ReplicaDecision) {
	sts := in.StatefulSet
	rd := ReplicaDecision{
		Ordinal: ordinal,
		PodName: PodName(sts.Name, ordinal),
		PVCName: PVCName(tmpl.Name, sts.Name, ordinal),
	}
	if waiting, ok := podNotEligible(rd, in.Pods[rd.PodName], sts, selector); ok {
		return waiting, nil
	}
	pvc := in.PVCs[rd.PVCName]
	switch {
	case pvc == nil:
		return rd.pending(ReasonPVCMissing, "PVC %s does not exist", rd.PVCName), nil
	case pvc.DeletionTimestamp != nil:
		return rd.pending(ReasonPVCTerminating, "PVC %s is being deleted", rd.PVCName), nil
	}
	class := ptr.Deref(tmpl.Spec.VolumeAttributesClassName, "")
	if size.IsZero() && !classWork(pvc, class) {
		// Nothing to reconcile: the template does not ask for a size.
		rd.State, rd.Reason, rd.Message = Ready, ReasonNoSizeInTemplate, "the template has no storage request"
		return rd, nil
	}
	if pvc.Status.Phase != corev1.ClaimBound {
		return rd.pending(ReasonPVCNotBound, "PVC %s is %s, not Bound", rd.PVCName, pvc.Status.Phase), nil
	}
	sized := rd
	if size.IsZero() {
		sized.State, sized.Reason, sized.Message = Ready, ReasonNoSizeInTemplate, "the template has no storage request"
	} else {
		sized = decideSize(rd, sts, pvc, storageClassOf(in, pvc), size)
	}
	return sized, decideClass(rd, sts, pvc, class)
}

// podNotEligible applies docs/design.md §3 rule 1: only replicas whose pod
// runs at the update revision. Not Ready: a readiness check may itself wait
// for the bigger volume. It returns the Pending decision and true for a
// replica whose pod is not eligible.
func podNotEligible(rd ReplicaDecision, pod *corev1.Pod, sts *appsv1.StatefulSet, selector labels.Selector) (ReplicaDecision, bool) {
	switch {
	case pod == nil:
		return rd.pending(ReasonPodMissing, "pod %s does not exist", rd.PodName), true
	case !podBelongsTo(pod, sts, selector):
		return rd.pending(ReasonPodNotOwned, "pod %s does not belong to StatefulSet %s", rd.PodName, sts.Name), true
	case pod.DeletionTimestamp != nil:
		return rd.pending(ReasonPodTerminating, "pod %s is terminating", rd.PodName), true
	case pod.Status.Phase != corev1.PodRunning:
		return rd.pending(ReasonPodNotRunning, "pod %s is %s, not Running", rd.PodName, phaseOrUnknown(pod.Status.Phase)), true
	case sts.Status.UpdateRevision == "" || pod.Labels[appsv1.StatefulSetRevisionLabel] != sts.Status.UpdateRevision:
		return rd.pending(ReasonPodNotUpdated, "pod %s is at revision %q, not at the update revision %q",
			rd.PodName, pod.Labels[appsv1.StatefulSetRevisionLabel], sts.Status.UpdateRevision), true
	}
	return rd, false
}

// decideSize compares the bound PVC of an eligible replica with the template
// size: the patch to make (docs/design.md §3 rule 2), or where the resize
// stands.
func decideSize(rd ReplicaDecision, sts *appsv1.StatefulSet, pvc *corev1.PersistentVolumeClaim, sc *storagev1.StorageClass, size *resource.Quantity) ReplicaDecision {
	request := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	capacity := pvc.Status.Capacity[corev1.ResourceStorage]
	switch cmp := request.Cmp(*size); {
	case cmp < 0:
		// Rule 2: increases always, unless the apiserver would refuse.
		if sc != nil && !allowsExpansion(sc) {
			return expansionNotAllowed(rd, sc, size)
		}
		rd.Patch = newPatch(sts, pvc, &request, size)
		return rd.pending(ReasonExpanding, "patching the request from %s to %s", &request, size)
	case cmp > 0:
		// Rule 2: decreases only of a request this controller raised, and
		// only to a size above the capacity (KEP-1790 recovery from a failed
		// expansion). Everything else is reported, never fought over.
		raised := raisedByController(pvc, &request)
		if raised && size.Cmp(capacity) > 0 {
			if sc != nil && !allowsExpansion(sc) {
				return expansionNotAllowed(rd, sc, size)
			}
			rd.Patch = newPatch(sts, pvc, &request, size)
			return rd.pending(ReasonRecovering, "lowering the request from %s to %s to recover from a failed expansion (capacity %s)", &request, size, &capacity)
		}
		return aboveTemplate(rd, pvc, raised, &request, &capacity, size)
	}
	if capacity.Cmp(*size) >= 0 {
		rd.State, rd.Reason, rd.Message = Ready, ReasonResized, fmt.Sprintf("capacity %s", &capacity)
		return rd
	}
	return resizeProgress(rd, pvc, &request, &capacity, size)
}

// expansionNotAllowed fails a replica whose patch the apiserver would refuse
// (KEP-661 "Errors When Patching"): its StorageClass does not allow volume
// expansion.
func expansionNotAllowed(rd ReplicaDecision, sc *storagev1.StorageClass, size *resource.Quantity) ReplicaDecision {
	return rd.failed(EventFailedToPatchPVC, ReasonExpansionNotAllowed,
		"cannot resize to %s: StorageClass %s does not allow volume expansion", size, sc.Name)
}

// resizeProgress applies docs/design.md §3 rule 4 to a PVC whose request is
// the template size and whose capacity is below it: surface what the resizer
// (or kubelet) reported on the PVC.
func resizeProgress(rd ReplicaDecision, pvc *corev1.PersistentVolumeClaim, request, capacity, size *resource.Quantity) ReplicaDecision {
	if infeasible, detail := infeasibility(pvc); infeasible {
		if tried, stale := staleAttempt(pvc, request); stale {
			return rd.pending(ReasonResizing, "resizing from %s to %s; the last attempt, for %s, was infeasible: %s", capacity, size, &tried, detail)
		}
		return rd.failed(EventVolumeResizeInfeasible, ReasonResizeInfeasible, "cannot resize to %s: %s", size, detail)
	}
	if e := lastResizeError(pvc); e != nil {
		if tried, stale := staleAttempt(pvc, request); stale {
			// The error is about another size; the resizer has yet to try
			// this one (as for a stale infeasible verdict above).
			return rd.pending(ReasonResizing, "resizing from %s to %s; the last attempt, for %s, failed: %s", capacity, size, &tried, e.detail)
		}
		// Not infeasible: the resizer retries on its own, so the replica
		// stays Pending (nothing for `wait` to fail on), but the user of the
		// StatefulSet is told, in the status message and with an event.
		rd = rd.pending(ReasonResizeFailing, "resize to %s failing, retried by %s: %s", size, e.retriedBy, e.detail)
		rd.tell(EventVolumeResizeFailing, fmt.Sprintf("%s %s %s", size, e.condition, e.code))
		return rd
	}
	return rd.pending(ReasonResizing, "resizing from %s to %s", capacity, size)
}

// aboveTemplate decides for a PVC whose request is above the template and
// that is not lowered: a person raised it, or the template is at or below the
// volume's capacity (volumes cannot shrink). docs/design.md §3.5 counts a replica as
// ready by its capacity, so such a replica is Ready once its capacity reaches
// the template: the request left above the template is not a failure of the
// resize (wait must pass), only something to tell the user, in the status
// message and with a FailedToPatchPVC event. Below the template it is still
// resizing (towards the higher request) or, if the resizer says so,
// infeasible. A request this controller raised and the volume has not
// reached is the exception (ourRequestLeft).
func aboveTemplate(rd ReplicaDecision, pvc *corev1.PersistentVolumeClaim, raised bool, request, capacity, size *resource.Quantity) ReplicaDecision {
	if raised && capacity.Cmp(*request) < 0 {
		return ourRequestLeft(rd, pvc, request, capacity, size)
	}
	rd.Reason = ReasonNotRaisedByController
	rd.Message = fmt.Sprintf("not lowering the request from %s to the template's %s: it was not raised by statefulset-resizer", request, size)
	if raised {
		rd.Reason = ReasonShrinkBelowCapacity
		rd.Message = fmt.Sprintf("cannot lower the request from %s to %s: not above the volume's capacity %s (volumes cannot shrink)", request, size, capacity)
	}
	rd.tell(EventFailedToPatchPVC, "")
	if capacity.Cmp(*size) >= 0 {
		rd.State = Ready
		return rd
	}
	// Only a request a person raised gets here (ours is lowered above).
	if infeasible, detail := infeasibility(pvc); infeasible {
		if _, stale := staleAttempt(pvc, request); stale {
			rd.State = Pending
			rd.Message += fmt.Sprintf("; the resizer's last attempt failed (%s), it has not tried %s yet", detail, request)
			return rd
		}
		rd.State, rd.Reason = Failed, ReasonResizeInfeasible
		rd.Message = fmt.Sprintf("cannot resize to %s (a request not raised by statefulset-resizer, above the template's %s): %s", request, size, detail)
		rd.tell(EventVolumeResizeInfeasible, "")
		return rd
	}
	rd.State = Pending
	rd.Message += fmt.Sprintf("; waiting for the capacity %s to reach the template", capacity)
	if e := lastResizeError(pvc); e != nil {
		// Already in the status message (as a request left above the
		// template); say why the capacity does not move. Its one event is
		// the FailedToPatchPVC above.
		if _, stale := staleAttempt(pvc, request); !stale {
			rd.Message += fmt.Sprintf("; resize to %s failing, retried by %s: %s", request, e.retriedBy, e.detail)
		}
	}
	return rd
}

// ourRequestLeft applies docs/design.md §3.2 rule 2 to a request R this
// controller raised, with the template T at or below the capacity C and C
// below R: typically a revert in Git after a size the driver refused. The
// apiserver refuses a request that is not above the capacity (KEP-1790), so
// R cannot be lowered to T, and the volume still has to reach R. Counting
// the replica as ready by its capacity would tell "done" while the PVC asks
// for R, retried forever and counted by quota at R. So: Failed when the
// resizer's verdict on R is infeasible (only a template above the capacity
// gets the request lowered, and the message names the smallest one),
// Pending while the resize to R goes on or is retried. No event while
// pending: the resizer clears an infeasible verdict for each slow retry, and
// an event for each of the two states would come back with every retry.
func ourRequestLeft(rd ReplicaDecision, pvc *corev1.PersistentVolumeClaim, request, capacity, size *resource.Quantity) ReplicaDecision {
	stuck := fmt.Sprintf("it cannot be lowered to the template's %s: a request cannot go down to or below the volume's capacity %s (volumes cannot shrink)", size, capacity)
	fix := recoveryHint(request, capacity)
	infeasible, detail := infeasibility(pvc)
	tried, stale := staleAttempt(pvc, request)
	if infeasible && !stale {
		if nodeInfeasible(pvc) {
			// KEP-1790: after a node failure, a driver with controller
			// expansion has grown the volume already and csi-resizer keeps
			// that size; only a node-only driver recovers by a lower request.
			fix = fmt.Sprintf("the node could not grow the file system: fix the node step, or, with a driver that expands on the node only, %s (a driver with controller expansion has already grown the volume to %s, which no request undoes)", fix, request)
		}
		rd = rd.failed(EventVolumeResizeInfeasible, ReasonCannotLowerInfeasibleRequest,
			"the request %s that statefulset-resizer set is infeasible (%s) and %s; the PVC keeps requesting %s (retried, counted by quota): %s",
			request, detail, stuck, request, fix)
		// One event per refused request, template and capacity, not per
		// retry (the driver's message may carry a request id).
		rd.Event.Key = fmt.Sprintf("%s %s %s", request, size, capacity)
		return rd
	}
	progress := fmt.Sprintf("the resizer is expanding it to %s", request)
	switch e := lastResizeError(pvc); {
	case infeasible:
		progress = fmt.Sprintf("the resizer's last attempt, for %s, was infeasible (%s), it has not tried %s yet", &tried, detail, request)
	case e != nil && !stale:
		progress = fmt.Sprintf("resize to %s failing, retried by %s: %s", request, e.retriedBy, e.detail)
	}
	return rd.pending(ReasonShrinkBelowCapacity, "the request %s that statefulset-resizer set stays above the template: %s; the volume is still changing (%s); should the driver refuse %s, %s",
		request, stuck, progress, request, fix)
}

// recoveryHint says which template size gets a request lowered: any size
// above the capacity (docs/design.md §3.2 rule 2), for example the smallest
// whole Mi above it ("1025Mi" above 1Gi), which a person can type. When that
// is not below the request (a request less than 1Mi above the capacity),
// only the bounds are given.
func recoveryHint(request, capacity *resource.Quantity) string {
	const mi = 1 << 20
	smallest := resource.NewQuantity((capacity.Value()/mi+1)*mi, resource.BinarySI)
	if smallest.Cmp(*request) >= 0 {
		return fmt.Sprintf("set the template above the capacity %s and below %s to have the request lowered", capacity, request)
	}
	return fmt.Sprintf("set the template above the capacity, e.g. to %s (the smallest whole Mi above %s), to have the request lowered", smallest, capacity)
}

func phaseOrUnknown(p corev1.PodPhase) corev1.PodPhase {
	if p == "" {
		return corev1.PodUnknown
	}
	return p
}

// podBelongsTo matches by name (done by the caller), labels and controller
// kind/name, never by UID: a StatefulSet deleted with --cascade=orphan and
// re-created adopts the same pods under a new UID and is the same workload.
func podBelongsTo(pod *corev1.Pod, sts *appsv1.StatefulSet, selector labels.Selector) bool {
	if !selector.Matches(labels.Set(pod.Labels)) {
		return false
	}
	if ref := metav1.GetControllerOfNoCopy(pod); ref != nil {
		return ref.Kind == "StatefulSet" && ref.Name == sts.Name
	}
	return true // orphaned between delete --cascade=orphan and re-create
}

func storageClassOf(in Input, pvc *corev1.PersistentVolumeClaim) *storagev1.StorageClass {
	if pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName == "" {
		return nil
	}
	return in.StorageClasses[*pvc.Spec.StorageClassName]
}

func allowsExpansion(sc *storagev1.StorageClass) bool {
	return sc.AllowVolumeExpansion != nil && *sc.AllowVolumeExpansion
}

// raisedByController reports whether the PVC's current request is the one
// this controller wrote, over an original size it recorded.
func raisedByController(pvc *corev1.PersistentVolumeClaim, request *resource.Quantity) bool {
	if _, ok := pvc.Annotations[AnnotationPreResizeStorage]; !ok {
		return false
	}
	written, err := resource.ParseQuantity(pvc.Annotations[AnnotationResizedStorage])
	return err == nil && written.Cmp(*request) == 0
}

func newPatch(sts *appsv1.StatefulSet, pvc *corev1.PersistentVolumeClaim, from, to *resource.Quantity) *PVCPatch {
	pre := from.String()
	if raisedByController(pvc, from) {
		// Still the same episode: keep the size from before our first raise.
		pre = pvc.Annotations[AnnotationPreResizeStorage]
	}
	return &PVCPatch{
		Namespace:       pvc.Namespace,
		Name:            pvc.Name,
		ResourceVersion: pvc.ResourceVersion,
		From:            from.DeepCopy(),
		To:              to.DeepCopy(),
		Annotations: map[string]string{
			AnnotationStatefulSet:      sts.Name,
			AnnotationPreResizeStorage: pre,
			AnnotationResizedStorage:   to.String(),
		},
	}
}

// infeasibleCodes are the gRPC codes that KEP-1790 treats as infeasible; the
// resizer writes them as the reason of the ControllerResizeError condition.
// They also identify infeasibility when only the condition is set (a resizer
// running with RecoverVolumeExpansionFailure off writes conditions only).
var infeasibleCodes = map[string]bool{"InvalidArgument": true, "OutOfRange": true, "NotFound": true}

// infeasibility reads the KEP-1790 state of the PVC's storage resize.
func infeasibility(pvc *corev1.PersistentVolumeClaim) (bool, string) {
	state := pvc.Status.AllocatedResourceStatuses[corev1.ResourceStorage]
	switch state {
	case corev1.PersistentVolumeClaimControllerResizeInfeasible:
		return true, describe(state, condition(pvc, corev1.PersistentVolumeClaimControllerResizeError))
	case corev1.PersistentVolumeClaimNodeResizeInfeasible:
		return true, describe(state, condition(pvc, corev1.PersistentVolumeClaimNodeResizeError))
	}
	for _, t := range []corev1.PersistentVolumeClaimConditionType{
		corev1.PersistentVolumeClaimControllerResizeError, corev1.PersistentVolumeClaimNodeResizeError,
	} {
		if c := condition(pvc, t); c != nil && infeasibleCodes[c.Reason] {
			return true, describe("", c)
		}
	}
	return false, ""
}

// staleAttempt reports whether the resizer's last attempt was for another size than the
// current request (status.allocatedResources, set by a KEP-1790 resizer when it starts an
// expansion): the request changed since — lowered for recovery, or raised again — and the
// resizer will try the new size, so a verdict on the old one says nothing about it yet. A PVC
// without allocatedResources (a resizer without KEP-1790) is never stale.
func staleAttempt(pvc *corev1.PersistentVolumeClaim, request *resource.Quantity) (resource.Quantity, bool) {
	tried, ok := pvc.Status.AllocatedResources[corev1.ResourceStorage]
	return tried, ok && tried.Cmp(*request) != 0
}

// nodeInfeasible reports whether the infeasible verdict infeasibility reads
// is the node's (the kubelet's file system step), in the same order.
func nodeInfeasible(pvc *corev1.PersistentVolumeClaim) bool {
	switch pvc.Status.AllocatedResourceStatuses[corev1.ResourceStorage] {
	case corev1.PersistentVolumeClaimControllerResizeInfeasible:
		return false
	case corev1.PersistentVolumeClaimNodeResizeInfeasible:
		return true
	}
	c := condition(pvc, corev1.PersistentVolumeClaimControllerResizeError)
	return c == nil || !infeasibleCodes[c.Reason]
}

// resizeError is a KEP-1790 error condition that is not an infeasible
// verdict: the last attempt failed and is retried.
type resizeError struct {
	condition corev1.PersistentVolumeClaimConditionType
	code      string // the condition's reason: the gRPC code, or Uncertain
	detail    string // "<code>: <message>"
	retriedBy string // who retries: csi-resizer (controller) or the kubelet (node)
}

// lastResizeError returns the PVC's error condition, controller side first
// (node expansion only starts after it succeeded), or nil. Callers have ruled
// out infeasibility, so the error is one that is retried.
func lastResizeError(pvc *corev1.PersistentVolumeClaim) *resizeError {
	for _, t := range []struct {
		condition corev1.PersistentVolumeClaimConditionType
		retriedBy string
	}{
		{corev1.PersistentVolumeClaimControllerResizeError, "csi-resizer"},
		{corev1.PersistentVolumeClaimNodeResizeError, "the kubelet"},
	} {
		if c := condition(pvc, t.condition); c != nil {
			return &resizeError{condition: t.condition, code: c.Reason, detail: describe("", c), retriedBy: t.retriedBy}
		}
	}
	return nil
}

func condition(pvc *corev1.PersistentVolumeClaim, t corev1.PersistentVolumeClaimConditionType) *corev1.PersistentVolumeClaimCondition {
	for i := range pvc.Status.Conditions {
		if c := &pvc.Status.Conditions[i]; c.Type == t && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}

// describe renders "<code>: <driver message>" (falling back to the state).
func describe(state corev1.ClaimResourceStatus, c *corev1.PersistentVolumeClaimCondition) string {
	switch {
	case c != nil && c.Reason != "" && c.Message != "":
		return c.Reason + ": " + c.Message
	case c != nil && c.Message != "":
		return c.Message
	case c != nil && c.Reason != "":
		return c.Reason
	case state != "":
		return string(state)
	}
	return "unknown error"
}

// Patches returns the PVC patches to make, replica by replica in ordinal
// order (templates in spec order within a replica). Each PVC appears once.
func (d *Decision) Patches() []PVCPatch {
	type keyed struct {
		ordinal int32
		patch   PVCPatch
	}
	var all []keyed
	for _, td := range d.Templates {
		for _, rd := range td.Replicas {
			if rd.Patch != nil {
				all = append(all, keyed{rd.Ordinal, *rd.Patch})
			}
		}
	}
	// Stable insertion sort by ordinal: the lists are short.
	for i := 1; i < len(all); i++ {
		for j := i; j > 0 && all[j].ordinal < all[j-1].ordinal; j-- {
			all[j], all[j-1] = all[j-1], all[j]
		}
	}
	out := make([]PVCPatch, len(all))
	for i := range all {
		out[i] = all[i].patch
	}
	return out
}

// RejectPatch records that the apiserver permanently refused the patch of
// the named PVC (invalid, forbidden, quota). The replica becomes Failed with
// a FailedToPatchPVC event. It returns false when no patch for that PVC was
// planned.
func (d *Decision) RejectPatch(pvcName, message string) bool {
	for t := range d.Templates {
		for r := range d.Templates[t].Replicas {
			rd := &d.Templates[t].Replicas[r]
			if rd.PVCName != pvcName || rd.Patch == nil {
				continue
			}
			what := rd.Patch.Describe()
			rd.Patch = nil
			rd.State, rd.Reason = Failed, ReasonPatchRejected
			rd.Message = fmt.Sprintf("patching %s failed: %s", what, message)
			rd.tell(EventFailedToPatchPVC, "")
			return true
		}
	}
	return false
}

// Count is how many replicas of a template are in each state.
type Count struct {
	Ready, Pending, Failed int32
}

// Count tallies the replicas of one template.
func (td *TemplateDecision) Count() Count {
	var c Count
	for _, rd := range td.Replicas {
		switch rd.State {
		case Ready:
			c.Ready++
		case Failed:
			c.Failed++
		default:
			c.Pending++
		}
	}
	return c
}

// Status returns the feedback document for the decision. A template whose
// replicas are all Ready is finished for the current generation; otherwise
// it keeps the finished generation from the previous document, if any.
// Status must not be called on a Deferred decision.
func (d *Decision) Status() status.VolumeClaimTemplates {
	out := status.VolumeClaimTemplates{ObservedGeneration: d.Generation, UID: d.UID, Desired: d.Desired, Templates: []status.Template{}}
	// A finished generation of the previous document holds only for the
	// desired sizes it was written for: a new desire at the same generation
	// is not finished until its replicas are.
	previous := d.previous
	if previous != nil && previous.Desired != d.Desired {
		previous = nil
	}
	for i := range d.Templates {
		td := &d.Templates[i]
		c := td.Count()
		ts := status.Template{TemplateName: td.Name, ReadyReplicas: c.Ready, InfeasibleReplicas: c.Failed}
		if c.Ready == d.DesiredReplicas {
			ts.FinishedReconciliationGeneration = d.Generation
		} else if prev := previous.Template(td.Name); prev != nil && prev.FinishedReconciliationGeneration <= d.Generation {
			// d.previous is this object's own document (Decide dropped one
			// with another uid); a finished generation later than ours is
			// still not trusted.
			ts.FinishedReconciliationGeneration = prev.FinishedReconciliationGeneration
		}
		ts.Message = failureMessage(td)
		out.Templates = append(out.Templates, ts)
	}
	return out
}

// failingReasons are the Pending replicas that the status message names
// after the Failed ones: a resize or modification failing and retried, or a
// class the resizer cannot start on. Not counted as infeasible (no user
// action needed, or creating a class is enough), but a user waiting on them
// should know why nothing moves.
var failingReasons = map[string]bool{ReasonResizeFailing: true, ReasonModifyFailing: true, ReasonModifyPending: true}

// noteReasons are the replicas that may count as Ready but leave something
// the user should know: a request left above the template (counted by its
// capacity, see aboveTemplate), a class that cannot be rolled back.
var noteReasons = map[string]bool{ReasonNotRaisedByController: true, ReasonShrinkBelowCapacity: true, ReasonClassCannotBeUnset: true}

// failureMessage lists the Failed replicas first, then the failing ones
// (failingReasons), then the notes (noteReasons), at most maxMessageEntries
// in all.
func failureMessage(td *TemplateDecision) string {
	var parts []string
	more := 0
	add := func(rd *ReplicaDecision) {
		if len(parts) == maxMessageEntries {
			more++
			return
		}
		parts = append(parts, rd.PVCName+": "+rd.Message)
	}
	for i := range td.Replicas {
		if td.Replicas[i].State == Failed {
			add(&td.Replicas[i])
		}
	}
	for i := range td.Replicas {
		if rd := &td.Replicas[i]; rd.State != Failed && failingReasons[rd.Reason] {
			add(rd)
		}
	}
	for i := range td.Replicas {
		if rd := &td.Replicas[i]; rd.State != Failed && noteReasons[rd.Reason] {
			add(rd)
		}
	}
	if more > 0 {
		parts = append(parts, fmt.Sprintf("and %d more", more))
	}
	return strings.Join(parts, "; ")
}
