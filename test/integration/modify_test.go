//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// VolumeAttributesClass modification (KEP-3751, docs/design.md §2.11) on the real apiserver, with
// the csi-resizer binary and the mock driver started with --modify-volume.

const modifyTimeout = time.Minute

// The classes of these tests. "bad" names a tier the mock refuses (infeasibleFault), so it is
// the infeasible class.
var (
	silver = map[string]string{"tier": "silver", "iops": "1000"}
	gold   = map[string]string{"tier": "gold", "iops": "3000"}
	bronze = map[string]string{"tier": "bronze", "iops": "500"}
	bad    = map[string]string{"tier": "platinum", "iops": "99999"}
	late   = map[string]string{"tier": "late", "iops": "2000"}
)

// infeasibleFault makes every ControllerModifyVolume call for class "bad" fail with
// INVALID_ARGUMENT, CSI's answer to mutable parameters the volume cannot take.
var infeasibleFault = framework.Fault{Method: "ControllerModifyVolume", Code: codes.InvalidArgument, Message: "tier platinum is not offered", MutableParameter: "tier=platinum"}

// TestModify runs the modification scenarios on one control plane, driver and resizer, each on
// its own PVC, in order; the metrics are checked after them, then the resizer is killed and
// restarted; the PVC left Infeasible since the start is rolled back, and the one left Pending
// since the start gets its class. --retry-interval-max is
// 10 minutes: an infeasible class is retried only after that (rule 16), by this resizer or the
// restarted one, so within this test a second call for it is a bug; the start interval is small
// so that every other retry is quick.
func TestModify(t *testing.T) {
	e := startMock(t, scenario.Options{
		Mock:        framework.MockDriverOptions{ModifyVolume: true, Faults: []framework.Fault{infeasibleFault}},
		ResizerArgs: []string{"--retry-interval-start=200ms", "--retry-interval-max=10m", "--timeout=60s"},
	})
	for name, params := range map[string]map[string]string{"silver": silver, "gold": gold, "bronze": bronze, "bad": bad} {
		e.CreateClass(t, name, params)
	}
	if !e.Resizer.LogContains("VolumeAttributesClass modification on") {
		t.Fatalf("the resizer did not turn modification on:\n%s", e.Resizer.LogTail(30))
	}
	scenario.ApplyShippedSecretsRBAC(t, e.Cluster, e.Namespace)

	// The rollback scenario's PVC goes infeasible first and stays so while the others run: the
	// time they take is the window in which an infeasible class must not be called again.
	_, rbPV := e.NewClaimWithClass(t, "rollback", "1Gi", "silver")
	e.SetClass(t, "rollback", "bad")
	e.WaitClaim(t, "rollback", modifyTimeout, infeasible("bad"))
	infeasibleSince := time.Now()
	// And this one waits, Pending, for a class that is created only after the restart.
	e.NewClaimWithClass(t, "waiting", "1Gi", "silver")
	e.SetClass(t, "waiting", "later")
	e.WaitClaim(t, "waiting", modifyTimeout, scenario.InModifyStatus(v1.PersistentVolumeClaimModifyVolumePending, "later"))
	waiting := e.WatchClaim(t, "waiting", "")

	var successHistory *scenario.ClaimHistory
	var successPV *scenario.History[*v1.PersistentVolume]
	t.Run("success", func(t *testing.T) { successHistory, successPV = testModifySuccess(t, e) })
	t.Run("infeasible then a new class", func(t *testing.T) { testModifyInfeasibleThenNewClass(t, e) })
	t.Run("class created after the PVC points at it", func(t *testing.T) { testModifyPendingClass(t, e) })
	t.Run("transient error keeps the target", func(t *testing.T) { testModifyTransientKeepsTarget(t, e) })
	t.Run("final error follows the spec", func(t *testing.T) { testModifyFinalFollowsSpec(t, e) })
	t.Run("class changed during the call", func(t *testing.T) { testModifyChangedDuringCall(t, e) })
	t.Run("expand and modify together", func(t *testing.T) { testExpandAndModify(t, e) })
	t.Run("metrics", func(t *testing.T) { testModifyMetrics(t, e, successHistory, successPV) })
	t.Run("controller-modify secret", func(t *testing.T) { testModifySecret(t, e) })
	// The resizer restarts here: the rollback PVC stays Infeasible across it.
	t.Run("resizer killed during the call", func(t *testing.T) { testModifyKilledDuringCall(t, e) })
	t.Run("rollback", func(t *testing.T) { testModifyRollback(t, e, rbPV.Spec.CSI.VolumeHandle, infeasibleSince) })
	t.Run("pending across the restart", func(t *testing.T) { testModifyPendingAcrossRestart(t, e, waiting) })
	t.Run("rollback to no class", func(t *testing.T) { testModifyRollbackToNoClass(t, e) })
}

// infeasible is the state an INVALID_ARGUMENT answer for class leaves: modifyVolumeStatus
// Infeasible for it, ModifyingVolume still set, and ModifyVolumeError with the code.
func infeasible(class string) func(*v1.PersistentVolumeClaim) (bool, string) {
	return func(pvc *v1.PersistentVolumeClaim) (bool, string) {
		s, target := scenario.ModifyStatus(pvc)
		errCond := scenario.Condition(pvc, v1.PersistentVolumeClaimVolumeModifyVolumeError)
		return s == v1.PersistentVolumeClaimModifyVolumeInfeasible && target == class &&
				scenario.Condition(pvc, v1.PersistentVolumeClaimVolumeModifyingVolume) != nil &&
				errCond != nil && errCond.Reason == "InvalidArgument",
			"want Infeasible for " + class + " with ModifyingVolume and an InvalidArgument ModifyVolumeError"
	}
}

// describeModifyCalls renders ControllerModifyVolume calls for a failure message.
func describeModifyCalls(calls []framework.Call) string {
	var out []string
	for _, c := range calls {
		out = append(out, fmt.Sprintf("%s %s %v", c.Time.Format(time.StampMicro), c.CodeName, c.MutableParameters))
	}
	return "[" + strings.Join(out, ", ") + "]"
}

