package controller

import (
	"encoding/json"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/desired"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/plan"
)

// The merge patch body carries only what the patch changes: the class alone
// (the request untouched), a JSON null to unset it, null for removed
// annotations; and both the request and the class in one body.
func TestPVCMergePatchClass(t *testing.T) {
	for _, tc := range []struct {
		name  string
		patch plan.PVCPatch
		want  string
	}{
		{"class only", plan.PVCPatch{ResourceVersion: "7", Class: &plan.ClassChange{From: "", To: "gold"},
			Annotations: map[string]string{plan.AnnotationModifiedClass: "gold"}},
			`{"metadata":{"annotations":{"csi-resizer.io/modified-volume-attributes-class":"gold"},"resourceVersion":"7"},"spec":{"volumeAttributesClassName":"gold"}}`},
		{"rollback to unset", plan.PVCPatch{ResourceVersion: "8", Class: &plan.ClassChange{From: "gold", To: ""},
			Annotations:       map[string]string{plan.AnnotationStatefulSet: "web"},
			RemoveAnnotations: []string{plan.AnnotationModifiedClass, plan.AnnotationPreModifyClass}},
			`{"metadata":{"annotations":{"csi-resizer.io/modified-volume-attributes-class":null,"csi-resizer.io/pre-modify-volume-attributes-class":null,"csi-resizer.io/statefulset":"web"},"resourceVersion":"8"},"spec":{"volumeAttributesClassName":null}}`},
		{"size and class", plan.PVCPatch{ResourceVersion: "9", From: resource.MustParse("1Gi"), To: resource.MustParse("2Gi"),
			Class: &plan.ClassChange{From: "silver", To: "gold"}, Annotations: map[string]string{}},
			`{"metadata":{"annotations":{},"resourceVersion":"9"},"spec":{"resources":{"requests":{"storage":"2Gi"}},"volumeAttributesClassName":"gold"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, err := pvcMergePatch(&tc.patch)
			if err != nil {
				t.Fatal(err)
			}
			if string(body) != tc.want {
				t.Errorf("got  %s\nwant %s", body, tc.want)
			}
		})
	}
}

// A class in the desired templates is set on the PVCs through the API in a
// class-only patch; the StatefulSet is finished once the resizer reports the
// class current.
func TestDesiredClassIsSetOnThePVCs(t *testing.T) {
	const value = `[{"name":"data","storage":"1Gi","volumeAttributesClassName":"gold"}]`
	h := newHarness(t, withDesire(cluster(2, appsv1.ParallelPodManagement, "1Gi", "1Gi"), value)...)
	if err := h.sync(); err != nil {
		t.Fatal(err)
	}
	patches := h.actions("patch", "persistentvolumeclaims")
	if len(patches) != 2 {
		t.Fatalf("%d PVC patches, want 2", len(patches))
	}
	var body map[string]map[string]any
	if err := json.Unmarshal(patches[0].(clienttesting.PatchAction).GetPatch(), &body); err != nil {
		t.Fatal(err)
	}
	if _, ok := body["spec"]["resources"]; ok || body["spec"]["volumeAttributesClassName"] != "gold" {
		t.Errorf("patch body %v, want the class alone in spec", body)
	}
	for _, name := range []string{"data-web-0", "data-web-1"} {
		pvc := h.pvc(name)
		if c := pvc.Spec.VolumeAttributesClassName; c == nil || *c != "gold" || storageOf(pvc) != "1Gi" {
			t.Errorf("%s: class %v, request %s; want gold and the request unchanged", name, c, storageOf(pvc))
		}
		for k, v := range map[string]string{"keep": "me", plan.AnnotationModifiedClass: "gold", plan.AnnotationPreModifyClass: "", plan.AnnotationStatefulSet: "web"} {
			if got, ok := pvc.Annotations[k]; !ok || got != v {
				t.Errorf("%s: annotation %s = %q (present %v), want %q", name, k, got, ok, v)
			}
		}
		if _, ok := pvc.Annotations[plan.AnnotationResizedStorage]; ok {
			t.Errorf("%s: a class-only patch wrote the size annotation", name)
		}
	}
	if st := h.status(); st.Templates[0].ReadyReplicas != 0 || st.Templates[0].FinishedReconciliationGeneration != 0 {
		t.Errorf("status %+v, want nothing ready before the resizer modified the volumes", st)
	}

	for _, name := range []string{"data-web-0", "data-web-1"} {
		h.updatePVCStatus(name, func(s *corev1.PersistentVolumeClaimStatus) { s.CurrentVolumeAttributesClassName = ptr.To("gold") })
	}
	h.catchUp()
	if err := h.sync(); err != nil {
		t.Fatal(err)
	}
	if st := h.status(); st.Templates[0].ReadyReplicas != 2 || st.Templates[0].FinishedReconciliationGeneration != 1 {
		t.Errorf("status %+v, want both replicas ready and the template finished", st)
	}
	if ev := h.events(); len(ev) != 0 {
		t.Errorf("events %q", ev)
	}
}

// An infeasible class is told once on the StatefulSet (VolumeModifyInfeasible
// with the driver's message) and in the status; cancelling the desire rolls
// the class back to unset through the API (a JSON null), removing the
// episode's annotations.
func TestInfeasibleClassIsSurfacedAndRolledBack(t *testing.T) {
	objs := withDesire(cluster(1, appsv1.ParallelPodManagement, "1Gi", "1Gi"), `[{"name":"data","storage":"1Gi","volumeAttributesClassName":"gold"}]`)
	for _, o := range objs {
		if p, ok := o.(*corev1.PersistentVolumeClaim); ok {
			p.Spec.VolumeAttributesClassName = ptr.To("gold")
			p.Annotations[plan.AnnotationModifiedClass], p.Annotations[plan.AnnotationPreModifyClass] = "gold", ""
			p.Status.ModifyVolumeStatus = &corev1.ModifyVolumeStatus{Status: corev1.PersistentVolumeClaimModifyVolumeInfeasible, TargetVolumeAttributesClassName: "gold"}
			p.Status.Conditions = []corev1.PersistentVolumeClaimCondition{{Type: corev1.PersistentVolumeClaimVolumeModifyVolumeError,
				Status: corev1.ConditionTrue, Reason: "InvalidArgument", Message: "tier gold is not offered"}}
		}
	}
	h := newHarness(t, objs...)
	if err := h.sync(); err != nil {
		t.Fatal(err)
	}
	ev := h.events()
	if len(ev) != 1 || !hasEvent(ev, "Warning", plan.EventVolumeModifyInfeasible, "data-web-0", "InvalidArgument: tier gold is not offered") {
		t.Errorf("events %q, want one %s with the driver's message", ev, plan.EventVolumeModifyInfeasible)
	}
	if st := h.status(); st.Templates[0].InfeasibleReplicas != 1 || !strings.Contains(st.Templates[0].Message, "tier gold is not offered") {
		t.Errorf("status %+v", st)
	}
	h.resyncChangesNothing()

	// Git reverted: the webhook removed the desire.
	sts := h.statefulSet()
	delete(sts.Annotations, desired.Annotation)
	newVersion(sts)
	if _, err := h.client.AppsV1().StatefulSets(ns).Update(h.ctx, sts, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.catchUp()
	if err := h.sync(); err != nil {
		t.Fatal(err)
	}
	patches := h.actions("patch", "persistentvolumeclaims")
	if len(patches) != 1 || !strings.Contains(string(patches[0].(clienttesting.PatchAction).GetPatch()), `"volumeAttributesClassName":null`) {
		t.Fatalf("patches %v, want one rollback to unset", patches)
	}
	pvc := h.pvc("data-web-0")
	if pvc.Spec.VolumeAttributesClassName != nil {
		t.Errorf("class %q after the rollback, want unset", *pvc.Spec.VolumeAttributesClassName)
	}
	for _, k := range []string{plan.AnnotationModifiedClass, plan.AnnotationPreModifyClass} {
		if _, ok := pvc.Annotations[k]; ok {
			t.Errorf("annotation %s left after the rollback", k)
		}
	}
}

// The resizer reports a modification only in the PVC's status
// (currentVolumeAttributesClassName, modifyVolumeStatus): such an update
// queues the StatefulSet (docs/design.md §3.10 rule 14 reads it), while a
// resync of the same version does not.
func TestPVCStatusOnlyUpdateQueuesTheStatefulSet(t *testing.T) {
	h := newHarness(t, cluster(1, appsv1.ParallelPodManagement, "1Gi", "1Gi")...)
	old := pvc(0, "1Gi")
	old.ResourceVersion = "5"
	h.ctrl.updatePVC(old, old.DeepCopy())
	if n := h.ctrl.queue.Len(); n != 0 {
		t.Fatalf("a resync queued %d keys", n)
	}
	updated := old.DeepCopy()
	updated.ResourceVersion = "6"
	updated.Status.ModifyVolumeStatus = &corev1.ModifyVolumeStatus{Status: corev1.PersistentVolumeClaimModifyVolumeInfeasible, TargetVolumeAttributesClassName: "gold"}
	h.ctrl.updatePVC(old, updated)
	if n := h.ctrl.queue.Len(); n != 1 {
		t.Fatalf("a modifyVolumeStatus update queued %d keys, want 1", n)
	}
	key, _ := h.ctrl.queue.Get()
	h.ctrl.queue.Done(key)
	if key != ns+"/web" {
		t.Errorf("queued %q, want %s/web", key, ns)
	}
	done := updated.DeepCopy()
	done.ResourceVersion = "7"
	done.Status.ModifyVolumeStatus, done.Status.CurrentVolumeAttributesClassName = nil, ptr.To("gold")
	h.ctrl.updatePVC(updated, done)
	if n := h.ctrl.queue.Len(); n != 1 {
		t.Errorf("a currentVolumeAttributesClassName update queued %d keys, want 1", n)
	}
}
