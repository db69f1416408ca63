package modify

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-resizer/csi-resizer/pkg/expand"
	"github.com/csi-resizer/csi-resizer/pkg/internal/conditions"
)

const driver = "hostpath.csi.k8s.io"

func lookup(names ...string) ClassLookup {
	m := map[string]*storagev1.VolumeAttributesClass{}
	for _, n := range names {
		m[n] = &storagev1.VolumeAttributesClass{ObjectMeta: metav1.ObjectMeta{Name: n}, DriverName: driver, Parameters: map[string]string{"iops": n}}
	}
	m["other"] = &storagev1.VolumeAttributesClass{ObjectMeta: metav1.ObjectMeta{Name: "other"}, DriverName: "ebs.csi.aws.com"}
	return func(name string) *storagev1.VolumeAttributesClass { return m[name] }
}

const (
	inProgress = v1.PersistentVolumeClaimModifyVolumeInProgress
	pending    = v1.PersistentVolumeClaimModifyVolumePending
	infeasible = v1.PersistentVolumeClaimModifyVolumeInfeasible
)

// TestDecide has one case per rule of docs/design.md §2.11.
func TestDecide(t *testing.T) {
	classes := lookup("gold", "silver", "bronze")
	cases := []struct {
		name   string
		o      Observed
		action Action
		target string
	}{
		{"no class asked", Observed{}, Nothing, ""},
		{"class already current", Observed{Spec: "gold", Current: "gold"}, Nothing, ""},
		{"first class", Observed{Spec: "gold"}, Modify, "gold"},
		{"new class", Observed{Spec: "gold", Current: "silver"}, Modify, "gold"},
		{"rule 13: missing class is pending", Observed{Spec: "platinum", Current: "silver"}, MarkPending, "platinum"},
		{"rule 13: another driver's class is infeasible", Observed{Spec: "other", Current: "silver"}, MarkInfeasible, "other"},
		{"rule 13: infeasible other driver's class rolled back", Observed{Spec: "silver", Current: "silver", Status: v1.PersistentVolumeClaimModifyVolumeInfeasible, Target: "other", LastError: expand.ClassInfeasible}, Cancel, "silver"},
		{"rule 13: pending class created", Observed{Spec: "gold", Current: "silver", Status: pending, Target: "gold"}, Modify, "gold"},
		{"rule 13: pending, another class asked", Observed{Spec: "bronze", Current: "silver", Status: pending, Target: "platinum"}, Modify, "bronze"},
		{"rule 14: restart during the call keeps the target", Observed{Spec: "bronze", Current: "silver", Status: inProgress, Target: "gold"}, Modify, "gold"},
		{"rule 14: transient error keeps the target", Observed{Spec: "bronze", Current: "silver", Status: inProgress, Target: "gold", LastError: expand.ClassTransient}, Modify, "gold"},
		{"rule 14: transient error keeps the target over a rollback", Observed{Spec: "silver", Current: "silver", Status: inProgress, Target: "gold", LastError: expand.ClassTransient}, Modify, "gold"},
		{"rule 20: in-flight class deleted is given up", Observed{Spec: "bronze", Current: "silver", Status: inProgress, Target: "platinum"}, GiveUp, "platinum"},
		{"rule 20: in-flight after a transient error, class deleted", Observed{Spec: "platinum", Current: "silver", Status: inProgress, Target: "platinum", LastError: expand.ClassTransient}, GiveUp, "platinum"},
		{"rule 20: given up, another class asked", Observed{Spec: "bronze", Current: "silver", Status: inProgress, Target: "platinum", LastError: ClassifyReason(ReasonClassDeleted)}, Modify, "bronze"},
		{"rule 20: given up, spec back to current calls for it", Observed{Spec: "silver", Current: "silver", Status: inProgress, Target: "platinum", LastError: ClassifyReason(ReasonClassDeleted)}, Modify, "silver"},
		{"rule 20: given up, spec still names the deleted class", Observed{Spec: "platinum", Current: "silver", Status: inProgress, Target: "platinum", LastError: ClassifyReason(ReasonClassDeleted)}, MarkPending, "platinum"},
		{"rule 20: pending after a give-up, rolled back: a call", Observed{Spec: "silver", Current: "silver", Status: pending, Target: "platinum", LastError: ClassifyReason(ReasonClassDeleted)}, Modify, "silver"},
		{"rule 20: pending after a give-up, first class unset: cancel", Observed{Status: pending, Target: "platinum", LastError: expand.ClassFinal}, Cancel, ""},
		{"rule 20: pending after a give-up, the class created again", Observed{Spec: "gold", Current: "silver", Status: pending, Target: "gold", LastError: expand.ClassFinal}, Modify, "gold"},
		{"rule 15: final error follows the spec", Observed{Spec: "bronze", Current: "silver", Status: inProgress, Target: "gold", LastError: expand.ClassFinal}, Modify, "bronze"},
		{"rule 15: final error retries the same class", Observed{Spec: "gold", Current: "silver", Status: inProgress, Target: "gold", LastError: expand.ClassFinal}, Modify, "gold"},
		{"rule 15: final error, spec back to current calls for it", Observed{Spec: "silver", Current: "silver", Status: inProgress, Target: "gold", LastError: expand.ClassFinal}, Modify, "silver"},
		{"rule 16: infeasible retried on the same class", Observed{Spec: "gold", Current: "silver", Status: infeasible, Target: "gold", LastError: expand.ClassInfeasible}, Modify, "gold"},
		{"rule 16: infeasible, new class", Observed{Spec: "bronze", Current: "silver", Status: infeasible, Target: "gold", LastError: expand.ClassInfeasible}, Modify, "bronze"},
		{"rule 17: infeasible rolled back", Observed{Spec: "silver", Current: "silver", Status: infeasible, Target: "gold", LastError: expand.ClassInfeasible}, Cancel, "silver"},
		{"rule 17: infeasible first class unset", Observed{Status: infeasible, Target: "gold", LastError: expand.ClassInfeasible}, Cancel, ""},
		{"rule 17: pending rolled back", Observed{Spec: "silver", Current: "silver", Status: pending, Target: "platinum"}, Cancel, "silver"},
		{"rule 17: unset after a final error keeps going", Observed{Status: inProgress, Target: "gold", LastError: expand.ClassFinal}, Modify, "gold"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := Decide(tc.o, classes, driver)
			if p.Action != tc.action || p.Target != tc.target {
				t.Fatalf("Decide(%+v) = %s %q (%s), want %s %q", tc.o, p.Action, p.Target, p.Why, tc.action, tc.target)
			}
			if p.Action == Modify && (p.Class == nil || p.Class.Name != p.Target) {
				t.Fatalf("Modify plan without its class: %+v", p)
			}
		})
	}
}

