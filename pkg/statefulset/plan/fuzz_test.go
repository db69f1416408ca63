package plan

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/status"
)

// byteSource turns fuzzer bytes into small choices; it yields zeros once
// exhausted so every input builds a valid world.
type byteSource struct {
	data []byte
}

func (b *byteSource) pick(n int) int {
	if len(b.data) == 0 || n <= 1 {
		return 0
	}
	v := int(b.data[0])
	b.data = b.data[1:]
	return v % n
}

func (b *byteSource) flag() bool { return b.pick(2) == 1 }

var fuzzSizes = []string{"1Gi", "2Gi", "3Gi", "5Gi", "8Gi"}

func (b *byteSource) size() resource.Quantity { return resource.MustParse(b.sizeString()) }

func (b *byteSource) sizeString() string { return fuzzSizes[b.pick(len(fuzzSizes))] }

// randomWorld builds an arbitrary but well-formed state: up to 4 replicas, up
// to 2 templates, pods in any phase/revision, PVCs with any request,
// capacity, KEP-1790 state and bookkeeping annotations.
func randomWorld(b *byteSource) *world {
	policy := ordered
	if b.flag() {
		policy = parallel
	}
	replicas := int32(b.pick(5))
	var templates []string
	for i, n := 0, 1+b.pick(2); i < n; i++ {
		templates = append(templates, []string{"data", "logs"}[i]+"=1Gi")
	}
	w := newWorld(replicas, policy, templates...)
	for i := range w.sts.Spec.VolumeClaimTemplates {
		w.sts.Spec.VolumeClaimTemplates[i].Spec.Resources.Requests[corev1.ResourceStorage] = b.size()
	}
	for i := range w.sts.Spec.VolumeClaimTemplates {
		w.sts.Spec.VolumeClaimTemplates[i].Spec.VolumeAttributesClassName = classPtr(b.className())
	}
	w.optedIn = b.flag()
	for i := range w.sts.Spec.VolumeClaimTemplates { // the desire below copies them
		tmpl := &w.sts.Spec.VolumeClaimTemplates[i]
		tmpl.Labels, tmpl.Annotations = b.metadata(fuzzTemplateLabels), b.metadata(fuzzTemplateAnnotations)
	}
	if b.flag() { // a desire recorded by the webhook, for some template
		w.setDesired(w.sts.Spec.VolumeClaimTemplates[b.pick(len(w.sts.Spec.VolumeClaimTemplates))].Name, b.sizeString())
		if b.flag() { // with a class
			i := b.pick(len(w.templates))
			w.templates[i].Spec.VolumeAttributesClassName = classPtr(b.className())
		}
	}
	if b.flag() { // a previous status, finished for this generation, for some desire
		prev := status.VolumeClaimTemplates{ObservedGeneration: w.sts.Generation, UID: w.sts.UID, Desired: []string{"", w.desired, "other"}[b.pick(3)]}
		for _, tmpl := range w.sts.Spec.VolumeClaimTemplates {
			prev.Templates = append(prev.Templates, status.Template{TemplateName: tmpl.Name, FinishedReconciliationGeneration: w.sts.Generation})
		}
		value, _ := prev.Encode()
		w.sts.Annotations = map[string]string{status.Annotation: value}
	}
	for _, name := range sortedKeys(w.pods) {
		pod := w.pods[name]
		switch b.pick(6) {
		case 0:
			pod.Status.Phase = corev1.PodPending
		case 1:
			pod.DeletionTimestamp = &metav1.Time{}
		case 2:
			pod.Labels[appsv1.StatefulSetRevisionLabel] = "old"
		case 3:
			delete(w.pods, name)
		}
	}
	states := []corev1.ClaimResourceStatus{"",
		corev1.PersistentVolumeClaimControllerResizeInProgress, corev1.PersistentVolumeClaimControllerResizeInfeasible,
		corev1.PersistentVolumeClaimNodeResizePending, corev1.PersistentVolumeClaimNodeResizeInfeasible,
		corev1.PersistentVolumeClaimNodeResizeInProgress}
	// Error conditions as csi-resizer (gRPC code, or Uncertain) and the
	// kubelet write them: infeasible codes, a final one, a transient one.
	errorTypes := []corev1.PersistentVolumeClaimConditionType{
		corev1.PersistentVolumeClaimControllerResizeError, corev1.PersistentVolumeClaimNodeResizeError}
	errorCodes := []string{"OutOfRange", "Internal", "Uncertain", "DeadlineExceeded", ""}
	for _, name := range sortedKeys(w.pvcs) {
		pvc := w.pvcs[name]
		if b.pick(8) == 0 {
			delete(w.pvcs, name)
			continue
		}
		request, capacity := b.size(), b.size()
		pvc.Spec.Resources.Requests[corev1.ResourceStorage] = request
		pvc.Status.Capacity[corev1.ResourceStorage] = capacity
		if s := states[b.pick(len(states))]; s != "" {
			pvc.Status.AllocatedResourceStatuses = map[corev1.ResourceName]corev1.ClaimResourceStatus{corev1.ResourceStorage: s}
		}
		if b.pick(3) == 0 { // the size the resizer last tried
			pvc.Status.AllocatedResources = corev1.ResourceList{corev1.ResourceStorage: b.size()}
		}
		if b.pick(4) == 0 {
			pvc.Status.Conditions = []corev1.PersistentVolumeClaimCondition{{Type: errorTypes[b.pick(len(errorTypes))],
				Status: corev1.ConditionTrue, Reason: errorCodes[b.pick(len(errorCodes))], Message: "m"}}
		}
		if b.pick(5) == 0 {
			pvc.Status.Phase = corev1.ClaimPending
		}
		switch b.pick(4) {
		case 1: // raised by us, still ours
			pvc.Annotations = map[string]string{AnnotationPreResizeStorage: b.sizeString(), AnnotationResizedStorage: request.String()}
		case 2: // raised by us, then changed by a person
			pvc.Annotations = map[string]string{AnnotationPreResizeStorage: b.sizeString(), AnnotationResizedStorage: b.sizeString()}
		case 3: // garbage in our annotation
			pvc.Annotations = map[string]string{AnnotationPreResizeStorage: "x", AnnotationResizedStorage: "not-a-size"}
		}
		if b.pick(6) == 0 {
			pvc.Spec.StorageClassName = ptr.To(fixedSC)
		}
		randomClass(b, pvc)
		randomMetadata(b, pvc)
	}
	return w
}

