package controller_test

import (
	"math"
	"testing"
	"time"

	csispec "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/csi-resizer/csi-resizer/pkg/controller"
	"github.com/csi-resizer/csi-resizer/pkg/internal/csitest"
	"github.com/csi-resizer/csi-resizer/pkg/internal/kubetest"
)

// TestInfeasibleSlowRetry: an infeasible PVC is retried every --retry-interval-max, counted from
// the first failure: over a window T after the first call the driver sees exactly
// 1 + floor(T / max) calls, and the second call comes max after the first, not at once
// (DESIGN §2.3 rule 8, §2.6).
func TestInfeasibleSlowRetry(t *testing.T) {
	t.Parallel()
	const max = 1500 * time.Millisecond
	// T is half-way between 2*max and 3*max, so the expected count has 750ms of slack on
	// both sides and timing cannot make it ambiguous.
	const window = 3750 * time.Millisecond
	pvc, pv := claim("data", "10Gi", "1Gi")
	infeasible := csitest.Fail(codes.OutOfRange, "at most 5Gi")
	e := start(t, setup{objects: objects(pvc, pv), defaultResponse: &infeasible, retryStart: 20 * time.Millisecond, retryMax: max})

	first := e.csi.WaitForExpandCalls(t, 1, waitLimit)[0]
	// Observing how many calls happen in a window: wait for the window on a timer.
	<-time.After(time.Until(first.At.Add(window)))
	var calls []csitest.ExpandCall
	for _, c := range e.csi.ExpandCalls() {
		if !c.At.After(first.At.Add(window)) {
			calls = append(calls, c)
		}
	}
	want := 1 + int(math.Floor(float64(window)/float64(max)))
	if len(calls) != want {
		t.Errorf("%d ControllerExpandVolume calls within %s of the first, want 1 + floor(%s / %s) = %d", len(calls), window, window, max, want)
	}
	for i := 1; i < len(calls); i++ {
		gap := calls[i].At.Sub(calls[i-1].At)
		if gap < max {
			t.Errorf("call %d came %s after call %d, before the slow retry interval %s", i+1, gap, i, max)
		}
		if i == 1 && gap > max+500*time.Millisecond {
			t.Errorf("the second call came %s after the first: the slow retry should count from the first failure (%s)", gap, max)
		}
	}
	got := e.pvc("data")
	if state(got) != v1.PersistentVolumeClaimControllerResizeInfeasible && state(got) != v1.PersistentVolumeClaimControllerResizeInProgress {
		t.Errorf("PVC: %s; want ControllerResizeInfeasible (or InProgress during a retry)", describe(got))
	}
	if n, calls := e.events.Count(controller.EventResizeFailed), len(e.csi.ExpandCalls()); n < calls-1 || n > calls {
		t.Errorf("%d VolumeResizeFailed events for %d failed calls", n, calls)
	}
	if v := e.metric("csi_resizer_expansion_duration_seconds", map[string]string{"result": "failure"}); v != 1 {
		t.Errorf("csi_resizer_expansion_duration_seconds{result=failure} has %v observations, want 1 (the first infeasible failure ends the expansion's timing)", v)
	}
}

// TestInfeasibleAfterRestart: a resizer that starts on a PVC already infeasible (a restart)
// waits for the slow retry counted from the failure recorded in the PVC, not from its own
// start (rules 7 and 8).
func TestInfeasibleAfterRestart(t *testing.T) {
	t.Parallel()
	const max = 2 * time.Second
	pvc, pv := claim("data", "10Gi", "1Gi")
	failedAt := metav1.NewTime(time.Now().Add(-500 * time.Millisecond))
	pvc.Status.AllocatedResources = v1.ResourceList{v1.ResourceStorage: resource.MustParse("10Gi")}
	pvc.Status.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{v1.ResourceStorage: v1.PersistentVolumeClaimControllerResizeInfeasible}
	pvc.Status.Conditions = []v1.PersistentVolumeClaimCondition{{
		Type: v1.PersistentVolumeClaimControllerResizeError, Status: v1.ConditionTrue, Reason: "OutOfRange",
		Message: "at most 5Gi", LastProbeTime: failedAt, LastTransitionTime: failedAt,
	}}
	infeasible := csitest.Fail(codes.OutOfRange, "at most 5Gi")
	started := time.Now()
	e := start(t, setup{objects: objects(pvc, pv), defaultResponse: &infeasible, retryStart: 20 * time.Millisecond, retryMax: max})

	first := e.csi.WaitForExpandCalls(t, 1, waitLimit)[0]
	if early := failedAt.Add(max).Sub(first.At); early > 50*time.Millisecond {
		t.Errorf("first call %s after start, %s before the slow retry counted from the recorded failure", first.At.Sub(started), early)
	}
	if late := first.At.Sub(failedAt.Add(max)); late > time.Second {
		t.Errorf("first call %s after the slow retry was due", late)
	}
}

