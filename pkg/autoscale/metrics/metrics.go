// Package metrics holds the Prometheus metrics of volume-autoscaler, registered through
// k8s.io/component-base/metrics (stability ALPHA), in the naming style of
// statefulset-resizer's (subsystem volume_autoscaler).
//
// The label sets are bounded: decision reasons are the fixed words of package policy (plus
// "quota"), node error reasons those of package kubeletstats. The per-node series follow the
// nodes that are read (a node no longer read loses its latency series), and the per-PVC gauges
// follow the autoscaled PVCs: a PVC that is deleted or no longer autoscaled loses its series.
package metrics

import (
	"sync"
	"time"

	"k8s.io/component-base/metrics"
)

const subsystem = "volume_autoscaler"

// SkipQuota is the skip reason of a resize the apiserver refused for a ResourceQuota; the
// other skip reasons are policy's.
const SkipQuota = "quota"

// Results of a PVC patch (label "result" of the patches counter), as statefulset-resizer's.
const (
	PatchSuccess  = "success"
	PatchConflict = "conflict" // the PVC changed since it was read: decided again
	PatchRejected = "rejected" // a permanent error (quota, invalid, forbidden): not retried
	PatchError    = "error"    // a transient error: retried with backoff
)

// Metrics is the set of volume-autoscaler metrics. Create it with New and register it with
// Register.
type Metrics struct {
	resizes        *metrics.CounterVec
	dryRunResizes  *metrics.CounterVec
	skips          *metrics.CounterVec
	patches        *metrics.CounterVec
	readDuration   *metrics.Histogram
	readLast       *metrics.GaugeVec
	readErrors     *metrics.CounterVec
	atLimit        *metrics.GaugeVec
	aboveThreshold *metrics.GaugeVec
	pollDuration   *metrics.Histogram

	mu sync.Mutex
	// nodes are the nodes with a latency series, so that the series of a node no longer read
	// can be deleted.
	nodes map[string]bool
}

// New creates the metrics. Nothing is exported until Register.
func New() *Metrics {
	counter := func(name, help string, labels ...string) *metrics.CounterVec {
		return metrics.NewCounterVec(&metrics.CounterOpts{Subsystem: subsystem, Name: name, Help: help, StabilityLevel: metrics.ALPHA}, labels)
	}
	gauge := func(name, help string, labels ...string) *metrics.GaugeVec {
		return metrics.NewGaugeVec(&metrics.GaugeOpts{Subsystem: subsystem, Name: name, Help: help, StabilityLevel: metrics.ALPHA}, labels)
	}
	histogram := func(name, help string) *metrics.Histogram {
		return metrics.NewHistogram(&metrics.HistogramOpts{Subsystem: subsystem, Name: name, Help: help,
			Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}, StabilityLevel: metrics.ALPHA})
	}
	return &Metrics{
		resizes: counter("resizes_total",
			"PVC requests changed by volume-autoscaler, by reason: threshold-bytes, threshold-inodes, siblings, recover.", "reason"),
		dryRunResizes: counter("dry_run_resizes_total",
			"Resizes volume-autoscaler decided but did not make because of --dry-run, by reason.", "reason"),
		skips: counter("skips_total",
			"Decisions to leave an autoscaled PVC alone, by reason (cooldown, at-limit, resizing, resize-wait-expired, infeasible, quota, stats-missing, bad-settings, ...); one per PVC and round.", "reason"),
		patches: counter("pvc_patches_total",
			"PVC patches made by volume-autoscaler, by result: success, conflict (decided again), rejected (permanent API error), error (transient, retried).", "result"),
		readDuration: histogram("stats_read_duration_seconds",
			"Time to read one kubelet's /stats/summary, successful or not."),
		readLast: gauge("stats_read_last_duration_seconds",
			"Time the last read of this node's kubelet /stats/summary took.", "node"),
		readErrors: counter("stats_read_errors_total",
			"Failed reads of a kubelet's /stats/summary, by node and reason (NoEndpoint, Unauthorized, Forbidden, TLS, Timeout, Refused, ...).", "node", "reason"),
		atLimit: gauge("pvc_at_limit",
			"1 while an autoscaled PVC is at its limit and a resize is wanted (the volume will fill); no series otherwise.", "namespace", "persistentvolumeclaim"),
		aboveThreshold: gauge("pvc_above_threshold",
			"1 while an autoscaled PVC's free bytes or inodes were below its threshold in the last round that read it; no series otherwise.", "namespace", "persistentvolumeclaim"),
		pollDuration: histogram("poll_duration_seconds",
			"Time of one poll round: reading every kubelet that runs a pod mounting an autoscaled PVC."),
		nodes: map[string]bool{},
	}
}

