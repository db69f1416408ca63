package scenario

// Leader election as the tests observe it: the Lease's holder, and every version of the Lease,
// so that a test can see the moment a leader released it (the holder cleared) even when a
// standby takes it over a moment later.

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/csi-resizer/csi-resizer/test/framework"
)

// LeaseHolder is the holder of the Lease namespace/name, "" when it has none or does not exist.
func (e *Env) LeaseHolder(t testing.TB, namespace, name string) string {
	t.Helper()
	l, err := e.Client.CoordinationV1().Leases(namespace).Get(e.Ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return ""
	}
	if err != nil {
		t.Fatalf("get Lease %s/%s: %v", namespace, name, err)
	}
	return ptr.Deref(l.Spec.HolderIdentity, "")
}

// WaitLeaseHolder waits until the Lease has a holder for which ok is true, and returns it.
func (e *Env) WaitLeaseHolder(t testing.TB, namespace, name string, timeout time.Duration, what string, ok func(holder string) bool) string {
	t.Helper()
	var holder string
	framework.Eventually(t, timeout, func() (bool, string) {
		holder = e.LeaseHolder(t, namespace, name)
		return holder != "" && ok(holder), fmt.Sprintf("Lease %s/%s held by %q, want %s", namespace, name, holder, what)
	})
	return holder
}

// WatchLease starts recording the versions of the Lease namespace/name from its current one.
func (e *Env) WatchLease(t testing.TB, namespace, name string) *History[*coordinationv1.Lease] {
	t.Helper()
	leases := e.Client.CoordinationV1().Leases(namespace)
	cur, err := leases.Get(e.Ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get Lease %s/%s: %v", namespace, name, err)
	}
	describe := func(l *coordinationv1.Lease) string {
		return fmt.Sprintf("Lease %s/%s: holder %q renewed %v", l.Namespace, l.Name, ptr.Deref(l.Spec.HolderIdentity, ""), l.Spec.RenewTime)
	}
	return watchHistory(t, e, cur.ResourceVersion, describe, func(rv string) (watch.Interface, error) {
		return leases.Watch(e.Ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: rv})
	})
}

// Released is a History.Wait condition: the Lease has no holder, i.e. its holder released it.
func Released(l *coordinationv1.Lease) bool { return ptr.Deref(l.Spec.HolderIdentity, "") == "" }

// LogEntry is one line of a process logging with --logging-format=json.
type LogEntry struct {
	// Time is the entry's "ts" (milliseconds since the epoch, on the machine's clock).
	Time time.Time
	Msg  string
	Line string
}

// JSONLog parses p's log (without the framework's "=== <name> start" headers) as one JSON
// object per line, failing the test for every line that is not one: with
// --logging-format=json, a log pipeline must be able to parse every line a process writes.
func JSONLog(t testing.TB, p *framework.Process) []LogEntry {
	t.Helper()
	var entries []LogEntry
	for _, line := range strings.Split(strings.TrimRight(p.Log(), "\n"), "\n") {
		if line == "" || strings.HasPrefix(line, "=== ") {
			continue
		}
		var obj struct {
			TS  float64 `json:"ts"`
			Msg string  `json:"msg"`
		}
		if err := json.Unmarshal([]byte(line), &obj); err != nil || obj.TS == 0 {
			t.Errorf("%s: log line is not a JSON log entry (%v): %s", p.Name, err, line)
			continue
		}
		entries = append(entries, LogEntry{Time: time.UnixMicro(int64(obj.TS * 1000)), Msg: obj.Msg, Line: line})
	}
	return entries
}

// FirstEntry is the first entry whose message starts with msg; ok is false when there is none.
func FirstEntry(entries []LogEntry, msg string) (LogEntry, bool) {
	for _, e := range entries {
		if strings.HasPrefix(e.Msg, msg) {
			return e, true
		}
	}
	return LogEntry{}, false
}
