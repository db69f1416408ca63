//go:build integration

package integration

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/desired"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/webhook"
	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// Clean shutdown of both binaries (docs/design.md §1), on the real apiserver with two
// leader-elected replicas each: a standby exits 0 at once on SIGTERM and leaves the Lease alone;
// the leader's workers finish the item they are on, then the Lease is released (the holder is
// cleared after the "Workers stopped" line, by the process's own clock), the process exits 0, and
// the other replica takes over long before the Lease would have expired. Both run with
// --logging-format=json, and every line they write is a JSON object.

// shutdownLease: a lease duration the takeover must beat by far (a released Lease is taken at
// the standby's next retry, 1s); were the Lease not released, the takeover would need all of it.
var shutdownLease = []string{"--leader-election", "--leader-election-lease-duration=60s",
	"--leader-election-renew-deadline=20s", "--leader-election-retry-period=1s", "--logging-format=json"}

// terminate sends SIGTERM to p (not to its process group: only the process itself is told) and
// waits until it exits, returning its exit status.
func terminate(t *testing.T, p *framework.Process, timeout time.Duration) int {
	t.Helper()
	if err := syscall.Kill(p.Pid(), syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM %s: %v", p.Name, err)
	}
	if err := p.WaitExit(timeout); err != nil && p.ExitCode() < 0 {
		t.Fatalf("%s after SIGTERM: %v\n%s", p.Name, err, p.LogTail(30))
	}
	return p.ExitCode()
}

// checkHandover checks, for the stopped leader's JSON log and the Lease's history, that the
// workers stopped before the Lease was released, and returns the release.
func checkHandover(t *testing.T, leader *framework.Process, history *scenario.History[*coordinationv1.Lease]) *coordinationv1.Lease {
	t.Helper()
	released := history.Wait(t, 10*time.Second, "with the holder cleared (released)", scenario.Released)
	log := scenario.JSONLog(t, leader)
	stopped, ok := scenario.FirstEntry(log, "Workers stopped")
	if !ok {
		t.Fatalf("%s did not log that its workers stopped:\n%s", leader.Name, leader.LogTail(20))
	}
	if _, ok := scenario.FirstEntry(log, "Lease released"); !ok {
		t.Errorf("%s did not log the release", leader.Name)
	}
	if at := released.Spec.RenewTime.Time; stopped.Time.After(at) {
		t.Errorf("the Lease was released at %s, before the workers stopped at %s", at.Format(time.RFC3339Nano), stopped.Time.Format(time.RFC3339Nano))
	}
	return released
}

// TestCleanShutdownCSIResizer: csi-resizer with ReleaseLeaderElectionOnExit. The leader is
// stopped while its worker is in a ControllerExpandVolume call (the driver holds it 4s): the
// call's answer is recorded by the stopping leader (the driver is called once for the volume),
// and only then is the Lease released.
func TestCleanShutdownCSIResizer(t *testing.T) {
	e := startMock(t, scenario.Options{NoResizer: true})
	args := append([]string{"--feature-gates=ReleaseLeaderElectionOnExit=true", "--timeout=30s"}, shutdownLease...)
	lease := leaseNameOf(e.Driver.Name)
	a := e.StartResizer(t, args...)
	leader := e.WaitLeaseHolder(t, e.Namespace, lease, time.Minute, "the first replica", func(string) bool { return true })
	b := e.StartResizer(t, args...)
	// The leader says so in the metric the CSIResizerNoLeader alert reads, labelled with the Lease.
	if v := scenario.MetricValue(scenario.Scrape(t, a), "leader_election_master_status", `name="`+lease+`"`); v != 1 {
		t.Errorf("leader_election_master_status{name=%q} = %v on the leader, want 1", lease, v)
	}

	if code := terminate(t, b, 30*time.Second); code != 0 {
		t.Errorf("the standby exited %d on SIGTERM, want 0", code)
	}
	if h := e.LeaseHolder(t, e.Namespace, lease); h != leader {
		t.Errorf("after the standby's stop the Lease is held by %q, want the leader %q", h, leader)
	}
	b.Start(t)
	b.WaitHTTP(t, "/metrics", 90*time.Second)

	_, pv := e.NewClaim(t, "data", "1Gi")
	vol := pv.Spec.CSI.VolumeHandle
	e.Driver.SetFaults(t, []framework.Fault{{Method: "ControllerExpandVolume", VolumeID: vol, Delay: 4 * time.Second, Times: 1}})
	history := e.WatchLease(t, e.Namespace, lease)
	e.SetRequest(t, "data", "2Gi")
	framework.Eventually(t, time.Minute, func() (bool, string) {
		return scenario.LoggedExpandCall(a, vol), "the leader has not called the driver for " + vol
	})
	if code := terminate(t, a, time.Minute); code != 0 {
		t.Errorf("the leader exited %d on SIGTERM, want 0:\n%s", code, a.LogTail(20))
	}
	released := checkHandover(t, a, history)
	calls := expandCallsFor(e.Driver.Calls(t, "ControllerExpandVolume"), vol)
	if len(calls) != 1 || calls[0].End().After(released.Spec.RenewTime.Time) {
		t.Errorf("ControllerExpandVolume calls for %s: %s; want the leader's one, ended before the release at %s", vol, framework.DescribeCalls(calls), released.Spec.RenewTime.Time)
	}
	e.WaitLeaseHolder(t, e.Namespace, lease, 30*time.Second, "the standby, long before the 60s lease expired", func(h string) bool { return h != leader })
	e.WaitClaim(t, "data", resizeTimeout, scenario.Done("2Gi"))
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		return b.LogContains("Starting workers"), "the new leader has not started its workers"
	})
	scenario.JSONLog(t, b)
}

