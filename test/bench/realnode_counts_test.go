//go:build integration

package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/csi-resizer/csi-resizer/test/cluster"
)

// What BenchmarkRealNode counts after the fact (realnode_test.go): the writes of the apiserver's
// audit log per client, and the driver's CSI calls from its log.

// countWrites reads the apiserver's audit log (write verbs only, hack/cluster/up.sh) for
// [from, to]: the resizer's writes (the pod's ServiceAccount, user agent csi-resizer), the
// other containers' of the pod (same ServiceAccount) and the kubelet's (system:node:<node>).
// It first waits until the log has an entry received after to, so that none of the window is
// still unwritten.
func countWrites(b *testing.B, c *cluster.Cluster, sa string, from, to time.Time) (resizer, kubelet, sidecars auditWrites) {
	node := "system:node:" + c.NodeName
	path := c.LogPath("audit")
	waitFor(b, time.Minute, func() (bool, string) {
		var latest time.Time
		_ = scanAudit(path, func(ev auditEvent) {
			if ev.Received.After(latest) {
				latest = ev.Received
			}
		})
		return latest.After(to), fmt.Sprintf("the audit log %s has no entry after %s yet (latest %s)", path, to.Format(time.RFC3339Nano), latest.Format(time.RFC3339Nano))
	})
	resizer, kubelet, sidecars = newWrites(), newWrites(), newWrites()
	err := scanAudit(path, func(ev auditEvent) {
		if ev.Stage != "ResponseComplete" || ev.Received.Before(from) || ev.Received.After(to) {
			return
		}
		switch {
		case isResizer(ev, sa):
			resizer.add(ev, "")
		case ev.User.Username == sa:
			program, _, _ := strings.Cut(ev.UserAgent, "/")
			sidecars.add(ev, program+": ")
		case ev.User.Username == node:
			kubelet.add(ev, "")
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	return resizer, kubelet, sidecars
}

func newWrites() auditWrites { return auditWrites{ByTarget: map[string]int{}} }

func isResizer(ev auditEvent, sa string) bool {
	return ev.User.Username == sa && strings.HasPrefix(ev.UserAgent, "csi-resizer")
}

// waitResizerQuiet waits until the resizer (the ServiceAccount sa with user agent
// csi-resizer) has written nothing for resizerQuiet, and returns then and its last write since
// from.
func waitResizerQuiet(b *testing.B, c *cluster.Cluster, sa string, from time.Time) (end, last time.Time) {
	path := c.LogPath("audit")
	last = from
	quiet := pollUntil(5*time.Minute, time.Second, func() bool {
		if err := scanAudit(path, func(ev auditEvent) {
			if isResizer(ev, sa) && ev.Received.After(last) {
				last = ev.Received
			}
		}); err != nil {
			b.Fatal(err)
		}
		return time.Since(last) >= resizerQuiet
	})
	if !quiet {
		b.Fatalf("the resizer kept writing for 5 minutes after the last PVC was done (last write %s)", last.Format(time.RFC3339Nano))
	}
	return time.Now(), last
}

func (w *auditWrites) add(ev auditEvent, prefix string) {
	what := prefix + ev.Verb
	if r := ev.ObjectRef; r != nil {
		what += " " + r.Resource
		if r.APIGroup != "" {
			what += "." + r.APIGroup
		}
		if r.Subresource != "" {
			what += "/" + r.Subresource
		}
		if r.Resource == "events" {
			w.Events++
		}
	}
	if ev.ResponseStatus != nil && ev.ResponseStatus.Code >= 400 {
		w.Failed++
		what += fmt.Sprintf(" (%d)", ev.ResponseStatus.Code)
	}
	w.Total++
	w.ByTarget[what]++
}

func scanAudit(path string, fn func(auditEvent)) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("the audit log (hack/cluster/up.sh writes it): %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		var ev auditEvent
		if json.Unmarshal(sc.Bytes(), &ev) == nil {
			fn(ev)
		}
	}
	return sc.Err()
}

// driverCalls counts the CSI calls csi-driver-host-path logged in [from, to] (its -v=5 log has a
// "GRPC call: <method>" line per call; kubectl logs --timestamps adds the runtime's time).
func driverCalls(b *testing.B, c *cluster.Cluster, from, to time.Time) map[string]int {
	out, err := c.Kubectl(b, "logs", hostpathPod, "-c", "hostpath", "--timestamps")
	if err != nil {
		b.Fatal(err)
	}
	calls := map[string]int{}
	for _, line := range strings.Split(out, "\n") {
		ts, rest, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		_, method, ok := strings.Cut(rest, "GRPC call: ")
		if !ok {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil || t.Before(from) || t.After(to) {
			continue
		}
		method = strings.TrimSpace(method)
		calls[method[strings.LastIndex(method, "/")+1:]]++
	}
	return calls
}
