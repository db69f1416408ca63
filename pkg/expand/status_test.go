package expand

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-resizer/csi-resizer/pkg/internal/conditions"
)

func cond(t v1.PersistentVolumeClaimConditionType, reason string, at metav1.Time) v1.PersistentVolumeClaimCondition {
	return v1.PersistentVolumeClaimCondition{Type: t, Status: v1.ConditionTrue, Reason: reason, Message: reason + " message", LastProbeTime: at, LastTransitionTime: at}
}

// statusAt builds a PVC status: capacity, optional alloc ("" = absent), optional state.
func statusAt(capacity, alloc string, state v1.ClaimResourceStatus, conds ...v1.PersistentVolumeClaimCondition) v1.PersistentVolumeClaimStatus {
	st := v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound, Capacity: v1.ResourceList{v1.ResourceStorage: q(capacity)}, Conditions: conds}
	if alloc != "" {
		st.AllocatedResources = v1.ResourceList{v1.ResourceStorage: q(alloc)}
	}
	if state != "" {
		st.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{v1.ResourceStorage: state}
	}
	return st
}

func stateOf(st v1.PersistentVolumeClaimStatus) v1.ClaimResourceStatus {
	return st.AllocatedResourceStatuses[v1.ResourceStorage]
}

func wantCond(t *testing.T, st v1.PersistentVolumeClaimStatus, typ v1.PersistentVolumeClaimConditionType) *v1.PersistentVolumeClaimCondition {
	t.Helper()
	c := conditions.Find(st.Conditions, typ)
	if c == nil {
		t.Fatalf("no %s condition in %+v", typ, st.Conditions)
	}
	if c.Status != v1.ConditionTrue {
		t.Errorf("%s condition status = %s", typ, c.Status)
	}
	return c
}

func wantNoCond(t *testing.T, st v1.PersistentVolumeClaimStatus, typ v1.PersistentVolumeClaimConditionType) {
	t.Helper()
	if c := conditions.Find(st.Conditions, typ); c != nil {
		t.Errorf("%s condition present: %+v", typ, *c)
	}
}

// unchanged runs a transform on a copy of st and checks the input was not modified.
func unchanged(t *testing.T, st v1.PersistentVolumeClaimStatus, f func(v1.PersistentVolumeClaimStatus) v1.PersistentVolumeClaimStatus) v1.PersistentVolumeClaimStatus {
	t.Helper()
	in := *st.DeepCopy()
	out := f(in)
	if !apiequality.Semantic.DeepEqual(in, st) {
		t.Errorf("transform modified its input:\n%+v\nwas\n%+v", in, st)
	}
	return out
}

func planTo(size string) Plan { return Plan{Action: ExpandController, Target: q(size)} }

