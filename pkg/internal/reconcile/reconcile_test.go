package reconcile

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
)

// TestRunWorkers feeds three keys whose sync answers differ and checks what the loop does with
// each: an error is retried with the queue's backoff, a delay brings the key back, success is
// forgotten. Backoff and delay are a millisecond, so the retries come at once.
func TestRunWorkers(t *testing.T) {
	queue := workqueue.NewTypedRateLimitingQueue(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Millisecond, time.Millisecond))
	type call struct {
		key      string
		requeues int
	}
	calls := make(chan call, 64)
	sync := func(_ context.Context, key string) (time.Duration, error) {
		calls <- call{key, queue.NumRequeues(key)}
		switch key {
		case "ns/fails":
			return 0, errors.New("apiserver unavailable")
		case "ns/later":
			return time.Millisecond, nil
		}
		return 0, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { RunWorkers(ctx, queue, 2, "pvc", sync); close(done) }()
	for _, k := range []string{"ns/fails", "ns/later", "ns/done"} {
		queue.Add(k)
	}
	seen := map[string]int{}
	maxRequeues := map[string]int{}
	deadline := time.After(30 * time.Second)
	for seen["ns/fails"] < 3 || seen["ns/later"] < 3 {
		select {
		case c := <-calls:
			seen[c.key]++
			maxRequeues[c.key] = max(maxRequeues[c.key], c.requeues)
		case <-deadline:
			t.Fatalf("retries did not come: synced %v", seen)
		}
	}
	cancel()
	<-done
	if seen["ns/done"] != 1 {
		t.Errorf("a key whose sync succeeded was synced %d times, want 1", seen["ns/done"])
	}
	if maxRequeues["ns/fails"] < 2 {
		t.Errorf("an erroring key was not retried with backoff (requeues %d)", maxRequeues["ns/fails"])
	}
	if maxRequeues["ns/later"] != 0 {
		t.Errorf("a key synced with a delay counted %d backoff requeues, want 0 (forgotten, then added after the delay)", maxRequeues["ns/later"])
	}
	if !queue.ShuttingDown() {
		t.Error("the queue is not shut down after ctx ended")
	}
}

// TestRunWorkersFinishTheKeyOnStop: when ctx ends during a sync, the sync goes on with a context
// that is not cancelled (its writes are not cut off halfway), RunWorkers returns only once it
// has finished, and the keys still queued are not synced.
func TestRunWorkersFinishTheKeyOnStop(t *testing.T) {
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	syncing, finish := make(chan struct{}), make(chan struct{})
	var synced []string
	var cancelledInside bool
	sync := func(ctx context.Context, key string) (time.Duration, error) {
		synced = append(synced, key)
		close(syncing)
		<-finish
		cancelledInside = ctx.Err() != nil
		return 0, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	queue.Add("ns/first")
	go func() { RunWorkers(ctx, queue, 1, "pvc", sync); close(done) }()
	select {
	case <-syncing:
	case <-time.After(30 * time.Second):
		t.Fatal("the first key was not synced")
	}
	queue.Add("ns/second")
	cancel()
	select {
	case <-done:
		t.Fatal("RunWorkers returned while a sync was under way")
	default:
	}
	close(finish)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("RunWorkers did not return once the sync finished")
	}
	if cancelledInside {
		t.Error("the sync's context was cancelled by the stop")
	}
	if len(synced) != 1 {
		t.Errorf("synced %v, want only ns/first (the stop came before the next key)", synced)
	}
}
