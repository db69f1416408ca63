//go:build integration

package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// These scenarios need what only the mock driver offers (fault injection, a driver-side call
// log, node-only and offline-only modes); the driver-agnostic ones are in test/e2e.

const resizeTimeout = 2 * time.Minute

// startMock is scenario.Start with the mock driver even when E2E_DRIVER_* name a real one
// (exported for a make test-e2e run, say): every test here needs its faults, its calls log or
// one of its shapes, and on an external driver they would skip or test the wrong thing.
func startMock(t *testing.T, opts scenario.Options) *scenario.Env {
	t.Helper()
	opts.MockDriver = true
	return scenario.Start(t, opts)
}

// TestStartMockIgnoresExternalDriver: with E2E_DRIVER_* exported, the tests of this package
// still run on the mock. (Were the variables honoured, the broken command would fail Start.)
func TestStartMockIgnoresExternalDriver(t *testing.T) {
	t.Setenv(framework.EnvDriverCmd, "exit 1 # {endpoint}")
	t.Setenv(framework.EnvDriverEndpoint, "unix:///nonexistent/csi.sock")
	e := startMock(t, scenario.Options{NoResizer: true})
	if !e.Driver.IsMock() || e.Driver.Name != framework.DefaultMockDriverName {
		t.Fatalf("driver %q (mock: %v), want the mock %q", e.Driver.Name, e.Driver.IsMock(), framework.DefaultMockDriverName)
	}
}

func bytesOf(size string) int64 {
	q := resource.MustParse(size)
	return q.Value()
}

// Scenario 2: the driver needs node expansion; the resizer hands over and then leaves it alone.
func TestNodeExpansionRequired(t *testing.T) {
	e := startMock(t, scenario.Options{Mock: framework.MockDriverOptions{NodeExpansionRequired: true}})
	_, pv := e.NewClaim(t, "data", "1Gi")
	e.SetRequest(t, "data", "2Gi")
	pvc := e.WaitClaim(t, "data", resizeTimeout, scenario.InState(v1.PersistentVolumeClaimNodeResizePending))
	if scenario.Condition(pvc, v1.PersistentVolumeClaimFileSystemResizePending) == nil {
		t.Errorf("no FileSystemResizePending condition: %s", scenario.Describe(pvc))
	}
	if _, capacity, alloc := scenario.Storage(pvc); !scenario.Is(capacity, "1Gi") || !scenario.Is(alloc, "2Gi") {
		t.Errorf("capacity/allocated = %s/%s, want 1Gi/2Gi until the node is done", capacity.String(), alloc.String())
	}
	gotPV := e.PV(t, pv.Name)
	if c := gotPV.Spec.Capacity[v1.ResourceStorage]; !scenario.Is(c, "2Gi") {
		t.Errorf("PV capacity = %s, want 2Gi", c.String())
	}
	if got := gotPV.Annotations["volume.alpha.kubernetes.io/pre-resize-capacity"]; got != "1Gi" {
		t.Errorf("pre-resize-capacity annotation = %q, want 1Gi (AnnotateFsResize)", got)
	}
	// The event is sent after the status write that hands over to the node: from here on the
	// PVC is the kubelet's. The resizer leaves it alone: no second driver call, and no write at
	// all (the resourceVersion stays; a patch that changes nothing would keep it too, and is
	// harmless), while the node has not answered yet.
	e.WaitEvent(t, "data", "FileSystemResizeRequired", 30*time.Second)
	handedOver := e.PVC(t, "data")
	untouched(t, e, "after the hand-over to the node", handedOver.ResourceVersion, 1)

	e.FinishNodeExpansion(t, "data")
	finished := e.WaitClaim(t, "data", resizeTimeout, scenario.Done("2Gi"))
	// Nor does it touch a PVC the node finished: the kubelet's write is the last one.
	untouched(t, e, "after the node finished", finished.ResourceVersion, 1)
}

