//go:build integration

package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	k8smetrics "k8s.io/component-base/metrics"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/controller"
	ssmetrics "github.com/csi-resizer/csi-resizer/pkg/statefulset/metrics"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/plan"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/status"
	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// statefulset-resizer on the real control plane: kube-controller-manager runs the StatefulSet
// controller (it creates the pods and PVCs), the PV controller (it binds the PVCs to PVs made in
// advance) and the garbage collector (delete --cascade=orphan); csi-resizer runs with its
// shipped RBAC against the mock driver; statefulset-resizer runs as a separate process with the
// credentials of the ServiceAccount bound to the RBAC shipped in
// deploy/kubernetes/statefulset-resizer. The test plays the scheduler and the kubelet (pods are
// made Running through the status subresource) and the user.

const stsTimeout = 2 * time.Minute

// stsEnv is a scenario.Env with the statefulset-resizer's RBAC applied.
type stsEnv struct {
	*scenario.Env
	// Kubeconfig of the statefulset-resizer ServiceAccount (shipped RBAC).
	ssrKubeconfig string
}

func startSTSEnv(t *testing.T) *stsEnv {
	t.Helper()
	start := time.Now()
	e := scenario.Start(t, scenario.Options{Cluster: framework.ClusterOptions{ControllerManager: true}})
	s := &stsEnv{Env: e, ssrKubeconfig: scenario.ApplyStatefulSetResizerRBAC(t, e.Cluster, e.Namespace)}
	t.Logf("environment ready in %s", time.Since(start).Round(time.Millisecond))
	return s
}

// wait runs `statefulset-resizer wait` with the statefulset-resizer's credentials.
func (s *stsEnv) wait(t *testing.T, name string, args ...string) scenario.WaitResult {
	t.Helper()
	return s.Wait(t, s.ssrKubeconfig, name, append([]string{"--timeout", stsTimeout.String()}, args...)...)
}

func (s *stsEnv) waitDone(t *testing.T, claim, size string) *v1.PersistentVolumeClaim {
	t.Helper()
	return s.WaitClaim(t, claim, stsTimeout, scenario.Done(size))
}

// untouched holds for the window: the PVCs keep their request, and the driver gets no
// expansion call for their volumes.
func (s *stsEnv) untouched(t *testing.T, window time.Duration, ids map[string]string, want map[string]string) {
	t.Helper()
	calls := map[string]int{}
	for claim := range want {
		calls[claim] = len(s.Env.Driver.VolumeCalls(t, ids[claim]))
	}
	framework.Consistently(t, window, func() (bool, string) {
		for claim, size := range want {
			pvc := s.PVC(t, claim)
			if got := scenario.Request(pvc); got != size {
				return false, fmt.Sprintf("%s: request %s, want it left at %s; %s", claim, got, size, scenario.Describe(pvc))
			}
			if n := len(s.Env.Driver.VolumeCalls(t, ids[claim])); n != calls[claim] {
				return false, fmt.Sprintf("%s: %d new ControllerExpandVolume calls", claim, n-calls[claim])
			}
		}
		return true, ""
	})
}

func patches(t *testing.T, p *framework.Process, result string) float64 {
	t.Helper()
	labels := []string{}
	if result != "" {
		labels = append(labels, `result="`+result+`"`)
	}
	return scenario.MetricValue(scenario.Scrape(t, p), "statefulset_resizer_pvc_patches_total", labels...)
}

