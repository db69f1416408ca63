// Package prioritylimit shares one client-side token bucket (--kube-api-qps, --kube-api-burst)
// between two classes of API requests: the ones a resize waits for (PVC status and PV writes,
// the informers' lists and watches), and the events that report what happened.
//
// With one client-go clientset both classes draw from the same flowcontrol token bucket in
// arrival order, so every event written while PVCs are still waiting delays a resize by one
// token (at the default 5 QPS, 200 PVCs took 129 s where their 600 writes need 120 s). Two
// clientsets with a bucket each would end that, but let the sidecar send twice the rate the
// user set. Here both classes take tokens from one bucket, so the total rate is exactly the
// user's, and a token goes to an event only when no high-priority request is waiting for one:
// events are written in the gaps, and all at once when the resizes are done.
//
// Within a class, waiters are served first come, first served.
package prioritylimit

import (
	"context"
	"math"
	"sync"
	"time"

	"k8s.io/client-go/util/flowcontrol"
)

// Priority is a request class.
type Priority int

const (
	// High: every request other than events.
	High Priority = iota
	// Low: events; served only when no High request waits.
	Low
	classes
)

// Limiter is a token bucket holding up to burst tokens, refilled at qps tokens per second,
// shared by two flowcontrol.RateLimiter views (High and Low).
type Limiter struct {
	qps   float64
	burst float64

	mu     sync.Mutex
	tokens float64
	last   time.Time
	// queues holds the waiters of each class, oldest first.
	queues [classes][]*waiter
	// timer wakes the limiter when the next token is due and someone waits for it; nil when
	// no wake-up is pending.
	timer *time.Timer
}

type waiter struct {
	ready   chan struct{}
	granted bool
}

// New returns a full bucket of burst tokens (at least 1) refilled at qps (> 0) per second.
func New(qps float32, burst int) *Limiter {
	b := float64(max(burst, 1))
	return &Limiter{qps: float64(qps), burst: b, tokens: b, last: time.Now()}
}

// View returns the flowcontrol.RateLimiter through which requests of class p take tokens, for
// rest.Config.RateLimiter.
func (l *Limiter) View(p Priority) flowcontrol.RateLimiter {
	return view{l: l, p: p}
}

// refill adds the tokens earned since the last refill. Callers hold mu.
func (l *Limiter) refill(now time.Time) {
	if d := now.Sub(l.last); d > 0 {
		l.tokens = math.Min(l.burst, l.tokens+d.Seconds()*l.qps)
	}
	l.last = now
}

// waiting reports whether a request of class p or of a higher class waits. Callers hold mu.
func (l *Limiter) waiting(p Priority) bool {
	for q := High; q <= p; q++ {
		if len(l.queues[q]) > 0 {
			return true
		}
	}
	return false
}

// tryTake takes a token for class p if one is there and nobody who comes first waits.
func (l *Limiter) tryTake(p Priority) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refill(time.Now())
	if l.tokens < 1 || l.waiting(p) {
		return false
	}
	l.tokens--
	return true
}

// wait blocks until a token is handed to the caller (class p) or ctx is done.
func (l *Limiter) wait(ctx context.Context, p Priority) error {
	w := &waiter{ready: make(chan struct{})}
	l.mu.Lock()
	l.queues[p] = append(l.queues[p], w)
	l.dispatch()
	l.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if w.granted {
		// Handed over as the context ended: give it back to the next waiter.
		l.tokens++
	} else {
		l.remove(p, w)
	}
	l.dispatch()
	return ctx.Err()
}

// dispatch hands the tokens there are to the waiters, High first, and arranges a wake-up for
// the next token when someone is left waiting. Callers hold mu.
func (l *Limiter) dispatch() {
	l.refill(time.Now())
	for l.tokens >= 1 {
		w := l.pop()
		if w == nil {
			break
		}
		l.tokens--
		w.granted = true
		close(w.ready)
	}
	if l.timer != nil || !l.waiting(Low) {
		return
	}
	next := time.Duration(math.Ceil((1 - l.tokens) / l.qps * float64(time.Second)))
	l.timer = time.AfterFunc(next, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.timer = nil
		l.dispatch()
	})
}

// pop removes and returns the oldest waiter of the highest class that has one.
func (l *Limiter) pop() *waiter {
	for p := High; p < classes; p++ {
		if q := l.queues[p]; len(q) > 0 {
			l.queues[p] = q[1:]
			return q[0]
		}
	}
	return nil
}

func (l *Limiter) remove(p Priority, w *waiter) {
	q := l.queues[p]
	for i := range q {
		if q[i] == w {
			l.queues[p] = append(q[:i:i], q[i+1:]...)
			return
		}
	}
}

// view is one class's flowcontrol.RateLimiter.
type view struct {
	l *Limiter
	p Priority
}

func (v view) TryAccept() bool                { return v.l.tryTake(v.p) }
func (v view) Accept()                        { _ = v.l.wait(context.Background(), v.p) }
func (v view) Wait(ctx context.Context) error { return v.l.wait(ctx, v.p) }
func (v view) QPS() float32                   { return float32(v.l.qps) }

// Stop does nothing, as client-go's token bucket: the limiter holds no goroutine, and a
// pending wake-up only serves waiters.
func (v view) Stop() {}
