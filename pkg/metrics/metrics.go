// Package metrics defines the sidecar's recovery metrics (docs/design.md §2.5) and those of
// volume modification (docs/design.md §2.11). Their names and labels are part of the product:
// dashboards and alerts in deploy/ depend on them.
//
// Counters and the histograms are updated by the controllers as things happen; the gauges are
// computed at scrape time from the informer cache by a custom collector, so they are right as
// soon as a restarted resizer's cache has synced (and absent before) and cost nothing per
// event.
package metrics

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	v1 "k8s.io/api/core/v1"
	"k8s.io/component-base/metrics"

	"github.com/csi-resizer/csi-resizer/pkg/expand"
	"github.com/csi-resizer/csi-resizer/pkg/modify"
)

const subsystem = "csi_resizer"

// StateNone is the label value for a PVC without allocatedResourceStatuses.storage.
const StateNone = "none"

// Result values of the expansion duration histogram and the recovery counter.
const (
	ResultSuccess = "success"
	ResultFailure = "failure"
)

// Result values of the modification counter and duration histogram: how a modification ended.
const (
	ModifySuccess    = "success"
	ModifyInfeasible = "infeasible"
	ModifyCancelled  = "cancelled"
)

// modifyResults lists every result of a modification, exported at 0 by Register.
var modifyResults = []string{ModifySuccess, ModifyInfeasible, ModifyCancelled}

// AllModifyStatuses lists every status label value of csi_resizer_modify_volumes (the values of
// pvc.status.modifyVolumeStatus.status), each exported, with 0 where no PVC is in it.
var AllModifyStatuses = []v1.PersistentVolumeClaimModifyVolumeStatus{
	v1.PersistentVolumeClaimModifyVolumePending,
	v1.PersistentVolumeClaimModifyVolumeInProgress,
	v1.PersistentVolumeClaimModifyVolumeInfeasible,
}

// MaxInfeasibleModifySeries bounds csi_resizer_volume_modify_infeasible: one series per PVC
// for at most this many PVCs (the first by namespace/name), so that a class refused for a
// whole fleet cannot blow up the scrape; csi_resizer_modify_volumes{status="Infeasible"}
// counts them all.
const MaxInfeasibleModifySeries = 100

// durationBuckets are the buckets, in seconds, of both duration histograms. 1s .. 8h: cloud
// disks take seconds, stuck expansions hours. 3600 is a boundary because the
// CSIResizerExpansionSlow alert asks "longer than an hour".
var durationBuckets = []float64{1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400, 28800}

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

	modifications  *metrics.CounterVec
	modifyErrors   *metrics.CounterVec
	modifyDuration *metrics.HistogramVec
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
			Subsystem:      subsystem,
			Name:           "expansion_duration_seconds",
			Help:           "Time from first seeing a PVC request above its capacity until the expansion is done or has failed, retries included.",
			Buckets:        durationBuckets,
			StabilityLevel: metrics.ALPHA,
		}, []string{"driver_name", "result"}),
		modifications: metrics.NewCounterVec(&metrics.CounterOpts{
			Subsystem:      subsystem,
			Name:           "volume_modifications_total",
			Help:           "Modifications of a PVC's VolumeAttributesClass (ControllerModifyVolume) by how they ended: success, infeasible (the driver refused the class) or cancelled (rolled back).",
			StabilityLevel: metrics.ALPHA,
		}, []string{"driver_name", "result"}),
		modifyErrors: metrics.NewCounterVec(&metrics.CounterOpts{
			Subsystem:      subsystem,
			Name:           "controller_modify_errors_total",
			Help:           "ControllerModifyVolume errors by gRPC code and class (infeasible, final, transient).",
			StabilityLevel: metrics.ALPHA,
		}, []string{"driver_name", "grpc_code", "class"}),
		modifyDuration: metrics.NewHistogramVec(&metrics.HistogramOpts{
			Subsystem:      subsystem,
			Name:           "modification_duration_seconds",
			Help:           "Time from first seeing a PVC's new VolumeAttributesClass until its modification succeeded, was refused as infeasible or was cancelled, retries included.",
			Buckets:        durationBuckets,
			StabilityLevel: metrics.ALPHA,
		}, []string{"driver_name", "result"}),
	}
}

