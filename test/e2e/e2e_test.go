//go:build integration

// Package e2e is the driver-agnostic end-to-end suite of csi-resizer, in the spirit of
// csi-sanity: every scenario here makes sense for any CSI driver that can expand volumes, with
// controller expansion (whether or not it then asks for node expansion) or node-only. The
// suite reads which from the driver's capabilities, and plays the kubelet's node step when the
// resizer hands over to the node: it calls the driver's NodeExpandVolume (with a directory
// standing for the publish path: there is no mount here) and writes the PVC status the kubelet
// would. By default it runs against the mock driver; point it at a real one with
//
//	make test-e2e DRIVER_CMD="hostpathplugin --endpoint={endpoint} --nodeid=n1 --statedir={statedir} --max-volume-size=10737418240" DRIVER_NAME=hostpath.csi.k8s.io INFEASIBLE_SIZE=20Gi
//
// (or DRIVER_ENDPOINT=unix:///path for a driver that already runs). INFEASIBLE_SIZE is a size
// the driver refuses with INVALID_ARGUMENT, OUT_OF_RANGE or NOT_FOUND (a node-only driver: in
// NodeExpandVolume); it is required with a real driver. E2E_NODE_EXPANSION_REQUIRED=true|false
// says what a real driver's ControllerExpandVolume answers in node_expansion_required, so the
// suite checks the resizer followed it. E2E_MOCK_NODE_EXPANSION_REQUIRED=true runs the mock the
// way csi-driver-host-path answers by default (node_expansion_required=true). make
// test-integration runs the suite with the mock in both ways, then against csi-driver-host-path
// with controller expansion and node-only, and its VolumeAttributesClass test against
// csi-driver-host-path with --enable-controller-modify-volume (make test-e2e-hostpath; see
// modify_test.go for E2E_MODIFY_REQUIRED, E2E_MODIFY_PARAMETERS and
// E2E_MODIFY_INFEASIBLE_PARAMETERS).
package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

const resizeTimeout = 2 * time.Minute

// The suite's own environment variables, besides framework's E2E_DRIVER_*.
const (
	// envInfeasibleSize is a size the driver refuses with INVALID_ARGUMENT, OUT_OF_RANGE or
	// NOT_FOUND. Required with a real driver; the mock defaults to defaultInfeasibleSize and
	// injects the refusal itself.
	envInfeasibleSize     = "E2E_INFEASIBLE_SIZE"
	defaultInfeasibleSize = "100Gi"
	// envMockNodeExpansion=true makes the mock's ControllerExpandVolume answer
	// node_expansion_required=true, as csi-driver-host-path does by default, so that CI runs
	// the suite's node-expansion path too.
	envMockNodeExpansion = "E2E_MOCK_NODE_EXPANSION_REQUIRED"
	// envNodeExpansionRequired is what a real driver's ControllerExpandVolume answers in
	// node_expansion_required (unset: not known, not checked).
	envNodeExpansionRequired = "E2E_NODE_EXPANSION_REQUIRED"
)

// suite is the configuration TestMain reads from the environment.
var suite struct {
	external          bool   // E2E_DRIVER_CMD or E2E_DRIVER_ENDPOINT names a real driver
	infeasibleSize    string // what the driver refuses
	mockNodeExpansion bool   // the mock answers node_expansion_required=true
	// nodeExpansionRequired is the real driver's node_expansion_required answer, nil if unknown.
	nodeExpansionRequired *bool
}

