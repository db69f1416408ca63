package controller

import (
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
)

// WorkTracker tells a test when the controller has nothing left to do, so that it can assert
// that something did NOT happen without waiting on a timer for a while and hoping it was long
// enough. It knows:
//   - the resourceVersion of the last event of each PVC and PV whose handler has run (and has
//     queued whatever it queues), so a test can tell that the controller has seen every write;
//   - the work in the queue: keys waiting to be taken, keys a worker is processing, and keys
//     waiting for a delayed add (AddAfter, AddRateLimited).
//
// The counts come from the queue's metrics hooks, which client-go calls under the queue's own
// lock in the same critical section as the change they count: there is no moment at which a
// key has left one count and not yet entered the next.
type WorkTracker struct {
	// mu guards the counts; it is taken inside the queue's lock, and never the other way.
	mu sync.Mutex
	// queued: added and not yet taken by a worker. taken and finished: by workers, so
	// taken - finished are being processed now.
	queued, taken, finished int
	handled                 map[string]string

	// timersMu guards timers and is held while a due key is handed to the queue, so that a
	// snapshot sees the key either waiting or queued. Order: timersMu, queue lock, mu.
	timersMu sync.Mutex
	// timers are the keys waiting for a delayed add, with when they are due.
	timers map[string]time.Time
}

// TrackWork gives the controller a queue that counts its work and hooks its event handlers.
// The queue is the one New builds (same rate limiter, same clock) except for the delayed adds,
// which it times itself, with client-go's rule that the earliest of two pending adds of a key
// wins. Call it after New and before the informers and Run start.
func TrackWork(c *Controller) *WorkTracker {
	t := &WorkTracker{handled: map[string]string{}, timers: map[string]time.Time{}}
	c.queue.ShutDown()
	plain := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Name: "csi-resizer", MetricsProvider: t, Clock: c.cfg.Clock})
	c.queue = workqueue.NewTypedRateLimitingQueueWithConfig(rateLimiter(c.cfg), workqueue.TypedRateLimitingQueueConfig[string]{
		Clock:         c.cfg.Clock,
		DelayingQueue: &trackedDelays{Typed: plain, t: t, clock: c.cfg.Clock},
	})
	c.eventHandled = t.eventHandled
	return t
}

// HandledClaim is the resourceVersion of the last event of PVC namespace/name that the
// controller's handler has dealt with ("" for none).
func (t *WorkTracker) HandledClaim(namespace, name string) string {
	return t.handledVersion("pvc " + namespace + "/" + name)
}

// HandledVolume is the same for PV name.
func (t *WorkTracker) HandledVolume(name string) string { return t.handledVersion("pv " + name) }

func (t *WorkTracker) handledVersion(key string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.handled[key]
}

// Pending is the controller's outstanding work: keys queued, keys being processed, and how long
// until the earliest delayed add is due (-1 when none waits).
func (t *WorkTracker) Pending() (queued, processing int, nextTimer time.Duration) {
	t.timersMu.Lock()
	defer t.timersMu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	nextTimer = -1
	now := time.Now()
	for _, due := range t.timers {
		if d := due.Sub(now); nextTimer < 0 || d < nextTimer {
			nextTimer = max(d, 0)
		}
	}
	return t.queued, t.taken - t.finished, nextTimer
}

// Processed is how many times a worker has taken a key from the queue so far.
func (t *WorkTracker) Processed() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.taken
}

func (t *WorkTracker) eventHandled(obj any) {
	var key, rv string
	switch o := obj.(type) {
	case *v1.PersistentVolumeClaim:
		key, rv = "pvc "+o.Namespace+"/"+o.Name, o.ResourceVersion
	case *v1.PersistentVolume:
		key, rv = "pv "+o.Name, o.ResourceVersion
	default:
		return
	}
	t.mu.Lock()
	t.handled[key] = rv
	t.mu.Unlock()
}

// trackedDelays is the queue's delaying layer, timing delayed adds itself so that they are
// counted until the key is in the queue.
type trackedDelays struct {
	*workqueue.Typed[string]
	t     *WorkTracker
	clock clock.Clock
}

func (q *trackedDelays) AddAfter(key string, d time.Duration) {
	if q.ShuttingDown() {
		return
	}
	if d <= 0 {
		q.Add(key)
		return
	}
	due := q.clock.Now().Add(d)
	q.t.timersMu.Lock()
	defer q.t.timersMu.Unlock()
	if cur, ok := q.t.timers[key]; ok && !due.Before(cur) {
		return
	}
	q.t.timers[key] = due
	time.AfterFunc(d, func() {
		q.t.timersMu.Lock()
		defer q.t.timersMu.Unlock()
		if !q.t.timers[key].Equal(due) {
			return // replaced by an earlier add, which has run or will
		}
		delete(q.t.timers, key)
		q.Add(key)
	})
}

// The workqueue.MetricsProvider side: only the depth gauge and the work-duration histogram
// count anything; the other metrics are discarded.

func (t *WorkTracker) NewDepthMetric(string) workqueue.GaugeMetric { return depthCounter{t} }
func (t *WorkTracker) NewAddsMetric(string) workqueue.CounterMetric {
	return discard{}
}
func (t *WorkTracker) NewLatencyMetric(string) workqueue.HistogramMetric { return discard{} }
func (t *WorkTracker) NewWorkDurationMetric(string) workqueue.HistogramMetric {
	return finishCounter{t}
}
func (t *WorkTracker) NewUnfinishedWorkSecondsMetric(string) workqueue.SettableGaugeMetric {
	return discard{}
}
func (t *WorkTracker) NewLongestRunningProcessorSecondsMetric(string) workqueue.SettableGaugeMetric {
	return discard{}
}
func (t *WorkTracker) NewRetriesMetric(string) workqueue.CounterMetric { return discard{} }

// depthCounter: Inc is a key entering the queue, Dec a worker taking it.
type depthCounter struct{ t *WorkTracker }

func (d depthCounter) Inc() {
	d.t.mu.Lock()
	d.t.queued++
	d.t.mu.Unlock()
}

func (d depthCounter) Dec() {
	d.t.mu.Lock()
	d.t.queued--
	d.t.taken++
	d.t.mu.Unlock()
}

// finishCounter: the work duration is observed when a worker is done with a key it took.
type finishCounter struct{ t *WorkTracker }

func (f finishCounter) Observe(float64) {
	f.t.mu.Lock()
	f.t.finished++
	f.t.mu.Unlock()
}

type discard struct{}

func (discard) Inc()            {}
func (discard) Set(float64)     {}
func (discard) Observe(float64) {}
