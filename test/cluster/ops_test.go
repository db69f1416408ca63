//go:build cluster

package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// The replicated csi-resizer of TestOperations: the shipped rbac base and sidecar component over
// a Deployment that has nothing but the resizer and csi-driver-host-path's socket directory (the
// driver itself runs in its own StatefulSet on this one node). nameSuffix keeps the
// cluster-scoped ClusterRole and ClusterRoleBinding apart from other tests' csi-resizer ones.
var opsReplicasKustomization = map[string]string{
	"kustomization.yaml": `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: ops-resizer
nameSuffix: -ops
resources:
- $REPO/deploy/kubernetes/rbac
- deployment.yaml
components:
- $REPO/deploy/kubernetes/sidecar
patches:
- path: run-as-root.yaml
images:
- name: registry.example/csi-resizer
  newName: csi-resizer
  newTag: "$IMAGE_TAG"
`,
	"deployment.yaml": `apiVersion: apps/v1
kind: Deployment
metadata:
  name: csi-resizer
spec:
  replicas: 2
  selector:
    matchLabels: {app.kubernetes.io/name: ops-csi-resizer}
  template:
    metadata:
      labels: {app.kubernetes.io/name: ops-csi-resizer}
    spec:
      serviceAccountName: csi-resizer
      containers:
      - name: csi-resizer
      volumes:
      - name: socket-dir
        hostPath: {path: /var/lib/kubelet/plugins/csi-hostpath, type: Directory}
`,
	// The driver's socket is root:root 0755 (docs/cluster.md): connect as root, with the
	// sidecar patch's hardening otherwise kept (as sidecar/examples/csi-hostpath does).
	"run-as-root.yaml": `apiVersion: apps/v1
kind: Deployment
metadata:
  name: csi-resizer
spec:
  template:
    spec:
      containers:
      - name: csi-resizer
        securityContext: {runAsNonRoot: false, runAsUser: 0, runAsGroup: 0}
`,
}

// The node-deployment example as shipped, but for its hostpath container: the driver already runs
// in csi-driver-host-path's StatefulSet, so the DaemonSet's csi-resizer mounts that driver's socket
// directory instead of sharing an emptyDir with a second driver.
var opsNodeKustomization = map[string]string{
	"kustomization.yaml": `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: ops-node-resizer
nameSuffix: -ops
resources:
- $REPO/deploy/kubernetes/node-deployment
images:
- name: registry.example/csi-resizer
  newName: csi-resizer
  newTag: "$IMAGE_TAG"
patches:
- target: {group: apps, version: v1, kind: DaemonSet, name: csi-hostpath-node-resizer}
  patch: |-
    - {op: test, path: /spec/template/spec/containers/0/name, value: hostpath}
    - {op: remove, path: /spec/template/spec/containers/0}
    - {op: remove, path: /spec/template/metadata/annotations/kubectl.kubernetes.io~1default-container}
    - op: replace
      path: /spec/template/spec/volumes
      value: [{name: socket-dir, hostPath: {path: /var/lib/kubelet/plugins/csi-hostpath, type: Directory}}]
`,
}

const (
	opsNS         = "ops-resizer"
	opsSelector   = "app.kubernetes.io/name=ops-csi-resizer"
	opsDeployment = "deployment/csi-resizer-ops"
	opsNodeNS     = "ops-node-resizer"
)