// TestRecoveryBypassesSlowRetry: lowering the request of an infeasible PVC (KEP-1790 Case 1) is
// acted on at once, not after --retry-interval-max, and the recovery succeeds.
func TestRecoveryBypassesSlowRetry(t *testing.T) {
	t.Parallel()
	pvc, pv := claim("data", "10Gi", "1Gi")
	e := start(t, setup{
		objects:   objects(pvc, pv),
		responses: []csitest.Response{csitest.Fail(codes.OutOfRange, "at most 5Gi")},
		retryMax:  time.Minute,
	})
	e.waitForClaim("data", "ControllerResizeInfeasible", func(p *v1.PersistentVolumeClaim) bool {
		return state(p) == v1.PersistentVolumeClaimControllerResizeInfeasible
	})
	changed := time.Now()
	e.setRequest("data", "3Gi")

	got := e.waitForClaim("data", "recovered at 3Gi", func(p *v1.PersistentVolumeClaim) bool {
		return capacityOf(p.Status.Capacity) == "3Gi"
	})
	calls := e.csi.ExpandCalls()
	if len(calls) != 2 {
		t.Fatalf("ControllerExpandVolume calls = %d, want 2", len(calls))
	}
	if d := calls[1].At.Sub(changed); d > 5*time.Second {
		t.Errorf("the call after the request was lowered came %s later; it must not wait for the slow retry", d)
	}
	if b := calls[1].Request.GetCapacityRange().GetRequiredBytes(); b != bytesOf("3Gi") {
		t.Errorf("recovery asked the driver for %d bytes, want %d", b, bytesOf("3Gi"))
	}
	if state(got) != "" || allocated(got) != "3Gi" || len(got.Status.Conditions) != 0 {
		t.Errorf("PVC after the recovery: %s; want allocated 3Gi, no state, no conditions", describe(got))
	}
	if c := capacityOf(e.pv("pv-data").Spec.Capacity); c != "3Gi" {
		t.Errorf("PV capacity = %s, want 3Gi", c)
	}
	ev := e.waitForEvent(controller.EventResizeRecovered)
	if ev.Type != v1.EventTypeNormal {
		t.Errorf("event = %v, want Normal", ev)
	}
	if n := e.events.Count(controller.EventResizeSuccessful); n != 0 {
		t.Errorf("%d %s events besides %s", n, controller.EventResizeSuccessful, controller.EventResizeRecovered)
	}
	if v := e.metric("csi_resizer_volume_recovery_total", map[string]string{"state": "success"}); v != 1 {
		t.Errorf("csi_resizer_volume_recovery_total{state=success} = %v, want 1", v)
	}
	if v := e.metric("csi_resizer_volume_recovery_total", map[string]string{"state": "failure"}); v != 0 {
		t.Errorf("csi_resizer_volume_recovery_total{state=failure} = %v, want 0", v)
	}
}

// TestForgetsDeletedClaim: what the controller remembers about a PVC is dropped when the PVC is
// deleted (rule 10), also when the deletion happens while the driver call is under way.
func TestForgetsDeletedClaim(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer csitest.Response
		// inFlight: delete while the driver is still answering.
		inFlight bool
	}{
		{name: "infeasible", answer: csitest.Fail(codes.OutOfRange, "too big")},
		{name: "transient during the call", answer: csitest.Response{Code: codes.Unavailable, Message: "busy", Delay: 300 * time.Millisecond}, inFlight: true},
		{name: "success during the call", answer: csitest.Response{Code: codes.OK, Grant: true, Delay: 300 * time.Millisecond}, inFlight: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pvc, pv := claim("data", "10Gi", "1Gi")
			e := start(t, setup{objects: objects(pvc, pv), defaultResponse: &tc.answer, retryMax: time.Minute})
			const key = ns + "/data"
			if tc.inFlight {
				e.csi.WaitForExpandCalls(t, 1, waitLimit)
			} else {
				e.waitForClaim("data", "ControllerResizeInfeasible", func(p *v1.PersistentVolumeClaim) bool {
					return state(p) == v1.PersistentVolumeClaimControllerResizeInfeasible
				})
			}
			if !e.ctrl.Remembered(key) {
				t.Fatalf("nothing remembered about %s while its expansion is under way; the test cannot show it is forgotten", key)
			}
			if err := e.kube.Delete(kubetest.PVCs, ns, "data"); err != nil {
				t.Fatal(err)
			}
			e.waitFor("the controller to forget "+key, func() (bool, string) {
				return !e.ctrl.Remembered(key), "still remembered"
			})
		})
	}
}

