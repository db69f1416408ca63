package metrics

import (
	"context"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/csi-resizer/csi-resizer/pkg/expand"
)

// Observer turns the steps the controller takes, and the node's answers it sees, into the
// metrics of docs/design.md §2.5: state transitions, driver errors, the duration of an
// expansion from its first sight until it is done (node step included) or has failed, and the
// outcome of each recovery, counted once. Its bookkeeping is for metrics only: no decision
// reads it, and a restart that loses it loses the timing of the expansions under way, which
// are then observed neither as success nor as failure. It is safe for concurrent use.
type Observer struct {
	metrics *Recorder
	clock   clock.Clock

	mu       sync.Mutex
	episodes map[string]*episode
}

// episode is one expansion of one PVC, from its first sight to its outcome.
type episode struct {
	// since is when the expansion was first seen (after a restart: the Resizing condition's
	// lastTransitionTime), for the duration histogram.
	since time.Time
	// failed: the histogram has this expansion's failure already; a later success is still
	// observed, timed from since.
	failed bool
	// recovery: the expansion lowers the allocated size (a KEP-1790 recovery). It is counted
	// once, when its outcome is known: success when the expansion finishes (after the node
	// step, if any), failure when it becomes infeasible. Other errors keep it: the retry has
	// alloc == target, so its plan no longer says "recovery", and only this flag does.
	recovery bool
	// node is the node step this resizer handed over and waits to see finish; nil when it
	// does not wait for the node.
	node *nodeStep
}

// nodeStep is an expansion whose controller part succeeded and whose node part is pending:
// from is status.capacity before it, to the size handed to the node.
type nodeStep struct {
	from, to resource.Quantity
}

// NewObserver returns an observer that updates m, timing with clk.
func NewObserver(m *Recorder, clk clock.Clock) *Observer {
	return &Observer{metrics: m, clock: clk, episodes: map[string]*episode{}}
}

// episode returns the PVC's episode, nil if none; callers hold mu.
func (o *Observer) episode(key string) *episode { return o.episodes[key] }

// Begin is told that the controller acts on a PVC: the episode starts unless it goes on. A PVC
// first seen already failed (after a restart) had its failure observed by the process that saw
// it happen.
func (o *Observer) Begin(key string, pvc *v1.PersistentVolumeClaim, obs expand.Observed) {
	o.mu.Lock()
	defer o.mu.Unlock()
	ep := o.episode(key)
	if ep == nil {
		ep = &episode{since: o.clock.Now(), failed: expand.Failed(obs)}
		for _, cond := range pvc.Status.Conditions {
			if cond.Type == v1.PersistentVolumeClaimResizing && !cond.LastTransitionTime.IsZero() {
				ep.since = cond.LastTransitionTime.Time
			}
		}
		o.episodes[key] = ep
	}
	// A new step starts: a node step waited for is not what happens now.
	ep.node = nil
}

// Started is told that the target of plan is recorded and the expansion under way.
func (o *Observer) Started(key string, plan expand.Plan) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if ep := o.episode(key); ep != nil && plan.Recovery {
		ep.recovery = true
	}
}

// Failed is told of a driver error. Only infeasible settles the expansion, and a recovery, as
// Failed: after any other error the retry may well succeed.
func (o *Observer) Failed(key string, ce expand.ClassifiedError) {
	o.metrics.ExpandError(ce.Reason, string(ce.Class))
	if ce.Class == expand.ClassInfeasible {
		o.fail(key)
	}
}

// fail records the failure of the episode, once.
func (o *Observer) fail(key string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	ep := o.episode(key)
	if ep == nil {
		return
	}
	if ep.recovery {
		o.metrics.Recovery(false)
	}
	if !ep.failed {
		o.metrics.ExpansionDone(false, o.elapsed(ep.since))
	}
	ep.failed, ep.recovery, ep.node = true, false, nil
}

// Expanded is told that the control-plane part succeeded. With a node step the expansion is
// not done: it ends when the node finishes (nodeProgress). It returns whether the expansion was
// a recovery and how long it took, for the event.
func (o *Observer) Expanded(key string, from, to resource.Quantity, nodeRequired bool) (bool, time.Duration) {
	if nodeRequired {
		o.HandedToNode(key, from, to)
		return false, 0
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	ep := o.episode(key)
	if ep == nil {
		return false, 0
	}
	took := o.elapsed(ep.since)
	o.succeed(ep, took)
	delete(o.episodes, key)
	return ep.recovery, took
}

// HandedToNode is told that the node has the expansion (again) to size to.
func (o *Observer) HandedToNode(key string, from, to resource.Quantity) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if ep := o.episode(key); ep != nil {
		ep.node = &nodeStep{from: from.DeepCopy(), to: to.DeepCopy()}
	}
}

// succeed observes a finished expansion; callers hold mu.
func (o *Observer) succeed(ep *episode, took time.Duration) {
	if ep.recovery {
		o.metrics.Recovery(true)
	}
	o.metrics.ExpansionDone(true, took)
}

// NodeProgress reads the outcome of a node step the resizer waits for from the PVC: the
// duration and a recovery's success when the node finished, the failure when it became
// NodeResizeInfeasible. An expansion is done only when the node has grown the file system. It
// returns the recovery the node finished, nil if none, for the VolumeResizeRecovered event.
func (o *Observer) NodeProgress(ctx context.Context, key string, pvc *v1.PersistentVolumeClaim, obs expand.Observed) *Recovered {
	o.mu.Lock()
	ep := o.episode(key)
	if ep == nil || ep.node == nil {
		o.mu.Unlock()
		return nil
	}
	step := *ep.node
	outcome := expand.NodeStepOutcome(obs, step.to)
	o.mu.Unlock()
	logger := klog.FromContext(ctx)
	switch outcome {
	case expand.NodeDone:
		recovery, took := o.Expanded(key, step.from, step.to, false)
		logger.V(2).Info("The node finished the expansion", "size", step.to.String(), "took", took, "recovery", recovery)
		if recovery {
			return &Recovered{From: step.from, To: step.to, Took: took}
		}
	case expand.NodeFailed:
		logger.V(2).Info("The node failed the expansion", "size", step.to.String())
		o.fail(key)
	case expand.NodeGone:
		logger.V(4).Info("The node step this resizer waited for was replaced by another step", "state", obs.State)
		o.Begin(key, pvc, obs)
	}
	return nil
}

// Recovered is a recovery that the node finished: from status.capacity before it to the
// node's size, in Took.
type Recovered struct {
	From, To resource.Quantity
	Took     time.Duration
}

// Idle is told that the PVC needs nothing now. An episode that ended without this resizer
// recording its end (another resizer finished it, or this one restarted since) is dropped
// unobserved: its start or its outcome is not known.
func (o *Observer) Idle(key string, obs expand.Observed) {
	if obs.State != "" {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if ep := o.episode(key); ep != nil && ep.node == nil {
		delete(o.episodes, key)
	}
}

// Transition counts a written change of the resize state.
func (o *Observer) Transition(from, to v1.PersistentVolumeClaimStatus) {
	o.metrics.Transition(from.AllocatedResourceStatuses[v1.ResourceStorage], to.AllocatedResourceStatuses[v1.ResourceStorage])
}

// Forget drops the episode of a deleted PVC without an outcome: deleting the claim is the
// user's decision, and counting it as a failed recovery would fire CSIResizerRecoveryFailing.
func (o *Observer) Forget(key string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.episodes, key)
}

// elapsed is how long ago since was.
func (o *Observer) elapsed(since time.Time) time.Duration {
	return o.clock.Since(since).Round(time.Millisecond)
}
