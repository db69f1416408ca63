package prioritylimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// The tests run in synctest bubbles: time is fake and moves only when every goroutine of the
// bubble is blocked, so "who got a token, in which order, by when" is deterministic.

// grants records the order in which waiters got their token.
type grants struct {
	mu    sync.Mutex
	order []string
}

func (g *grants) add(name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.order = append(g.order, name)
}

func (g *grants) get() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.order...)
}

// start makes name wait on v in its own goroutine and returns once it is blocked (or done).
func start(t *testing.T, g *grants, v interface{ Wait(context.Context) error }, ctx context.Context, name string) {
	go func() {
		if err := v.Wait(ctx); err == nil {
			g.add(name)
		} else {
			g.add(name + ":" + err.Error())
		}
	}()
	synctest.Wait()
}

func equal(a, b []string) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

func TestBurstThenRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(2, 3)
		high, low := l.View(High), l.View(Low)
		for i := range 3 {
			if !high.TryAccept() {
				t.Fatalf("token %d of the burst of 3 refused", i+1)
			}
		}
		if high.TryAccept() || low.TryAccept() {
			t.Fatal("a 4th token was given with the bucket empty")
		}
		time.Sleep(500 * time.Millisecond) // 2 QPS: one token earned
		if !low.TryAccept() {
			t.Fatal("no token after 1/qps seconds")
		}
		if high.TryAccept() {
			t.Fatal("two tokens after 1/qps seconds")
		}
		if got := high.QPS(); got != 2 {
			t.Fatalf("QPS() = %v, want 2", got)
		}
	})
}

func TestHighBeforeLowWhateverTheArrivalOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(1, 1)
		high, low := l.View(High), l.View(Low)
		if !high.TryAccept() {
			t.Fatal("the full bucket refused")
		}
		g := &grants{}
		ctx := context.Background()
		start(t, g, low, ctx, "event-1")
		start(t, g, low, ctx, "event-2")
		start(t, g, high, ctx, "status-1")
		start(t, g, high, ctx, "status-2")
		if got := g.get(); len(got) != 0 {
			t.Fatalf("tokens given with the bucket empty: %v", got)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if got, want := g.get(), []string{"status-1", "status-2"}; !equal(got, want) {
			t.Fatalf("after 2 tokens: %v, want %v (status writes first, in arrival order)", got, want)
		}
		// A status write that comes while events wait still goes first.
		start(t, g, high, ctx, "status-3")
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if got, want := g.get(), []string{"status-1", "status-2", "status-3", "event-1", "event-2"}; !equal(got, want) {
			t.Fatalf("after 5 tokens: %v, want %v", got, want)
		}
	})
}

func TestLowIsNotDelayedWhenNothingElseWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(5, 10)
		low := l.View(Low)
		for i := range 10 {
			if err := low.Wait(context.Background()); err != nil {
				t.Fatalf("event %d: %v", i, err)
			}
		}
		if d := time.Since(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)); d != 0 {
			t.Fatalf("10 events within a burst of 10 waited %v", d)
		}
	})
}

// The budget is shared: however the requests are split between the classes, no more than
// burst + qps × t tokens are given by t, and every token earned is given while anyone waits.
func TestOneBudgetForBothClasses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(5, 10)
		g := &grants{}
		ctx := context.Background()
		for i := range 30 {
			start(t, g, l.View(Low), ctx, "low")
			start(t, g, l.View(High), ctx, fmt.Sprint("high-", i))
		}
		// At t=0 the burst went to the first comers (5 of each, alternating); 50 wait.
		if got := len(g.get()); got != 10 {
			t.Fatalf("at t=0: %d tokens given, want the burst of 10", got)
		}
		for sec := 1; sec <= 10; sec++ {
			time.Sleep(time.Second)
			synctest.Wait()
			if got, want := len(g.get()), min(60, 10+5*sec); got != want {
				t.Fatalf("at t=%ds: %d tokens given, want burst + qps × t = %d", sec, got, want)
			}
		}
		// After the burst, the 25 waiting high requests went before the 25 waiting lows.
		order := g.get()[10:]
		for i, name := range order {
			if (i < 25) != (name != "low") {
				t.Fatalf("token %d after the burst went to %q; order %v", i+11, name, order)
			}
		}
	})
}

func TestCanceledWaiterGivesWayAndLosesNoToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(1, 1)
		high, low := l.View(High), l.View(Low)
		high.Accept()
		g := &grants{}
		ctx, cancel := context.WithCancel(context.Background())
		start(t, g, high, ctx, "status")
		start(t, g, low, context.Background(), "event")
		if low.TryAccept() {
			t.Fatal("TryAccept of an event succeeded with the bucket empty")
		}
		cancel()
		synctest.Wait()
		if got, want := g.get(), []string{"status:" + context.Canceled.Error()}; !equal(got, want) {
			t.Fatalf("after the cancel: %v, want %v", got, want)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if got, want := g.get(), []string{"status:" + context.Canceled.Error(), "event"}; !equal(got, want) {
			t.Fatalf("one second later: %v, want %v (the event has the token nobody else waits for)", got, want)
		}
	})
}

func TestWaitPastItsDeadlineTakesNoToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(1, 1)
		high, low := l.View(High), l.View(Low)
		high.Accept()
		err := low.Wait(timeoutCtx(t, 500*time.Millisecond))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait with a deadline before the next token: %v, want DeadlineExceeded", err)
		}
		// The token earned at t=1s is still there for the next request.
		time.Sleep(500 * time.Millisecond)
		if !high.TryAccept() {
			t.Fatal("the token earned at t=1s was lost to the expired waiter")
		}
	})
}

func timeoutCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
