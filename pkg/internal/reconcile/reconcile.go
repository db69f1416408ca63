// Package reconcile is the worker loop every controller of the project shares
// (docs/design.md §5): workers take keys from a rate-limited work queue and hand each to the
// controller's sync, which reads its listers and decides; the loop only turns sync's answer
// into the queue's bookkeeping.
package reconcile

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// SyncFunc reconciles one key. An error retries the key with the queue's per-key backoff; a
// positive delay, with no error, looks at the key again after that delay (a retry timed by the
// object itself); zero forgets the key until an event queues it again.
type SyncFunc func(ctx context.Context, key string) (time.Duration, error)

// RunWorkers runs workers goroutines over queue until ctx ends, then shuts the queue down and
// waits for them: a key being synced is finished, not abandoned, and no other key is taken.
// kind names the keys in logs.
//
// The syncs run on a context the end of ctx does not cancel: cancelled, a sync would stop
// halfway, between a driver call and the write that records its answer, or between the steps
// of a re-create, and leave the next leader to find out what happened. How long the last syncs
// may take is bounded by the process (internal/lifecycle's grace period), not here.
func RunWorkers(ctx context.Context, queue workqueue.TypedRateLimitingInterface[string], workers int, kind string, syncKey SyncFunc) {
	syncCtx := context.WithoutCancel(ctx)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			wait.UntilWithContext(ctx, func(context.Context) {
				for ctx.Err() == nil && ProcessNext(syncCtx, queue, kind, syncKey) {
				}
			}, time.Second)
		})
	}
	<-ctx.Done()
	queue.ShutDown()
	wg.Wait()
}

// ProcessNext waits for one key and syncs it; false once the queue is shut down. A shut-down
// queue still hands out the keys it holds; they are left alone (the process is stopping).
func ProcessNext(ctx context.Context, queue workqueue.TypedRateLimitingInterface[string], kind string, syncKey SyncFunc) bool {
	key, quit := queue.Get()
	if quit {
		return false
	}
	defer queue.Done(key)
	if queue.ShuttingDown() {
		return false
	}
	next, err := syncKey(ctx, key)
	switch {
	case err != nil:
		klog.FromContext(ctx).Error(err, "Sync failed; retrying with backoff", kind, key, "retries", queue.NumRequeues(key))
		queue.AddRateLimited(key)
	case next > 0:
		queue.Forget(key)
		queue.AddAfter(key, next)
	default:
		queue.Forget(key)
	}
	return true
}