// untouched checks for 3 seconds that the PVC "data" keeps resourceVersion rv (nobody writes
// it; these tests run no kubelet or controller-manager, so that means the resizer does not)
// and that the driver has had exactly calls ControllerExpandVolume calls.
func untouched(t *testing.T, e *scenario.Env, when, rv string, calls int) {
	t.Helper()
	framework.Consistently(t, 3*time.Second, func() (bool, string) {
		pvc := e.PVC(t, "data")
		n := len(e.Driver.Calls(t, "ControllerExpandVolume"))
		return pvc.ResourceVersion == rv && n == calls, fmt.Sprintf("%s: resourceVersion %s (want %s), %d ControllerExpandVolume calls (want %d); PVC: %s",
			when, pvc.ResourceVersion, rv, n, calls, scenario.Describe(pvc))
	})
}

// uncertainAfter is the state an uncertain driver error leaves: ControllerResizeInProgress
// with a ControllerResizeError condition of the error's code.
func uncertainAfter(code string) func(*v1.PersistentVolumeClaim) (bool, string) {
	return func(pvc *v1.PersistentVolumeClaim) (bool, string) {
		c := scenario.Condition(pvc, v1.PersistentVolumeClaimControllerResizeError)
		return c != nil && c.Reason == code && scenario.State(pvc) == v1.PersistentVolumeClaimControllerResizeInProgress,
			"want ControllerResizeInProgress with a " + code + " condition"
	}
}

// Scenario 4, KEP-1790 Cases 3 and 5: after a non-final error the outcome is unknown, so a
// lower request must not change the target.
func TestUncertainErrorKeepsAllocatedSize(t *testing.T) {
	e := startMock(t, scenario.Options{ResizerArgs: []string{"--retry-interval-start=500ms", "--retry-interval-max=2s"}})
	e.NewClaim(t, "data", "1Gi")
	e.Driver.SetFaults(t, []framework.Fault{{Method: "ControllerExpandVolume", Code: codes.DeadlineExceeded, Message: "backend is slow"}})
	e.SetRequest(t, "data", "10Gi")
	e.WaitClaim(t, "data", resizeTimeout, uncertainAfter("DeadlineExceeded"))

	e.SetRequest(t, "data", "3Gi")
	lowered := time.Now()
	// Wait until the resizer has retried after the user lowered the request.
	framework.Eventually(t, resizeTimeout, func() (bool, string) {
		for _, c := range e.Driver.Calls(t, "ControllerExpandVolume") {
			if c.Time.After(lowered) {
				return true, ""
			}
		}
		return false, "no retry since the request was lowered"
	})
	e.Driver.ClearFaults(t)
	pvc := e.WaitClaim(t, "data", resizeTimeout, scenario.Done("10Gi"))
	if _, _, alloc := scenario.Storage(pvc); !scenario.Is(alloc, "10Gi") {
		t.Errorf("allocatedResources = %s, want 10Gi", alloc.String())
	}
	for _, c := range e.Driver.Calls(t, "ControllerExpandVolume") {
		if c.RequiredBytes != bytesOf("10Gi") {
			t.Errorf("driver asked for %d bytes at %s; every call must ask for the allocated 10Gi", c.RequiredBytes, c.Time)
		}
	}
}

