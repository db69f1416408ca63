package controller

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/csi-resizer/csi-resizer/pkg/internal/reconcile"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/plan"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/status"
)

// The full loop with workers: an OrderedReady StatefulSet whose template was
// raised is resized one replica at a time as the "resizer" (the test)
// finishes each PVC, and the status annotation ends finished for the
// generation.
func TestRunOrderedReadyEndToEnd(t *testing.T) {
	h := newHarness(t, cluster(3, appsv1.OrderedReadyPodManagement, "2Gi", "1Gi")...)
	h.run()

	for i, name := range []string{"data-web-0", "data-web-1", "data-web-2"} {
		h.eventually(name+" patched to 2Gi", func() bool { return storageOf(h.pvc(name)) == "2Gi" })
		// OrderedReady: the next replica is untouched while this one resizes.
		if i < 2 {
			next := []string{"data-web-1", "data-web-2"}[i]
			if got := storageOf(h.pvc(next)); got != "1Gi" {
				t.Fatalf("%s patched to %s while %s was still resizing", next, got, name)
			}
		}
		h.eventually("status to show progress", func() bool {
			st := h.status()
			return st != nil && st.Templates[0].ReadyReplicas == int32(i)
		})
		h.finishResize(name)
	}
	h.eventually("finished status", func() bool {
		st := h.status()
		return st != nil && st.ObservedGeneration == 1 && st.Templates[0].ReadyReplicas == 3 &&
			st.Templates[0].FinishedReconciliationGeneration == 1
	})

	pvc := h.pvc("data-web-1")
	for k, v := range map[string]string{plan.AnnotationStatefulSet: "web", plan.AnnotationPreResizeStorage: "1Gi",
		plan.AnnotationResizedStorage: "2Gi", "keep": "me"} {
		if pvc.Annotations[k] != v {
			t.Errorf("PVC annotation %s=%q, want %q (all: %v)", k, pvc.Annotations[k], v, pvc.Annotations)
		}
	}
	// KEP-661 Test Plan, feature disabled: "No change to existing
	// StatefulSet functionality" / "The new StatefulSet status field is not
	// exposed": the controller writes nothing of the StatefulSet but its own
	// annotation: no spec, no status. (How many times it writes, one patch
	// per PVC and a status write only when it changes, depends on when the
	// echoes of its writes arrive: proven on the real apiserver, in
	// test/integration/statefulset_test.go.)
	for _, a := range h.actions("patch", "statefulsets") {
		body := string(a.(clienttesting.PatchActionImpl).GetPatch())
		var patch map[string]map[string]map[string]any
		if err := json.Unmarshal([]byte(body), &patch); err != nil || len(patch) != 1 || len(patch["metadata"]) != 1 ||
			len(patch["metadata"]["annotations"]) != 1 || patch["metadata"]["annotations"][status.Annotation] == nil {
			t.Errorf("StatefulSet patch touches more than the status annotation: %s", body)
		}
	}
	if n := len(h.actions("update", "statefulsets")); n != 0 {
		t.Errorf("%d StatefulSet updates", n)
	}
	if got := h.events(); len(got) != 0 {
		t.Errorf("unexpected events %q", got)
	}
}