// Keys of the template metadata: ordinary ones and reserved ones
// (docs/design.md §3.11), in labels and annotations.
var (
	fuzzTemplateLabels      = []string{"app", "chart", "team", "csi-resizer.io/x", "volume.kubernetes.io/y"}
	fuzzTemplateAnnotations = []string{"note", "chart", corev1.LastAppliedConfigAnnotation, "pv.kubernetes.io/bind-completed",
		"volume.beta.kubernetes.io/storage-class", AnnotationPreResizeStorage, AnnotationTemplateMetadata}
	// fuzzPVCAnnotations are the PVC's own: no bookkeeping of ours, which
	// the size and class choices above give it.
	fuzzPVCAnnotations = []string{"note", "chart", "backup", "pv.kubernetes.io/bind-completed", "volume.kubernetes.io/selected-node"}
)

// metadata returns a map with each key absent or at one of two values; nil
// when empty.
func (b *byteSource) metadata(keys []string) map[string]string {
	var m map[string]string
	for _, k := range keys {
		if v := b.pick(3); v > 0 {
			if m == nil {
				m = map[string]string{}
			}
			m[k] = []string{"", "a", "b"}[v]
		}
	}
	return m
}

// randomMetadata gives a PVC any labels and annotations of the pools, a
// record of template metadata (none, any keys and values, reserved ones
// too, or one that cannot be parsed) and maybe a deletion in progress.
func randomMetadata(b *byteSource, pvc *corev1.PersistentVolumeClaim) {
	for k, v := range b.metadata(fuzzTemplateLabels) {
		pvc.Labels[k] = v
	}
	for k, v := range b.metadata(fuzzPVCAnnotations) {
		setAnnotation(pvc, k, v)
	}
	switch b.pick(4) {
	case 1, 2:
		value, _ := json.Marshal(metadataRecord{Labels: b.metadata(fuzzTemplateLabels), Annotations: b.metadata(fuzzPVCAnnotations)})
		setAnnotation(pvc, AnnotationTemplateMetadata, string(value))
	case 3:
		setAnnotation(pvc, AnnotationTemplateMetadata, "{")
	}
	if b.pick(8) == 0 {
		pvc.DeletionTimestamp = &metav1.Time{}
	}
}

var fuzzClasses = []string{"", "gold", "silver"}

func (b *byteSource) className() string { return fuzzClasses[b.pick(len(fuzzClasses))] }

