package expandcontroller

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/csi-resizer/csi-resizer/pkg/csi"
)

func grpcErr(c codes.Code, msg string) error { return grpcstatus.Error(c, msg) }

func setRequest(size string) func(*v1.PersistentVolumeClaim) {
	return func(pvc *v1.PersistentVolumeClaim) {
		pvc.Spec.Resources.Requests[v1.ResourceStorage] = resource.MustParse(size)
	}
}

// TestResizeCost: a resize costs one driver call, two PVC status writes, one PV write and one
// event; syncing the result again (the echo of the writes) costs nothing.
func TestResizeCost(t *testing.T) {
	pvc, pv := claim("data", "2Gi", "1Gi")
	f := newFixture(t, Config{}, pvc, pv)
	if wait := f.sync("data"); wait != 0 {
		t.Errorf("wait %v after a success", wait)
	}
	got := f.pvc("data")
	if storage(got.Status.Capacity) != "2Gi" || storage(got.Status.AllocatedResources) != "2Gi" || state(got) != "" {
		t.Errorf("PVC capacity/allocated/state = %s/%s/%q, want 2Gi/2Gi/none", storage(got.Status.Capacity), storage(got.Status.AllocatedResources), state(got))
	}
	if n := f.eventsWith(EventResizeSuccessful); n != 1 {
		t.Errorf("%d %s events, want 1", n, EventResizeSuccessful)
	}
	for range 2 {
		f.sync("data")
	}
	if n := f.driver.count(); n != 1 {
		t.Errorf("%d driver calls, want 1", n)
	}
	want := map[string]int{"persistentvolumeclaims/status": 2, "persistentvolumes/": 1}
	if got := f.writes(); len(got) != len(want) || got["persistentvolumeclaims/status"] != 2 || got["persistentvolumes/"] != 1 {
		t.Errorf("API writes %v, want %v", got, want)
	}
	if n := f.eventsWith(""); n != 0 {
		t.Errorf("%d more events after the resize", n)
	}
	if v := f.metric("csi_resizer_expansion_duration_seconds", map[string]string{"result": "success"}); v != 1 {
		t.Errorf("%v successful expansions observed, want 1", v)
	}
	if v := f.metric("csi_resizer_state_transitions_total", map[string]string{"from": "none", "to": "ControllerResizeInProgress"}); v != 1 {
		t.Errorf("%v transitions none -> ControllerResizeInProgress, want 1", v)
	}
	if f.ctrl.pods.Started() {
		t.Error("the pod informer started for a driver that expands online")
	}
}

// TestLegacyMode: without RecoverVolumeExpansionFailure only capacity and conditions are
// written, never allocated*.
func TestLegacyMode(t *testing.T) {
	pvc, pv := claim("data", "2Gi", "1Gi")
	f := newFixture(t, Config{Legacy: true}, pvc, pv)
	f.sync("data")
	got := f.pvc("data")
	if storage(got.Status.Capacity) != "2Gi" || got.Status.AllocatedResources != nil || got.Status.AllocatedResourceStatuses != nil {
		t.Errorf("capacity %s, allocated %v %v; want 2Gi and no allocated*", storage(got.Status.Capacity), got.Status.AllocatedResources, got.Status.AllocatedResourceStatuses)
	}
}

