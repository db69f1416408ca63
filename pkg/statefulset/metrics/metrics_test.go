package metrics

import (
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
)

func newRegistered(t *testing.T) (*Metrics, metrics.KubeRegistry) {
	t.Helper()
	m := New()
	r := metrics.NewKubeRegistry()
	if err := m.Register(r.Register); err != nil {
		t.Fatal(err)
	}
	return m, r
}

func TestGaugesFollowStatefulSets(t *testing.T) {
	m, r := newRegistered(t)
	m.SetStatefulSet("ns", "web", map[string]TemplateCounts{"data": {Pending: 2, Infeasible: 1}, "logs": {}})
	m.SetStatefulSet("ns", "db", map[string]TemplateCounts{"data": {Pending: 1}})
	want := `
# HELP statefulset_resizer_replicas_infeasible [ALPHA] Replicas of a StatefulSet whose PVC of a volume claim template cannot reach the template size without a user action.
# TYPE statefulset_resizer_replicas_infeasible gauge
statefulset_resizer_replicas_infeasible{namespace="ns",statefulset="db",template="data"} 0
statefulset_resizer_replicas_infeasible{namespace="ns",statefulset="web",template="data"} 1
statefulset_resizer_replicas_infeasible{namespace="ns",statefulset="web",template="logs"} 0
# HELP statefulset_resizer_replicas_pending [ALPHA] Replicas of a StatefulSet whose PVC of a volume claim template has not reached the template size yet and is not infeasible.
# TYPE statefulset_resizer_replicas_pending gauge
statefulset_resizer_replicas_pending{namespace="ns",statefulset="db",template="data"} 1
statefulset_resizer_replicas_pending{namespace="ns",statefulset="web",template="data"} 2
statefulset_resizer_replicas_pending{namespace="ns",statefulset="web",template="logs"} 0
`
	if err := testutil.GatherAndCompare(r, strings.NewReader(want), "statefulset_resizer_replicas_pending", "statefulset_resizer_replicas_infeasible"); err != nil {
		t.Error(err)
	}

	// Template "logs" removed from web, db deleted: their series go away.
	m.SetStatefulSet("ns", "web", map[string]TemplateCounts{"data": {}})
	m.ForgetStatefulSet("ns", "db")
	want = `
# HELP statefulset_resizer_replicas_infeasible [ALPHA] Replicas of a StatefulSet whose PVC of a volume claim template cannot reach the template size without a user action.
# TYPE statefulset_resizer_replicas_infeasible gauge
statefulset_resizer_replicas_infeasible{namespace="ns",statefulset="web",template="data"} 0
# HELP statefulset_resizer_replicas_pending [ALPHA] Replicas of a StatefulSet whose PVC of a volume claim template has not reached the template size yet and is not infeasible.
# TYPE statefulset_resizer_replicas_pending gauge
statefulset_resizer_replicas_pending{namespace="ns",statefulset="web",template="data"} 0
`
	if err := testutil.GatherAndCompare(r, strings.NewReader(want), "statefulset_resizer_replicas_pending", "statefulset_resizer_replicas_infeasible"); err != nil {
		t.Error(err)
	}
	m.ForgetStatefulSet("ns", "web")
	if err := testutil.GatherAndCompare(r, strings.NewReader(""), "statefulset_resizer_replicas_pending"); err != nil {
		t.Error(err)
	}
	if len(m.templates) != 0 {
		t.Errorf("bookkeeping left behind: %v", m.templates)
	}
}

func TestPatchesAndDuration(t *testing.T) {
	m, r := newRegistered(t)
	m.PVCPatched(PatchSuccess)
	m.PVCPatched(PatchSuccess)
	m.PVCPatched(PatchRejected)
	want := `
# HELP statefulset_resizer_pvc_patches_total [ALPHA] PVC storage request patches made by statefulset-resizer, by result: success, rejected (permanent API error), error (transient, retried).
# TYPE statefulset_resizer_pvc_patches_total counter
statefulset_resizer_pvc_patches_total{result="error"} 0
statefulset_resizer_pvc_patches_total{result="rejected"} 1
statefulset_resizer_pvc_patches_total{result="success"} 2
`
	if err := testutil.GatherAndCompare(r, strings.NewReader(want), "statefulset_resizer_pvc_patches_total"); err != nil {
		t.Error(err)
	}
	m.ObserveReconcile(20*time.Millisecond, nil)
	m.ObserveReconcile(time.Second, errors.New("x"))
	h, err := testutil.GetHistogramVecFromGatherer(r, "statefulset_resizer_reconcile_duration_seconds", map[string]string{"result": "success"})
	if err != nil || h.GetAggregatedSampleCount() != 1 {
		t.Errorf("success histogram: %v count %d", err, h.GetAggregatedSampleCount())
	}
	h, err = testutil.GetHistogramVecFromGatherer(r, "statefulset_resizer_reconcile_duration_seconds", map[string]string{"result": "error"})
	if err != nil || h.GetAggregatedSampleCount() != 1 {
		t.Errorf("error histogram: %v count %d", err, h.GetAggregatedSampleCount())
	}
}