// Issue 15, bug 1: after an uncertain error the user raises the request above
// allocatedResources. The retry, here by a restarted resizer with no backoff pending, expands to
// the allocated size (KEP-1790) and succeeds with no node step; the expansion to the new request
// must then start at once, woken by the echo of that success write, not at the next resync
// (10 minutes).
func TestRaisedRequestAfterUncertainErrorStartsAtOnce(t *testing.T) {
	e := startMock(t, scenario.Options{ResizerArgs: []string{"--retry-interval-start=500ms", "--retry-interval-max=2s"}})
	_, pv := e.NewClaim(t, "data", "1Gi")
	vol := pv.Spec.CSI.VolumeHandle
	e.Driver.SetFaults(t, []framework.Fault{{Method: "ControllerExpandVolume", Code: codes.Unavailable, Message: "backend restarting"}})
	e.SetRequest(t, "data", "10Gi")
	e.WaitClaim(t, "data", resizeTimeout, uncertainAfter("Unavailable"))
	if err := e.Resizer.Kill(); err != nil {
		t.Fatal(err)
	}
	e.SetRequest(t, "data", "20Gi")
	e.Driver.ClearFaults(t)
	restarted := time.Now()
	e.Resizer.Restart(t)

	// Well within the resync period: the second expansion is queued by the first one's echo.
	pvc := e.WaitClaim(t, "data", time.Minute, scenario.Done("20Gi"))
	if _, _, alloc := scenario.Storage(pvc); !scenario.Is(alloc, "20Gi") {
		t.Errorf("allocatedResources = %s, want 20Gi", alloc.String())
	}
	var after []int64
	for _, c := range e.Driver.VolumeCalls(t, vol) {
		if c.Time.After(restarted) {
			after = append(after, c.RequiredBytes)
		}
	}
	if len(after) != 2 || after[0] != bytesOf("10Gi") || after[1] != bytesOf("20Gi") {
		t.Errorf("calls after the restart asked for %v bytes, want the allocated 10Gi, then 20Gi", after)
	}
}

// Scenario 5, KEP-1790 Case 4: the resizer dies after recording the target and before the driver
// answers; a restarted resizer finishes the old target, never the lower request.
func TestCrashDuringExpansionKeepsTarget(t *testing.T) {
	e := startMock(t, scenario.Options{ResizerArgs: []string{"--timeout=60s"}})
	_, pv := e.NewClaim(t, "data", "1Gi")
	vol := pv.Spec.CSI.VolumeHandle
	// The driver holds the first call past the kill: the resizer dies mid-call, and the call
	// completes behind it in the driver, as a real backend's would.
	e.Driver.SetFaults(t, []framework.Fault{{Method: "ControllerExpandVolume", VolumeID: vol, Delay: 15 * time.Second, Times: 1}})
	e.SetRequest(t, "data", "10Gi")
	e.WaitClaim(t, "data", resizeTimeout, func(pvc *v1.PersistentVolumeClaim) (bool, string) {
		_, _, alloc := scenario.Storage(pvc)
		return scenario.State(pvc) == v1.PersistentVolumeClaimControllerResizeInProgress && scenario.Is(alloc, "10Gi"),
			"want ControllerResizeInProgress at 10Gi"
	})
	// The state is written just before the call: wait for the resizer's word that it is
	// calling, so the kill hits the call and not the moment before it.
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		return scenario.LoggedExpandCall(e.Resizer, vol), "the resizer has not logged its ControllerExpandVolume call for " + vol
	})
	killed := time.Now()
	if err := e.Resizer.Kill(); err != nil {
		t.Fatal(err)
	}
	if pvc := e.PVC(t, "data"); scenario.Is(pvc.Status.Capacity[v1.ResourceStorage], "10Gi") {
		t.Fatalf("the expansion finished before the resizer died, nothing was left uncertain: %s", scenario.Describe(pvc))
	}
	e.SetRequest(t, "data", "3Gi")
	e.Driver.ClearFaults(t)
	restarting := time.Now()
	e.Resizer.Restart(t)

	pvc := e.WaitClaim(t, "data", resizeTimeout, scenario.Done("10Gi"))
	if _, _, alloc := scenario.Storage(pvc); !scenario.Is(alloc, "10Gi") {
		t.Errorf("allocatedResources = %s, want 10Gi", alloc.String())
	}
	// The killed resizer really was mid-call: its call reached the driver before the restart and
	// was answered after the kill (the mock logs a call when it answers, so wait out the delay).
	e.Driver.WaitCallAcross(t, vol, restarting, killed, "the SIGKILL", 60*time.Second)
	calls := e.Driver.VolumeCalls(t, vol)
	restarted := false
	for _, c := range calls {
		restarted = restarted || c.Time.After(restarting)
		// Before and after the crash, with the request lowered meanwhile: the driver is only
		// ever asked for the target recorded before the crash.
		if c.RequiredBytes != bytesOf("10Gi") {
			t.Errorf("the driver was asked for %d bytes at %s; every call must ask for the recorded 10Gi target (%d)",
				c.RequiredBytes, c.Time.Format(time.StampMicro), bytesOf("10Gi"))
		}
	}
	if !restarted {
		t.Errorf("the restarted resizer made no ControllerExpandVolume call: %s", framework.DescribeCalls(calls))
	}
}