// TestMain checks the configuration before any control plane starts: a mistake there must
// cost seconds and say what is wrong, not fail scenario after scenario with timeouts.
func TestMain(m *testing.M) {
	if err := configure(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}

func configure() error {
	driverVar := ""
	for _, v := range []string{framework.EnvDriverCmd, framework.EnvDriverEndpoint} {
		if os.Getenv(v) != "" {
			driverVar = v
		}
	}
	suite.external = driverVar != ""
	suite.infeasibleSize = os.Getenv(envInfeasibleSize)
	if suite.infeasibleSize == "" {
		if suite.external {
			// The mock's default means nothing to a real driver: most would grow a volume to
			// 100Gi, and the infeasible scenario would then blame the resizer.
			return fmt.Errorf("%s names a real CSI driver, so %s is required: a size that driver refuses with INVALID_ARGUMENT, OUT_OF_RANGE or NOT_FOUND, e.g. %s=2Ti (make test-e2e ... INFEASIBLE_SIZE=2Ti)",
				driverVar, envInfeasibleSize, envInfeasibleSize)
		}
		suite.infeasibleSize = defaultInfeasibleSize
	}
	if _, err := resource.ParseQuantity(suite.infeasibleSize); err != nil {
		return fmt.Errorf("%s=%q is not a quantity: %v", envInfeasibleSize, suite.infeasibleSize, err)
	}
	if v := os.Getenv(envMockNodeExpansion); v != "" {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%s=%q: %v", envMockNodeExpansion, v, err)
		}
		if on && suite.external {
			return fmt.Errorf("%s shapes the mock driver and cannot apply to the real driver named by %s", envMockNodeExpansion, driverVar)
		}
		suite.mockNodeExpansion = on
	}
	if v := os.Getenv(envNodeExpansionRequired); v != "" {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%s=%q: %v", envNodeExpansionRequired, v, err)
		}
		if !suite.external {
			return fmt.Errorf("%s describes a real driver (E2E_DRIVER_CMD or E2E_DRIVER_ENDPOINT); the mock is shaped with %s", envNodeExpansionRequired, envMockNodeExpansion)
		}
		suite.nodeExpansionRequired = &on
	}
	return configureModify()
}

func start(t *testing.T, opts scenario.Options) *env {
	t.Helper()
	opts.Mock.NodeExpansionRequired = suite.mockNodeExpansion
	e := newEnv(t, scenario.Start(t, opts))
	if e.Driver.IsMock() {
		e.Driver.SetFaults(t, mockFaults())
	}
	return e
}

// mockFaults are the mock's fault rules for a test: extra first (the first matching rule
// applies), then the suite's refusal of every request at or above the infeasible size.
func mockFaults(extra ...framework.Fault) []framework.Fault {
	limit := resource.MustParse(suite.infeasibleSize)
	return append(extra, framework.Fault{
		Method: "ControllerExpandVolume", Code: codes.OutOfRange,
		Message:          "the backend cannot grow a volume beyond 50Gi",
		MinRequiredBytes: limit.Value(),
	})
}

// waitExpanded waits until the resizer's part of the expansion to size is done, finishes the
// node's part if the driver asked for one, and returns the PVC once the whole expansion is
// done. node reports whether the resizer left the end to the node (the driver answered
// node_expansion_required, or is node-only): the PVC is then in NodeResizePending with
// FileSystemResizePending for the kubelet, and there is no kubelet here, so the test plays it.
func waitExpanded(t *testing.T, e *env, name, size string) (pvc *v1.PersistentVolumeClaim, node bool) {
	t.Helper()
	handedOver := e.WaitClaim(t, name, resizeTimeout, func(pvc *v1.PersistentVolumeClaim) (bool, string) {
		_, capacity, alloc := scenario.Storage(pvc)
		node := scenario.State(pvc) == v1.PersistentVolumeClaimNodeResizePending && scenario.Is(alloc, size)
		return node || (scenario.Is(capacity, size) && scenario.State(pvc) == ""), "want " + size + " expanded"
	})
	node = scenario.State(handedOver) == v1.PersistentVolumeClaimNodeResizePending
	if node && scenario.Condition(handedOver, v1.PersistentVolumeClaimFileSystemResizePending) == nil {
		t.Errorf("NodeResizePending without the FileSystemResizePending condition the kubelet acts on: %s", scenario.Describe(handedOver))
	}
	// When the answer is known, a resizer that ignored it (or invented it) is caught.
	if want, known := e.nodeStepExpected(); known && node != want {
		t.Errorf("the driver needs a node step: %v (node-only: %v), but the PVC went to NodeResizePending: %v (%s)",
			want, !e.controller, node, scenario.Describe(handedOver))
	}
	if node {
		// Nothing may claim the expansion done while the node has yet to do its part.
		for _, reason := range []string{"VolumeResizeSuccessful", "VolumeResizeRecovered"} {
			for _, ev := range e.Events(t, name, reason) {
				if strings.Contains(ev.Message, size) {
					t.Errorf("%s emitted while the node had yet to expand the file system: %q", reason, ev.Message)
				}
			}
		}
	}
	if err := e.nodeExpand(t, name); err != nil {
		t.Fatalf("the node step of %s to %s: %v", name, size, err)
	}
	return e.WaitClaim(t, name, resizeTimeout, scenario.Done(size)), node
}