// Register adds the metrics to a registry through its Register function: legacyregistry's in
// the binary, a KubeRegistry's in tests.
func (m *Metrics) Register(register func(metrics.Registerable) error) error {
	for _, c := range []metrics.Registerable{m.resizes, m.dryRunResizes, m.skips, m.patches, m.readDuration,
		m.readLast, m.readErrors, m.atLimit, m.aboveThreshold, m.pollDuration} {
		if err := register(c); err != nil {
			return err
		}
	}
	// Exported at 0 from the start, so that rate() and increase() see the first one.
	for _, r := range []string{"threshold-bytes", "threshold-inodes", "siblings", "recover"} {
		m.resizes.WithLabelValues(r)
	}
	for _, r := range []string{PatchSuccess, PatchConflict, PatchRejected, PatchError} {
		m.patches.WithLabelValues(r)
	}
	return nil
}

// Resized counts one resize (or recovery) made, or only decided under dry run.
func (m *Metrics) Resized(reason string, dryRun bool) {
	if dryRun {
		m.dryRunResizes.WithLabelValues(reason).Inc()
		return
	}
	m.resizes.WithLabelValues(reason).Inc()
}

// Skipped counts one decision to leave a PVC alone.
func (m *Metrics) Skipped(reason string) { m.skips.WithLabelValues(reason).Inc() }

// Patched counts one patch attempt with its result.
func (m *Metrics) Patched(result string) { m.patches.WithLabelValues(result).Inc() }

// ObservePoll records how long one poll round took.
func (m *Metrics) ObservePoll(d time.Duration) { m.pollDuration.Observe(d.Seconds()) }

// NodeRead records one kubelet read: its duration, and its error reason ("" when it worked).
func (m *Metrics) NodeRead(node string, d time.Duration, reason string) {
	if d > 0 {
		m.readDuration.Observe(d.Seconds())
		m.mu.Lock()
		m.nodes[node] = true
		m.readLast.WithLabelValues(node).Set(d.Seconds())
		m.mu.Unlock()
	}
	if reason != "" {
		m.readErrors.WithLabelValues(node, reason).Inc()
	}
}

// KeepNodes deletes the latency series of the nodes not in read: no pod on them mounts an
// autoscaled PVC any more, or they are gone.
func (m *Metrics) KeepNodes(read map[string]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for node := range m.nodes {
		if !read[node] {
			m.readLast.DeleteLabelValues(node)
			delete(m.nodes, node)
		}
	}
}

// SetAtLimit sets the at-limit gauge of an autoscaled PVC. The per-PVC gauges exist only
// while they are 1: a series of 0 for every healthy PVC would make each scrape grow with the
// PVCs (2 MB and 0.1 CPU s per scrape at 10,000 PVCs, docs/benchmarks.md) for no alert's use.
func (m *Metrics) SetAtLimit(namespace, name string, atLimit bool) {
	setOrDelete(m.atLimit, atLimit, namespace, name)
}

// SetAboveThreshold sets the above-threshold gauge of an autoscaled PVC; it is set only on a
// round whose stats were read, never guessed.
func (m *Metrics) SetAboveThreshold(namespace, name string, above bool) {
	setOrDelete(m.aboveThreshold, above, namespace, name)
}

func setOrDelete(g *metrics.GaugeVec, on bool, labels ...string) {
	if on {
		g.WithLabelValues(labels...).Set(1)
		return
	}
	g.DeleteLabelValues(labels...)
}

// ForgetPVC deletes the per-PVC series of a PVC that is gone or no longer autoscaled.
func (m *Metrics) ForgetPVC(namespace, name string) {
	m.atLimit.DeleteLabelValues(namespace, name)
	m.aboveThreshold.DeleteLabelValues(namespace, name)
}