// Scenario 6, KEP-1790 Case 2: a node-only driver gets no ControllerExpandVolume call.
func TestNodeOnlyDriver(t *testing.T) {
	e := startMock(t, scenario.Options{Mock: framework.MockDriverOptions{NodeOnly: true}})
	_, pv := e.NewClaim(t, "data", "1Gi")
	e.SetRequest(t, "data", "5Gi")
	pvc := e.WaitClaim(t, "data", resizeTimeout, scenario.InState(v1.PersistentVolumeClaimNodeResizePending))
	if _, _, alloc := scenario.Storage(pvc); !scenario.Is(alloc, "5Gi") {
		t.Errorf("allocatedResources = %s, want 5Gi", alloc.String())
	}
	if c := e.PV(t, pv.Name).Spec.Capacity[v1.ResourceStorage]; !scenario.Is(c, "5Gi") {
		t.Errorf("PV capacity = %s, want 5Gi", c.String())
	}
	// The node fails for good; the user lowers the request; the resizer may lower the PV.
	e.FailNodeExpansion(t, "data")
	e.SetRequest(t, "data", "2Gi")
	pvc = e.WaitClaim(t, "data", resizeTimeout, func(pvc *v1.PersistentVolumeClaim) (bool, string) {
		_, _, alloc := scenario.Storage(pvc)
		return scenario.State(pvc) == v1.PersistentVolumeClaimNodeResizePending && scenario.Is(alloc, "2Gi"), "want NodeResizePending at 2Gi"
	})
	if c := e.PV(t, pv.Name).Spec.Capacity[v1.ResourceStorage]; !scenario.Is(c, "2Gi") {
		t.Errorf("PV capacity after node-only recovery = %s, want 2Gi", c.String())
	}
	e.FinishNodeExpansion(t, "data")
	e.WaitClaim(t, "data", resizeTimeout, scenario.Done("2Gi"))
	if n := len(e.Driver.Calls(t, "ControllerExpandVolume")); n != 0 {
		t.Errorf("ControllerExpandVolume calls = %d, want 0 for a node-only driver", n)
	}
}

