package scenario

import (
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/csi-resizer/csi-resizer/test/framework"
)

// apiserverRestarts records when a test had the apiserver down or starting. A kube-apiserver
// serves requests a moment before its RBAC authorizer has loaded the roles (readyz still fails
// on poststarthook/rbac/bootstrap-roles), and answers "forbidden ... clusterrole not found"
// meanwhile. A component whose informers reconnect in that moment logs it; that is the
// apiserver starting, not the shipped RBAC lacking a permission, so the forbidden check excuses
// lines logged inside a restart window, and only those.
type apiserverRestarts struct {
	mu      sync.Mutex
	windows []restartWindow
	// refusals are markers of refusals a test provokes on purpose (ExpectRefusals).
	refusals []string
}

type restartWindow struct{ from, to time.Time }

func (r *apiserverRestarts) excused(at time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range r.windows {
		if !at.Before(w.from) && (w.to.IsZero() || !at.After(w.to)) {
			return true
		}
	}
	return false
}

// StopAPIServer stops kube-apiserver; StartAPIServer must follow. Forbidden answers logged from
// now until StartAPIServer returns are the apiserver's start-up, not missing RBAC.
func (e *Env) StopAPIServer(t testing.TB) {
	t.Helper()
	e.restarts.mu.Lock()
	e.restarts.windows = append(e.restarts.windows, restartWindow{from: time.Now()})
	e.restarts.mu.Unlock()
	e.Cluster.StopAPIServer(t)
}

// StartAPIServer starts the stopped kube-apiserver and waits until it is ready (RBAC loaded).
func (e *Env) StartAPIServer(t testing.TB) {
	t.Helper()
	e.Cluster.StartAPIServer(t)
	e.restarts.mu.Lock()
	if n := len(e.restarts.windows); n > 0 && e.restarts.windows[n-1].to.IsZero() {
		e.restarts.windows[n-1].to = time.Now()
	}
	e.restarts.mu.Unlock()
}

// ExpectRefusals excuses, in the forbidden check of this Env's processes, the lines that contain
// marker: refusals the test provokes on purpose (an admission policy it installs, say), which
// say nothing about the shipped RBAC. Make the marker specific (the policy's name).
func (e *Env) ExpectRefusals(marker string) {
	e.restarts.mu.Lock()
	defer e.restarts.mu.Unlock()
	e.restarts.refusals = append(e.restarts.refusals, marker)
}

// failOnForbidden is FailOnForbidden for a process of this Env: lines logged while the Env's
// apiserver was restarting, and refusals the test expects (ExpectRefusals), are excused.
func (e *Env) failOnForbidden(t testing.TB, p *framework.Process) {
	t.Helper()
	t.Cleanup(func() {
		e.restarts.mu.Lock()
		markers := append([]string(nil), e.restarts.refusals...)
		e.restarts.mu.Unlock()
		var unexpected []string
		for _, line := range strings.Split(p.Log(), "\n") {
			if !slices.ContainsFunc(markers, func(m string) bool { return strings.Contains(line, m) }) {
				unexpected = append(unexpected, line)
			}
		}
		if denied := ForbiddenLines(strings.Join(unexpected, "\n"), e.restarts.excused); len(denied) > 0 {
			t.Errorf("%s was refused by the apiserver (the shipped RBAC lacks a permission?):\n%s", p.Name, strings.Join(denied, "\n"))
		}
	})
}

// FailOnForbidden fails the test when it ends if p's log has a line saying the apiserver
// refused the process something ("forbidden"): a component run with the shipped RBAC must never
// be refused, so such a line means the RBAC lacks a permission. It reads the whole log, across
// restarts of p. (A test that provokes a forbidden answer on purpose, e.g. with a
// ResourceQuota, must not use it.)
func FailOnForbidden(t testing.TB, p *framework.Process) {
	t.Helper()
	t.Cleanup(func() { reportForbidden(t, p, func(time.Time) bool { return false }) })
}

func reportForbidden(t testing.TB, p *framework.Process, excused func(time.Time) bool) {
	if denied := ForbiddenLines(p.Log(), excused); len(denied) > 0 {
		t.Errorf("%s was refused by the apiserver (the shipped RBAC lacks a permission?):\n%s",
			p.Name, strings.Join(denied, "\n"))
	}
}

// ForbiddenLines returns the lines of a component's log in which the apiserver refused it
// something, leaving out those whose klog time excused reports true (a line without a klog
// header is never excused).
func ForbiddenLines(log string, excused func(time.Time) bool) []string {
	var denied []string
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, "forbidden") {
			continue
		}
		if at, ok := klogTime(line); ok && excused(at) {
			continue
		}
		denied = append(denied, line)
	}
	return denied
}

// klogHeader matches klog's line header, e.g. "E1125 03:00:49.829508": severity, month and
// day, and the local time of day.
var klogHeader = regexp.MustCompile(`^[IWEF](\d{4} \d{2}:\d{2}:\d{2}\.\d{6}) `)

func klogTime(line string) (time.Time, bool) {
	m := klogHeader.FindStringSubmatch(line)
	if m == nil {
		return time.Time{}, false
	}
	now := time.Now()
	at, err := time.ParseInLocation("0102 15:04:05.000000", m[1], time.Local)
	if err != nil {
		return time.Time{}, false
	}
	// klog leaves out the year; a log line is from this test run, so from this year (or from
	// last year's last day when the run crosses New Year).
	at = at.AddDate(now.Year(), 0, 0)
	if at.After(now.Add(time.Hour)) {
		at = at.AddDate(-1, 0, 0)
	}
	return at, true
}
