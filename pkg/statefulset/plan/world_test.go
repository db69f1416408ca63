package plan

import (
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/status"
)

// world is a small simulated cluster for scenario tests: one StatefulSet
// "web" in namespace "ns", its pods and PVCs, and StorageClasses. Its helper
// methods play the other actors: the user (template edits), the StatefulSet
// controller (observedGeneration, revisions), the apiserver (applying our
// patches) and the resizer (capacity and KEP-1790 state).
type world struct {
	sts *appsv1.StatefulSet
	// templates and desired are the desired-templates input (the webhook's
	// annotation applied by the controller); nil and "" when none.
	templates []corev1.PersistentVolumeClaim
	desired   string
	// optedIn is Input.OptedIn: the StatefulSet takes template changes.
	optedIn bool

	pods map[string]*corev1.Pod
	pvcs map[string]*corev1.PersistentVolumeClaim
	scs  map[string]*storagev1.StorageClass
}

const (
	testNS       = "ns"
	testSTS      = "web"
	testRevision = "web-rev2"
	expandableSC = "expandable"
	fixedSC      = "fixed"
)

// newWorld builds a StatefulSet whose templates (name=size pairs) all
// match their PVCs: every pod Running at the update revision, every PVC
// Bound with request = capacity = template size.
func newWorld(replicas int32, policy appsv1.PodManagementPolicyType, templates ...string) *world {
	w := &world{
		sts: &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: testSTS, UID: "uid-1", Generation: 1},
			Spec: appsv1.StatefulSetSpec{
				Replicas:            ptr.To(replicas),
				PodManagementPolicy: policy,
				Selector:            &metav1.LabelSelector{MatchLabels: map[string]string{"app": testSTS}},
			},
			Status: appsv1.StatefulSetStatus{ObservedGeneration: 1, UpdateRevision: testRevision, CurrentRevision: testRevision},
		},
		pods: map[string]*corev1.Pod{},
		pvcs: map[string]*corev1.PersistentVolumeClaim{},
		scs: map[string]*storagev1.StorageClass{
			expandableSC: {ObjectMeta: metav1.ObjectMeta{Name: expandableSC}, AllowVolumeExpansion: ptr.To(true)},
			fixedSC:      {ObjectMeta: metav1.ObjectMeta{Name: fixedSC}},
		},
	}
	for _, t := range templates {
		name, size, _ := strings.Cut(t, "=")
		w.sts.Spec.VolumeClaimTemplates = append(w.sts.Spec.VolumeClaimTemplates, corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PersistentVolumeClaimSpec{
				StorageClassName: ptr.To(expandableSC),
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
			},
		})
	}
	for ordinal := int32(0); ordinal < replicas; ordinal++ {
		w.addReplica(ordinal)
	}
	return w
}

func (w *world) addReplica(ordinal int32) {
	podName := PodName(testSTS, ordinal)
	w.pods[podName] = &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: podName, UID: types.UID("pod-uid-" + podName),
			Labels: map[string]string{"app": testSTS, appsv1.StatefulSetRevisionLabel: testRevision},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: testSTS,
				UID: w.sts.UID, Controller: ptr.To(true)}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, tmpl := range w.sts.Spec.VolumeClaimTemplates {
		size := tmpl.Spec.Resources.Requests[corev1.ResourceStorage]
		name := PVCName(tmpl.Name, testSTS, ordinal)
		w.pvcs[name] = &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name, ResourceVersion: "1",
				Labels: map[string]string{"app": testSTS}},
			Spec: corev1.PersistentVolumeClaimSpec{
				StorageClassName: ptr.To(expandableSC),
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size.DeepCopy()}},
			},
			Status: corev1.PersistentVolumeClaimStatus{
				Phase:    corev1.ClaimBound,
				Capacity: corev1.ResourceList{corev1.ResourceStorage: size.DeepCopy()},
			},
		}
	}
}