// wantModifyCalls checks ControllerModifyVolume calls: exactly one per entry of want, in order,
// each with exactly its parameters (the class's, nothing added) and code.
func wantModifyCalls(t *testing.T, calls []framework.Call, want ...modifyCall) {
	t.Helper()
	ok := len(calls) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = maps.Equal(calls[i].MutableParameters, want[i].params) && calls[i].Code == want[i].code
	}
	if !ok {
		var w []string
		for _, c := range want {
			w = append(w, fmt.Sprintf("%s %v", c.code, c.params))
		}
		t.Errorf("ControllerModifyVolume calls %s, want exactly [%s]", describeModifyCalls(calls), strings.Join(w, ", "))
	}
}

type modifyCall struct {
	params map[string]string
	code   codes.Code
}

// Success: a PVC provisioned with silver is set to gold. One call with gold's parameters; the PV
// and then the PVC's status say gold; nothing of the modification is left; one Normal event. The
// resizer writes the PVC twice (InProgress before the call, the outcome after it) and the PV
// once: the 3 writes of rule 18, which the returned histories let the metrics step check again
// after the other scenarios ran.
func testModifySuccess(t *testing.T, e *scenario.Env) (*scenario.ClaimHistory, *scenario.History[*v1.PersistentVolume]) {
	_, pv := e.NewClaimWithClass(t, "success", "1Gi", "silver")
	vol := pv.Spec.CSI.VolumeHandle
	h := e.WatchClaim(t, "success", "")
	pvh := e.WatchVolume(t, pv.Name, "")
	e.SetClass(t, "success", "gold")
	e.WaitClaim(t, "success", modifyTimeout, scenario.ModifiedTo("gold"))

	wantModifyCalls(t, e.Driver.ModifyCalls(t, vol), modifyCall{gold, codes.OK})
	if got := e.PV(t, pv.Name).Spec.VolumeAttributesClassName; got == nil || *got != "gold" {
		t.Errorf("PV spec.volumeAttributesClassName = %v, want gold", got)
	}
	ev := e.WaitEvent(t, "success", "VolumeModifySuccessful", 30*time.Second)
	if !strings.Contains(ev.Message, "gold") || ev.Type != v1.EventTypeNormal {
		t.Errorf("VolumeModifySuccessful event %s %q, want a Normal event naming gold", ev.Type, ev.Message)
	}
	if evs := e.Events(t, "success", ""); len(evs) != 1 || evs[0].Count != 1 {
		t.Errorf("events on the PVC %s, want only the one VolumeModifySuccessful", scenario.DescribeEvents(evs))
	}
	checkSuccessWrites(t, h, pvh)
	return h, pvh
}

// checkSuccessWrites checks the success PVC's versions since the class was set: the user's spec
// change, the resizer's InProgress (with ModifyingVolume) and its outcome, and nothing else; and
// its PV's: the one write of the class.
func checkSuccessWrites(t *testing.T, h *scenario.ClaimHistory, pvh *scenario.History[*v1.PersistentVolume]) {
	t.Helper()
	pvh.Wait(t, modifyTimeout, "with class gold", func(pv *v1.PersistentVolume) bool {
		return pv.Spec.VolumeAttributesClassName != nil && *pv.Spec.VolumeAttributesClassName == "gold"
	})
	if n := len(pvh.Versions()); n != 1 {
		t.Errorf("the PV was written %d times since the class was set, want once (its class)", n)
	}
	h.Wait(t, modifyTimeout, "modified to gold", func(pvc *v1.PersistentVolumeClaim) bool {
		ok, _ := scenario.ModifiedTo("gold")(pvc)
		return ok
	})
	vs := h.Versions()
	var desc []string
	for _, pvc := range vs {
		desc = append(desc, scenario.Describe(pvc))
	}
	inProgress := func(pvc *v1.PersistentVolumeClaim) bool {
		ok, _ := scenario.InModifyStatus(v1.PersistentVolumeClaimModifyVolumeInProgress, "gold")(pvc)
		return ok && scenario.Condition(pvc, v1.PersistentVolumeClaimVolumeModifyingVolume) != nil
	}
	if len(vs) != 3 || !inProgress(vs[1]) {
		t.Errorf("PVC versions since the class was set:\n  %s\nwant 3: the spec change, InProgress for gold with ModifyingVolume, the outcome",
			strings.Join(desc, "\n  "))
	}
}

// Infeasible, then a new class: INVALID_ARGUMENT for "bad" leaves Infeasible with both
// conditions and a Warning. A new class goes at once, without waiting for the 10-minute retry of
// the infeasible one, and the driver sees exactly the refused call and then gold's.
func testModifyInfeasibleThenNewClass(t *testing.T, e *scenario.Env) {
	_, pv := e.NewClaimWithClass(t, "retarget", "1Gi", "silver")
	vol := pv.Spec.CSI.VolumeHandle
	e.SetClass(t, "retarget", "bad")
	pvc := e.WaitClaim(t, "retarget", modifyTimeout, infeasible("bad"))
	if c := scenario.Condition(pvc, v1.PersistentVolumeClaimVolumeModifyVolumeError); !strings.Contains(c.Message, infeasibleFault.Message) {
		t.Errorf("ModifyVolumeError message %q, want the driver's %q", c.Message, infeasibleFault.Message)
	}
	if scenario.CurrentClass(pvc) != "silver" {
		t.Errorf("current class %q after the refusal, want silver (the driver confirmed nothing else)", scenario.CurrentClass(pvc))
	}
	ev := e.WaitEvent(t, "retarget", "VolumeModifyFailed", 30*time.Second)
	if ev.Type != v1.EventTypeWarning || !strings.Contains(ev.Message, "InvalidArgument") || !strings.Contains(ev.Message, "bad") {
		t.Errorf("VolumeModifyFailed event %s %q, want a Warning naming bad and InvalidArgument", ev.Type, ev.Message)
	}
	wantModifyCalls(t, e.Driver.ModifyCalls(t, vol), modifyCall{bad, codes.InvalidArgument})

	e.SetClass(t, "retarget", "gold")
	e.WaitClaim(t, "retarget", modifyTimeout, scenario.ModifiedTo("gold"))
	wantModifyCalls(t, e.Driver.ModifyCalls(t, vol), modifyCall{bad, codes.InvalidArgument}, modifyCall{gold, codes.OK})
	if got := e.PV(t, pv.Name).Spec.VolumeAttributesClassName; got == nil || *got != "gold" {
		t.Errorf("PV spec.volumeAttributesClassName = %v, want gold", got)
	}
}