func TestClassifyError(t *testing.T) {
	cases := []struct {
		err    error
		class  expand.ErrorClass
		reason string
	}{
		{status.Error(codes.InvalidArgument, "bad iops"), expand.ClassInfeasible, "InvalidArgument"},
		{status.Error(codes.OutOfRange, "no"), expand.ClassFinal, "OutOfRange"},
		{status.Error(codes.NotFound, "no volume"), expand.ClassFinal, "NotFound"},
		{status.Error(codes.Internal, "boom"), expand.ClassFinal, "Internal"},
		{status.Error(codes.DeadlineExceeded, "slow"), expand.ClassTransient, "DeadlineExceeded"},
		{status.Error(codes.Unavailable, "down"), expand.ClassTransient, "Unavailable"},
		{errors.New("connection reset"), expand.ClassTransient, expand.ReasonUncertain},
	}
	for _, tc := range cases {
		ce := ClassifyError(tc.err)
		if ce.Class != tc.class || ce.Reason != tc.reason {
			t.Errorf("ClassifyError(%v) = %s/%s, want %s/%s", tc.err, ce.Class, ce.Reason, tc.class, tc.reason)
		}
		if got := ClassifyReason(ce.Reason); got != tc.class {
			t.Errorf("ClassifyReason(%q) = %s, want %s: a restart would decide differently", ce.Reason, got, tc.class)
		}
	}
	if got := ClassifyReason(""); got != expand.ClassTransient {
		t.Errorf("an unknown reason must keep the target (transient), got %s", got)
	}
}

// TestStatusSteps walks a modification through its writes and checks what each leaves behind,
// the conditions of expansion included.
func TestStatusSteps(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC))
	silver := "silver"
	st := v1.PersistentVolumeClaimStatus{
		CurrentVolumeAttributesClassName: &silver,
		Conditions:                       []v1.PersistentVolumeClaimCondition{{Type: v1.PersistentVolumeClaimResizing, Status: v1.ConditionTrue}},
	}
	started := StartedStatus(st, "gold", now)
	if o := observeStatus(started); o.Status != inProgress || o.Target != "gold" || o.Current != "silver" || !o.InFlight() {
		t.Fatalf("after StartedStatus: %+v", o)
	}
	failed := FailedStatus(started, "gold", ClassifyError(status.Error(codes.InvalidArgument, "iops too high")), now)
	if o := observeStatus(failed); o.Status != infeasible || o.LastError != expand.ClassInfeasible || o.Current != "silver" {
		t.Fatalf("after an infeasible error: %+v", o)
	}
	if len(failed.Conditions) != 3 {
		t.Fatalf("want Resizing, ModifyingVolume and ModifyVolumeError, got %+v", failed.Conditions)
	}
	transient := FailedStatus(StartedStatus(failed, "gold", now), "gold", ClassifyError(status.Error(codes.Unavailable, "x")), now)
	if o := observeStatus(transient); o.Status != inProgress || !o.InFlight() {
		t.Fatalf("a transient error must leave the target in flight: %+v", o)
	}
	done := SucceededStatus(transient, "gold")
	if o := observeStatus(done); o.Current != "gold" || o.Status != "" || o.Wants() {
		t.Fatalf("after success: %+v", o)
	}
	if len(done.Conditions) != 1 || done.Conditions[0].Type != v1.PersistentVolumeClaimResizing {
		t.Fatalf("success must keep only expansion's condition, got %+v", done.Conditions)
	}
	if c := CancelledStatus(failed); c.ModifyVolumeStatus != nil || len(c.Conditions) != 1 || *c.CurrentVolumeAttributesClassName != "silver" {
		t.Fatalf("after cancel: %+v", c)
	}
	if st.ModifyVolumeStatus != nil || len(st.Conditions) != 1 {
		t.Fatalf("the observed status was changed in place: %+v", st)
	}
}