// randomClass gives a PVC any VolumeAttributesClass state: spec, current
// class, a modification in any status for any target, an error condition,
// and our class annotations (ours and current, or changed since, or absent).
func randomClass(b *byteSource, pvc *corev1.PersistentVolumeClaim) {
	pvc.Spec.VolumeAttributesClassName = classPtr(b.className())
	pvc.Status.CurrentVolumeAttributesClassName = classPtr(b.className())
	statuses := []corev1.PersistentVolumeClaimModifyVolumeStatus{"", corev1.PersistentVolumeClaimModifyVolumePending,
		corev1.PersistentVolumeClaimModifyVolumeInProgress, corev1.PersistentVolumeClaimModifyVolumeInfeasible}
	if st := statuses[b.pick(len(statuses))]; st != "" {
		pvc.Status.ModifyVolumeStatus = &corev1.ModifyVolumeStatus{Status: st, TargetVolumeAttributesClassName: b.className()}
	}
	if b.pick(3) == 0 {
		pvc.Status.Conditions = append(pvc.Status.Conditions, corev1.PersistentVolumeClaimCondition{Type: corev1.PersistentVolumeClaimVolumeModifyVolumeError,
			Status: corev1.ConditionTrue, Reason: []string{"InvalidArgument", "Internal", "Unavailable"}[b.pick(3)], Message: "m"})
	}
	switch b.pick(3) {
	case 1: // we set the class it has
		setAnnotation(pvc, AnnotationModifiedClass, ptr.Deref(pvc.Spec.VolumeAttributesClassName, ""))
		setAnnotation(pvc, AnnotationPreModifyClass, b.className())
	case 2: // we set a class, someone changed it since
		setAnnotation(pvc, AnnotationModifiedClass, b.className())
		setAnnotation(pvc, AnnotationPreModifyClass, b.className())
	}
}

func setAnnotation(pvc *corev1.PersistentVolumeClaim, key, value string) {
	if pvc.Annotations == nil {
		pvc.Annotations = map[string]string{}
	}
	pvc.Annotations[key] = value
}