// TestNodeExpansionRequired: the resizer hands over to the node, leaves the PVC alone while the
// node works, and times the expansion's end when the node finishes.
func TestNodeExpansionRequired(t *testing.T) {
	pvc, pv := claim("data", "2Gi", "1Gi")
	f := newFixture(t, Config{}, pvc, pv)
	f.driver.always = &answer{node: true}
	f.sync("data")
	got := f.pvc("data")
	if state(got) != v1.PersistentVolumeClaimNodeResizePending || condition(got, v1.PersistentVolumeClaimFileSystemResizePending) == nil {
		t.Fatalf("state %q, conditions %v: want NodeResizePending with FileSystemResizePending", state(got), got.Status.Conditions)
	}
	if n := f.eventsWith(EventFileSystemRequired); n != 1 {
		t.Errorf("%d %s events, want 1", n, EventFileSystemRequired)
	}
	f.sync("data")
	if v := f.metric("csi_resizer_expansion_duration_seconds", map[string]string{"result": "success"}); v != 0 {
		t.Errorf("the expansion was observed as done before the node finished")
	}
	f.clock.step(5 * time.Second)
	f.update("data", func(pvc *v1.PersistentVolumeClaim) {
		pvc.Status.Capacity[v1.ResourceStorage] = resource.MustParse("2Gi")
		pvc.Status.AllocatedResourceStatuses = nil
		pvc.Status.Conditions = nil
	})
	f.sync("data")
	if v := f.metric("csi_resizer_expansion_duration_seconds", map[string]string{"result": "success"}); v != 1 {
		t.Errorf("%v successful expansions observed after the node finished, want 1", v)
	}
	if n := f.driver.count(); n != 1 {
		t.Errorf("%d driver calls, want 1", n)
	}
}

// TestDriverErrors: each class of error is recorded in the PVC and retried on the PVC's clock:
// the echo of the failure write calls nothing, the retry comes when the PVC says so, and a new
// request goes at once where the plan follows spec.
func TestDriverErrors(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       error
		wantState v1.ClaimResourceStatus
		wantWait  time.Duration // at most this, more than this - 1s
		// lowered is the target of the next call once the request is lowered to 3Gi, and
		// whether that call goes at once.
		lowered string
		atOnce  bool
	}{
		{"transient keeps the allocated size", grpcErr(codes.Unavailable, "busy"), v1.PersistentVolumeClaimControllerResizeInProgress, retryStart + time.Second, "10Gi", false},
		{"final follows spec", grpcErr(codes.Internal, "broken"), v1.PersistentVolumeClaimControllerResizeInProgress, retryStart + time.Second, "3Gi", true},
		{"infeasible waits for the slow retry", grpcErr(codes.OutOfRange, "at most 5Gi"), v1.PersistentVolumeClaimControllerResizeInfeasible, retryMax + time.Second, "3Gi", true},
		{"no gRPC status is uncertain", errors.New("connection reset"), v1.PersistentVolumeClaimControllerResizeInProgress, retryStart + time.Second, "10Gi", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pvc, pv := claim("data", "10Gi", "1Gi")
			f := newFixture(t, Config{}, pvc, pv)
			f.driver.answers = []answer{{err: tc.err}}
			wait := f.sync("data")
			got := f.pvc("data")
			if state(got) != tc.wantState || storage(got.Status.AllocatedResources) != "10Gi" || condition(got, v1.PersistentVolumeClaimControllerResizeError) == nil {
				t.Fatalf("state %q allocated %s conditions %v, want %s at 10Gi with ControllerResizeError", state(got), storage(got.Status.AllocatedResources), got.Status.Conditions, tc.wantState)
			}
			if wait > tc.wantWait || wait <= tc.wantWait-time.Second {
				t.Errorf("retry in %v, want (%v, %v]", wait, tc.wantWait-time.Second, tc.wantWait)
			}
			if n := f.eventsWith(EventResizeFailed); n != 1 {
				t.Errorf("%d %s events, want 1", n, EventResizeFailed)
			}
			if echo := f.sync("data"); f.driver.count() != 1 || echo <= 0 || echo > wait {
				t.Errorf("the echo of the failure write: %d calls, wait %v; want 1 call and the same wait", f.driver.count(), echo)
			}
			f.update("data", setRequest("3Gi"))
			if waited := f.sync("data") > 0; waited == tc.atOnce {
				t.Errorf("after a new request: waited %v, want at once %v", waited, tc.atOnce)
			}
			if !tc.atOnce {
				f.clock.step(tc.wantWait)
				f.sync("data")
			}
			if n := f.driver.count(); n != 2 || f.driver.calls[1].RequiredBytes != bytesOf(tc.lowered) {
				t.Fatalf("%d calls (%v), want a second one for %s", n, f.driver.calls, tc.lowered)
			}
		})
	}
}