// waitExpandedEvent waits for the events that end the resizer's part of an expansion to size
// (called after waitExpanded). When the driver finished it: want (VolumeResizeSuccessful or
// VolumeResizeRecovered). When the driver left the node a part to do: FileSystemResizeRequired
// at the hand-over, and, for a recovery, VolumeResizeRecovered once the node finished (which
// waitExpanded played, after checking that nothing claimed success before); a plain expansion
// gets no VolumeResizeSuccessful from the resizer then, the kubelet reports its own part.
func waitExpandedEvent(t *testing.T, e *env, claim, want, size string, node bool) v1.Event {
	t.Helper()
	reason := want
	if node {
		reason = "FileSystemResizeRequired"
	}
	ev := e.WaitEvent(t, claim, reason, 30*time.Second)
	if !strings.Contains(ev.Message, size) {
		t.Errorf("%s should name the new size %s: %q", reason, size, ev.Message)
	}
	if node && want == "VolumeResizeRecovered" {
		ev = e.WaitEvent(t, claim, want, 30*time.Second)
		if !strings.Contains(ev.Message, size) {
			t.Errorf("%s should name the new size %s: %q", want, size, ev.Message)
		}
	}
	return ev
}

// Scenario 1: a plain expansion, one driver call, no capability re-reads.
func TestExpandVolume(t *testing.T) {
	e := start(t, scenario.Options{})
	_, pv := e.NewClaim(t, "data", "1Gi")
	var capsBefore int
	if e.Driver.IsMock() {
		capsBefore = len(e.Driver.Calls(t, "ControllerGetCapabilities"))
	}
	// The resizer's own count of its driver calls, for a driver that keeps no calls log.
	capsCalls := func() float64 {
		return scenario.MetricValue(scenario.Scrape(t, e.Resizer), "csi_sidecar_operations_seconds_count", "ControllerGetCapabilities")
	}
	resizerCapsBefore := capsCalls()
	e.SetRequest(t, "data", "2Gi")
	pvc, node := waitExpanded(t, e, "data", "2Gi")

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
	ev := waitExpandedEvent(t, e, "data", "VolumeResizeSuccessful", "2Gi", node)
	if !node && !strings.Contains(ev.Message, "1Gi") {
		t.Errorf("VolumeResizeSuccessful should name the old size too: %q", ev.Message)
	}
	if e.Driver.IsMock() {
		calls := e.Driver.Calls(t, "ControllerExpandVolume")
		if n := len(calls); n != 1 {
			t.Errorf("ControllerExpandVolume calls = %d, want exactly 1", n)
		} else if calls[0].NodeExpansionRequired != suite.mockNodeExpansion {
			t.Errorf("the mock answered node_expansion_required=%v, want %v (%s)", calls[0].NodeExpansionRequired, suite.mockNodeExpansion, envMockNodeExpansion)
		}
		if n := len(e.Driver.Calls(t, "ControllerGetCapabilities")) - capsBefore; n != 0 {
			t.Errorf("ControllerGetCapabilities called %d times for the expansion, want 0 (read once at start-up)", n)
		}
	}
	// Whatever the driver: one ControllerExpandVolume call, none for a node-only driver (the
	// resizer only hands the size to the node), and no capability re-reads.
	want := 0.0
	if e.controller {
		want = 1
	}
	if n := expandCalls(t, e.Resizer); n != want {
		t.Errorf("the resizer made %v ControllerExpandVolume calls, want %v (controller EXPAND_VOLUME: %v)", n, want, e.controller)
	}
	if n := capsCalls() - resizerCapsBefore; n != 0 {
		t.Errorf("the resizer called ControllerGetCapabilities %v times for the expansion, want 0 (read once at start-up)", n)
	}
}

