package scenario

import (
	"strings"
	"testing"
	"time"
)

// A forbidden answer logged while the apiserver restarted is excused; one outside the window,
// or one without a klog header (whose time is unknown), is reported.
func TestForbiddenLinesExcuseOnlyTheRestartWindow(t *testing.T) {
	now := time.Now()
	stamp := func(at time.Time) string {
		return "E" + at.Format("0102 15:04:05.000000") + "    42 reflector.go:227] "
	}
	var r apiserverRestarts
	r.windows = []restartWindow{{from: now.Add(-10 * time.Second), to: now.Add(-5 * time.Second)}}
	log := stamp(now.Add(-20*time.Second)) + `"Failed to watch" err="pvcs is forbidden: before"` + "\n" +
		stamp(now.Add(-7*time.Second)) + `"Failed to watch" err="pvcs is forbidden: during"` + "\n" +
		stamp(now.Add(-7*time.Second)) + `"Caches populated"` + "\n" +
		stamp(now.Add(-time.Second)) + `"Failed to watch" err="pvcs is forbidden: after"` + "\n" +
		`plain line: forbidden` + "\n"
	got := ForbiddenLines(log, r.excused)
	if len(got) != 3 {
		t.Fatalf("got %d lines, want the ones before and after the window and the one without a header:\n%q", len(got), got)
	}
	for i, want := range []string{"before", "after", "plain line"} {
		if !strings.Contains(got[i], want) {
			t.Errorf("line %d = %q, want the %q one", i, got[i], want)
		}
	}
	// A window still open (stopped, not yet started) excuses everything since its start.
	r.windows = append(r.windows, restartWindow{from: now.Add(-2 * time.Second)})
	if got := ForbiddenLines(log, r.excused); len(got) != 2 {
		t.Errorf("with an open window: got %q, want the 'before' and header-less lines", got)
	}
}