func (w *world) input() Input {
	return Input{StatefulSet: w.sts, Templates: w.templates, Desired: w.desired, OptedIn: w.optedIn, Pods: w.pods, PVCs: w.pvcs, StorageClasses: w.scs}
}

// decide runs Decide and, like the controller, stores the status annotation
// on the StatefulSet so the next decision sees it.
func (w *world) decide(t *testing.T) *Decision {
	t.Helper()
	in := w.input()
	before := snapshot(in)
	d := Decide(in)
	if after := snapshot(in); after != before {
		t.Fatalf("Decide mutated its input")
	}
	if d.Deferred == "" {
		value, err := d.Status().Encode()
		if err != nil {
			t.Fatal(err)
		}
		if w.sts.Annotations == nil {
			w.sts.Annotations = map[string]string{}
		}
		w.sts.Annotations[status.Annotation] = value
	}
	return d
}

func snapshot(in Input) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%#v", *in.StatefulSet)
	for _, name := range sortedKeys(in.Pods) {
		fmt.Fprintf(&b, "%#v", *in.Pods[name])
	}
	for _, name := range sortedKeys(in.PVCs) {
		fmt.Fprintf(&b, "%#v %s", *in.PVCs[name], in.PVCs[name].Spec.Resources.Requests.Storage())
	}
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	return keys
}

// setTemplate is the user changing a template size (in place, or by
// delete --cascade=orphan + re-apply); the StatefulSet controller observes it
// at once and, since the pod template did not change, keeps the revision.
func (w *world) setTemplate(name, size string) {
	for i := range w.sts.Spec.VolumeClaimTemplates {
		if w.sts.Spec.VolumeClaimTemplates[i].Name == name {
			w.sts.Spec.VolumeClaimTemplates[i].Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse(size)
		}
	}
	w.sts.Generation++
	w.sts.Status.ObservedGeneration = w.sts.Generation
}

// setDesired is the webhook recording a size for a template in the
// annotation (the controller hands the plan the templates with that size):
// the StatefulSet's spec and generation do not change. An empty size removes
// the desire.
func (w *world) setDesired(name, size string) {
	if size == "" {
		w.templates, w.desired = nil, ""
		return
	}
	w.templates = make([]corev1.PersistentVolumeClaim, len(w.sts.Spec.VolumeClaimTemplates))
	for i := range w.sts.Spec.VolumeClaimTemplates {
		w.sts.Spec.VolumeClaimTemplates[i].DeepCopyInto(&w.templates[i])
		if w.templates[i].Name == name {
			w.templates[i].Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse(size)
		}
	}
	w.desired = `[{"name":"` + name + `","storage":"` + size + `"}]`
}

// apply is the apiserver accepting our patches.
func (w *world) apply(d *Decision) {
	for _, p := range d.Patches() {
		pvc := w.pvcs[p.Name]
		if p.Resizes() {
			pvc.Spec.Resources.Requests[corev1.ResourceStorage] = p.To.DeepCopy()
		}
		if p.Class != nil {
			pvc.Spec.VolumeAttributesClassName = nil
			if p.Class.To != "" {
				pvc.Spec.VolumeAttributesClassName = ptr.To(p.Class.To)
			}
		}
		if pvc.Annotations == nil {
			pvc.Annotations = map[string]string{}
		}
		for k, v := range p.Annotations {
			pvc.Annotations[k] = v
		}
		for _, k := range p.RemoveAnnotations {
			delete(pvc.Annotations, k)
		}
		if pvc.Labels == nil && len(p.Labels) > 0 {
			pvc.Labels = map[string]string{}
		}
		for k, v := range p.Labels {
			pvc.Labels[k] = v
		}
		for _, k := range p.RemoveLabels {
			delete(pvc.Labels, k)
		}
		pvc.ResourceVersion += "+"
	}
}

