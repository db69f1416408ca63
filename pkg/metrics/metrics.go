// Package metrics defines the sidecar's recovery metrics (docs/design.md §2.5). Their names and labels
// are part of the product: dashboards and alerts in deploy/ depend on them.
//
// Counters and the histogram are updated by the controller as things happen; the two gauges
// are computed at scrape time from the informer cache by a custom collector, so they are right
// as soon as a restarted resizer's cache has synced (and absent before) and cost nothing per
// event.
package metrics

import (
	"time"

	"google.golang.org/grpc/codes"
	v1 "k8s.io/api/core/v1"
	"k8s.io/component-base/metrics"

	"github.com/csi-resizer/csi-resizer/pkg/resize"
)

const subsystem = "csi_resizer"

// StateNone is the label value for a PVC without allocatedResourceStatuses.storage.
const StateNone = "none"

// Result values of the expansion duration histogram and the recovery counter.
const (
	ResultSuccess = "success"
	ResultFailure = "failure"
)

// AllStates lists every state label value of csi_resizer_volumes, so that each is exported,
// with 0 where no PVC is in it: an absent series cannot be told from a broken scrape.
var AllStates = []string{
	StateNone,
	string(v1.PersistentVolumeClaimControllerResizeInProgress),
	string(v1.PersistentVolumeClaimControllerResizeInfeasible),
	string(v1.PersistentVolumeClaimNodeResizePending),
	string(v1.PersistentVolumeClaimNodeResizeInProgress),
	string(v1.PersistentVolumeClaimNodeResizeInfeasible),
}

// StateLabel turns an allocatedResourceStatuses value into its label value.
func StateLabel(s v1.ClaimResourceStatus) string {
	if s == "" {
		return StateNone
	}
	return string(s)
}

// Recorder updates the event-driven recovery metrics for one driver.
type Recorder struct {
	driver      string
	recoveries  *metrics.CounterVec
	errors      *metrics.CounterVec
	transitions *metrics.CounterVec
	duration    *metrics.HistogramVec
}

// NewRecorder creates the metrics of one driver; Register adds them to a registry.
func NewRecorder(driver string) *Recorder {
	return &Recorder{
		driver: driver,
		recoveries: metrics.NewCounterVec(&metrics.CounterOpts{
			Subsystem:      subsystem,
			Name:           "volume_recovery_total",
			Help:           "Expansions whose target was below the previously allocated size (KEP-1790 recoveries), by outcome.",
			StabilityLevel: metrics.ALPHA,
		}, []string{"driver_name", "state"}),
		errors: metrics.NewCounterVec(&metrics.CounterOpts{
			Subsystem:      subsystem,
			Name:           "controller_expand_errors_total",
			Help:           "ControllerExpandVolume errors by gRPC code and class (infeasible, final, transient).",
			StabilityLevel: metrics.ALPHA,
		}, []string{"driver_name", "grpc_code", "class"}),
		transitions: metrics.NewCounterVec(&metrics.CounterOpts{
			Subsystem:      subsystem,
			Name:           "state_transitions_total",
			Help:           "Transitions of pvc.status.allocatedResourceStatuses.storage written by the resizer (none = absent).",
			StabilityLevel: metrics.ALPHA,
		}, []string{"driver_name", "from", "to"}),
		duration: metrics.NewHistogramVec(&metrics.HistogramOpts{
			Subsystem: subsystem,
			Name:      "expansion_duration_seconds",
			Help:      "Time from first seeing a PVC request above its capacity until the expansion is done or has failed, retries included.",
			// 1s .. 8h: cloud disks take seconds, stuck expansions hours. 3600 is a boundary
			// because the CSIResizerExpansionSlow alert asks "longer than an hour".
			Buckets:        []float64{1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400, 28800},
			StabilityLevel: metrics.ALPHA,
		}, []string{"driver_name", "result"}),
	}
}

// Register adds the metrics to reg and exports every outcome and error code of the driver at
// 0. A counter series that is born at 1 hides its first increase from rate() and increase():
// the first recovery, the first failure or the first error of a driver would be missing from
// the dashboard's rates and from rate-based alerts. (component-base creates label values only
// once registered, hence here.) The label sets are fixed and small: 2 outcomes, 17 codes,
// 30 ordered pairs of the 6 states.
func (r *Recorder) Register(reg metrics.KubeRegistry) {
	reg.MustRegister(r.recoveries, r.errors, r.transitions, r.duration)
	for _, res := range []string{ResultSuccess, ResultFailure} {
		r.recoveries.WithLabelValues(r.driver, res)
		r.duration.WithLabelValues(r.driver, res)
	}
	for c := codes.Canceled; c <= codes.Unauthenticated; c++ {
		r.errors.WithLabelValues(r.driver, c.String(), string(resize.ClassifyCode(c)))
	}
	r.errors.WithLabelValues(r.driver, resize.ReasonUncertain, string(resize.ClassTransient))
	for _, from := range AllStates {
		for _, to := range AllStates {
			if from != to {
				r.transitions.WithLabelValues(r.driver, from, to)
			}
		}
	}
}