// TestBackoffFromThePVC: errors that are not infeasible back off exponentially on the PVC's
// clock, so a restarted resizer waits as long as the one before it; also for final errors,
// whose condition each attempt removes, and in legacy mode.
func TestBackoffFromThePVC(t *testing.T) {
	for _, tc := range []struct {
		name   string
		code   codes.Code
		legacy bool
	}{
		{"transient", codes.DeadlineExceeded, false},
		{"final", codes.Internal, false},
		{"legacy transient", codes.DeadlineExceeded, true},
		{"legacy final", codes.Internal, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pvc, pv := claim("data", "10Gi", "1Gi")
			f := newFixture(t, Config{Legacy: tc.legacy}, pvc, pv)
			f.driver.always = &answer{err: grpcErr(tc.code, "no")}
			var waits []time.Duration
			for range 6 {
				wait := f.sync("data")
				waits = append(waits, wait)
				if again := f.start(Config{Legacy: tc.legacy}).sync("data"); again != wait {
					t.Errorf("after a restart the wait is %v, before it %v", again, wait)
				}
				f.clock.step(wait)
			}
			for i := 1; i < len(waits); i++ {
				if waits[i] <= waits[i-1] && waits[i] < retryMax {
					t.Errorf("waits %v do not grow", waits)
				}
			}
			if n := f.driver.count(); n != 6 {
				t.Errorf("%d calls, want 6", n)
			}
		})
	}
}

// TestFailureEventWhenRecordFails (issue 15, bug 3): when the write that records the driver's
// error fails, the VolumeResizeFailed event still goes out.
func TestFailureEventWhenRecordFails(t *testing.T) {
	pvc, pv := claim("data", "10Gi", "1Gi")
	f := newFixture(t, Config{}, pvc, pv)
	f.driver.answers = []answer{{err: grpcErr(codes.OutOfRange, "too big")}}
	failPatch(f, 2, errors.New("etcd is down"))
	if _, err := f.ctrl.sync(f.ctx, ns+"/data"); err == nil {
		t.Fatal("sync succeeded though the failure could not be recorded")
	}
	if n := f.eventsWith(EventResizeFailed); n != 1 {
		t.Errorf("%d %s events, want 1", n, EventResizeFailed)
	}
}

// TestKilledAfterThePVWrite: the PVC write after a successful call fails (a resizer killed or cut
// off between the PV write and the PVC's); a new process records the answer the PV holds
// without calling the driver again.
func TestKilledAfterThePVWrite(t *testing.T) {
	pvc, pv := claim("data", "2Gi", "1Gi")
	f := newFixture(t, Config{}, pvc, pv)
	f.driver.always = &answer{node: true}
	failPatch(f, 2, errors.New("connection refused"))
	if _, err := f.ctrl.sync(f.ctx, ns+"/data"); err == nil {
		t.Fatal("sync succeeded though the outcome could not be recorded")
	}
	f.catchUp()
	if st := state(f.pvc("data")); st != v1.PersistentVolumeClaimControllerResizeInProgress {
		t.Fatalf("state %q after the failed write, want ControllerResizeInProgress", st)
	}
	f.start(Config{}) // the next leader
	f.sync("data")
	if n := f.driver.count(); n != 1 {
		t.Errorf("%d driver calls, want 1: the PV recorded the answer for 2Gi", n)
	}
	got := f.pvc("data")
	if state(got) != v1.PersistentVolumeClaimNodeResizePending || storage(got.Status.AllocatedResources) != "2Gi" {
		t.Errorf("state %q allocated %s, want NodeResizePending at 2Gi", state(got), storage(got.Status.AllocatedResources))
	}
	if n := f.eventsWith(EventFileSystemRequired); n != 1 {
		t.Errorf("%d %s events, want 1", n, EventFileSystemRequired)
	}
}