// setTemplateMetadata gives a template labels and annotations (nil for
// none): in place in the live template, as the re-created StatefulSet has
// them, observed at once like setTemplate.
func (w *world) setTemplateMetadata(name string, labels, annotations map[string]string) {
	for i := range w.sts.Spec.VolumeClaimTemplates {
		if w.sts.Spec.VolumeClaimTemplates[i].Name == name {
			w.sts.Spec.VolumeClaimTemplates[i].Labels = labels
			w.sts.Spec.VolumeClaimTemplates[i].Annotations = annotations
		}
	}
	w.sts.Generation++
	w.sts.Status.ObservedGeneration = w.sts.Generation
}

// setTemplateClass is the user changing a template's VolumeAttributesClass
// ("" removes it), observed at once like setTemplate.
func (w *world) setTemplateClass(name, class string) {
	for i := range w.sts.Spec.VolumeClaimTemplates {
		if w.sts.Spec.VolumeClaimTemplates[i].Name == name {
			w.sts.Spec.VolumeClaimTemplates[i].Spec.VolumeAttributesClassName = classPtr(class)
		}
	}
	w.sts.Generation++
	w.sts.Status.ObservedGeneration = w.sts.Generation
}

// setDesiredClass is the webhook recording a class (and the live size) for
// a template: like setDesired, the spec and generation do not change.
func (w *world) setDesiredClass(name, class string) {
	w.templates = make([]corev1.PersistentVolumeClaim, len(w.sts.Spec.VolumeClaimTemplates))
	for i := range w.sts.Spec.VolumeClaimTemplates {
		w.sts.Spec.VolumeClaimTemplates[i].DeepCopyInto(&w.templates[i])
		if w.templates[i].Name == name {
			w.templates[i].Spec.VolumeAttributesClassName = classPtr(class)
			size := w.templates[i].Spec.Resources.Requests[corev1.ResourceStorage]
			w.desired = `[{"name":"` + name + `","storage":"` + size.String() + `","volumeAttributesClassName":"` + class + `"}]`
		}
	}
}

// setClass is someone (a person, or the provisioner) giving a PVC a class
// that the volume has: spec and status.
func (w *world) setClass(name, class string) {
	pvc := w.pvcs[name]
	pvc.Spec.VolumeAttributesClassName = classPtr(class)
	pvc.Status.CurrentVolumeAttributesClassName = classPtr(class)
	pvc.Status.ModifyVolumeStatus = nil
}

// finishModify is the resizer completing the modification of the named PVCs
// to their spec's class.
func (w *world) finishModify(names ...string) {
	for _, name := range names {
		pvc := w.pvcs[name]
		pvc.Status.CurrentVolumeAttributesClassName = classPtr(ptr.Deref(pvc.Spec.VolumeAttributesClassName, ""))
		pvc.Status.ModifyVolumeStatus = nil
		pvc.Status.Conditions = nil
	}
}

// markModify is the resizer reporting on the modification to the PVC's
// spec class: a modifyVolumeStatus and, when code or message is given, a
// ModifyVolumeError condition.
func (w *world) markModify(name string, st corev1.PersistentVolumeClaimModifyVolumeStatus, code, message string) {
	pvc := w.pvcs[name]
	pvc.Status.ModifyVolumeStatus = &corev1.ModifyVolumeStatus{Status: st, TargetVolumeAttributesClassName: ptr.Deref(pvc.Spec.VolumeAttributesClassName, "")}
	pvc.Status.Conditions = nil
	if code != "" || message != "" {
		pvc.Status.Conditions = []corev1.PersistentVolumeClaimCondition{{Type: corev1.PersistentVolumeClaimVolumeModifyVolumeError,
			Status: corev1.ConditionTrue, Reason: code, Message: message}}
	}
}

func classPtr(class string) *string {
	if class == "" {
		return nil
	}
	return ptr.To(class)
}

// finishResize is the resizer completing the expansion of the named PVCs.
func (w *world) finishResize(names ...string) {
	for _, name := range names {
		pvc := w.pvcs[name]
		pvc.Status.Capacity[corev1.ResourceStorage] = pvc.Spec.Resources.Requests.Storage().DeepCopy()
		pvc.Status.AllocatedResourceStatuses = nil
		pvc.Status.Conditions = nil
	}
}

