//go:build integration

// Package integration holds the tests that run csi-resizer and
// statefulset-resizer against a real control plane and a real CSI driver
// (see test/framework). Build tag: integration.
package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-resizer/csi-resizer/test/framework"
)

const gi = int64(1) << 30

// TestHarness is a smoke test of the harness itself, with and without
// kube-controller-manager: control plane, objects, mock driver, faults,
// calls log, restarts.
func TestHarness(t *testing.T) {
	for _, withKCM := range []bool{false, true} {
		name := "apiserver-only"
		if withKCM {
			name = "with-controller-manager"
		}
		t.Run(name, func(t *testing.T) { testHarness(t, withKCM) })
	}
}

func testHarness(t *testing.T, withKCM bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	start := time.Now()
	cluster := framework.StartCluster(t, framework.ClusterOptions{ControllerManager: withKCM})
	t.Logf("cluster ready in %v", time.Since(start).Round(time.Millisecond))
	client := cluster.Client

	v, err := client.Discovery().ServerVersion()
	if err != nil {
		t.Fatalf("server version: %v", err)
	}
	if v.GitVersion != "v1.36.3" {
		t.Errorf("server version %q, want v1.36.3", v.GitVersion)
	}

	ns := framework.CreateNamespace(t, ctx, client, "harness")
	driver := framework.StartMockDriver(t, framework.MockDriverOptions{})
	if driver.Name != framework.DefaultMockDriverName {
		t.Errorf("driver name %q, want %q", driver.Name, framework.DefaultMockDriverName)
	}
	volID, err := driver.CreateVolume(ctx, "harness-vol", gi)
	if err != nil {
		t.Fatal(err)
	}

	pvc, pv := framework.CreateBoundClaim(t, ctx, client, ns, "data", driver.Name, volID, "1Gi", "mock-sc")
	if pvc.Status.Phase != corev1.ClaimBound || pvc.Status.Capacity.Storage().Value() != gi {
		t.Fatalf("claim not bound with 1Gi: %s", framework.DescribeClaim(pvc))
	}
	if pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != pvc.UID || pv.Status.Phase != corev1.VolumeBound {
		t.Fatalf("PV not bound to the claim: claimRef=%+v phase=%s", pv.Spec.ClaimRef, pv.Status.Phase)
	}
	// A running PV controller must agree that the pair is bound and leave
	// it alone (no Lost/Pending flip).
	framework.Consistently(t, 2*time.Second, func() (bool, string) {
		cur, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return cur.Status.Phase == corev1.ClaimBound && cur.Status.Capacity.Storage().Value() == gi, framework.DescribeClaim(cur)
	})

	pod := framework.CreatePodWithClaim(t, ctx, client, ns, "app", "data")
	if pod.Status.Phase != corev1.PodRunning || pod.Spec.NodeName != framework.DefaultNodeName {
		t.Fatalf("pod not running on %s: phase=%s node=%q", framework.DefaultNodeName, pod.Status.Phase, pod.Spec.NodeName)
	}

	// Faults: only too-large requests are infeasible.
	driver.SetFaults(t, []framework.Fault{{
		Method: "ControllerExpandVolume", Code: codes.OutOfRange, Message: "over quota", MinRequiredBytes: 3 * gi,
	}})
	if err := controllerExpand(ctx, driver, volID, 4*gi); status.Code(err) != codes.OutOfRange || !strings.Contains(err.Error(), "over quota") {
		t.Fatalf("expand to 4Gi: got %v, want OUT_OF_RANGE over quota", err)
	}
	if err := controllerExpand(ctx, driver, volID, 2*gi); err != nil {
		t.Fatalf("expand to 2Gi: %v", err)
	}
	// times: the rule applies once, then the real call goes through.
	driver.SetFaults(t, []framework.Fault{{Method: "ControllerExpandVolume", Code: codes.Internal, Times: 1}})
	if err := controllerExpand(ctx, driver, volID, 3*gi); status.Code(err) != codes.Internal {
		t.Fatalf("first expand with times=1: got %v, want INTERNAL", err)
	}
	if err := controllerExpand(ctx, driver, volID, 3*gi); err != nil {
		t.Fatalf("second expand with times=1: %v", err)
	}
	// delay without a code: a slow success that outlives the caller.
	driver.SetFaults(t, []framework.Fault{{Method: "ControllerExpandVolume", Delay: 1500 * time.Millisecond}})
	shortCtx, shortCancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = controllerExpand(shortCtx, driver, volID, 5*gi)
	shortCancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("delayed expand: got %v, want DEADLINE_EXCEEDED", err)
	}
	driver.ClearFaults(t)

	calls := driver.Calls(t, "ControllerExpandVolume")
	framework.Eventually(t, 10*time.Second, func() (bool, string) {
		// The delayed call is logged when it completes, after the caller gave up.
		calls = driver.Calls(t, "ControllerExpandVolume")
		return len(calls) == 5, fmt.Sprintf("%d ControllerExpandVolume calls logged: %+v", len(calls), calls)
	})
	want := []struct {
		code     codes.Code
		bytes    int64
		injected bool
	}{{codes.OutOfRange, 4 * gi, true}, {codes.OK, 2 * gi, false}, {codes.Internal, 3 * gi, true}, {codes.OK, 3 * gi, false}, {codes.OK, 5 * gi, false}}
	for i, w := range want {
		c := calls[i]
		if c.Code != w.code || c.RequiredBytes != w.bytes || c.Injected != w.injected || c.VolumeID != volID {
			t.Errorf("call %d: got code=%s bytes=%d injected=%v vol=%s, want %s %d %v %s", i, c.CodeName, c.RequiredBytes, c.Injected, c.VolumeID, w.code, w.bytes, w.injected, volID)
		}
	}
	if len(driver.Calls(t, "CreateVolume")) != 1 {
		t.Errorf("want 1 CreateVolume call, got %+v", driver.Calls(t, "CreateVolume"))
	}

	// A restarted mock still knows the volume (journal replay) at its new
	// size, and unknown ids are NOT_FOUND.
	start = time.Now()
	driver.Restart(t)
	t.Logf("mock driver restarted in %v", time.Since(start).Round(time.Millisecond))
	if err := controllerExpand(ctx, driver, volID, 5*gi); err != nil {
		t.Fatalf("expand after driver restart: %v", err)
	}
	if err := controllerExpand(ctx, driver, "no-such-volume", 5*gi); status.Code(err) != codes.NotFound {
		t.Fatalf("expand of an unknown volume: got %v, want NOT_FOUND", err)
	}

	// The apiserver comes back on the same port with the same data.
	start = time.Now()
	cluster.RestartAPIServer(t)
	t.Logf("kube-apiserver restarted in %v", time.Since(start).Round(time.Millisecond))
	pvcs, err := client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(pvcs.Items) != 1 {
		t.Fatalf("list PVCs after apiserver restart: %d items, err %v", len(pvcs.Items), err)
	}

	// kubectl with the admin kubeconfig, and a service account without RBAC.
	out, err := cluster.Kubectl(t, "get", "pvc", "-n", ns, "-o", "name")
	if err != nil || strings.TrimSpace(out) != "persistentvolumeclaim/data" {
		t.Fatalf("kubectl get pvc: %q, %v", out, err)
	}
	saKubeconfig := cluster.ServiceAccountKubeconfig(t, ns, "nobody")
	out, err = cluster.Kubectl(t, "--kubeconfig="+saKubeconfig, "auth", "can-i", "list", "persistentvolumeclaims")
	if strings.TrimSpace(out) != "no" {
		t.Fatalf("service account can-i list pvc: %q (%v), want no", out, err)
	}
	out, err = cluster.Kubectl(t, "--kubeconfig="+saKubeconfig, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
	if err != nil || out != "system:serviceaccount:"+ns+":nobody" {
		t.Fatalf("service account whoami: %q, %v", out, err)
	}

	if withKCM {
		// The controller manager is really working: it creates the
		// kube-root-ca.crt config map in every namespace.
		framework.Eventually(t, 30*time.Second, func() (bool, string) {
			_, err := client.CoreV1().ConfigMaps(ns).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
			return err == nil, fmt.Sprintf("kube-root-ca.crt in %s: %v", ns, err)
		})

		// kcm's in-tree expand controller leaves CSI PVCs to the sidecar:
		// a grown request gets only its Normal ExternalExpanding event,
		// and neither the PVC nor the PV is written.
		cur, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("2Gi")
		grown, err := client.CoreV1().PersistentVolumeClaims(ns).Update(ctx, cur, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, 30*time.Second, func() (bool, string) {
			evs, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=data"})
			if err != nil {
				return false, err.Error()
			}
			var seen []string
			for _, e := range evs.Items {
				if e.Reason == "ExternalExpanding" && e.Source.Component == "volume_expand" {
					return true, ""
				}
				seen = append(seen, e.Source.Component+"/"+e.Reason)
			}
			return false, fmt.Sprintf("no ExternalExpanding event from volume_expand; events: %v", seen)
		})
		pvBefore, err := client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		framework.Consistently(t, 2*time.Second, func() (bool, string) {
			c, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			p, err := client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			ok := c.ResourceVersion == grown.ResourceVersion && p.ResourceVersion == pvBefore.ResourceVersion
			return ok, "kcm wrote the PVC or PV: " + framework.DescribeClaim(c)
		})
	}

	framework.DeletePod(t, ctx, client, ns, "app")
	framework.DeleteClaim(t, ctx, client, ns, "data")
}

