package expand

import (
	"testing"

	"google.golang.org/grpc/codes"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// fuzzStates are the values the state byte selects: absent, the five API constants, and a
// string no component writes.
var fuzzStates = []v1.ClaimResourceStatus{
	"",
	v1.PersistentVolumeClaimControllerResizeInProgress,
	v1.PersistentVolumeClaimControllerResizeInfeasible,
	v1.PersistentVolumeClaimNodeResizePending,
	v1.PersistentVolumeClaimNodeResizeInProgress,
	v1.PersistentVolumeClaimNodeResizeInfeasible,
	"Garbage!",
}

// fuzzReason is the ControllerResizeError condition the error byte selects: none, one per gRPC
// code name, Uncertain, empty (another resizer), and an unknown reason.
func fuzzReason(sel byte) (reason string, present bool) {
	n := int(sel) % (1 + 17 + 3)
	switch {
	case n == 0:
		return "", false
	case n <= 17:
		return codes.Code(n - 1).String(), true
	case n == 18:
		return ReasonUncertain, true
	case n == 19:
		return "", true
	default:
		return "NotAGRPCCode", true
	}
}

func fuzzSize(n int64) resource.Quantity {
	if n < 0 {
		n = -(n + 1) // non-negative, no overflow
	}
	return *resource.NewQuantity(n, resource.BinarySI)
}

// fuzzObjects builds the PVC and PV the fuzz inputs describe.
func fuzzObjects(spec, alloc, pvCap, pvcCap int64, stateSel, errSel byte, hasAlloc bool) (*v1.PersistentVolumeClaim, *v1.PersistentVolume) {
	pvc := &v1.PersistentVolumeClaim{
		Spec: v1.PersistentVolumeClaimSpec{Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: fuzzSize(spec)}}},
		Status: v1.PersistentVolumeClaimStatus{
			Phase:    v1.ClaimBound,
			Capacity: v1.ResourceList{v1.ResourceStorage: fuzzSize(pvcCap)},
		},
	}
	if hasAlloc {
		pvc.Status.AllocatedResources = v1.ResourceList{v1.ResourceStorage: fuzzSize(alloc)}
	}
	if s := fuzzStates[int(stateSel)%len(fuzzStates)]; s != "" {
		pvc.Status.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{v1.ResourceStorage: s}
	}
	if reason, ok := fuzzReason(errSel); ok {
		pvc.Status.Conditions = []v1.PersistentVolumeClaimCondition{{
			Type: v1.PersistentVolumeClaimControllerResizeError, Status: v1.ConditionTrue, Reason: reason, Message: "driver message",
			LastProbeTime: mt(0), LastTransitionTime: mt(0),
		}}
	}
	pv := &v1.PersistentVolume{Spec: v1.PersistentVolumeSpec{Capacity: v1.ResourceList{v1.ResourceStorage: fuzzSize(pvCap)}}}
	if stateSel&0x80 != 0 {
		// The PV records the driver's answer for its capacity (a resizer stopped after the PV
		// write); bit 6 picks a record of another size, which must not be trusted.
		size := fuzzSize(pvCap)
		if stateSel&0x40 != 0 {
			size = fuzzSize(alloc)
		}
		pv.Annotations = map[string]string{AnnControllerExpanded: *ControllerExpanded(size, errSel&1 == 1)[AnnControllerExpanded]}
	}
	return pvc, pv
}