func TestStartedStatus(t *testing.T) {
	t.Run("alloc, ControllerResizeInProgress and Resizing in one status", func(t *testing.T) {
		st := statusAt("10Gi", "", "", cond(v1.PersistentVolumeClaimVolumeModifyingVolume, "Other", mt(0)))
		got := unchanged(t, st, func(s v1.PersistentVolumeClaimStatus) v1.PersistentVolumeClaimStatus {
			return StartedStatus(s, planTo("100Gi"), false, mt(5))
		})
		if a, ok := allocOf(got); !ok || a.Cmp(q("100Gi")) != 0 {
			t.Errorf("allocatedResources = %v", got.AllocatedResources)
		}
		if s := stateOf(got); s != v1.PersistentVolumeClaimControllerResizeInProgress {
			t.Errorf("state = %q", s)
		}
		c := wantCond(t, got, v1.PersistentVolumeClaimResizing)
		if c.Reason != ReasonExpansionInProgress || c.LastTransitionTime != mt(5) {
			t.Errorf("Resizing = %+v", *c)
		}
		if cap := got.Capacity[v1.ResourceStorage]; cap.Cmp(q("10Gi")) != 0 {
			t.Errorf("capacity changed to %s", cap.String())
		}
		wantCond(t, got, v1.PersistentVolumeClaimVolumeModifyingVolume)
	})

	t.Run("recovery lowers alloc to the target", func(t *testing.T) {
		st := statusAt("10Gi", "100Gi", v1.PersistentVolumeClaimControllerResizeInfeasible, cond(v1.PersistentVolumeClaimControllerResizeError, "OutOfRange", mt(1)))
		got := StartedStatus(st, planTo("20Gi"), false, mt(5))
		if a, _ := allocOf(got); a.Cmp(q("20Gi")) != 0 {
			t.Errorf("allocatedResources = %s, want 20Gi", a.String())
		}
		if s := stateOf(got); s != v1.PersistentVolumeClaimControllerResizeInProgress {
			t.Errorf("state = %q", s)
		}
	})

	for _, reason := range []string{"OutOfRange", "InvalidArgument", "NotFound", "Internal", "FailedPrecondition", "Unimplemented", "Unknown"} {
		t.Run("drops a final ControllerResizeError "+reason, func(t *testing.T) {
			st := statusAt("10Gi", "100Gi", v1.PersistentVolumeClaimControllerResizeInProgress, cond(v1.PersistentVolumeClaimControllerResizeError, reason, mt(1)))
			got := unchanged(t, st, func(s v1.PersistentVolumeClaimStatus) v1.PersistentVolumeClaimStatus {
				return StartedStatus(s, planTo("20Gi"), false, mt(5))
			})
			wantNoCond(t, got, v1.PersistentVolumeClaimControllerResizeError)
			// A crash now must read back as "uncertain" and keep the new target.
			pvc := &v1.PersistentVolumeClaim{Status: got, Spec: v1.PersistentVolumeClaimSpec{Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: q("15Gi")}}}}
			p := PlanExpansion(Observe(pvc, &v1.PersistentVolume{Spec: v1.PersistentVolumeSpec{Capacity: v1.ResourceList{v1.ResourceStorage: q("10Gi")}}}, false, false))
			wantPlan(t, "after a crash", p, ExpandController, "20Gi", false, false)
		})
	}

	for _, reason := range []string{"DeadlineExceeded", "Unavailable", "Canceled", "ResourceExhausted", "Aborted", ReasonUncertain, ""} {
		t.Run("keeps a transient ControllerResizeError "+fmt.Sprintf("%q", reason), func(t *testing.T) {
			before := cond(v1.PersistentVolumeClaimControllerResizeError, reason, mt(1))
			st := statusAt("10Gi", "100Gi", v1.PersistentVolumeClaimControllerResizeInProgress, before)
			got := StartedStatus(st, planTo("100Gi"), false, mt(5))
			c := wantCond(t, got, v1.PersistentVolumeClaimControllerResizeError)
			if *c != before {
				t.Errorf("transient condition changed: %+v, was %+v", *c, before)
			}
		})
	}

	t.Run("Resizing keeps its lastTransitionTime while True", func(t *testing.T) {
		st := StartedStatus(statusAt("10Gi", "", ""), planTo("100Gi"), false, mt(1))
		got := StartedStatus(st, planTo("100Gi"), false, mt(9))
		if c := wantCond(t, got, v1.PersistentVolumeClaimResizing); c.LastTransitionTime != mt(1) || c.LastProbeTime != mt(1) {
			t.Errorf("unchanged Resizing rewritten: %+v", *c)
		}
		if !apiequality.Semantic.DeepEqual(st, got) {
			t.Errorf("repeating StartedStatus changed the status:\n%+v\n%+v", st, got)
		}
		// A new target changes the message and probe time, not the transition time.
		got = StartedStatus(st, planTo("120Gi"), false, mt(9))
		if c := wantCond(t, got, v1.PersistentVolumeClaimResizing); c.LastTransitionTime != mt(1) || c.LastProbeTime != mt(9) {
			t.Errorf("Resizing after a new target: %+v", *c)
		}
		// A Resizing condition that was False transitions now.
		st.Conditions[0].Status = v1.ConditionFalse
		got = StartedStatus(st, planTo("100Gi"), false, mt(9))
		if c := wantCond(t, got, v1.PersistentVolumeClaimResizing); c.LastTransitionTime != mt(9) {
			t.Errorf("Resizing False -> True kept the old transition time: %+v", *c)
		}
	})

	t.Run("legacy never writes allocated*", func(t *testing.T) {
		got := StartedStatus(statusAt("10Gi", "", ""), planTo("100Gi"), true, mt(5))
		if got.AllocatedResources != nil || got.AllocatedResourceStatuses != nil {
			t.Errorf("legacy wrote %v %v", got.AllocatedResources, got.AllocatedResourceStatuses)
		}
		wantCond(t, got, v1.PersistentVolumeClaimResizing)
	})
}

