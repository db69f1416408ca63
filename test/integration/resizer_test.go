//go:build integration

package integration

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	e.WaitEvent(t, "data", "FileSystemResizeRequired", 30*time.Second)

	e.FinishNodeExpansion(t, "data")
	e.WaitClaim(t, "data", resizeTimeout, scenario.Done("2Gi"))
	// The resizer must not touch a PVC the node finished: no second driver call, ever.
	framework.Consistently(t, 3*time.Second, func() (bool, string) {
		n := len(e.Driver.Calls(t, "ControllerExpandVolume"))
		return n == 1, "ControllerExpandVolume calls: want 1"
	})
}

// Scenario 4, KEP-1790 Cases 3 and 5: after a non-final error the outcome is unknown, so a
// lower request must not change the target.
func TestUncertainErrorKeepsAllocatedSize(t *testing.T) {
	e := startMock(t, scenario.Options{ResizerArgs: []string{"--retry-interval-start=500ms", "--retry-interval-max=2s"}})
	e.NewClaim(t, "data", "1Gi")
	e.Driver.SetFaults(t, []framework.Fault{{Method: "ControllerExpandVolume", Code: codes.DeadlineExceeded, Message: "backend is slow"}})
	e.SetRequest(t, "data", "10Gi")
	e.WaitClaim(t, "data", resizeTimeout, func(pvc *v1.PersistentVolumeClaim) (bool, string) {
		c := scenario.Condition(pvc, v1.PersistentVolumeClaimControllerResizeError)
		return c != nil && c.Reason == "DeadlineExceeded" && scenario.State(pvc) == v1.PersistentVolumeClaimControllerResizeInProgress,
			"want ControllerResizeInProgress with a DeadlineExceeded condition"
	})

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

// Scenario 5, KEP-1790 Case 4: the resizer dies after recording the target and before the driver
// answers; a restarted resizer finishes the old target, never the lower request.
func TestCrashDuringExpansionKeepsTarget(t *testing.T) {
	e := startMock(t, scenario.Options{ResizerArgs: []string{"--timeout=60s"}})
	e.NewClaim(t, "data", "1Gi")
	// The driver takes its time: the resizer is killed while waiting for it.
	e.Driver.SetFaults(t, []framework.Fault{{Method: "ControllerExpandVolume", Delay: 30 * time.Second, Times: 1}})
	e.SetRequest(t, "data", "10Gi")
	e.WaitClaim(t, "data", resizeTimeout, func(pvc *v1.PersistentVolumeClaim) (bool, string) {
		_, _, alloc := scenario.Storage(pvc)
		return scenario.State(pvc) == v1.PersistentVolumeClaimControllerResizeInProgress && scenario.Is(alloc, "10Gi"),
			"want ControllerResizeInProgress at 10Gi"
	})
	if err := e.Resizer.Kill(); err != nil {
		t.Fatal(err)
	}
	e.SetRequest(t, "data", "3Gi")
	e.Driver.ClearFaults(t)
	e.Resizer.Restart(t)

	pvc := e.WaitClaim(t, "data", resizeTimeout, scenario.Done("10Gi"))
	if _, _, alloc := scenario.Storage(pvc); !scenario.Is(alloc, "10Gi") {
		t.Errorf("allocatedResources = %s, want 10Gi", alloc.String())
	}
	for _, c := range e.Driver.Calls(t, "ControllerExpandVolume") {
		if c.RequiredBytes == bytesOf("3Gi") {
			t.Errorf("the driver was asked for the lower 3Gi at %s: the uncertain 10Gi expansion was abandoned", c.Time)
		}
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
	pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage] = v1.PersistentVolumeClaimNodeResizeInfeasible
	pvc.Status.Conditions = append(pvc.Status.Conditions, v1.PersistentVolumeClaimCondition{
		Type: v1.PersistentVolumeClaimNodeResizeError, Status: v1.ConditionTrue, Reason: "NodeResizeFailed", Message: "filesystem too small to grow", LastTransitionTime: metav1.Now(),
	})
	if _, err := e.Client.CoreV1().PersistentVolumeClaims(e.Namespace).UpdateStatus(e.Ctx, pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("playing the kubelet's failure: %v", err)
	}
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

// Scenario 9: an offline-only driver and a pod using the volume: no retry storm; the expansion
// happens once the pod is gone.
func TestOfflineExpansionWaitsForPod(t *testing.T) {
	e := startMock(t, scenario.Options{
		Mock:        framework.MockDriverOptions{OfflineExpansion: true},
		ResizerArgs: []string{"--retry-interval-start=200ms", "--retry-interval-max=1s"},
	})
	_, pv := e.NewClaim(t, "data", "1Gi")
	framework.CreatePodWithClaim(t, e.Ctx, e.Client, e.Namespace, "app", "data")
	if err := e.Driver.PublishVolume(e.Ctx, pv.Spec.CSI.VolumeHandle); err != nil {
		t.Fatal(err)
	}
	e.SetRequest(t, "data", "2Gi")
	e.WaitEvent(t, "data", "VolumeResizeFailed", resizeTimeout)
	// With a 200ms..1s backoff a retry storm would make several calls in this window.
	framework.Consistently(t, 5*time.Second, func() (bool, string) {
		n := len(e.Driver.Calls(t, "ControllerExpandVolume"))
		return n <= 1, "ControllerExpandVolume calls while the pod uses the volume: want at most 1"
	})

	if err := e.Driver.UnpublishVolume(e.Ctx, pv.Spec.CSI.VolumeHandle); err != nil {
		t.Fatal(err)
	}
	if err := e.Client.CoreV1().Pods(e.Namespace).Delete(e.Ctx, "app", *metav1.NewDeleteOptions(0)); err != nil {
		t.Fatal(err)
	}
	e.WaitClaim(t, "data", resizeTimeout, scenario.Done("2Gi"))
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