// (a) The documented flow, from an exported manifest: `kubectl get -o yaml`, raise the template,
// delete --cascade=orphan, apply. The new object is at generation 1 like the old one and carries
// the old object's status annotation, which says "finished at generation 1, 3 ready"; it is
// another object's (uid) and must not let `wait` pass. `wait`, started right after the re-create,
// keeps waiting while no PVC can grow (csi-resizer is stopped) and exits 0 only once every PVC's
// capacity is the new size. Every PVC grows, one replica at a time (OrderedReady); the annotation
// ends written for the new object (its uid), finished with 3 ready replicas. The StatefulSet does
// not roll its pods (KEP-661 "Ensure statefulset controller revision works properly after
// resize"): current revision = update revision = the old object's, and the pods keep their UIDs.
func TestStatefulSetOrphanRecreateGrowsAllReplicas(t *testing.T) {
	s := startSTSEnv(t)
	ssr := s.StartStatefulSetResizer(t, s.ssrKubeconfig)
	sts := s.NewStatefulSet(scenario.StatefulSetOptions{Name: "web", Replicas: 3, Policy: appsv1.OrderedReadyPodManagement, Size: "1Gi"})
	ids := s.CreateStatefulSet(t, sts)
	old, _ := s.WaitTemplateStatus(t, "web", stsTimeout, scenario.Finished)
	podUIDs := map[string]types.UID{}
	for i := 0; i < 3; i++ {
		pod := s.Pod(t, scenario.PodName("web", i))
		podUIDs[pod.Name] = pod.UID
	}

	// Holds every PVC at 1Gi until the window below has been observed.
	if err := s.Resizer.Stop(); err != nil {
		t.Fatal(err)
	}
	recreated := s.RecreateStatefulSetFromExport(t, "web", scenario.WithSize("2Gi"))
	waiting := s.StartWait(t, s.ssrKubeconfig, "web", "--timeout", stsTimeout.String())
	if recreated.Generation != 1 || recreated.UID == old.UID {
		t.Fatalf("re-created StatefulSet uid %s at generation %d, want a new object at 1", recreated.UID, recreated.Generation)
	}
	copied, err := status.Parse(recreated.Annotations[status.Annotation])
	if err != nil || copied.UID != old.UID || copied.Template(scenario.TemplateName) == nil ||
		copied.Template(scenario.TemplateName).FinishedReconciliationGeneration != 1 {
		t.Fatalf("re-created object's annotation %q (%v), want the old object's document, finished at generation 1",
			recreated.Annotations[status.Annotation], err)
	}
	// Until statefulset-resizer rewrites it, the copied document is no status of this object:
	// the helper must read it as none (nil), not fail the test. (Whether the rewrite has
	// happened by now is a race; logged.)
	cur, st := s.StatefulSet(t, "web")
	t.Logf("right after the re-create: status read as %+v from %s", st, cur.Annotations[status.Annotation])

	// statefulset-resizer has taken the new object over (replica 0 patched, status rewritten
	// for it) but no volume can grow: wait must not have passed, and must keep waiting.
	s.WaitClaim(t, scenario.ClaimName("web", 0), stsTimeout, func(pvc *v1.PersistentVolumeClaim) (bool, string) {
		return scenario.Request(pvc) == "2Gi", "want statefulset-resizer's patch"
	})
	s.WaitTemplateStatus(t, "web", stsTimeout, func(sts *appsv1.StatefulSet, ts status.Template) (bool, string) {
		return ts.ReadyReplicas == 0 && ts.FinishedReconciliationGeneration == 0, "want the new object's own status: 0 ready, not finished"
	})
	framework.Consistently(t, 3*time.Second, func() (bool, string) {
		if waiting.Exited() {
			return false, fmt.Sprintf("wait ended while every PVC was at 1Gi: %s", waiting.Result(t))
		}
		return true, ""
	})

	s.Resizer.Start(t)
	r := waiting.Result(t)
	t.Logf("wait: %s", r)
	if r.Code != 0 || !strings.Contains(r.Stdout, "finished for generation 1") {
		t.Fatalf("wait: %s; want exit 0, finished for generation 1", r)
	}
	// Read at once. Capacities only grow: a PVC below 2Gi here was below it when wait exited.
	for i := 0; i < 3; i++ {
		claim := scenario.ClaimName("web", i)
		pvc := s.PVC(t, claim)
		if ok, why := scenario.Done("2Gi")(pvc); !ok {
			t.Errorf("wait exited 0 at %s but %s: %s; PVC: %s", r.Ended.Format(time.RFC3339Nano), claim, why, scenario.Describe(pvc))
		}
	}

	var expands []framework.Call
	for i := 0; i < 3; i++ {
		claim := scenario.ClaimName("web", i)
		pvc := s.waitDone(t, claim, "2Gi")
		want := map[string]string{plan.AnnotationStatefulSet: "web", plan.AnnotationPreResizeStorage: "1Gi", plan.AnnotationResizedStorage: "2Gi"}
		for k, v := range want {
			if pvc.Annotations[k] != v {
				t.Errorf("%s: annotation %s=%q, want %q", claim, k, pvc.Annotations[k], v)
			}
		}
		for _, c := range s.Driver.Calls(t, "ControllerExpandVolume") {
			if c.VolumeID == ids[claim] {
				expands = append(expands, c)
			}
		}
	}
	got, st := s.StatefulSet(t, "web")
	if st == nil {
		t.Fatalf("status annotation %q is not the new object's (uid %s)", got.Annotations[status.Annotation], got.UID)
	}
	ts := st.Template(scenario.TemplateName)
	if st.UID != recreated.UID || st.ObservedGeneration != got.Generation || ts == nil || ts.ReadyReplicas != 3 || ts.InfeasibleReplicas != 0 ||
		ts.FinishedReconciliationGeneration != got.Generation || ts.Message != "" {
		t.Errorf("status annotation %s, want uid %s with 3 ready replicas finished at generation %d", got.Annotations[status.Annotation], recreated.UID, got.Generation)
	}
	if got.Status.ReadyReplicas != 3 {
		t.Errorf("StatefulSet status.readyReplicas = %d, want 3 (pods adopted by the new object)", got.Status.ReadyReplicas)
	}
	// OrderedReady: one expansion per volume, in ordinal order, each asked for only after the
	// previous one had completed.
	if len(expands) != 3 {
		t.Fatalf("ControllerExpandVolume calls %+v, want one per volume", expands)
	}
	for i := 1; i < len(expands); i++ {
		prevDone := expands[i-1].Time.Add(time.Duration(expands[i-1].DurationMs * float64(time.Millisecond)))
		if !expands[i].Time.After(prevDone) {
			t.Errorf("volume of replica %d expanded at %s, before replica %d's finished at %s", i, expands[i].Time, i-1, prevDone)
		}
	}
	if n := patches(t, ssr, "success"); n != 3 {
		t.Errorf("statefulset_resizer_pvc_patches_total{result=success} = %v, want 3", n)
	}

	// No rollout: the resize changed no pod template, so the new object's revision is the old
	// one's, every pod is at it, and the pods are the ones from before (a roll would replace
	// them). Checked over a window: a roll would start within it.
	framework.Consistently(t, 3*time.Second, func() (bool, string) {
		cur, _ := s.StatefulSet(t, "web")
		if cur.Status.ObservedGeneration != cur.Generation || cur.Status.CurrentRevision != cur.Status.UpdateRevision ||
			cur.Status.UpdateRevision != old.Status.UpdateRevision || cur.Status.UpdatedReplicas != 3 {
			return false, fmt.Sprintf("StatefulSet status %+v, want current = update revision = the old object's %s, 3 updated",
				cur.Status, old.Status.UpdateRevision)
		}
		for name, uid := range podUIDs {
			pod := s.Pod(t, name)
			if pod.UID != uid || pod.DeletionTimestamp != nil || pod.Labels[appsv1.StatefulSetRevisionLabel] != cur.Status.UpdateRevision {
				return false, fmt.Sprintf("pod %s uid %s (was %s), deleting %v, revision %s: replaced or rolled",
					name, pod.UID, uid, pod.DeletionTimestamp != nil, pod.Labels[appsv1.StatefulSetRevisionLabel])
			}
		}
		return true, ""
	})
}

// (b) The driver says OUT_OF_RANGE for replica 1's volume. OrderedReady stops there: replica 2's
// PVC is never patched, the StatefulSet gets a VolumeResizeInfeasible event and the annotation
// counts the replica as infeasible, and `wait` exits 1 naming the PVC and the driver's message.
// Parallel goes on past the failure: replica 2 is resized.
func TestStatefulSetInfeasibleOrderedStopsParallelContinues(t *testing.T) {
	s := startSTSEnv(t)
	s.StartStatefulSetResizer(t, s.ssrKubeconfig)
	ids := map[string]string{}
	for name, policy := range map[string]appsv1.PodManagementPolicyType{"ord": appsv1.OrderedReadyPodManagement, "par": appsv1.ParallelPodManagement} {
		for claim, id := range s.CreateStatefulSet(t, s.NewStatefulSet(scenario.StatefulSetOptions{Name: name, Replicas: 3, Policy: policy, Size: "1Gi"})) {
			ids[claim] = id
		}
	}
	const driverMessage = "requested size exceeds the pool's free space"
	s.Driver.SetFaults(t, []framework.Fault{
		{Method: "ControllerExpandVolume", Code: codes.OutOfRange, Message: driverMessage, VolumeID: ids[scenario.ClaimName("ord", 1)]},
		{Method: "ControllerExpandVolume", Code: codes.OutOfRange, Message: driverMessage, VolumeID: ids[scenario.ClaimName("par", 1)]},
	})
	for _, name := range []string{"ord", "par"} {
		s.WaitTemplateStatus(t, name, stsTimeout, scenario.Finished)
		s.RecreateStatefulSet(t, name, scenario.WithSize("2Gi"))
	}

	for _, name := range []string{"ord", "par"} {
		failing := scenario.ClaimName(name, 1)
		s.waitDone(t, scenario.ClaimName(name, 0), "2Gi")
		s.WaitClaim(t, failing, stsTimeout, scenario.InState(v1.PersistentVolumeClaimControllerResizeInfeasible))
		s.WaitStatefulSetEvent(t, name, plan.EventVolumeResizeInfeasible, stsTimeout, failing, "OutOfRange", driverMessage)
		ready := int32(1)
		if name == "par" {
			ready = 2
		}
		_, ts := s.WaitTemplateStatus(t, name, stsTimeout, func(_ *appsv1.StatefulSet, ts status.Template) (bool, string) {
			return ts.InfeasibleReplicas == 1 && ts.ReadyReplicas == ready && strings.Contains(ts.Message, failing) && strings.Contains(ts.Message, driverMessage),
				fmt.Sprintf("want %d ready, 1 infeasible naming %s and the driver's message", ready, failing)
		})
		if ts.FinishedReconciliationGeneration != 0 {
			t.Errorf("%s: finishedReconciliationGeneration %d, want none for the new object", name, ts.FinishedReconciliationGeneration)
		}
	}
	// Parallel: the replica after the failing one is resized.
	s.waitDone(t, scenario.ClaimName("par", 2), "2Gi")
	// OrderedReady: never touched, though its pod runs at the update revision.
	s.untouched(t, 5*time.Second, ids, map[string]string{scenario.ClaimName("ord", 2): "1Gi"})
	if pvc := s.PVC(t, scenario.ClaimName("ord", 2)); pvc.Annotations[plan.AnnotationResizedStorage] != "" {
		t.Errorf("%s carries %s: it was patched", pvc.Name, plan.AnnotationResizedStorage)
	}

	for _, name := range []string{"ord", "par"} {
		r := s.wait(t, name)
		if r.Code != 1 || !strings.Contains(r.Stderr, scenario.ClaimName(name, 1)) || !strings.Contains(r.Stderr, driverMessage) {
			t.Errorf("wait %s: %s; want exit 1 naming %s and the driver's message", name, r, scenario.ClaimName(name, 1))
		}
	}
}

