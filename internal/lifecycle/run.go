// Package lifecycle runs a binary's controllers for as long as the process should, with or
// without leader election, and stops them in the order a clean handover needs
// (docs/design.md §1): on the stop (SIGTERM, SIGINT) the workers finish the item they are on,
// then, and only then, the Lease is released (when the binary releases it), then the process
// exits 0. A standby has nothing to finish and exits 0 at once. Both csi-resizer and
// statefulset-resizer run through Run.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// ErrNotStopped is what Run returns when the controller did not stop within the grace period:
// the process must exit without handing its Lease over, since a worker may still be writing.
var ErrNotStopped = errors.New("the controller did not stop in time")

// Run runs run (the controllers) until ctx ends (the stop) or run fails; with an elector only
// while this process leads. After the stop it waits at most grace for run to return, then
// ends the leader election: the Lease is released when the elector was built with Release, and
// only once run has returned (released earlier, a standby could start on an object this
// process is still writing). It returns run's error when run failed by itself, ErrNotStopped
// (wrapped) when run outlived the grace period, and nil after a clean stop.
func Run(ctx context.Context, grace time.Duration, el *Elector, run func(context.Context) error) error {
	w := &worker{stop: ctx, run: run, started: make(chan struct{}), done: make(chan error, 1)}
	if el == nil {
		go w.start(ctx)
		return w.wait(grace)
	}
	// The election's own context: the stop does not end it, so that leading, and renewing the
	// Lease, lasts as long as the controller runs.
	electionCtx, endElection := context.WithCancel(context.WithoutCancel(ctx))
	defer endElection()
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		el.run(electionCtx, w.start)
	}()
	err := w.wait(grace)
	if errors.Is(err, ErrNotStopped) {
		klog.FromContext(ctx).Info("Not releasing the Lease while the controller may still write: a standby takes over when it expires", "lease", el.describe())
		return err
	}
	el.end(ctx, w.hasStarted(), endElection, ended)
	return err
}

// worker is one run of the controllers: started once this process may run them (at once, or
// when it becomes the leader), done when they return.
type worker struct {
	stop    context.Context
	run     func(context.Context) error
	started chan struct{}
	done    chan error

	mu sync.Mutex
	// stopping: wait has seen the stop; a leadership won from then on starts nothing, so that
	// "not started" stays true once wait has relied on it.
	stopping bool
}

// start runs the controllers while leading lasts and the process is not stopping.
func (w *worker) start(leading context.Context) {
	w.mu.Lock()
	if w.stopping {
		w.mu.Unlock()
		return
	}
	close(w.started)
	w.mu.Unlock()
	ctx, cancel := context.WithCancel(leading)
	defer cancel()
	defer context.AfterFunc(w.stop, cancel)()
	w.done <- w.run(ctx)
}

func (w *worker) hasStarted() bool {
	select {
	case <-w.started:
		return true
	default:
		return false
	}
}

// wait waits until the controllers end by themselves (their error), or the stop comes; then,
// if they had started, until they return, at most grace. Once stopped, what they return is
// the stop's doing (e.g. caches that could not sync because the stop came first), not an
// error.
func (w *worker) wait(grace time.Duration) error {
	select {
	case err := <-w.done:
		if w.stop.Err() != nil {
			return nil
		}
		return err
	case <-w.stop.Done():
	}
	w.mu.Lock()
	w.stopping = true
	w.mu.Unlock()
	logger := klog.FromContext(w.stop)
	if !w.hasStarted() {
		return nil // a standby, or stopped before the controllers could start
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-w.done:
		logger.Info("Workers stopped: every item under way was finished")
		return nil
	case <-timer.C:
		return fmt.Errorf("%w: the workers did not finish within %s of the stop", ErrNotStopped, grace)
	}
}