// TestOperations runs this project's csi-resizer as an operator would, from the shipped
// manifests, next to csi-driver-host-path (whose own csi-resizer container is removed meanwhile
// and restored after): two leader-elected replicas in a Deployment, scraped by a real
// Prometheus with the README's scrape config, that fail over when the leader's container is
// killed or its pod cut off from the apiserver mid-resize, with our image and with upstream's
// (failover_test.go); then the node-local DaemonSet with --node-deployment.
func TestOperations(t *testing.T) {
	c := clusterFor(t)
	deployHostpathOnce(t, c)
	begin := time.Now()
	opsWithoutUpstreamResizer(t, c)
	opsApply(t, c, opsNS, opsRender(t, c, opsReplicasKustomization))
	if out, err := c.Kubectl(t, "-n", opsNS, "rollout", "status", opsDeployment, "--timeout=120s"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Logf("setup (upstream resizer removed, 2 replicas of %s running): %s", c.ProductImage, time.Since(begin).Round(time.Second))
	c.RequireProductImage(t, opsNS, opsSelector, "csi-resizer")

	t.Run("PrometheusRecoveryCounter", func(t *testing.T) { opsPrometheusRecovery(t, c) })
	t.Run("Failover", func(t *testing.T) { opsFailover(t, c) })
	t.Run("NodeDeployment", func(t *testing.T) { opsNodeDeployment(t, c) })
}

// opsWaitLeader waits until one of the Deployment's running pods holds the Lease.
func opsWaitLeader(t *testing.T, c *Cluster) (leader string, pods []string, transitions int32) {
	t.Helper()
	var holder string
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		if pods, err = opsPods(ctx, c, opsNS, opsSelector); err != nil {
			return false, err
		}
		leader, holder, transitions, err = opsLeaderPod(ctx, c, opsNS, pods)
		return leader != "", err
	})
	if err != nil {
		t.Fatalf("no pod of %s holds Lease %s (holder %q, pods %v): %v", opsDeployment, opsLease, holder, pods, err)
	}
	return leader, pods, transitions
}

// opsPrometheusRecovery: Prometheus discovers and scrapes the replicas with the README's scrape
// config and with the operator's configuration from the shipped ServiceMonitor (promScrapers),
// a PVC mounted in a pod is grown beyond the driver's --max-volume-size (1Ti by default:
// OUT_OF_RANGE, infeasible), CSIResizerVolumeInfeasible fires for it in both, the request is
// lowered again (KEP-1790 recovery), csi_resizer_volume_recovery_total{state="success"}, read
// through /api/v1/query, must increase, and the alert resolves.
func opsPrometheusRecovery(t *testing.T, c *Cluster) {
	ctx := context.Background()
	begin := time.Now()
	opsWaitLeader(t, c)
	// Both discover every replica (the standby serves /metrics too); the README's is read below.
	proms := promScrapers(t, c)
	prom := proms[0]
	t.Logf("prometheus (README's config and the operator's) scraping in %s", time.Since(begin).Round(time.Second))

	pvc := hostpathPVC(opsNS, "recover", "1Gi")
	opsCreateBound(t, c, pvc)
	pod := busyboxPod("recover", "sleep 3600")
	pod.Namespace = opsNS
	pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc.Name},
	}}}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	if _, err := c.Client.CoreV1().Pods(opsNS).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Pods(opsNS).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptrTo(int64(0))})
		_ = c.Client.CoreV1().PersistentVolumeClaims(opsNS).Delete(ctx, pvc.Name, metav1.DeleteOptions{})
	})
	if out, err := c.Kubectl(t, "-n", opsNS, "wait", "--for=condition=Ready", "pod/recover", "--timeout=120s"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}

	const recovered = `sum(csi_resizer_volume_recovery_total{job="csi-resizer",driver_name="hostpath.csi.k8s.io",state="success"})`
	before, err := prom.sum(ctx, recovered)
	if err != nil {
		t.Fatal(err)
	}
	infeasibleAt := time.Now()
	if err := opsRequest(ctx, c, opsNS, pvc.Name, "2Ti"); err != nil {
		t.Fatal(err)
	}
	// The gauge behind CSIResizerVolumeInfeasible names the PVC once the driver refused.
	infeasible := fmt.Sprintf(`csi_resizer_volume_infeasible{job="csi-resizer",namespace=%q,persistentvolumeclaim="recover"} == 1`, opsNS)
	var samples map[string]float64
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		samples, err = prom.query(ctx, infeasible)
		return err == nil && len(samples) == 1, nil
	})
	if err != nil {
		st, _ := c.Kubectl(t, "-n", opsNS, "get", "pvc", "recover", "-o", "jsonpath={.status}")
		t.Fatalf("no %s within 2m: %v\nPVC status: %s", infeasible, err, st)
	}
	p, err := c.Client.CoreV1().PersistentVolumeClaims(opsNS).Get(ctx, pvc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Status.AllocatedResourceStatuses[corev1.ResourceStorage]; got != corev1.PersistentVolumeClaimControllerResizeInfeasible {
		t.Errorf("2Ti: allocatedResourceStatuses %q, want ControllerResizeInfeasible", got)
	}
	t.Logf("2Ti refused by the driver, seen in Prometheus after %s: %v", time.Since(infeasibleAt).Round(time.Second), samples)
	promAlertsFire(t, proms, pvc.Name)

	recoverAt := time.Now()
	if err := opsRequest(ctx, c, opsNS, pvc.Name, "2Gi"); err != nil {
		t.Fatal(err)
	}
	var after float64
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		after, err = prom.sum(ctx, recovered)
		return err == nil && after > before, nil
	})
	if err != nil {
		st, _ := c.Kubectl(t, "-n", opsNS, "get", "pvc", "recover", "-o", "jsonpath={.status}")
		t.Fatalf("%s stayed %v (before %v): %v\nPVC status: %s", recovered, after, before, err, st)
	}
	t.Logf("recovery to 2Gi counted by Prometheus %s after lowering the request: %s %v -> %v",
		time.Since(recoverAt).Round(time.Second), recovered, before, after)
	if got, err := opsPVSize(ctx, c, opsNS, pvc.Name); err != nil || got.Cmp(resource.MustParse("2Gi")) != 0 {
		t.Errorf("after the recovery the PV is %s (%v), want 2Gi", got.String(), err)
	}
	promAlertsResolve(t, proms, pvc.Name)
}