// TestClassGone: a modification whose class was deleted is given up only once the latest call
// for it is past its deadline, counted from that attempt's start (ModifyingVolume's
// lastProbeTime, bumped by every attempt), and then reads back as a final answer.
func TestClassGone(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	first := StartedStatus(v1.PersistentVolumeClaimStatus{}, "gold", metav1.NewTime(t0))
	failed := FailedStatus(first, "gold", ClassifyError(status.Error(codes.Unavailable, "x")), metav1.NewTime(t0.Add(10*time.Second)))
	retry := StartedStatus(failed, "gold", metav1.NewTime(t0.Add(time.Minute)))
	timeout := 30 * time.Second
	for _, tc := range []struct {
		name string
		st   v1.PersistentVolumeClaimStatus
		now  time.Time
		want time.Duration
	}{
		{"during the first call", first, t0.Add(10 * time.Second), 21 * time.Second},
		{"first call past its deadline", first, t0.Add(31 * time.Second), 0},
		{"a retry started later counts from its own start", retry, t0.Add(61 * time.Second), 30 * time.Second},
		{"no ModifyingVolume", v1.PersistentVolumeClaimStatus{}, t0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ClassGoneWait(&v1.PersistentVolumeClaim{Status: tc.st}, timeout, tc.now); got != tc.want {
				t.Fatalf("ClassGoneWait = %s, want %s", got, tc.want)
			}
		})
	}
	gone := ClassGoneStatus(retry, "gold", metav1.NewTime(t0.Add(2*time.Minute)))
	o := observeStatus(gone)
	if o.Status != inProgress || o.Target != "gold" || o.LastError != expand.ClassFinal || o.InFlight() {
		t.Fatalf("after ClassGoneStatus: %+v, want InProgress for gold with a final error, not in flight", o)
	}
	c := conditions.Find(gone.Conditions, v1.PersistentVolumeClaimVolumeModifyVolumeError)
	if c == nil || c.Reason != ReasonClassDeleted || !strings.Contains(c.Message, "gold was deleted") {
		t.Fatalf("ModifyVolumeError %+v, want reason %s naming the class", c, ReasonClassDeleted)
	}
}

func observeStatus(st v1.PersistentVolumeClaimStatus) Observed {
	return Observe(&v1.PersistentVolumeClaim{Status: st})
}

func TestRetryWait(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	r := expand.Retry{Start: time.Second, Max: 5 * time.Minute}
	pvcWith := func(st v1.PersistentVolumeClaimStatus) *v1.PersistentVolumeClaim {
		return &v1.PersistentVolumeClaim{Status: st}
	}
	started := StartedStatus(v1.PersistentVolumeClaimStatus{}, "gold", metav1.NewTime(t0))
	infeasibleAt := FailedStatus(started, "gold", ClassifyError(status.Error(codes.InvalidArgument, "x")), metav1.NewTime(t0.Add(10*time.Second)))
	transientAt := FailedStatus(started, "gold", ClassifyError(status.Error(codes.Unavailable, "x")), metav1.NewTime(t0.Add(10*time.Second)))
	cases := []struct {
		name string
		st   v1.PersistentVolumeClaimStatus
		plan Plan
		now  time.Time
		want time.Duration
	}{
		{"infeasible waits retry-interval-max", infeasibleAt, Plan{Action: Modify, Target: "gold"}, t0.Add(10 * time.Second), 5*time.Minute + time.Second},
		{"infeasible, another class goes at once", infeasibleAt, Plan{Action: Modify, Target: "bronze"}, t0.Add(10 * time.Second), 0},
		{"infeasible, wait over", infeasibleAt, Plan{Action: Modify, Target: "gold"}, t0.Add(10*time.Second + 5*time.Minute + time.Second), 0},
		{"transient backs off with the failing time", transientAt, Plan{Action: Modify, Target: "gold"}, t0.Add(10 * time.Second), 12 * time.Second},
		{"no failure recorded", started, Plan{Action: Modify, Target: "gold"}, t0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pvc := pvcWith(tc.st)
			if got := RetryWait(pvc, Observe(pvc), tc.plan, r, tc.now); got != tc.want {
				t.Fatalf("RetryWait = %s, want %s", got, tc.want)
			}
		})
	}
}