func TestExpandedStatus(t *testing.T) {
	started := func() v1.PersistentVolumeClaimStatus {
		st := statusAt("10Gi", "", "",
			cond(v1.PersistentVolumeClaimVolumeModifyingVolume, "Other", mt(0)),
			cond(v1.PersistentVolumeClaimControllerResizeError, "DeadlineExceeded", mt(1)))
		return StartedStatus(st, planTo("100Gi"), false, mt(2))
	}

	t.Run("node expansion required: NodeResizePending and FileSystemResizePending", func(t *testing.T) {
		st := started()
		got := unchanged(t, st, func(s v1.PersistentVolumeClaimStatus) v1.PersistentVolumeClaimStatus {
			return ExpandedStatus(s, planTo("100Gi"), q("100Gi"), true, false, mt(5))
		})
		if s := stateOf(got); s != v1.PersistentVolumeClaimNodeResizePending {
			t.Errorf("state = %q", s)
		}
		if a, _ := allocOf(got); a.Cmp(q("100Gi")) != 0 {
			t.Errorf("alloc = %s", a.String())
		}
		if c := got.Capacity[v1.ResourceStorage]; c.Cmp(q("10Gi")) != 0 {
			t.Errorf("capacity = %s before the node expanded", c.String())
		}
		if c := wantCond(t, got, v1.PersistentVolumeClaimFileSystemResizePending); c.LastTransitionTime != mt(5) {
			t.Errorf("FileSystemResizePending = %+v", *c)
		}
		wantNoCond(t, got, v1.PersistentVolumeClaimResizing)
		wantNoCond(t, got, v1.PersistentVolumeClaimControllerResizeError)
		wantCond(t, got, v1.PersistentVolumeClaimVolumeModifyingVolume)
	})

	t.Run("no node expansion: capacity set, state cleared, resize conditions removed", func(t *testing.T) {
		st := started()
		st.Conditions = append(st.Conditions, cond(v1.PersistentVolumeClaimFileSystemResizePending, "Old", mt(1)))
		got := unchanged(t, st, func(s v1.PersistentVolumeClaimStatus) v1.PersistentVolumeClaimStatus {
			return ExpandedStatus(s, planTo("100Gi"), q("101Gi"), false, false, mt(5))
		})
		if c := got.Capacity[v1.ResourceStorage]; c.Cmp(q("101Gi")) != 0 {
			t.Errorf("capacity = %s, want the driver's 101Gi", c.String())
		}
		if _, ok := got.AllocatedResourceStatuses[v1.ResourceStorage]; ok || got.AllocatedResourceStatuses != nil {
			t.Errorf("state not cleared: %v", got.AllocatedResourceStatuses)
		}
		wantNoCond(t, got, v1.PersistentVolumeClaimResizing)
		wantNoCond(t, got, v1.PersistentVolumeClaimControllerResizeError)
		wantNoCond(t, got, v1.PersistentVolumeClaimFileSystemResizePending)
		wantCond(t, got, v1.PersistentVolumeClaimVolumeModifyingVolume)
		// The next decision is "done".
		pvc := &v1.PersistentVolumeClaim{Status: got, Spec: v1.PersistentVolumeClaimSpec{Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: q("100Gi")}}}}
		wantPlan(t, "after", PlanExpansion(Observe(pvc, nil, false, false)), Nothing, "", false, false)
	})

	// Issue 15, bug 2: a recovery to 3Gi on a backend that already holds 10Gi. The driver
	// answers 10Gi; quota counts max(request, allocated), so allocated must cover it.
	for _, node := range []bool{false, true} {
		t.Run(fmt.Sprintf("driver returns more than asked: allocated covers it (node expansion %v)", node), func(t *testing.T) {
			st := StartedStatus(statusAt("1Gi", "10Gi", v1.PersistentVolumeClaimControllerResizeInfeasible), planTo("3Gi"), false, mt(2))
			got := ExpandedStatus(st, planTo("3Gi"), q("10Gi"), node, false, mt(5))
			if a, _ := allocOf(got); a.Cmp(q("10Gi")) != 0 {
				t.Errorf("allocatedResources = %s, want 10Gi: never below the size the driver returned", a.String())
			}
		})
	}

	t.Run("no node expansion on a status without capacity", func(t *testing.T) {
		got := ExpandedStatus(v1.PersistentVolumeClaimStatus{}, planTo("5Gi"), q("5Gi"), false, false, mt(5))
		if c := got.Capacity[v1.ResourceStorage]; c.Cmp(q("5Gi")) != 0 {
			t.Errorf("capacity = %s", c.String())
		}
	})

	for _, node := range []bool{false, true} {
		t.Run(fmt.Sprintf("legacy never writes allocated* (node expansion %v)", node), func(t *testing.T) {
			st := statusAt("10Gi", "", "")
			got := ExpandedStatus(st, planTo("100Gi"), q("100Gi"), node, true, mt(5))
			if got.AllocatedResources != nil || got.AllocatedResourceStatuses != nil {
				t.Errorf("legacy wrote %v %v", got.AllocatedResources, got.AllocatedResourceStatuses)
			}
			if node {
				wantCond(t, got, v1.PersistentVolumeClaimFileSystemResizePending)
			} else if c := got.Capacity[v1.ResourceStorage]; c.Cmp(q("100Gi")) != 0 {
				t.Errorf("capacity = %s", c.String())
			}
		})
	}
}