// opsNodeDeployment: the replicas scaled to 0, the node-deployment example as a DaemonSet on the
// node; a PVC whose PV is pinned to this node (topology.hostpath.csi/node) is grown by the
// DaemonSet's instance, and a PV with no node affinity is left alone with the -v=2 line.
func opsNodeDeployment(t *testing.T, c *Cluster) {
	ctx := context.Background()
	begin := time.Now()
	if _, err := c.Kubectl(t, "-n", opsNS, "scale", opsDeployment, "--replicas=0"); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := c.Client.CoreV1().Pods(opsNS).List(ctx, metav1.ListOptions{LabelSelector: opsSelector})
		return err == nil && len(list.Items) == 0, err
	})
	if err != nil {
		t.Fatalf("replicas of %s still there: %v", opsDeployment, err)
	}
	opsApply(t, c, opsNodeNS, opsRender(t, c, opsNodeKustomization))
	if out, err := c.Kubectl(t, "-n", opsNodeNS, "rollout", "status", "daemonset/csi-hostpath-node-resizer-ops", "--timeout=120s"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	pods, err := opsPods(ctx, c, opsNodeNS, "app.kubernetes.io/name=csi-hostpath-node-resizer")
	if err != nil || len(pods) != 1 {
		t.Fatalf("want one DaemonSet pod on the one node, have %v (%v)", pods, err)
	}
	instance := pods[0]
	t.Logf("DaemonSet instance %s running (%s)", instance, time.Since(begin).Round(time.Second))

	local := hostpathPVC(opsNodeNS, "local", "1Gi")
	// A PV of the driver that no node pins: provisioned by hand, with a handle the driver does
	// not know (it must never be called for it).
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "ops-no-affinity"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              "csi-hostpath-sc",
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: "hostpath.csi.k8s.io", VolumeHandle: "ops-no-affinity",
			}},
			ClaimRef: &corev1.ObjectReference{Namespace: opsNodeNS, Name: "no-affinity"},
		},
	}
	if _, err := c.Client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	unpinned := hostpathPVC(opsNodeNS, "no-affinity", "1Gi")
	unpinned.Spec.VolumeName = pv.Name
	t.Cleanup(func() {
		for _, n := range []string{local.Name, unpinned.Name} {
			_ = c.Client.CoreV1().PersistentVolumeClaims(opsNodeNS).Delete(ctx, n, metav1.DeleteOptions{})
		}
		_ = c.Client.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{})
	})
	opsCreateBound(t, c, local, unpinned)
	if got, err := c.Kubectl(t, "get", "pv", "-o", fmt.Sprintf(`jsonpath={range .items[?(@.spec.claimRef.name=="local")]}{.spec.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[0]}{end}`)); err != nil || !strings.Contains(got, "topology.hostpath.csi/node") || !strings.Contains(got, c.NodeName) {
		t.Fatalf("the local PVC's PV is not pinned to %s by topology.hostpath.csi/node: %q (%v)", c.NodeName, got, err)
	}

	resized := time.Now()
	for _, n := range []string{local.Name, unpinned.Name} {
		if err := opsRequest(ctx, c, opsNodeNS, n, "2Gi"); err != nil {
			t.Fatal(err)
		}
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := opsPVSize(ctx, c, opsNodeNS, local.Name)
		return err == nil && got.Cmp(resource.MustParse("2Gi")) == 0, nil
	})
	if err != nil {
		t.Fatalf("the local PV did not grow to 2Gi: %v\n%s", err,
			strings.Join(opsLogLines(t, c, opsNodeNS, instance, "csi-resizer", ""), "\n"))
	}
	t.Logf("local PV grown to 2Gi by the DaemonSet in %s", time.Since(resized).Round(time.Second))
	if calls := opsLogLines(t, c, opsNodeNS, instance, "csi-resizer", "Calling ControllerExpandVolume", fmt.Sprintf(`pvc="%s/local"`, opsNodeNS)); len(calls) == 0 {
		t.Errorf("no ControllerExpandVolume call for %s/local in %s's log", opsNodeNS, instance)
	}

	var alone []string
	err = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		// node= is the instance's NODE_NAME, from the downward API.
		alone = opsLogLines(t, c, opsNodeNS, instance, "csi-resizer", "Volume left alone by --node-deployment", `pv="ops-no-affinity"`, fmt.Sprintf("node=%q", c.NodeName))
		return len(alone) > 0, nil
	})
	if err != nil {
		t.Errorf("no -v=2 line 'Volume left alone by --node-deployment' for PV ops-no-affinity on node %s in %s's log", c.NodeName, instance)
	} else {
		t.Logf("%s", alone[len(alone)-1])
	}
	if got, err := opsPVSize(ctx, c, opsNodeNS, unpinned.Name); err != nil || got.Cmp(resource.MustParse("1Gi")) != 0 {
		t.Errorf("the PV without node affinity is %s (%v), want it left at 1Gi", got.String(), err)
	}
	p, err := c.Client.CoreV1().PersistentVolumeClaims(opsNodeNS).Get(ctx, unpinned.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Status.AllocatedResources) != 0 || len(p.Status.AllocatedResourceStatuses) != 0 || len(p.Status.Conditions) != 0 {
		t.Errorf("the PVC of the unpinned PV was touched: allocatedResources %v, statuses %v, conditions %v",
			p.Status.AllocatedResources, p.Status.AllocatedResourceStatuses, p.Status.Conditions)
	}
	if calls := opsLogLines(t, c, opsNodeNS, instance, "csi-resizer", "Calling ControllerExpandVolume", `pv="ops-no-affinity"`); len(calls) != 0 {
		t.Errorf("the driver was called for the unpinned PV: %v", calls)
	}
}