// failPatch makes the nth PVC patch fail with err (a reactor of the fake clientset).
func failPatch(f *fixture, n int, err error) {
	patches := 0
	f.client.PrependReactor("patch", "persistentvolumeclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
		patches++
		if patches == n {
			return true, nil, err
		}
		return false, nil, nil
	})
}

// TestOutcomeConflict: the PVC changed during the driver call; the answer is recorded over the
// PVC read again, and the driver is not called again.
func TestOutcomeConflict(t *testing.T) {
	pvc, pv := claim("data", "10Gi", "1Gi")
	f := newFixture(t, Config{}, pvc, pv)
	failPatch(f, 2, apierrors.NewConflict(schema.GroupResource{Resource: "persistentvolumeclaims"}, "data", errors.New("changed")))
	f.sync("data")
	if got := f.pvc("data"); storage(got.Status.Capacity) != "10Gi" || state(got) != "" {
		t.Errorf("capacity %s state %q, want 10Gi done", storage(got.Status.Capacity), state(got))
	}
	if n := f.driver.count(); n != 1 {
		t.Errorf("%d calls, want 1", n)
	}
}

// TestRecovery: after a final error the user lowers the request; the expansion to it is a
// recovery, counted once and announced with VolumeResizeRecovered.
func TestRecovery(t *testing.T) {
	pvc, pv := claim("data", "10Gi", "1Gi")
	f := newFixture(t, Config{}, pvc, pv)
	f.driver.answers = []answer{{err: grpcErr(codes.Internal, "no")}}
	f.sync("data")
	f.update("data", setRequest("3Gi"))
	f.drainEvents()
	f.sync("data")
	got := f.pvc("data")
	if storage(got.Status.Capacity) != "3Gi" || storage(got.Status.AllocatedResources) != "3Gi" {
		t.Errorf("capacity/allocated %s/%s, want 3Gi/3Gi", storage(got.Status.Capacity), storage(got.Status.AllocatedResources))
	}
	if n := f.eventsWith(EventResizeRecovered); n != 1 {
		t.Errorf("%d %s events, want 1", n, EventResizeRecovered)
	}
	if v := f.metric("csi_resizer_volume_recovery_total", map[string]string{"state": "success"}); v != 1 {
		t.Errorf("%v successful recoveries, want 1", v)
	}
}

// TestInfeasibleRecoveryFails: a recovery that is infeasible is counted as failed once, and the
// expansion's failure once.
func TestInfeasibleRecoveryFails(t *testing.T) {
	pvc, pv := claim("data", "10Gi", "1Gi")
	f := newFixture(t, Config{}, pvc, pv)
	f.driver.always = &answer{err: grpcErr(codes.OutOfRange, "no")}
	f.sync("data")
	f.update("data", setRequest("3Gi"))
	f.sync("data")
	f.clock.step(2 * retryMax)
	f.sync("data")
	if n := f.driver.count(); n != 3 {
		t.Errorf("%d calls, want 3", n)
	}
	if v := f.metric("csi_resizer_volume_recovery_total", map[string]string{"state": "failure"}); v != 1 {
		t.Errorf("%v failed recoveries, want 1", v)
	}
	if v := f.metric("csi_resizer_expansion_duration_seconds", map[string]string{"result": "failure"}); v != 1 {
		t.Errorf("%v failed expansions, want 1", v)
	}
}