// FuzzDecideInvariants checks the safety rules over arbitrary states:
//   - never lower a PVC this controller did not raise (or that was changed
//     by someone since);
//   - never lower a request to or below status.capacity;
//   - OrderedReady never touches replica i+1 (patch or predicted patch
//     failure) while replica i of the same template is unfinished or failing;
//   - only PVCs of running, updated, non-terminating pods are patched, each
//     at most once, to exactly the template size;
//   - a replica is Ready exactly when its capacity reaches the template
//     (docs/design.md §3.5), whatever its request above the template, except
//     a request we raised above the template that the volume has not
//     reached (§3.2 rule 2): never Ready, and Failed when the resizer's
//     verdict on it is infeasible and the template is not above the
//     capacity (a revert that cannot lower it);
//   - an infeasible verdict is only taken for the size the resizer tried;
//   - a failing (retried) resize is reported only from an error condition
//     about the size the resizer tried, is Pending (never counted as
//     infeasible), and is the only thing with a VolumeResizeFailing event;
//   - the sizes are the desired templates' when given (the StatefulSet's
//     own otherwise), the status records the desire, and a finished
//     generation is kept from a previous status only if that was written for
//     the same desire;
//   - the status counts add up, and the message names at most
//     maxMessageEntries replicas, then "and N more";
//   - VolumeAttributesClass (docs/design.md §3.10): only bound PVCs of
//     eligible replicas are patched; a class patch sets the template's
//     class, never back over a class someone changed from ours, with the
//     episode's annotations and without the size annotations when it does
//     not resize; the only other class written is the rollback to the class
//     from before, of a class we set, when the template names none, and
//     never an unset the apiserver refuses (a class current); a replica is
//     Ready only when the volume has the template's class (and is Ready
//     when that and the size are done); a class verdict comes only from the
//     resizer's report on the template's class;
//   - template metadata (docs/design.md §3.11, checkMetadata): only for an
//     opted-in StatefulSet, only on PVCs that exist and are not being
//     deleted, whatever the pod, and never held back by OrderedReady; a key
//     is set only to the template's value; a key is removed only when it is
//     recorded as ours at the PVC's value and the template dropped it; no
//     reserved key is ever written or removed (save our own bookkeeping);
//     the record holds only template keys we set or kept; a Ready replica's
//     PVC has every template key at its value; and one patch suffices (the
//     next decision, after the apiserver applied it, has no metadata to do).
func FuzzDecideInvariants(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 3, 1, 4, 2, 5, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{1, 4, 1, 2, 3, 4, 0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 1, 0, 4})
	f.Add([]byte{0, 4, 0, 0, 5, 5, 5, 5, 4, 0, 2, 1, 1, 1, 1, 4, 1, 2, 1, 3, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		w := randomWorld(&byteSource{data: data})
		d := Decide(w.input())
		if d.Deferred != "" {
			t.Fatalf("unexpected Deferred %q", d.Deferred)
		}
		seen := map[string]bool{}
		for _, p := range d.Patches() {
			if seen[p.Name] {
				t.Fatalf("PVC %s patched twice", p.Name)
			}
			seen[p.Name] = true
			pvc := w.pvcs[p.Name]
			request := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
			capacity := pvc.Status.Capacity[corev1.ResourceStorage]
			if !p.Resizes() && p.Class == nil && !metadataChange(&p) {
				t.Fatalf("patch of %s changes nothing: %+v", p.Name, p)
			}
			if !p.Resizes() {
				for _, k := range []string{AnnotationPreResizeStorage, AnnotationResizedStorage} {
					if _, ok := p.Annotations[k]; ok {
						t.Fatalf("class-only patch of %s sets %s: %+v", p.Name, k, p)
					}
				}
				continue
			}
			if p.From.Cmp(request) != 0 {
				t.Fatalf("patch of %s from %s, but the request is %s", p.Name, &p.From, &request)
			}
			if p.Decrease() {
				if !raisedByController(pvc, &request) {
					t.Fatalf("lowered %s (annotations %v) which was not raised by us", p.Name, pvc.Annotations)
				}
				if p.To.Cmp(capacity) <= 0 {
					t.Fatalf("lowered %s to %s, not above capacity %s", p.Name, &p.To, &capacity)
				}
			}
		}
		for _, td := range d.Templates {
			unfinished := false
			for _, rd := range td.Replicas {
				if volumeChange(rd.Patch) { // metadata: docs/design.md §3.11, checkMetadata
					pod := w.pods[rd.PodName]
					if pod == nil || pod.Status.Phase != corev1.PodRunning || pod.DeletionTimestamp != nil ||
						pod.Labels[appsv1.StatefulSetRevisionLabel] != testRevision {
						t.Fatalf("patched %s for an ineligible pod %+v", rd.PVCName, pod)
					}
					if pvc := w.pvcs[rd.PVCName]; pvc == nil || pvc.Status.Phase != corev1.ClaimBound {
						t.Fatalf("patched %s, which is not a bound PVC", rd.PVCName)
					}
					if rd.Patch.Resizes() && rd.Patch.To.Cmp(td.Size) != 0 {
						t.Fatalf("patched %s to %s, template says %s", rd.PVCName, &rd.Patch.To, &td.Size)
					}
					checkClassPatch(t, w.pvcs[rd.PVCName], rd.Patch, td.Class)
				}
				// docs/design.md §3.5: readyReplicas counts replicas whose PVC
				// capacity is at least the template size; a request left
				// above the template does not make such a replica unready.
				if pvc := w.pvcs[rd.PVCName]; pvc != nil && !td.Size.IsZero() {
					capacity := pvc.Status.Capacity[corev1.ResourceStorage]
					request := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
					if tried, ok := pvc.Status.AllocatedResources[corev1.ResourceStorage]; ok && (rd.Reason == ReasonResizeInfeasible || rd.Reason == ReasonCannotLowerInfeasibleRequest) && tried.Cmp(request) != 0 {
						t.Fatalf("%s infeasible on a verdict for %s, but the request is %s", rd.PVCName, &tried, &request)
					}
					checkClassVerdict(t, pvc, rd, td.Class)
					if rd.Reason == ReasonResizeFailing {
						// A class patch may go with it (docs/design.md §3.10), a size patch not.
						if rd.State != Pending || (rd.Patch != nil && rd.Patch.Resizes()) {
							t.Fatalf("%s failing but %s with patch %+v: a retried failure is pending, its request not patched", rd.PVCName, rd.State, rd.Patch)
						}
						if lastResizeError(pvc) == nil {
							t.Fatalf("%s failing without an error condition: %+v", rd.PVCName, pvc.Status)
						}
						if tried, ok := pvc.Status.AllocatedResources[corev1.ResourceStorage]; ok && tried.Cmp(request) != 0 {
							t.Fatalf("%s failing on an error for %s, but the request is %s", rd.PVCName, &tried, &request)
						}
					}
					if rd.State == Ready && capacity.Cmp(td.Size) < 0 {
						t.Fatalf("%s Ready with capacity %s below the template's %s", rd.PVCName, &capacity, &td.Size)
					}
					pod := w.pods[rd.PodName]
					eligible := pod != nil && pod.Status.Phase == corev1.PodRunning && pod.DeletionTimestamp == nil &&
						pod.Labels[appsv1.StatefulSetRevisionLabel] == testRevision && pvc.Status.Phase == corev1.ClaimBound && pvc.DeletionTimestamp == nil
					// docs/design.md §3.2 rule 2: a request we raised above the
					// template that the volume has not reached is never done.
					ours := raisedByController(pvc, &request) && request.Cmp(td.Size) > 0 && capacity.Cmp(request) < 0
					if ours && rd.State == Ready {
						t.Fatalf("%s Ready while our request %s is above the template %s and the capacity %s", rd.PVCName, &request, &td.Size, &capacity)
					}
					infeasible, _ := infeasibility(pvc)
					_, stale := staleAttempt(pvc, &request)
					if ours && eligible && capacity.Cmp(td.Size) >= 0 && infeasible && !stale && rd.State != Failed {
						t.Fatalf("%s is %s/%s while our request %s, not lowerable to %s (capacity %s), is infeasible", rd.PVCName, rd.State, rd.Reason, &request, &td.Size, &capacity)
					}
					if eligible && capacity.Cmp(td.Size) >= 0 && request.Cmp(td.Size) >= 0 && classSettled(pvc, td.Class) && !ours && !metadataChange(rd.Patch) && rd.State != Ready {
						t.Fatalf("%s (request %s, capacity %s, template %s) is %s/%s, want Ready", rd.PVCName, &request, &capacity, &td.Size, rd.State, rd.Reason)
					}
					if rd.State == Ready && td.Class != "" && !classSettled(pvc, td.Class) {
						t.Fatalf("%s Ready without the template's class %q: %+v", rd.PVCName, td.Class, pvc.Status)
					}
				}
				if (rd.Event != nil && rd.Event.Reason == EventVolumeResizeFailing) != (rd.Reason == ReasonResizeFailing) {
					t.Fatalf("%s: reason %s with event %+v", rd.PVCName, rd.Reason, rd.Event)
				}
				if d.Ordered && unfinished {
					touched := volumeChange(rd.Patch) || (rd.Event != nil && rd.Event.Reason == EventFailedToPatchPVC)
					if touched {
						t.Fatalf("OrderedReady touched %s behind an unfinished replica: %+v", rd.PVCName, rd)
					}
				}
				if rd.State != Ready && rd.Reason != ReasonApplyingTemplateMetadata {
					unfinished = true // metadata holds no replica back (§3.11)
				}
			}
		}
		templates := w.templates
		if templates == nil {
			templates = w.sts.Spec.VolumeClaimTemplates
		}
		checkMetadata(t, w, d, templates)
		for i, td := range d.Templates {
			if want := templates[i].Spec.Resources.Requests[corev1.ResourceStorage]; td.Size.Cmp(want) != 0 {
				t.Fatalf("template %s decided for %s, want %s (desired %q)", td.Name, &td.Size, &want, w.desired)
			}
			if want := ptr.Deref(templates[i].Spec.VolumeAttributesClassName, ""); td.Class != want {
				t.Fatalf("template %s decided for class %q, want %q (desired %q)", td.Name, td.Class, want, w.desired)
			}
		}
		st := d.Status()
		if st.Desired != w.desired {
			t.Fatalf("status desired %q, want %q", st.Desired, w.desired)
		}
		prev, _ := status.FromStatefulSet(w.sts)
		for i, ts := range st.Templates {
			if prev != nil && prev.Desired != w.desired && ts.FinishedReconciliationGeneration != 0 && ts.ReadyReplicas != d.DesiredReplicas {
				t.Fatalf("template %s finished (%d) from a status for another desire (%q, now %q), %d/%d ready",
					ts.TemplateName, ts.FinishedReconciliationGeneration, prev.Desired, w.desired, ts.ReadyReplicas, d.DesiredReplicas)
			}
			c := d.Templates[i].Count()
			if ts.ReadyReplicas+ts.InfeasibleReplicas > d.DesiredReplicas ||
				c.Ready+c.Pending+c.Failed != d.DesiredReplicas {
				t.Fatalf("counts do not add up: %+v %+v replicas %d", ts, c, d.DesiredReplicas)
			}
			// A finished generation kept from the previous status of the same
			// desire may stand with fewer replicas ready now.
			kept := prev != nil && prev.Desired == w.desired && prev.Template(ts.TemplateName) != nil &&
				prev.Template(ts.TemplateName).FinishedReconciliationGeneration == ts.FinishedReconciliationGeneration
			if !kept && (ts.FinishedReconciliationGeneration == d.Generation) != (ts.ReadyReplicas == d.DesiredReplicas) &&
				ts.FinishedReconciliationGeneration != 0 {
				t.Fatalf("finished generation %d with %d/%d ready", ts.FinishedReconciliationGeneration, ts.ReadyReplicas, d.DesiredReplicas)
			}
			// Entries: the Failed replicas, the failing ones, those left above
			// the template. Each entry starts with its PVC name and a colon.
			entries, named := 0, 0
			for _, rd := range d.Templates[i].Replicas {
				if rd.State == Failed || failingReasons[rd.Reason] || noteReasons[rd.Reason] {
					entries++
				}
				if strings.HasPrefix(ts.Message, rd.PVCName+": ") || strings.Contains(ts.Message, "; "+rd.PVCName+": ") {
					named++
				}
			}
			if want := min(entries, maxMessageEntries); named != want {
				t.Fatalf("message names %d replicas, want %d of %d entries: %q", named, want, entries, ts.Message)
			}
			if more := entries - maxMessageEntries; more > 0 && !strings.HasSuffix(ts.Message, fmt.Sprintf("; and %d more", more)) {
				t.Fatalf("message %q lacks \"and %d more\"", ts.Message, more)
			}
		}
		checkMetadataConverges(t, w, d)
	})
}

