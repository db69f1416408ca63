//go:build cluster

package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/csi-resizer/csi-resizer/test/framework"
)

// Fail-over as production sees it (docs/cluster.md "Fail-over"): TestOperations' two replicas
// lose their leader while 16 resizes are in flight, by SIGKILL of the leader's container (no Lease
// release; the kubelet restarts the container, whose fresh process races the standby) and,
// separately, by cutting the leader pod's network in its network namespace (the process lives on,
// cut off from the apiserver). No ResourceQuota holds anything back.

// upstreamResizerImage is the released external-resizer v2.2.1 as the cluster holds it
// (hack/cluster/build-images.sh, from ../shared/anchors/external-resizer-v2.2.1).
const upstreamResizerImage = "registry.k8s.io/sig-storage/csi-resizer:v2.2.1"

// The leader election timing both images run with: the flags' defaults (csi-lib-utils' and ours).
const (
	failoverLeaseDuration = 15 * time.Second
	failoverRetryPeriod   = 5 * time.Second
	// client-go waits RetryPeriod times up to 1.2 between tries (wait.JitterUntil, factor 1.2).
	failoverJitter = 1.2
)

// failoverBound is how long after losing its leader a replica must hold the Lease: the Lease
// duration (counted by the standby from when it saw the last renewal, which it sees up to one
// try late) and one more try after the Lease expired, plus 3 s for the writes and the machine.
func failoverBound() time.Duration {
	retry := time.Duration(float64(failoverRetryPeriod) * failoverJitter)
	return failoverLeaseDuration + 2*retry + 3*time.Second
}

type failoverMode string

const (
	failoverKill      failoverMode = "SIGKILL"
	failoverPartition failoverMode = "partition"
)

// failoverResult is one row of the take-over table.
type failoverResult struct {
	image, mode   string
	winner        string        // "standby" or "restarted container"
	restarted     time.Duration // SIGKILL: from the kill to the restarted container's start (1 s steps)
	takeover      time.Duration // from the kill or the cut to the first renewal of the Lease after it
	allGrown      time.Duration // from the kill or the cut to every PV at its new size
	leftByLeader  int           // resizes the old leader had not recorded in the PV
	driverCalls   int           // ControllerExpandVolume calls for the 16 volumes
	repeatedCalls int           // calls for a volume whose PV had its size before the fail-over
}

// envFailoverUpstream=1 runs the fail-overs with upstream's image too, for the side-by-side
// table; make check runs ours alone (upstream's side checks nothing of this project).
const envFailoverUpstream = "FAILOVER_UPSTREAM"

// opsFailover runs both fail-overs with our image (and upstream's), and logs the table.
func opsFailover(t *testing.T, c *Cluster) {
	// Our image must pass every check; upstream's runs the same steps for the table, its
	// differences logged rather than failed.
	images := []struct {
		name, ref string
		strict    bool
	}{{"ours", c.ProductImage, true}, {"upstream v2.2.1", upstreamResizerImage, false}}
	if os.Getenv(envFailoverUpstream) != "1" {
		images = images[:1]
		t.Logf("upstream's side skipped (%s=1 runs it, as docs/cluster.md's table was made)", envFailoverUpstream)
	}
	var rows []failoverResult
	for _, img := range images {
		for _, mode := range []failoverMode{failoverKill, failoverPartition} {
			name := strings.ReplaceAll(img.name+"/"+string(mode), " ", "-")
			t.Run(name, func(t *testing.T) {
				opsRunImage(t, c, img.ref)
				r := opsFailoverOnce(t, c, mode, img.strict)
				r.image = img.name
				rows = append(rows, r)
			})
		}
	}
	opsRunImage(t, c, c.ProductImage)
	var b strings.Builder
	fmt.Fprintf(&b, "| image | fail-over | container restarted after | Lease taken by | take-over | all 17 PVs grown | left by the leader | ControllerExpandVolume calls (16 PVs) | repeated for a size done |\n")
	for _, r := range rows {
		restarted := "—"
		if r.restarted > 0 {
			restarted = fmt.Sprintf("%.0f s", r.restarted.Seconds())
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %.1f s | %.1f s | %d | %d | %d |\n", r.image, r.mode, restarted, r.winner,
			r.takeover.Seconds(), r.allGrown.Seconds(), r.leftByLeader, r.driverCalls, r.repeatedCalls)
	}
	t.Logf("fail-over table (bound on the take-over: %s):\n%s", failoverBound(), b.String())
}