// allCodes is codes.OK .. codes.Unauthenticated, the 17 gRPC codes.
func allCodes() []codes.Code {
	var cs []codes.Code
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		cs = append(cs, c)
	}
	return cs
}

func TestFailedStatus(t *testing.T) {
	for _, code := range allCodes() {
		if code == codes.OK {
			continue // status.Error(OK) is nil: not an error
		}
		t.Run(code.String(), func(t *testing.T) {
			st := StartedStatus(statusAt("10Gi", "", ""), planTo("100Gi"), false, mt(1))
			msg := "driver says " + code.String()
			ce := ClassifyError(fmt.Errorf("rpc ControllerExpandVolume: %w", status.Error(code, msg)))
			got := unchanged(t, st, func(s v1.PersistentVolumeClaimStatus) v1.PersistentVolumeClaimStatus {
				return FailedStatus(s, ce, false, mt(5))
			})
			c := wantCond(t, got, v1.PersistentVolumeClaimControllerResizeError)
			if c.Reason != code.String() || c.Message != msg {
				t.Errorf("condition reason/message = %q/%q, want %q/%q", c.Reason, c.Message, code.String(), msg)
			}
			if a, _ := allocOf(got); a.Cmp(q("100Gi")) != 0 {
				t.Errorf("alloc changed to %s", a.String())
			}
			switch ce.Class {
			case ClassInfeasible:
				if s := stateOf(got); s != v1.PersistentVolumeClaimControllerResizeInfeasible {
					t.Errorf("state = %q, want ControllerResizeInfeasible", s)
				}
				wantNoCond(t, got, v1.PersistentVolumeClaimResizing)
			case ClassFinal, ClassTransient:
				if s := stateOf(got); s != stateOf(st) {
					t.Errorf("state = %q, want unchanged %q", s, stateOf(st))
				}
			default:
				t.Errorf("class %q", ce.Class)
			}
		})
	}

	t.Run("non-gRPC error: reason Uncertain, the error text as message", func(t *testing.T) {
		st := StartedStatus(statusAt("10Gi", "", ""), planTo("100Gi"), false, mt(1))
		err := errors.New("connection closed")
		got := FailedStatus(st, ClassifyError(err), false, mt(5))
		c := wantCond(t, got, v1.PersistentVolumeClaimControllerResizeError)
		if c.Reason != ReasonUncertain || c.Message != err.Error() {
			t.Errorf("condition = %+v", *c)
		}
		if s := stateOf(got); s != v1.PersistentVolumeClaimControllerResizeInProgress {
			t.Errorf("state = %q", s)
		}
	})

	t.Run("the condition describes the last error and keeps its transition time", func(t *testing.T) {
		st := StartedStatus(statusAt("10Gi", "", ""), planTo("100Gi"), false, mt(1))
		st = FailedStatus(st, ClassifyError(status.Error(codes.Internal, "first")), false, mt(2))
		if at, ok := LastAttempt(&v1.PersistentVolumeClaim{Status: st}); !ok || at != mt(2) {
			t.Errorf("LastAttempt = %v %v, want %v", at, ok, mt(2))
		}
		st = FailedStatus(st, ClassifyError(status.Error(codes.Unavailable, "second")), false, mt(3))
		c := wantCond(t, st, v1.PersistentVolumeClaimControllerResizeError)
		if c.Reason != "Unavailable" || c.Message != "second" {
			t.Errorf("condition = %+v, want the last error", *c)
		}
		if c.LastTransitionTime != mt(2) || c.LastProbeTime != mt(3) {
			t.Errorf("times: transition %v probe %v, want %v %v", c.LastTransitionTime, c.LastProbeTime, mt(2), mt(3))
		}
		// The same error again still records the attempt.
		st = FailedStatus(st, ClassifyError(status.Error(codes.Unavailable, "second")), false, mt(4))
		if at, ok := LastAttempt(&v1.PersistentVolumeClaim{Status: st}); !ok || at != mt(4) {
			t.Errorf("LastAttempt = %v %v, want %v", at, ok, mt(4))
		}
		if c := wantCond(t, st, v1.PersistentVolumeClaimControllerResizeError); c.LastTransitionTime != mt(2) {
			t.Errorf("transition time moved to %v", c.LastTransitionTime)
		}
		if n := len(st.Conditions); n != 2 {
			t.Errorf("%d conditions, want Resizing and ControllerResizeError: %+v", n, st.Conditions)
		}
	})

	t.Run("legacy never writes allocated*", func(t *testing.T) {
		for _, code := range []codes.Code{codes.OutOfRange, codes.Internal, codes.Unavailable} {
			got := FailedStatus(statusAt("10Gi", "", ""), ClassifyError(status.Error(code, "x")), true, mt(5))
			if got.AllocatedResources != nil || got.AllocatedResourceStatuses != nil {
				t.Errorf("%s: legacy wrote %v %v", code, got.AllocatedResources, got.AllocatedResourceStatuses)
			}
			if c := wantCond(t, got, v1.PersistentVolumeClaimControllerResizeError); c.Reason != code.String() {
				t.Errorf("%s: reason %q", code, c.Reason)
			}
		}
	})
}