// TestCleanShutdownStatefulSetResizer: statefulset-resizer's controller (which always releases)
// and its webhook, two processes as in the shipped install. The standby controller's SIGTERM
// leaves the Lease alone; the leader's hands it over at once. The webhook's SIGTERM fails /readyz
// at once while the apiserver's calls are still answered for --webhook-shutdown-delay (10s), and
// the process exits 0 after that.
func TestCleanShutdownStatefulSetResizer(t *testing.T) {
	e := startMock(t, scenario.Options{NoResizer: true})
	kubeconfig := scenario.ApplyStatefulSetResizerRBAC(t, e.Cluster, e.Namespace)
	const lease = "statefulset-resizer"
	a := e.StartStatefulSetResizer(t, kubeconfig, shutdownLease...)
	leader := e.WaitLeaseHolder(t, e.Namespace, lease, time.Minute, "the first replica", func(string) bool { return true })
	b := e.StartStatefulSetResizer(t, kubeconfig, shutdownLease...)
	w := e.StartWebhook(t, "--webhook-shutdown-delay=10s", "--logging-format=json")

	if code := terminate(t, b, 30*time.Second); code != 0 {
		t.Errorf("the standby exited %d on SIGTERM, want 0", code)
	}
	if h := e.LeaseHolder(t, e.Namespace, lease); h != leader {
		t.Errorf("after the standby's stop the Lease is held by %q, want the leader %q", h, leader)
	}
	if _, ok := scenario.FirstEntry(scenario.JSONLog(t, b), "Workers stopped"); ok {
		t.Error("the standby logged that its workers stopped: it never had any")
	}
	b.Start(t)
	b.WaitHTTP(t, "/healthz", 90*time.Second)

	probe := e.NewStatefulSet(scenario.StatefulSetOptions{Name: "drain", Size: "1Gi"})
	probe.Labels = map[string]string{desired.OptInLabel: desired.OptInValue}
	sets := e.Client.AppsV1().StatefulSets(e.Namespace)
	if _, err := sets.Create(e.Ctx, probe, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	history := e.WatchLease(t, e.Namespace, lease)
	for _, p := range []*framework.Process{a, w.Process} {
		if err := syscall.Kill(p.Pid(), syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	readyz := strings.TrimSuffix(w.URL, webhook.Path) + webhook.ReadyPath
	framework.Eventually(t, 5*time.Second, func() (bool, string) {
		code, err := httpsStatus(readyz)
		return code == http.StatusServiceUnavailable, fmt.Sprintf("GET %s after SIGTERM: %d %v, want 503", readyz, code, err)
	})
	// Through the apiserver: a template size change is accepted only when the webhook answers
	// (without it, the apiserver's "Forbidden: updates to statefulset spec").
	for i := range 2 {
		cur, err := sets.Get(e.Ctx, probe.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[v1.ResourceStorage] = resource.MustParse(fmt.Sprintf("%dGi", 2+i))
		if _, err := sets.Update(e.Ctx, cur, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Fatalf("a template change while the webhook drains (call %d): %v", i+1, err)
		}
	}
	for name, p := range map[string]*framework.Process{"the leader": a, "the webhook": w.Process} {
		if err := p.WaitExit(time.Minute); err != nil && p.ExitCode() < 0 {
			t.Fatal(err)
		}
		if code := p.ExitCode(); code != 0 {
			t.Errorf("%s exited %d on SIGTERM, want 0:\n%s", name, code, p.LogTail(20))
		}
	}
	checkHandover(t, a, history)
	for _, msg := range []string{"Stopping: the webhook is still served meanwhile", "Draining the admission webhook"} {
		if _, ok := scenario.FirstEntry(scenario.JSONLog(t, w.Process), msg); !ok {
			t.Errorf("the webhook did not log %q", msg)
		}
	}
	e.WaitLeaseHolder(t, e.Namespace, lease, 30*time.Second, "the standby, long before the 60s lease expired", func(h string) bool { return h != leader })
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		return b.LogContains("Starting controller"), "the new leader has not started its controller"
	})
	scenario.JSONLog(t, b)
}

// httpsStatus is the status of GET url on a server whose certificate the test does not check
// (the webhook's generated one; only the answer matters here).
func httpsStatus(url string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // a test reading a status code
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// leaseNameOf is upstream external-resizer's Lease name for a driver, as csi-lib-utils
// sanitizes it.
func leaseNameOf(driver string) string {
	name := regexp.MustCompile("[^a-zA-Z0-9-]").ReplaceAllString("external-resizer-"+driver, "-")
	if strings.HasSuffix(name, "-") {
		name += "X"
	}
	return name
}
