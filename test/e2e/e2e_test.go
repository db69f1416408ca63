//go:build integration

// Package e2e is the driver-agnostic end-to-end suite of csi-resizer, in the spirit of
// csi-sanity: every scenario here makes sense for any CSI driver with controller expansion.
// By default it runs against the mock driver; point it at a real one with
//
//	make test-e2e DRIVER_CMD="hostpathplugin --endpoint={endpoint} --nodeid=n1" DRIVER_NAME=hostpath.csi.k8s.io INFEASIBLE_SIZE=2Ti
//
// (or DRIVER_ENDPOINT=unix:///path for a driver that already runs). INFEASIBLE_SIZE is a size
// the driver refuses with INVALID_ARGUMENT, OUT_OF_RANGE or NOT_FOUND.
package e2e

import (
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

const resizeTimeout = 2 * time.Minute

// infeasibleSize is the size the driver refuses. With the mock driver the suite injects the
// refusal itself for every request at or above this size.
func infeasibleSize() string {
	if s := os.Getenv("E2E_INFEASIBLE_SIZE"); s != "" {
		return s
	}
	return "100Gi"
}

func start(t *testing.T, opts scenario.Options) *scenario.Env {
	t.Helper()
	e := scenario.Start(t, opts)
	limit := resource.MustParse(infeasibleSize())
	if e.Driver.IsMock() {
		e.Driver.SetFaults(t, []framework.Fault{{
			Method: "ControllerExpandVolume", Code: codes.OutOfRange,
			Message:          "the backend cannot grow a volume beyond 50Gi",
			MinRequiredBytes: limit.Value(),
		}})
	}
	return e
}

// waitExpanded waits until the control-plane part is done at size (and finishes a node part).
func waitExpanded(t *testing.T, e *scenario.Env, name, size string) *v1.PersistentVolumeClaim {
	t.Helper()
	e.WaitClaim(t, name, resizeTimeout, func(pvc *v1.PersistentVolumeClaim) (bool, string) {
		_, capacity, alloc := scenario.Storage(pvc)
		node := scenario.State(pvc) == v1.PersistentVolumeClaimNodeResizePending && scenario.Is(alloc, size)
		return node || (scenario.Is(capacity, size) && scenario.State(pvc) == ""), "want " + size + " expanded"
	})
	e.FinishNodeExpansion(t, name)
	return e.WaitClaim(t, name, resizeTimeout, scenario.Done(size))
}

// Scenario 1: a plain expansion, one driver call, no capability re-reads.
func TestExpandVolume(t *testing.T) {
	e := start(t, scenario.Options{})
	_, pv := e.NewClaim(t, "data", "1Gi")
	var capsBefore int
	if e.Driver.IsMock() {
		capsBefore = len(e.Driver.Calls(t, "ControllerGetCapabilities"))
	}
	e.SetRequest(t, "data", "2Gi")
	pvc := waitExpanded(t, e, "data", "2Gi")

	if got := e.PV(t, pv.Name).Spec.Capacity[v1.ResourceStorage]; !scenario.Is(got, "2Gi") {
		t.Errorf("PV capacity = %s, want 2Gi", got.String())
	}
	if _, _, alloc := scenario.Storage(pvc); !scenario.Is(alloc, "2Gi") {
		t.Errorf("allocatedResources = %s, want 2Gi", alloc.String())
	}
	for _, ct := range []v1.PersistentVolumeClaimConditionType{v1.PersistentVolumeClaimResizing, v1.PersistentVolumeClaimControllerResizeError} {
		if c := scenario.Condition(pvc, ct); c != nil {
			t.Errorf("condition %s left on a finished resize: %+v", ct, c)
		}
	}
	ev := e.WaitEvent(t, "data", "VolumeResizeSuccessful", 30*time.Second)
	if !strings.Contains(ev.Message, "1Gi") || !strings.Contains(ev.Message, "2Gi") {
		t.Errorf("VolumeResizeSuccessful should name the old and new size: %q", ev.Message)
	}
	if e.Driver.IsMock() {
		if n := len(e.Driver.Calls(t, "ControllerExpandVolume")); n != 1 {
			t.Errorf("ControllerExpandVolume calls = %d, want exactly 1", n)
		}
		if n := len(e.Driver.Calls(t, "ControllerGetCapabilities")) - capsBefore; n != 0 {
			t.Errorf("ControllerGetCapabilities called %d times for the expansion, want 0 (read once at start-up)", n)
		}
	}
}

// Scenario 3, KEP-1790 Case 1: an infeasible request, then a lower one recovers.
func TestInfeasibleThenRecover(t *testing.T) {
	e := start(t, scenario.Options{})
	e.NewClaim(t, "data", "1Gi")
	e.SetRequest(t, "data", infeasibleSize())
	pvc := e.WaitClaim(t, "data", resizeTimeout, scenario.InState(v1.PersistentVolumeClaimControllerResizeInfeasible))
	cond := scenario.Condition(pvc, v1.PersistentVolumeClaimControllerResizeError)
	if cond == nil {
		t.Fatalf("no ControllerResizeError condition: %s", scenario.Describe(pvc))
	}
	infeasibleReasons := []string{codes.InvalidArgument.String(), codes.OutOfRange.String(), codes.NotFound.String()}
	if !contains(infeasibleReasons, cond.Reason) || cond.Message == "" {
		t.Errorf("condition reason/message = %q/%q, want one of %v with the driver's message", cond.Reason, cond.Message, infeasibleReasons)
	}
	if e.Driver.IsMock() && cond.Reason != "OutOfRange" {
		t.Errorf("reason = %q, want OutOfRange", cond.Reason)
	}
	e.WaitEvent(t, "data", "VolumeResizeFailed", 30*time.Second)

	// Recovery: lower the request to something the driver accepts, above the capacity.
	e.SetRequest(t, "data", "2Gi")
	pvc = waitExpanded(t, e, "data", "2Gi")
	if _, _, alloc := scenario.Storage(pvc); !scenario.Is(alloc, "2Gi") {
		t.Errorf("allocatedResources = %s after recovery, want 2Gi", alloc.String())
	}
	e.WaitEvent(t, "data", "VolumeResizeRecovered", 30*time.Second)
}

// Scenario 7: the apiserver restarts in the middle of a resize.
func TestAPIServerRestartDuringResize(t *testing.T) {
	e := start(t, scenario.Options{ResizerArgs: []string{"--timeout=30s"}})
	if e.Driver.IsMock() {
		// Keep the driver busy long enough for the restart to fall inside the call.
		e.Driver.SetFaults(t, []framework.Fault{{Method: "ControllerExpandVolume", Delay: 4 * time.Second, Times: 1}})
	}
	e.NewClaim(t, "data", "1Gi")
	e.SetRequest(t, "data", "3Gi")
	e.WaitClaim(t, "data", resizeTimeout, func(pvc *v1.PersistentVolumeClaim) (bool, string) {
		return scenario.State(pvc) != "", "want the resize under way"
	})
	e.Cluster.RestartAPIServer(t)
	waitExpanded(t, e, "data", "3Gi")
}

// Scenario 8: two resizers with leader election; only the leader calls the driver, and the
// other takes over after the leader is killed.
func TestLeaderElectionFailover(t *testing.T) {
	const lease = 6 * time.Second
	le := []string{"--leader-election", "--leader-election-lease-duration=" + lease.String(), "--leader-election-renew-deadline=4s", "--leader-election-retry-period=1s"}
	e := start(t, scenario.Options{NoResizer: true, ResizerArgs: le})
	a, b := e.StartResizer(t), e.StartResizer(t)

	e.NewClaim(t, "first", "1Gi")
	e.SetRequest(t, "first", "2Gi")
	waitExpanded(t, e, "first", "2Gi")

	// Who did it? Each process counts its own driver calls.
	callsA, callsB := expandCalls(t, a), expandCalls(t, b)
	if (callsA == 0) == (callsB == 0) {
		t.Fatalf("exactly one resizer should call the driver: a=%v b=%v", callsA, callsB)
	}
	leader, follower := a, b
	if callsB > 0 {
		leader, follower = b, a
	}
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()

	e.NewClaim(t, "second", "1Gi")
	e.SetRequest(t, "second", "2Gi")
	waitExpanded(t, e, "second", "2Gi")
	if took := time.Since(killed); took > lease+resizeTimeout {
		t.Errorf("takeover and resize took %s", took)
	}
	if expandCalls(t, follower) == 0 {
		t.Errorf("the surviving resizer made no ControllerExpandVolume call")
	}
}

func expandCalls(t *testing.T, p *framework.Process) float64 {
	t.Helper()
	return scenario.MetricValue(scenario.Scrape(t, p), "csi_sidecar_operations_seconds_count", "ControllerExpandVolume")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