// opsRunImage makes the replicas run image and waits for both to be ready.
func opsRunImage(t *testing.T, c *Cluster, image string) {
	t.Helper()
	if _, err := c.Kubectl(t, "-n", opsNS, "set", "image", opsDeployment, "csi-resizer="+image); err != nil {
		t.Fatal(err)
	}
	if out, err := c.Kubectl(t, "-n", opsNS, "rollout", "status", opsDeployment, "--timeout=180s"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// opsFailoverOnce: 16 PVCs are grown and the leader lost at once (mode); a replica must take the
// Lease within failoverBound, every PV reach its size (and one more PVC grown after the
// take-over), no volume whose PV had its size get a second ControllerExpandVolume, and the new
// holder's "became leader" event name it.
func opsFailoverOnce(t *testing.T, c *Cluster, mode failoverMode, strict bool) failoverResult {
	ctx := context.Background()
	leader, pods, _ := opsWaitLeader(t, c)
	if len(pods) != 2 {
		t.Fatalf("want 2 running replicas, have %v", pods)
	}
	prefix := strings.ToLower(fmt.Sprintf("fo-%s-%d", mode, time.Now().UnixNano()%100000))
	names, handles := opsFailoverPVCs(t, c, prefix, 16)

	for _, n := range names {
		if err := opsRequest(ctx, c, opsNS, n, "2Gi"); err != nil {
			t.Fatal(err)
		}
	}
	var lost time.Time
	switch mode {
	case failoverKill:
		lost = opsKillContainer(t, c, leader, "csi-resizer")
	case failoverPartition:
		lost = opsPartition(t, c, leader, "csi-resizer")
	}
	done := map[string]bool{} // PVs at their size when the leader was lost: no call may repeat them
	for _, n := range names {
		got, err := opsPVSize(ctx, c, opsNS, n)
		if err != nil {
			t.Fatal(err)
		}
		done[n] = got.Cmp(resource.MustParse("2Gi")) == 0
	}
	holder, renewed := opsWaitRenewalAfter(t, c, lost)
	r := failoverResult{mode: string(mode), takeover: renewed.Sub(lost), leftByLeader: len(names) - countTrue(done)}
	r.winner = opsWinner(t, c, holder, leader)
	t.Logf("%s of the leader %s with %d of %d resizes recorded; Lease renewed by %s (%s) %s later",
		mode, leader, countTrue(done), len(names), holder, r.winner, r.takeover.Round(100*time.Millisecond))
	if mode == failoverKill {
		r.restarted = opsRestartedAfter(t, c, leader, "csi-resizer", lost)
		t.Logf("the kubelet started the killed container again %s after the kill", r.restarted)
	}
	if r.takeover > failoverBound() {
		t.Errorf("the Lease was taken %s after the %s, more than the Lease duration and one retry (%s)", r.takeover, mode, failoverBound())
	}

	after := prefix + "-after"
	if err := opsRequest(ctx, c, opsNS, after, "2Gi"); err != nil {
		t.Fatal(err)
	}
	all := append(append([]string{}, names...), after)
	var grown int
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		grown, err = opsGrown(ctx, c, opsNS, all, "2Gi")
		return err == nil && grown == len(all), err
	})
	if err != nil {
		t.Fatalf("%d of %d PVs at 2Gi after the %s: %v", grown, len(all), mode, err)
	}
	r.allGrown = time.Since(lost)
	var repeats []string
	r.driverCalls, r.repeatedCalls, repeats = opsCountExpandCalls(t, c, names, handles, done)
	for _, m := range repeats {
		if strict {
			t.Error(m)
		} else {
			t.Log("(not ours, not failed) " + m)
		}
	}
	opsCheckLeaderEvent(t, c, holder, lost)
	if mode == failoverPartition {
		opsHealPartition(t)
	}
	return r
}