// Scenario 3, KEP-1790 Case 1: an infeasible request, then a lower one recovers. With a
// node-only driver, Case 2: the node refuses the size, and the lower request recovers there.
func TestInfeasibleThenRecover(t *testing.T) {
	e := start(t, scenario.Options{})
	_, pv := e.NewClaim(t, "data", "1Gi")
	e.SetRequest(t, "data", suite.infeasibleSize)
	if e.controller {
		refusedByController(t, e)
	} else {
		refusedByNode(t, e)
	}

	// Recovery: lower the request to something the driver accepts, above the capacity.
	e.SetRequest(t, "data", "2Gi")
	if !e.controller {
		kubeletRetriesUntil(t, e, "data", "2Gi")
	}
	pvc, node := waitExpanded(t, e, "data", "2Gi")
	if _, _, alloc := scenario.Storage(pvc); !scenario.Is(alloc, "2Gi") {
		t.Errorf("allocatedResources = %s after recovery, want 2Gi", alloc.String())
	}
	// Nothing grew the volume beyond 2Gi: a controller driver refused the larger size, and for
	// a node-only driver the PV capacity the node was refused is lowered again.
	if got := e.PV(t, pv.Name).Spec.Capacity[v1.ResourceStorage]; !scenario.Is(got, "2Gi") {
		t.Errorf("PV capacity = %s after recovery, want 2Gi", got.String())
	}
	waitExpandedEvent(t, e, "data", "VolumeResizeRecovered", "2Gi", node)
	// The recovery counter records the recovery once it is done, whatever the driver answered
	// (with node expansion, when the node finished). It is counted right after the event is
	// emitted, hence the short wait.
	framework.Eventually(t, 10*time.Second, func() (bool, string) {
		n := scenario.MetricValue(scenario.Scrape(t, e.Resizer), "csi_resizer_volume_recovery_total", `state="success"`)
		return n == 1, fmt.Sprintf(`csi_resizer_volume_recovery_total{state="success"} = %v, want 1`, n)
	})
}

// refusedByController waits until the driver's ControllerExpandVolume has refused the
// infeasible size and the resizer has said so.
func refusedByController(t *testing.T, e *env) {
	t.Helper()
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
}

// refusedByNode: a node-only driver gets no call from the resizer, which hands the size to
// the node; the node's NodeExpandVolume refuses it and the kubelet marks the PVC
// NodeResizeInfeasible.
func refusedByNode(t *testing.T, e *env) {
	t.Helper()
	e.WaitClaim(t, "data", resizeTimeout, func(pvc *v1.PersistentVolumeClaim) (bool, string) {
		_, _, alloc := scenario.Storage(pvc)
		return scenario.State(pvc) == v1.PersistentVolumeClaimNodeResizePending && scenario.Is(alloc, suite.infeasibleSize),
			"want " + suite.infeasibleSize + " handed to the node"
	})
	err := e.nodeExpand(t, "data")
	if err == nil {
		t.Fatalf("the node-only driver's NodeExpandVolume accepted %s: %s must be a size its node refuses (csi-driver-host-path: above --max-volume-size-node)",
			suite.infeasibleSize, envInfeasibleSize)
	}
	if !infeasible(err) {
		t.Fatalf("NodeExpandVolume to %s: %v; want INVALID_ARGUMENT, OUT_OF_RANGE or NOT_FOUND", suite.infeasibleSize, err)
	}
	if n := expandCalls(t, e.Resizer); n != 0 {
		t.Errorf("the resizer made %v ControllerExpandVolume calls to a node-only driver, want 0", n)
	}
}