// TestRetryClockAfterRestart (issue 15, bug 4): the slow retry of legacy mode and of a
// re-driven node step counts from the failure the PVC records, so a restarted resizer waits
// exactly as long as the one before it.
func TestRetryClockAfterRestart(t *testing.T) {
	t.Run("legacy infeasible", func(t *testing.T) {
		pvc, pv := claim("data", "10Gi", "1Gi")
		f := newFixture(t, Config{Legacy: true}, pvc, pv)
		f.clock.step(700 * time.Millisecond) // the condition's time is truncated to the second
		f.driver.always = &answer{err: grpcErr(codes.OutOfRange, "no")}
		f.sync("data")
		f.clock.step(10 * time.Second)
		before := f.sync("data")
		after := f.start(Config{Legacy: true}).sync("data")
		if before != after || before <= 0 || f.driver.count() != 1 {
			t.Errorf("wait before the restart %v, after %v, %d calls; want the same wait and 1 call", before, after, f.driver.count())
		}
	})
	t.Run("re-driven node step", func(t *testing.T) {
		pvc, pv := claim("data", "2Gi", "1Gi")
		pv.Spec.Capacity[v1.ResourceStorage] = resource.MustParse("2Gi")
		pvc.Status.AllocatedResources = v1.ResourceList{v1.ResourceStorage: resource.MustParse("2Gi")}
		f := newFixture(t, Config{}, pvc, pv)
		nodeFails := func() {
			f.update("data", func(pvc *v1.PersistentVolumeClaim) {
				pvc.Status.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{v1.ResourceStorage: v1.PersistentVolumeClaimNodeResizeInfeasible}
				now := metav1.NewTime(f.clock.Now())
				pvc.Status.Conditions = []v1.PersistentVolumeClaimCondition{{Type: v1.PersistentVolumeClaimNodeResizeError, Status: v1.ConditionTrue, LastTransitionTime: now}}
			})
		}
		nodeFails()
		f.clock.step(retryMax + 2*time.Second)
		if wait := f.sync("data"); wait != 0 || state(f.pvc("data")) != v1.PersistentVolumeClaimNodeResizePending {
			t.Fatalf("no redrive after the slow retry: wait %v, state %q", wait, state(f.pvc("data")))
		}
		f.clock.step(20 * time.Second) // the node takes its time to fail again
		nodeFails()
		before := f.sync("data")
		after := f.start(Config{}).sync("data")
		if before != after || before <= retryMax {
			t.Errorf("wait before the restart %v, after %v; want the same, retry-interval-max after the node's failure", before, after)
		}
	})
}