// Recovery counts one recovery by outcome.
func (r *Recorder) Recovery(success bool) {
	state := ResultFailure
	if success {
		state = ResultSuccess
	}
	r.recoveries.WithLabelValues(r.driver, state).Inc()
}

// ExpandError counts one classified ControllerExpandVolume error.
func (r *Recorder) ExpandError(grpcCode, class string) {
	r.errors.WithLabelValues(r.driver, grpcCode, class).Inc()
}

// Transition counts a written state change; equal states are not a transition.
func (r *Recorder) Transition(from, to v1.ClaimResourceStatus) {
	if from == to {
		return
	}
	r.transitions.WithLabelValues(r.driver, StateLabel(from), StateLabel(to)).Inc()
}

// ExpansionDone observes the end-to-end duration of an expansion.
func (r *Recorder) ExpansionDone(success bool, d time.Duration) {
	result := ResultFailure
	if success {
		result = ResultSuccess
	}
	r.duration.WithLabelValues(r.driver, result).Observe(d.Seconds())
}

// ClaimState is one PVC of the driver as the state collector sees it.
type ClaimState struct {
	Namespace, Name string
	State           v1.ClaimResourceStatus
}

// IsInfeasible reports whether the PVC is stuck: the driver or the node refused its size.
func (c ClaimState) IsInfeasible() bool {
	return c.State == v1.PersistentVolumeClaimControllerResizeInfeasible || c.State == v1.PersistentVolumeClaimNodeResizeInfeasible
}

// StateCollector computes csi_resizer_volumes and csi_resizer_volume_infeasible at scrape time.
type StateCollector struct {
	metrics.BaseStableCollector
	driver     string
	list       func() []ClaimState
	volumes    *metrics.Desc
	infeasible *metrics.Desc
}

// NewStateCollector creates the collector; list returns the driver's PVCs from the informer
// cache (it must not call the API). list returns nil while the cache cannot answer (the
// informers have not synced, or never started on a standby replica): the collector then
// exports neither gauge, because a partial cache would export 0 for states and drop the series
// of infeasible PVCs it has not listed yet, and an absent series says "unknown" where a 0 says
// "none". An empty, non-nil list is a synced cache with no PVCs: every state is exported at 0.
func NewStateCollector(driver string, list func() []ClaimState) *StateCollector {
	return &StateCollector{
		driver: driver,
		list:   list,
		volumes: metrics.NewDesc(subsystem+"_volumes",
			"PVCs of this driver per resize state (allocatedResourceStatuses.storage; none = absent).",
			[]string{"driver_name", "state"}, nil, metrics.ALPHA, ""),
		infeasible: metrics.NewDesc(subsystem+"_volume_infeasible",
			"1 for each PVC of this driver whose expansion is now infeasible (ControllerResizeInfeasible or NodeResizeInfeasible).",
			[]string{"driver_name", "namespace", "persistentvolumeclaim"}, nil, metrics.ALPHA, ""),
	}
}

// DescribeWithStability implements metrics.StableCollector.
func (c *StateCollector) DescribeWithStability(ch chan<- *metrics.Desc) {
	ch <- c.volumes
	ch <- c.infeasible
}

// CollectWithStability implements metrics.StableCollector.
func (c *StateCollector) CollectWithStability(ch chan<- metrics.Metric) {
	claims := c.list()
	if claims == nil {
		return
	}
	counts := make(map[string]int, len(AllStates))
	for _, s := range AllStates {
		counts[s] = 0
	}
	for _, cs := range claims {
		counts[StateLabel(cs.State)]++
		if cs.IsInfeasible() {
			ch <- metrics.NewLazyConstMetric(c.infeasible, metrics.GaugeValue, 1, c.driver, cs.Namespace, cs.Name)
		}
	}
	for state, n := range counts {
		ch <- metrics.NewLazyConstMetric(c.volumes, metrics.GaugeValue, float64(n), c.driver, state)
	}
}