// kubeletRetriesUntil plays the kubelet after a node refusal: the resizer puts a PVC whose
// node expansion failed back to NodeResizePending, at the refused size until the user's lower
// request reaches it (as upstream does, so that the kubelet may retry); the kubelet retries,
// is refused again, and so on until the resizer hands over the size wanted.
func kubeletRetriesUntil(t *testing.T, e *env, name, size string) {
	t.Helper()
	framework.Eventually(t, resizeTimeout, func() (bool, string) {
		pvc := e.PVC(t, name)
		_, _, alloc := scenario.Storage(pvc)
		if scenario.State(pvc) != v1.PersistentVolumeClaimNodeResizePending {
			return false, "waiting for the resizer to hand over " + size + "; PVC: " + scenario.Describe(pvc)
		}
		if scenario.Is(alloc, size) {
			return true, ""
		}
		if err := e.nodeExpand(t, name); err == nil || !infeasible(err) {
			t.Fatalf("the node's retry at %s, refused before: %v, want an infeasible error again", alloc.String(), err)
		}
		return false, "the node refused " + alloc.String() + " again"
	})
}

// restartCallDelay is how long the mock holds the expansion in TestAPIServerRestartDuringResize:
// longer than stopping kube-apiserver takes (about a second here; Process.Stop allows 15s
// before it kills, but a call that outlasts the stop is all the test needs).
const restartCallDelay = 10 * time.Second

// Scenario 7: the apiserver restarts in the middle of a resize.
func TestAPIServerRestartDuringResize(t *testing.T) {
	// --timeout=30s: the delayed driver call must not time out in the resizer.
	e := start(t, scenario.Options{ResizerArgs: []string{"--timeout=30s"}})
	_, pv := e.NewClaim(t, "data", "1Gi")
	vol := pv.Spec.CSI.VolumeHandle
	if e.Driver.IsMock() {
		// The driver is still working when the apiserver goes away, so the resizer gets the
		// answer while (or after) it is down and must still record it.
		e.Driver.SetFaults(t, mockFaults(framework.Fault{Method: "ControllerExpandVolume", VolumeID: vol, Delay: restartCallDelay, Times: 1}))
	}
	var stopped time.Time
	if e.controller {
		rv := e.PVC(t, "data").ResourceVersion
		e.SetRequest(t, "data", "3Gi")
		waitThrough(t, e, "data", rv, v1.PersistentVolumeClaimControllerResizeInProgress)
		e.StopAPIServer(t)
		stopped = time.Now()
	} else {
		// A node-only driver gets no call: the resizer's part is its API writes (PV capacity,
		// PVC status) and has no in-progress state to stop the apiserver in. So the resizer is
		// frozen before the request goes up and thawed once the apiserver is down: it works
		// on the request with the apiserver gone, and must finish once it is back.
		if err := e.Resizer.Freeze(); err != nil {
			t.Fatal(err)
		}
		e.SetRequest(t, "data", "3Gi")
		e.StopAPIServer(t)
		stopped = time.Now()
		if err := e.Resizer.Thaw(); err != nil {
			t.Fatal(err)
		}
	}
	e.StartAPIServer(t)
	waitExpanded(t, e, "data", "3Gi")

	if !e.Driver.IsMock() {
		if e.controller {
			t.Logf("external driver: no delay can be injected, so the restart may have come after the driver answered")
		}
		return
	}
	calls := e.Driver.VolumeCalls(t, vol)
	if len(calls) == 0 {
		t.Fatalf("no ControllerExpandVolume call for %s in the mock's log", vol)
	}
	first := calls[0]
	if end := first.End(); !first.Time.Before(stopped) || !end.After(stopped) {
		t.Errorf("the restart did not overlap the expansion: the driver call ran %s to %s, the apiserver was down at %s",
			first.Time.Format(time.StampMicro), end.Format(time.StampMicro), stopped.Format(time.StampMicro))
	}
}

