// Package metrics holds the Prometheus metrics of statefulset-resizer,
// registered through k8s.io/component-base/metrics (stability ALPHA).
//
// The per-StatefulSet gauges have bounded label sets (namespace,
// statefulset, template) and their series are deleted when a template or the
// StatefulSet goes away, so the series count follows the cluster's
// StatefulSets, not their history. The re-create gauge has one series per
// StatefulSet being re-created (its current step), deleted when the step
// changes or the re-create ends.
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
	recreateStepStart  *metrics.GaugeVec

	mu sync.Mutex
	// templates remembers the template label values set per StatefulSet so
	// stale series can be deleted; it is only about our own series.
	templates map[stsKey]map[string]bool
	// recreates is the step and start time exported per StatefulSet being
	// re-created, so that a new step replaces the series of the previous one.
	recreates map[stsKey]recreateStep
}

type recreateStep struct {
	step  string
	since time.Time
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
		recreateStepStart: metrics.NewGaugeVec(&metrics.GaugeOpts{
			Subsystem:      subsystem,
			Name:           "recreate_step_start_timestamp_seconds",
			Help:           "Unix time at which the re-create of a StatefulSet entered its current step (Store, Delete, WaitForDeletion, Release, Create, Finish, Abandon, Cancel); one series per StatefulSet being re-created.",
			StabilityLevel: metrics.ALPHA,
		}, []string{"namespace", "statefulset", "step"}),
		templates: map[stsKey]map[string]bool{},
		recreates: map[stsKey]recreateStep{},
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
	for _, c := range []metrics.Registerable{m.pvcPatches, m.replicasPending, m.replicasInfeasible, m.reconcileDuration, m.recreateStepStart} {
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

// ForgetStatefulSet deletes the replica series of a StatefulSet that is gone.
// It leaves its re-create series alone: between the release of the old object
// and the create of the new one the StatefulSet is absent while its re-create
// goes on, and a create that keeps being refused is exactly the stuck step the
// series is there to show. ForgetRecreate ends those.
func (m *Metrics) ForgetStatefulSet(namespace, name string) {
	m.SetStatefulSet(namespace, name, nil)
}

// SetRecreateStep exports that the re-create of namespace/name is in step
// (a recreate.Step other than Nothing) since the time since, replacing the
// series of its previous step. Called again for the same step, it keeps the
// earlier of the two times: a caller may pass the time it saw the step at
// every sync (a retry of a failing create included) without restarting the
// clock the StatefulSetResizerRecreateStuck alert reads.
func (m *Metrics) SetRecreateStep(namespace, name, step string, since time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := stsKey{namespace, name}
	prev, ok := m.recreates[key]
	switch {
	case ok && prev.step == step && !since.Before(prev.since):
		return
	case ok && prev.step != step:
		m.recreateStepStart.DeleteLabelValues(namespace, name, prev.step)
	}
	m.recreates[key] = recreateStep{step: step, since: since}
	m.recreateStepStart.WithLabelValues(namespace, name, step).Set(float64(since.UnixNano()) / 1e9)
}

// ForgetRecreate deletes the re-create series of namespace/name: its
// re-create ended (finished or abandoned), or another install or replica
// carries it on.
func (m *Metrics) ForgetRecreate(namespace, name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := stsKey{namespace, name}
	if prev, ok := m.recreates[key]; ok {
		m.recreateStepStart.DeleteLabelValues(namespace, name, prev.step)
		delete(m.recreates, key)
	}
}

func (m *Metrics) deleteLocked(key stsKey, template string) {
	m.replicasPending.DeleteLabelValues(key.namespace, key.name, template)
	m.replicasInfeasible.DeleteLabelValues(key.namespace, key.name, template)
}