// Scenario 9, with a driver that declares offline-only expansion (PluginCapability
// VolumeExpansion OFFLINE): the resizer checks for pods before it calls, so while a pod uses the
// volume the driver gets no call at all, and there is nothing to retry; the expansion happens
// once the pod is gone. (TestFailedPreconditionWaitsForPod covers a driver that does not say so
// and answers FAILED_PRECONDITION instead.)
func TestOfflineExpansionWaitsForPod(t *testing.T) {
	e := startMock(t, scenario.Options{
		Mock:        framework.MockDriverOptions{OfflineExpansion: true},
		ResizerArgs: []string{"--retry-interval-start=200ms", "--retry-interval-max=1s"},
	})
	_, pv := e.NewClaim(t, "data", "1Gi")
	vol := pv.Spec.CSI.VolumeHandle
	framework.CreatePodWithClaim(t, e.Ctx, e.Client, e.Namespace, "app", "data")
	// Attached, as the external-attacher would have it for the pod: the mock then refuses an
	// expansion, so a call that slipped past the in-use check would not succeed either.
	if err := e.Driver.PublishVolume(e.Ctx, vol); err != nil {
		t.Fatal(err)
	}
	e.SetRequest(t, "data", "2Gi")
	ev := e.WaitEvent(t, "data", "VolumeResizeFailed", resizeTimeout)
	if !strings.Contains(ev.Message, "no pod uses") {
		t.Errorf("VolumeResizeFailed event %q, want the in-use wait (\"... no pod uses ...\")", ev.Message)
	}
	// With a 200ms..1s backoff a retry loop would make several calls in this window.
	framework.Consistently(t, 5*time.Second, func() (bool, string) {
		calls := e.Driver.VolumeCalls(t, vol)
		return len(calls) == 0, "ControllerExpandVolume calls while the pod uses the volume, want none (the in-use check comes first): " + framework.DescribeCalls(calls)
	})

	if err := e.Driver.UnpublishVolume(e.Ctx, vol); err != nil {
		t.Fatal(err)
	}
	framework.DeletePod(t, e.Ctx, e.Client, e.Namespace, "app")
	e.WaitClaim(t, "data", resizeTimeout, scenario.Done("2Gi"))
	if calls := e.Driver.VolumeCalls(t, vol); len(calls) != 1 || calls[0].Code != codes.OK || calls[0].RequiredBytes != bytesOf("2Gi") {
		t.Errorf("ControllerExpandVolume calls %s, want exactly one, OK, for 2Gi, once the pod was gone", framework.DescribeCalls(calls))
	}
}

// Scenario 9, with a driver that does not declare offline-only expansion (the mock advertises
// ONLINE) but answers FAILED_PRECONDITION while a pod uses the volume: the resizer takes that
// one answer as "in use", waits for the pod without retrying (no retry storm), and calls again
// once the pod is gone. The mock answers FAILED_PRECONDITION by itself only when it also
// advertises OFFLINE (then the resizer never calls, TestOfflineExpansionWaitsForPod), so here
// the answer is injected for as long as the pod runs.
func TestFailedPreconditionWaitsForPod(t *testing.T) {
	e := startMock(t, scenario.Options{ResizerArgs: []string{"--retry-interval-start=200ms", "--retry-interval-max=1s"}})
	_, pv := e.NewClaim(t, "data", "1Gi")
	vol := pv.Spec.CSI.VolumeHandle
	framework.CreatePodWithClaim(t, e.Ctx, e.Client, e.Namespace, "app", "data")
	// Every call while the pod runs fails, so each retry would show in the calls log.
	const refusal = "volume is published and online volume expansion is not supported"
	e.Driver.SetFaults(t, []framework.Fault{{Method: "ControllerExpandVolume", VolumeID: vol, Code: codes.FailedPrecondition, Message: refusal}})
	e.SetRequest(t, "data", "2Gi")

	framework.Eventually(t, resizeTimeout, func() (bool, string) {
		return len(e.Driver.VolumeCalls(t, vol)) > 0, "no ControllerExpandVolume call yet"
	})
	e.WaitClaim(t, "data", 30*time.Second, func(pvc *v1.PersistentVolumeClaim) (bool, string) {
		_, _, alloc := scenario.Storage(pvc)
		c := scenario.Condition(pvc, v1.PersistentVolumeClaimControllerResizeError)
		// FAILED_PRECONDITION is final, not infeasible: the target stays, in progress.
		return scenario.State(pvc) == v1.PersistentVolumeClaimControllerResizeInProgress && scenario.Is(alloc, "2Gi") &&
				c != nil && c.Reason == "FailedPrecondition" && c.Message == refusal,
			"want ControllerResizeInProgress at 2Gi with a FailedPrecondition ControllerResizeError condition"
	})
	ev := e.WaitEvent(t, "data", "VolumeResizeFailed", 30*time.Second)
	if !strings.Contains(ev.Message, "FailedPrecondition") || !strings.Contains(ev.Message, refusal) {
		t.Errorf("VolumeResizeFailed event %q, want the driver's FailedPrecondition answer", ev.Message)
	}
	// With a 200ms..1s backoff a retry storm would make several calls in this window, and
	// repeat the warning. (The echo of the resizer's own status write finds the pod still
	// there and waits on; the pod watcher wakes it when the pod goes.)
	framework.Consistently(t, 5*time.Second, func() (bool, string) {
		calls := e.Driver.VolumeCalls(t, vol)
		evs := e.Events(t, "data", "VolumeResizeFailed")
		return len(calls) == 1 && len(evs) == 1 && evs[0].Count == 1, fmt.Sprintf("want exactly the one refused ControllerExpandVolume call and its one warning while the pod uses the volume: calls %s, events %s",
			framework.DescribeCalls(calls), scenario.DescribeEvents(evs))
	})
	if c := e.Driver.VolumeCalls(t, vol)[0]; c.Code != codes.FailedPrecondition || c.RequiredBytes != bytesOf("2Gi") {
		t.Errorf("first call %s, want FAILED_PRECONDITION for 2Gi", framework.DescribeCalls([]framework.Call{c}))
	}

	// The pod goes, and with it the attachment: the driver accepts from now on. The fault goes
	// first, so the call that follows the pod's deletion is answered as the driver then would.
	e.Driver.ClearFaults(t)
	released := time.Now()
	framework.DeletePod(t, e.Ctx, e.Client, e.Namespace, "app")
	e.WaitClaim(t, "data", resizeTimeout, scenario.Done("2Gi"))
	calls := e.Driver.VolumeCalls(t, vol)
	if len(calls) != 2 {
		t.Fatalf("ControllerExpandVolume calls %s, want 2: the refused one and one after the pod was gone", framework.DescribeCalls(calls))
	}
	if c := calls[1]; c.Code != codes.OK || c.RequiredBytes != bytesOf("2Gi") || c.Time.Before(released) {
		t.Errorf("second call %s, want OK for 2Gi after the pod's deletion at %s", framework.DescribeCalls(calls[1:]), released.Format(time.StampMicro))
	}
}