// KEP-661 Test Plan: "For burst, the StatefulSet reconciliation should
// continue to the next replica when it encounters the patching error."
// Permanent error (invalid): Warning FailedToPatchPVC, the key is not
// requeued (no hot loop), and the status reports the replica.
func TestPermanentPatchErrorParallel(t *testing.T) {
	h := newHarness(t, cluster(3, appsv1.ParallelPodManagement, "2Gi", "1Gi")...)
	h.client.PrependReactor("patch", "persistentvolumeclaims", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.(clienttesting.PatchActionImpl).GetName() != "data-web-1" {
			return false, nil, nil
		}
		return true, nil, apierrors.NewInvalid(schema.GroupKind{Kind: "PersistentVolumeClaim"}, "data-web-1",
			field.ErrorList{field.Forbidden(field.NewPath("spec", "resources", "requests", "storage"), "field can not be less than status.capacity")})
	})
	h.ctrl.queue.Add(ns + "/web")
	if !reconcile.ProcessNext(h.ctx, h.ctrl.queue, "statefulset", h.ctrl.syncKey) {
		t.Fatal("queue shut down")
	}
	if n := h.ctrl.queue.NumRequeues(ns + "/web"); n != 0 {
		t.Errorf("%d requeues after a permanent error, want 0", n)
	}
	if storageOf(h.pvc("data-web-0")) != "2Gi" || storageOf(h.pvc("data-web-2")) != "2Gi" {
		t.Error("burst: the other replicas were not patched past the failing one")
	}
	ev := h.events()
	if !hasEvent(ev, "Warning", plan.EventFailedToPatchPVC, "data-web-1", "field can not be less than status.capacity") || len(ev) != 1 {
		t.Errorf("events %q", ev)
	}
	st := h.status()
	if st.Templates[0].InfeasibleReplicas != 1 || !strings.Contains(st.Templates[0].Message, "data-web-1") {
		t.Errorf("status %+v", st)
	}
	h.wantMetrics("statefulset_resizer_pvc_patches_total", map[string]float64{
		`result="error"`: 0, `result="rejected"`: 1, `result="success"`: 2})

	// Re-evaluation (any later change of the StatefulSet) retries the patch
	// but does not repeat the event or rewrite an unchanged status.
	h.resyncChangesNothing()
}

// KEP-661 Test Plan: "For monotonic, the StatefulSet reconciliation should
// stay stuck on the first replica when it encounters the patching error."
func TestPermanentPatchErrorOrderedReady(t *testing.T) {
	h := newHarness(t, cluster(2, appsv1.OrderedReadyPodManagement, "2Gi", "1Gi")...)
	h.client.PrependReactor("patch", "persistentvolumeclaims", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "persistentvolumeclaims"}, "data-web-0",
			errors.New("exceeded quota: requests.storage"))
	})
	if err := h.sync(); err != nil {
		t.Fatalf("permanent error returned for retry: %v", err)
	}
	if n := len(h.actions("patch", "persistentvolumeclaims")); n != 1 {
		t.Errorf("%d PVC patch attempts, want 1 (stuck on the first replica)", n)
	}
	if !hasEvent(h.events(), plan.EventFailedToPatchPVC, "data-web-0", "exceeded quota") {
		t.Error("no FailedToPatchPVC event")
	}
}

// Transient errors are retried with backoff through the rate-limited queue.
func TestTransientPatchErrorIsRetried(t *testing.T) {
	h := newHarness(t, cluster(1, appsv1.ParallelPodManagement, "2Gi", "1Gi")...)
	failures := 1
	h.client.PrependReactor("patch", "persistentvolumeclaims", func(clienttesting.Action) (bool, runtime.Object, error) {
		if failures > 0 {
			failures--
			return true, nil, apierrors.NewServerTimeout(schema.GroupResource{Resource: "persistentvolumeclaims"}, "patch", 1)
		}
		return false, nil, nil
	})
	key := ns + "/web"
	h.ctrl.queue.Add(key)
	reconcile.ProcessNext(h.ctx, h.ctrl.queue, "statefulset", h.ctrl.syncKey)
	if n := h.ctrl.queue.NumRequeues(key); n != 1 {
		t.Fatalf("requeues after a transient error = %d, want 1", n)
	}
	if !hasEvent(h.events(), "Warning", plan.EventFailedToPatchPVC, "will retry") {
		t.Error("transient error not recorded on the StatefulSet")
	}
	// The item comes back after the (1ms) backoff and succeeds.
	reconcile.ProcessNext(h.ctx, h.ctrl.queue, "statefulset", h.ctrl.syncKey)
	if n := h.ctrl.queue.NumRequeues(key); n != 0 {
		t.Errorf("requeues after success = %d, want 0 (forgotten)", n)
	}
	if storageOf(h.pvc("data-web-0")) != "2Gi" {
		t.Error("PVC not patched on retry")
	}
}