// A class that does not exist yet: Pending for it, a Warning naming it, no call. Once the class
// is created the modification goes ahead without anything else changing.
func testModifyPendingClass(t *testing.T, e *scenario.Env) {
	_, pv := e.NewClaimWithClass(t, "pending", "1Gi", "silver")
	vol := pv.Spec.CSI.VolumeHandle
	e.SetClass(t, "pending", "late")
	pvc := e.WaitClaim(t, "pending", modifyTimeout, scenario.InModifyStatus(v1.PersistentVolumeClaimModifyVolumePending, "late"))
	if scenario.Condition(pvc, v1.PersistentVolumeClaimVolumeModifyingVolume) != nil || scenario.CurrentClass(pvc) != "silver" {
		t.Errorf("Pending PVC %s, want no ModifyingVolume (nothing is being modified) and silver current", scenario.Describe(pvc))
	}
	ev := e.WaitEvent(t, "pending", "VolumeModifyFailed", 30*time.Second)
	if ev.Type != v1.EventTypeWarning || !strings.Contains(ev.Message, "late") {
		t.Errorf("VolumeModifyFailed event %s %q, want a Warning naming the missing class late", ev.Type, ev.Message)
	}
	if calls := e.Driver.ModifyCalls(t, vol); len(calls) != 0 {
		t.Errorf("ControllerModifyVolume calls %s while the class does not exist, want none", describeModifyCalls(calls))
	}

	e.CreateClass(t, "late", late)
	e.WaitClaim(t, "pending", modifyTimeout, scenario.ModifiedTo("late"))
	wantModifyCalls(t, e.Driver.ModifyCalls(t, vol), modifyCall{late, codes.OK})
	if evs := e.Events(t, "pending", "VolumeModifyFailed"); len(evs) != 1 || evs[0].Count != 1 {
		t.Errorf("VolumeModifyFailed events %s, want the one for the missing class", scenario.DescribeEvents(evs))
	}
}

// A transient error (UNAVAILABLE) leaves the outcome unknown: the backend may be applying gold.
// The user then asks for bronze, but every retry is for gold (rule 14) until the driver answers;
// only then is bronze called.
func testModifyTransientKeepsTarget(t *testing.T, e *scenario.Env) {
	_, pv := e.NewClaimWithClass(t, "transient", "1Gi", "silver")
	vol := pv.Spec.CSI.VolumeHandle
	e.Driver.SetFaults(t, []framework.Fault{infeasibleFault, {Method: "ControllerModifyVolume", VolumeID: vol, Code: codes.Unavailable, Message: "backend restarting"}})
	t.Cleanup(func() { e.Driver.SetFaults(t, []framework.Fault{infeasibleFault}) })
	e.SetClass(t, "transient", "gold")
	e.WaitClaim(t, "transient", modifyTimeout, func(pvc *v1.PersistentVolumeClaim) (bool, string) {
		inProgress, _ := scenario.InModifyStatus(v1.PersistentVolumeClaimModifyVolumeInProgress, "gold")(pvc)
		c := scenario.Condition(pvc, v1.PersistentVolumeClaimVolumeModifyVolumeError)
		return inProgress && c != nil && c.Reason == "Unavailable", "want InProgress for gold with an Unavailable ModifyVolumeError"
	})
	e.SetClass(t, "transient", "bronze")
	changed := time.Now()
	framework.Eventually(t, modifyTimeout, func() (bool, string) {
		calls := e.Driver.ModifyCalls(t, vol)
		return len(calls) > 0 && calls[len(calls)-1].Time.After(changed), "no retry since the class was changed: " + describeModifyCalls(calls)
	})
	e.Driver.SetFaults(t, []framework.Fault{infeasibleFault})
	e.WaitClaim(t, "transient", modifyTimeout, scenario.ModifiedTo("bronze"))

	calls := e.Driver.ModifyCalls(t, vol)
	n := len(calls)
	ok := n >= 4 && maps.Equal(calls[n-2].MutableParameters, gold) && calls[n-2].Code == codes.OK &&
		maps.Equal(calls[n-1].MutableParameters, bronze) && calls[n-1].Code == codes.OK
	for _, c := range calls[:max(0, n-2)] {
		ok = ok && maps.Equal(c.MutableParameters, gold) && c.Code == codes.Unavailable
	}
	if !ok {
		t.Errorf("ControllerModifyVolume calls %s, want gold refused with UNAVAILABLE (before and after the change to bronze), gold OK, then bronze OK", describeModifyCalls(calls))
	}
}