// Slow retry of an infeasible PVC on the real apiserver: the second call comes a full
// --retry-interval-max after the first (no immediate duplicate), and over a window T there are
// at most 1 + T/max calls.
func TestInfeasibleSlowRetry(t *testing.T) {
	const retryMax = 3 * time.Second
	e := startMock(t, scenario.Options{ResizerArgs: []string{"--retry-interval-start=100ms", "--retry-interval-max=" + retryMax.String()}})
	e.NewClaim(t, "data", "1Gi")
	e.Driver.SetFaults(t, []framework.Fault{{Method: "ControllerExpandVolume", Code: codes.OutOfRange, Message: "too big"}})
	e.SetRequest(t, "data", "50Gi")
	e.WaitClaim(t, "data", resizeTimeout, scenario.InState(v1.PersistentVolumeClaimControllerResizeInfeasible))
	first := e.Driver.Calls(t, "ControllerExpandVolume")[0].Time
	const window = 10 * time.Second
	framework.Eventually(t, window+retryMax, func() (bool, string) {
		return time.Since(first) >= window, "waiting out the window"
	})
	calls := e.Driver.Calls(t, "ControllerExpandVolume")
	var inWindow []time.Time
	for _, c := range calls {
		if c.Time.Sub(first) <= window {
			inWindow = append(inWindow, c.Time)
		}
	}
	if maxCalls := 1 + int(window/retryMax); len(inWindow) > maxCalls || len(inWindow) < 2 {
		t.Errorf("%d driver calls in %s with --retry-interval-max=%s, want 2..%d", len(inWindow), window, retryMax, maxCalls)
	}
	for i := 1; i < len(inWindow); i++ {
		// Status timestamps have one-second resolution, so allow that much.
		if gap := inWindow[i].Sub(inWindow[i-1]); gap < retryMax-time.Second {
			t.Errorf("call %d came %s after the previous one, want about %s", i+1, gap, retryMax)
		}
	}
}
