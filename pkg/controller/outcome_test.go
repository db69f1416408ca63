package controller_test

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	csispec "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"

	"github.com/csi-resizer/csi-resizer/pkg/controller"
	"github.com/csi-resizer/csi-resizer/pkg/internal/csitest"
	"github.com/csi-resizer/csi-resizer/pkg/internal/kubetest"
)

// nodeExpansion is the driver's answer when the node has a part to do.
var nodeExpansion = csitest.Response{Code: codes.OK, Grant: true, NodeExpansionRequired: true}

// finishNode plays the kubelet finishing the node expansion of a PVC in NodeResizePending: one
// status write that sets status.capacity to the allocated size and clears the resize state and
// FileSystemResizePending.
func (e *env) finishNode(name string) {
	e.t.Helper()
	err := e.kube.Mutate(kubetest.PVCs, ns, name, func(o runtime.Object) {
		pvc := o.(*v1.PersistentVolumeClaim)
		pvc.Status.Capacity[v1.ResourceStorage] = pvc.Status.AllocatedResources[v1.ResourceStorage]
		delete(pvc.Status.AllocatedResourceStatuses, v1.ResourceStorage)
		if len(pvc.Status.AllocatedResourceStatuses) == 0 {
			pvc.Status.AllocatedResourceStatuses = nil
		}
		pvc.Status.Conditions = without(pvc.Status.Conditions, v1.PersistentVolumeClaimFileSystemResizePending)
	})
	if err != nil {
		e.t.Fatalf("playing the kubelet for %s: %v", name, err)
	}
}

// failNode plays the kubelet giving up on the node expansion of a PVC: NodeResizeInfeasible and
// a NodeResizeError condition.
func (e *env) failNode(name string) {
	e.t.Helper()
	now := metav1.Now()
	err := e.kube.Mutate(kubetest.PVCs, ns, name, func(o runtime.Object) {
		pvc := o.(*v1.PersistentVolumeClaim)
		pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage] = v1.PersistentVolumeClaimNodeResizeInfeasible
		pvc.Status.Conditions = append(without(pvc.Status.Conditions, v1.PersistentVolumeClaimFileSystemResizePending),
			v1.PersistentVolumeClaimCondition{Type: v1.PersistentVolumeClaimNodeResizeError, Status: v1.ConditionTrue,
				Reason: "NodeFailed", Message: "resize2fs: bad superblock", LastProbeTime: now, LastTransitionTime: now})
	})
	if err != nil {
		e.t.Fatalf("playing the kubelet for %s: %v", name, err)
	}
}

func without(conds []v1.PersistentVolumeClaimCondition, t v1.PersistentVolumeClaimConditionType) []v1.PersistentVolumeClaimCondition {
	var out []v1.PersistentVolumeClaimCondition
	for _, c := range conds {
		if c.Type != t {
			out = append(out, c)
		}
	}
	return out
}

// outcomes are the counters and histogram counts that record how expansions ended.
type outcomes struct {
	recoverySuccess, recoveryFailure, durationSuccess, durationFailure float64
}

func (e *env) outcomes() outcomes {
	e.t.Helper()
	return outcomes{
		recoverySuccess: e.metric("csi_resizer_volume_recovery_total", map[string]string{"state": "success"}),
		recoveryFailure: e.metric("csi_resizer_volume_recovery_total", map[string]string{"state": "failure"}),
		durationSuccess: e.metric("csi_resizer_expansion_duration_seconds", map[string]string{"result": "success"}),
		durationFailure: e.metric("csi_resizer_expansion_duration_seconds", map[string]string{"result": "failure"}),
	}
}