// A PVC changed since the controller observed it is not overwritten: the
// patch carries the observed resourceVersion, and the apiserver's conflict is
// transient: the key is retried, no event, nothing counted as rejected. (That
// the apiserver refuses a stale precondition is proven on the real one, in
// test/integration.)
func TestPatchConflictIsRetriedFromTheNewState(t *testing.T) {
	objs := cluster(1, appsv1.ParallelPodManagement, "2Gi", "1Gi")
	objs[3].(*corev1.PersistentVolumeClaim).ResourceVersion = "7"
	h := newHarness(t, objs...)
	var sent []string
	h.client.PrependReactor("patch", "persistentvolumeclaims", func(a clienttesting.Action) (bool, runtime.Object, error) {
		sent = append(sent, string(a.(clienttesting.PatchActionImpl).GetPatch()))
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "persistentvolumeclaims"}, "data-web-0",
			errors.New("the object has been modified; please apply your changes to the latest version and try again"))
	})
	key := ns + "/web"
	h.ctrl.queue.Add(key)
	reconcile.ProcessNext(h.ctx, h.ctrl.queue, "statefulset", h.ctrl.syncKey)
	if len(sent) != 1 || !strings.Contains(sent[0], `"resourceVersion":"7"`) {
		t.Errorf("patches %q, want one carrying the observed resourceVersion 7", sent)
	}
	if n := h.ctrl.queue.NumRequeues(key); n != 1 {
		t.Errorf("requeues after a conflict = %d, want 1 (transient)", n)
	}
	if ev := h.events(); len(ev) != 0 {
		t.Errorf("events %q for a conflict, want none", ev)
	}
	if st := h.status(); st.Templates[0].InfeasibleReplicas != 0 {
		t.Errorf("status %+v: a conflict counted as infeasible", st)
	}
}

