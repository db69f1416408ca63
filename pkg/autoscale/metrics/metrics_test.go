package metrics

import (
	"strings"
	"testing"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
)

// TestNodeSeriesFollowTheNodesRead: the per-node latency series of a node no longer read goes
// away; its error counter stays (a counter is history).
func TestNodeSeriesFollowTheNodesRead(t *testing.T) {
	m := New()
	r := metrics.NewKubeRegistry()
	if err := m.Register(r.Register); err != nil {
		t.Fatal(err)
	}
	m.NodeRead("a", 250*time.Millisecond, "")
	m.NodeRead("b", 2*time.Second, "Timeout")
	m.NodeRead("gone", 0, "NoEndpoint") // not attempted: no latency
	m.KeepNodes(map[string]bool{"a": true, "gone": true})
	want := `
# HELP volume_autoscaler_stats_read_errors_total [ALPHA] Failed reads of a kubelet's /stats/summary, by node and reason (NoEndpoint, Unauthorized, Forbidden, TLS, Timeout, Refused, ...).
# TYPE volume_autoscaler_stats_read_errors_total counter
volume_autoscaler_stats_read_errors_total{node="b",reason="Timeout"} 1
volume_autoscaler_stats_read_errors_total{node="gone",reason="NoEndpoint"} 1
# HELP volume_autoscaler_stats_read_last_duration_seconds [ALPHA] Time the last read of this node's kubelet /stats/summary took.
# TYPE volume_autoscaler_stats_read_last_duration_seconds gauge
volume_autoscaler_stats_read_last_duration_seconds{node="a"} 0.25
`
	if err := testutil.GatherAndCompare(r, strings.NewReader(want), "volume_autoscaler_stats_read_errors_total",
		"volume_autoscaler_stats_read_last_duration_seconds"); err != nil {
		t.Error(err)
	}
	families, err := r.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "volume_autoscaler_stats_read_duration_seconds" {
			if n := f.GetMetric()[0].GetHistogram().GetSampleCount(); n != 2 {
				t.Errorf("read duration observations %d, want 2 (the attempted reads)", n)
			}
			return
		}
	}
	t.Error("no volume_autoscaler_stats_read_duration_seconds")
}

// TestDryRunCountedApart: a dry-run resize is not a resize.
func TestDryRunCountedApart(t *testing.T) {
	m := New()
	r := metrics.NewKubeRegistry()
	if err := m.Register(r.Register); err != nil {
		t.Fatal(err)
	}
	m.Resized("siblings", true)
	m.Resized("threshold-bytes", false)
	want := `
# HELP volume_autoscaler_dry_run_resizes_total [ALPHA] Resizes volume-autoscaler decided but did not make because of --dry-run, by reason.
# TYPE volume_autoscaler_dry_run_resizes_total counter
volume_autoscaler_dry_run_resizes_total{reason="siblings"} 1
# HELP volume_autoscaler_resizes_total [ALPHA] PVC requests changed by volume-autoscaler, by reason: threshold-bytes, threshold-inodes, siblings, recover.
# TYPE volume_autoscaler_resizes_total counter
volume_autoscaler_resizes_total{reason="recover"} 0
volume_autoscaler_resizes_total{reason="siblings"} 0
volume_autoscaler_resizes_total{reason="threshold-bytes"} 1
volume_autoscaler_resizes_total{reason="threshold-inodes"} 0
`
	if err := testutil.GatherAndCompare(r, strings.NewReader(want), "volume_autoscaler_dry_run_resizes_total", "volume_autoscaler_resizes_total"); err != nil {
		t.Error(err)
	}
}

// TestPVCSeriesOnlyWhileOne: a healthy PVC has no per-PVC series, so a scrape does not grow
// with the PVCs autoscaled; a PVC back under its threshold or off its limit loses its series.
func TestPVCSeriesOnlyWhileOne(t *testing.T) {
	m := New()
	r := metrics.NewKubeRegistry()
	if err := m.Register(r.Register); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"healthy", "filling", "full", "emptied"} {
		m.SetAtLimit("ns", name, name == "full" || name == "emptied")
		m.SetAboveThreshold("ns", name, name != "healthy")
	}
	m.SetAtLimit("ns", "emptied", false) // its limit was raised
	m.SetAboveThreshold("ns", "emptied", false)
	want := `
# HELP volume_autoscaler_pvc_above_threshold [ALPHA] 1 while an autoscaled PVC's free bytes or inodes were below its threshold in the last round that read it; no series otherwise.
# TYPE volume_autoscaler_pvc_above_threshold gauge
volume_autoscaler_pvc_above_threshold{namespace="ns",persistentvolumeclaim="filling"} 1
volume_autoscaler_pvc_above_threshold{namespace="ns",persistentvolumeclaim="full"} 1
# HELP volume_autoscaler_pvc_at_limit [ALPHA] 1 while an autoscaled PVC is at its limit and a resize is wanted (the volume will fill); no series otherwise.
# TYPE volume_autoscaler_pvc_at_limit gauge
volume_autoscaler_pvc_at_limit{namespace="ns",persistentvolumeclaim="full"} 1
`
	if err := testutil.GatherAndCompare(r, strings.NewReader(want), "volume_autoscaler_pvc_above_threshold", "volume_autoscaler_pvc_at_limit"); err != nil {
		t.Error(err)
	}
}