// TestFailedRecoveryCountedOnce: a recovery whose lower request is infeasible too is counted as
// one failed recovery, and the slow retries of that request add nothing: they lower nothing,
// so they are not recoveries of their own.
func TestFailedRecoveryCountedOnce(t *testing.T) {
	t.Parallel()
	pvc, pv := claim("data", "10Gi", "1Gi")
	infeasible := csitest.Fail(codes.OutOfRange, "at most 4Gi")
	e := start(t, setup{objects: objects(pvc, pv), defaultResponse: &infeasible, retryStart: 20 * time.Millisecond, retryMax: 300 * time.Millisecond})
	e.waitForClaim("data", "infeasible at 10Gi", func(p *v1.PersistentVolumeClaim) bool {
		return state(p) == v1.PersistentVolumeClaimControllerResizeInfeasible && allocated(p) == "10Gi"
	})
	e.setRequest("data", "5Gi")
	e.waitForClaim("data", "infeasible at 5Gi", func(p *v1.PersistentVolumeClaim) bool {
		return state(p) == v1.PersistentVolumeClaimControllerResizeInfeasible && allocated(p) == "5Gi"
	})
	e.waitFor("the failed recovery to be counted", func() (bool, string) {
		o := e.outcomes()
		return o.recoveryFailure == 1, "outcomes so far: " + o.String()
	})
	// Three slow retries of 5Gi. Each call starts only after the previous attempt's sync has
	// finished (one key is never processed twice at once), so whatever the first two retries
	// counted is counted by the time the third call arrives.
	lowered := len(e.csi.ExpandCalls())
	calls := e.csi.WaitForExpandCalls(t, lowered+3, waitLimit)
	for _, c := range calls[lowered-1:] {
		if b := c.Request.GetCapacityRange().GetRequiredBytes(); b != bytesOf("5Gi") {
			t.Errorf("a call after the request was lowered asked for %d bytes, want 5Gi (%d)", b, bytesOf("5Gi"))
		}
	}
	want := outcomes{recoveryFailure: 1, durationFailure: 1}
	if o := e.outcomes(); o != want {
		t.Errorf("after %d slow retries: %s, want %s", len(calls)-lowered, o, want)
	}
	if n := e.events.Count(controller.EventResizeRecovered); n != 0 {
		t.Errorf("%d %s events for a recovery that failed", n, controller.EventResizeRecovered)
	}
}

// TestRecoveryFinalErrorThenSuccess: a recovery whose first attempt fails with a final error
// that is not infeasible (Internal) is not over: the retry, which no longer lowers anything
// (alloc is the recovery's target already), succeeds, and that is one successful recovery,
// with its VolumeResizeRecovered event, and no failed one.
func TestRecoveryFinalErrorThenSuccess(t *testing.T) {
	t.Parallel()
	pvc, pv := claim("data", "10Gi", "1Gi")
	e := start(t, setup{
		objects:    objects(pvc, pv),
		responses:  []csitest.Response{csitest.Fail(codes.OutOfRange, "at most 5Gi"), csitest.Fail(codes.Internal, "backend hiccup")},
		retryStart: 50 * time.Millisecond,
		retryMax:   time.Minute,
	})
	e.waitForClaim("data", "ControllerResizeInfeasible", func(p *v1.PersistentVolumeClaim) bool {
		return state(p) == v1.PersistentVolumeClaimControllerResizeInfeasible
	})
	e.setRequest("data", "3Gi")
	got := e.waitForClaim("data", "recovered at 3Gi", func(p *v1.PersistentVolumeClaim) bool {
		return capacityOf(p.Status.Capacity) == "3Gi"
	})
	e.waitForEvent(controller.EventResizeRecovered)
	e.settle(claimRef("data"), volumeRef("pv-data"))

	calls := e.csi.ExpandCalls()
	if len(calls) != 3 {
		t.Fatalf("ControllerExpandVolume calls = %d, want 3 (infeasible, Internal, success)", len(calls))
	}
	if calls[1].Response.Code != codes.Internal {
		t.Fatalf("the recovery's first call was answered %s, want Internal", calls[1].Response.Code)
	}
	for _, c := range calls[1:] {
		if b := c.Request.GetCapacityRange().GetRequiredBytes(); b != bytesOf("3Gi") {
			t.Errorf("a recovery call asked for %d bytes, want 3Gi (%d)", b, bytesOf("3Gi"))
		}
	}
	if state(got) != "" || allocated(got) != "3Gi" {
		t.Errorf("PVC: %s; want done at 3Gi", describe(got))
	}
	want := outcomes{recoverySuccess: 1, durationSuccess: 1, durationFailure: 1}
	if o := e.outcomes(); o != want {
		t.Errorf("%s, want %s", o, want)
	}
	if n := e.events.Count(controller.EventResizeRecovered); n != 1 {
		t.Errorf("%d %s events, want 1", n, controller.EventResizeRecovered)
	}
	if n := e.events.Count(controller.EventResizeSuccessful); n != 0 {
		t.Errorf("%d %s events for a recovery, want 0", n, controller.EventResizeSuccessful)
	}
}