// (b2) docs/design.md §3 rule 4 for an error that is not infeasible: the driver answers INTERNAL for
// replica 1's volume, and csi-resizer keeps retrying it (it clears the error condition at every
// attempt and sets it again when the attempt fails). The StatefulSet is told — the template's
// message names the PVC and the error, one VolumeResizeFailing event — but the replica is not
// counted as infeasible: `wait` does not give up (exit 1), it times out (exit 2) showing the
// error. The event is not repeated per retry. Once the driver recovers, the resize finishes,
// the message clears and `wait` exits 0.
func TestStatefulSetFailingResizeIsReportedNotInfeasible(t *testing.T) {
	s := startSTSEnv(t)
	s.StartStatefulSetResizer(t, s.ssrKubeconfig)
	ids := s.CreateStatefulSet(t, s.NewStatefulSet(scenario.StatefulSetOptions{Name: "web", Replicas: 2, Policy: appsv1.ParallelPodManagement, Size: "1Gi"}))
	s.WaitTemplateStatus(t, "web", stsTimeout, scenario.Finished)
	failing := scenario.ClaimName("web", 1)
	const driverMessage = "backend busy"
	s.Driver.SetFaults(t, []framework.Fault{{Method: "ControllerExpandVolume", Code: codes.Internal, Message: driverMessage, VolumeID: ids[failing]}})

	s.RecreateStatefulSet(t, "web", scenario.WithSize("2Gi"))
	s.waitDone(t, scenario.ClaimName("web", 0), "2Gi")
	entry := failing + ": resize to 2Gi failing, retried by csi-resizer: Internal: " + driverMessage
	s.WaitTemplateStatus(t, "web", stsTimeout, func(_ *appsv1.StatefulSet, ts status.Template) (bool, string) {
		return ts.ReadyReplicas == 1 && ts.InfeasibleReplicas == 0 && ts.Message == entry,
			fmt.Sprintf("want 1 ready, none infeasible, message %q", entry)
	})
	s.WaitStatefulSetEvent(t, "web", plan.EventVolumeResizeFailing, stsTimeout, failing, "Internal: "+driverMessage)

	// Let csi-resizer retry (and fail) twice more: the condition goes and comes back each time.
	attempts := len(s.Env.Driver.VolumeCalls(t, ids[failing]))
	framework.Eventually(t, stsTimeout, func() (bool, string) {
		n := len(s.Env.Driver.VolumeCalls(t, ids[failing]))
		return n >= attempts+2, fmt.Sprintf("%d ControllerExpandVolume calls for %s, want %d", n, failing, attempts+2)
	})
	if evs := s.StatefulSetEvents(t, "web", plan.EventVolumeResizeFailing); len(evs) != 1 || evs[0].Count != 1 {
		t.Errorf("VolumeResizeFailing events after %d attempts: %s, want one, recorded once", len(s.Env.Driver.VolumeCalls(t, ids[failing])), scenario.DescribeEvents(evs))
	}
	if r := s.wait(t, "web", "--timeout", "3s"); r.Code != 2 || !strings.Contains(r.Stderr, entry) {
		t.Errorf("wait: %s; want exit 2 (a retried failure is no verdict) showing %q", r, entry)
	}

	// The driver recovers: csi-resizer's next retry succeeds.
	s.Driver.SetFaults(t, nil)
	s.waitDone(t, failing, "2Gi")
	_, ts := s.WaitTemplateStatus(t, "web", stsTimeout, scenario.Finished)
	if ts.Message != "" {
		t.Errorf("message %q after the resize, want none", ts.Message)
	}
	if r := s.wait(t, "web"); r.Code != 0 {
		t.Errorf("wait: %s; want exit 0", r)
	}
}