// docs/design.md §3 rule 4: a KEP-1790 infeasible PVC is surfaced on the
// StatefulSet: event VolumeResizeInfeasible with the PVC and the driver's
// message, infeasibleReplicas and message in the status, the gauge.
func TestInfeasiblePVCIsSurfaced(t *testing.T) {
	objs := cluster(2, appsv1.OrderedReadyPodManagement, "10Gi", "10Gi")
	for _, o := range objs {
		if p, ok := o.(*corev1.PersistentVolumeClaim); ok {
			p.Status.Capacity[corev1.ResourceStorage] = resource.MustParse("1Gi")
			if p.Name == "data-web-0" {
				p.Status.AllocatedResourceStatuses = map[corev1.ResourceName]corev1.ClaimResourceStatus{
					corev1.ResourceStorage: corev1.PersistentVolumeClaimControllerResizeInfeasible}
				p.Status.Conditions = []corev1.PersistentVolumeClaimCondition{{Type: corev1.PersistentVolumeClaimControllerResizeError,
					Status: corev1.ConditionTrue, Reason: "OutOfRange", Message: "requested 10Gi exceeds the pool's 8Gi"}}
			}
		}
	}
	h := newHarness(t, objs...)
	if err := h.sync(); err != nil {
		t.Fatal(err)
	}
	ev := h.events()
	if !hasEvent(ev, "Warning", plan.EventVolumeResizeInfeasible, "data-web-0", "OutOfRange: requested 10Gi exceeds the pool's 8Gi") {
		t.Errorf("events %q", ev)
	}
	st := h.status()
	want := status.Template{TemplateName: "data", ReadyReplicas: 0, InfeasibleReplicas: 1,
		Message: "data-web-0: cannot resize to 10Gi: OutOfRange: requested 10Gi exceeds the pool's 8Gi"}
	if st.ObservedGeneration != 1 || len(st.Templates) != 1 || st.Templates[0] != want {
		t.Errorf("status %+v, want %+v", st, want)
	}
	const series = `namespace="ns",statefulset="web",template="data"`
	h.wantMetrics("statefulset_resizer_replicas_infeasible", map[string]float64{series: 1})
	h.wantMetrics("statefulset_resizer_replicas_pending", map[string]float64{series: 1})

	// Same state again: no new event, no status write.
	h.resyncChangesNothing()

	// The StatefulSet goes away: its series go too.
	if err := h.client.AppsV1().StatefulSets(ns).Delete(h.ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.catchUp()
	if err := h.sync(); err != nil {
		t.Fatal(err)
	}
	h.wantMetrics("statefulset_resizer_replicas_infeasible", map[string]float64{})
	h.wantMetrics("statefulset_resizer_replicas_pending", map[string]float64{})
}

// KEP-661 "Errors When Patching": a StorageClass without
// allowVolumeExpansion is a permanent error, reported without an API call;
// allowing expansion later resumes the resize (StorageClass watch).
func TestStorageClassWithoutExpansion(t *testing.T) {
	objs := cluster(1, appsv1.ParallelPodManagement, "2Gi", "1Gi")
	objs[1] = storageClass(scName, false)
	h := newHarness(t, objs...)
	h.run()
	h.eventually("FailedToPatchPVC event", func() bool {
		select {
		case e := <-h.recorder.Events:
			return strings.Contains(e, plan.EventFailedToPatchPVC) && strings.Contains(e, "does not allow volume expansion")
		default:
			return false
		}
	})
	if n := len(h.actions("patch", "persistentvolumeclaims")); n != 0 {
		t.Errorf("%d doomed PVC patches", n)
	}
	sc := storageClass(scName, true)
	if _, err := h.client.StorageV1().StorageClasses().Update(h.ctx, sc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually("patch after the StorageClass allows expansion", func() bool { return storageOf(h.pvc("data-web-0")) == "2Gi" })
}

// The orphan-recreate flow: kubectl delete sts --cascade=orphan, re-apply
// with a bigger template. The new object (new UID, generation 1) adopts the
// same pods and PVCs; the controller treats it as the same workload.
func TestOrphanRecreate(t *testing.T) {
	h := newHarness(t, cluster(2, appsv1.ParallelPodManagement, "1Gi", "1Gi")...)
	h.run()
	h.eventually("initial status", func() bool {
		st := h.status()
		return st != nil && st.Templates[0].FinishedReconciliationGeneration == 1
	})

	// delete --cascade=orphan: the StatefulSet goes, pods lose their owner.
	if err := h.client.AppsV1().StatefulSets(ns).Delete(h.ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		h.updatePod(pod("", i))
	}
	// Re-apply with 2Gi: a new object. The StatefulSet controller observes it
	// with the same revision (pod template unchanged) and adopts the pods.
	if _, err := h.client.AppsV1().StatefulSets(ns).Create(h.ctx, statefulSet("uid-2", 2, appsv1.ParallelPodManagement, "2Gi"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually("orphaned pods' PVCs patched", func() bool {
		return storageOf(h.pvc("data-web-0")) == "2Gi" && storageOf(h.pvc("data-web-1")) == "2Gi"
	})
	h.updatePod(pod("uid-2", 0)) // adoption
	h.finishResize("data-web-0")
	h.finishResize("data-web-1")
	h.eventually("finished for the new object's generation", func() bool {
		st := h.status()
		return st != nil && st.Templates[0].ReadyReplicas == 2 && st.Templates[0].FinishedReconciliationGeneration == 1
	})
}

func TestEventMapping(t *testing.T) {
	objs := cluster(1, appsv1.ParallelPodManagement, "1Gi", "1Gi")
	other := statefulSet("uid-o", 1, appsv1.ParallelPodManagement, "1Gi")
	other.Name = "web-data" // PVC "data-web-data-0" must map here, not to "web"
	objs = append(objs, other)
	h := newHarness(t, objs...)

	check := func(what string, got []string, want ...string) {
		t.Helper()
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s: got %v, want %v", what, got, want)
		}
	}
	check("PVC by name pattern", h.ctrl.statefulSetsForPVC(pvc(0, "1Gi")), "ns/web")
	p := pvc(0, "1Gi")
	p.Name = "data-web-data-0"
	check("PVC of the dashed StatefulSet", h.ctrl.statefulSetsForPVC(p), "ns/web-data")
	p.Name = "data-web-x"
	check("PVC with a non-ordinal suffix", h.ctrl.statefulSetsForPVC(p))
	p.Name, p.Annotations = "renamed", map[string]string{plan.AnnotationStatefulSet: "web"}
	check("PVC by annotation", h.ctrl.statefulSetsForPVC(p), "ns/web")

	check("pod by controller reference", h.ctrl.statefulSetsForPod(pod("uid-1", 0)), "ns/web")
	check("orphaned pod by name", h.ctrl.statefulSetsForPod(pod("", 3)), "ns/web")
	rs := pod("", 0)
	rs.OwnerReferences = []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "x", Controller: ptrTrue()}}
	check("pod of another controller", h.ctrl.statefulSetsForPod(rs))

	for name, want := range map[string]bool{"web-0": true, "web-12": true, "web-": false, "web-01": false, "web--1": false, "web-a": false} {
		if got := isOrdinalName(name, "web-"); got != want {
			t.Errorf("isOrdinalName(%q) = %v", name, got)
		}
	}
}

func ptrTrue() *bool { return ptr.To(true) }

func TestTransforms(t *testing.T) {
	p := pod("uid-1", 0)
	p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}
	p.Annotations = map[string]string{"big": strings.Repeat("x", 100)}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady}}
	out, err := transformPod(p)
	if err != nil {
		t.Fatal(err)
	}
	slim := out.(*corev1.Pod)
	if slim.Name != "web-0" || slim.Labels[appsv1.StatefulSetRevisionLabel] != revision || slim.Status.Phase != corev1.PodRunning ||
		len(slim.OwnerReferences) != 1 || slim.ManagedFields != nil || slim.Annotations != nil ||
		len(slim.Spec.Containers) != 0 || len(slim.Status.Conditions) != 0 {
		t.Errorf("slim pod %+v", slim)
	}

	sts := statefulSet("uid-1", 1, appsv1.ParallelPodManagement, "1Gi")
	sts.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	sts.Annotations = map[string]string{lastAppliedAnnotation: "{...}", status.Annotation: "{}"}
	out, _ = transformStatefulSet(sts)
	s := out.(*appsv1.StatefulSet)
	if s.ManagedFields != nil || s.Annotations[lastAppliedAnnotation] != "" || s.Annotations[status.Annotation] != "{}" ||
		len(s.Spec.Template.Spec.Containers) != 0 || len(s.Spec.VolumeClaimTemplates) != 1 {
		t.Errorf("transformed StatefulSet %+v", s)
	}

	c := pvc(0, "1Gi")
	c.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "x"}}
	out, _ = stripManagedFields(c)
	if out.(*corev1.PersistentVolumeClaim).ManagedFields != nil || out.(*corev1.PersistentVolumeClaim).Annotations["keep"] != "me" {
		t.Errorf("transformed PVC %+v", out)
	}
	sc := storageClass("x", true)
	sc.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "x"}}
	out, _ = stripManagedFields(sc)
	if out.(metav1.Object).GetManagedFields() != nil {
		t.Error("managedFields kept")
	}
	// Tombstones and other types pass through.
	if out, _ := transformPod("x"); out != "x" {
		t.Error("non-pod changed")
	}
}