func volumeChange(p *PVCPatch) bool   { return p != nil && (p.Resizes() || p.Class != nil) }
func metadataChange(p *PVCPatch) bool { return p != nil && p.describeMetadata() != "" }

// ownAnnotations are the keys under csi-resizer.io/ that a PVC patch may
// write or remove: the controller's bookkeeping.
var ownAnnotations = map[string]bool{AnnotationStatefulSet: true, AnnotationPreResizeStorage: true, AnnotationResizedStorage: true,
	AnnotationModifiedClass: true, AnnotationPreModifyClass: true, AnnotationTemplateMetadata: true}

// checkMetadata: docs/design.md §3.11 rule 15 over arbitrary states. Only
// an opted-in StatefulSet's existing PVCs that are not being deleted get
// template metadata; a key is set only to the template's value; a key is
// removed only when the record holds it at the PVC's value and the template
// no longer has it; no reserved key is written or removed, save our own
// bookkeeping; the record holds only template keys at the template's
// values; a Ready replica's PVC has every template key at its value.
func checkMetadata(t *testing.T, w *world, d *Decision, templates []corev1.PersistentVolumeClaim) {
	t.Helper()
	for i, td := range d.Templates {
		tmpl := &templates[i]
		for _, rd := range td.Replicas {
			pvc, p := w.pvcs[rd.PVCName], rd.Patch
			switch meta := metadataChange(p); {
			case meta && (!w.optedIn || pvc == nil || pvc.DeletionTimestamp != nil):
				t.Fatalf("metadata patch of %s (opted in %v, PVC %v): %+v", rd.PVCName, w.optedIn, pvc != nil, p)
			case !meta && rd.Reason == ReasonApplyingTemplateMetadata:
				t.Fatalf("%s is %s without a metadata patch", rd.PVCName, rd.Reason)
			}
			if p != nil {
				checkKeys(t, pvc, "label", p.Labels, p.RemoveLabels, tmpl.Labels, readRecord(pvc).Labels)
				checkKeys(t, pvc, "annotation", p.Annotations, p.RemoveAnnotations, tmpl.Annotations, readRecord(pvc).Annotations)
				checkRecord(t, pvc, p, tmpl)
			}
			if rd.State != Ready || !w.optedIn || pvc == nil || pvc.DeletionTimestamp != nil {
				continue
			}
			for _, m := range []struct{ want, have map[string]string }{{tmpl.Labels, pvc.Labels}, {tmpl.Annotations, pvc.Annotations}} {
				for k, v := range m.want {
					if got, ok := m.have[k]; !reservedKey(k) && (!ok || got != v) {
						t.Fatalf("%s Ready without the template's %s=%s (has %q)", rd.PVCName, k, v, got)
					}
				}
			}
		}
	}
}