// TestRecoveryWithNodeExpansion: when the driver leaves the node a part, a recovery is not over
// when the controller part succeeds. Its outcome, the duration and VolumeResizeRecovered come
// when the resizer sees the kubelet finish; NodeResizeInfeasible makes it a failed recovery.
func TestRecoveryWithNodeExpansion(t *testing.T) {
	for _, tc := range []struct {
		name       string
		nodeWorks  bool
		want       outcomes
		recovered  int
		finalState v1.ClaimResourceStatus
	}{
		// durationFailure 1 in both: the first, infeasible request ended the timing of a
		// failure; the success of the same expansion (the recovery) is observed as well.
		{name: "node finishes", nodeWorks: true, want: outcomes{recoverySuccess: 1, durationSuccess: 1, durationFailure: 1}, recovered: 1},
		{name: "node fails", want: outcomes{recoveryFailure: 1, durationFailure: 1}, finalState: v1.PersistentVolumeClaimNodeResizeInfeasible},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pvc, pv := claim("data", "10Gi", "1Gi")
			e := start(t, setup{
				objects:         objects(pvc, pv),
				responses:       []csitest.Response{csitest.Fail(codes.OutOfRange, "at most 5Gi")},
				defaultResponse: &nodeExpansion,
				retryMax:        time.Minute,
			})
			e.waitForClaim("data", "ControllerResizeInfeasible", func(p *v1.PersistentVolumeClaim) bool {
				return state(p) == v1.PersistentVolumeClaimControllerResizeInfeasible
			})
			e.setRequest("data", "3Gi")
			e.waitForClaim("data", "NodeResizePending at 3Gi", func(p *v1.PersistentVolumeClaim) bool {
				return state(p) == v1.PersistentVolumeClaimNodeResizePending && allocated(p) == "3Gi"
			})
			e.waitForEvent(controller.EventFileSystemRequired)
			e.settle(claimRef("data"), volumeRef("pv-data"))
			// The controller part is done and the resizer idle: nothing about the end yet.
			if o, want := e.outcomes(), (outcomes{durationFailure: 1}); o != want {
				t.Errorf("before the node finished: %s, want %s", o, want)
			}
			if n := e.events.Count(controller.EventResizeRecovered); n != 0 {
				t.Errorf("%s emitted before the node finished", controller.EventResizeRecovered)
			}

			if tc.nodeWorks {
				e.finishNode("data")
				ev := e.waitForEvent(controller.EventResizeRecovered)
				if ev.Type != v1.EventTypeNormal || !strings.Contains(ev.Message, "1Gi") || !strings.Contains(ev.Message, "3Gi") {
					t.Errorf("event = %v, want Normal naming 1Gi and 3Gi", ev)
				}
			} else {
				e.failNode("data")
				e.waitFor("the failed recovery to be counted", func() (bool, string) {
					o := e.outcomes()
					return o.recoveryFailure == 1, "outcomes so far: " + o.String()
				})
			}
			e.settle(claimRef("data"), volumeRef("pv-data"))
			if o := e.outcomes(); o != tc.want {
				t.Errorf("%s, want %s", o, tc.want)
			}
			if n := e.events.Count(controller.EventResizeRecovered); n != tc.recovered {
				t.Errorf("%d %s events, want %d", n, controller.EventResizeRecovered, tc.recovered)
			}
			if n := e.events.Count(controller.EventFileSystemRequired); n != 1 {
				t.Errorf("%d %s events, want 1 (at the controller step)", n, controller.EventFileSystemRequired)
			}
			if n := e.events.Count(controller.EventResizeSuccessful); n != 0 {
				t.Errorf("%d %s events for a recovery, want 0", n, controller.EventResizeSuccessful)
			}
			if s := state(e.pvc("data")); s != tc.finalState {
				t.Errorf("state = %q, want %q", s, tc.finalState)
			}
			if n := len(e.csi.ExpandCalls()); n != 2 {
				t.Errorf("ControllerExpandVolume calls = %d, want 2", n)
			}
		})
	}
}