func TestPVCMergePatch(t *testing.T) {
	body, err := pvcMergePatch(&plan.PVCPatch{ResourceVersion: "42", To: resource.MustParse("10Gi"),
		Annotations: map[string]string{plan.AnnotationStatefulSet: "web"}})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"metadata":{"annotations":{"csi-resizer.io/statefulset":"web"},"resourceVersion":"42"},"spec":{"resources":{"requests":{"storage":"10Gi"}}}}`
	if string(body) != want {
		t.Errorf("got  %s\nwant %s", body, want)
	}
	body, _ = pvcMergePatch(&plan.PVCPatch{To: resource.MustParse("1Gi")})
	var decoded map[string]map[string]any
	if err := json.Unmarshal(body, &decoded); err != nil || decoded["metadata"]["resourceVersion"] != nil {
		t.Errorf("no resourceVersion expected without one observed: %s", body)
	}
}

func TestIsPermanent(t *testing.T) {
	gr := schema.GroupResource{Resource: "persistentvolumeclaims"}
	for _, tc := range []struct {
		err       error
		permanent bool
	}{
		{apierrors.NewInvalid(schema.GroupKind{Kind: "PersistentVolumeClaim"}, "x", nil), true},
		{apierrors.NewForbidden(gr, "x", errors.New("only dynamically provisioned pvc can be resized")), true},
		{apierrors.NewBadRequest("x"), true},
		{apierrors.NewConflict(gr, "x", errors.New("changed")), false},
		{apierrors.NewServerTimeout(gr, "patch", 1), false},
		{apierrors.NewTooManyRequests("slow down", 1), false},
		{apierrors.NewInternalError(errors.New("etcd")), false},
		{apierrors.NewNotFound(gr, "x"), false},
		{context.DeadlineExceeded, false},
	} {
		if got := isPermanent(tc.err); got != tc.permanent {
			t.Errorf("isPermanent(%v) = %v", tc.err, got)
		}
	}
}

func TestEventCache(t *testing.T) {
	e := newEventCache()
	if got := e.update("k", map[string]string{"a": "1", "b": "1"}, nil); len(got) != 2 {
		t.Errorf("first: %v", got)
	}
	if got := e.update("k", map[string]string{"a": "1", "b": "2"}, nil); strings.Join(got, ",") != "b" {
		t.Errorf("changed message: %v", got)
	}
	e.update("k", map[string]string{"b": "2"}, nil) // a resolved
	if got := e.update("k", map[string]string{"a": "1", "b": "2"}, nil); strings.Join(got, ",") != "a" {
		t.Errorf("recurring problem not reported again: %v", got)
	}
	// a is kept (pending, e.g. the resizer retrying): when its event
	// returns, it is not new; b, not kept, is forgotten.
	e.update("k", nil, map[string]bool{"a": true})
	if got := e.update("k", map[string]string{"a": "1", "b": "2"}, nil); strings.Join(got, ",") != "b" {
		t.Errorf("after a kept gap: %v, want only the forgotten b", got)
	}
	// Keeping a PVC with no remembered event remembers nothing.
	e.update("k", nil, map[string]bool{"c": true})
	if len(e.seen) != 0 {
		t.Errorf("keep without an event left state %v", e.seen)
	}
	e.update("k", map[string]string{"a": "1"}, nil)
	e.forget("k")
	if len(e.seen) != 0 {
		t.Error("forget left state")
	}
	e.update("k", nil, nil)
	if len(e.seen) != 0 {
		t.Error("empty update left state")
	}
}

// docs/design.md §3 rule 4 for errors that are not infeasible: a ControllerResizeError
// with reason Internal (state still ControllerResizeInProgress: csi-resizer
// retries) reaches the StatefulSet as a VolumeResizeFailing event and an
// entry in the status message, without counting the replica as infeasible.
// The event comes once per problem: not again when csi-resizer clears the
// error to retry and sets it again (with another driver message), only when
// the error code changes.
func TestFailingResizeIsSurfacedOncePerProblem(t *testing.T) {
	objs := cluster(2, appsv1.ParallelPodManagement, "10Gi", "10Gi")
	for _, o := range objs {
		if p, ok := o.(*corev1.PersistentVolumeClaim); ok {
			p.Status.Capacity[corev1.ResourceStorage] = resource.MustParse("1Gi")
		}
	}
	h := newHarness(t, objs...)
	setError := func(code, message string) {
		h.updatePVCStatus("data-web-1", func(s *corev1.PersistentVolumeClaimStatus) {
			s.AllocatedResources = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")}
			s.AllocatedResourceStatuses = map[corev1.ResourceName]corev1.ClaimResourceStatus{
				corev1.ResourceStorage: corev1.PersistentVolumeClaimControllerResizeInProgress}
			s.Conditions = nil
			if code != "" {
				s.Conditions = []corev1.PersistentVolumeClaimCondition{{Type: corev1.PersistentVolumeClaimControllerResizeError,
					Status: corev1.ConditionTrue, Reason: code, Message: message}}
			}
		})
		h.catchUp()
		if err := h.sync(); err != nil {
			t.Fatal(err)
		}
	}
	wantStatus := func(step, message string) {
		t.Helper()
		want := status.Template{TemplateName: "data", InfeasibleReplicas: 0, Message: message}
		if st := h.status(); len(st.Templates) != 1 || st.Templates[0] != want {
			t.Errorf("%s: status %+v, want %+v", step, st, want)
		}
	}

	setError("Internal", "backend busy (request 1)")
	if ev := h.events(); len(ev) != 1 || !hasEvent(ev, "Warning", plan.EventVolumeResizeFailing, "data-web-1",
		"resize to 10Gi failing, retried by csi-resizer: Internal: backend busy (request 1)") {
		t.Errorf("events %q, want one VolumeResizeFailing for data-web-1", ev)
	}
	wantStatus("failing", "data-web-1: resize to 10Gi failing, retried by csi-resizer: Internal: backend busy (request 1)")
	h.wantMetrics("statefulset_resizer_replicas_infeasible", map[string]float64{`namespace="ns",statefulset="web",template="data"`: 0})

	// csi-resizer starts its retry: a final error is cleared meanwhile.
	setError("", "")
	wantStatus("retrying", "")
	// The retry fails the same way, with another request id in the message.
	setError("Internal", "backend busy (request 2)")
	if ev := h.events(); len(ev) != 0 {
		t.Errorf("events after a retry with the same error: %q, want none", ev)
	}
	wantStatus("failing again", "data-web-1: resize to 10Gi failing, retried by csi-resizer: Internal: backend busy (request 2)")

	// Another error code is another problem.
	setError("Unavailable", "connection refused")
	if ev := h.events(); len(ev) != 1 || !hasEvent(ev, plan.EventVolumeResizeFailing, "data-web-1", "Unavailable: connection refused") {
		t.Errorf("events after a new error code %q, want one VolumeResizeFailing", ev)
	}

	// Resolved (ready) and failing again later: told again.
	h.finishResize("data-web-1")
	h.catchUp()
	if err := h.sync(); err != nil {
		t.Fatal(err)
	}
	h.updatePVCStatus("data-web-1", func(s *corev1.PersistentVolumeClaimStatus) {
		s.Capacity[corev1.ResourceStorage] = resource.MustParse("1Gi")
	})
	setError("Unavailable", "connection refused")
	if ev := h.events(); len(ev) != 1 || !hasEvent(ev, plan.EventVolumeResizeFailing, "data-web-1") {
		t.Errorf("events after the problem came back %q, want one VolumeResizeFailing", ev)
	}
}

func TestConstructorAndRunErrors(t *testing.T) {
	client := fake.NewClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); factory.Shutdown() }()
	if _, err := New(ctx, client, factory, record.NewFakeRecorder(1), clock.RealClock{}, Options{}); err == nil {
		t.Error("New without the records' namespace succeeded")
	}
	ctrl, err := New(ctx, client, factory, record.NewFakeRecorder(1), clock.RealClock{}, Options{RecordNamespace: recordNS})
	if err != nil {
		t.Fatal(err)
	}
	if err := ctrl.Run(ctx, 0); err == nil {
		t.Error("Run with 0 workers succeeded")
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	// A second controller on a started factory cannot install its transforms.
	if _, err := New(ctx, client, factory, record.NewFakeRecorder(1), clock.RealClock{}, Options{RecordNamespace: recordNS}); err == nil {
		t.Error("New on a started factory succeeded")
	}
	// A malformed key is dropped, not retried.
	if err := ctrl.sync(ctx, "a/b/c"); err != nil {
		t.Errorf("malformed key: %v", err)
	}
	// Run returns when its context ends (after the caches synced, which is
	// polled every 100ms).
	runCtx, stop := context.WithTimeout(ctx, 300*time.Millisecond)
	defer stop()
	if err := ctrl.Run(runCtx, 1); err != nil {
		t.Errorf("Run: %v", err)
	}
}

// I6 at start-up: a Lease of another install, in another namespace and held,
// stops this one with an error naming it; an expired one, or this install's
// own, does not.
func TestRunRefusesASecondInstall(t *testing.T) {
	lease := func(namespace string, renewed time.Time) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: Name},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("pod-1"), LeaseDurationSeconds: ptr.To[int32](15),
				RenewTime: &metav1.MicroTime{Time: renewed}}}
	}
	now := time.Now()
	for _, c := range []struct {
		name    string
		lease   *coordinationv1.Lease
		refused bool
	}{
		{"held by another install", lease("other-install", now), true},
		{"expired", lease("other-install", now.Add(-time.Minute)), false},
		{"this install's own", lease(recordNS, now), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarnessWith(t, Options{}, c.lease)
			ctx, cancel := context.WithTimeout(h.ctx, 200*time.Millisecond)
			defer cancel()
			err := h.ctrl.Run(ctx, 1)
			if refused := err != nil; refused != c.refused || refused && !strings.Contains(err.Error(), "namespace other-install") {
				t.Errorf("Run: %v, want refused %v naming the other install", err, c.refused)
			}
		})
	}
}