// checkKeys checks the keys a patch sets and removes in one map of the PVC.
func checkKeys(t *testing.T, pvc *corev1.PersistentVolumeClaim, kind string, set map[string]string, remove []string, want, recorded map[string]string) {
	t.Helper()
	have := pvc.Labels
	if kind == "annotation" {
		have = pvc.Annotations
	}
	for k, v := range set {
		if own := kind == "annotation" && ownAnnotations[k]; !own && (reservedKey(k) || want[k] != v) {
			t.Fatalf("%s: sets %s %s=%q; template %v", pvc.Name, kind, k, v, want)
		}
	}
	for _, k := range remove {
		if kind == "annotation" && ownAnnotations[k] {
			continue
		}
		_, inTemplate := want[k]
		if was, ours := recorded[k]; reservedKey(k) || inTemplate || !ours || have[k] != was {
			t.Fatalf("%s: removes %s %s (value %q, recorded %v, template %v)", pvc.Name, kind, k, have[k], recorded, want)
		}
	}
}

// checkRecord: the record a patch writes holds only non-reserved template
// keys at the template's values, each set by this patch or recorded before
// at the value the PVC still has (a value someone else set is not ours).
func checkRecord(t *testing.T, pvc *corev1.PersistentVolumeClaim, p *PVCPatch, tmpl *corev1.PersistentVolumeClaim) {
	t.Helper()
	value, ok := p.Annotations[AnnotationTemplateMetadata]
	if !ok {
		return
	}
	var r metadataRecord
	if err := json.Unmarshal([]byte(value), &r); err != nil {
		t.Fatalf("%s: record %q: %v", pvc.Name, value, err)
	}
	before := readRecord(pvc)
	for _, m := range []struct{ record, want, set, before, have map[string]string }{
		{r.Labels, tmpl.Labels, p.Labels, before.Labels, pvc.Labels},
		{r.Annotations, tmpl.Annotations, p.Annotations, before.Annotations, pvc.Annotations},
	} {
		for k, v := range m.record {
			if reservedKey(k) || m.want[k] != v {
				t.Fatalf("%s: records %s=%s, template %v", pvc.Name, k, v, m.want)
			}
			_, set := m.set[k]
			if was, ours := m.before[k]; !set && (!ours || was != m.have[k]) {
				t.Fatalf("%s: records %s=%s, neither set now nor ours before (recorded %v, PVC %v)", pvc.Name, k, v, m.before, m.have)
			}
		}
	}
}

