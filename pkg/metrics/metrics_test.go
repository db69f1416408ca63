package metrics

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
)

func newRegistry(t *testing.T, list func() []ClaimState) (*Recorder, metrics.KubeRegistry) {
	t.Helper()
	reg := metrics.NewKubeRegistry()
	r := NewRecorder("hostpath.csi.k8s.io")
	r.Register(reg)
	reg.CustomMustRegister(NewStateCollector("hostpath.csi.k8s.io", list))
	return r, reg
}

func TestRecoveryCountedByOutcome(t *testing.T) {
	r, reg := newRegistry(t, func() []ClaimState { return nil })
	r.Recovery(true)
	r.Recovery(false)
	r.Recovery(true)
	want := `
# HELP csi_resizer_volume_recovery_total [ALPHA] Expansions whose target was below the previously allocated size (KEP-1790 recoveries), by outcome.
# TYPE csi_resizer_volume_recovery_total counter
csi_resizer_volume_recovery_total{driver_name="hostpath.csi.k8s.io",state="failure"} 1
csi_resizer_volume_recovery_total{driver_name="hostpath.csi.k8s.io",state="success"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "csi_resizer_volume_recovery_total"); err != nil {
		t.Fatal(err)
	}
}

func TestExpandErrorsAndTransitions(t *testing.T) {
	r, reg := newRegistry(t, func() []ClaimState { return nil })
	r.ExpandError("OutOfRange", "infeasible")
	r.ExpandError("OutOfRange", "infeasible")
	r.ExpandError("DeadlineExceeded", "transient")
	r.Transition("", v1.PersistentVolumeClaimControllerResizeInProgress)
	r.Transition(v1.PersistentVolumeClaimControllerResizeInProgress, v1.PersistentVolumeClaimControllerResizeInfeasible)
	r.Transition(v1.PersistentVolumeClaimControllerResizeInProgress, v1.PersistentVolumeClaimControllerResizeInProgress) // not a transition
	want := map[string]float64{
		`csi_resizer_controller_expand_errors_total{class="infeasible",driver_name="hostpath.csi.k8s.io",grpc_code="OutOfRange"}`:                  2,
		`csi_resizer_controller_expand_errors_total{class="transient",driver_name="hostpath.csi.k8s.io",grpc_code="DeadlineExceeded"}`:             1,
		`csi_resizer_state_transitions_total{driver_name="hostpath.csi.k8s.io",from="ControllerResizeInProgress",to="ControllerResizeInfeasible"}`: 1,
		`csi_resizer_state_transitions_total{driver_name="hostpath.csi.k8s.io",from="none",to="ControllerResizeInProgress"}`:                       1,
	}
	got := counterValues(t, reg, "csi_resizer_controller_expand_errors_total", "csi_resizer_state_transitions_total")
	for series, v := range got {
		if v != want[series] {
			t.Errorf("%s = %g, want %g", series, v, want[series])
		}
	}
	for series := range want {
		if _, ok := got[series]; !ok {
			t.Errorf("%s is not exported", series)
		}
	}
}

// Every outcome and error code is exported at 0 from the start, so that rate() and increase()
// see the first event (a series born at 1 hides it); codes keep their class.
func TestOutcomesAndCodesStartAtZero(t *testing.T) {
	_, reg := newRegistry(t, func() []ClaimState { return nil })
	got := counterValues(t, reg, "csi_resizer_volume_recovery_total", "csi_resizer_controller_expand_errors_total")
	for _, series := range []string{
		`csi_resizer_volume_recovery_total{driver_name="hostpath.csi.k8s.io",state="success"}`,
		`csi_resizer_volume_recovery_total{driver_name="hostpath.csi.k8s.io",state="failure"}`,
		`csi_resizer_controller_expand_errors_total{class="infeasible",driver_name="hostpath.csi.k8s.io",grpc_code="OutOfRange"}`,
		`csi_resizer_controller_expand_errors_total{class="infeasible",driver_name="hostpath.csi.k8s.io",grpc_code="InvalidArgument"}`,
		`csi_resizer_controller_expand_errors_total{class="infeasible",driver_name="hostpath.csi.k8s.io",grpc_code="NotFound"}`,
		`csi_resizer_controller_expand_errors_total{class="transient",driver_name="hostpath.csi.k8s.io",grpc_code="DeadlineExceeded"}`,
		`csi_resizer_controller_expand_errors_total{class="transient",driver_name="hostpath.csi.k8s.io",grpc_code="Uncertain"}`,
		`csi_resizer_controller_expand_errors_total{class="final",driver_name="hostpath.csi.k8s.io",grpc_code="Internal"}`,
	} {
		if v, ok := got[series]; !ok || v != 0 {
			t.Errorf("%s = %g (exported %v), want exported at 0", series, v, ok)
		}
	}
	// 2 outcomes + 16 gRPC error codes + Uncertain, nothing else (no code listed twice).
	if len(got) != 2+16+1 {
		t.Errorf("%d series exported at start, want %d: %v", len(got), 2+16+1, got)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	results := 0
	for _, mf := range mfs {
		if mf.GetName() == "csi_resizer_expansion_duration_seconds" {
			for _, m := range mf.GetMetric() {
				results++
				if m.GetHistogram().GetSampleCount() != 0 {
					t.Errorf("duration histogram starts with %d observations", m.GetHistogram().GetSampleCount())
				}
			}
		}
	}
	if results != 2 {
		t.Errorf("duration histogram exports %d result series at start, want 2 (success, failure)", results)
	}
}

// counterValues gathers the counters named, keyed by their series in exposition syntax.
func counterValues(t *testing.T, reg metrics.KubeRegistry, names ...string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if !slices.Contains(names, mf.GetName()) {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			out[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = m.GetCounter().GetValue()
		}
	}
	return out
}

func TestExpansionDurationHistogram(t *testing.T) {
	r, reg := newRegistry(t, func() []ClaimState { return nil })
	r.ExpansionDone(true, 3*time.Second)
	r.ExpansionDone(false, 2*time.Hour)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "csi_resizer_expansion_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" {
					counts[l.GetValue()] = m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	if counts["success"] != 1 || counts["failure"] != 1 {
		t.Fatalf("want one success and one failure observation, got %v", counts)
	}
}

// The gauges are computed from whatever list returns at each scrape: the values, the zeros of
// empty states, and a per-PVC series that goes away when its PVC leaves the infeasible state.
// (That a restarted resizer exports the same values is tested against a real controller in
// pkg/expandcontroller, TestStateGaugesAfterRestart.)
func TestStateGaugesComputedAtScrape(t *testing.T) {
	state := []ClaimState{
		{Namespace: "a", Name: "stuck", State: v1.PersistentVolumeClaimControllerResizeInfeasible},
		{Namespace: "b", Name: "node", State: v1.PersistentVolumeClaimNodeResizeInfeasible},
		{Namespace: "a", Name: "busy", State: v1.PersistentVolumeClaimControllerResizeInProgress},
		{Namespace: "a", Name: "idle"},
	}
	list := func() []ClaimState { return state }
	want := `
# HELP csi_resizer_volume_infeasible [ALPHA] 1 for each PVC of this driver whose expansion is now infeasible (ControllerResizeInfeasible or NodeResizeInfeasible).
# TYPE csi_resizer_volume_infeasible gauge
csi_resizer_volume_infeasible{driver_name="hostpath.csi.k8s.io",namespace="a",persistentvolumeclaim="stuck"} 1
csi_resizer_volume_infeasible{driver_name="hostpath.csi.k8s.io",namespace="b",persistentvolumeclaim="node"} 1
# HELP csi_resizer_volumes [ALPHA] PVCs of this driver per resize state (allocatedResourceStatuses.storage; none = absent).
# TYPE csi_resizer_volumes gauge
csi_resizer_volumes{driver_name="hostpath.csi.k8s.io",state="ControllerResizeInProgress"} 1
csi_resizer_volumes{driver_name="hostpath.csi.k8s.io",state="ControllerResizeInfeasible"} 1
csi_resizer_volumes{driver_name="hostpath.csi.k8s.io",state="NodeResizeInProgress"} 0
csi_resizer_volumes{driver_name="hostpath.csi.k8s.io",state="NodeResizeInfeasible"} 1
csi_resizer_volumes{driver_name="hostpath.csi.k8s.io",state="NodeResizePending"} 0
csi_resizer_volumes{driver_name="hostpath.csi.k8s.io",state="none"} 1
`
	_, reg := newRegistry(t, list)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "csi_resizer_volume_infeasible", "csi_resizer_volumes"); err != nil {
		t.Fatal(err)
	}
	// The stuck PVCs recover: the next scrape of the same registry has no per-PVC series.
	state = state[2:]
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "csi_resizer_volume_infeasible" && len(mf.GetMetric()) != 0 {
			t.Fatalf("infeasible series after recovery: %v, want none", mf.GetMetric())
		}
	}
}

// list returns nil while the informer cache has not synced: neither gauge is exported then, not
// even the zeros, because a partial cache would report infeasible PVCs as gone. A synced cache
// with no PVCs (an empty, non-nil list) exports every state at 0.
func TestStateGaugesAbsentUntilListAnswers(t *testing.T) {
	var state []ClaimState
	_, reg := newRegistry(t, func() []ClaimState { return state })
	series := func() int {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, mf := range mfs {
			if mf.GetName() == "csi_resizer_volumes" || mf.GetName() == "csi_resizer_volume_infeasible" {
				n += len(mf.GetMetric())
			}
		}
		return n
	}
	if n := series(); n != 0 {
		t.Errorf("list not answering (nil): %d series exported, want none", n)
	}
	state = []ClaimState{}
	if n := series(); n != len(AllStates) {
		t.Errorf("synced, no PVCs: %d series exported, want %d (every state at 0)", n, len(AllStates))
	}
}

// histogram returns the sample count and sum of the histogram name per result label.
func histogram(t *testing.T, reg metrics.KubeRegistry, name string) (map[string]uint64, map[string]float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts, sums := map[string]uint64{}, map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" {
					counts[l.GetValue()] = m.GetHistogram().GetSampleCount()
					sums[l.GetValue()] = m.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	return counts, sums
}

// Every modification result and ControllerModifyVolume error code is exported at 0 from the
// start, each code with its class for modification (docs/design.md §2.11 rule 16), which is not
// expansion's: OutOfRange and NotFound are final here, only InvalidArgument is infeasible.
func TestModifyOutcomesAndCodesStartAtZero(t *testing.T) {
	_, reg := newRegistry(t, func() []ClaimState { return nil })
	got := counterValues(t, reg, "csi_resizer_volume_modifications_total", "csi_resizer_controller_modify_errors_total")
	for _, series := range []string{
		`csi_resizer_volume_modifications_total{driver_name="hostpath.csi.k8s.io",result="success"}`,
		`csi_resizer_volume_modifications_total{driver_name="hostpath.csi.k8s.io",result="infeasible"}`,
		`csi_resizer_volume_modifications_total{driver_name="hostpath.csi.k8s.io",result="cancelled"}`,
		`csi_resizer_controller_modify_errors_total{class="infeasible",driver_name="hostpath.csi.k8s.io",grpc_code="InvalidArgument"}`,
		`csi_resizer_controller_modify_errors_total{class="final",driver_name="hostpath.csi.k8s.io",grpc_code="OutOfRange"}`,
		`csi_resizer_controller_modify_errors_total{class="final",driver_name="hostpath.csi.k8s.io",grpc_code="NotFound"}`,
		`csi_resizer_controller_modify_errors_total{class="final",driver_name="hostpath.csi.k8s.io",grpc_code="Internal"}`,
		`csi_resizer_controller_modify_errors_total{class="final",driver_name="hostpath.csi.k8s.io",grpc_code="Unknown"}`,
		`csi_resizer_controller_modify_errors_total{class="transient",driver_name="hostpath.csi.k8s.io",grpc_code="Canceled"}`,
		`csi_resizer_controller_modify_errors_total{class="transient",driver_name="hostpath.csi.k8s.io",grpc_code="DeadlineExceeded"}`,
		`csi_resizer_controller_modify_errors_total{class="transient",driver_name="hostpath.csi.k8s.io",grpc_code="Unavailable"}`,
		`csi_resizer_controller_modify_errors_total{class="transient",driver_name="hostpath.csi.k8s.io",grpc_code="ResourceExhausted"}`,
		`csi_resizer_controller_modify_errors_total{class="transient",driver_name="hostpath.csi.k8s.io",grpc_code="Aborted"}`,
		`csi_resizer_controller_modify_errors_total{class="transient",driver_name="hostpath.csi.k8s.io",grpc_code="Uncertain"}`,
	} {
		if v, ok := got[series]; !ok || v != 0 {
			t.Errorf("%s = %g (exported %v), want exported at 0", series, v, ok)
		}
	}
	// 3 results + 16 gRPC error codes + Uncertain, nothing else (no code listed twice).
	if len(got) != 3+16+1 {
		t.Errorf("%d series exported at start, want %d: %v", len(got), 3+16+1, got)
	}
	counts, _ := histogram(t, reg, "csi_resizer_modification_duration_seconds")
	if len(counts) != 3 || counts["success"]+counts["infeasible"]+counts["cancelled"] != 0 {
		t.Errorf("duration histogram at start: %v, want success, infeasible and cancelled without observations", counts)
	}
}

func TestModifyErrorsAndModificationDone(t *testing.T) {
	r, reg := newRegistry(t, func() []ClaimState { return nil })
	r.ModifyError("InvalidArgument", "infeasible")
	r.ModifyError("InvalidArgument", "infeasible")
	r.ModifyError("Uncertain", "transient")
	r.ModificationDone(ModifySuccess, 4*time.Second)
	r.ModificationDone(ModifyInfeasible, 90*time.Second)
	r.ModificationEnded(ModifyCancelled)
	got := counterValues(t, reg, "csi_resizer_controller_modify_errors_total", "csi_resizer_volume_modifications_total")
	for series, want := range map[string]float64{
		`csi_resizer_controller_modify_errors_total{class="infeasible",driver_name="hostpath.csi.k8s.io",grpc_code="InvalidArgument"}`: 2,
		`csi_resizer_controller_modify_errors_total{class="transient",driver_name="hostpath.csi.k8s.io",grpc_code="Uncertain"}`:        1,
		`csi_resizer_controller_modify_errors_total{class="final",driver_name="hostpath.csi.k8s.io",grpc_code="Internal"}`:             0,
		`csi_resizer_volume_modifications_total{driver_name="hostpath.csi.k8s.io",result="success"}`:                                   1,
		`csi_resizer_volume_modifications_total{driver_name="hostpath.csi.k8s.io",result="infeasible"}`:                                1,
		`csi_resizer_volume_modifications_total{driver_name="hostpath.csi.k8s.io",result="cancelled"}`:                                 1,
	} {
		if got[series] != want {
			t.Errorf("%s = %g, want %g", series, got[series], want)
		}
	}
	// ModificationEnded counts without a duration: the cancellation is not in the histogram.
	counts, sums := histogram(t, reg, "csi_resizer_modification_duration_seconds")
	if counts["success"] != 1 || sums["success"] != 4 || counts["infeasible"] != 1 || sums["infeasible"] != 90 || counts["cancelled"] != 0 {
		t.Errorf("duration histogram counts %v sums %v, want success 1 (4s), infeasible 1 (90s), cancelled 0", counts, sums)
	}
}

// The modification gauges are computed from list at each scrape: the count per status (all
// three, 0 when empty, PVCs without a modifyVolumeStatus in none of them) and one series per
// infeasible PVC with its target class.
func TestModifyGaugesComputedAtScrape(t *testing.T) {
	state := []ClaimState{
		{Namespace: "b", Name: "fast", ModifyStatus: v1.PersistentVolumeClaimModifyVolumeInfeasible, ModifyTarget: "gold"},
		{Namespace: "a", Name: "db", ModifyStatus: v1.PersistentVolumeClaimModifyVolumeInfeasible, ModifyTarget: "platinum"},
		{Namespace: "a", Name: "busy", ModifyStatus: v1.PersistentVolumeClaimModifyVolumeInProgress, ModifyTarget: "gold"},
		// Expanding and not modifying: counted by csi_resizer_volumes only.
		{Namespace: "a", Name: "grow", State: v1.PersistentVolumeClaimControllerResizeInProgress},
		{Namespace: "a", Name: "idle"},
	}
	want := `
# HELP csi_resizer_modify_volumes [ALPHA] PVCs of this driver per modification status (modifyVolumeStatus.status: Pending, InProgress, Infeasible).
# TYPE csi_resizer_modify_volumes gauge
csi_resizer_modify_volumes{driver_name="hostpath.csi.k8s.io",status="InProgress"} 1
csi_resizer_modify_volumes{driver_name="hostpath.csi.k8s.io",status="Infeasible"} 2
csi_resizer_modify_volumes{driver_name="hostpath.csi.k8s.io",status="Pending"} 0
# HELP csi_resizer_volume_modify_infeasible [ALPHA] 1 for each PVC of this driver whose modification to the target VolumeAttributesClass is now infeasible (at most 100 PVCs, the first by namespace/name).
# TYPE csi_resizer_volume_modify_infeasible gauge
csi_resizer_volume_modify_infeasible{driver_name="hostpath.csi.k8s.io",namespace="a",persistentvolumeclaim="db",target="platinum"} 1
csi_resizer_volume_modify_infeasible{driver_name="hostpath.csi.k8s.io",namespace="b",persistentvolumeclaim="fast",target="gold"} 1
`
	_, reg := newRegistry(t, func() []ClaimState { return state })
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "csi_resizer_modify_volumes", "csi_resizer_volume_modify_infeasible"); err != nil {
		t.Fatal(err)
	}
	// The user rolls back the first one: its series is gone at the next scrape.
	state = state[1:]
	if got := gaugeSeries(t, reg, "csi_resizer_volume_modify_infeasible"); len(got) != 1 || got[0] != "a/db" {
		t.Errorf("infeasible series after a rollback: %v, want only a/db", got)
	}
}

// csi_resizer_volume_modify_infeasible is bounded: MaxInfeasibleModifySeries series, the first
// PVCs by namespace then name whatever the cache's order, while the count has them all.
func TestModifyInfeasibleSeriesBounded(t *testing.T) {
	var state []ClaimState
	for i := MaxInfeasibleModifySeries + 20; i > 0; i-- {
		state = append(state, ClaimState{Namespace: fmt.Sprintf("ns-%03d", i%3), Name: fmt.Sprintf("pvc-%03d", i),
			ModifyStatus: v1.PersistentVolumeClaimModifyVolumeInfeasible, ModifyTarget: "gold"})
	}
	_, reg := newRegistry(t, func() []ClaimState { return state })
	got := gaugeSeries(t, reg, "csi_resizer_volume_modify_infeasible")
	if len(got) != MaxInfeasibleModifySeries {
		t.Fatalf("%d per-PVC series, want %d", len(got), MaxInfeasibleModifySeries)
	}
	var all []string
	for _, cs := range state {
		all = append(all, cs.Namespace+"/"+cs.Name)
	}
	slices.Sort(all)
	slices.Sort(got)
	if !slices.Equal(got, all[:MaxInfeasibleModifySeries]) {
		t.Errorf("series for %v ... %v, want the first %d by namespace/name: %v ... %v", got[0], got[len(got)-1], MaxInfeasibleModifySeries, all[0], all[MaxInfeasibleModifySeries-1])
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == "csi_resizer_modify_volumes" && m.GetLabel()[1].GetValue() == "Infeasible" && m.GetGauge().GetValue() != float64(len(state)) {
				t.Errorf("csi_resizer_modify_volumes{status=Infeasible} = %g, want %d", m.GetGauge().GetValue(), len(state))
			}
		}
	}
}

// Like the expansion gauges, the modification gauges are not exported until list answers, and
// all three statuses are exported at 0 once it answers with no PVCs.
func TestModifyGaugesAbsentUntilListAnswers(t *testing.T) {
	var state []ClaimState
	_, reg := newRegistry(t, func() []ClaimState { return state })
	if got := gaugeSeries(t, reg, "csi_resizer_modify_volumes", "csi_resizer_volume_modify_infeasible"); len(got) != 0 {
		t.Errorf("list not answering (nil): %v exported, want nothing", got)
	}
	state = []ClaimState{}
	if got := gaugeSeries(t, reg, "csi_resizer_modify_volumes"); len(got) != len(AllModifyStatuses) {
		t.Errorf("synced, no PVCs: %v exported, want the %d statuses at 0", got, len(AllModifyStatuses))
	}
}

// gaugeSeries lists the series of the gauges named: namespace/persistentvolumeclaim for the
// per-PVC ones, the status for csi_resizer_modify_volumes.
func gaugeSeries(t *testing.T, reg metrics.KubeRegistry, names ...string) []string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		if !slices.Contains(names, mf.GetName()) {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if s, ok := l["status"]; ok {
				out = append(out, s)
			} else {
				out = append(out, l["namespace"]+"/"+l["persistentvolumeclaim"])
			}
		}
	}
	return out
}

// NewClaimState reads the resize state and the modifyVolumeStatus the collector needs.
func TestNewClaimState(t *testing.T) {
	pvc := &v1.PersistentVolumeClaim{}
	pvc.Namespace, pvc.Name = "db", "data"
	pvc.Status.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{v1.ResourceStorage: v1.PersistentVolumeClaimNodeResizePending}
	if got, want := NewClaimState(pvc), (ClaimState{Namespace: "db", Name: "data", State: v1.PersistentVolumeClaimNodeResizePending}); got != want {
		t.Errorf("without modifyVolumeStatus: %+v, want %+v", got, want)
	}
	pvc.Status.ModifyVolumeStatus = &v1.ModifyVolumeStatus{Status: v1.PersistentVolumeClaimModifyVolumeInfeasible, TargetVolumeAttributesClassName: "gold"}
	got := NewClaimState(pvc)
	if got.ModifyStatus != v1.PersistentVolumeClaimModifyVolumeInfeasible || got.ModifyTarget != "gold" || got.State != v1.PersistentVolumeClaimNodeResizePending {
		t.Errorf("with modifyVolumeStatus Infeasible/gold: %+v", got)
	}
}