// (c) KEP-1790 recovery through the template: after OUT_OF_RANGE on 2Gi, the template is lowered
// to 1536Mi, above the capacity: statefulset-resizer lowers the request it raised and the
// resizer brings the volume back to the lower size. A replica already at 2Gi is not lowered (a
// volume cannot shrink) but counts as ready (capacity >= template, docs/design.md §3.5), with the
// request left above the template reported. A PVC a person raised is never lowered: it stays
// infeasible until the person lowers it.
func TestStatefulSetRecoveryNeverLowersWhatAPersonRaised(t *testing.T) {
	s := startSTSEnv(t)
	s.StartStatefulSetResizer(t, s.ssrKubeconfig)
	ids := s.CreateStatefulSet(t, s.NewStatefulSet(scenario.StatefulSetOptions{Name: "web", Replicas: 3, Policy: appsv1.ParallelPodManagement, Size: "1Gi"}))
	const driverMessage = "pool too small"
	var faults []framework.Fault
	for _, i := range []int{1, 2} {
		faults = append(faults, framework.Fault{Method: "ControllerExpandVolume", Code: codes.OutOfRange, Message: driverMessage,
			MinRequiredBytes: bytesOf("2Gi"), VolumeID: ids[scenario.ClaimName("web", i)]})
	}
	s.Driver.SetFaults(t, faults)
	s.WaitTemplateStatus(t, "web", stsTimeout, scenario.Finished)

	s.RecreateStatefulSet(t, "web", scenario.WithSize("2Gi"))
	s.waitDone(t, scenario.ClaimName("web", 0), "2Gi")
	for _, i := range []int{1, 2} {
		s.WaitClaim(t, scenario.ClaimName("web", i), stsTimeout, scenario.InState(v1.PersistentVolumeClaimControllerResizeInfeasible))
	}
	// A person raises replica 2's PVC further: it is theirs now. Still too big for the pool.
	personal := scenario.ClaimName("web", 2)
	s.SetRequest(t, personal, "4Gi")
	s.WaitClaim(t, personal, stsTimeout, func(pvc *v1.PersistentVolumeClaim) (bool, string) {
		_, _, alloc := scenario.Storage(pvc)
		return scenario.State(pvc) == v1.PersistentVolumeClaimControllerResizeInfeasible && scenario.Is(alloc, "4Gi"), "want 4Gi infeasible"
	})

	// Recovery: lower the template above the capacity (1Gi). The csi-resizer is stopped
	// meanwhile, holding open the window between statefulset-resizer's patch and the resizer's
	// retry: the verdict on 2Gi must not be reported as one on 1536Mi.
	if err := s.Resizer.Stop(); err != nil {
		t.Fatal(err)
	}
	lowered := scenario.ClaimName("web", 1)
	grown := scenario.ClaimName("web", 0)
	s.RecreateStatefulSet(t, "web", scenario.WithSize("1536Mi"))
	s.WaitClaim(t, lowered, stsTimeout, func(pvc *v1.PersistentVolumeClaim) (bool, string) {
		return scenario.Request(pvc) == "1536Mi" && pvc.Annotations[plan.AnnotationPreResizeStorage] == "1Gi",
			"want the request lowered by statefulset-resizer, the pre-resize size kept"
	})
	window := func(_ *appsv1.StatefulSet, ts status.Template) (bool, string) {
		return ts.ReadyReplicas == 1 && ts.InfeasibleReplicas == 1 && strings.Contains(ts.Message, personal) && !strings.Contains(ts.Message, lowered),
			fmt.Sprintf("want %s ready, %s infeasible, %s pending for the resizer", grown, personal, lowered)
	}
	s.WaitTemplateStatus(t, "web", stsTimeout, window)
	framework.Consistently(t, 3*time.Second, func() (bool, string) {
		sts, st := s.StatefulSet(t, "web")
		if ts := st.Template(scenario.TemplateName); ts == nil || st.ObservedGeneration != sts.Generation {
			return false, "status gone"
		} else if ok, why := window(sts, *ts); !ok {
			return false, fmt.Sprintf("%s; status %+v", why, *ts)
		}
		for _, ev := range s.StatefulSetEvents(t, "web", plan.EventVolumeResizeInfeasible) {
			if strings.Contains(ev.Message, lowered) && strings.Contains(ev.Message, "1536Mi") {
				return false, "the driver never refused 1536Mi, yet: " + ev.Message
			}
		}
		return true, ""
	})
	s.Resizer.Start(t)
	recovered := s.waitDone(t, lowered, "1536Mi")
	if got := scenario.Request(recovered); got != "1536Mi" {
		t.Errorf("recovered PVC request %s, want 1536Mi", got)
	}
	if _, _, alloc := scenario.Storage(recovered); !scenario.Is(alloc, "1536Mi") {
		t.Errorf("recovered PVC allocatedResources %s, want 1536Mi", alloc.String())
	}
	s.WaitStatefulSetEvent(t, "web", plan.EventFailedToPatchPVC, stsTimeout, grown, "cannot lower the request from 2Gi to 1536Mi")
	s.WaitStatefulSetEvent(t, "web", plan.EventVolumeResizeInfeasible, stsTimeout, personal, "4Gi", driverMessage)
	_, ts := s.WaitTemplateStatus(t, "web", stsTimeout, func(_ *appsv1.StatefulSet, ts status.Template) (bool, string) {
		return ts.ReadyReplicas == 2 && ts.InfeasibleReplicas == 1 && strings.Contains(ts.Message, personal) && strings.Contains(ts.Message, grown),
			"want 2 ready (the grown one counts by its capacity), 1 infeasible (the person's)"
	})
	t.Logf("status after recovery: %+v", ts)
	// Neither the grown volume nor the person's request is lowered.
	s.untouched(t, 4*time.Second, ids, map[string]string{grown: "2Gi", personal: "4Gi"})
	if r := s.wait(t, "web"); r.Code != 1 || !strings.Contains(r.Stderr, personal) {
		t.Errorf("wait: %s; want exit 1 naming %s", r, personal)
	}

	// The person lowers their PVC to the template (above the capacity: KEP-1790 lets them):
	// everything is at or above the template, and wait passes, the grown PVC included.
	s.SetRequest(t, personal, "1536Mi")
	s.waitDone(t, personal, "1536Mi")
	s.WaitTemplateStatus(t, "web", stsTimeout, scenario.Finished)
	if r := s.wait(t, "web"); r.Code != 0 {
		t.Errorf("wait: %s; want exit 0", r)
	}
	if got := scenario.Request(s.PVC(t, grown)); got != "2Gi" {
		t.Errorf("%s request %s, want 2Gi", grown, got)
	}
}