// checkMetadataConverges applies the decision's patches, as the apiserver
// would, and decides again: template metadata is done in one patch (no
// second metadata patch), and the record then holds only keys the PVC has
// at the recorded values ("what it last set").
func checkMetadataConverges(t *testing.T, w *world, d *Decision) {
	t.Helper()
	w.apply(d)
	for _, p := range Decide(w.input()).Patches() {
		if metadataChange(&p) {
			t.Fatalf("second metadata patch of %s: %s (labels %v, annotations %v)", p.Name, p.Describe(), w.pvcs[p.Name].Labels, w.pvcs[p.Name].Annotations)
		}
	}
	for _, pvc := range w.pvcs {
		r := readRecord(pvc)
		for _, m := range []struct{ record, have map[string]string }{{r.Labels, pvc.Labels}, {r.Annotations, pvc.Annotations}} {
			for k, v := range m.record {
				if got, ok := m.have[k]; w.optedIn && pvc.DeletionTimestamp == nil && (!ok || got != v) && metadataTouched(d, pvc.Name) {
					t.Fatalf("%s: record says %s=%s, the PVC has %q", pvc.Name, k, v, got)
				}
			}
		}
	}
}

// metadataTouched reports whether the decision patched the PVC's metadata.
func metadataTouched(d *Decision, name string) bool {
	for _, p := range d.Patches() {
		if p.Name == name && metadataChange(&p) {
			return true
		}
	}
	return false
}

