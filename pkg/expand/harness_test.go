package expand

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/csi-resizer/csi-resizer/pkg/internal/conditions"
)

// This file holds the test harness shared by the story, restart and fuzz tests: a PVC and its PV
// as the API server holds them, and the steps each actor of the KEP-1790 stories (user, resizer,
// CSI driver, kubelet) takes on them. The resizer's steps go only through the package's own
// functions (Observe, PlanExpansion and the status transforms), so a story is a real chain: the
// state each step observes is the state the previous step wrote.

var epoch = time.Date(2025, time.March, 4, 5, 6, 7, 0, time.UTC)

func q(s string) resource.Quantity { return resource.MustParse(s) }

func qp(s string) *resource.Quantity {
	x := resource.MustParse(s)
	return &x
}

func mt(sec int) metav1.Time { return metav1.NewTime(epoch.Add(time.Duration(sec) * time.Second)) }

// cluster is one PVC/PV pair of the driver and a record of what was done to it.
type cluster struct {
	t        *testing.T
	pvc      *v1.PersistentVolumeClaim
	pv       *v1.PersistentVolume
	nodeOnly bool
	legacy   bool
	clock    int
	// requests are the sizes the resizer asked ControllerExpandVolume for, in order.
	requests []resource.Quantity
	// pvLowerings counts the writes that lowered the PV capacity.
	pvLowerings int
}

func newCluster(t *testing.T, size string, nodeOnly bool) *cluster {
	t.Helper()
	pvc := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "default", UID: types.UID("pvc-uid-1"), ResourceVersion: "1"},
		Spec: v1.PersistentVolumeClaimSpec{
			VolumeName: "pv-1",
			Resources:  v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: q(size)}},
		},
		Status: v1.PersistentVolumeClaimStatus{
			Phase:    v1.ClaimBound,
			Capacity: v1.ResourceList{v1.ResourceStorage: q(size)},
		},
	}
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-1"},
		Spec: v1.PersistentVolumeSpec{
			Capacity:               v1.ResourceList{v1.ResourceStorage: q(size)},
			ClaimRef:               &v1.ObjectReference{Namespace: "default", Name: "data", UID: types.UID("pvc-uid-1")},
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: "test.csi.example.com", VolumeHandle: "vol-1"}},
		},
	}
	return &cluster{t: t, pvc: pvc, pv: pv, nodeOnly: nodeOnly}
}

func (c *cluster) now() metav1.Time {
	c.clock++
	return mt(c.clock)
}

func (c *cluster) observe() Observed { return Observe(c.pvc, c.pv, c.nodeOnly, c.legacy) }

// plan is the resizer's decision on the PVC as it is now; it also checks the invariants that
// hold for every decision.
func (c *cluster) plan() Plan {
	c.t.Helper()
	o := c.observe()
	p := PlanExpansion(o)
	checkPlanInvariants(c.t, o, p)
	return p
}

func (c *cluster) userRequests(size string) {
	c.pvc.Spec.Resources.Requests[v1.ResourceStorage] = q(size)
}

// start is the resizer writing the status before acting on plan p, and, for a controller
// driver, sending ControllerExpandVolume (recorded; its answer is a later step).
func (c *cluster) start(p Plan) {
	c.t.Helper()
	if p.Action != ExpandController && p.Action != ExpandNodeOnly {
		c.t.Fatalf("start with action %s", p.Action)
	}
	before := c.pvc.Status
	c.pvc.Status = StartedStatus(c.pvc.Status, p, c.legacy, c.now())
	checkStartedStatus(c.t, before, c.pvc.Status, p, c.legacy)
	if p.Action == ExpandController {
		if pvCap := c.pv.Spec.Capacity[v1.ResourceStorage]; p.Target.Cmp(pvCap) < 0 {
			c.t.Fatalf("driver asked for %s, below the PV capacity %s", p.Target.String(), pvCap.String())
		}
		c.requests = append(c.requests, p.Target.DeepCopy())
	}
}

func (c *cluster) setPVCapacity(size resource.Quantity) {
	old := c.pv.Spec.Capacity[v1.ResourceStorage]
	if size.Cmp(old) < 0 {
		c.pvLowerings++
	}
	c.pv.Spec.Capacity[v1.ResourceStorage] = size.DeepCopy()
}

// driverSucceeds is ControllerExpandVolume returning size; the resizer records it.
func (c *cluster) driverSucceeds(p Plan, size string, nodeExpansionRequired bool) {
	c.t.Helper()
	c.pvWritten(size, nodeExpansionRequired)
	c.pvc.Status = ExpandedStatus(c.pvc.Status, p, q(size), nodeExpansionRequired, c.legacy, c.now())
}