func TestLastAttemptWithoutError(t *testing.T) {
	pvc := &v1.PersistentVolumeClaim{Status: StartedStatus(statusAt("1Gi", "", ""), planTo("2Gi"), false, mt(1))}
	if at, ok := LastAttempt(pvc); ok {
		t.Errorf("LastAttempt = %v on a PVC without an error", at)
	}
}

func TestRedrivenStatus(t *testing.T) {
	st := statusAt("10Gi", "100Gi", v1.PersistentVolumeClaimNodeResizeInfeasible,
		cond(v1.PersistentVolumeClaimNodeResizeError, "", mt(1)),
		cond(v1.PersistentVolumeClaimFileSystemResizePending, ReasonNodeExpansionNeeded, mt(1)))
	p := Plan{Action: RedriveNode, Target: q("100Gi")}
	got := unchanged(t, st, func(s v1.PersistentVolumeClaimStatus) v1.PersistentVolumeClaimStatus {
		return RedrivenStatus(s, p, mt(5))
	})
	if s := stateOf(got); s != v1.PersistentVolumeClaimNodeResizePending {
		t.Errorf("state = %q", s)
	}
	if a, _ := allocOf(got); a.Cmp(q("100Gi")) != 0 {
		t.Errorf("alloc = %s", a.String())
	}
	wantNoCond(t, got, v1.PersistentVolumeClaimNodeResizeError)
	if c := wantCond(t, got, v1.PersistentVolumeClaimFileSystemResizePending); c.LastTransitionTime != mt(1) {
		t.Errorf("FileSystemResizePending transition time moved: %+v", *c)
	}
}