// Register adds the metrics to reg and exports every outcome and error code of the driver at
// 0. A counter series that is born at 1 hides its first increase from rate() and increase():
// the first recovery, the first failure or the first error of a driver would be missing from
// the dashboard's rates and from rate-based alerts. (component-base creates label values only
// once registered, hence here.) The label sets are fixed and small: 2 outcomes, 17 codes,
// 30 ordered pairs of the 6 states; for modification 3 results and 17 codes.
func (r *Recorder) Register(reg metrics.KubeRegistry) {
	reg.MustRegister(r.recoveries, r.errors, r.transitions, r.duration)
	for _, res := range []string{ResultSuccess, ResultFailure} {
		r.recoveries.WithLabelValues(r.driver, res)
		r.duration.WithLabelValues(r.driver, res)
	}
	for c := codes.Canceled; c <= codes.Unauthenticated; c++ {
		r.errors.WithLabelValues(r.driver, c.String(), string(expand.ClassifyCode(c)))
	}
	r.errors.WithLabelValues(r.driver, expand.ReasonUncertain, string(expand.ClassTransient))
	for _, from := range AllStates {
		for _, to := range AllStates {
			if from != to {
				r.transitions.WithLabelValues(r.driver, from, to)
			}
		}
	}
	r.registerModify(reg)
}

// registerModify adds the modification metrics to reg, every result and code at 0 (a driver
// without MODIFY_VOLUME exports them too, so that dashboards and rules see the same series
// everywhere).
func (r *Recorder) registerModify(reg metrics.KubeRegistry) {
	reg.MustRegister(r.modifications, r.modifyErrors, r.modifyDuration)
	for _, res := range modifyResults {
		r.modifications.WithLabelValues(r.driver, res)
		r.modifyDuration.WithLabelValues(r.driver, res)
	}
	for c := codes.Canceled; c <= codes.Unauthenticated; c++ {
		r.modifyErrors.WithLabelValues(r.driver, c.String(), string(modify.ClassifyCode(c)))
	}
	r.modifyErrors.WithLabelValues(r.driver, expand.ReasonUncertain, string(expand.ClassTransient))
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

// ModifyError counts one classified ControllerModifyVolume error.
func (r *Recorder) ModifyError(grpcCode, class string) {
	r.modifyErrors.WithLabelValues(r.driver, grpcCode, class).Inc()
}

// ModificationDone counts a modification that ended with result (ModifySuccess,
// ModifyInfeasible, ModifyCancelled) and observes how long it took.
func (r *Recorder) ModificationDone(result string, d time.Duration) {
	r.modifications.WithLabelValues(r.driver, result).Inc()
	r.modifyDuration.WithLabelValues(r.driver, result).Observe(d.Seconds())
}

// ModificationEnded counts a modification that ended with result when its start is not known
// (it began before this process did): the counter has it, the duration histogram does not.
func (r *Recorder) ModificationEnded(result string) {
	r.modifications.WithLabelValues(r.driver, result).Inc()
}

// ClaimState is one PVC of the driver as the state collector sees it.
type ClaimState struct {
	Namespace, Name string
	State           v1.ClaimResourceStatus
	// ModifyStatus and ModifyTarget are pvc.status.modifyVolumeStatus (empty when it is unset).
	ModifyStatus v1.PersistentVolumeClaimModifyVolumeStatus
	ModifyTarget string
}

// NewClaimState reads what the collector needs from a PVC.
func NewClaimState(pvc *v1.PersistentVolumeClaim) ClaimState {
	cs := ClaimState{Namespace: pvc.Namespace, Name: pvc.Name, State: pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage]}
	if m := pvc.Status.ModifyVolumeStatus; m != nil {
		cs.ModifyStatus, cs.ModifyTarget = m.Status, m.TargetVolumeAttributesClassName
	}
	return cs
}