// TestHarnessDriverShapes checks the mock driver's switches: node-only and
// offline-only expansion, node expansion required.
func TestHarnessDriverShapes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	t.Run("node-only", func(t *testing.T) {
		d := framework.StartMockDriver(t, framework.MockDriverOptions{Name: "node-only.csi-resizer.io", NodeOnly: true})
		ctrl, node := capabilities(t, ctx, d)
		if ctrl[csi.ControllerServiceCapability_RPC_EXPAND_VOLUME] || !node[csi.NodeServiceCapability_RPC_EXPAND_VOLUME] {
			t.Fatalf("node-only driver: controller EXPAND_VOLUME=%v node EXPAND_VOLUME=%v", ctrl[csi.ControllerServiceCapability_RPC_EXPAND_VOLUME], node[csi.NodeServiceCapability_RPC_EXPAND_VOLUME])
		}
		id, err := d.CreateVolume(ctx, "v", gi)
		if err != nil {
			t.Fatal(err)
		}
		if err := controllerExpand(ctx, d, id, 2*gi); status.Code(err) != codes.Unimplemented {
			t.Fatalf("ControllerExpandVolume on a node-only driver: %v, want UNIMPLEMENTED", err)
		}
	})

	t.Run("node-expansion-required", func(t *testing.T) {
		d := framework.StartMockDriver(t, framework.MockDriverOptions{NodeExpansionRequired: true})
		ctrl, node := capabilities(t, ctx, d)
		if !ctrl[csi.ControllerServiceCapability_RPC_EXPAND_VOLUME] || !node[csi.NodeServiceCapability_RPC_EXPAND_VOLUME] {
			t.Fatalf("capabilities: controller %v node %v", ctrl, node)
		}
		id, err := d.CreateVolume(ctx, "v", gi)
		if err != nil {
			t.Fatal(err)
		}
		if err := controllerExpand(ctx, d, id, 2*gi); err != nil {
			t.Fatal(err)
		}
		if c := d.Calls(t, "ControllerExpandVolume"); len(c) != 1 || !c[0].NodeExpansionRequired || c[0].CapacityBytes != 2*gi {
			t.Fatalf("calls: %+v", c)
		}
	})

	t.Run("offline", func(t *testing.T) {
		d := framework.StartMockDriver(t, framework.MockDriverOptions{OfflineExpansion: true})
		conn, err := d.Dial()
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		pc, err := csi.NewIdentityClient(conn).GetPluginCapabilities(ctx, &csi.GetPluginCapabilitiesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		offline := false
		for _, c := range pc.GetCapabilities() {
			if c.GetVolumeExpansion().GetType() == csi.PluginCapability_VolumeExpansion_OFFLINE {
				offline = true
			}
		}
		if !offline {
			t.Fatalf("no VolumeExpansion OFFLINE in %v", pc.GetCapabilities())
		}
		id, err := d.CreateVolume(ctx, "v", gi)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.PublishVolume(ctx, id); err != nil {
			t.Fatal(err)
		}
		if err := controllerExpand(ctx, d, id, 2*gi); status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("expand while published: %v, want FAILED_PRECONDITION", err)
		}
		// Published state survives a driver restart (journal).
		d.Restart(t)
		if err := controllerExpand(ctx, d, id, 2*gi); status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("expand while published, after restart: %v, want FAILED_PRECONDITION", err)
		}
		if err := d.UnpublishVolume(ctx, id); err != nil {
			t.Fatal(err)
		}
		if err := controllerExpand(ctx, d, id, 2*gi); err != nil {
			t.Fatalf("expand after unpublish: %v", err)
		}
	})
}

