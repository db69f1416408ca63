//go:build cluster

package cluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/csi-resizer/csi-resizer/test/framework"
)

// shared is the cluster of this test binary: started by the first test that needs one (a
// warm start takes about half a minute), removed by TestMain when all tests are done.
var shared *Cluster

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		if err := shared.Down(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// clusterFor returns the package's cluster, starting it on first use, or skips when this
// machine cannot run one; under CI=true that fails instead, since CI must run these tests
// (hack/cluster/deps.sh installs what they need, hack/cluster/require.sh checks it).
func clusterFor(t *testing.T) *Cluster {
	t.Helper()
	if err := Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI must run the cluster tests: %v (as root, hack/cluster/deps.sh installs the missing tools)", err)
		}
		t.Skipf("skipped: %v", err)
	}
	if shared == nil {
		c, err := Up(Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("cluster %s up in %s", c.Name, c.StartTime.Round(time.Second))
		shared = c
	}
	return shared
}

// TestNode checks the node itself: Ready with the pinned kubelet and containerd 2, a pod runs
// under the real kubelet from an imported image (nothing pulled), with a pod IP on the CNI
// bridge, its logs read back through the apiserver and the kubelet, and the kubernetes
// Service reaching the apiserver from the pod through kube-proxy's rules.
func TestNode(t *testing.T) {
	c := clusterFor(t)
	ctx := context.Background()
	node, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	info := node.Status.NodeInfo
	t.Logf("node %s: kubelet %s, %s, %s, %s", node.Name, info.KubeletVersion, info.ContainerRuntimeVersion, info.OSImage, info.KernelVersion)
	if info.KubeletVersion != "v1.36.3" {
		t.Errorf("kubelet %s, want v1.36.3", info.KubeletVersion)
	}
	if !strings.HasPrefix(info.ContainerRuntimeVersion, "containerd://2.") {
		t.Errorf("runtime %s, want containerd 2.x", info.ContainerRuntimeVersion)
	}

	// busybox's nc has no -z: a connection that opens and closes proves the path.
	pod := busyboxPod("probe", `set -e
echo "pod ip $(ip -4 addr show eth0 | sed -n 's/.*inet \([0-9.]*\).*/\1/p')"
echo | nc -w 5 "$KUBERNETES_SERVICE_HOST" "$KUBERNETES_SERVICE_PORT" && echo "service $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT reachable"`)
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	if _, err := c.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Client.CoreV1().Pods("default").Delete(ctx, pod.Name, metav1.DeleteOptions{}) })
	var phase corev1.PodPhase
	err = wait.PollUntilContextTimeout(ctx, time.Second, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		phase = p.Status.Phase
		return phase == corev1.PodSucceeded || phase == corev1.PodFailed, nil
	})
	logs, _ := c.Kubectl(t, "logs", pod.Name)
	if err != nil || phase != corev1.PodSucceeded {
		out, _ := c.Kubectl(t, "describe", "pod", pod.Name)
		t.Fatalf("pod %s: phase %s (%v)\nlogs:\n%s\n%s", pod.Name, phase, err, logs, out)
	}
	t.Logf("pod logs:\n%s", logs)
	if !strings.Contains(logs, "pod ip 10.244.0.") || !strings.Contains(logs, "reachable") {
		t.Errorf("pod logs lack its bridge address or the Service check:\n%s", logs)
	}
}

// TestHostpathExpansion deploys csi-driver-host-path from its own manifests, provisions a PVC
// through its StorageClass, mounts it in a pod, and grows it: the controller step by upstream's
// csi-resizer sidecar in the driver's pod, the node step by the real kubelet.
func TestHostpathExpansion(t *testing.T) {
	c := clusterFor(t)
	ctx := context.Background()
	deployHostpathOnce(t, c)

	pvc := hostpathPVC("", "grow", "1Gi")
	if _, err := c.Client.CoreV1().PersistentVolumeClaims("default").Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := busyboxPod("grow", "echo hello > /data/hello && sleep 3600")
	pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc.Name},
	}}}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	if _, err := c.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Pods("default").Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptrTo(int64(0))})
		_ = c.Client.CoreV1().PersistentVolumeClaims("default").Delete(ctx, pvc.Name, metav1.DeleteOptions{})
	})
	if out, err := c.Kubectl(t, "wait", "--for=condition=Ready", "pod/grow", "--timeout=120s"); err != nil {
		desc, _ := c.Kubectl(t, "describe", "pod", "grow")
		t.Fatalf("%v\n%s\n%s", err, out, desc)
	}
	start := time.Now()
	patch := []byte(`{"spec":{"resources":{"requests":{"storage":"2Gi"}}}}`)
	if _, err := c.Client.CoreV1().PersistentVolumeClaims("default").Patch(ctx, pvc.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	var last string
	err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().PersistentVolumeClaims("default").Get(ctx, pvc.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		capacity := p.Status.Capacity[corev1.ResourceStorage]
		last = fmt.Sprintf("capacity %s, allocatedResourceStatuses %v", capacity.String(), p.Status.AllocatedResourceStatuses)
		return capacity.Cmp(resource.MustParse("2Gi")) == 0 && len(p.Status.AllocatedResourceStatuses) == 0, nil
	})
	events, _ := c.Kubectl(t, "get", "events", "--field-selector", "involvedObject.name=grow",
		"-o", "custom-columns=REASON:.reason,FROM:.source.component,MESSAGE:.message")
	if err != nil {
		t.Fatalf("PVC not grown to 2Gi: %s\n%s", last, events)
	}
	t.Logf("grown to 2Gi in %s\n%s", time.Since(start).Round(time.Second), events)
	for _, want := range []string{"external-resizer hostpath.csi.k8s.io", "FileSystemResizeSuccessful"} {
		if !strings.Contains(events, want) {
			t.Errorf("no event with %q: the controller step is upstream's sidecar's, the node step the kubelet's", want)
		}
	}
}