// TestVolumeInUse: after FAILED_PRECONDITION with --handle-volume-inuse-error, the expansion
// waits for the pod using the volume, reports it once, and goes when the pod is gone.
func TestVolumeInUse(t *testing.T) {
	pvc, pv := claim("data", "10Gi", "1Gi")
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec: v1.PodSpec{NodeName: "node-1", Volumes: []v1.Volume{{Name: "v", VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}},
		Status: v1.PodStatus{Phase: v1.PodRunning},
	}
	f := newFixture(t, Config{HandleVolumeInUse: true}, pvc, pv, pod)
	f.driver.answers = []answer{{err: grpcErr(codes.FailedPrecondition, "in use")}}
	if wait := f.sync("data"); wait != 0 {
		t.Errorf("wait %v: the pod watcher, not a timer, should wake the PVC", wait)
	}
	f.clock.step(time.Hour)
	f.sync("data")
	if n := f.driver.count(); n != 1 {
		t.Errorf("%d calls while the pod uses the volume, want 1", n)
	}
	if n := f.eventsWith(EventResizeFailed); n != 1 {
		t.Errorf("%d %s events, want 1: the driver's answer tells of the wait", n, EventResizeFailed)
	}
	if err := f.client.CoreV1().Pods(ns).Delete(f.ctx, "app", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for f.ctrl.pods.InUse(ns, "data") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	f.sync("data")
	if got := f.pvc("data"); f.driver.count() != 2 || storage(got.Status.Capacity) != "10Gi" {
		t.Errorf("%d calls, capacity %s after the pod went; want 2 and 10Gi", f.driver.count(), storage(got.Status.Capacity))
	}
}

// TestNodeOnlyDriver: no CSI call; the PV gets the size and the node the PVC.
func TestNodeOnlyDriver(t *testing.T) {
	pvc, pv := claim("data", "5Gi", "1Gi")
	f := newFixture(t, Config{Driver: csi.Driver{Name: driverName, NodeExpand: true}}, pvc, pv)
	f.sync("data")
	got := f.pvc("data")
	gotPV, _ := f.client.CoreV1().PersistentVolumes().Get(f.ctx, pv.Name, metav1.GetOptions{})
	if state(got) != v1.PersistentVolumeClaimNodeResizePending || storage(gotPV.Spec.Capacity) != "5Gi" || f.driver.count() != 0 {
		t.Errorf("state %q PV %s calls %d; want NodeResizePending, 5Gi, 0", state(got), storage(gotPV.Spec.Capacity), f.driver.count())
	}
}

// TestIgnoresOtherClaims: PVCs of another driver, unbound or whose PV claims someone else are
// not touched.
func TestIgnoresOtherClaims(t *testing.T) {
	other, otherPV := claim("other", "2Gi", "1Gi")
	otherPV.Spec.CSI.Driver = "someone.else"
	stolen, stolenPV := claim("stolen", "2Gi", "1Gi")
	stolenPV.Spec.ClaimRef.UID = "not-this-one"
	pending, pendingPV := claim("pending", "2Gi", "1Gi")
	pending.Status.Phase = v1.ClaimPending
	f := newFixture(t, Config{}, other, otherPV, stolen, stolenPV, pending, pendingPV)
	for _, name := range []string{"other", "stolen", "pending", "missing"} {
		f.sync(name)
	}
	if n, w := f.driver.count(), f.writes(); n != 0 || len(w) != 0 {
		t.Errorf("%d calls, writes %v; want none", n, w)
	}
}

// TestExpandSecret: the controller-expand secret of the PV goes to the driver.
func TestExpandSecret(t *testing.T) {
	pvc, pv := claim("data", "2Gi", "1Gi")
	pv.Spec.CSI.ControllerExpandSecretRef = &v1.SecretReference{Namespace: "kube-system", Name: "creds"}
	secret := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "creds"}, Data: map[string][]byte{"token": []byte("s3cr3t")}}
	f := newFixture(t, Config{}, pvc, pv, secret)
	f.sync("data")
	if n := f.driver.count(); n != 1 || f.driver.calls[0].Secrets["token"] != "s3cr3t" {
		t.Errorf("calls %v, want one with the secret", f.driver.calls)
	}
}