// FuzzPlanExpansion checks docs/design.md §2.3 rules 2 and 4 as invariants over arbitrary PVC states:
//   - ControllerResizeInProgress after a non-final error, NodeResizePending and
//     NodeResizeInProgress never lower the target below alloc (the Node* states do nothing);
//   - an action's target is never below status.capacity, and for a controller driver never
//     below the PV capacity;
//   - LowerPV only for node-only drivers, and only in a KEP-1790 Case 2 recovery; outside it a
//     node-only target is never below the PV capacity; Recovery exactly when the target is
//     below alloc;
//   - the status written before the call never holds allocatedResources below status.capacity;
//   - a crash right after that write leads to the same decision (Case 4).
func FuzzPlanExpansion(f *testing.F) {
	const gi = 1 << 30
	// spec, alloc, pvCap, pvcCap, state, error, nodeOnly, hasAlloc
	f.Add(int64(100*gi), int64(0), int64(10*gi), int64(10*gi), byte(0), byte(0), false, false)                  // Case 1/3: new expansion
	f.Add(int64(20*gi), int64(100*gi), int64(10*gi), int64(10*gi), byte(2), byte(12), false, true)              // Case 1: infeasible (OutOfRange), lowered
	f.Add(int64(20*gi), int64(100*gi), int64(10*gi), int64(10*gi), byte(1), byte(0), false, true)               // Case 3/4/5: in progress, lowered
	f.Add(int64(20*gi), int64(100*gi), int64(10*gi), int64(10*gi), byte(1), byte(5), false, true)               // DeadlineExceeded, lowered
	f.Add(int64(20*gi), int64(100*gi), int64(10*gi), int64(10*gi), byte(1), byte(14), false, true)              // Internal, lowered
	f.Add(int64(20*gi), int64(100*gi), int64(10*gi), int64(10*gi), byte(1), byte(18), false, true)              // Uncertain, lowered
	f.Add(int64(20*gi), int64(100*gi), int64(100*gi), int64(10*gi), byte(5), byte(0), true, true)               // Case 2: node-only, node failed
	f.Add(int64(20*gi), int64(100*gi), int64(100*gi), int64(10*gi), byte(5), byte(0), false, true)              // node failed after controller expansion
	f.Add(int64(20*gi), int64(100*gi), int64(100*gi), int64(10*gi), byte(3), byte(0), true, true)               // node pending
	f.Add(int64(20*gi), int64(20*gi), int64(100*gi), int64(10*gi), byte(1), byte(0), true, true)                // Case 2 crash before lowering the PV
	f.Add(int64(11*gi), int64(0), int64(12*gi), int64(10*gi), byte(0), byte(0), true, false)                    // node-only, PV raised by an older resizer: keep it
	f.Add(int64(20*gi), int64(100*gi), int64(100*gi), int64(10*gi), byte(1), byte(14), true, true)              // node-only crash after the PV write, final error: keep it
	f.Add(int64(20*gi), int64(100*gi), int64(10*gi), int64(10*gi), byte(6), byte(20), false, true)              // garbage state and reason
	f.Add(int64(10100000000), int64(0), int64(10100000000), int64(10100000000), byte(0), byte(0), false, false) // Case 0
	f.Fuzz(func(t *testing.T, spec, alloc, pvCap, pvcCap int64, stateSel, errSel byte, nodeOnly, hasAlloc bool) {
		pvc, pv := fuzzObjects(spec, alloc, pvCap, pvcCap, stateSel, errSel, hasAlloc)
		o := Observe(pvc, pv, nodeOnly, false)
		p := PlanExpansion(o)
		checkPlanInvariants(t, o, p)

		// The invariants of docs/design.md §2.3 rules 2 and 4, stated on their own.
		if (o.State == v1.PersistentVolumeClaimNodeResizePending || o.State == v1.PersistentVolumeClaimNodeResizeInProgress) && p.Action != Nothing {
			t.Fatalf("state %s: %s", o.State, p.Action)
		}
		if o.State == v1.PersistentVolumeClaimControllerResizeInProgress && !o.LastError.IsFinal() && o.Alloc != nil &&
			p.Action != Nothing && p.Target.Cmp(*o.Alloc) < 0 {
			t.Fatalf("in progress after a %q error: target %s below alloc %s", o.LastError, p.Target.String(), o.Alloc.String())
		}
		if p.Action != Nothing && p.Target.Cmp(o.PVCCap) < 0 {
			t.Fatalf("target %s below status.capacity %s", p.Target.String(), o.PVCCap.String())
		}
		if !nodeOnly && p.Action != Nothing && p.Target.Cmp(o.PVCap) < 0 {
			t.Fatalf("controller driver asked for %s below the PV capacity %s", p.Target.String(), o.PVCap.String())
		}
		if p.LowerPV && !nodeOnly {
			t.Fatal("LowerPV on a controller driver")
		}
		if p.LowerPV && !isCase2Recovery(o) {
			t.Fatalf("LowerPV to %s (PV %s) outside a Case 2 recovery: state %q alloc %s",
				p.Target.String(), o.PVCap.String(), o.State, quantityPtr(o.Alloc))
		}
		if nodeOnly && !isCase2Recovery(o) && p.Action != Nothing && p.Target.Cmp(o.PVCap) < 0 {
			t.Fatalf("node-only target %s below the PV capacity %s outside a Case 2 recovery", p.Target.String(), o.PVCap.String())
		}
		if p.Recovery != (p.Action != Nothing && o.Alloc != nil && p.Target.Cmp(*o.Alloc) < 0) {
			t.Fatalf("recovery=%v, target %s, alloc %s", p.Recovery, p.Target.String(), quantityPtr(o.Alloc))
		}

		switch p.Action {
		case ExpandController, ExpandNodeOnly:
			st := StartedStatus(pvc.Status, p, false, mt(1))
			checkStartedStatus(t, pvc.Status, st, p, false)
			// A crash now: the restarted resizer must carry on with the same target.
			crashed := pvc.DeepCopy()
			crashed.Status = st
			o2 := Observe(crashed, pv, nodeOnly, false)
			p2 := PlanExpansion(o2)
			checkPlanInvariants(t, o2, p2)
			// The same action, or the call replaced by the answer the PV records for that size.
			sameAction := p2.Action == p.Action || p.Action == ExpandController && p2.Action == RecordExpanded
			if !sameAction || p2.Target.Cmp(p.Target) != 0 || p2.LowerPV != p.LowerPV {
				t.Fatalf("after a crash following StartedStatus: %s %s lowerPV=%v, before: %s %s lowerPV=%v",
					p2.Action, p2.Target.String(), p2.LowerPV, p.Action, p.Target.String(), p.LowerPV)
			}
		case RedriveNode:
			st := RedrivenStatus(pvc.Status, p, mt(1))
			checkAllocNotBelowCapacity(t, st)
			if s := st.AllocatedResourceStatuses[v1.ResourceStorage]; s != v1.PersistentVolumeClaimNodeResizePending {
				t.Fatalf("re-driven state %q", s)
			}
		}
	})
}