// TestHarnessExternalDriver runs the mock binary the way an e2e suite runs
// a real driver: from a command line with the {endpoint} placeholder.
func TestHarnessExternalDriver(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := framework.Bin(t, "mock-csi-driver") + " --endpoint={endpoint} --name=external.csi-resizer.io"
	d := framework.StartExternalDriver(t, framework.ExternalDriverOptions{Command: cmd, Name: "external.csi-resizer.io"})
	if d.IsMock() {
		t.Fatal("an external driver must not claim mock features")
	}
	id, err := d.CreateVolume(ctx, "ext", gi)
	if err != nil {
		t.Fatal(err)
	}
	if err := controllerExpand(ctx, d, id, 2*gi); err != nil {
		t.Fatal(err)
	}
	// An already running driver, by endpoint.
	byEndpoint := framework.StartExternalDriver(t, framework.ExternalDriverOptions{Endpoint: d.Endpoint})
	if byEndpoint.Name != "external.csi-resizer.io" || byEndpoint.Process != nil {
		t.Fatalf("by endpoint: name %q process %v", byEndpoint.Name, byEndpoint.Process)
	}
	d.Restart(t)
	if _, err := d.CreateVolume(ctx, "ext-2", gi); err != nil {
		t.Fatalf("after restart: %v", err)
	}
}