// TestNodeExpansionDurationWhenNodeFinishes: an ordinary expansion with a node part is timed
// until the resizer sees the kubelet finish, not until the controller part is done; seeing that
// costs no PVC write and no event, only upstream's removal of the PV's pre-resize-capacity
// annotation (AnnotateFsResize).
func TestNodeExpansionDurationWhenNodeFinishes(t *testing.T) {
	t.Parallel()
	pvc, pv := claim("data", "2Gi", "1Gi")
	e := start(t, setup{objects: objects(pvc, pv), defaultResponse: &nodeExpansion})
	e.waitForClaim("data", "NodeResizePending", func(p *v1.PersistentVolumeClaim) bool {
		return state(p) == v1.PersistentVolumeClaimNodeResizePending
	})
	e.settle(claimRef("data"), volumeRef("pv-data"))
	if o := e.outcomes(); o != (outcomes{}) {
		t.Errorf("before the node finished: %s, want nothing observed", o)
	}
	e.finishNode("data")
	e.waitFor("the duration to be observed", func() (bool, string) {
		o := e.outcomes()
		return o.durationSuccess == 1, "outcomes so far: " + o.String()
	})
	e.settle(claimRef("data"), volumeRef("pv-data"))
	if o, want := e.outcomes(), (outcomes{durationSuccess: 1}); o != want {
		t.Errorf("%s, want %s", o, want)
	}
	if got := e.events.Reasons(); len(got) != 1 || got[0] != controller.EventFileSystemRequired {
		t.Errorf("events = %v, want only %s", got, controller.EventFileSystemRequired)
	}
	writes := e.kube.Writes()
	if n := len(writes); n != 4 {
		t.Fatalf("API writes = %d, want 4", n)
	}
	if last := writes[3]; last.GetResource().Resource != "persistentvolumes" || !strings.Contains(string(last.(clienttesting.PatchAction).GetPatch()), `"volume.alpha.kubernetes.io/pre-resize-capacity":null`) {
		t.Errorf("last write = %s %s %s, want the PV patch removing pre-resize-capacity", last.GetVerb(), last.GetResource().Resource, last.(clienttesting.PatchAction).GetPatch())
	}
}