// A final error (INTERNAL) ends the call: the driver is not working on gold any more, so a
// changed spec is followed at once, without the retry wait.
func testModifyFinalFollowsSpec(t *testing.T, e *scenario.Env) {
	_, pv := e.NewClaimWithClass(t, "final", "1Gi", "silver")
	vol := pv.Spec.CSI.VolumeHandle
	e.Driver.SetFaults(t, []framework.Fault{infeasibleFault, {Method: "ControllerModifyVolume", VolumeID: vol, MutableParameter: "tier=gold", Code: codes.Internal, Message: "backend error"}})
	t.Cleanup(func() { e.Driver.SetFaults(t, []framework.Fault{infeasibleFault}) })
	e.SetClass(t, "final", "gold")
	e.WaitClaim(t, "final", modifyTimeout, func(pvc *v1.PersistentVolumeClaim) (bool, string) {
		inProgress, _ := scenario.InModifyStatus(v1.PersistentVolumeClaimModifyVolumeInProgress, "gold")(pvc)
		c := scenario.Condition(pvc, v1.PersistentVolumeClaimVolumeModifyVolumeError)
		return inProgress && c != nil && c.Reason == "Internal", "want InProgress for gold with an Internal ModifyVolumeError"
	})
	e.SetClass(t, "final", "bronze")
	e.WaitClaim(t, "final", modifyTimeout, scenario.ModifiedTo("bronze"))
	calls := e.Driver.ModifyCalls(t, vol)
	// The gold retries back off from 200ms; whether one came before the change is timing.
	n := len(calls)
	ok := n >= 2 && maps.Equal(calls[n-1].MutableParameters, bronze) && calls[n-1].Code == codes.OK
	for _, c := range calls[:max(0, n-1)] {
		ok = ok && maps.Equal(c.MutableParameters, gold) && c.Code == codes.Internal
	}
	if !ok {
		t.Errorf("ControllerModifyVolume calls %s, want gold refused with INTERNAL, then bronze OK", describeModifyCalls(calls))
	}
}

// The user changes the class while the driver holds the call for gold. The answer is recorded
// over the PVC the user changed (the guarded write conflicts, the PVC is read again, no second
// call): gold becomes current, and only then is bronze called.
func testModifyChangedDuringCall(t *testing.T, e *scenario.Env) {
	_, pv := e.NewClaimWithClass(t, "changed", "1Gi", "silver")
	vol := pv.Spec.CSI.VolumeHandle
	e.Driver.SetFaults(t, []framework.Fault{infeasibleFault, {Method: "ControllerModifyVolume", VolumeID: vol, MutableParameter: "tier=gold", Delay: 2 * time.Second, Times: 1}})
	t.Cleanup(func() { e.Driver.SetFaults(t, []framework.Fault{infeasibleFault}) })
	h := e.WatchClaim(t, "changed", "")
	e.SetClass(t, "changed", "gold")
	framework.Eventually(t, modifyTimeout, func() (bool, string) {
		return scenario.LoggedModifyCall(e.Resizer, vol, "gold"), "the resizer has not logged its ControllerModifyVolume call for " + vol
	})
	e.SetClass(t, "changed", "bronze")
	e.WaitClaim(t, "changed", modifyTimeout, scenario.ModifiedTo("bronze"))
	wantModifyCalls(t, e.Driver.ModifyCalls(t, vol), modifyCall{gold, codes.OK}, modifyCall{bronze, codes.OK})
	h.Wait(t, modifyTimeout, "with gold current", func(pvc *v1.PersistentVolumeClaim) bool {
		return scenario.CurrentClass(pvc) == "gold"
	})
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		evs := e.Events(t, "changed", "VolumeModifySuccessful")
		return len(evs) == 2 && strings.Contains(evs[0].Message, "gold") && strings.Contains(evs[1].Message, "bronze"),
			"VolumeModifySuccessful events " + scenario.DescribeEvents(evs) + ", want one for gold and then one for bronze"
	})
}

// Expansion and modification of one PVC at once (rule 19). The driver holds the expansion's
// call (3 s) and then the modification's (6 s): the class changes while the expansion is under
// way, and the expansion's answer comes back while the modification is under way, so each
// controller records an outcome over a version the other has written since it read it. Some
// version shows both under way (Resizing and ModifyingVolume), then the expansion done while the
// modification is not; no version loses what the other controller recorded; both finish.
func testExpandAndModify(t *testing.T, e *scenario.Env) {
	_, pv := e.NewClaimWithClass(t, "both", "1Gi", "silver")
	vol := pv.Spec.CSI.VolumeHandle
	// The delays are far longer than a status write takes here and far shorter than --timeout.
	e.Driver.SetFaults(t, []framework.Fault{infeasibleFault,
		{Method: "ControllerExpandVolume", VolumeID: vol, Delay: 3 * time.Second, Times: 1},
		{Method: "ControllerModifyVolume", VolumeID: vol, Delay: 6 * time.Second, Times: 1}})
	t.Cleanup(func() { e.Driver.SetFaults(t, []framework.Fault{infeasibleFault}) })
	h := e.WatchClaim(t, "both", "")
	e.SetRequest(t, "both", "2Gi")
	framework.Eventually(t, modifyTimeout, func() (bool, string) {
		return scenario.LoggedExpandCall(e.Resizer, vol), "the resizer has not logged its ControllerExpandVolume call for " + vol
	})
	e.SetClass(t, "both", "gold")

	h.Wait(t, modifyTimeout, "with both Resizing and ModifyingVolume", func(pvc *v1.PersistentVolumeClaim) bool {
		return scenario.Condition(pvc, v1.PersistentVolumeClaimResizing) != nil && scenario.Condition(pvc, v1.PersistentVolumeClaimVolumeModifyingVolume) != nil
	})
	h.Wait(t, modifyTimeout, "expanded while the modification is under way", func(pvc *v1.PersistentVolumeClaim) bool {
		done, _ := scenario.Done("2Gi")(pvc)
		inProgress, _ := scenario.InModifyStatus(v1.PersistentVolumeClaimModifyVolumeInProgress, "gold")(pvc)
		return done && inProgress
	})
	e.WaitClaim(t, "both", modifyTimeout, func(pvc *v1.PersistentVolumeClaim) (bool, string) {
		done, why := scenario.Done("2Gi")(pvc)
		modified, why2 := scenario.ModifiedTo("gold")(pvc)
		return done && modified, why + "; " + why2
	})
	got := e.PV(t, pv.Name)
	if c := got.Spec.Capacity[v1.ResourceStorage]; !scenario.Is(c, "2Gi") || got.Spec.VolumeAttributesClassName == nil || *got.Spec.VolumeAttributesClassName != "gold" {
		t.Errorf("PV capacity %s class %v, want 2Gi and gold", c.String(), got.Spec.VolumeAttributesClassName)
	}
	if calls := e.Driver.VolumeCalls(t, vol); len(calls) != 1 || calls[0].RequiredBytes != bytesOf("2Gi") {
		t.Errorf("ControllerExpandVolume calls %s, want one for 2Gi", framework.DescribeCalls(calls))
	}
	wantModifyCalls(t, e.Driver.ModifyCalls(t, vol), modifyCall{gold, codes.OK})
	checkNothingDropped(t, h.Versions())
}