// TestForgetsDeletedClaim (rule 10): nothing is kept about a deleted PVC.
func TestForgetsDeletedClaim(t *testing.T) {
	pvc, pv := claim("data", "10Gi", "1Gi")
	f := newFixture(t, Config{Legacy: true, HandleVolumeInUse: true}, pvc, pv)
	f.driver.answers = []answer{{err: grpcErr(codes.OutOfRange, "no")}}
	f.sync("data")
	if err := f.client.CoreV1().PersistentVolumeClaims(ns).Delete(f.ctx, "data", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	_ = f.pvcs.Delete(pvc)
	f.sync("data")
	if len(f.ctrl.failed) != 0 {
		t.Errorf("%v kept after the PVC was deleted", f.ctrl.failed)
	}
}

// TestNoCallWithoutTheLease: a process that may have lost the Lease does not call the driver
// (docs/design.md §2.1); the target it recorded is the next leader's, with the same call.
func TestNoCallWithoutTheLease(t *testing.T) {
	pvc, pv := claim("data", "2Gi", "1Gi")
	f := newFixture(t, Config{Leading: func() error { return errors.New("lease lost") }}, pvc, pv)
	if _, err := f.ctrl.sync(f.ctx, ns+"/data"); err == nil || f.driver.count() != 0 {
		t.Fatalf("sync error %v, %d calls; want the lease error and no call", err, f.driver.count())
	}
}

// TestUnrecordedAnswerWaitsBeforeCallingAgain (docs/design.md §2.3 rule 8, found by the soak):
// when the write recording a driver error fails, the version the call was decided on (which
// the echo of the pre-call write puts back in the queue during the call) is not decided on again
// before --retry-interval-start; a new version is.
func TestUnrecordedAnswerWaitsBeforeCallingAgain(t *testing.T) {
	f := unrecordedAnswer(t, grpcErr(codes.DeadlineExceeded, "slow"))
	f.catchUp()
	if _, err := f.ctrl.sync(f.ctx, ns+"/data"); err == nil || f.driver.count() != 1 {
		t.Fatalf("the echo's sync: error %v, %d calls; want an error and no second call", err, f.driver.count())
	}
	// Another writer (the modification controller, the kubelet) makes a new version meanwhile:
	// the user still asks for the same size, so the hold stays (found by the soak).
	f.update("data", func(pvc *v1.PersistentVolumeClaim) {
		pvc.ResourceVersion = "another-writer"
		pvc.Labels = map[string]string{"touched": "yes"}
	})
	if _, err := f.ctrl.sync(f.ctx, ns+"/data"); err == nil || f.driver.count() != 1 {
		t.Fatalf("sync on another writer's version: error %v, %d calls; want an error and no second call", err, f.driver.count())
	}
	f.clock.step(retryStart)
	f.sync("data")
	if n := f.driver.count(); n != 2 {
		t.Errorf("%d calls after --retry-interval-start, want the retry", n)
	}
}

// unrecordedAnswer syncs PVC "data" (10Gi asked, 1Gi now) once: the driver answers callErr and
// the write recording the answer fails, as in an apiserver restart.
func unrecordedAnswer(t *testing.T, callErr error) *fixture {
	t.Helper()
	pvc, pv := claim("data", "10Gi", "1Gi")
	f := newFixture(t, Config{}, pvc, pv)
	f.driver.answers = []answer{{err: callErr}}
	failPatch(f, 2, errors.New("apiserver restarting"))
	if _, err := f.ctrl.sync(f.ctx, ns+"/data"); err == nil {
		t.Fatal("sync succeeded though the answer could not be recorded")
	}
	return f
}

// TestUnrecordedAnswerNewSizeGoesAtOnce: the hold after an unrecorded answer is for the size
// asked; a user's new size is decided on at once.
func TestUnrecordedAnswerNewSizeGoesAtOnce(t *testing.T) {
	f := unrecordedAnswer(t, grpcErr(codes.DeadlineExceeded, "slow"))
	f.update("data", func(pvc *v1.PersistentVolumeClaim) {
		pvc.ResourceVersion = "user-edit"
		pvc.Spec.Resources.Requests[v1.ResourceStorage] = resource.MustParse("12Gi")
	})
	f.sync("data")
	if n := f.driver.count(); n != 2 {
		t.Errorf("%d calls after the user asked for another size, want the call for it at once", n)
	}
}

// TestUnrecordedInfeasibleAnswerWaitsTheSlowRetry: an infeasible answer the PVC could not record
// is retried after --retry-interval-max, as a recorded one is, not after --retry-interval-start
// (found by the soak: INVALID_ARGUMENT answers lost in apiserver restarts were retried after 1 s).
func TestUnrecordedInfeasibleAnswerWaitsTheSlowRetry(t *testing.T) {
	f := unrecordedAnswer(t, grpcErr(codes.InvalidArgument, "too big"))
	f.catchUp()
	f.clock.step(retryStart)
	if _, err := f.ctrl.sync(f.ctx, ns+"/data"); err == nil || f.driver.count() != 1 {
		t.Fatalf("sync after --retry-interval-start: error %v, %d calls; want still held, 1 call", err, f.driver.count())
	}
	f.clock.step(retryMax - retryStart)
	f.sync("data")
	if n := f.driver.count(); n != 2 {
		t.Errorf("%d calls after --retry-interval-max, want the retry", n)
	}
}