func busyboxPod(name, script string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptrTo(int64(1)),
			Containers: []corev1.Container{{
				Name: name, Image: "localhost/busybox:1.35.0", Command: []string{"sh", "-c", script},
			}},
		},
	}
}

func ptrTo[T any](v T) *T { return &v }

// hostpathPVC is a ReadWriteOnce claim of size in csi-driver-host-path's StorageClass.
func hostpathPVC(ns, name, size string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptrTo("csi-hostpath-sc"),
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)},
			},
		},
	}
}

// TestHostpathDriverPod checks that csi-driver-host-path's pod runs the real kubernetes-csi
// programs its manifests name, built from their own source (../shared/anchors), and that they do
// their jobs on the real node: every container ready without a restart; the kubelet registered
// the driver through node-driver-registrar (the CSINode lists it, the registrar logged the
// kubelet's NotifyRegistrationStatus); livenessprobe answers /healthz from the driver's Probe;
// external-health-monitor-controller runs as deployed, with leader election (it holds its
// Lease). The registrar's and the health monitor's --version, run in their containers, are the
// anchors' own.
func TestHostpathDriverPod(t *testing.T) {
	c := clusterFor(t)
	ctx := context.Background()
	deployHostpathOnce(t, c)

	var pod *corev1.Pod
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		p, err := c.Client.CoreV1().Pods("default").Get(ctx, "csi-hostpathplugin-0", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		pod = p
		for _, s := range p.Status.ContainerStatuses {
			if !s.Ready || s.RestartCount != 0 {
				return false, fmt.Sprintf("container %s: ready %v, %d restarts", s.Name, s.Ready, s.RestartCount)
			}
		}
		return len(p.Status.ContainerStatuses) > 0, "no container status yet"
	})
	framework.Eventually(t, time.Minute, func() (bool, string) {
		node, err := c.Client.StorageV1().CSINodes().Get(ctx, pod.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, d := range node.Spec.Drivers {
			if d.Name == "hostpath.csi.k8s.io" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("CSINode %s lists no hostpath.csi.k8s.io: %v", node.Name, node.Spec.Drivers)
	})
	if logs, err := c.Kubectl(t, "logs", pod.Name, "-c", "node-driver-registrar"); err != nil || !strings.Contains(logs, "Received NotifyRegistrationStatus call") {
		t.Errorf("node-driver-registrar's log has no NotifyRegistrationStatus from the kubelet (%v):\n%s", err, tail(logs, 20))
	}
	if out, err := c.InNode(t, "curl", "-sf", "--max-time", "10", "http://"+pod.Status.PodIP+":9898/healthz"); err != nil || strings.TrimSpace(out) != "ok" {
		t.Errorf("livenessprobe's /healthz on %s:9898: %q, %v; want ok", pod.Status.PodIP, out, err)
	}
	framework.Eventually(t, time.Minute, func() (bool, string) {
		leases, err := c.Client.CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, l := range leases.Items {
			if strings.HasPrefix(l.Name, "external-health-monitor-leader-") && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == pod.Name {
				return true, ""
			}
		}
		return false, "no external-health-monitor-leader-* Lease held by " + pod.Name
	})
	// container: the anchor it was built from (the image's entrypoint is /<anchor's program>).
	for container, anchor := range map[string][2]string{
		"node-driver-registrar":                  {"node-driver-registrar", "/csi-node-driver-registrar"},
		"csi-external-health-monitor-controller": {"external-health-monitor-controller", "/csi-external-health-monitor-controller"},
	} {
		checkVersion(t, c, pod.Name, container, anchor[0], anchor[1])
	}
}

// checkVersion compares the --version of a container's program with the anchor binary's (the
// last word of each: the programs print their path first).
func checkVersion(t *testing.T, c *Cluster, pod, container, anchor, program string) {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	want, err := exec.Command(filepath.Join(root, "..", "shared", "anchors", anchor), "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --version: %v\n%s", anchor, err, want)
	}
	got, err := c.Kubectl(t, "exec", pod, "-c", container, "--", program, "--version")
	if err != nil {
		t.Fatalf("%s --version in container %s: %v\n%s", program, container, err, got)
	}
	last := func(s string) string {
		if f := strings.Fields(s); len(f) > 0 {
			return f[len(f)-1]
		}
		return ""
	}
	if last(got) == "" || last(got) != last(string(want)) {
		t.Errorf("container %s runs %q; the anchor %s is %q", container, strings.TrimSpace(got), anchor, strings.TrimSpace(string(want)))
	}
}

// hackBuild runs a cached build script of hack/ and returns the directory it prints last.
func hackBuild(t *testing.T, script string) string {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var stderr bytes.Buffer
	cmd := exec.Command("bash", filepath.Join(root, "hack", script))
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/%s: %v\n%s", script, err, tail(stderr.String(), 30))
	}
	dir := tail(string(out), 1)
	if d := time.Since(start); d > 5*time.Second {
		t.Logf("hack/%s built %s in %s", script, dir, d.Round(time.Second))
	}
	return dir
}