// TestHarnessKubectl covers ApplyKustomize and kubectl's server-side dry run,
// which other suites use to check the shipped manifests.
func TestHarnessKubectl(t *testing.T) {
	cluster := framework.StartCluster(t, framework.ClusterOptions{})
	dir := t.TempDir()
	files := map[string]string{
		"kustomization.yaml": "namespace: kustomized\nresources:\n- ns.yaml\n- cm.yaml\n",
		"ns.yaml":            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: kustomized\n",
		"cm.yaml":            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: hello\ndata:\n  k: v\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cluster.ApplyKustomize(t, dir)
	cm, err := cluster.Client.CoreV1().ConfigMaps("kustomized").Get(context.Background(), "hello", metav1.GetOptions{})
	if err != nil || cm.Data["k"] != "v" {
		t.Fatalf("kustomized config map: %v %v", cm, err)
	}
	bad := "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: x\n  namespace: kustomized\nspec:\n  accessModes: [ReadWriteOnce]\n"
	if _, err := cluster.KubectlWithInput(t, bad, "apply", "--dry-run=server", "-f", "-"); err == nil || !strings.Contains(err.Error(), "spec.resources") {
		t.Fatalf("server-side dry run of an invalid PVC: %v", err)
	}
}

// TestHarnessResizerProcess checks the plumbing of BuildResizer and
// StartResizer (not the resizer's behaviour): the binary starts against the
// mock driver, serves metrics, and survives a kill and a restart.
func TestHarnessResizerProcess(t *testing.T) {
	cluster := framework.StartCluster(t, framework.ClusterOptions{})
	driver := framework.StartMockDriver(t, framework.MockDriverOptions{})
	p := framework.StartResizer(t, cluster, "", driver)
	p.WaitHTTP(t, "/metrics", time.Minute)
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	p.Restart(t)
	p.WaitHTTP(t, "/metrics", time.Minute)
	if n := len(driver.Calls(t, "GetPluginInfo")); n < 2 {
		t.Errorf("driver saw %d GetPluginInfo calls over two resizer starts", n)
	}
}

// TestHarnessAPIServerRules pins the real apiserver's PVC rules that fakes
// do not enforce and that the resizers must live with.
func TestHarnessAPIServerRules(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cluster := framework.StartCluster(t, framework.ClusterOptions{})
	client := cluster.Client
	ns := framework.CreateNamespace(t, ctx, client, "rules")
	pvc, _ := framework.CreateBoundClaim(t, ctx, client, ns, "data", "rules.csi-resizer.io", "vol-1", "1Gi", "rules-sc")
	pvcs := client.CoreV1().PersistentVolumeClaims(ns)

	setRequest := func(size string) error {
		cur, err := pvcs.Get(ctx, pvc.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse(size)
		_, err = pvcs.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	}
	if err := setRequest("3Gi"); err != nil {
		t.Fatalf("grow request: %v", err)
	}
	// Lowering (recovery) is allowed only to a value strictly above status.capacity.
	if err := setRequest("1Gi"); err == nil {
		t.Error("lowering the request to status.capacity was accepted")
	}
	if err := setRequest("2Gi"); err != nil {
		t.Errorf("lowering the request above status.capacity: %v", err)
	}

	// allocatedResourceStatuses accepts only the API's constants.
	cur, err := pvcs.Get(ctx, pvc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Status.AllocatedResourceStatuses = map[corev1.ResourceName]corev1.ClaimResourceStatus{corev1.ResourceStorage: "ControllerResizeFailed"}
	if _, err := pvcs.UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err == nil {
		t.Error("a non-API allocatedResourceStatuses value was accepted")
	}
	cur.Status.AllocatedResourceStatuses = map[corev1.ResourceName]corev1.ClaimResourceStatus{corev1.ResourceStorage: corev1.PersistentVolumeClaimControllerResizeInProgress}
	cur.Status.AllocatedResources = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}
	if _, err := pvcs.UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Errorf("ControllerResizeInProgress: %v", err)
	}

	// Status sent to the main resource is dropped without an error.
	cur, err = pvcs.Get(ctx, pvc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("5Gi")}
	updated, err := pvcs.Update(ctx, cur, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update with status: %v", err)
	}
	if got := updated.Status.Capacity.Storage().String(); got != "1Gi" {
		t.Errorf("status.capacity after a main-resource update = %s, want 1Gi (dropped)", got)
	}
}

// expand calls ControllerExpandVolume like the resizer does.
func controllerExpand(ctx context.Context, d *framework.Driver, volID string, bytes int64) error {
	conn, err := d.Dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = csi.NewControllerClient(conn).ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{
		VolumeId:      volID,
		CapacityRange: &csi.CapacityRange{RequiredBytes: bytes},
		VolumeCapability: &csi.VolumeCapability{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		},
	})
	return err
}

func capabilities(t *testing.T, ctx context.Context, d *framework.Driver) (map[csi.ControllerServiceCapability_RPC_Type]bool, map[csi.NodeServiceCapability_RPC_Type]bool) {
	t.Helper()
	conn, err := d.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cr, err := csi.NewControllerClient(conn).ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	nr, err := csi.NewNodeClient(conn).NodeGetCapabilities(ctx, &csi.NodeGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	ctrl := map[csi.ControllerServiceCapability_RPC_Type]bool{}
	for _, c := range cr.GetCapabilities() {
		ctrl[c.GetRpc().GetType()] = true
	}
	node := map[csi.NodeServiceCapability_RPC_Type]bool{}
	for _, c := range nr.GetCapabilities() {
		node[c.GetRpc().GetType()] = true
	}
	return ctrl, node
}