// pvWritten is the resizer's PV write after ControllerExpandVolume returned size: the capacity
// and the record of the answer, in one patch.
func (c *cluster) pvWritten(size string, nodeExpansionRequired bool) {
	c.setPVCapacity(q(size))
	if c.pv.Annotations == nil {
		c.pv.Annotations = map[string]string{}
	}
	for k, v := range ControllerExpanded(q(size), nodeExpansionRequired) {
		c.pv.Annotations[k] = *v
	}
}

// recordExpanded is the resizer acting on RecordExpanded: no driver call, the recorded answer
// written to the PVC.
func (c *cluster) recordExpanded(p Plan) {
	c.t.Helper()
	if p.Action != RecordExpanded {
		c.t.Fatalf("recordExpanded with action %s", p.Action)
	}
	c.pvc.Status = ExpandedStatus(c.pvc.Status, p, p.Target, p.NodeRequired, c.legacy, c.now())
}

// driverFails is ControllerExpandVolume returning err; the resizer records it.
func (c *cluster) driverFails(err error) ClassifiedError {
	c.t.Helper()
	ce := ClassifyError(err)
	c.pvc.Status = FailedStatus(c.pvc.Status, ce, c.legacy, c.now())
	return ce
}

// nodeOnlyExpanded is the resizer finishing the control-plane part for a node-only driver:
// no CSI call, the PV capacity set to the target, the node takes over.
func (c *cluster) nodeOnlyExpanded(p Plan) {
	c.t.Helper()
	if p.Action != ExpandNodeOnly {
		c.t.Fatalf("nodeOnlyExpanded with action %s", p.Action)
	}
	if !p.LowerPV && p.Target.Cmp(c.pv.Spec.Capacity[v1.ResourceStorage]) < 0 {
		c.t.Fatalf("plan lowers the PV to %s without LowerPV", p.Target.String())
	}
	c.setPVCapacity(p.Target)
	c.pvc.Status = ExpandedStatus(c.pvc.Status, p, p.Target, true, c.legacy, c.now())
}

// redrive is the resizer executing a RedriveNode plan.
func (c *cluster) redrive(p Plan) {
	c.t.Helper()
	if p.Action != RedriveNode {
		c.t.Fatalf("redrive with action %s", p.Action)
	}
	c.pvc.Status = RedrivenStatus(c.pvc.Status, p, c.now())
	checkAllocNotBelowCapacity(c.t, c.pvc.Status)
}

// kubelet is the node setting the resize state (what kubelet writes in the stories).
func (c *cluster) kubelet(state v1.ClaimResourceStatus) {
	st := &c.pvc.Status
	if st.AllocatedResourceStatuses == nil {
		st.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{}
	}
	st.AllocatedResourceStatuses[v1.ResourceStorage] = state
	if state == v1.PersistentVolumeClaimNodeResizeInfeasible {
		st.Conditions = append(st.Conditions, v1.PersistentVolumeClaimCondition{
			Type: v1.PersistentVolumeClaimNodeResizeError, Status: v1.ConditionTrue,
			Message: "resize2fs: no space", LastTransitionTime: c.now(),
		})
	}
}

// kubeletFinishes is the node expansion succeeding: capacity = PV capacity, state cleared.
func (c *cluster) kubeletFinishes() {
	st := &c.pvc.Status
	st.Capacity[v1.ResourceStorage] = c.pv.Spec.Capacity[v1.ResourceStorage].DeepCopy()
	delete(st.AllocatedResourceStatuses, v1.ResourceStorage)
	var keep []v1.PersistentVolumeClaimCondition
	for _, cond := range st.Conditions {
		if cond.Type != v1.PersistentVolumeClaimFileSystemResizePending && cond.Type != v1.PersistentVolumeClaimNodeResizeError {
			keep = append(keep, cond)
		}
	}
	st.Conditions = keep
}

// restart is the resizer crashing and coming back: it has no memory, only what the API server
// returns, so the objects go through their wire encoding.
func (c *cluster) restart() *cluster {
	c.t.Helper()
	n := &cluster{t: c.t, nodeOnly: c.nodeOnly, legacy: c.legacy, clock: c.clock,
		requests: c.requests, pvLowerings: c.pvLowerings,
		pvc: &v1.PersistentVolumeClaim{}, pv: &v1.PersistentVolume{}}
	roundTrip(c.t, c.pvc, n.pvc)
	roundTrip(c.t, c.pv, n.pv)
	return n
}