// TestStateGaugesAfterRestart: csi_resizer_volumes and csi_resizer_volume_infeasible of a
// restarted resizer (new process: new informers, new registry, no memory) equal what the one
// before the restart exported, once the new one's cache has synced.
func TestStateGaugesAfterRestart(t *testing.T) {
	t.Parallel()
	stuck, stuckPV := claim("stuck", "10Gi", "1Gi")
	idle, idlePV := claim("idle", "1Gi", "1Gi")
	// The driver answers in call order, and the PVCs that need a call are added one at a time.
	e := start(t, setup{
		objects:         objects(stuck, stuckPV, idle, idlePV),
		responses:       []csitest.Response{csitest.Fail(codes.OutOfRange, "at most 5Gi"), nodeExpansion},
		defaultResponse: &csitest.Response{Code: codes.Internal, Message: "backend down"},
		retryStart:      time.Hour,
		retryMax:        time.Hour,
	})
	e.waitForClaim("stuck", "ControllerResizeInfeasible", func(p *v1.PersistentVolumeClaim) bool {
		return state(p) == v1.PersistentVolumeClaimControllerResizeInfeasible
	})
	e.addClaim(claim("node", "2Gi", "1Gi"))
	e.waitForClaim("node", "NodeResizePending", func(p *v1.PersistentVolumeClaim) bool {
		return state(p) == v1.PersistentVolumeClaimNodeResizePending
	})
	e.addClaim(claim("busy", "3Gi", "1Gi"))
	e.waitForClaim("busy", "ControllerResizeInProgress after Internal", func(p *v1.PersistentVolumeClaim) bool {
		c := condition(p, v1.PersistentVolumeClaimControllerResizeError)
		return state(p) == v1.PersistentVolumeClaimControllerResizeInProgress && c != nil && c.Reason == "Internal"
	})
	refs := []ref{claimRef("stuck"), volumeRef("pv-stuck"), claimRef("idle"), volumeRef("pv-idle"),
		claimRef("node"), volumeRef("pv-node"), claimRef("busy"), volumeRef("pv-busy")}
	e.settle(refs...)

	names := []string{"csi_resizer_volumes", "csi_resizer_volume_infeasible"}
	before := e.gauges(names...)
	for _, s := range []struct {
		labels map[string]string
		want   float64
	}{
		{map[string]string{"state": "none"}, 1},
		{map[string]string{"state": "ControllerResizeInfeasible"}, 1},
		{map[string]string{"state": "ControllerResizeInProgress"}, 1},
		{map[string]string{"state": "NodeResizePending"}, 1},
		{map[string]string{"state": "NodeResizeInProgress"}, 0},
		{map[string]string{"state": "NodeResizeInfeasible"}, 0},
	} {
		if v := e.metric("csi_resizer_volumes", s.labels); v != s.want {
			t.Errorf("before the restart: csi_resizer_volumes%v = %v, want %v", s.labels, v, s.want)
		}
	}
	if v := e.metric("csi_resizer_volume_infeasible", map[string]string{"namespace": ns, "persistentvolumeclaim": "stuck"}); v != 1 {
		t.Errorf("before the restart: csi_resizer_volume_infeasible{stuck} = %v, want 1", v)
	}
	if len(before) != 7 {
		t.Fatalf("before the restart: %d series, want 6 states and 1 infeasible PVC: %v", len(before), before)
	}

	e2 := e.restart()
	// The new resizer retries "busy" (its last error was final) and is answered Internal
	// again, which keeps its state; "stuck" waits for its slow retry an hour away.
	e2.settle(refs...)
	if after := e2.gauges(names...); !maps.Equal(after, before) {
		t.Errorf("gauges after the restart differ:\n before %v\n after  %v", before, after)
	}
}

// addClaim stores a new PVC and its PV, as the user and the provisioner would.
func (e *env) addClaim(pvc *v1.PersistentVolumeClaim, pv *v1.PersistentVolume) {
	e.t.Helper()
	for _, obj := range []runtime.Object{pv, pvc} {
		if err := e.kube.Add(obj); err != nil {
			e.t.Fatal(err)
		}
	}
}

