package metrics

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics"
	testclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

const modKey = "ns/data"

// modifyFixture is a ModifyObserver on a fake clock and the registry of its metrics.
type modifyFixture struct {
	*ModifyObserver
	clk *testclock.FakeClock
	reg metrics.KubeRegistry
}

func newModifyObserver(t *testing.T) *modifyFixture {
	t.Helper()
	rec, reg := newRegistry(t, func() []ClaimState { return nil })
	clk := testclock.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	return &modifyFixture{ModifyObserver: NewModifyObserver(rec, clk), clk: clk, reg: reg}
}

// read returns, per result, the modifications counted, and the histogram's observations and
// their sum in seconds.
func (f *modifyFixture) read(t *testing.T) (map[string]float64, map[string]uint64, map[string]float64) {
	t.Helper()
	results := map[string]float64{}
	got := counterValues(t, f.reg, "csi_resizer_volume_modifications_total")
	for _, res := range modifyResults {
		results[res] = got[`csi_resizer_volume_modifications_total{driver_name="hostpath.csi.k8s.io",result="`+res+`"}`]
	}
	counts, sums := histogram(t, f.reg, "csi_resizer_modification_duration_seconds")
	return results, counts, sums
}

// claim is a PVC whose spec names class, with the given modifyVolumeStatus (nil: none) and,
// when modifyingSince is set, a ModifyingVolume condition since then.
func claim(class string, status *v1.ModifyVolumeStatus, modifyingSince time.Time) *v1.PersistentVolumeClaim {
	pvc := &v1.PersistentVolumeClaim{}
	pvc.Spec.VolumeAttributesClassName = ptr.To(class)
	pvc.Status.ModifyVolumeStatus = status
	if !modifyingSince.IsZero() {
		pvc.Status.Conditions = []v1.PersistentVolumeClaimCondition{{
			Type: v1.PersistentVolumeClaimVolumeModifyingVolume, Status: v1.ConditionTrue, LastTransitionTime: metav1.NewTime(modifyingSince),
		}}
	}
	return pvc
}

func inProgress(class string) *v1.ModifyVolumeStatus {
	return &v1.ModifyVolumeStatus{Status: v1.PersistentVolumeClaimModifyVolumeInProgress, TargetVolumeAttributesClassName: class}
}

func infeasibleFor(class string) *v1.ModifyVolumeStatus {
	return &v1.ModifyVolumeStatus{Status: v1.PersistentVolumeClaimModifyVolumeInfeasible, TargetVolumeAttributesClassName: class}
}

// A modification is timed from its first sight; a second Begin (a retry) does not restart it.
func TestModifyObserverTimesFromFirstSight(t *testing.T) {
	o := newModifyObserver(t)
	o.Begin(modKey, claim("gold", nil, time.Time{}))
	o.clk.Step(20 * time.Second)
	o.Failed(modKey, "Unavailable", "transient")
	o.Begin(modKey, claim("gold", inProgress("gold"), o.clk.Now().Add(-20*time.Second)))
	o.clk.Step(10 * time.Second)
	o.Succeeded(modKey)
	results, counts, sums := o.read(t)
	if results[ModifySuccess] != 1 || counts[ModifySuccess] != 1 || sums[ModifySuccess] != 30 {
		t.Errorf("success counted %g, observed %d times, %gs; want once, 30s", results[ModifySuccess], counts[ModifySuccess], sums[ModifySuccess])
	}
	// The episode ended: the next modification starts from its own first sight.
	o.Begin(modKey, claim("platinum", nil, time.Time{}))
	o.clk.Step(5 * time.Second)
	o.Succeeded(modKey)
	if _, _, sums := o.read(t); sums[ModifySuccess] != 35 {
		t.Errorf("second modification timed %gs, want 5s", sums[ModifySuccess]-30)
	}
}

// Failed counts the error, by code and class, and nothing else: whether the error ends the
// modification is the controller's to tell (Infeasible).
func TestModifyObserverFailedCountsTheErrorOnly(t *testing.T) {
	o := newModifyObserver(t)
	o.Begin(modKey, claim("gold", nil, time.Time{}))
	o.Failed(modKey, "InvalidArgument", "infeasible")
	series := `csi_resizer_controller_modify_errors_total{class="infeasible",driver_name="hostpath.csi.k8s.io",grpc_code="InvalidArgument"}`
	if got := counterValues(t, o.reg, "csi_resizer_controller_modify_errors_total")[series]; got != 1 {
		t.Errorf("%s = %g, want 1", series, got)
	}
	if results, counts, _ := o.read(t); results[ModifyInfeasible] != 0 || counts[ModifyInfeasible] != 0 {
		t.Errorf("Failed ended the modification: results %v, observations %v", results, counts)
	}
}

// After a restart the start is the ModifyingVolume condition's lastTransitionTime, when it is
// earlier than the first sight; a condition in the future (clock skew) does not shorten it.
func TestModifyObserverStartsAtTheCondition(t *testing.T) {
	o := newModifyObserver(t)
	o.Begin(modKey, claim("gold", inProgress("gold"), o.clk.Now().Add(-10*time.Minute)))
	o.clk.Step(time.Minute)
	o.Succeeded(modKey)
	o.Begin("ns/other", claim("gold", inProgress("gold"), o.clk.Now().Add(time.Hour)))
	o.clk.Step(2 * time.Second)
	o.Succeeded("ns/other")
	if _, counts, sums := o.read(t); counts[ModifySuccess] != 2 || sums[ModifySuccess] != 11*60+2 {
		t.Errorf("observed %d successes, %gs in all; want 2: 660s from the condition, 2s from the first sight", counts[ModifySuccess], sums[ModifySuccess])
	}
}