// benchObserved are the decisions the resizer makes most: a new expansion, a retry in
// progress, a recovery after an infeasible error, a node-only recovery, and "nothing to do".
func benchObserved() []Observed {
	return []Observed{
		{Spec: q("100Gi"), PVCap: q("10Gi"), PVCCap: q("10Gi")},
		{Spec: q("20Gi"), Alloc: qp("100Gi"), State: v1.PersistentVolumeClaimControllerResizeInProgress, PVCap: q("10Gi"), PVCCap: q("10Gi"), LastError: ClassTransient},
		{Spec: q("20Gi"), Alloc: qp("100Gi"), State: v1.PersistentVolumeClaimControllerResizeInfeasible, PVCap: q("10Gi"), PVCCap: q("10Gi"), LastError: ClassInfeasible},
		{Spec: q("20Gi"), Alloc: qp("100Gi"), State: v1.PersistentVolumeClaimNodeResizeInfeasible, PVCap: q("100Gi"), PVCCap: q("10Gi"), NodeOnly: true},
		{Spec: q("10Gi"), Alloc: qp("10Gi"), PVCap: q("10Gi"), PVCCap: q("10Gi")},
	}
}

func BenchmarkPlanExpansion(b *testing.B) {
	obs := benchObserved()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		p := PlanExpansion(obs[i%len(obs)])
		if p.Why == "" {
			b.Fatal("empty plan")
		}
	}
}

// BenchmarkObservePlanStart is the whole per-PVC decision: read the objects, plan, build the
// status to write.
func BenchmarkObservePlanStart(b *testing.B) {
	pvc, pv := fuzzObjects(20<<30, 100<<30, 10<<30, 10<<30, 2, 12, true)
	b.ReportAllocs()
	for b.Loop() {
		p := PlanExpansion(Observe(pvc, pv, false, false))
		st := StartedStatus(pvc.Status, p, false, mt(1))
		if len(st.Conditions) == 0 {
			b.Fatal("no conditions")
		}
	}
}