// checkNothingDropped checks every version of the PVC for what a write computed from an older
// version would lose. Each controller's state goes with its condition (ControllerResizeInProgress
// with Resizing, modifyVolumeStatus InProgress with ModifyingVolume): the conditions are one list,
// which a status patch replaces whole, so a write that dropped the other controller's condition
// breaks the pair. And once a version records a result (allocated 2Gi, gold current), every later
// one keeps it.
func checkNothingDropped(t *testing.T, vs []*v1.PersistentVolumeClaim) {
	t.Helper()
	allocated, current := false, false
	for i, pvc := range vs {
		_, _, alloc := scenario.Storage(pvc)
		modifying, _ := scenario.ModifyStatus(pvc)
		var lost []string
		if allocated && !scenario.Is(alloc, "2Gi") {
			lost = append(lost, "the allocated 2Gi")
		}
		if current && scenario.CurrentClass(pvc) != "gold" {
			lost = append(lost, "gold as the current class")
		}
		if scenario.State(pvc) == v1.PersistentVolumeClaimControllerResizeInProgress && scenario.Condition(pvc, v1.PersistentVolumeClaimResizing) == nil {
			lost = append(lost, "the Resizing condition of the expansion under way")
		}
		if modifying == v1.PersistentVolumeClaimModifyVolumeInProgress && scenario.Condition(pvc, v1.PersistentVolumeClaimVolumeModifyingVolume) == nil {
			lost = append(lost, "the ModifyingVolume condition of the modification under way")
		}
		if len(lost) > 0 {
			t.Errorf("version %d of %d lost %s: %s", i+1, len(vs), strings.Join(lost, ", "), scenario.Describe(pvc))
		}
		allocated = allocated || scenario.Is(alloc, "2Gi")
		current = current || scenario.CurrentClass(pvc) == "gold"
	}
}

// Rollback: the PVC made infeasible at the start of TestModify is still Infeasible, with exactly
// the one refused call, after the other scenarios and a restart of the resizer (a retry before
// --retry-interval-max, by either process, would show here). Set back to its current class, the
// modification is cancelled: status and conditions cleared, a Normal event, no call.
func testModifyRollback(t *testing.T, e *scenario.Env, vol string, infeasibleSince time.Time) {
	pvc := e.PVC(t, "rollback")
	if ok, why := infeasible("bad")(pvc); !ok {
		t.Fatalf("%s; PVC: %s", why, scenario.Describe(pvc))
	}
	t.Logf("Infeasible for %s with --retry-interval-start=200ms before the rollback", time.Since(infeasibleSince).Round(time.Second))
	wantModifyCalls(t, e.Driver.ModifyCalls(t, vol), modifyCall{bad, codes.InvalidArgument})
	// The per-PVC series says which PVC is stuck, and on which class.
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		v := scenario.MetricValue(scenario.Scrape(t, e.Resizer), "csi_resizer_volume_modify_infeasible", `persistentvolumeclaim="rollback"`, `target="bad"`)
		return v == 1, fmt.Sprintf("csi_resizer_volume_modify_infeasible for rollback/bad = %v, want 1", v)
	})

	e.SetClass(t, "rollback", "silver")
	e.WaitClaim(t, "rollback", modifyTimeout, scenario.ModifiedTo("silver"))
	ev := e.WaitEvent(t, "rollback", "VolumeModifyCancelled", 30*time.Second)
	if ev.Type != v1.EventTypeNormal || !strings.Contains(ev.Message, "bad") || !strings.Contains(ev.Message, "silver") {
		t.Errorf("VolumeModifyCancelled event %s %q, want a Normal event naming bad and silver", ev.Type, ev.Message)
	}
	wantModifyCalls(t, e.Driver.ModifyCalls(t, vol), modifyCall{bad, codes.InvalidArgument})
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		body := scenario.Scrape(t, e.Resizer)
		return !strings.Contains(body, `persistentvolumeclaim="rollback"`), "the infeasible series of rollback is still exported"
	})
	// The restarted resizer counts the cancellation; it saw the modification's start only
	// through the PVC, which it needs no call for.
	if v := scenario.MetricValue(scenario.Scrape(t, e.Resizer), "csi_resizer_volume_modifications_total", `result="cancelled"`); v != 1 {
		t.Errorf("csi_resizer_volume_modifications_total{result=\"cancelled\"} = %v, want 1", v)
	}
}

// Rollback of a PVC that had no class: the class is unset again while Infeasible, which
// cancels the modification as setting the current class back does (rule 17).
func testModifyRollbackToNoClass(t *testing.T, e *scenario.Env) {
	_, pv := e.NewClaim(t, "noclass", "1Gi")
	vol := pv.Spec.CSI.VolumeHandle
	e.SetClass(t, "noclass", "bad")
	e.WaitClaim(t, "noclass", modifyTimeout, infeasible("bad"))
	e.SetClass(t, "noclass", "")
	e.WaitClaim(t, "noclass", modifyTimeout, scenario.ModifiedTo(""))
	ev := e.WaitEvent(t, "noclass", "VolumeModifyCancelled", 30*time.Second)
	if ev.Type != v1.EventTypeNormal || !strings.Contains(ev.Message, "bad") {
		t.Errorf("VolumeModifyCancelled event %s %q, want a Normal event naming bad", ev.Type, ev.Message)
	}
	wantModifyCalls(t, e.Driver.ModifyCalls(t, vol), modifyCall{bad, codes.InvalidArgument})
	if got := e.PV(t, pv.Name).Spec.VolumeAttributesClassName; got != nil {
		t.Errorf("PV spec.volumeAttributesClassName = %q, want unset", *got)
	}
}