// (d) A StorageClass without allowVolumeExpansion: statefulset-resizer knows the apiserver would
// refuse the patch, so it makes none: one FailedToPatchPVC event per PVC, the replicas counted
// infeasible, `wait` exits 1 — and no request storm while the StatefulSet, its pods and the
// resync keep re-evaluating it: no PVC patch (its own counter and the apiserver's), no new
// status write, no new event. Allowing expansion on the class lets the resize go through.
func TestStatefulSetStorageClassWithoutExpansion(t *testing.T) {
	s := startSTSEnv(t)
	ssr := s.StartStatefulSetResizer(t, s.ssrKubeconfig, "--resync-period=2s")
	fixed := "fixed-" + s.Namespace
	if _, err := s.Client.StorageV1().StorageClasses().Create(s.Ctx, &storagev1.StorageClass{
		ObjectMeta:           metav1.ObjectMeta{Name: fixed},
		Provisioner:          s.Driver.Name,
		AllowVolumeExpansion: ptr.To(false),
		ReclaimPolicy:        ptr.To(v1.PersistentVolumeReclaimRetain),
		VolumeBindingMode:    ptr.To(storagev1.VolumeBindingImmediate),
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.CreateStatefulSet(t, s.NewStatefulSet(scenario.StatefulSetOptions{Name: "web", Replicas: 3, Policy: appsv1.ParallelPodManagement, Size: "1Gi", StorageClass: fixed}))
	s.WaitTemplateStatus(t, "web", stsTimeout, scenario.Finished)

	s.RecreateStatefulSet(t, "web", scenario.WithSize("2Gi"))
	for i := 0; i < 3; i++ {
		s.WaitStatefulSetEvent(t, "web", plan.EventFailedToPatchPVC, stsTimeout, scenario.ClaimName("web", i), "does not allow volume expansion")
	}
	s.WaitTemplateStatus(t, "web", stsTimeout, func(_ *appsv1.StatefulSet, ts status.Template) (bool, string) {
		return ts.InfeasibleReplicas == 3 && strings.Contains(ts.Message, "StorageClass "+fixed+" does not allow volume expansion"),
			"want 3 infeasible replicas naming the StorageClass"
	})

	// The storm window: changes that make statefulset-resizer re-evaluate the StatefulSet
	// (pod labels, StatefulSet labels; and the 2s resync), then count.
	pvcPatches := []string{`verb="PATCH"`, `resource="persistentvolumeclaims"`, `subresource=""`}
	stsPatches := []string{`verb="PATCH"`, `resource="statefulsets"`, `subresource=""`}
	apiPVC, apiSTS := s.APIServerRequests(t, pvcPatches...), s.APIServerRequests(t, stsPatches...)
	events := s.StatefulSetEvents(t, "web", "")
	reconciles := scenario.MetricValue(scenario.Scrape(t, ssr), "statefulset_resizer_reconcile_duration_seconds_count")
	const rounds = 3 // each also one PATCH of the StatefulSet by the test
	for round := 0; round < rounds; round++ {
		for i := 0; i < 3; i++ {
			s.PatchPod(t, scenario.PodName("web", i), fmt.Sprintf(`{"metadata":{"labels":{"churn":"%d"}}}`, round))
		}
		if _, err := s.Client.AppsV1().StatefulSets(s.Namespace).Patch(s.Ctx, "web", types.MergePatchType,
			[]byte(fmt.Sprintf(`{"metadata":{"labels":{"churn":"%d"}}}`, round)), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	framework.Consistently(t, 5*time.Second, func() (bool, string) {
		if n := patches(t, ssr, ""); n != 0 {
			return false, fmt.Sprintf("statefulset_resizer_pvc_patches_total = %v, want 0", n)
		}
		if d := s.APIServerRequests(t, pvcPatches...) - apiPVC; d != 0 {
			return false, fmt.Sprintf("%v PVC PATCH requests reached the apiserver", d)
		}
		if d := s.APIServerRequests(t, stsPatches...) - apiSTS - rounds; d != 0 {
			return false, fmt.Sprintf("%v StatefulSet PATCH requests (status annotation writes) for an unchanged status", d)
		}
		if now := s.StatefulSetEvents(t, "web", ""); !sameEvents(events, now) {
			return false, fmt.Sprintf("events changed: %d events before, now %s", len(events), scenario.DescribeEvents(now))
		}
		return true, ""
	})
	scrape := scenario.Scrape(t, ssr)
	after := scenario.MetricValue(scrape, "statefulset_resizer_reconcile_duration_seconds_count")
	if adds := scenario.MetricValue(scrape, "workqueue_adds_total", `name="statefulset-resizer"`); adds == 0 {
		t.Errorf("workqueue_adds_total{name=statefulset-resizer} = %v: the work queue's metrics are not served", adds)
	}
	if after-reconciles < 3 {
		t.Errorf("only %v reconciles during the window: the churn did not make the controller re-evaluate", after-reconciles)
	}
	t.Logf("%v reconciles in the window, no PVC patch, no status write, %d events", after-reconciles, len(events))
	if r := s.wait(t, "web"); r.Code != 1 || !strings.Contains(r.Stderr, "does not allow volume expansion") {
		t.Errorf("wait: %s; want exit 1 naming the StorageClass", r)
	}

	// The administrator allows expansion: the StorageClass change is picked up. The apiserver's
	// PVC resize admission reads StorageClasses from its own cache, which can see the change
	// after statefulset-resizer does: a first patch may then be refused ("forbidden: ... must
	// support resize"), by admission, not RBAC; the status write it causes brings the
	// StatefulSet back and the next patch goes through (CI saw this once).
	s.ExpectRefusals("the storageclass that provisions the pvc must support resize")
	sc, err := s.Client.StorageV1().StorageClasses().Get(s.Ctx, fixed, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sc.AllowVolumeExpansion = ptr.To(true)
	if _, err := s.Client.StorageV1().StorageClasses().Update(s.Ctx, sc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		s.waitDone(t, scenario.ClaimName("web", i), "2Gi")
	}
	s.WaitTemplateStatus(t, "web", stsTimeout, scenario.Finished)
	if n := patches(t, ssr, "success"); n != 3 {
		t.Errorf("statefulset_resizer_pvc_patches_total{result=success} = %v, want 3", n)
	}
	// The apiserver's counter does see PVC patches: its zero above meant something.
	if d := s.APIServerRequests(t, pvcPatches...) - apiPVC; d < 3 {
		t.Errorf("apiserver counted %v PVC PATCH requests for the 3 patches", d)
	}
}

func sameEvents(a, b []v1.Event) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].Count != b[i].Count {
			return false
		}
	}
	return true
}

// (e) docs/design.md §3 rule 1: a replica's PVC is resized only while its pod is Running, at the update
// revision and not terminating. With updateStrategy OnDelete and a pod template change, four
// replicas are in four situations when the template grows: Running at the update revision
// (resized at once), Pending, terminating (held by a finalizer), Running at the old revision.
// Each PVC is left alone until its pod is eligible, then resized.
func TestStatefulSetWaitsForEligiblePods(t *testing.T) {
	s := startSTSEnv(t)
	ssr := s.StartStatefulSetResizer(t, s.ssrKubeconfig)
	sts := s.NewStatefulSet(scenario.StatefulSetOptions{Name: "web", Replicas: 4, Policy: appsv1.ParallelPodManagement, Size: "1Gi", OnDelete: true})
	ids := s.CreateStatefulSet(t, sts)
	s.WaitTemplateStatus(t, "web", stsTimeout, scenario.Finished)

	// A pod template change: a new update revision, pods stay at the old one (OnDelete).
	sets := s.Client.AppsV1().StatefulSets(s.Namespace)
	if _, err := sets.Patch(s.Ctx, "web", types.MergePatchType, []byte(`{"spec":{"template":{"metadata":{"annotations":{"rollout":"2"}}}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	var updateRevision string
	framework.Eventually(t, time.Minute, func() (bool, string) {
		cur, err := sets.Get(s.Ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		updateRevision = cur.Status.UpdateRevision
		return cur.Status.ObservedGeneration == cur.Generation && cur.Status.UpdateRevision != cur.Status.CurrentRevision,
			fmt.Sprintf("want a new update revision observed: %+v", cur.Status)
	})
	// web-0, web-1 and web-2 are replaced at the update revision; web-0 and web-2 run, web-1
	// stays Pending.
	for _, i := range []int{0, 1, 2} {
		s.DeleteStatefulSetPod(t, scenario.PodName("web", i))
	}
	s.RunPod(t, "web", 0)
	s.RunPod(t, "web", 2)
	framework.Eventually(t, time.Minute, func() (bool, string) {
		pod, err := s.Client.CoreV1().Pods(s.Namespace).Get(s.Ctx, scenario.PodName("web", 1), metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return pod.Labels[appsv1.StatefulSetRevisionLabel] == updateRevision, "want web-1 re-created at " + updateRevision
	})
	// web-2 is terminating (a finalizer holds it), at the update revision.
	const hold = "csi-resizer.io/test-hold"
	terminating := scenario.PodName("web", 2)
	if rev := s.Pod(t, terminating).Labels[appsv1.StatefulSetRevisionLabel]; rev != updateRevision {
		t.Fatalf("%s at revision %s, want the update revision %s", terminating, rev, updateRevision)
	}
	s.PatchPod(t, terminating, `{"metadata":{"finalizers":["`+hold+`"]}}`)
	if err := s.Client.CoreV1().Pods(s.Namespace).Delete(s.Ctx, terminating, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if pod := s.Pod(t, terminating); pod.DeletionTimestamp == nil {
		t.Fatalf("%s is not terminating", terminating)
	}
	// web-3 runs at the old revision.
	if rev := s.Pod(t, scenario.PodName("web", 3)).Labels[appsv1.StatefulSetRevisionLabel]; rev == updateRevision {
		t.Fatalf("web-3 at the update revision %s already", rev)
	}

	s.RecreateStatefulSet(t, "web", scenario.WithSize("2Gi"))
	s.waitDone(t, scenario.ClaimName("web", 0), "2Gi")
	waiting := map[string]string{}
	for i := 1; i < 4; i++ {
		waiting[scenario.ClaimName("web", i)] = "1Gi"
	}
	s.untouched(t, 4*time.Second, ids, waiting)
	_, ts := s.WaitTemplateStatus(t, "web", stsTimeout, func(_ *appsv1.StatefulSet, ts status.Template) (bool, string) {
		return ts.ReadyReplicas == 1 && ts.InfeasibleReplicas == 0, "want 1 ready, nothing infeasible"
	})
	if ts.FinishedReconciliationGeneration != 0 {
		t.Errorf("status %+v: finished while 3 replicas wait for their pods", ts)
	}
	// Each for its own reason (the controller's -v=4 log says why a replica is not ready).
	for i, reason := range map[int]string{1: plan.ReasonPodNotRunning, 2: plan.ReasonPodTerminating, 3: plan.ReasonPodNotUpdated} {
		want := fmt.Sprintf(`pvc="%s/%s" state="Pending" reason="%s"`, s.Namespace, scenario.ClaimName("web", i), reason)
		framework.Eventually(t, 30*time.Second, func() (bool, string) {
			return ssr.LogContains(want), "statefulset-resizer log lacks " + want
		})
	}

	// Not Running -> Running.
	s.RunPod(t, "web", 1)
	s.waitDone(t, scenario.ClaimName("web", 1), "2Gi")
	delete(waiting, scenario.ClaimName("web", 1))
	s.untouched(t, 2*time.Second, ids, waiting)

	// Terminating -> gone, re-created at the update revision, Running. The StatefulSet
	// controller backs off (exponentially) while the old pod is in the way, and the pod's
	// deletion does not wake it up (the pod was orphaned by the re-create, so it names no
	// owner): a change of the StatefulSet does.
	oldUID := s.Pod(t, terminating).UID
	s.PatchPod(t, terminating, `{"metadata":{"finalizers":null}}`)
	framework.Eventually(t, time.Minute, func() (bool, string) {
		pod, err := s.Client.CoreV1().Pods(s.Namespace).Get(s.Ctx, terminating, metav1.GetOptions{})
		if err == nil && pod.UID == oldUID {
			return false, "the terminating pod is still there"
		}
		return true, ""
	})
	if _, err := sets.Patch(s.Ctx, "web", types.MergePatchType, []byte(`{"metadata":{"annotations":{"nudge":"1"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	s.RunPod(t, "web", 2)
	s.waitDone(t, scenario.ClaimName("web", 2), "2Gi")
	delete(waiting, scenario.ClaimName("web", 2))
	s.untouched(t, 2*time.Second, ids, waiting)

	// Old revision -> deleted (OnDelete), re-created at the update revision, Running.
	s.DeleteStatefulSetPod(t, scenario.PodName("web", 3))
	s.RunPod(t, "web", 3)
	s.waitDone(t, scenario.ClaimName("web", 3), "2Gi")
	s.WaitTemplateStatus(t, "web", stsTimeout, scenario.Finished)
	if r := s.wait(t, "web"); r.Code != 0 {
		t.Errorf("wait: %s; want exit 0", r)
	}
}

// Two statefulset-resizer processes with --leader-election: only one reconciles; killing it
// mid-resize (SIGKILL: no lease release) lets the other take over and finish.
func TestStatefulSetResizerLeaderElectionFailover(t *testing.T) {
	s := startSTSEnv(t)
	le := []string{"--leader-election", "--leader-election-lease-duration=6s", "--leader-election-renew-deadline=4s", "--leader-election-retry-period=1s"}
	a := s.StartStatefulSetResizer(t, s.ssrKubeconfig, le...)
	b := s.StartStatefulSetResizer(t, s.ssrKubeconfig, le...)
	// client-go's leader_election_master_status, labelled with the Lease's name.
	leading := func(p *framework.Process) bool {
		return scenario.MetricValue(scenario.Scrape(t, p), "leader_election_master_status", `name="statefulset-resizer"`) == 1
	}
	var leader, follower *framework.Process
	framework.Eventually(t, time.Minute, func() (bool, string) {
		la, lb := leading(a), leading(b)
		switch {
		case la && !lb:
			leader, follower = a, b
		case lb && !la:
			leader, follower = b, a
		default:
			return false, fmt.Sprintf("want exactly one leader: a=%v b=%v", la, lb)
		}
		return true, ""
	})
	framework.Consistently(t, 3*time.Second, func() (bool, string) {
		return leading(leader) && !leading(follower), "leadership moved or doubled without a failure"
	})

	sts := s.NewStatefulSet(scenario.StatefulSetOptions{Name: "web", Replicas: 3, Policy: appsv1.OrderedReadyPodManagement, Size: "1Gi"})
	ids := s.CreateStatefulSet(t, sts)
	s.WaitTemplateStatus(t, "web", stsTimeout, scenario.Finished)
	// Replica 0's expansion is slow, so the leader is killed in the middle of the ordered resize.
	s.Driver.SetFaults(t, []framework.Fault{{Method: "ControllerExpandVolume", Delay: 3 * time.Second, VolumeID: ids[scenario.ClaimName("web", 0)]}})
	s.RecreateStatefulSet(t, "web", scenario.WithSize("2Gi"))
	s.WaitClaim(t, scenario.ClaimName("web", 0), stsTimeout, func(pvc *v1.PersistentVolumeClaim) (bool, string) {
		return scenario.Request(pvc) == "2Gi", "want the leader's patch"
	})
	if n := patches(t, leader, "success"); n != 1 {
		t.Fatalf("leader made %v patches, want 1 (replica 0)", n)
	}
	if n := patches(t, follower, ""); n != 0 {
		t.Fatalf("follower made %v patches while not leading", n)
	}
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()

	for i := 0; i < 3; i++ {
		s.waitDone(t, scenario.ClaimName("web", i), "2Gi")
	}
	s.WaitTemplateStatus(t, "web", stsTimeout, scenario.Finished)
	t.Logf("takeover and the rest of the resize took %s", time.Since(killed).Round(time.Millisecond))
	if !leading(follower) {
		t.Error("the surviving process does not report leadership")
	}
	if n := patches(t, follower, "success"); n != 2 {
		t.Errorf("the surviving process made %v patches, want 2 (replicas 1 and 2)", n)
	}
	if r := s.wait(t, "web"); r.Code != 0 {
		t.Errorf("wait: %s; want exit 0", r)
	}
}

// (g) The controller in-process on the real apiserver, the test playing every other actor (the
// StatefulSet controller's status, the kubelet, the resizer, a person): what depends on
// resourceVersions and on the echoes of the controller's own writes, which client-go's fake
// under the unit tests neither checks nor produces. Every request of the controller is seen on
// its way (a wrapped transport).
//
//  1. Own writes: the controller syncs again while its cache lags behind its own writes (the
//     test holds the watch of PVCs, then of StatefulSets, and makes it sync meanwhile): each PVC
//     is still patched exactly once per template change, and no status write repeats the one
//     before it (package freshness).
//  2. Precondition: a person raises a PVC between the controller's look and its patch. The
//     patch carries the resourceVersion the controller saw, so the apiserver refuses it (409)
//     and the person's request stays; the controller decides again and leaves it alone.
func TestStatefulSetControllerOwnWritesAndPrecondition(t *testing.T) {
	cluster := framework.StartCluster(t, framework.ClusterOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	client := cluster.Client
	ns := framework.CreateNamespace(t, ctx, client, "ssr")
	sc := "expandable-" + ns

	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](3), PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "pause"}}}},
			VolumeClaimTemplates: []v1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: v1.PersistentVolumeClaimSpec{StorageClassName: ptr.To(sc), AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
					Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}}}}},
		},
	}
	template := sts.DeepCopy()
	sts, err := client.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const revision = "web-rev1"
	observe := func() { // plays the StatefulSet controller: it has seen the current generation
		t.Helper()
		cur, err := client.AppsV1().StatefulSets(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Status = appsv1.StatefulSetStatus{ObservedGeneration: cur.Generation, Replicas: 3, UpdateRevision: revision, CurrentRevision: revision}
		if _, err := client.AppsV1().StatefulSets(ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	observe()
	for i := 0; i < 3; i++ {
		framework.CreateBoundClaim(t, ctx, client, ns, scenario.ClaimName("web", i), "csi.example.com", fmt.Sprintf("vol-%d", i), "1Gi", sc)
		pod, err := client.CoreV1().Pods(ns).Create(ctx, &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: scenario.PodName("web", i),
				Labels: map[string]string{"app": "web", appsv1.StatefulSetRevisionLabel: revision},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "web", UID: sts.UID,
					Controller: ptr.To(true)}}},
			Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "pause"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		framework.MarkPodRunning(t, ctx, client, pod)
	}

	seen := &requestLog{held: map[string]chan struct{}{}}
	reconciles := startInProcessStatefulSetResizer(t, ctx, cluster, seen)
	// syncedAgain makes the controller sync at least once more (poke is a change that wakes it)
	// and waits until it did.
	syncedAgain := func(poke func(i int)) {
		t.Helper()
		before, i := reconciles(), 0
		framework.Eventually(t, stsTimeout, func() (bool, string) {
			i++
			poke(i)
			// +2: the sync that made the last write may be counted after before was read.
			return reconciles() >= before+2, fmt.Sprintf("%v reconciles since %v", reconciles(), before)
		})
	}
	label := func(resource, name string, i int) {
		t.Helper()
		patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{"poke":"%d"}}}`, i))
		var err error
		if resource == "statefulsets" {
			_, err = client.AppsV1().StatefulSets(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		} else {
			_, err = client.CoreV1().PersistentVolumeClaims(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	statusWrites := func() int { return len(seen.requests("PATCH", "statefulsets/web")) }
	writtenSince := func(n int) {
		t.Helper()
		framework.Eventually(t, stsTimeout, func() (bool, string) {
			return statusWrites() > n, fmt.Sprintf("no status write since the %d before: %s", n, seen)
		})
	}
	setTemplate := func(size string) { // the documented flow: delete --cascade=orphan, apply
		t.Helper()
		// No garbage collector runs here: the pods stay, owned by name like adopted ones.
		if err := client.AppsV1().StatefulSets(ns).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		next := template.DeepCopy()
		next.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[v1.ResourceStorage] = resource.MustParse(size)
		if _, err := client.AppsV1().StatefulSets(ns).Create(ctx, next, metav1.CreateOptions{}); err != nil {
			t.Fatalf("re-create with %s: %v", size, err)
		}
		observe()
	}
	resizeWhenAsked := func(size string, claims ...string) { // plays csi-resizer and the kubelet
		t.Helper()
		want := resource.MustParse(size)
		for _, claim := range claims {
			framework.Eventually(t, stsTimeout, func() (bool, string) {
				pvc, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
				if err != nil {
					return false, err.Error()
				}
				if request := pvc.Spec.Resources.Requests[v1.ResourceStorage]; request.Cmp(want) != 0 {
					return false, fmt.Sprintf("%s: request %s, waiting for %s", claim, &request, size)
				}
				if got := pvc.Status.Capacity[v1.ResourceStorage]; got.Cmp(want) == 0 {
					return true, ""
				}
				pvc.Status.Capacity = v1.ResourceList{v1.ResourceStorage: want}
				_, err = client.CoreV1().PersistentVolumeClaims(ns).UpdateStatus(ctx, pvc, metav1.UpdateOptions{})
				return false, fmt.Sprintf("%s: capacity set to %s: %v", claim, size, err)
			})
		}
	}
	finished := func() { // the status annotation of the current object says finished
		t.Helper()
		framework.Eventually(t, stsTimeout, func() (bool, string) {
			cur, err := client.AppsV1().StatefulSets(ns).Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			st, _ := status.FromStatefulSet(cur) // nil for another object's
			ts := st.Template("data")
			return ts != nil && ts.FinishedReconciliationGeneration == cur.Generation,
				fmt.Sprintf("status annotation %q, uid %s", cur.Annotations[status.Annotation], cur.UID)
		})
	}
	finished()

	// 1. Own writes. The PVC patches, then a sync while the cache shows none of them.
	claims := []string{scenario.ClaimName("web", 0), scenario.ClaimName("web", 1), scenario.ClaimName("web", 2)}
	seen.hold("persistentvolumeclaims")
	n := statusWrites()
	setTemplate("2Gi")
	writtenSince(n) // after the patches, in the same sync
	syncedAgain(func(i int) { label("statefulsets", "web", i) })
	seen.release("persistentvolumeclaims")
	// A status write, then a sync while the cache does not show it.
	seen.hold("statefulsets")
	n = statusWrites()
	resizeWhenAsked("2Gi", claims[0])
	writtenSince(n) // one replica ready
	syncedAgain(func(i int) { label("persistentvolumeclaims", claims[1], i) })
	seen.release("statefulsets")
	resizeWhenAsked("2Gi", claims[1:]...)
	finished()
	for _, claim := range claims {
		if n := len(seen.requests("PATCH", "persistentvolumeclaims/"+claim)); n != 1 {
			t.Errorf("%s patched %d times for one template change, want 1: %s", claim, n, seen)
		}
	}
	previous := ""
	for _, r := range seen.requests("PATCH", "statefulsets/web") {
		if r.body == previous {
			t.Errorf("status written twice in a row with the same value %s: %s", r.body, seen)
		}
		previous = r.body
	}

	// 2. Precondition: the person raises web-0's claim to 5Gi just before the controller's
	// patch of it to 3Gi reaches the apiserver.
	person := scenario.ClaimName("web", 0)
	seen.before(func(method, path string) {
		if method != "PATCH" || !strings.HasSuffix(path, "persistentvolumeclaims/"+person) {
			return
		}
		seen.before(nil)
		patch := []byte(`{"spec":{"resources":{"requests":{"storage":"5Gi"}}}}`)
		if _, err := client.CoreV1().PersistentVolumeClaims(ns).Patch(ctx, person, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Errorf("the person's raise: %v", err)
		}
	})
	setTemplate("3Gi")
	resizeWhenAsked("3Gi", claims[1:]...)
	framework.Eventually(t, stsTimeout, func() (bool, string) {
		pvc, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, person, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		patches := seen.requests("PATCH", "persistentvolumeclaims/"+person)
		refused := len(patches) == 2 && patches[1].code == http.StatusConflict && strings.Contains(patches[1].body, `"resourceVersion"`)
		return scenario.Request(pvc) == "5Gi" && refused,
			fmt.Sprintf("%s: request %s, want 5Gi and the controller's second patch of it refused (409); its patches: %s",
				person, scenario.Request(pvc), seen)
	})
	resizeWhenAsked("5Gi", person)
	finished()
	if got := scenario.Request(mustGetPVC(t, ctx, client, ns, person)); got != "5Gi" {
		t.Errorf("%s: request %s, want the person's 5Gi", person, got)
	}
}

// requestLog records the requests of a client (method, path, body, answer) and can run a hook
// before one is sent.
type requestLog struct {
	mu   sync.Mutex
	log  []loggedRequest
	hook func(method, path string)
	// held holds back the events of the watches of a resource until its channel is closed.
	held map[string]chan struct{}
}

// hold makes the client's cache of resource lag: its watch events are held back from now on.
func (l *requestLog) hold(resource string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held[resource] = make(chan struct{})
}

// release delivers the held events of resource, and the ones after them.
func (l *requestLog) release(resource string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	close(l.held[resource])
	delete(l.held, resource)
}

func (l *requestLog) waitReleased(resource string) {
	l.mu.Lock()
	held := l.held[resource]
	l.mu.Unlock()
	if held != nil {
		<-held
	}
}

// heldBody is the body of a watch response: what it read is handed on once its resource is not
// held (a read in progress when the hold starts is held too).
type heldBody struct {
	io.ReadCloser
	wait func()
}

func (b heldBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.wait()
	return n, err
}

type loggedRequest struct {
	method, path, body string
	code               int
}

func (l *requestLog) before(hook func(method, path string)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.hook = hook
}

func (l *requestLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		var body []byte
		if req.Body != nil {
			var err error
			if body, err = io.ReadAll(req.Body); err != nil {
				return nil, err
			}
			req.Body = io.NopCloser(bytes.NewReader(body))
		}
		l.mu.Lock()
		hook := l.hook
		l.mu.Unlock()
		if hook != nil {
			hook(req.Method, req.URL.Path)
		}
		resp, err := rt.RoundTrip(req)
		code := 0
		if resp != nil {
			code = resp.StatusCode
			if req.URL.Query().Get("watch") == "true" {
				resource := req.URL.Path[strings.LastIndex(req.URL.Path, "/")+1:]
				resp.Body = heldBody{ReadCloser: resp.Body, wait: func() { l.waitReleased(resource) }}
			}
		}
		l.mu.Lock()
		l.log = append(l.log, loggedRequest{req.Method, req.URL.Path, string(body), code})
		l.mu.Unlock()
		return resp, err
	})
}

// requests returns the logged requests with method whose path ends in suffix.
func (l *requestLog) requests(method, suffix string) []loggedRequest {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []loggedRequest
	for _, r := range l.log {
		if r.method == method && strings.HasSuffix(r.path, suffix) {
			out = append(out, r)
		}
	}
	return out
}

func (l *requestLog) String() string {
	var b strings.Builder
	for _, r := range l.requests("PATCH", "") {
		fmt.Fprintf(&b, "\n  %s %s -> %d %s", r.method, r.path, r.code, r.body)
	}
	return b.String()
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// startInProcessStatefulSetResizer runs package controller with the admin identity and its
// requests through seen, until the test ends. It returns the count of reconciles so far.
func startInProcessStatefulSetResizer(t *testing.T, ctx context.Context, cluster *framework.Cluster, seen *requestLog) func() float64 {
	t.Helper()
	config := rest.CopyConfig(cluster.Config)
	config.Wrap(seen.wrap)
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	m, registry := ssmetrics.New(), k8smetrics.NewKubeRegistry()
	if err := m.Register(registry.Register); err != nil {
		t.Fatal(err)
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	ctrl, err := controller.New(ctx, client, factory, &record.FakeRecorder{}, clock.RealClock{}, controller.Options{Metrics: m, RecordNamespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ctrl.Run(ctx, 4) }()
	t.Cleanup(func() {
		seen.mu.Lock()
		for _, held := range seen.held { // let the informers stop
			close(held)
		}
		seen.held = map[string]chan struct{}{}
		seen.mu.Unlock()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller: %v", err)
		}
		factory.Shutdown()
	})
	return func() float64 {
		families, err := registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var n float64
		for _, f := range families {
			if f.GetName() == "statefulset_resizer_reconcile_duration_seconds" {
				for _, sample := range f.GetMetric() {
					n += float64(sample.GetHistogram().GetSampleCount())
				}
			}
		}
		return n
	}
}

func mustGetPVC(t *testing.T, ctx context.Context, client kubernetes.Interface, ns, name string) *v1.PersistentVolumeClaim {
	t.Helper()
	pvc, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pvc
}