// An infeasible end is counted once: the slow retries of the refused class (with transient
// errors in between) add nothing. The rollback that follows is counted too, timed from the
// same start.
func TestModifyObserverInfeasibleCountedOnce(t *testing.T) {
	o := newModifyObserver(t)
	o.Begin(modKey, claim("gold", nil, time.Time{}))
	o.clk.Step(3 * time.Second)
	o.Infeasible(modKey)
	for range 3 { // retries every --retry-interval-max
		o.clk.Step(5 * time.Minute)
		o.Begin(modKey, claim("gold", infeasibleFor("gold"), time.Time{}))
		o.Failed(modKey, "Unavailable", "transient")
		o.Begin(modKey, claim("gold", inProgress("gold"), time.Time{}))
		o.Infeasible(modKey)
	}
	o.clk.Step(time.Minute)
	o.Cancelled(modKey)
	results, counts, sums := o.read(t)
	if results[ModifyInfeasible] != 1 || counts[ModifyInfeasible] != 1 || sums[ModifyInfeasible] != 3 {
		t.Errorf("infeasible counted %g, observed %d, %gs; want once, after 3s", results[ModifyInfeasible], counts[ModifyInfeasible], sums[ModifyInfeasible])
	}
	if results[ModifyCancelled] != 1 || counts[ModifyCancelled] != 1 || sums[ModifyCancelled] != 3+15*60+60 {
		t.Errorf("cancelled counted %g, observed %d, %gs; want once, after 964s", results[ModifyCancelled], counts[ModifyCancelled], sums[ModifyCancelled])
	}
}

// After an infeasible end, a spec naming another class is a new modification: timed from when
// it was seen, and its own infeasible end is counted.
func TestModifyObserverNewTargetAfterInfeasible(t *testing.T) {
	o := newModifyObserver(t)
	o.Begin(modKey, claim("gold", nil, time.Time{}))
	o.clk.Step(time.Minute)
	o.Infeasible(modKey)
	o.clk.Step(time.Hour)
	o.Begin(modKey, claim("silver", infeasibleFor("gold"), o.clk.Now().Add(-time.Hour)))
	o.clk.Step(7 * time.Second)
	o.Infeasible(modKey)
	o.clk.Step(time.Hour)
	o.Begin(modKey, claim("bronze", infeasibleFor("silver"), o.clk.Now().Add(-2*time.Hour)))
	o.clk.Step(2 * time.Second)
	o.Succeeded(modKey)
	results, counts, sums := o.read(t)
	if results[ModifyInfeasible] != 2 || counts[ModifyInfeasible] != 2 || sums[ModifyInfeasible] != 60+7 {
		t.Errorf("infeasible counted %g, observed %d, %gs; want gold after 60s and silver after 7s", results[ModifyInfeasible], counts[ModifyInfeasible], sums[ModifyInfeasible])
	}
	if results[ModifySuccess] != 1 || sums[ModifySuccess] != 2 {
		t.Errorf("success counted %g after %gs, want bronze once after 2s", results[ModifySuccess], sums[ModifySuccess])
	}
}

// A PVC first seen already Infeasible for the class its spec names (after a restart) had that
// end counted by the process that saw it: a retry refused again adds nothing, and a rollback
// is counted, timed from the ModifyingVolume condition.
func TestModifyObserverInfeasibleBeforeRestart(t *testing.T) {
	o := newModifyObserver(t)
	o.Begin(modKey, claim("gold", infeasibleFor("gold"), o.clk.Now().Add(-time.Hour)))
	o.Infeasible(modKey)
	o.Cancelled(modKey)
	results, counts, sums := o.read(t)
	if results[ModifyInfeasible] != 0 || counts[ModifyInfeasible] != 0 {
		t.Errorf("an infeasible end seen before the restart was counted again: %g", results[ModifyInfeasible])
	}
	if results[ModifyCancelled] != 1 || sums[ModifyCancelled] != 3600 {
		t.Errorf("cancelled counted %g after %gs, want once after 3600s", results[ModifyCancelled], sums[ModifyCancelled])
	}
}

// An end without an episode (a rollback of a PVC the controller did not begin in this process)
// is counted, without a duration; Forget drops the episode of a deleted PVC without an outcome,
// and keeps nothing about it.
func TestModifyObserverWithoutEpisode(t *testing.T) {
	o := newModifyObserver(t)
	o.Cancelled(modKey)
	o.Begin("ns/deleted", claim("gold", nil, time.Time{}))
	o.Forget("ns/deleted")
	results, counts, _ := o.read(t)
	if results[ModifyCancelled] != 1 || counts[ModifyCancelled] != 0 {
		t.Errorf("cancelled counted %g, observed %d; want counted once, not timed", results[ModifyCancelled], counts[ModifyCancelled])
	}
	if results[ModifySuccess]+results[ModifyInfeasible] != 0 {
		t.Errorf("a forgotten modification had an outcome: %v", results)
	}
	if len(o.episodes) != 0 {
		t.Errorf("episodes kept: %v", o.episodes)
	}
}