// checkClassPatch: docs/design.md §3.10 rule 13 over arbitrary states. A
// class patch starts from the PVC's class; it sets the template's class,
// never over a class a person changed from the one we set, with the
// episode's annotations; or, when the template names no class, it is the
// rollback of the class we set to the one from before, which the apiserver
// accepts (no class current, or a class to go back to), ending the episode.
func checkClassPatch(t *testing.T, pvc *corev1.PersistentVolumeClaim, p *PVCPatch, want string) {
	t.Helper()
	if p.Class == nil {
		return
	}
	have := ptr.Deref(pvc.Spec.VolumeAttributesClassName, "")
	written, ours := pvc.Annotations[AnnotationModifiedClass]
	if p.Class.From != have {
		t.Fatalf("class patch of %s from %q, but the PVC's class is %q", pvc.Name, p.Class.From, have)
	}
	if want != "" {
		if p.Class.To != want || have == want {
			t.Fatalf("class patch of %s %q->%q, template says %q", pvc.Name, have, p.Class.To, want)
		}
		if ours && written == want {
			t.Fatalf("class patch of %s sets %q back over someone's %q", pvc.Name, want, have)
		}
		pre := have
		if ours && written == have {
			pre = pvc.Annotations[AnnotationPreModifyClass]
		}
		if p.Annotations[AnnotationModifiedClass] != want || p.Annotations[AnnotationPreModifyClass] != pre {
			t.Fatalf("class patch of %s (annotations %v) has annotations %v, want written %q, pre %q", pvc.Name, pvc.Annotations, p.Annotations, want, pre)
		}
		return
	}
	pre := pvc.Annotations[AnnotationPreModifyClass]
	switch {
	case !ours || written != have || have == "":
		t.Fatalf("class of %s (%q, annotations %v) rolled back, but it is not the class we set", pvc.Name, have, pvc.Annotations)
	case p.Class.To != pre:
		t.Fatalf("class of %s rolled back to %q, not to the class from before %q", pvc.Name, p.Class.To, pre)
	case pre == "" && pvc.Status.CurrentVolumeAttributesClassName != nil:
		t.Fatalf("class of %s unset while a class is current: the apiserver refuses it", pvc.Name)
	case !slices.Contains(p.RemoveAnnotations, AnnotationModifiedClass) || !slices.Contains(p.RemoveAnnotations, AnnotationPreModifyClass):
		t.Fatalf("rollback of %s leaves the episode's annotations: %+v", pvc.Name, p)
	}
}

// classSettled reports whether nothing is left to do about the class of
// pvc for a template asking for class want: the volume has it, or the
// template asks for none and there is no rollback to make.
func classSettled(pvc *corev1.PersistentVolumeClaim, want string) bool {
	if want == "" {
		return !rollbackWanted(pvc) || (pvc.Annotations[AnnotationPreModifyClass] == "" && pvc.Status.CurrentVolumeAttributesClassName != nil)
	}
	current := pvc.Status.CurrentVolumeAttributesClassName
	return ptr.Deref(pvc.Spec.VolumeAttributesClassName, "") == want && current != nil && *current == want && pvc.Status.ModifyVolumeStatus == nil
}

// checkClassVerdict: a class verdict (infeasible, failing, class missing)
// is only taken from the resizer's report about the template's class, on a
// PVC that asks for it; an infeasible one is Failed, the others Pending.
func checkClassVerdict(t *testing.T, pvc *corev1.PersistentVolumeClaim, rd ReplicaDecision, want string) {
	t.Helper()
	var wantStatus corev1.PersistentVolumeClaimModifyVolumeStatus
	wantState := Pending
	switch rd.Reason {
	case ReasonModifyInfeasible:
		wantStatus, wantState = corev1.PersistentVolumeClaimModifyVolumeInfeasible, Failed
	case ReasonModifyPending:
		wantStatus = corev1.PersistentVolumeClaimModifyVolumePending
	case ReasonModifyFailing:
		wantStatus = corev1.PersistentVolumeClaimModifyVolumeInProgress
		if condition(pvc, corev1.PersistentVolumeClaimVolumeModifyVolumeError) == nil {
			t.Fatalf("%s failing without a ModifyVolumeError condition", pvc.Name)
		}
	default:
		return
	}
	ms := pvc.Status.ModifyVolumeStatus
	if want == "" || ptr.Deref(pvc.Spec.VolumeAttributesClassName, "") != want || ms == nil || ms.TargetVolumeAttributesClassName != want || ms.Status != wantStatus || rd.State != wantState {
		t.Fatalf("%s is %s/%s for template class %q, but the PVC asks for %q and reports %+v", pvc.Name, rd.State, rd.Reason, want, ptr.Deref(pvc.Spec.VolumeAttributesClassName, ""), ms)
	}
}