// TestLint runs the Prometheus linter over the exposed metrics.
func TestLint(t *testing.T) {
	m, r := newRegistered(t)
	m.PVCPatched(PatchSuccess)
	m.SetStatefulSet("ns", "web", map[string]TemplateCounts{"data": {Pending: 1}})
	m.ObserveReconcile(time.Millisecond, nil)
	m.SetRecreateStep("ns", "web", "WaitForDeletion", time.Now())
	families, err := r.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	for _, mf := range families {
		if _, err := testutil.MetricFamilyToText(&text, mf); err != nil {
			t.Fatal(err)
		}
	}
	problems, err := testutil.NewPromLinter(strings.NewReader(text.String())).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s", p.String())
	}
}

const recreateHelp = `
# HELP statefulset_resizer_recreate_step_start_timestamp_seconds [ALPHA] Unix time at which the re-create of a StatefulSet entered its current step (Store, Delete, WaitForDeletion, Release, Create, Finish, Abandon, Cancel); one series per StatefulSet being re-created.
# TYPE statefulset_resizer_recreate_step_start_timestamp_seconds gauge
`

// TestRecreateStepFollowsTheReCreate: one series per StatefulSet being
// re-created, for its current step; a repeated step keeps its start; the
// series outlives the StatefulSet's absence (ForgetStatefulSet) and goes with
// ForgetRecreate.
func TestRecreateStepFollowsTheReCreate(t *testing.T) {
	m, r := newRegistered(t)
	const name = "statefulset_resizer_recreate_step_start_timestamp_seconds"
	compare := func(series string) {
		t.Helper()
		want := ""
		if series != "" {
			want = recreateHelp + series
		}
		if err := testutil.GatherAndCompare(r, strings.NewReader(want), name); err != nil {
			t.Error(err)
		}
	}
	t0 := time.Unix(1_800_000_000, 500_000_000)
	m.SetRecreateStep("ns", "web", "Store", t0)
	m.SetRecreateStep("ns", "db", "Delete", t0)
	compare(`statefulset_resizer_recreate_step_start_timestamp_seconds{namespace="ns",statefulset="db",step="Delete"} 1.8000000005e+09
statefulset_resizer_recreate_step_start_timestamp_seconds{namespace="ns",statefulset="web",step="Store"} 1.8000000005e+09
`)

	// web moves on: the Store series goes. A retried step (db's delete seen
	// again later) keeps the time it started; an earlier time replaces it.
	m.SetRecreateStep("ns", "web", "WaitForDeletion", t0.Add(2*time.Second))
	m.SetRecreateStep("ns", "db", "Delete", t0.Add(time.Minute))
	compare(`statefulset_resizer_recreate_step_start_timestamp_seconds{namespace="ns",statefulset="db",step="Delete"} 1.8000000005e+09
statefulset_resizer_recreate_step_start_timestamp_seconds{namespace="ns",statefulset="web",step="WaitForDeletion"} 1.8000000025e+09
`)
	m.SetRecreateStep("ns", "db", "Delete", t0.Add(-time.Second))
	m.SetRecreateStep("ns", "web", "Create", t0.Add(3*time.Second))

	// Between the release and the create the StatefulSet is absent: its
	// replica series go, its re-create series stays.
	m.SetStatefulSet("ns", "web", map[string]TemplateCounts{"data": {Pending: 1}})
	m.ForgetStatefulSet("ns", "web")
	compare(`statefulset_resizer_recreate_step_start_timestamp_seconds{namespace="ns",statefulset="db",step="Delete"} 1.7999999995e+09
statefulset_resizer_recreate_step_start_timestamp_seconds{namespace="ns",statefulset="web",step="Create"} 1.8000000035e+09
`)
	if err := testutil.GatherAndCompare(r, strings.NewReader(""), "statefulset_resizer_replicas_pending"); err != nil {
		t.Error(err)
	}

	m.ForgetRecreate("ns", "web")
	m.ForgetRecreate("ns", "web") // twice: nothing left to delete
	m.ForgetRecreate("ns", "other")
	compare(`statefulset_resizer_recreate_step_start_timestamp_seconds{namespace="ns",statefulset="db",step="Delete"} 1.7999999995e+09
`)
	m.ForgetRecreate("ns", "db")
	compare("")
	if len(m.recreates) != 0 {
		t.Errorf("bookkeeping left behind: %v", m.recreates)
	}

	// A new re-create of the same StatefulSet starts from its own time.
	m.SetRecreateStep("ns", "web", "Store", t0.Add(time.Hour))
	compare(`statefulset_resizer_recreate_step_start_timestamp_seconds{namespace="ns",statefulset="web",step="Store"} 1.8000036005e+09
`)
}
