//go:build cluster

package cluster

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/csi-resizer/csi-resizer/pkg/autoscale/policy"
)

const (
	// autoscalerNS is where the test installs volume-autoscaler, as docs/autoscaler.md does.
	autoscalerNS = "csi-resizer-system"
	// autoscaleClass is the test's StorageClass of csi-driver-host-path, opted in with
	// pvc-autoresizer's key (the switch a pvc-autoresizer user makes) and our class-wide settings.
	autoscaleClass = "csi-hostpath-autoscale"
	// autoscaleCooldown is --cooldown: long enough that the test sees the cooldown skip after the
	// file system grew (told 15-31s after a resize here, under load), short enough for a test.
	autoscaleCooldown = 60 * time.Second
	// hostpathDataDir is csi-driver-host-path's data directory on the node (its manifest's
	// hostPath): every file system volume is a directory in it.
	hostpathDataDir = "/var/lib/csi-hostpath-data"
)

// TestVolumeAutoscaler runs volume-autoscaler as shipped (deploy/kubernetes/volume-autoscaler,
// this checkout's image, its ServiceAccount and ClusterRole, the cluster CA verifying the
// kubelet's serving certificate) against the real kubelet's /stats/summary. csi-driver-host-path
// (with this checkout's csi-resizer) keeps its volumes as directories of its data directory, so
// the test gives that directory a small XFS of its own (a loop device in the node's mount
// namespace) and grows it after each resize as a block driver's node expansion would (XFS, not
// ext4: ext4's online resize needs CAP_SYS_RESOURCE, which this machine withholds from root). A pod's
// volume filled by dd past the threshold is grown by the step; the next step waits for the file
// system to grow, then for the cooldown, and is clamped to the limit; at the limit the autoscaler
// warns. Before that, on the nearly empty file system, the inode threshold (the XFS's inode cap
// lowered for it). The ServiceAccount reads nodes/stats and is refused nodes/proxy.
func TestVolumeAutoscaler(t *testing.T) {
	c := clusterFor(t)
	begin := time.Now()
	deployHostpathOnce(t, c)
	useOurResizer(t, c)
	// Above 1Gi (the flag takes bytes) the driver answers OUT_OF_RANGE (Infeasible): the recovery's case. Undone with
	// the rest of the StatefulSet by useOurResizer's cleanup.
	hostpathArg(t, c, "--max-volume-size=1073741824")
	fs := mountHostpathDataFS(t, c, 300)
	t.Logf("csi-driver-host-path with our resizer on a 300Mi XFS (%s) in %s", fs.dev, time.Since(begin).Round(time.Second))

	begin = time.Now()
	installAutoscaler(t, c)
	t.Logf("volume-autoscaler installed and ready in %s", time.Since(begin).Round(time.Second))
	t.Run("RBAC", func(t *testing.T) { autoscalerRBAC(t, c) })

	// The class first: its cleanup runs after the namespace's (whose PVs the driver deletes).
	createAutoscaleClass(t, c)
	a := &autoscaleEnv{scenarioEnv: scenarioEnv{c: c, ns: scenarioNamespace(t, c, "autoscale"), ctx: context.Background()}, fs: fs}
	// First, while the file system is nearly empty: its free bytes stay far above their threshold.
	t.Run("InodeThreshold", func(t *testing.T) {
		begin := time.Now()
		a.inodeThreshold(t)
		t.Logf("inode threshold crossed and the PVC grown in %s", time.Since(begin).Round(time.Second))
	})
	begin = time.Now()
	a.steps(t)
	t.Logf("fill, resize, wait for the file system, cooldown, clamp and limit in %s", time.Since(begin).Round(time.Second))
	// The data directory's file system is still past the threshold: a StatefulSet's volume on it
	// is grown at once, and a new replica's volume is raised to its sibling's size.
	t.Run("InfeasibleRecovered", func(t *testing.T) {
		begin := time.Now()
		a.infeasible(t)
		t.Logf("infeasible step recovered in %s", time.Since(begin).Round(time.Second))
	})
	t.Run("StatefulSetNewReplica", func(t *testing.T) {
		begin := time.Now()
		a.newReplica(t)
		t.Logf("StatefulSet replica grown and new replica raised in %s", time.Since(begin).Round(time.Second))
	})
}

