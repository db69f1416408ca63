package metrics

import (
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
)

// ModifyObserver turns the steps of the modification controller into the modification metrics
// of docs/design.md §2.11: ControllerModifyVolume errors, and how each modification ended
// (success, infeasible, cancelled) with the time from its first sight. Like Observer, its
// bookkeeping is for metrics only: no decision reads it, and a restart loses only the start
// times, which the new process takes from the PVC's ModifyingVolume condition. It is safe for
// concurrent use.
type ModifyObserver struct {
	metrics *Recorder
	clock   clock.Clock

	mu       sync.Mutex
	episodes map[string]*modifyEpisode
}

// modifyEpisode is one modification of one PVC, from its first sight to its end.
type modifyEpisode struct {
	since time.Time
	// infeasible: the driver refused the target and that end is counted. The slow retries of
	// the same target add nothing; a later success or cancellation ends the episode and is
	// counted too, timed from since.
	infeasible bool
}

// NewModifyObserver returns an observer that updates m, timing with clk.
func NewModifyObserver(m *Recorder, clk clock.Clock) *ModifyObserver {
	return &ModifyObserver{metrics: m, clock: clk, episodes: map[string]*modifyEpisode{}}
}

// Begin is told that the controller acts on a PVC's modification: the episode starts unless
// it goes on (Begin is idempotent). It starts now, or at the lastTransitionTime of the PVC's
// ModifyingVolume condition when that is earlier (a modification under way before this
// process started). A PVC first seen already refused (Infeasible for the class its spec
// names) had that end counted by the process that saw it. After an infeasible end, a spec
// that names another class than the PVC's modifyVolumeStatus (the refused class, or the one
// being retried) is a new modification, starting now.
func (o *ModifyObserver) Begin(key string, pvc *v1.PersistentVolumeClaim) {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := o.clock.Now()
	ep := o.episodes[key]
	switch {
	case ep == nil:
		m := pvc.Status.ModifyVolumeStatus
		ep = &modifyEpisode{since: now, infeasible: specNamesStatusTarget(pvc) && m.Status == v1.PersistentVolumeClaimModifyVolumeInfeasible}
		if t, ok := modifyingSince(pvc); ok && t.Before(now) {
			ep.since = t
		}
		o.episodes[key] = ep
	case ep.infeasible && !specNamesStatusTarget(pvc):
		o.episodes[key] = &modifyEpisode{since: now}
	}
}

// specNamesStatusTarget reports whether the PVC's spec names the target of its
// modifyVolumeStatus.
func specNamesStatusTarget(pvc *v1.PersistentVolumeClaim) bool {
	m, spec := pvc.Status.ModifyVolumeStatus, pvc.Spec.VolumeAttributesClassName
	return m != nil && spec != nil && *spec == m.TargetVolumeAttributesClassName
}

// modifyingSince is the lastTransitionTime of the PVC's ModifyingVolume condition, if set.
func modifyingSince(pvc *v1.PersistentVolumeClaim) (time.Time, bool) {
	for _, cond := range pvc.Status.Conditions {
		if cond.Type == v1.PersistentVolumeClaimVolumeModifyingVolume && !cond.LastTransitionTime.IsZero() {
			return cond.LastTransitionTime.Time, true
		}
	}
	return time.Time{}, false
}

// Failed is told of a classified ControllerModifyVolume error (grpcCode is the code's name,
// or Uncertain without a gRPC status). It counts the error only: whether the error ends the
// modification is the controller's decision, told by Infeasible.
func (o *ModifyObserver) Failed(key, grpcCode, class string) {
	o.metrics.ModifyError(grpcCode, class)
}

// Infeasible is told that the driver refused the target (modifyVolumeStatus Infeasible). It
// counts the end once per episode; the episode stays for a retry's or a rollback's outcome.
func (o *ModifyObserver) Infeasible(key string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	ep := o.episodes[key]
	switch {
	case ep == nil:
		o.metrics.ModificationEnded(ModifyInfeasible)
	case !ep.infeasible:
		ep.infeasible = true
		o.metrics.ModificationDone(ModifyInfeasible, o.elapsed(ep.since))
	}
}

// Succeeded is told that the driver modified the volume and the PVC records the new class. It
// returns how long the modification took (0 when its start is not known), for the event.
func (o *ModifyObserver) Succeeded(key string) time.Duration { return o.end(key, ModifySuccess) }

// Cancelled is told that a Pending or Infeasible modification was rolled back.
func (o *ModifyObserver) Cancelled(key string) { o.end(key, ModifyCancelled) }

// end counts the result of the PVC's modification and drops its episode. Without an episode
// (none was begun in this process) the result is counted and its duration is not. It returns
// the duration, 0 when not known.
func (o *ModifyObserver) end(key, result string) time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	ep := o.episodes[key]
	delete(o.episodes, key)
	if ep == nil {
		o.metrics.ModificationEnded(result)
		return 0
	}
	took := o.elapsed(ep.since)
	o.metrics.ModificationDone(result, took)
	return took
}

// Forget drops the episode without an outcome: the PVC was deleted (the user's decision, not
// the modification's result), or it no longer wants a modification and this resizer did not
// see how that one ended.
func (o *ModifyObserver) Forget(key string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.episodes, key)
}

// elapsed is how long ago since was.
func (o *ModifyObserver) elapsed(since time.Time) time.Duration {
	return o.clock.Since(since).Round(time.Millisecond)
}
