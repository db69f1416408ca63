//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/controller"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/desired"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/plan"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/recreate"
	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// statefulset-resizer's desired sizes and re-create on the real control plane (see
// statefulset_test.go for the environment). The test plays the admission webhook: it sets the
// desired-templates annotation the way the webhook records it, since the webhook is tested on
// its own; everything after that is the controller's.

// desire is the annotation value asking for size on the template scenario.TemplateName.
func desire(t *testing.T, size string) string {
	t.Helper()
	v, err := desired.Format([]desired.Template{{Name: scenario.TemplateName, Storage: resource.MustParse(size)}})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// setDesire sets (or, for "", removes) the annotation, with the opt-in label (a desire is acted on
// only for opted-in StatefulSets), plus any extra merge-patch fields of spec.
func (s *stsEnv) setDesire(t *testing.T, name, value string, spec map[string]any) {
	t.Helper()
	var v any
	if value != "" {
		v = value
	}
	patch := map[string]any{"metadata": map[string]any{"annotations": map[string]any{desired.Annotation: v},
		"labels": map[string]any{desired.OptInLabel: desired.OptInValue}}}
	if spec != nil {
		patch["spec"] = spec
	}
	body, _ := json.Marshal(patch)
	if _, err := s.Client.AppsV1().StatefulSets(s.Namespace).Patch(s.Ctx, name, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
		t.Fatalf("patch StatefulSet %s with %s: %v", name, body, err)
	}
}

// createWithSpare creates sts like CreateStatefulSet, with volumes made in advance for spare
// more replicas, so that a scale-up later finds its PVs.
func (s *stsEnv) createWithSpare(t *testing.T, sts *appsv1.StatefulSet, spare int32) map[string]string {
	t.Helper()
	return s.createWithSpareBy(t, sts, spare, func() {
		if _, err := s.Client.AppsV1().StatefulSets(s.Namespace).Create(s.Ctx, sts, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create StatefulSet %s: %v", sts.Name, err)
		}
	})
}

// createWithSpareBy is createWithSpare with the StatefulSet created by create (e.g. kubectl
// apply of a manifest).
func (s *stsEnv) createWithSpareBy(t *testing.T, sts *appsv1.StatefulSet, spare int32, create func()) map[string]string {
	t.Helper()
	s.EnsureNode(t)
	bigger := sts.DeepCopy()
	bigger.Spec.Replicas = ptr.To(*sts.Spec.Replicas + spare)
	ids := s.PrecreateVolumes(t, bigger)
	create()
	for i := 0; i < int(*sts.Spec.Replicas); i++ {
		s.RunPod(t, sts.Name, i)
		s.WaitClaim(t, scenario.ClaimName(sts.Name, i), time.Minute, func(pvc *v1.PersistentVolumeClaim) (bool, string) {
			return pvc.Status.Phase == v1.ClaimBound, "want Bound, phase " + string(pvc.Status.Phase)
		})
	}
	return ids
}

// infeasibleRecreated checks a desire the driver refuses: the StatefulSet was re-created with it
// all the same (the live object says what the user applied), and `wait` exits 1 naming claim
// and the driver's message. It returns the re-created object.
func (s *stsEnv) infeasibleRecreated(t *testing.T, name, claim, message string, old types.UID, size string) *appsv1.StatefulSet {
	t.Helper()
	recreated := s.waitRecreated(t, name, old, size)
	r := s.wait(t, name)
	if r.Code != 1 || !strings.Contains(r.Stderr, message) || !strings.Contains(r.Stderr, claim) {
		t.Fatalf("wait: %s; want exit 1 naming %s and the driver's message", r, claim)
	}
	return recreated
}

// recordOf returns the re-create record of the StatefulSet, nil when there is none.
func (s *stsEnv) recordOf(t *testing.T, name string) *v1.ConfigMap {
	t.Helper()
	cm, err := s.Client.CoreV1().ConfigMaps(s.Namespace).Get(s.Ctx, recreate.RecordName(s.Namespace, name), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("get record of %s: %v", name, err)
	}
	return cm
}

// waitRecreated waits until the StatefulSet is another object than oldUID, with the template at
// size, without the desired annotation, and its record is gone; it returns the object.
func (s *stsEnv) waitRecreated(t *testing.T, name string, oldUID types.UID, size string) *appsv1.StatefulSet {
	t.Helper()
	var got *appsv1.StatefulSet
	framework.Eventually(t, stsTimeout, func() (bool, string) {
		sts, err := s.Client.AppsV1().StatefulSets(s.Namespace).Get(s.Ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		q := sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[v1.ResourceStorage]
		_, annotated := sts.Annotations[desired.Annotation]
		rec := s.recordOf(t, name)
		got = sts
		return sts.UID != oldUID && q.String() == size && !annotated && rec == nil,
			fmt.Sprintf("StatefulSet %s uid %s (old %s), template %s (want %s), desired annotation %v, record present %v",
				name, sts.UID, oldUID, &q, size, annotated, rec != nil)
	})
	return got
}

type podIdentity struct {
	uid      types.UID
	revision string
}

func (s *stsEnv) pods(t *testing.T, name string, n int) map[string]podIdentity {
	t.Helper()
	out := map[string]podIdentity{}
	for i := 0; i < n; i++ {
		pod := s.Pod(t, scenario.PodName(name, i))
		out[pod.Name] = podIdentity{pod.UID, pod.Labels[appsv1.StatefulSetRevisionLabel]}
	}
	return out
}

// checkAdopted: the pods are the ones from before (uid, revision label), owned by the new
// object once the StatefulSet controller has adopted them, and they stay so over a window (a
// roll would start within it).
func (s *stsEnv) checkAdopted(t *testing.T, name string, before map[string]podIdentity, newUID types.UID) {
	t.Helper()
	check := func() (bool, string) {
		for podName, id := range before {
			pod := s.Pod(t, podName)
			ref := metav1.GetControllerOf(pod)
			switch {
			case pod.UID != id.uid || pod.DeletionTimestamp != nil:
				return false, fmt.Sprintf("pod %s uid %s (was %s), deleting %v: replaced", podName, pod.UID, id.uid, pod.DeletionTimestamp != nil)
			case pod.Labels[appsv1.StatefulSetRevisionLabel] != id.revision:
				return false, fmt.Sprintf("pod %s revision %s, was %s", podName, pod.Labels[appsv1.StatefulSetRevisionLabel], id.revision)
			case ref == nil || ref.UID != newUID:
				return false, fmt.Sprintf("pod %s controller %+v, want the new StatefulSet %s", podName, ref, newUID)
			}
		}
		return true, ""
	}
	framework.Eventually(t, stsTimeout, check)
	framework.Consistently(t, 3*time.Second, check)
}

// The whole flow with the controller undisturbed. A 2-replica OrderedReady StatefulSet gets a
// desire of 2Gi and a scale-up to 3 in one update (a Helm upgrade raising both): `wait`, started
// right after, does not pass on the old status; the StatefulSet is re-created with a 2Gi
// template and without the annotation, the pods are adopted (same uids and revision, owned by
// the new uid), the record is gone, Recreating and Recreated are told; the PVCs grow to 2Gi,
// including the third replica's; and `wait` exits 0 only after all that.
func TestRecreateWithDesiredTemplates(t *testing.T) {
	s := startSTSEnv(t)
	s.StartStatefulSetResizer(t, s.ssrKubeconfig)
	ids := s.createWithSpare(t, s.NewStatefulSet(scenario.StatefulSetOptions{Name: "web", Replicas: 2, Policy: appsv1.OrderedReadyPodManagement, Size: "1Gi"}), 1)
	old, _ := s.WaitTemplateStatus(t, "web", stsTimeout, scenario.Finished)

	s.setDesire(t, "web", desire(t, "2Gi"), map[string]any{"replicas": 3})
	waiting := s.StartWait(t, s.ssrKubeconfig, "web", "--timeout", stsTimeout.String())
	s.RunPod(t, "web", 2)
	s.WaitClaim(t, scenario.ClaimName("web", 2), time.Minute, func(pvc *v1.PersistentVolumeClaim) (bool, string) {
		return pvc.Status.Phase == v1.ClaimBound, "want Bound"
	})
	before := s.pods(t, "web", 3)

	for i := 0; i < 3; i++ {
		pvc := s.waitDone(t, scenario.ClaimName("web", i), "2Gi")
		if got := pvc.Annotations[plan.AnnotationPreResizeStorage]; got != "1Gi" {
			t.Errorf("%s: %s=%q, want 1Gi (raised by statefulset-resizer)", pvc.Name, plan.AnnotationPreResizeStorage, got)
		}
	}
	recreated := s.waitRecreated(t, "web", old.UID, "2Gi")
	r := waiting.Result(t)
	t.Logf("wait: %s", r)
	// The old object was at generation 2 (the scale-up), the re-created one is at 1: wait
	// passed on the new object, not on the old one's status.
	if r.Code != 0 || !strings.Contains(r.Stdout, "finished for generation 1") {
		t.Fatalf("wait: %s; want exit 0, finished for generation 1 (the re-created object)", r)
	}
	s.checkAdopted(t, "web", before, recreated.UID)
	s.WaitStatefulSetEvent(t, "web", controller.EventRecreating, stsTimeout, recreate.RecordName(s.Namespace, "web"))
	s.WaitStatefulSetEvent(t, "web", controller.EventRecreated, stsTimeout, string(old.UID))
	_, ts := s.WaitTemplateStatus(t, "web", stsTimeout, scenario.Finished)
	if ts.ReadyReplicas != 3 {
		t.Errorf("status of the re-created object: %+v, want 3 ready", ts)
	}
	for claim, id := range ids {
		if n := len(s.Driver.VolumeCalls(t, id)); n == 0 {
			t.Errorf("%s: no driver call", claim)
		}
	}
	if cur, _ := s.StatefulSet(t, "web"); cur.UID != recreated.UID {
		t.Errorf("StatefulSet re-created again: uid %s, want %s", cur.UID, recreated.UID)
	}
}

// manifest renders sts as a manifest kept in Git: no status, no server fields.
func manifest(t *testing.T, sts *appsv1.StatefulSet) string {
	t.Helper()
	m := &appsv1.StatefulSet{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"},
		ObjectMeta: metav1.ObjectMeta{Name: sts.Name, Namespace: sts.Namespace, Labels: sts.Labels}, Spec: sts.Spec}
	out, err := yaml.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// After the re-create, the field managers of the old object still own what they owned:
// `kubectl apply --server-side` of the manifest (now at 2Gi, as in Git) with another replica
// count succeeds without --force-conflicts, and a client-side `kubectl apply` too; the live
// object ends with what was applied.
func TestRecreateKeepsFieldOwnership(t *testing.T) {
	s := startSTSEnv(t)
	s.StartStatefulSetResizer(t, s.ssrKubeconfig)
	s.EnsureNode(t)
	for _, c := range []struct{ name, mode string }{{"ssa", "--server-side"}, {"csa", ""}} {
		sts := s.NewStatefulSet(scenario.StatefulSetOptions{Name: c.name, Replicas: 1, Policy: appsv1.ParallelPodManagement, Size: "1Gi"})
		s.PrecreateVolumes(t, sts)
		apply := func(sts *appsv1.StatefulSet) (string, error) {
			args := []string{"apply", "-f", "-"}
			if c.mode != "" {
				args = append(args, c.mode)
			}
			return s.Cluster.KubectlWithInput(t, manifest(t, sts), args...)
		}
		if out, err := apply(sts); err != nil {
			t.Fatalf("%s: first apply: %v\n%s", c.name, err, out)
		}
		s.RunPod(t, c.name, 0)
		old, _ := s.WaitTemplateStatus(t, c.name, stsTimeout, scenario.Finished)

		s.setDesire(t, c.name, desire(t, "2Gi"), nil)
		s.waitDone(t, scenario.ClaimName(c.name, 0), "2Gi")
		s.waitRecreated(t, c.name, old.UID, "2Gi")

		// Git now says 2Gi, and the next change is the replica count.
		scenario.WithSize("2Gi")(sts)
		sts.Spec.Replicas = ptr.To[int32](0)
		if out, err := apply(sts); err != nil {
			t.Fatalf("%s: apply %s of the manifest with replicas 0 after the re-create: %v\n%s", c.name, c.mode, err, out)
		}
		cur, _ := s.StatefulSet(t, c.name)
		q := cur.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[v1.ResourceStorage]
		if *cur.Spec.Replicas != 0 || q.String() != "2Gi" {
			t.Errorf("%s: after the apply: replicas %d, template %s; want 0 and 2Gi", c.name, *cur.Spec.Replicas, &q)
		}
		for _, e := range cur.ManagedFields {
			t.Logf("%s: managedFields entry %s %s %s", c.name, e.Manager, e.Operation, e.Subresource)
		}
	}
}

// A restart at any point finishes the job, from what the previous process left: (a) the record
// and no StatefulSet (killed between delete and create): created from the record; (b) the record
// and the old StatefulSet (killed before the delete): deleted with orphan propagation and
// created; (c) the record and the new StatefulSet (killed before the record was deleted): only
// the record goes, the object stays (same uid). The states are built as the controller builds
// them (package recreate) while no statefulset-resizer runs.
func TestRecreateResumesAfterRestart(t *testing.T) {
	s := startSTSEnv(t)
	ssr := s.StartStatefulSetResizer(t, s.ssrKubeconfig, "--recreate=false")
	olds := map[string]*appsv1.StatefulSet{}
	before := map[string]map[string]podIdentity{}
	for _, name := range []string{"a", "b", "c"} {
		s.CreateStatefulSet(t, s.NewStatefulSet(scenario.StatefulSetOptions{Name: name, Replicas: 2, Policy: appsv1.ParallelPodManagement, Size: "1Gi"}))
		s.WaitTemplateStatus(t, name, stsTimeout, scenario.Finished)
		s.setDesire(t, name, desire(t, "2Gi"), nil)
		s.waitDone(t, scenario.ClaimName(name, 0), "2Gi")
		s.waitDone(t, scenario.ClaimName(name, 1), "2Gi")
		before[name] = s.pods(t, name, 2)
	}
	if err := ssr.Kill(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b", "c"} {
		olds[name], _ = s.StatefulSet(t, name)
		s.storeRecord(t, olds[name], "2Gi")
	}
	sets := s.Client.AppsV1().StatefulSets(s.Namespace)
	for _, name := range []string{"a", "c"} {
		s.orphanDelete(t, olds[name])
	}
	rec, err := recreate.Parse(s.recordOf(t, "c"))
	if err != nil {
		t.Fatal(err)
	}
	obj := rec.Object.DeepCopy()
	obj.ManagedFields = nil
	createdC, err := sets.Create(s.Ctx, obj, metav1.CreateOptions{FieldManager: controller.Name})
	if err != nil {
		t.Fatalf("create c from its record: %v", err)
	}

	ssr.Start(t)
	for _, name := range []string{"a", "b", "c"} {
		got := s.waitRecreated(t, name, olds[name].UID, "2Gi")
		if name == "c" && got.UID != createdC.UID {
			t.Errorf("c: uid %s, want the object that was there, %s: it was replaced", got.UID, createdC.UID)
		}
		s.checkAdopted(t, name, before[name], got.UID)
	}
	framework.Consistently(t, 3*time.Second, func() (bool, string) {
		cur, err := sets.Get(s.Ctx, "c", metav1.GetOptions{})
		if err != nil || cur.UID != createdC.UID {
			return false, fmt.Sprintf("c: %v; want %s kept", err, createdC.UID)
		}
		return true, ""
	})
}

// storeRecord writes the record the controller writes at step 1 for old and size.
func (s *stsEnv) storeRecord(t *testing.T, old *appsv1.StatefulSet, size string) {
	t.Helper()
	ds, err := desired.Parse(desire(t, size))
	if err != nil {
		t.Fatal(err)
	}
	templates, err := desired.Apply(old.Spec.VolumeClaimTemplates, ds)
	if err != nil {
		t.Fatal(err)
	}
	cm, err := recreate.Build(old, templates, s.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client.CoreV1().ConfigMaps(s.Namespace).Create(s.Ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create record of %s: %v", old.Name, err)
	}
}

// orphanDelete deletes sts with orphan propagation and waits until it is gone.
func (s *stsEnv) orphanDelete(t *testing.T, sts *appsv1.StatefulSet) {
	t.Helper()
	sets := s.Client.AppsV1().StatefulSets(s.Namespace)
	if err := sets.Delete(s.Ctx, sts.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationOrphan)}); err != nil {
		t.Fatalf("delete %s: %v", sts.Name, err)
	}
	framework.Eventually(t, time.Minute, func() (bool, string) {
		_, err := sets.Get(s.Ctx, sts.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprintf("%s still there (%v)", sts.Name, err)
	})
}

// A real SIGKILL in the middle of a re-create. kube-controller-manager is frozen, so the garbage
// collector does not finish the orphan delete: statefulset-resizer stores the record, deletes
// the old object (which stays, terminating, with the orphan finalizer and the re-create's own)
// and cannot create the new one yet. It is killed there. Once the garbage collector has orphaned
// the pods, the old object still stays, held by the re-create's finalizer, and no StatefulSet
// appears while statefulset-resizer is down. Started again, it releases the old object, creates
// the new one from the record and finishes; the pods are adopted.
func TestRecreateSurvivesSIGKILL(t *testing.T) {
	s := startSTSEnv(t)
	ssr := s.StartStatefulSetResizer(t, s.ssrKubeconfig)
	s.CreateStatefulSet(t, s.NewStatefulSet(scenario.StatefulSetOptions{Name: "k", Replicas: 2, Policy: appsv1.ParallelPodManagement, Size: "1Gi"}))
	old, _ := s.WaitTemplateStatus(t, "k", stsTimeout, scenario.Finished)
	before := s.pods(t, "k", 2)
	thaw := s.freezeGarbageCollector(t)

	s.setDesire(t, "k", desire(t, "2Gi"), nil)
	sets := s.Client.AppsV1().StatefulSets(s.Namespace)
	s.waitTerminating(t, "k", old.UID)
	if err := ssr.Kill(); err != nil {
		t.Fatal(err)
	}
	thaw()
	framework.Eventually(t, time.Minute, func() (bool, string) {
		cur, err := sets.Get(s.Ctx, "k", metav1.GetOptions{})
		return err == nil && slices.Equal(cur.Finalizers, []string{recreate.Finalizer}),
			fmt.Sprintf("want the old object held by the re-create's finalizer alone once the pods are orphaned: %v %v", err, cur.Finalizers)
	})
	framework.Consistently(t, 3*time.Second, func() (bool, string) {
		cur, err := sets.Get(s.Ctx, "k", metav1.GetOptions{})
		return err == nil && cur.UID == old.UID && s.recordOf(t, "k") != nil,
			fmt.Sprintf("the old object went, or the record, while statefulset-resizer was down (%v)", err)
	})

	ssr.Start(t)
	got := s.waitRecreated(t, "k", old.UID, "2Gi")
	s.checkAdopted(t, "k", before, got.UID)
	s.WaitTemplateStatus(t, "k", stsTimeout, scenario.Finished)
}

// freezeGarbageCollector freezes kube-controller-manager (SIGSTOP), so that an orphan delete
// stays unfinished, and returns the function that thaws it; a test that ends first thaws it too.
func (s *stsEnv) freezeGarbageCollector(t *testing.T) (thaw func()) {
	t.Helper()
	kcm := s.Cluster.ControllerManager
	if err := kcm.Freeze(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	thaw = func() {
		once.Do(func() {
			if err := kcm.Thaw(); err != nil {
				t.Errorf("thaw kube-controller-manager: %v", err)
			}
		})
	}
	t.Cleanup(thaw)
	return thaw
}

// waitTerminating waits until the StatefulSet uid is being deleted with its re-create record
// stored.
func (s *stsEnv) waitTerminating(t *testing.T, name string, uid types.UID) {
	t.Helper()
	framework.Eventually(t, stsTimeout, func() (bool, string) {
		cur, err := s.Client.AppsV1().StatefulSets(s.Namespace).Get(s.Ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return cur.UID == uid && cur.DeletionTimestamp != nil && s.recordOf(t, name) != nil,
			fmt.Sprintf("want the old object terminating and the record stored; deleting %v, finalizers %v", cur.DeletionTimestamp != nil, cur.Finalizers)
	})
}

// An infeasible desired size: the StatefulSet is re-created with it all the same, and `wait`
// exits 1 with the driver's message. Lowering the desire (the manifest in Git lowered to a size
// the driver can give; the webhook records it) recovers: the StatefulSet is re-created with the
// new size, the request goes down from the infeasible size to it (KEP-1790), the volume grows
// to it, and `wait` exits 0.
func TestRecreateInfeasibleDesire(t *testing.T) {
	s := startSTSEnv(t)
	s.StartStatefulSetResizer(t, s.ssrKubeconfig)
	ids := s.CreateStatefulSet(t, s.NewStatefulSet(scenario.StatefulSetOptions{Name: "web", Replicas: 1, Policy: appsv1.OrderedReadyPodManagement, Size: "1Gi"}))
	old, _ := s.WaitTemplateStatus(t, "web", stsTimeout, scenario.Finished)
	const driverMessage = "no such size in this pool"
	claim := scenario.ClaimName("web", 0)
	s.Driver.SetFaults(t, []framework.Fault{{Method: "ControllerExpandVolume", Code: codes.OutOfRange, Message: driverMessage,
		VolumeID: ids[claim], MinRequiredBytes: 50 << 30}})

	s.setDesire(t, "web", desire(t, "100Gi"), nil)
	infeasible := s.infeasibleRecreated(t, "web", claim, driverMessage, old.UID, "100Gi")

	s.setDesire(t, "web", desire(t, "2Gi"), nil)
	s.waitDone(t, claim, "2Gi")
	s.waitRecreated(t, "web", infeasible.UID, "2Gi")
	if r := s.wait(t, "web"); r.Code != 0 {
		t.Errorf("wait after the desire was lowered: %s; want exit 0", r)
	}
}

// --recreate=false: the PVCs grow to the desired size and `wait` exits 0, but the object stays
// (same uid) with its annotation and 1Gi template. `wait`, started right after the annotation
// was set (which leaves the generation as it was, and the status "finished" for it), does not
// pass on that status: it exits only once the PVCs are at the desired size (csi-resizer is
// stopped until the window has been observed).
func TestRecreateDisabled(t *testing.T) {
	s := startSTSEnv(t)
	s.StartStatefulSetResizer(t, s.ssrKubeconfig, "--recreate=false")
	s.CreateStatefulSet(t, s.NewStatefulSet(scenario.StatefulSetOptions{Name: "web", Replicas: 2, Policy: appsv1.ParallelPodManagement, Size: "1Gi"}))
	old, _ := s.WaitTemplateStatus(t, "web", stsTimeout, scenario.Finished)
	if err := s.Resizer.Stop(); err != nil {
		t.Fatal(err)
	}
	s.setDesire(t, "web", desire(t, "2Gi"), nil)
	waiting := s.StartWait(t, s.ssrKubeconfig, "web", "--timeout", stsTimeout.String())
	framework.Consistently(t, 3*time.Second, func() (bool, string) {
		if waiting.Exited() {
			return false, fmt.Sprintf("wait ended while every PVC was at 1Gi: %s", waiting.Result(t))
		}
		return true, ""
	})
	s.Resizer.Start(t)
	if r := waiting.Result(t); r.Code != 0 {
		t.Fatalf("wait: %s; want exit 0", r)
	}
	for i := 0; i < 2; i++ {
		if pvc := s.PVC(t, scenario.ClaimName("web", i)); func() bool { ok, _ := scenario.Done("2Gi")(pvc); return !ok }() {
			t.Errorf("wait exited 0 but %s is not done at 2Gi: %s", pvc.Name, scenario.Describe(pvc))
		}
	}
	framework.Consistently(t, 3*time.Second, func() (bool, string) {
		cur, _ := s.StatefulSet(t, "web")
		q := cur.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[v1.ResourceStorage]
		_, annotated := cur.Annotations[desired.Annotation]
		return cur.UID == old.UID && annotated && q.String() == "1Gi" && s.recordOf(t, "web") == nil,
			fmt.Sprintf("uid %s (was %s), annotated %v, template %s: want the object left as it is", cur.UID, old.UID, annotated, &q)
	})
}