func roundTrip(t *testing.T, in, out any) {
	t.Helper()
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
}

func (c *cluster) state() v1.ClaimResourceStatus {
	return c.pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage]
}

// alloc is status.allocatedResources.storage, "" when absent.
func (c *cluster) alloc() string {
	a, ok := c.pvc.Status.AllocatedResources[v1.ResourceStorage]
	if !ok {
		return ""
	}
	return a.String()
}

// quota is what the quota controller charges: max(spec, allocatedResources).
func (c *cluster) quota() resource.Quantity {
	spec := c.pvc.Spec.Resources.Requests[v1.ResourceStorage]
	if a, ok := c.pvc.Status.AllocatedResources[v1.ResourceStorage]; ok && a.Cmp(spec) > 0 {
		return a
	}
	return spec
}

func (c *cluster) wantState(step string, want v1.ClaimResourceStatus) {
	c.t.Helper()
	if got := c.state(); got != want {
		c.t.Errorf("%s: state = %q, want %q", step, got, want)
	}
}

func (c *cluster) wantQuantity(step, what string, got resource.Quantity, want string) {
	c.t.Helper()
	if got.Cmp(q(want)) != 0 {
		c.t.Errorf("%s: %s = %s, want %s", step, what, got.String(), want)
	}
}

func (c *cluster) wantAlloc(step, want string) {
	c.t.Helper()
	a, ok := c.pvc.Status.AllocatedResources[v1.ResourceStorage]
	switch {
	case want == "" && ok:
		c.t.Errorf("%s: allocatedResources = %s, want absent", step, a.String())
	case want != "" && !ok:
		c.t.Errorf("%s: allocatedResources absent, want %s", step, want)
	case want != "" && a.Cmp(q(want)) != 0:
		c.t.Errorf("%s: allocatedResources = %s, want %s", step, a.String(), want)
	}
}

func (c *cluster) wantCapacities(step, pvc, pv string) {
	c.t.Helper()
	c.wantQuantity(step, "pvc status.capacity", c.pvc.Status.Capacity[v1.ResourceStorage], pvc)
	c.wantQuantity(step, "pv capacity", c.pv.Spec.Capacity[v1.ResourceStorage], pv)
}

func (c *cluster) wantRequests(step string, want ...string) {
	c.t.Helper()
	got := make([]string, len(c.requests))
	for i, r := range c.requests {
		got[i] = r.String()
	}
	if len(got) != len(want) {
		c.t.Errorf("%s: driver requests = %v, want %v", step, got, want)
		return
	}
	for i := range want {
		if c.requests[i].Cmp(q(want[i])) != 0 {
			c.t.Errorf("%s: driver requests = %v, want %v", step, got, want)
			return
		}
	}
}

// wantPlan compares the parts of a plan the controller acts on. target "" means no target is
// checked (for Nothing).
func wantPlan(t *testing.T, step string, got Plan, action Action, target string, recovery, lowerPV bool) {
	t.Helper()
	if got.Action != action {
		t.Errorf("%s: action = %s, want %s (why: %s)", step, got.Action, action, got.Why)
	}
	if target != "" && got.Target.Cmp(q(target)) != 0 {
		t.Errorf("%s: target = %s, want %s (why: %s)", step, got.Target.String(), target, got.Why)
	}
	if got.Recovery != recovery {
		t.Errorf("%s: recovery = %v, want %v (why: %s)", step, got.Recovery, recovery, got.Why)
	}
	if got.LowerPV != lowerPV {
		t.Errorf("%s: lowerPV = %v, want %v (why: %s)", step, got.LowerPV, lowerPV, got.Why)
	}
}

// samePlan reports how two plans differ in what the controller acts on ("" when they do not).
func samePlan(a, b Plan) string {
	if a.Action != b.Action || a.Recovery != b.Recovery || a.LowerPV != b.LowerPV ||
		(a.Action != Nothing && a.Target.Cmp(b.Target) != 0) {
		return fmt.Sprintf("{%s %s recovery=%v lowerPV=%v} vs {%s %s recovery=%v lowerPV=%v}",
			a.Action, a.Target.String(), a.Recovery, a.LowerPV, b.Action, b.Target.String(), b.Recovery, b.LowerPV)
	}
	return ""
}

func allocOf(st v1.PersistentVolumeClaimStatus) (resource.Quantity, bool) {
	a, ok := st.AllocatedResources[v1.ResourceStorage]
	return a, ok
}