// A PVC Pending since the start of TestModify for a class that does not exist: neither the first
// resizer nor the restarted one wrote it again or repeated the Warning (the Pending status is
// recorded once, rule 13). The class is created now, and the restarted resizer, woken by its
// class informer, modifies the volume.
func testModifyPendingAcrossRestart(t *testing.T, e *scenario.Env, waiting *scenario.ClaimHistory) {
	if vs := waiting.Versions(); len(vs) != 0 {
		t.Errorf("the Pending PVC was written %d times since it went Pending; the last: %s", len(vs), scenario.Describe(vs[len(vs)-1]))
	}
	if evs := e.Events(t, "waiting", "VolumeModifyFailed"); len(evs) != 1 || evs[0].Count != 1 {
		t.Errorf("VolumeModifyFailed events %s, want the one of the first resizer", scenario.DescribeEvents(evs))
	}
	e.CreateClass(t, "later", late)
	e.WaitClaim(t, "waiting", modifyTimeout, scenario.ModifiedTo("later"))
	pvc := e.PVC(t, "waiting")
	wantModifyCalls(t, e.Driver.ModifyCalls(t, e.PV(t, pvc.Spec.VolumeName).Spec.CSI.VolumeHandle), modifyCall{late, codes.OK})
}

// The metrics the sidecar exports after the scenarios above: 9 successes (success, retarget,
// pending, transient's gold and then bronze, final, changed's gold and then bronze, both), 2 infeasible answers (rollback, retarget), each
// INVALID_ARGUMENT counted once as infeasible, the other errors by code and class, and the
// rollback PVC, still Infeasible, and the waiting one, Pending, in the scrape-time gauges. And the success PVC was written by
// no one since its modification ended.
func testModifyMetrics(t *testing.T, e *scenario.Env, success *scenario.ClaimHistory, successPV *scenario.History[*v1.PersistentVolume]) {
	body := scenario.Scrape(t, e.Resizer)
	transientFailures := 0
	for _, c := range e.Driver.Calls(t, "ControllerModifyVolume") {
		if c.Code == codes.Unavailable {
			transientFailures++
		}
	}
	want := []struct {
		metric string
		labels []string
		value  float64
	}{
		{"csi_resizer_volume_modifications_total", []string{`result="success"`}, 9},
		{"csi_resizer_volume_modifications_total", []string{`result="infeasible"`}, 2},
		{"csi_resizer_volume_modifications_total", []string{`result="cancelled"`}, 0},
		{"csi_resizer_controller_modify_errors_total", []string{`grpc_code="InvalidArgument"`, `class="infeasible"`}, 2},
		{"csi_resizer_controller_modify_errors_total", []string{`grpc_code="Internal"`, `class="final"`}, 1},
		{"csi_resizer_controller_modify_errors_total", []string{`grpc_code="Unavailable"`, `class="transient"`}, float64(transientFailures)},
		{"csi_resizer_controller_modify_errors_total", nil, float64(3 + transientFailures)},
		{"csi_resizer_modification_duration_seconds_count", []string{`result="success"`}, 9},
		{"csi_resizer_modify_volumes", []string{`status="Infeasible"`}, 1},
		{"csi_resizer_modify_volumes", []string{`status="Pending"`}, 1},
		{"csi_resizer_modify_volumes", nil, 2},
		{"csi_resizer_volume_modify_infeasible", []string{`persistentvolumeclaim="rollback"`, `target="bad"`}, 1},
		{"csi_resizer_volume_modify_infeasible", nil, 1},
	}
	for _, w := range want {
		if got := scenario.MetricValue(body, w.metric, w.labels...); got != w.value {
			t.Errorf("%s%v = %v, want %v", w.metric, w.labels, got, w.value)
		}
	}
	for _, status := range []string{"Pending", "InProgress", "Infeasible"} {
		if !strings.Contains(body, `csi_resizer_modify_volumes{driver_name="`+e.Driver.Name+`",status="`+status+`"}`) {
			t.Errorf("csi_resizer_modify_volumes{status=%q} is not exported", status)
		}
	}
	checkSuccessWrites(t, success, successPV)
}

// The controller-modify secret, named by the PV's annotations (external-provisioner's), is read
// when the call is made, with the shipped RBAC and its secrets component. While it is missing
// the resizer says so in a Warning naming it, and records nothing in the PVC: no InProgress for
// a call that was never made (rule 12). Once it exists, the call carries it.
func testModifySecret(t *testing.T, e *scenario.Env) {
	sa := "system:serviceaccount:" + e.Namespace + ":csi-resizer"
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		out, _ := e.Cluster.Kubectl(t, "auth", "can-i", "get", "secrets", "--as="+sa, "-n", e.Namespace)
		return strings.TrimSpace(out) == "yes", "the secrets component is not in effect yet: can-i get secrets = " + out
	})
	_, pv := e.NewClaimWithClassAnnotated(t, "secret", "1Gi", "silver", map[string]string{
		"volume.kubernetes.io/controller-modify-secret-name":      "modify-creds",
		"volume.kubernetes.io/controller-modify-secret-namespace": e.Namespace,
	})
	vol := pv.Spec.CSI.VolumeHandle
	e.SetClass(t, "secret", "gold")
	ev := e.WaitEvent(t, "secret", "VolumeModifyFailed", modifyTimeout)
	if ev.Type != v1.EventTypeWarning || !strings.Contains(ev.Message, e.Namespace+"/modify-creds") || !strings.Contains(ev.Message, pv.Name) {
		t.Errorf("VolumeModifyFailed event %s %q, want a Warning naming the secret %s/modify-creds and PV %s", ev.Type, ev.Message, e.Namespace, pv.Name)
	}
	if pvc := e.PVC(t, "secret"); pvc.Status.ModifyVolumeStatus != nil || scenario.Condition(pvc, v1.PersistentVolumeClaimVolumeModifyingVolume) != nil {
		t.Errorf("the PVC records a modification whose call was never made: %s", scenario.Describe(pvc))
	}
	if calls := e.Driver.ModifyCalls(t, vol); len(calls) != 0 {
		t.Errorf("ControllerModifyVolume calls %s without the secret, want none", describeModifyCalls(calls))
	}

	secret := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "modify-creds", Namespace: e.Namespace}, StringData: map[string]string{"password": "s3cret"}}
	if _, err := e.Client.CoreV1().Secrets(e.Namespace).Create(e.Ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.WaitClaim(t, "secret", modifyTimeout, scenario.ModifiedTo("gold"))
	calls := e.Driver.ModifyCalls(t, vol)
	wantModifyCalls(t, calls, modifyCall{gold, codes.OK})
	if len(calls) == 1 {
		var req struct {
			Secrets map[string]string `json:"secrets"`
		}
		if err := json.Unmarshal(calls[0].Request, &req); err != nil || !maps.Equal(req.Secrets, map[string]string{"password": "s3cret"}) {
			t.Errorf("the call's secrets %v (%v), want the controller-modify secret's data; request %s", req.Secrets, err, calls[0].Request)
		}
	}
}