// markInfeasible is the resizer reporting a KEP-1790 infeasible expansion.
func (w *world) markInfeasible(name string, state corev1.ClaimResourceStatus, cond corev1.PersistentVolumeClaimConditionType, code, message string) {
	pvc := w.pvcs[name]
	if state != "" {
		pvc.Status.AllocatedResourceStatuses = map[corev1.ResourceName]corev1.ClaimResourceStatus{corev1.ResourceStorage: state}
	}
	pvc.Status.AllocatedResources = corev1.ResourceList{corev1.ResourceStorage: pvc.Spec.Resources.Requests.Storage().DeepCopy()}
	pvc.Status.Conditions = []corev1.PersistentVolumeClaimCondition{{Type: cond, Status: corev1.ConditionTrue, Reason: code, Message: message}}
}

// patches renders the decision's patches as "pvc:from->to", a class change
// as "pvc:class:from->to" ("" for none), both as "pvc:from->to class:from->to",
// with " meta" (or "meta" alone) when the patch changes template metadata.
func patches(d *Decision) []string {
	var out []string
	for _, p := range d.Patches() {
		var parts []string
		if p.Resizes() {
			parts = append(parts, fmt.Sprintf("%s->%s", &p.From, &p.To))
		}
		if p.Class != nil {
			parts = append(parts, fmt.Sprintf("class:%s->%s", p.Class.From, p.Class.To))
		}
		if p.describeMetadata() != "" {
			parts = append(parts, "meta")
		}
		out = append(out, p.Name+":"+strings.Join(parts, " "))
	}
	return out
}

// reasons renders a template's replica reasons in ordinal order.
func reasons(d *Decision, template string) []string {
	return perReplica(d, template, func(rd ReplicaDecision) string { return rd.Reason })
}

// states renders a template's replica states in ordinal order.
func states(d *Decision, template string) []string {
	return perReplica(d, template, func(rd ReplicaDecision) string { return string(rd.State) })
}

func perReplica(d *Decision, template string, render func(ReplicaDecision) string) []string {
	for _, td := range d.Templates {
		if td.Name == template {
			var out []string
			for _, rd := range td.Replicas {
				out = append(out, render(rd))
			}
			return out
		}
	}
	return nil
}

// events renders the decision's events as "Reason:pvc".
func events(d *Decision) []string {
	var out []string
	for _, td := range d.Templates {
		for _, rd := range td.Replicas {
			if rd.Event != nil {
				out = append(out, rd.Event.Reason+":"+rd.PVCName)
			}
		}
	}
	return out
}

func templateStatus(t *testing.T, d *Decision, name string) status.Template {
	t.Helper()
	st := d.Status()
	ts := st.Template(name)
	if ts == nil {
		t.Fatalf("no status for template %s in %+v", name, st)
	}
	return *ts
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func expect(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !equalStrings(got, want) {
		t.Errorf("%s:\n got  %q\n want %q", what, got, want)
	}
}

func expectStatus(t *testing.T, d *Decision, template string, ready, infeasible int32, finished int64) {
	t.Helper()
	ts := templateStatus(t, d, template)
	if ts.ReadyReplicas != ready || ts.InfeasibleReplicas != infeasible || ts.FinishedReconciliationGeneration != finished {
		t.Errorf("status of %s: ready=%d infeasible=%d finished=%d (message %q); want ready=%d infeasible=%d finished=%d",
			template, ts.ReadyReplicas, ts.InfeasibleReplicas, ts.FinishedReconciliationGeneration, ts.Message,
			ready, infeasible, finished)
	}
}

func pvcNames(template string, ordinals ...int32) []string {
	var out []string
	for _, o := range ordinals {
		out = append(out, PVCName(template, testSTS, o))
	}
	return out
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func resourceMust(s string) resource.Quantity { return resource.MustParse(s) }