func TestObserve(t *testing.T) {
	pvc := &v1.PersistentVolumeClaim{
		Spec: v1.PersistentVolumeClaimSpec{Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: q("20Gi")}}},
		Status: statusAt("10Gi", "100Gi", v1.PersistentVolumeClaimControllerResizeInProgress,
			cond(v1.PersistentVolumeClaimControllerResizeError, "Internal", mt(1))),
	}
	pv := &v1.PersistentVolume{Spec: v1.PersistentVolumeSpec{Capacity: v1.ResourceList{v1.ResourceStorage: q("12Gi")}}}
	o := Observe(pvc, pv, true, false)
	if o.Spec.Cmp(q("20Gi")) != 0 || o.PVCCap.Cmp(q("10Gi")) != 0 || o.PVCap.Cmp(q("12Gi")) != 0 ||
		o.Alloc == nil || o.Alloc.Cmp(q("100Gi")) != 0 || o.State != v1.PersistentVolumeClaimControllerResizeInProgress ||
		o.LastError != ClassFinal || !o.NodeOnly || o.Legacy {
		t.Errorf("Observe = %+v (alloc %s)", o, quantityPtr(o.Alloc))
	}

	// The class of the last error comes from the condition reason.
	for reason, want := range map[string]ErrorClass{
		"OutOfRange": ClassInfeasible, "NotFound": ClassInfeasible, "Internal": ClassFinal,
		"DeadlineExceeded": ClassTransient, ReasonUncertain: ClassTransient, "": ClassTransient,
	} {
		pvc.Status.Conditions = []v1.PersistentVolumeClaimCondition{cond(v1.PersistentVolumeClaimControllerResizeError, reason, mt(1))}
		if got := Observe(pvc, pv, false, false).LastError; got != want {
			t.Errorf("reason %q: LastError = %q, want %q", reason, got, want)
		}
	}

	// FileSystemResizePending (read by the legacy path) only when the condition is True.
	for status, want := range map[v1.ConditionStatus]bool{v1.ConditionTrue: true, v1.ConditionFalse: false, v1.ConditionUnknown: false} {
		pvc.Status.Conditions = []v1.PersistentVolumeClaimCondition{{Type: v1.PersistentVolumeClaimFileSystemResizePending, Status: status}}
		if got := Observe(pvc, pv, false, true).FileSystemResizePending; got != want {
			t.Errorf("FileSystemResizePending condition %s: observed %v, want %v", status, got, want)
		}
	}

	// Absent fields.
	pvc.Status = v1.PersistentVolumeClaimStatus{}
	o = Observe(pvc, nil, false, true)
	if o.Alloc != nil || o.State != "" || o.LastError != ClassNone || !o.PVCap.IsZero() || !o.PVCCap.IsZero() || !o.Legacy || o.FileSystemResizePending {
		t.Errorf("Observe of an empty status = %+v", o)
	}
}