// TestLegacyMode: with RecoverVolumeExpansionFailure off the controller never writes
// allocatedResources or allocatedResourceStatuses, and still completes a resize.
func TestLegacyMode(t *testing.T) {
	t.Run("success", func(t *testing.T) {
		t.Parallel()
		pvc, pv := claim("data", "2Gi", "1Gi")
		e := start(t, setup{objects: objects(pvc, pv), legacy: true})
		got := e.waitForClaim("data", "resized", func(p *v1.PersistentVolumeClaim) bool {
			return capacityOf(p.Status.Capacity) == "2Gi"
		})
		e.waitForEvent(controller.EventResizeSuccessful)
		if got.Status.AllocatedResources != nil || got.Status.AllocatedResourceStatuses != nil || len(got.Status.Conditions) != 0 {
			t.Errorf("PVC: %s; want no allocated fields and no conditions", describe(got))
		}
		if c := capacityOf(e.pv("pv-data").Spec.Capacity); c != "2Gi" {
			t.Errorf("PV capacity = %s, want 2Gi", c)
		}
		assertNoAllocatedWrites(t, e)
	})
	t.Run("infeasible", func(t *testing.T) {
		t.Parallel()
		pvc, pv := claim("data", "10Gi", "1Gi")
		infeasible := csitest.Fail(codes.OutOfRange, "at most 5Gi")
		e := start(t, setup{objects: objects(pvc, pv), legacy: true, defaultResponse: &infeasible})
		got := e.waitForClaim("data", "an error condition", func(p *v1.PersistentVolumeClaim) bool {
			return condition(p, v1.PersistentVolumeClaimControllerResizeError) != nil
		})
		e.waitForEvent(controller.EventResizeFailed)
		if c := condition(got, v1.PersistentVolumeClaimControllerResizeError); c.Reason != "OutOfRange" || c.Message != "at most 5Gi" {
			t.Errorf("condition %s %q, want OutOfRange %q", c.Reason, c.Message, "at most 5Gi")
		}
		if got.Status.AllocatedResources != nil || got.Status.AllocatedResourceStatuses != nil {
			t.Errorf("PVC: %s; want no allocated fields", describe(got))
		}
		assertNoAllocatedWrites(t, e)
	})
}

// TestLegacyNewRequestBypassesSlowRetry: in legacy mode too, a new request after an infeasible
// failure is acted on at once, not after --retry-interval-max (rule 8; upstream's legacy path
// has no slow retry at all).
func TestLegacyNewRequestBypassesSlowRetry(t *testing.T) {
	t.Parallel()
	pvc, pv := claim("data", "10Gi", "1Gi")
	e := start(t, setup{objects: objects(pvc, pv), legacy: true, retryMax: time.Minute,
		responses: []csitest.Response{csitest.Fail(codes.OutOfRange, "at most 5Gi")}})
	e.waitForClaim("data", "an error condition", func(p *v1.PersistentVolumeClaim) bool {
		return condition(p, v1.PersistentVolumeClaimControllerResizeError) != nil
	})
	changed := time.Now()
	e.setRequest("data", "3Gi")
	got := e.waitForClaim("data", "resized to 3Gi", func(p *v1.PersistentVolumeClaim) bool {
		return capacityOf(p.Status.Capacity) == "3Gi"
	})
	if d := e.csi.ExpandCalls()[1].At.Sub(changed); d > 5*time.Second {
		t.Errorf("the call for the new request came %s after it", d)
	}
	if got.Status.AllocatedResources != nil || got.Status.AllocatedResourceStatuses != nil || len(got.Status.Conditions) != 0 {
		t.Errorf("PVC: %s; want no allocated fields and no conditions", describe(got))
	}
}

func assertNoAllocatedWrites(t *testing.T, e *env) {
	t.Helper()
	for _, w := range e.kube.Writes() {
		if p, ok := w.(interface{ GetPatch() []byte }); ok {
			if s := string(p.GetPatch()); contains(s, "allocatedResource") {
				t.Errorf("legacy mode wrote %s", s)
			}
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func pod(name, claimName string, phase v1.PodPhase) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name)},
		Spec: v1.PodSpec{
			// Scheduled: only a pod on a node holds its volumes (pkg/inuse).
			NodeName:   "node-1",
			Containers: []v1.Container{{Name: "app", Image: "example"}},
			Volumes: []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{
				PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claimName}}}},
		},
		Status: v1.PodStatus{Phase: phase},
	}
}