// waitThrough watches the PVC from resourceVersion rv until it is in state. Watching, not
// polling: with a real driver, which cannot be slowed down, a state may last milliseconds.
func waitThrough(t *testing.T, e *env, name, rv string, state v1.ClaimResourceStatus) *v1.PersistentVolumeClaim {
	t.Helper()
	ctx, cancel := context.WithTimeout(e.Ctx, resizeTimeout)
	defer cancel()
	w, err := e.Client.CoreV1().PersistentVolumeClaims(e.Namespace).Watch(ctx, metav1.ListOptions{
		FieldSelector: "metadata.name=" + name, ResourceVersion: rv,
	})
	if err != nil {
		t.Fatalf("watch PVC %s: %v", name, err)
	}
	defer w.Stop()
	last := "no update"
	for ev := range w.ResultChan() {
		if ev.Type == watch.Error {
			t.Fatalf("watch PVC %s: %v", name, ev.Object)
		}
		if pvc, ok := ev.Object.(*v1.PersistentVolumeClaim); ok {
			if scenario.State(pvc) == state {
				return pvc
			}
			last = scenario.Describe(pvc)
		}
	}
	t.Fatalf("PVC %s not in %s within %v; last seen: %s", name, state, resizeTimeout, last)
	return nil
}

// Leader election settings of TestLeaderElectionFailover.
const (
	leaseDuration = 6 * time.Second
	renewDeadline = 4 * time.Second
	retryPeriod   = time.Second
	// takeoverAllowance is what client-go's leader election may add to leaseDuration +
	// retryPeriod. The follower polls the Lease every retryPeriod stretched by a random jitter
	// of up to 1.2 times more (leaderelection.JitterFactor): the poll that sees the killed
	// leader's last renewal (the start of the follower's lease clock) can come up to 2.2
	// periods after it, and the poll that takes the expired lease up to 2.2 periods after
	// expiry. That is 4.4 periods where the budget counts 1, plus a second for the API round
	// trips of those polls on a loaded 2-core machine.
	takeoverAllowance = retryPeriod*34/10 + time.Second
)

// Scenario 8: two resizers with leader election; only the leader calls the driver, and when
// it is killed with work pending the other takes over within the lease duration and finishes
// that work.
func TestLeaderElectionFailover(t *testing.T) {
	le := []string{"--leader-election", "--leader-election-lease-duration=" + leaseDuration.String(),
		"--leader-election-renew-deadline=" + renewDeadline.String(), "--leader-election-retry-period=" + retryPeriod.String()}
	e := start(t, scenario.Options{NoResizer: true, ResizerArgs: le})
	a, b := e.StartResizer(t), e.StartResizer(t)

	e.NewClaim(t, "first", "1Gi")
	e.SetRequest(t, "first", "2Gi")
	waitExpanded(t, e, "first", "2Gi")

	// Who did it? Each process counts its own driver calls (its status writes for a node-only
	// driver, which gets no call).
	callsA, callsB := resizerWork(t, e, a), resizerWork(t, e, b)
	if (callsA == 0) == (callsB == 0) {
		t.Fatalf("exactly one resizer should work on the claim: a=%v b=%v (%s)", callsA, callsB, workUnit(e))
	}
	leader, follower := a, b
	if callsB > 0 {
		leader, follower = b, a
	}
	lease := resizerLease(t, e, "")
	holder := *lease.Spec.HolderIdentity

	// Pending work: the second claim's expansion is asked for before the leader dies and is
	// not finished when it does.
	_, pv := e.NewClaim(t, "second", "1Gi")
	vol := pv.Spec.CSI.VolumeHandle
	if e.Driver.IsMock() {
		// The mock holds the leader's call past the kill: the leader dies mid-call, with the
		// PVC in ControllerResizeInProgress, and the call completes behind it in the driver,
		// as a real backend's would.
		e.Driver.SetFaults(t, mockFaults(framework.Fault{Method: "ControllerExpandVolume", VolumeID: vol, Delay: 10 * time.Second, Times: 1}))
		e.SetRequest(t, "second", "2Gi")
		e.WaitClaim(t, "second", resizeTimeout, scenario.InState(v1.PersistentVolumeClaimControllerResizeInProgress))
		// The state is written just before the call: wait for the leader's word that it is
		// calling, so the kill hits the call and not the moment before it.
		framework.Eventually(t, 30*time.Second, func() (bool, string) {
			return scenario.LoggedExpandCall(leader, vol), "the leader has not logged its ControllerExpandVolume call for " + vol
		})
	} else {
		// A real driver cannot be slowed down, so the leader is frozen before the request goes
		// up: it cannot start the expansion, let alone finish it, before it dies.
		if err := leader.Freeze(); err != nil {
			t.Fatal(err)
		}
		e.SetRequest(t, "second", "2Gi")
	}
	killed := time.Now()
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	if pvc := e.PVC(t, "second"); scenario.Is(pvc.Status.Capacity[v1.ResourceStorage], "2Gi") {
		t.Fatalf("the expansion finished before the leader died, nothing was left pending: %s", scenario.Describe(pvc))
	}

	// The takeover, measured by the Lease's acquireTime (written by the new leader), so that
	// the test's polling lag does not count; the polling itself gets some slack for the same
	// reason.
	budget := leaseDuration + retryPeriod + takeoverAllowance
	var took time.Duration
	var acquired time.Time // from then on the follower may call the driver
	framework.Eventually(t, budget+10*time.Second, func() (bool, string) {
		l := resizerLease(t, e, lease.Name)
		h := *l.Spec.HolderIdentity
		if h == holder {
			return false, fmt.Sprintf("lease %s still held by the killed leader %s", l.Name, h)
		}
		acquired = time.Now()
		if l.Spec.AcquireTime != nil {
			acquired = l.Spec.AcquireTime.Time
		}
		took = acquired.Sub(killed)
		t.Logf("lease %s passed from %s to %s %s after the SIGKILL", l.Name, holder, h, took.Round(time.Millisecond))
		return true, ""
	})
	if took < 0 || took > budget {
		t.Errorf("the lease changed hands %s after the leader's SIGKILL, want within %s (lease %s + retry %s + %s allowance)",
			took.Round(time.Millisecond), budget, leaseDuration, retryPeriod, takeoverAllowance)
	}

	waitExpanded(t, e, "second", "2Gi")
	if resizerWork(t, e, follower) == 0 {
		t.Errorf("the surviving resizer did no work on the claim (%s)", workUnit(e))
	}
	if e.Driver.IsMock() {
		// The killed leader really was mid-call: its call reached the driver before the
		// follower took over and was answered after the kill (logged once the delay is over).
		e.Driver.WaitCallAcross(t, vol, acquired, killed, "the SIGKILL", 30*time.Second)
	}
}