// IsInfeasible reports whether the PVC is stuck: the driver or the node refused its size.
func (c ClaimState) IsInfeasible() bool {
	return c.State == v1.PersistentVolumeClaimControllerResizeInfeasible || c.State == v1.PersistentVolumeClaimNodeResizeInfeasible
}

// StateCollector computes at scrape time csi_resizer_volumes and csi_resizer_volume_infeasible
// for expansion, csi_resizer_modify_volumes and csi_resizer_volume_modify_infeasible for
// modification.
type StateCollector struct {
	metrics.BaseStableCollector
	driver           string
	list             func() []ClaimState
	volumes          *metrics.Desc
	infeasible       *metrics.Desc
	modifyVolumes    *metrics.Desc
	modifyInfeasible *metrics.Desc
}

// NewStateCollector creates the collector; list returns the driver's PVCs from the informer
// cache (it must not call the API). list returns nil while the cache cannot answer (the
// informers have not synced, or never started on a standby replica): the collector then
// exports no gauge, because a partial cache would export 0 for states and drop the series
// of infeasible PVCs it has not listed yet, and an absent series says "unknown" where a 0 says
// "none". An empty, non-nil list is a synced cache with no PVCs: every state and every modify
// status is exported at 0.
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
		modifyVolumes: metrics.NewDesc(subsystem+"_modify_volumes",
			"PVCs of this driver per modification status (modifyVolumeStatus.status: Pending, InProgress, Infeasible).",
			[]string{"driver_name", "status"}, nil, metrics.ALPHA, ""),
		modifyInfeasible: metrics.NewDesc(subsystem+"_volume_modify_infeasible",
			fmt.Sprintf("1 for each PVC of this driver whose modification to the target VolumeAttributesClass is now infeasible (at most %d PVCs, the first by namespace/name).", MaxInfeasibleModifySeries),
			[]string{"driver_name", "namespace", "persistentvolumeclaim", "target"}, nil, metrics.ALPHA, ""),
	}
}

// DescribeWithStability implements metrics.StableCollector.
func (c *StateCollector) DescribeWithStability(ch chan<- *metrics.Desc) {
	ch <- c.volumes
	ch <- c.infeasible
	ch <- c.modifyVolumes
	ch <- c.modifyInfeasible
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
	c.collectModify(ch, claims)
}

// collectModify exports the modification gauges: the count per status, and one series per
// infeasible PVC for the first MaxInfeasibleModifySeries of them by namespace/name, so that
// the same PVCs keep their series from one scrape to the next.
func (c *StateCollector) collectModify(ch chan<- metrics.Metric, claims []ClaimState) {
	counts := make(map[v1.PersistentVolumeClaimModifyVolumeStatus]int, len(AllModifyStatuses))
	for _, s := range AllModifyStatuses {
		counts[s] = 0
	}
	var infeasible []ClaimState
	for _, cs := range claims {
		if _, known := counts[cs.ModifyStatus]; known {
			counts[cs.ModifyStatus]++
		}
		if cs.ModifyStatus == v1.PersistentVolumeClaimModifyVolumeInfeasible {
			infeasible = append(infeasible, cs)
		}
	}
	for status, n := range counts {
		ch <- metrics.NewLazyConstMetric(c.modifyVolumes, metrics.GaugeValue, float64(n), c.driver, string(status))
	}
	slices.SortFunc(infeasible, func(a, b ClaimState) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	for _, cs := range infeasible[:min(len(infeasible), MaxInfeasibleModifySeries)] {
		ch <- metrics.NewLazyConstMetric(c.modifyInfeasible, metrics.GaugeValue, 1, c.driver, cs.Namespace, cs.Name, cs.ModifyTarget)
	}
}