// opsRestartedAfter waits for the kubelet to run pod's container again after the kill and
// returns how long after it the new one started (the status has whole seconds).
func opsRestartedAfter(t *testing.T, c *Cluster, pod, container string, killed time.Time) time.Duration {
	t.Helper()
	var started time.Time
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().Pods(opsNS).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, s := range p.Status.ContainerStatuses {
			if s.Name == container && s.RestartCount > 0 && s.State.Running != nil {
				started = s.State.Running.StartedAt.Time
				return !started.Before(killed.Truncate(time.Second)), nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the kubelet did not run %s of %s again after the kill: %v", container, pod, err)
	}
	if d := started.Sub(killed.Truncate(time.Second)); d > 0 {
		return d
	}
	return time.Nanosecond // within the second of the kill
}

// opsFailoverPVCs creates n bound PVCs of 1Gi (and one more, <prefix>-after) and returns the n
// names and their volume handles; they are deleted at cleanup.
func opsFailoverPVCs(t *testing.T, c *Cluster, prefix string, n int) (names []string, handles map[string]string) {
	t.Helper()
	ctx := context.Background()
	var pvcs []*corev1.PersistentVolumeClaim
	for i := 0; i < n; i++ {
		names = append(names, fmt.Sprintf("%s-%d", prefix, i))
		pvcs = append(pvcs, hostpathPVC(opsNS, names[i], "1Gi"))
	}
	pvcs = append(pvcs, hostpathPVC(opsNS, prefix+"-after", "1Gi"))
	t.Cleanup(func() {
		for _, p := range pvcs {
			_ = c.Client.CoreV1().PersistentVolumeClaims(opsNS).Delete(ctx, p.Name, metav1.DeleteOptions{})
		}
	})
	opsCreateBound(t, c, pvcs...)
	handles = map[string]string{}
	for _, name := range names {
		p, err := c.Client.CoreV1().PersistentVolumeClaims(opsNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pv, err := c.Client.CoreV1().PersistentVolumes().Get(ctx, p.Spec.VolumeName, metav1.GetOptions{})
		if err != nil || pv.Spec.CSI == nil {
			t.Fatalf("PV of %s: %v (csi %v)", name, err, pv.Spec.CSI)
		}
		handles[name] = pv.Spec.CSI.VolumeHandle
	}
	return names, handles
}

// opsContainerPID is the host PID of pod's container (the node shares the machine's PID
// namespace), read from the node's containerd by the container ID the pod's status gives.
func opsContainerPID(t *testing.T, c *Cluster, pod, container string) int {
	t.Helper()
	p, err := c.Client.CoreV1().Pods(opsNS).Get(context.Background(), pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var id string
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == container && s.State.Running != nil {
			_, id, _ = strings.Cut(s.ContainerID, "://")
		}
	}
	if id == "" {
		t.Fatalf("pod %s/%s has no running container %s", opsNS, pod, container)
	}
	out, err := c.InNode(t, c.env["CTR"], "--address", c.env["CONTAINERD_SOCK"], "-n", "k8s.io", "task", "ls")
	if err != nil {
		t.Fatalf("ctr task ls: %v\n%s", err, out)
	}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == id {
			pid, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatalf("ctr task ls: %q: %v", l, err)
			}
			return pid
		}
	}
	t.Fatalf("ctr task ls has no task %s (container %s of %s)\n%s", id, container, pod, out)
	return 0
}

// opsKillContainer sends SIGKILL to the container's process and returns once it is gone.
func opsKillContainer(t *testing.T, c *Cluster, pod, container string) time.Time {
	t.Helper()
	pid := opsContainerPID(t, c, pod, container)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d (%s of %s): %v", pid, container, pod, err)
	}
	killed := time.Now()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		// Gone, or a zombie its shim has not reaped yet: either way it runs no more.
		return err != nil || strings.Contains(string(stat), ") Z "), nil
	})
	if err != nil {
		t.Fatalf("process %d (%s of %s) still runs after SIGKILL", pid, container, pod)
	}
	return killed
}

// The partition: every packet in and out of the pod's network namespace but loopback's is
// dropped, so the leader can reach neither the apiserver (through the Service or directly) nor
// be probed, while it still reaches the driver (a unix socket). The namespace file stays open
// so the rules can be removed after the container has been restarted.
var failoverRules = [][]string{{"INPUT", "!", "-i", "lo", "-j", "DROP"}, {"OUTPUT", "!", "-o", "lo", "-j", "DROP"}}

var partitioned *os.File

func opsPartition(t *testing.T, c *Cluster, pod, container string) time.Time {
	t.Helper()
	pid := opsContainerPID(t, c, pod, container)
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		t.Fatal(err)
	}
	partitioned = ns
	t.Cleanup(func() { opsHealPartition(t) })
	for _, r := range failoverRules {
		if err := opsIptables(ns, append([]string{"-I"}, r...)...); err != nil {
			t.Fatal(err)
		}
	}
	return time.Now()
}

// opsHealPartition removes the partition's rules (a no-op once done).
func opsHealPartition(t *testing.T) {
	if partitioned == nil {
		return
	}
	for _, r := range failoverRules {
		if err := opsIptables(partitioned, append([]string{"-D"}, r...)...); err != nil {
			t.Errorf("removing the partition: %v", err)
		}
	}
	partitioned.Close()
	partitioned = nil
}