// TestVolumeInUse: FAILED_PRECONDITION while a pod uses the volume makes the controller wait,
// without calling the driver again, until the pod is gone (rule 9); a driver that declares
// offline-only expansion is not called at all while a pod uses the volume.
func TestVolumeInUse(t *testing.T) {
	t.Run("FAILED_PRECONDITION", func(t *testing.T) {
		t.Parallel()
		pvc, pv := claim("data", "2Gi", "1Gi")
		e := start(t, setup{
			objects:     objects(pvc, pv, pod("app", "data", v1.PodRunning), pod("other", "unrelated", v1.PodRunning)),
			responses:   []csitest.Response{csitest.Fail(codes.FailedPrecondition, "volume is attached")},
			handleInUse: true,
			retryStart:  20 * time.Millisecond,
			retryMax:    200 * time.Millisecond,
		})
		e.waitForClaim("data", "FailedPrecondition condition", func(p *v1.PersistentVolumeClaim) bool {
			c := condition(p, v1.PersistentVolumeClaimControllerResizeError)
			return c != nil && c.Reason == "FailedPrecondition"
		})
		// Showing that no retry happens: wait on a timer for ten times the retry interval.
		quiet(2 * time.Second)
		if n := len(e.csi.ExpandCalls()); n != 1 {
			t.Fatalf("ControllerExpandVolume calls while the pod uses the volume = %d, want 1", n)
		}
		if err := e.kube.Delete(kubetest.Pods, ns, "app"); err != nil {
			t.Fatal(err)
		}
		got := e.waitForClaim("data", "resized", func(p *v1.PersistentVolumeClaim) bool {
			return capacityOf(p.Status.Capacity) == "2Gi"
		})
		if state(got) != "" || len(got.Status.Conditions) != 0 {
			t.Errorf("PVC: %s; want done", describe(got))
		}
		if n := len(e.csi.ExpandCalls()); n != 2 {
			t.Errorf("ControllerExpandVolume calls = %d, want 2", n)
		}
	})
	t.Run("offline-only driver", func(t *testing.T) {
		t.Parallel()
		pvc, pv := claim("data", "2Gi", "1Gi")
		e := start(t, setup{
			driver: csitest.Options{ControllerService: true, ControllerExpand: true,
				PluginExpansion: csispec.PluginCapability_VolumeExpansion_OFFLINE},
			objects:     objects(pvc, pv, pod("app", "data", v1.PodRunning)),
			handleInUse: true,
			retryStart:  20 * time.Millisecond,
			retryMax:    200 * time.Millisecond,
		})
		e.waitForEvent(controller.EventResizeFailed)
		// Showing that the driver is not called: wait on a timer.
		quiet(time.Second)
		if n := len(e.csi.ExpandCalls()); n != 0 {
			t.Fatalf("ControllerExpandVolume calls while a pod uses the volume = %d, want 0", n)
		}
		if n := e.events.Count(controller.EventResizeFailed); n != 1 {
			t.Errorf("%d in-use events, want 1", n)
		}
		// The pod finishing releases the volume too.
		if err := e.kube.Mutate(kubetest.Pods, ns, "app", func(o runtime.Object) { o.(*v1.Pod).Status.Phase = v1.PodSucceeded }); err != nil {
			t.Fatal(err)
		}
		e.waitForClaim("data", "resized", func(p *v1.PersistentVolumeClaim) bool {
			return capacityOf(p.Status.Capacity) == "2Gi"
		})
		if n := len(e.csi.ExpandCalls()); n != 1 {
			t.Errorf("ControllerExpandVolume calls = %d, want 1", n)
		}
	})
	t.Run("offline-only driver, unscheduled pod", func(t *testing.T) {
		// A Pending pod the scheduler cannot place has no kubelet that could have attached or
		// mounted the volume: it must not stall the offline expansion.
		t.Parallel()
		pvc, pv := claim("data", "2Gi", "1Gi")
		waiting := pod("app", "data", v1.PodPending)
		waiting.Spec.NodeName = ""
		e := start(t, setup{
			driver: csitest.Options{ControllerService: true, ControllerExpand: true,
				PluginExpansion: csispec.PluginCapability_VolumeExpansion_OFFLINE},
			objects:     objects(pvc, pv, waiting),
			handleInUse: true,
		})
		e.waitForClaim("data", "resized", func(p *v1.PersistentVolumeClaim) bool {
			return capacityOf(p.Status.Capacity) == "2Gi"
		})
		if n := e.events.Count(controller.EventResizeFailed); n != 0 {
			t.Errorf("%d in-use events for a pod on no node, want 0", n)
		}
	})
}
