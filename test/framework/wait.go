package framework

import (
	"testing"
	"time"
)

// PollInterval is how often Eventually and Consistently re-check.
const PollInterval = 100 * time.Millisecond

// Eventually calls cond until it returns true, failing the test with cond's
// last message when timeout passes. cond returns a description of the state
// it saw, so the failure says what was wrong, not only that time ran out.
func Eventually(t testing.TB, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	if msg, ok := poll(timeout, cond, true); !ok {
		t.Fatalf("condition not met within %v: %s", timeout, msg)
	}
}

// Consistently calls cond for the whole duration and fails the test as soon
// as it returns false: for "this must not happen" checks (e.g. no further
// driver call while a PVC waits for its retry).
func Consistently(t testing.TB, duration time.Duration, cond func() (bool, string)) {
	t.Helper()
	if msg, ok := poll(duration, cond, false); !ok {
		t.Fatalf("condition broken within %v: %s", duration, msg)
	}
}

// poll runs cond every PollInterval for up to d. With untilTrue it returns
// ok at the first true; without, it returns not ok at the first false and ok
// when d passed.
func poll(d time.Duration, cond func() (bool, string), untilTrue bool) (string, bool) {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(PollInterval)
	defer tick.Stop()
	for {
		ok, msg := cond()
		if ok == untilTrue {
			return msg, untilTrue
		}
		if time.Now().After(deadline) {
			return msg, !untilTrue
		}
		<-tick.C
	}
}