// resizerLease returns the resizers' leader election Lease (external-resizer-<driver> in the
// env's namespace) once it has a holder; name "" finds it.
func resizerLease(t *testing.T, e *env, name string) *coordinationv1.Lease {
	t.Helper()
	var lease *coordinationv1.Lease
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		list, err := e.Client.CoordinationV1().Leases(e.Namespace).List(e.Ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var found []string
		for i := range list.Items {
			l := &list.Items[i]
			if (name == "" && strings.HasPrefix(l.Name, "external-resizer-")) || l.Name == name {
				lease = l
				found = append(found, l.Name)
			}
		}
		if len(found) != 1 {
			return false, fmt.Sprintf("leases %v in %s, want one external-resizer-* lease", found, e.Namespace)
		}
		if h := lease.Spec.HolderIdentity; h == nil || *h == "" {
			return false, "lease " + lease.Name + " has no holder"
		}
		return true, ""
	})
	return lease
}

func expandCalls(t *testing.T, p *framework.Process) float64 {
	t.Helper()
	return scenario.MetricValue(scenario.Scrape(t, p), "csi_sidecar_operations_seconds_count", "ControllerExpandVolume")
}

// resizerWork is what a resizer process has done on claims: its ControllerExpandVolume calls,
// or, for a node-only driver (no call to count), the resize states it wrote.
func resizerWork(t *testing.T, e *env, p *framework.Process) float64 {
	t.Helper()
	if e.controller {
		return expandCalls(t, p)
	}
	return scenario.MetricValue(scenario.Scrape(t, p), "csi_resizer_state_transitions_total")
}

func workUnit(e *env) string {
	if e.controller {
		return "csi_sidecar_operations_seconds_count of ControllerExpandVolume"
	}
	return "csi_resizer_state_transitions_total, the driver being node-only"
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