// hostpathArg appends an argument to the hostpath container of the driver's StatefulSet and
// waits for the rollout.
func hostpathArg(t *testing.T, c *Cluster, arg string) {
	t.Helper()
	names, err := c.Kubectl(t, "get", "statefulset/csi-hostpathplugin", "-o", `jsonpath={range .spec.template.spec.containers[*]}{.name}{"\n"}{end}`)
	if err != nil {
		t.Fatal(err)
	}
	i := -1
	for n, name := range strings.Fields(names) {
		if name == "hostpath" {
			i = n
		}
	}
	if i < 0 {
		t.Fatalf("no container hostpath in statefulset/csi-hostpathplugin: %q", names)
	}
	patch := fmt.Sprintf(`[{"op":"add","path":"/spec/template/spec/containers/%d/args/-","value":%q}]`, i, arg)
	if _, err := c.Kubectl(t, "patch", "statefulset/csi-hostpathplugin", "--type=json", "-p", patch); err != nil {
		t.Fatal(err)
	}
	if out, err := c.Kubectl(t, "rollout", "status", "statefulset/csi-hostpathplugin", "--timeout=180s"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// infeasible grows a PVC whose step (1Gi, its own annotation) takes it past the driver's
// --max-volume-size: our resizer marks it ControllerResizeInfeasible, the autoscaler lowers the
// request to the smallest MiB above the capacity (KEP-1790), the resizer completes that, and
// the autoscaler does not try again (the record holds the volume at that size).
func (a *autoscaleEnv) infeasible(t *testing.T) {
	const pvc = "big"
	p := hostpathPVC(a.ns, pvc, "300Mi")
	p.Spec.StorageClassName = ptrTo(autoscaleClass)
	p.Annotations = map[string]string{policy.TopoLVMStorageLimit: "2Gi", policy.AnnIncrease: "1Gi"}
	if _, err := a.c.Client.CoreV1().PersistentVolumeClaims(a.ns).Create(a.ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a.podWithClaim(t, "big-writer", pvc)
	a.waitEvent(t, pvc, "VolumeAutoscaled", "300Mi -> 1324Mi")
	a.waitEvent(t, pvc, "VolumeAutoscaleRecovered", "1324Mi -> 301Mi")
	got := a.waitPVC(t, pvc, 90*time.Second, "recovered at 301Mi", func(p *corev1.PersistentVolumeClaim) bool {
		return storageIs(p.Spec.Resources.Requests, "301Mi") && storageIs(p.Status.Capacity, "301Mi") &&
			len(p.Status.AllocatedResourceStatuses) == 0
	})
	if r, _ := policy.ParseRecord(got); r == nil || r.Reason != policy.ReasonRecover || r.To.String() != "301Mi" {
		t.Errorf("PVC %s: record %q, want reason %s to 301Mi", pvc, got.Annotations[policy.AnnLastResize], policy.ReasonRecover)
	}
	a.waitPolls(t, 3)
	if got := a.get(t, pvc); !storageIs(got.Spec.Resources.Requests, "301Mi") {
		t.Errorf("PVC %s: request %s after the recovery, want 301Mi (no retry)", pvc, got.Spec.Resources.Requests.Storage())
	}
}

// inodeThreshold crosses the inode threshold with the free bytes far above theirs. XFS allocates
// inodes on demand, but caps the space they may take at imaxpct of the file system, and statfs'
// f_files (the kubelet's inodes) is bounded by that cap: lowered to 1% for this subtest (about
// 6,000 inodes on 300Mi), a pod's empty files bring the free inodes just below the PVC's own
// threshold (pvc-autoresizer's inodes-threshold, 50%; the other PVCs on this file system come
// later, with the default 10%). The PVC is grown by the step with reason threshold-inodes, and
// the event's inode numbers are df -i's in the pod. Cleanup deletes the pod and the PVC and puts
// the cap back, so that steps finds the file system as the test made it.
func (a *autoscaleEnv) inodeThreshold(t *testing.T) {
	const pvc, pod = "inodes", "inode-writer"
	resizes := `volume_autoscaler_resizes_total{reason="threshold-inodes"} `
	was := a.fs.setInodeCap(t, a.c, 1)
	t.Cleanup(func() {
		a.deletePodAndPVC(t, pod, pvc)
		a.fs.setInodeCap(t, a.c, was)
	})
	p := hostpathPVC(a.ns, pvc, "300Mi")
	p.Spec.StorageClassName = ptrTo(autoscaleClass)
	p.Annotations = map[string]string{policy.TopoLVMStorageLimit: "400Mi", policy.TopoLVMInodesThreshold: "50%"}
	if _, err := a.c.Client.CoreV1().PersistentVolumeClaims(a.ns).Create(a.ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a.podWithClaim(t, pod, pvc)
	before := a.metric(t, resizes)

	st := a.fillInodes(t, pod)
	space := a.df(t, pod)
	if space.avail*4 <= space.capacity {
		t.Fatalf("free bytes %d of %d are below the threshold 25%%: the bytes would be the reason", space.avail, space.capacity)
	}
	p = a.waitPVC(t, pvc, 90*time.Second, "request 364Mi", func(p *corev1.PersistentVolumeClaim) bool {
		return storageIs(p.Spec.Resources.Requests, "364Mi")
	})
	if r, problem := policy.ParseRecord(p); r == nil || r.Reason != policy.ReasonThresholdInodes ||
		r.From.String() != "300Mi" || r.To.String() != "364Mi" {
		t.Errorf("PVC %s: record %q (%v), want 300Mi -> 364Mi, reason %s", pvc, p.Annotations[policy.AnnLastResize], problem, policy.ReasonThresholdInodes)
	} else if r.FSCapacity != space.capacity {
		t.Errorf("PVC %s: record's fsCapacity %d, the XFS's capacity (statfs) %d", pvc, r.FSCapacity, space.capacity)
	}
	ev := a.waitEvent(t, pvc, "VolumeAutoscaled", "300Mi -> 364Mi (threshold-inodes)")
	if !strings.Contains(ev.Message, "free inodes") || !strings.Contains(ev.Message, "are below the threshold 50%") {
		t.Errorf("event does not say the free inodes are below their threshold 50%%: %s", ev.Message)
	}
	a.checkInodes(t, ev, st)
	if after := a.metric(t, resizes); after != before+1 {
		t.Errorf("%s went %v -> %v, want +1", strings.TrimSpace(resizes), before, after)
	}
}

// newReplica creates a StatefulSet of one replica with an autoscaled volumeClaimTemplate (limit
// from the template's annotation); replica 0's volume, on the full file system, is grown by the
// step; scaled to two, replica 1's new PVC is raised to 364Mi at once (reason siblings), with no
// stats needed.
func (a *autoscaleEnv) newReplica(t *testing.T) {
	labels := map[string]string{"app": "db"}
	pod := busyboxPod("db", "sleep 3600")
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	tmpl := *hostpathPVC("", "data", "300Mi")
	tmpl.Spec.StorageClassName = ptrTo(autoscaleClass)
	tmpl.Annotations = map[string]string{policy.TopoLVMStorageLimit: "400Mi"}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptrTo(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template:             corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod.Spec},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{tmpl},
		},
	}
	if _, err := a.c.Client.AppsV1().StatefulSets(a.ns).Create(a.ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := a.waitPVC(t, "data-db-0", 2*time.Minute, "request 364Mi", func(p *corev1.PersistentVolumeClaim) bool {
		return storageIs(p.Spec.Resources.Requests, "364Mi")
	})
	if r, _ := policy.ParseRecord(p); r == nil || r.Reason != policy.ReasonThresholdBytes {
		t.Errorf("PVC data-db-0: record %q, want reason %s", p.Annotations[policy.AnnLastResize], policy.ReasonThresholdBytes)
	}
	if _, err := a.c.Client.AppsV1().StatefulSets(a.ns).Patch(a.ctx, "db", types.MergePatchType,
		[]byte(`{"spec":{"replicas":2}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	p = a.waitPVC(t, "data-db-1", 2*time.Minute, "request 364Mi", func(p *corev1.PersistentVolumeClaim) bool {
		return storageIs(p.Spec.Resources.Requests, "364Mi")
	})
	if r, _ := policy.ParseRecord(p); r == nil || r.Reason != policy.ReasonSiblings || r.From.String() != "300Mi" {
		t.Errorf("PVC data-db-1: record %q, want 300Mi -> 364Mi, reason %s", p.Annotations[policy.AnnLastResize], policy.ReasonSiblings)
	}
	a.waitEvent(t, "data-db-1", "VolumeAutoscaled", "300Mi -> 364Mi (siblings)")
	a.waitPVC(t, "data-db-1", 90*time.Second, "capacity 364Mi", func(p *corev1.PersistentVolumeClaim) bool {
		return storageIs(p.Status.Capacity, "364Mi")
	})
}

// steps is the life of one volume: 300Mi, grown by 64Mi to 364Mi, then (after the cooldown)
// clamped to its limit 400Mi, then at its limit.
func (a *autoscaleEnv) steps(t *testing.T) {
	const pvc = "data"
	a.createPVC(t, pvc, "300Mi", "400Mi")
	a.podWithClaim(t, "writer", pvc)

	// 1. Past the threshold: grown by the step, with the kubelet's numbers in the event.
	st := a.fill(t, "writer", "fill1")
	p := a.waitPVC(t, pvc, 90*time.Second, "request 364Mi", func(p *corev1.PersistentVolumeClaim) bool {
		return storageIs(p.Spec.Resources.Requests, "364Mi")
	})
	first := a.record(t, p, "300Mi", "364Mi", st)
	ev := a.waitEvent(t, pvc, "VolumeAutoscaled", "300Mi -> 364Mi")
	a.checkUsage(t, ev, st)

	// 2. The resize is done in the API (our resizer, then the kubelet's node step), but the file
	// system is as it was: poll rounds go by without a second resize.
	a.waitPVC(t, pvc, 90*time.Second, "capacity 364Mi", func(p *corev1.PersistentVolumeClaim) bool {
		return storageIs(p.Status.Capacity, "364Mi") && len(p.Status.AllocatedResourceStatuses) == 0
	})
	a.waitRounds(t, pvc, string(policy.SkipResizing), 2)
	if p := a.get(t, pvc); !storageIs(p.Spec.Resources.Requests, "364Mi") {
		t.Fatalf("PVC %s: request %s before its file system grew, want 364Mi", pvc, p.Spec.Resources.Requests.Storage())
	}

	// 3. The file system grows; filled again, the next step waits for the cooldown.
	a.fs.grow(t, a.c, 364)
	st = a.fill(t, "writer", "fill2")
	filled := time.Now()
	p = a.waitPVC(t, pvc, autoscaleCooldown+60*time.Second, "request 400Mi", func(p *corev1.PersistentVolumeClaim) bool {
		return storageIs(p.Spec.Resources.Requests, "400Mi")
	})
	second := a.record(t, p, "364Mi", "400Mi", st)
	if gap := second.Time.Sub(first.Time); gap < autoscaleCooldown {
		t.Errorf("second resize %s after the first, before the cooldown %s ended", gap, autoscaleCooldown)
	}
	// The skip is told when a round reads the refilled volume before the cooldown ends: the
	// kubelet's stats age up to volumeStatsAggPeriod (10s), a round comes every 5s. A machine so
	// slow that the refill ended later has nothing to tell, and the gap above is the check.
	if seen := filled.Add(20 * time.Second); seen.Before(first.Time.Add(autoscaleCooldown)) {
		cool := a.waitEvent(t, pvc, "VolumeAutoscaleSkipped", "cooldown")
		t.Logf("cooldown skip told %s after the first resize", cool.LastTimestamp.Sub(first.Time).Round(time.Second))
	} else {
		t.Logf("refilled %s after the first resize: too late to see the cooldown skip", filled.Sub(first.Time).Round(time.Second))
	}
	ev = a.waitEvent(t, pvc, "VolumeAutoscaled", "364Mi -> 400Mi")
	if !strings.Contains(ev.Message, "limit") {
		t.Errorf("event of the clamped step does not name the limit: %s", ev.Message)
	}
	a.checkUsage(t, ev, st)

	// 4. At the limit, filled past the threshold again: a warning, and the request stays.
	a.waitPVC(t, pvc, 90*time.Second, "capacity 400Mi", func(p *corev1.PersistentVolumeClaim) bool {
		return storageIs(p.Status.Capacity, "400Mi") && len(p.Status.AllocatedResourceStatuses) == 0
	})
	a.fs.grow(t, a.c, 400)
	a.fill(t, "writer", "fill3")
	a.waitEvent(t, pvc, "VolumeAutoscaleProblem", "at-limit")
	a.waitRounds(t, pvc, string(policy.SkipAtLimit), 1)
	if p := a.get(t, pvc); !storageIs(p.Spec.Resources.Requests, "400Mi") {
		t.Errorf("PVC %s: request %s past its limit 400Mi", pvc, p.Spec.Resources.Requests.Storage())
	}
}

// installAutoscaler installs deploy/kubernetes/volume-autoscaler as its header says (namespace,
// images), with a short --interval and --cooldown appended to the shipped arguments, and removes
// it at the end. The kubelet's serving certificate is signed by the cluster CA (up.sh), which the
// shipped Deployment mounts from kube-root-ca.crt: --kubelet-certificate-authority as shipped.
func installAutoscaler(t *testing.T, c *Cluster) {
	t.Helper()
	installAutoscalerWith(t, c, "--interval=5s", "--cooldown="+autoscaleCooldown.String(), "--v=4")
}

// installAutoscalerWith is installAutoscaler with args appended to the shipped ones.
func installAutoscalerWith(t *testing.T, c *Cluster, args ...string) {
	t.Helper()
	patch := "patches:\n- target: {kind: Deployment, name: volume-autoscaler}\n  patch: |-\n"
	for _, arg := range args {
		patch += fmt.Sprintf("    - {op: add, path: /spec/template/spec/containers/0/args/-, value: %q}\n", arg)
	}
	dir := productOverlay(t, c, "volume-autoscaler", autoscalerNS, patch)
	if _, err := c.Kubectl(t, "create", "namespace", autoscalerNS); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := c.Kubectl(t, "-n", autoscalerNS, "logs", "deployment/volume-autoscaler", "--tail=60")
			t.Logf("volume-autoscaler's log:\n%s", logs)
		}
		if _, err := c.Kubectl(t, "delete", "-k", dir, "--ignore-not-found", "--wait", "--timeout=2m"); err != nil {
			t.Error(err)
		}
		deleteNamespace(t, c, autoscalerNS)
	})
	if _, err := c.Kubectl(t, "apply", "-k", dir); err != nil {
		t.Fatal(err)
	}
	if out, err := c.Kubectl(t, "-n", autoscalerNS, "rollout", "status", "deployment/volume-autoscaler", "--timeout=120s"); err != nil {
		desc, _ := c.Kubectl(t, "-n", autoscalerNS, "describe", "pods")
		t.Fatalf("%v\n%s\n%s", err, out, desc)
	}
	c.RequireProductImage(t, autoscalerNS, "app.kubernetes.io/name=volume-autoscaler", "volume-autoscaler")
}

// autoscalerRBAC checks the shipped ServiceAccount's reach with a token of its own: the kubelet
// serves it /stats/summary (nodes/stats) and refuses /pods (nodes/proxy), and the apiserver's
// node proxy (nodes/proxy) refuses it too.
func autoscalerRBAC(t *testing.T, c *Cluster) {
	sa := "system:serviceaccount:" + autoscalerNS + ":volume-autoscaler"
	for sub, want := range map[string]string{"stats": "yes", "proxy": "no"} {
		out, _ := c.Kubectl(t, "auth", "can-i", "get", "nodes", "--subresource="+sub, "--as="+sa)
		if strings.TrimSpace(out) != want {
			t.Errorf("kubectl auth can-i get nodes --subresource=%s --as=%s: %q, want %q", sub, sa, strings.TrimSpace(out), want)
		}
	}
	token, err := c.Kubectl(t, "-n", autoscalerNS, "create", "token", "volume-autoscaler", "--duration=10m")
	if err != nil {
		t.Fatal(err)
	}
	kubelet := "https://" + c.NodeIP + ":10250"
	for _, r := range []struct {
		url  string
		want int
	}{
		{kubelet + "/stats/summary", http.StatusOK},
		{kubelet + "/pods", http.StatusForbidden},
		{c.Server + "/api/v1/nodes/" + c.NodeName + "/proxy/stats/summary", http.StatusForbidden},
		{c.Server + "/api/v1/nodes/" + c.NodeName + "/proxy/pods", http.StatusForbidden},
	} {
		code, body := getWithToken(t, c, r.url, strings.TrimSpace(token))
		if code != r.want {
			t.Errorf("GET %s as %s: %d, want %d: %.300s", r.url, sa, code, r.want, body)
		} else {
			t.Logf("GET %s as %s: %d", r.url, sa, code)
		}
	}
}

// getWithToken GETs url with a bearer token, verifying the server with the cluster CA (which
// signs both the apiserver's and the kubelet's serving certificates).
func getWithToken(t *testing.T, c *Cluster, url, token string) (int, string) {
	t.Helper()
	ca, err := os.ReadFile(c.Config.TLSClientConfig.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && b.Len() < 1000 {
		b.WriteString(sc.Text())
	}
	return resp.StatusCode, b.String()
}

// dataFS is the loop-mounted XFS on csi-driver-host-path's data directory in the node's mount
// namespace.
type dataFS struct {
	image, dev string
}

// mountHostpathDataFS gives the driver's data directory an XFS of sizeMi MiB with
// hack/cluster/hostpath-small-fs.sh, the script of `make cluster-hostpath-small-fs` that the
// README's walk-through runs: an image file of the cluster's directory (down.sh detaches its loop
// device if the test cannot) on a loop device, the directory's contents (the driver's state)
// copied in, mounted over the directory in the node's mount namespace, and the driver's pod
// restarted (its hostPath mount, private propagation, sees only what was mounted before it
// started). Cleanup (the script's --remove) copies the contents back, unmounts, detaches and
// restarts the pod again, before useOurResizer's cleanup replaces it.
func mountHostpathDataFS(t *testing.T, c *Cluster, sizeMi int) *dataFS {
	t.Helper()
	// Registered first: --remove also undoes a half-done mount, and does nothing without one.
	t.Cleanup(func() {
		if _, err := hostpathSmallFS(c, "--remove"); err != nil {
			t.Errorf("removing the XFS of %s: %v", hostpathDataDir, err)
		}
	})
	if _, err := hostpathSmallFS(c, strconv.Itoa(sizeMi)); err != nil {
		t.Fatalf("loop-mounted XFS on %s: %v", hostpathDataDir, err)
	}
	fs := &dataFS{image: filepath.Join(c.Dir, "hostpath-data.img")}
	out, err := exec.Command("losetup", "-n", "-O", "NAME", "-j", fs.image).Output()
	if fs.dev = strings.TrimSpace(string(out)); err != nil || fs.dev == "" {
		t.Fatalf("no loop device of %s after hack/cluster/hostpath-small-fs.sh: %v", fs.image, err)
	}
	return fs
}

// grow grows the image to sizeMi MiB and the mounted XFS with it (the script's --grow), as a
// block driver's NodeExpandVolume does after the controller grew the device.
func (fs *dataFS) grow(t *testing.T, c *Cluster, sizeMi int) {
	t.Helper()
	if _, err := hostpathSmallFS(c, "--grow", strconv.Itoa(sizeMi)); err != nil {
		t.Fatalf("growing the XFS of %s to %dMi: %v", hostpathDataDir, sizeMi, err)
	}
	t.Logf("XFS of %s grown to %dMi", hostpathDataDir, sizeMi)
}

var imaxpctRE = regexp.MustCompile(`imaxpct=(\d+)`)

// setInodeCap sets the XFS's imaxpct, the percent of its space that inodes may take, with
// xfs_growfs -m (online, no data growth), and returns the one it had. statfs' f_files, which the
// kubelet reports as the volume's inodes, is at most that share of the blocks in inodes.
func (fs *dataFS) setInodeCap(t *testing.T, c *Cluster, pct int) int {
	t.Helper()
	out, err := c.InNode(t, "sh", "-c", fmt.Sprintf("set -e; xfs_info %[1]s; xfs_growfs -m %[2]d %[1]s 2>&1 | grep -i 'max percent' || true",
		hostpathDataDir, pct))
	m := imaxpctRE.FindStringSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("setting the inode cap (imaxpct) of the XFS of %s to %d%%: %v\n%s", hostpathDataDir, pct, err, out)
	}
	was, _ := strconv.Atoi(m[1])
	t.Logf("XFS of %s: imaxpct %d%% -> %d%%", hostpathDataDir, was, pct)
	return was
}

// autoscaleEnv is a scenario namespace with the data directory's file system.
type autoscaleEnv struct {
	scenarioEnv
	fs *dataFS
}

// createAutoscaleClass creates the opted-in StorageClass (deleted at the end): threshold 25% of
// the file system, step 64Mi (minimum step 1Mi instead of the default 1Gi).
func createAutoscaleClass(t *testing.T, c *Cluster) {
	t.Helper()
	createHostpathClass(t, c, autoscaleClass, map[string]string{
		policy.TopoLVMEnabled: "true",
		policy.AnnThreshold:   "25%",
		policy.AnnIncrease:    "64Mi",
		policy.AnnMinIncrease: "1Mi",
	})
}

// createHostpathClass creates an expandable StorageClass of csi-driver-host-path with the
// annotations, and deletes it at the end of the test.
func createHostpathClass(t *testing.T, c *Cluster, name string, annotations map[string]string) {
	t.Helper()
	sc := &storagev1.StorageClass{
		ObjectMeta:           metav1.ObjectMeta{Name: name, Annotations: annotations},
		Provisioner:          "hostpath.csi.k8s.io",
		ReclaimPolicy:        ptrTo(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode:    ptrTo(storagev1.VolumeBindingImmediate),
		AllowVolumeExpansion: ptrTo(true),
	}
	if _, err := c.Client.StorageV1().StorageClasses().Create(context.Background(), sc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Client.StorageV1().StorageClasses().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
			t.Error(err)
		}
	})
}

// createPVC creates a claim of the autoscaled class with pvc-autoresizer's limit annotation and
// waits until it is bound.
func (a *autoscaleEnv) createPVC(t *testing.T, name, size, limit string) {
	t.Helper()
	pvc := hostpathPVC(a.ns, name, size)
	pvc.Spec.StorageClassName = ptrTo(autoscaleClass)
	pvc.Annotations = map[string]string{policy.TopoLVMStorageLimit: limit}
	if _, err := a.c.Client.CoreV1().PersistentVolumeClaims(a.ns).Create(a.ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a.waitPVC(t, name, 2*time.Minute, "Bound", func(p *corev1.PersistentVolumeClaim) bool {
		return p.Status.Phase == corev1.ClaimBound
	})
}

func (a *autoscaleEnv) get(t *testing.T, name string) *corev1.PersistentVolumeClaim {
	t.Helper()
	p, err := a.c.Client.CoreV1().PersistentVolumeClaims(a.ns).Get(a.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// fsUsage is the file system as statfs shows it in the pod (df -B1), which is what the kubelet
// reports: 1B-blocks is capacityBytes, Available availableBytes.
type fsUsage struct{ capacity, used, avail int64 }

func (a *autoscaleEnv) df(t *testing.T, pod string) fsUsage {
	t.Helper()
	n := a.dfNumbers(t, pod, "-B1")
	return fsUsage{capacity: n[0], used: n[1], avail: n[2]}
}

// dfNumbers runs df with flag (-B1, -i) on /data in the pod and returns the three numbers of its
// last line: size, used and available, in bytes or inodes. They are counted from the line's end
// (then Use% and the mount point): a long device name puts them on a line of their own.
func (a *autoscaleEnv) dfNumbers(t *testing.T, pod, flag string) (n [3]int64) {
	t.Helper()
	out, err := a.c.Kubectl(t, "-n", a.ns, "exec", pod, "--", "df", flag, "/data")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	f := strings.Fields(lines[len(lines)-1])
	if len(f) < 5 {
		t.Fatalf("df %s /data in %s: %q", flag, pod, out)
	}
	for i := range n {
		if n[i], err = strconv.ParseInt(f[len(f)-5+i], 10, 64); err != nil {
			t.Fatalf("df %s /data in %s: %q", flag, pod, out)
		}
	}
	return n
}

// inodeUsage is the file system's inodes as statfs shows them in the pod (df -i): Inodes is
// f_files, the kubelet's inodes, Available f_ffree, its inodesFree.
type inodeUsage struct{ total, used, free int64 }

func (a *autoscaleEnv) dfInodes(t *testing.T, pod string) inodeUsage {
	t.Helper()
	n := a.dfNumbers(t, pod, "-i")
	return inodeUsage{total: n[0], used: n[1], free: n[2]}
}

// fillInodes creates empty files until the free inodes are 16 below half of them (threshold
// 50%), and returns the inodes as they are after. The count crosses the threshold only with the
// last 16 files of one touch, so the kubelet's stats (statfs every 10s) taken during the touch
// are either above the threshold (no resize) or those of the end, which the event must show.
func (a *autoscaleEnv) fillInodes(t *testing.T, pod string) inodeUsage {
	t.Helper()
	u := a.dfInodes(t, pod)
	n := u.free - (u.total/2 - 16)
	if n <= 0 || u.total > 100000 {
		t.Fatalf("%s: df -i %+v: want a few thousand inodes, mostly free (is the inode cap set?)", pod, u)
	}
	if out, err := a.c.Kubectl(t, "-n", a.ns, "exec", pod, "--", "sh", "-c",
		fmt.Sprintf("mkdir /data/many && cd /data/many && touch $(seq %d) && sync", n)); err != nil {
		t.Fatalf("creating %d files in %s: %v\n%s", n, pod, err, out)
	}
	after := a.dfInodes(t, pod)
	t.Logf("%d empty files in /data/many: free inodes %d of %d (%.1f%%), before %+v", n, after.free, after.total,
		100*float64(after.free)/float64(after.total), u)
	return after
}

// fill writes a file with dd until 15% of the file system is free (threshold 25%), and returns
// the file system as it is after.
func (a *autoscaleEnv) fill(t *testing.T, pod, file string) fsUsage {
	t.Helper()
	after, _ := a.fillTo(t, pod, file, 15, ddFill)
	return after
}

// record checks the autoscaler's record on the PVC: from, to, and the file system capacity
// the kubelet reported before the resize, which is the XFS's (statfs in the pod).
func (a *autoscaleEnv) record(t *testing.T, p *corev1.PersistentVolumeClaim, from, to string, st fsUsage) *policy.Record {
	t.Helper()
	r, problem := policy.ParseRecord(p)
	if problem != nil || r == nil {
		t.Fatalf("PVC %s: record %q: %v", p.Name, p.Annotations[policy.AnnLastResize], problem)
	}
	if r.From.String() != from || r.To.String() != to || r.Reason != policy.ReasonThresholdBytes {
		t.Errorf("PVC %s: record %s -> %s (%s), want %s -> %s (threshold-bytes)", p.Name, r.From.String(), r.To.String(), r.Reason, from, to)
	}
	if r.FSCapacity != st.capacity {
		t.Errorf("PVC %s: record's fsCapacity %d, the XFS's capacity (statfs) %d", p.Name, r.FSCapacity, st.capacity)
	}
	return r
}

var usageRE = regexp.MustCompile(`used (\d+) bytes, free (\d+) of (\d+) bytes`)

// checkUsage checks the VolumeAutoscaled event's usage is the kubelet's view of the XFS: its
// capacity, and free below the threshold (25%) within 2% of what df showed after the dd.
func (a *autoscaleEnv) checkUsage(t *testing.T, ev *corev1.Event, st fsUsage) {
	t.Helper()
	m := usageRE.FindStringSubmatch(ev.Message)
	if m == nil {
		t.Errorf("event %s has no usage: %s", ev.Reason, ev.Message)
		return
	}
	free, _ := strconv.ParseInt(m[2], 10, 64)
	capacity, _ := strconv.ParseInt(m[3], 10, 64)
	if capacity != st.capacity || free*4 >= capacity || math.Abs(float64(free-st.avail)) > 0.02*float64(capacity) {
		t.Errorf("event's usage free %d of %d; df after the dd: free %d of %d: %s", free, capacity, st.avail, st.capacity, ev.Message)
	}
}

var inodesRE = regexp.MustCompile(`inodes used (\d+), free (\d+) of (\d+)`)

// checkInodes checks the VolumeAutoscaled event's inodes are df -i's after the files were
// created: nothing else creates files on the file system meanwhile.
func (a *autoscaleEnv) checkInodes(t *testing.T, ev *corev1.Event, st inodeUsage) {
	t.Helper()
	m := inodesRE.FindStringSubmatch(ev.Message)
	if m == nil {
		t.Errorf("event %s has no inode usage: %s", ev.Reason, ev.Message)
		return
	}
	var got inodeUsage
	for i, p := range []*int64{&got.used, &got.free, &got.total} {
		*p, _ = strconv.ParseInt(m[i+1], 10, 64)
	}
	if got != st {
		t.Errorf("event's inodes used %d, free %d of %d; df -i after the files: used %d, free %d of %d: %s",
			got.used, got.free, got.total, st.used, st.free, st.total, ev.Message)
	}
}

// deletePodAndPVC deletes a pod and its PVC and waits until the PVC is gone (its PV, deleted
// by the driver, may take longer).
func (a *autoscaleEnv) deletePodAndPVC(t *testing.T, pod, pvc string) {
	t.Helper()
	if _, err := a.c.Kubectl(t, "-n", a.ns, "delete", "pod/"+pod, "pvc/"+pvc, "--ignore-not-found", "--wait", "--timeout=90s"); err != nil {
		t.Errorf("deleting pod %s and PVC %s: %v", pod, pvc, err)
	}
}

// waitEvent waits for an event of the PVC with reason whose message contains text.
func (a *autoscaleEnv) waitEvent(t *testing.T, pvc, reason, text string) *corev1.Event {
	t.Helper()
	var found *corev1.Event
	err := wait.PollUntilContextTimeout(a.ctx, 500*time.Millisecond, autoscaleCooldown+60*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, err := a.c.Client.CoreV1().Events(a.ns).List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("involvedObject.name", pvc).String()})
		if err != nil {
			return false, nil
		}
		for i, e := range evs.Items {
			if e.Reason == reason && strings.Contains(e.Message, text) {
				found = &evs.Items[i]
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("PVC %s: no event %s with %q: %v\n%s", pvc, reason, text, err, a.events(t, pvc))
	}
	t.Logf("PVC %s: %s %s", pvc, found.Reason, found.Message)
	return found
}

// waitRounds waits until the autoscaler has skipped n more times for reason (its metric
// volume_autoscaler_skips_total, read through the apiserver's pod proxy): n poll rounds
// decided to leave the volume alone.
func (a *autoscaleEnv) waitRounds(t *testing.T, pvc, reason string, n float64) {
	t.Helper()
	start := a.skips(t, reason)
	var now float64
	err := wait.PollUntilContextTimeout(a.ctx, time.Second, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		now = a.skips(t, reason)
		return now >= start+n, nil
	})
	if err != nil {
		t.Fatalf("PVC %s: volume_autoscaler_skips_total{reason=%q} went %v -> %v, want +%v\n%s", pvc, reason, start, now, n, a.events(t, pvc))
	}
	t.Logf("PVC %s: %v more skips %q", pvc, now-start, reason)
}

// waitPolls waits for n more poll rounds (volume_autoscaler_poll_duration_seconds_count).
func (a *autoscaleEnv) waitPolls(t *testing.T, n float64) {
	t.Helper()
	const rounds = "volume_autoscaler_poll_duration_seconds_count "
	start := a.metric(t, rounds)
	err := wait.PollUntilContextTimeout(a.ctx, time.Second, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		return a.metric(t, rounds) >= start+n, nil
	})
	if err != nil {
		t.Fatalf("fewer than %v poll rounds in 60s", n)
	}
}

func (a *autoscaleEnv) skips(t *testing.T, reason string) float64 {
	t.Helper()
	return a.metric(t, fmt.Sprintf(`volume_autoscaler_skips_total{reason=%q} `, reason))
}

// metric reads a sample of the autoscaler's metrics through the apiserver's pod proxy: the
// value of the line that starts with prefix, 0 when there is none.
func (a *autoscaleEnv) metric(t *testing.T, prefix string) float64 {
	t.Helper()
	pods, err := a.c.Client.CoreV1().Pods(autoscalerNS).List(a.ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=volume-autoscaler"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("volume-autoscaler's pod: %v (%d pods)", err, len(pods.Items))
	}
	body, err := a.c.Client.CoreV1().RESTClient().Get().
		AbsPath("/api/v1/namespaces/" + autoscalerNS + "/pods/" + pods.Items[0].Name + ":8080/proxy/metrics").DoRaw(a.ctx)
	if err != nil {
		t.Fatalf("volume-autoscaler's metrics: %v", err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			return f
		}
	}
	return 0
}
