//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// TestDriverChartArgs: with the command line that drivers' charts pass to external-resizer,
// the resizer starts, leads and resizes, and with --logging-format=json every line it writes
// is a JSON object. The accepted-but-inactive parts say so once each.
func TestDriverChartArgs(t *testing.T) {
	e := startMock(t, scenario.Options{NoResizer: true})
	port := framework.FreePort(t)
	p := framework.StartResizer(t, e.Cluster, e.Kubeconfig, e.Driver,
		"--leader-election-namespace="+e.Namespace,
		"--v=5", "--leader-election", fmt.Sprintf("--http-endpoint=:%d", port), "--timeout=60s",
		"--handle-volume-inuse-error=false", "--extra-modify-metadata", "--feature-gates=VolumeAttributesClass=true",
		"--logging-format=json", "--automaxprocs", "--kube-api-qps=20", "--kube-api-burst=100", "--workers=100",
		"--retry-interval-max=30m")
	// The charts' --http-endpoint=:PORT listens on every address; the framework's default
	// (127.0.0.1:<other port>) is overridden by it.
	p.HTTPAddr = fmt.Sprintf("127.0.0.1:%d", port)
	p.WaitHTTP(t, "/metrics", 90*time.Second)
	scenario.FailOnForbidden(t, p)
	e.Resizer = p

	e.NewClaim(t, "data", "1Gi")
	e.SetRequest(t, "data", "2Gi")
	e.WaitClaim(t, "data", resizeTimeout, scenario.Done("2Gi"))

	lines := logLines(p)
	verbose := 0
	for _, line := range lines {
		var obj map[string]any
		if err := json.Unmarshal([]byte(line), &obj); err != nil {
			t.Errorf("log line is not a JSON object (%v): %s", err, line)
			continue
		}
		if v, ok := obj["v"].(float64); ok && v >= 4 {
			verbose++
		}
	}
	if verbose == 0 {
		t.Errorf("no line logged at -v=4 or more among %d lines: --v=5 had no effect", len(lines))
	}
	// The VolumeAttributesClass line says whether modification runs (docs/design.md §2.11); no
	// flag of the chart is reported as accepted without effect.
	for _, once := range []string{"VolumeAttributesClass modification o", "maxprocs: "} {
		if n := countContaining(lines, once); n != 1 {
			t.Errorf("%d log lines say %q, want 1", n, once)
		}
	}
	for _, never := range []string{"not implemented", "has no effect"} {
		if n := countContaining(lines, never); n != 0 {
			t.Errorf("%d log lines say %q, want none", n, never)
		}
	}
}

// logLines is p's log without the framework's "=== <name> start" headers.
func logLines(p *framework.Process) []string {
	var out []string
	for _, line := range strings.Split(strings.TrimRight(p.Log(), "\n"), "\n") {
		if line != "" && !strings.HasPrefix(line, "=== ") {
			out = append(out, line)
		}
	}
	return out
}

func countContaining(lines []string, s string) int {
	n := 0
	for _, line := range lines {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

// TestReleaseLeaderElectionOnExit: on SIGTERM the leader releases its Lease (the holder is
// cleared, a standby takes over at once) with --feature-gates=ReleaseLeaderElectionOnExit=true,
// and leaves it to expire without it (the gate's default, as in external-resizer).
func TestReleaseLeaderElectionOnExit(t *testing.T) {
	e := startMock(t, scenario.Options{NoResizer: true})
	le := []string{"--leader-election", "--leader-election-lease-duration=4s", "--leader-election-renew-deadline=3s", "--leader-election-retry-period=1s"}
	lease := leaseNameOf(e.Driver.Name)
	holder := func() string {
		l, err := e.Client.CoordinationV1().Leases(e.Namespace).Get(e.Ctx, lease, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return ""
		}
		if err != nil {
			t.Fatalf("get Lease %s: %v", lease, err)
		}
		if l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}

	// Without the gate: the Lease still names the stopped process.
	first := e.StartResizer(t, le...)
	framework.Eventually(t, 60*time.Second, func() (bool, string) {
		return holder() != "" && first.LogContains("Starting workers"), "the first process does not lead Lease " + lease + " with its workers started yet"
	})
	stopped := holder()
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	if h := holder(); h != stopped {
		t.Fatalf("after SIGTERM without ReleaseLeaderElectionOnExit the Lease holder is %q, want %q still (left to expire)", h, stopped)
	}
	if code := first.ExitCode(); code != 0 {
		t.Errorf("exit status %d after SIGTERM without ReleaseLeaderElectionOnExit, want 0", code)
	}

	// With the gate: the next process leads (once the old Lease expired) and resizes; on
	// SIGTERM the holder is cleared before the process exits.
	second := e.StartResizer(t, append(le, "--feature-gates=ReleaseLeaderElectionOnExit=true")...)
	framework.Eventually(t, 60*time.Second, func() (bool, string) {
		h := holder()
		return h != "" && h != stopped, fmt.Sprintf("Lease %s held by %q, want the second process", lease, h)
	})
	e.NewClaim(t, "data", "1Gi")
	e.SetRequest(t, "data", "2Gi")
	e.WaitClaim(t, "data", resizeTimeout, scenario.Done("2Gi"))
	if err := second.Stop(); err != nil {
		t.Fatal(err)
	}
	if h := holder(); h != "" {
		t.Errorf("after SIGTERM with ReleaseLeaderElectionOnExit the Lease holder is %q, want it cleared", h)
	}
	// A clean stop, release included, exits 0 (upstream's csi-lib-utils exits 1 after the
	// release: docs/design.md §1).
	if code := second.ExitCode(); code != 0 {
		t.Errorf("exit status %d after SIGTERM with ReleaseLeaderElectionOnExit, want 0", code)
	}
}