func opsIptables(netns *os.File, args ...string) error {
	cmd := exec.Command("nsenter", append([]string{"--net=/proc/self/fd/3", "iptables", "-w"}, args...)...)
	cmd.ExtraFiles = []*os.File{netns}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("iptables %s in the leader's network namespace: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// opsWaitRenewalAfter waits for the first renewal of the Lease after t0 (the old leader can
// renew no more, so it is the new holder's acquisition) and returns the holder and the renewal's
// own time.
func opsWaitRenewalAfter(t *testing.T, c *Cluster, t0 time.Time) (string, time.Time) {
	t.Helper()
	var holder string
	var renewed time.Time
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		lease, err := c.Client.CoordinationV1().Leases(opsNS).Get(ctx, opsLease, metav1.GetOptions{})
		if err != nil || lease.Spec.RenewTime == nil || lease.Spec.HolderIdentity == nil {
			return false, err
		}
		holder, renewed = *lease.Spec.HolderIdentity, lease.Spec.RenewTime.Time
		return renewed.After(t0), nil
	})
	if err != nil {
		t.Fatalf("no renewal of Lease %s after %s (holder %q, renewed %s): %v", opsLease, t0.Format(time.StampMilli), holder, renewed.Format(time.StampMilli), err)
	}
	return holder, renewed
}

// opsWinner says whether the Lease went to the standby or to the old leader's pod (its
// restarted container: upstream's identity is the host name alone, ours adds a random suffix).
func opsWinner(t *testing.T, c *Cluster, holder, oldLeader string) string {
	t.Helper()
	pods, err := opsPods(context.Background(), c, opsNS, opsSelector)
	if err != nil {
		t.Fatal(err)
	}
	pod, _, _, err := opsLeaderPod(context.Background(), c, opsNS, append(pods, oldLeader))
	switch {
	case err != nil:
		t.Fatal(err)
	case pod == "":
		t.Fatalf("Lease holder %q is none of the replicas %v", holder, pods)
	case pod == oldLeader:
		return "restarted container"
	}
	return "standby"
}

// opsCountExpandCalls counts csi-driver-host-path's ControllerExpandVolume calls (its -v=5
// log) for the volumes of names: each must have at least one, and exactly one where the PV had
// its size when the leader was lost (done); those repeated are returned as messages.
func opsCountExpandCalls(t *testing.T, c *Cluster, names []string, handles map[string]string, done map[string]bool) (calls, repeated int, repeats []string) {
	t.Helper()
	log, err := c.Kubectl(t, "logs", "-n", "default", "csi-hostpathplugin-0", "-c", "hostpath")
	if err != nil {
		t.Fatalf("driver log: %v", err)
	}
	perVolume := map[string]int{}
	for _, id := range framework.HostpathExpandCalls(log) {
		perVolume[id]++
	}
	for _, n := range names {
		got := perVolume[handles[n]]
		calls += got
		switch {
		case got == 0:
			t.Errorf("%s: no ControllerExpandVolume call for volume %s", n, handles[n])
		case done[n] && got > 1:
			repeated += got - 1
			repeats = append(repeats, fmt.Sprintf("%s: %d ControllerExpandVolume calls for volume %s, whose PV was at 2Gi before the fail-over", n, got, handles[n]))
		}
	}
	return calls, repeated, repeats
}

// opsCheckLeaderEvent waits for the new holder's LeaderElection event on the Lease ("<identity>
// became leader"), recorded after the old leader was lost.
func opsCheckLeaderEvent(t *testing.T, c *Cluster, holder string, lost time.Time) {
	t.Helper()
	var seen []string
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := c.Client.CoreV1().Events(opsNS).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + opsLease})
		if err != nil {
			return false, err
		}
		seen = seen[:0]
		for _, e := range list.Items {
			seen = append(seen, e.Reason+": "+e.Message)
			last := e.LastTimestamp.Time
			if e.EventTime.Time.After(last) {
				last = e.EventTime.Time
			}
			if e.Reason == "LeaderElection" && strings.Contains(e.Message, holder+" became leader") && !last.Before(lost.Truncate(time.Second)) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("no LeaderElection event %q on Lease %s after the fail-over: %v; events: %v", holder+" became leader", opsLease, err, seen)
	}
}

func countTrue(m map[string]bool) int {
	n := 0
	for _, v := range m {
		if v {
			n++
		}
	}
	return n
}