// The resizer is killed while the driver holds its call for gold; the user then asks for
// bronze. The restarted resizer must not leave gold half-applied for bronze: the backend may
// still be applying gold, so it calls for gold again (rule 14), and only after that answer for
// bronze, which ends current.
func testModifyKilledDuringCall(t *testing.T, e *scenario.Env) {
	_, pv := e.NewClaimWithClass(t, "killed", "1Gi", "silver")
	vol := pv.Spec.CSI.VolumeHandle
	// The driver holds the first gold call past the kill, as a slow backend would; 8 s leaves a
	// loaded machine time to kill the resizer first, and is short enough to wait out below.
	e.Driver.SetFaults(t, []framework.Fault{infeasibleFault, {Method: "ControllerModifyVolume", VolumeID: vol, MutableParameter: "tier=gold", Delay: 8 * time.Second, Times: 1}})
	e.SetClass(t, "killed", "gold")
	e.WaitClaim(t, "killed", modifyTimeout, scenario.InModifyStatus(v1.PersistentVolumeClaimModifyVolumeInProgress, "gold"))
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		return scenario.LoggedModifyCall(e.Resizer, vol, "gold"), "the resizer has not logged its ControllerModifyVolume call for " + vol
	})
	killed := time.Now()
	if err := e.Resizer.Kill(); err != nil {
		t.Fatal(err)
	}
	if pvc := e.PVC(t, "killed"); scenario.CurrentClass(pvc) != "silver" {
		t.Fatalf("the modification finished before the resizer died, nothing was left uncertain: %s", scenario.Describe(pvc))
	}
	e.SetClass(t, "killed", "bronze")
	e.Driver.SetFaults(t, []framework.Fault{infeasibleFault})
	restarted := time.Now()
	e.Resizer.Restart(t)

	e.WaitClaim(t, "killed", modifyTimeout, scenario.ModifiedTo("bronze"))
	var after []framework.Call
	for _, c := range e.Driver.ModifyCalls(t, vol) {
		if c.Time.After(restarted) {
			after = append(after, c)
		}
	}
	wantModifyCalls(t, after, modifyCall{gold, codes.OK}, modifyCall{bronze, codes.OK})
	if got := e.PV(t, pv.Name).Spec.VolumeAttributesClassName; got == nil || *got != "bronze" {
		t.Errorf("PV spec.volumeAttributesClassName = %v, want bronze", got)
	}
	// The killed resizer really was mid-call: its gold call reached the driver before the
	// restart and was answered after the kill (the mock logs a call when it answers).
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		calls := e.Driver.ModifyCalls(t, vol)
		for _, c := range calls {
			if c.Time.Before(restarted) && c.End().After(killed) && maps.Equal(c.MutableParameters, gold) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("no gold call arrived before the restart (%s) and was answered after the kill (%s): %s",
			restarted.Format(time.StampMicro), killed.Format(time.StampMicro), describeModifyCalls(calls))
	})
}

// A driver that can modify volumes but not expand them starts, says modification is on, and
// modifies a volume provisioned without a class. With --extra-modify-metadata the call also
// names the PVC and the PV, as upstream's does.
func TestModifyOnlyDriver(t *testing.T) {
	e := startMock(t, scenario.Options{Mock: framework.MockDriverOptions{ModifyOnly: true}, ResizerArgs: []string{"--extra-modify-metadata"}})
	if !e.Resizer.LogContains("VolumeAttributesClass modification on") {
		t.Fatalf("the resizer did not turn modification on:\n%s", e.Resizer.LogTail(30))
	}
	e.CreateClass(t, "gold", gold)
	_, pv := e.NewClaim(t, "data", "1Gi")
	e.SetClass(t, "data", "gold")
	e.WaitClaim(t, "data", modifyTimeout, scenario.ModifiedTo("gold"))
	withMetadata := maps.Clone(gold)
	withMetadata["csi.storage.k8s.io/pvc/name"] = "data"
	withMetadata["csi.storage.k8s.io/pvc/namespace"] = e.Namespace
	withMetadata["csi.storage.k8s.io/pv/name"] = pv.Name
	wantModifyCalls(t, e.Driver.ModifyCalls(t, pv.Spec.CSI.VolumeHandle), modifyCall{withMetadata, codes.OK})
	if got := e.PV(t, pv.Name).Spec.VolumeAttributesClassName; got == nil || *got != "gold" {
		t.Errorf("PV spec.volumeAttributesClassName = %v, want gold", got)
	}

	// With the gate off such a driver has nothing to do: the resizer exits and says why.
	off := framework.StartResizer(t, e.Cluster, e.Kubeconfig, e.Driver, "--feature-gates=VolumeAttributesClass=false")
	err := off.WaitExit(time.Minute)
	if code := off.ExitCode(); code <= 0 {
		t.Fatalf("a resizer for a modify-only driver with VolumeAttributesClass off: exit code %d (%v), want it to fail\n%s", code, err, off.LogTail(20))
	}
	if !off.LogContains("can only modify volumes") || !off.LogContains("VolumeAttributesClass") {
		t.Errorf("the resizer did not say why it stopped:\n%s", off.LogTail(20))
	}
}