// checkAllocNotBelowCapacity is rule 4: allocatedResources never below status.capacity.
func checkAllocNotBelowCapacity(t testing.TB, st v1.PersistentVolumeClaimStatus) {
	t.Helper()
	a, ok := allocOf(st)
	if !ok {
		return
	}
	if c := st.Capacity[v1.ResourceStorage]; a.Cmp(c) < 0 {
		t.Fatalf("allocatedResources %s below status.capacity %s", a.String(), c.String())
	}
}

// checkStartedStatus is rule 3 (and legacy): the status written before the call.
func checkStartedStatus(t testing.TB, before, after v1.PersistentVolumeClaimStatus, p Plan, legacy bool) {
	t.Helper()
	if legacy {
		if !sameAllocated(before, after) {
			t.Fatalf("legacy StartedStatus changed allocated*: %v/%v -> %v/%v", before.AllocatedResources, before.AllocatedResourceStatuses, after.AllocatedResources, after.AllocatedResourceStatuses)
		}
	} else {
		a, ok := allocOf(after)
		if !ok || a.Cmp(p.Target) != 0 {
			t.Fatalf("StartedStatus allocatedResources = %v, want %s", after.AllocatedResources, p.Target.String())
		}
		if s := after.AllocatedResourceStatuses[v1.ResourceStorage]; s != v1.PersistentVolumeClaimControllerResizeInProgress {
			t.Fatalf("StartedStatus state = %q", s)
		}
		checkAllocNotBelowCapacity(t, after)
	}
	if c := conditions.Find(after.Conditions, v1.PersistentVolumeClaimResizing); c == nil || c.Status != v1.ConditionTrue {
		t.Fatalf("StartedStatus without a True Resizing condition: %+v", after.Conditions)
	}
}

func sameAllocated(a, b v1.PersistentVolumeClaimStatus) bool {
	if len(a.AllocatedResources) != len(b.AllocatedResources) || len(a.AllocatedResourceStatuses) != len(b.AllocatedResourceStatuses) {
		return false
	}
	for k, v := range a.AllocatedResources {
		if w, ok := b.AllocatedResources[k]; !ok || v.Cmp(w) != 0 {
			return false
		}
	}
	for k, v := range a.AllocatedResourceStatuses {
		if w, ok := b.AllocatedResourceStatuses[k]; !ok || v != w {
			return false
		}
	}
	return (a.AllocatedResources == nil) == (b.AllocatedResources == nil) &&
		(a.AllocatedResourceStatuses == nil) == (b.AllocatedResourceStatuses == nil)
}

// mustKeepAlloc is rule 2's "may still be in progress or uncertain" for the KEP-1790 states: the
// target must stay at alloc, or (Node* pending/in progress) nothing is done at all.
func mustKeepAlloc(o Observed) bool {
	switch o.State {
	case v1.PersistentVolumeClaimControllerResizeInProgress:
		return !o.LastError.IsFinal()
	case v1.PersistentVolumeClaimNodeResizePending, v1.PersistentVolumeClaimNodeResizeInProgress:
		return true
	case v1.PersistentVolumeClaimNodeResizeInfeasible:
		return !o.NodeOnly
	}
	return false
}

// isCase2Recovery is when rule 4 lets a node-only plan lower the PV: KEP-1790 Case 2, the node
// known not to be acting on the PV capacity. Either the node failed for good on the recorded
// allocation (NodeResizeInfeasible, KEP Design Details item 2), or the resizer recorded an
// allocation below the PV for such a recovery (ControllerResizeInProgress, which the kubelet
// leaves alone) and has yet to lower the PV.
func isCase2Recovery(o Observed) bool {
	if !o.NodeOnly || o.Alloc == nil {
		return false
	}
	return o.State == v1.PersistentVolumeClaimNodeResizeInfeasible ||
		o.State == v1.PersistentVolumeClaimControllerResizeInProgress && o.Alloc.Cmp(o.PVCap) < 0
}