// TestStateGaugesAbsentUntilSynced: until the informer cache has synced, the state collector
// exports neither gauge (a partial cache would export infeasible PVCs as gone and every state
// as 0); once synced, the first scrape is complete.
func TestStateGaugesAbsentUntilSynced(t *testing.T) {
	t.Parallel()
	stuck, stuckPV := claim("stuck", "10Gi", "1Gi")
	failedAt := metav1.Now()
	stuck.Status.AllocatedResources = v1.ResourceList{v1.ResourceStorage: stuck.Spec.Resources.Requests[v1.ResourceStorage]}
	stuck.Status.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{v1.ResourceStorage: v1.PersistentVolumeClaimControllerResizeInfeasible}
	stuck.Status.Conditions = []v1.PersistentVolumeClaimCondition{{Type: v1.PersistentVolumeClaimControllerResizeError, Status: v1.ConditionTrue,
		Reason: "OutOfRange", Message: "at most 5Gi", LastProbeTime: failedAt, LastTransitionTime: failedAt}}
	idle, idlePV := claim("idle", "1Gi", "1Gi")

	// The PVC informer's list blocks until released. (The fake runs reactors under its lock,
	// so the PV informer's list waits too; the bound keeps a failed test from hanging.)
	listing, release := make(chan struct{}), make(chan struct{})
	var listed bool
	holdList := kubetest.WithReactor("list", "persistentvolumeclaims", func(clienttesting.Action) (bool, runtime.Object, error) {
		if !listed {
			listed = true // under the fake's lock
			close(listing)
		}
		select {
		case <-release:
		case <-time.After(waitLimit):
		}
		return false, nil, nil
	})
	released := false
	t.Cleanup(func() {
		if !released {
			close(release)
		}
	})
	e := start(t, setup{objects: objects(stuck, stuckPV, idle, idlePV), kubeOptions: []kubetest.Option{holdList}, retryMax: time.Hour})

	<-listing
	names := []string{"csi_resizer_volumes", "csi_resizer_volume_infeasible"}
	if got := e.gauges(names...); len(got) != 0 {
		t.Errorf("before the cache synced the collector exported %v, want nothing", got)
	}
	if got := e.ctrl.ClaimStates(); got != nil {
		t.Errorf("ClaimStates() before the cache synced = %v, want nil", got)
	}

	close(release)
	released = true
	var first map[string]float64
	e.waitFor("the gauges to appear", func() (bool, string) {
		first = e.gauges(names...)
		return len(first) > 0, "nothing exported yet"
	})
	if len(first) != 7 {
		t.Errorf("first scrape after the sync: %d series, want 6 states and 1 infeasible PVC: %v", len(first), first)
	}
	if v := e.metric("csi_resizer_volume_infeasible", map[string]string{"namespace": ns, "persistentvolumeclaim": "stuck"}); v != 1 {
		t.Errorf("csi_resizer_volume_infeasible{stuck} = %v, want 1", v)
	}
	if v := e.metric("csi_resizer_volumes", map[string]string{"state": "none"}); v != 1 {
		t.Errorf("csi_resizer_volumes{state=none} = %v, want 1", v)
	}
	// Until the workers run (Run polls for the sync on its own schedule) and have looked at
	// the infeasible PVC, so that the test ends on a started controller.
	e.settle(claimRef("stuck"), volumeRef("pv-stuck"), claimRef("idle"), volumeRef("pv-idle"))
}

// TestOnlineDriverNeverStartsPodInformer: with --handle-volume-inuse-error (upstream's default,
// true) and a driver that expands online, a resize never needs the in-use check, so the Pod
// informer, the most expensive thing the sidecar could watch, is never started: no pod list or
// watch reaches the API.
func TestOnlineDriverNeverStartsPodInformer(t *testing.T) {
	t.Parallel()
	pvc, pv := claim("data", "2Gi", "1Gi")
	e := start(t, setup{
		driver: csitest.Options{ControllerService: true, ControllerExpand: true,
			PluginExpansion: csispec.PluginCapability_VolumeExpansion_ONLINE},
		// A pod uses the volume: an online driver expands it anyway.
		objects:     objects(pvc, pv, pod("app", "data", v1.PodRunning)),
		handleInUse: true,
	})
	if e.driver.OfflineOnly {
		t.Fatalf("handshake: %+v, want a driver that expands online", e.driver)
	}
	e.waitForClaim("data", "resized", func(p *v1.PersistentVolumeClaim) bool {
		return capacityOf(p.Status.Capacity) == "2Gi"
	})
	e.settle(claimRef("data"), volumeRef("pv-data"))
	for k, n := range e.kube.Verbs() {
		switch k {
		case "list persistentvolumeclaims", "list persistentvolumes", "watch persistentvolumeclaims", "watch persistentvolumes",
			"patch persistentvolumeclaims/status", "patch persistentvolumes":
		default:
			t.Errorf("unexpected API request %s (%d times)", k, n)
		}
	}
	if got := e.events.Reasons(); len(got) != 1 || got[0] != controller.EventResizeSuccessful {
		t.Errorf("events = %v, want only %s", got, controller.EventResizeSuccessful)
	}
}

func (o outcomes) String() string {
	return fmt.Sprintf("recovery{success=%g,failure=%g} duration{success=%g,failure=%g}",
		o.recoverySuccess, o.recoveryFailure, o.durationSuccess, o.durationFailure)
}
