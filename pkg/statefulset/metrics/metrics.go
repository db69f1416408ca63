// Package metrics holds the Prometheus metrics of statefulset-resizer,
// registered through k8s.io/component-base/metrics (stability ALPHA).
//
// The per-StatefulSet gauges have bounded label sets (namespace,
// statefulset, template) and their series are deleted when a template or the
// StatefulSet goes away, so the series count follows the cluster's
// StatefulSets, not their history.
package metrics

import (
	"sync"
	"time"

	"k8s.io/component-base/metrics"
)

const subsystem = "statefulset_resizer"

// Results of a PVC patch (label "result" of the patches counter).
const (
	// PatchSuccess: the apiserver accepted the patch.
	PatchSuccess = "success"
	// PatchRejected: a permanent error (invalid, forbidden, ...); not retried
	// until something changes.
	PatchRejected = "rejected"
	// PatchError: a transient error; retried with backoff.
	PatchError = "error"
)

// Results of a reconcile (label "result" of the duration histogram).
const (
	ReconcileSuccess = "success"
	ReconcileError   = "error"
)

// TemplateCounts is the number of replicas of one template that are pending
// (not yet at the template size, but progressing or waiting) or infeasible
// (need a user action).
type TemplateCounts struct {
	Pending    int
	Infeasible int
}

// Metrics is the set of statefulset-resizer metrics. Its zero value is not
// usable; create it with New and register it with Register.
type Metrics struct {
	pvcPatches         *metrics.CounterVec
	replicasPending    *metrics.GaugeVec
	replicasInfeasible *metrics.GaugeVec
	reconcileDuration  *metrics.HistogramVec

	mu sync.Mutex
	// templates remembers the template label values set per StatefulSet so
	// stale series can be deleted; it is only about our own series.
	templates map[stsKey]map[string]bool
}

type stsKey struct{ namespace, name string }

// New creates the metrics. Nothing is exported until Register.
func New() *Metrics {
	return &Metrics{
		pvcPatches: metrics.NewCounterVec(&metrics.CounterOpts{
			Subsystem:      subsystem,
			Name:           "pvc_patches_total",
			Help:           "PVC storage request patches made by statefulset-resizer, by result: success, rejected (permanent API error), error (transient, retried).",
			StabilityLevel: metrics.ALPHA,
		}, []string{"result"}),
		replicasPending: replicaGauge("replicas_pending",
			"Replicas of a StatefulSet whose PVC of a volume claim template has not reached the template size yet and is not infeasible."),
		replicasInfeasible: replicaGauge("replicas_infeasible",
			"Replicas of a StatefulSet whose PVC of a volume claim template cannot reach the template size without a user action."),
		reconcileDuration: metrics.NewHistogramVec(&metrics.HistogramOpts{
			Subsystem:      subsystem,
			Name:           "reconcile_duration_seconds",
			Help:           "Time to reconcile one StatefulSet (decide, patch PVCs, write status), by result.",
			Buckets:        []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30},
			StabilityLevel: metrics.ALPHA,
		}, []string{"result"}),
		templates: map[stsKey]map[string]bool{},
	}
}

// replicaGauge is a per-template gauge of replicas.
func replicaGauge(name, help string) *metrics.GaugeVec {
	return metrics.NewGaugeVec(&metrics.GaugeOpts{
		Subsystem:      subsystem,
		Name:           name,
		Help:           help,
		StabilityLevel: metrics.ALPHA,
	}, []string{"namespace", "statefulset", "template"})
}

// Register adds the metrics to a registry through its Register function:
// legacyregistry.Register in the binary (served with the workqueue and
// leader election metrics), a KubeRegistry's Register in tests.
func (m *Metrics) Register(register func(metrics.Registerable) error) error {
	for _, c := range []metrics.Registerable{m.pvcPatches, m.replicasPending, m.replicasInfeasible, m.reconcileDuration} {
		if err := register(c); err != nil {
			return err
		}
	}
	// Every result is exported at 0 from the start, so that rate() and increase() see the
	// first patch or the first rejected one (a counter series born at 1 hides that event).
	for _, r := range []string{PatchSuccess, PatchRejected, PatchError} {
		m.pvcPatches.WithLabelValues(r)
	}
	for _, r := range []string{ReconcileSuccess, ReconcileError} {
		m.reconcileDuration.WithLabelValues(r)
	}
	return nil
}

// PVCPatched counts one patch attempt with the given result.
func (m *Metrics) PVCPatched(result string) {
	m.pvcPatches.WithLabelValues(result).Inc()
}

// ObserveReconcile records how long one reconcile took.
func (m *Metrics) ObserveReconcile(d time.Duration, err error) {
	result := ReconcileSuccess
	if err != nil {
		result = ReconcileError
	}
	m.reconcileDuration.WithLabelValues(result).Observe(d.Seconds())
}

// SetStatefulSet sets the gauges of one StatefulSet to counts (keyed by
// template name) and deletes the series of templates that are gone.
func (m *Metrics) SetStatefulSet(namespace, name string, counts map[string]TemplateCounts) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := stsKey{namespace, name}
	for template := range m.templates[key] {
		if _, ok := counts[template]; !ok {
			m.deleteLocked(key, template)
		}
	}
	if len(counts) == 0 {
		delete(m.templates, key)
		return
	}
	seen := map[string]bool{}
	for template, c := range counts {
		m.replicasPending.WithLabelValues(namespace, name, template).Set(float64(c.Pending))
		m.replicasInfeasible.WithLabelValues(namespace, name, template).Set(float64(c.Infeasible))
		seen[template] = true
	}
	m.templates[key] = seen
}

// ForgetStatefulSet deletes every series of a StatefulSet that is gone.
func (m *Metrics) ForgetStatefulSet(namespace, name string) {
	m.SetStatefulSet(namespace, name, nil)
}

func (m *Metrics) deleteLocked(key stsKey, template string) {
	m.replicasPending.DeleteLabelValues(key.namespace, key.name, template)
	m.replicasInfeasible.DeleteLabelValues(key.namespace, key.name, template)
}