// Under leader election only the leader modifies; when it dies during the call, the other
// resizer takes the Lease over and finishes the recorded target.
func TestModifyLeaderElection(t *testing.T) {
	e := startMock(t, scenario.Options{
		NoResizer: true,
		Mock:      framework.MockDriverOptions{ModifyVolume: true},
		ResizerArgs: []string{"--leader-election", "--leader-election-lease-duration=6s", "--leader-election-renew-deadline=4s",
			"--leader-election-retry-period=1s", "--retry-interval-start=200ms", "--timeout=30s"},
	})
	a, b := e.StartResizer(t), e.StartResizer(t)
	e.CreateClass(t, "gold", gold)
	_, pv := e.NewClaim(t, "data", "1Gi")
	vol := pv.Spec.CSI.VolumeHandle
	// The driver holds the leader's call past the kill.
	e.Driver.SetFaults(t, []framework.Fault{{Method: "ControllerModifyVolume", VolumeID: vol, Delay: 10 * time.Second, Times: 1}})
	e.SetClass(t, "data", "gold")
	var leader, follower *framework.Process
	framework.Eventually(t, modifyTimeout, func() (bool, string) {
		switch {
		case scenario.LoggedModifyCall(a, vol, "gold"):
			leader, follower = a, b
		case scenario.LoggedModifyCall(b, vol, "gold"):
			leader, follower = b, a
		}
		return leader != nil, "neither resizer has logged a ControllerModifyVolume call for " + vol
	})
	if scenario.LoggedModifyCall(follower, vol, "gold") {
		t.Fatalf("both resizers called the driver for %s", vol)
	}
	killed := time.Now()
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	e.WaitClaim(t, "data", modifyTimeout, scenario.ModifiedTo("gold"))
	if !scenario.LoggedModifyCall(follower, vol, "gold") {
		t.Errorf("the modification was finished, but not by the new leader:\n%s", follower.LogTail(30))
	}
	var before, after int
	for _, c := range e.Driver.ModifyCalls(t, vol) {
		if c.Time.Before(killed) {
			before++
		} else {
			after++
		}
	}
	if before > 1 || after != 1 {
		t.Errorf("ControllerModifyVolume calls: %d before the leader's death (want at most its one, still held), %d after (want the new leader's one): %s",
			before, after, describeModifyCalls(e.Driver.ModifyCalls(t, vol)))
	}
}

// TestModifyClassDeletedInFlight (docs/design.md §2.11 rule 20): the class of a modification
// whose last call had no final answer (UNAVAILABLE) is deleted, its protection finalizer
// removed by hand. Once that call is past --modify-timeout, the PVC records a final
// ModifyVolumeError VolumeAttributesClassDeleted, with a Warning event, and no further call for
// the deleted class is made (the spec still names it: Pending, the error kept); setting the class
// back to the current one then calls for it (the volume may be partly modified) and ends the
// modification.
func TestModifyClassDeletedInFlight(t *testing.T) {
	unavailable := framework.Fault{Method: "ControllerModifyVolume", Code: codes.Unavailable, Message: "backend busy", MutableParameter: "tier=gold"}
	e := startMock(t, scenario.Options{
		Mock:        framework.MockDriverOptions{ModifyVolume: true, Faults: []framework.Fault{unavailable}},
		ResizerArgs: []string{"--modify-timeout=2s", "--retry-interval-start=200ms", "--retry-interval-max=10m"},
	})
	e.CreateClass(t, "silver", silver)
	e.CreateClass(t, "gold", gold)
	_, pv := e.NewClaimWithClass(t, "data", "1Gi", "silver")
	vol := pv.Spec.CSI.VolumeHandle
	e.SetClass(t, "data", "gold")
	e.WaitClaim(t, "data", modifyTimeout, func(pvc *v1.PersistentVolumeClaim) (bool, string) {
		c := scenario.Condition(pvc, v1.PersistentVolumeClaimVolumeModifyVolumeError)
		s, target := scenario.ModifyStatus(pvc)
		return s == v1.PersistentVolumeClaimModifyVolumeInProgress && target == "gold" && c != nil && c.Reason == "Unavailable", "want InProgress for gold after UNAVAILABLE"
	})
	if err := e.Client.StorageV1().VolumeAttributesClasses().Delete(e.Ctx, "gold", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The apiserver gives every class the protection finalizer kubernetes.io/vac-protection,
	// which kube-controller-manager removes only once no PVC or PV names the class: removing it
	// by hand is how a class in use actually goes.
	if _, err := e.Client.StorageV1().VolumeAttributesClasses().Patch(e.Ctx, "gold", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.WaitClaim(t, "data", modifyTimeout, func(pvc *v1.PersistentVolumeClaim) (bool, string) {
		c := scenario.Condition(pvc, v1.PersistentVolumeClaimVolumeModifyVolumeError)
		return c != nil && c.Reason == "VolumeAttributesClassDeleted", "want the modification given up (ModifyVolumeError VolumeAttributesClassDeleted)"
	})
	// Then Pending for gold (the spec still names it), the error kept.
	e.WaitClaim(t, "data", modifyTimeout, scenario.InModifyStatus(v1.PersistentVolumeClaimModifyVolumePending, "gold"))
	framework.Eventually(t, modifyTimeout, func() (bool, string) {
		for _, ev := range e.Events(t, "data", "VolumeModifyFailed") {
			if strings.Contains(ev.Message, "gold was deleted") {
				return true, ""
			}
		}
		return false, "no VolumeModifyFailed event says that gold was deleted"
	})
	calls := len(e.Driver.ModifyCalls(t, vol))
	e.SetClass(t, "data", "silver")
	e.WaitClaim(t, "data", modifyTimeout, scenario.ModifiedTo("silver"))
	after := e.Driver.ModifyCalls(t, vol)
	if len(after) != calls+1 || !maps.Equal(after[len(after)-1].MutableParameters, silver) {
		t.Errorf("ControllerModifyVolume calls after the give-up: %s, want exactly one, for silver", describeModifyCalls(after[calls:]))
	}
}