// checkPlanInvariants asserts what docs/design.md §2.3 requires of every decision, whatever the input.
func checkPlanInvariants(t testing.TB, o Observed, p Plan) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("%s\nobserved: spec=%s alloc=%v state=%q pvCap=%s pvcCap=%s lastError=%q nodeOnly=%v legacy=%v\nplan: %s target=%s recovery=%v lowerPV=%v why=%q",
			fmt.Sprintf(format, args...), o.Spec.String(), quantityPtr(o.Alloc), o.State, o.PVCap.String(), o.PVCCap.String(),
			o.LastError, o.NodeOnly, o.Legacy, p.Action, p.Target.String(), p.Recovery, p.LowerPV, p.Why)
	}
	switch p.Action {
	case Nothing, ExpandController, ExpandNodeOnly, RedriveNode:
	case RecordExpanded:
		// Only a controller driver's expansion in progress to the size whose answer the PV
		// records, and never a recovery.
		e := o.Expanded
		if o.NodeOnly || o.Legacy || o.State != v1.PersistentVolumeClaimControllerResizeInProgress || e == nil ||
			e.Capacity.Cmp(p.Target) != 0 || o.PVCap.Cmp(p.Target) != 0 || p.NodeRequired != e.NodeExpansionRequired || p.Recovery || p.LowerPV {
			fail("RecordExpanded without the PV's record of that size (record %+v)", e)
		}
		if o.LastError.IsFinal() {
			fail("RecordExpanded after a final error")
		}
	default:
		fail("unknown action")
	}
	if p.Why == "" {
		fail("plan without a reason")
	}
	if p.Action == Nothing {
		if p.Recovery || p.LowerPV {
			fail("Nothing with recovery or lowerPV")
		}
		return
	}
	// Only the action that fits the driver.
	if o.NodeOnly && (p.Action == ExpandController || p.Action == RedriveNode) {
		fail("node-only driver: %s", p.Action)
	}
	if !o.NodeOnly && p.Action == ExpandNodeOnly {
		fail("controller driver: ExpandNodeOnly")
	}
	// Rule 4.
	if p.Target.Cmp(o.PVCCap) < 0 {
		fail("target below status.capacity")
	}
	if !o.NodeOnly && p.Target.Cmp(o.PVCap) < 0 {
		fail("controller driver asked for less than the PV capacity")
	}
	// Rule 4 for node-only drivers: a plan below the PV capacity must say so (the controller
	// lowers the PV only on LowerPV), and LowerPV is only ever a KEP-1790 Case 2 recovery. This
	// used to accept LowerPV whenever a node-only target was below the PV, which blessed lowering
	// a PV an older resizer had raised for a node expansion that may be running.
	belowPV := p.Target.Cmp(o.PVCap) < 0
	if o.NodeOnly && p.Action == ExpandNodeOnly && belowPV && !p.LowerPV {
		fail("node-only plan below the PV capacity without lowerPV")
	}
	if p.LowerPV {
		if !o.NodeOnly || p.Action != ExpandNodeOnly || !belowPV {
			fail("lowerPV outside a node-only plan below the PV capacity")
		}
		if o.Legacy || !isCase2Recovery(o) {
			fail("lowerPV outside a KEP-1790 Case 2 recovery")
		}
	}
	if o.Legacy {
		if p.Recovery || p.LowerPV {
			fail("legacy: recovery or lowerPV")
		}
		if o.Spec.Cmp(o.PVCCap) <= 0 || p.Target.Cmp(o.Spec) < 0 || p.Target.Cmp(o.PVCap) < 0 {
			fail("legacy: expands only when spec > capacity, to at least spec and the PV capacity")
		}
		if o.Spec.Cmp(o.PVCap) <= 0 && o.FileSystemResizePending {
			fail("legacy: expanding while the PV covers spec and the node has the rest")
		}
		return
	}
	// Recovery is defined as a target below the previous allocation.
	if want := o.Alloc != nil && p.Target.Cmp(*o.Alloc) < 0; p.Recovery != want {
		fail("recovery = %v, want %v", p.Recovery, want)
	}
	// Rule 2.
	if o.State == v1.PersistentVolumeClaimNodeResizePending || o.State == v1.PersistentVolumeClaimNodeResizeInProgress {
		fail("acting while the node owns the PVC")
	}
	if mustKeepAlloc(o) && o.Alloc != nil && p.Target.Cmp(*o.Alloc) < 0 {
		fail("target lowered below alloc while the previous expansion may be in progress")
	}
	if o.State == v1.PersistentVolumeClaimNodeResizeInfeasible && !o.NodeOnly && p.Action != RedriveNode {
		fail("node failure after controller expansion must be re-driven")
	}
	if p.Action == RedriveNode && o.State != v1.PersistentVolumeClaimNodeResizeInfeasible {
		fail("RedriveNode outside NodeResizeInfeasible")
	}
}

func quantityPtr(p *resource.Quantity) string {
	if p == nil {
		return "<nil>"
	}
	return p.String()
}
