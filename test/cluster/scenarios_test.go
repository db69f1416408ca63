//go:build cluster

package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/csi-resizer/csi-resizer/test/framework"
)

// The parameter names csi-driver-host-path accepts in a VolumeAttributesClass once
// useOurResizer has enabled ControllerModifyVolume (as `make test-e2e-hostpath` runs it).
const scenarioMutableParams = "iops,throughput"

// TestScenarios runs the project's expansion and modification scenarios on the real node:
// csi-driver-host-path with this checkout's csi-resizer as its resizer (deployed with the
// project's own kustomize example), the real kubelet doing every node step. Nothing plays the
// kubelet or the driver.
func TestScenarios(t *testing.T) {
	c := clusterFor(t)
	begin := time.Now()
	deployHostpathOnce(t, c)
	t.Logf("csi-driver-host-path deployed (or found) in %s", time.Since(begin).Round(time.Second))
	begin = time.Now()
	useOurResizer(t, c)
	t.Logf("our resizer in csi-hostpathplugin-0 in %s", time.Since(begin).Round(time.Second))
	ns := scenarioNamespace(t, c, "scenarios")

	for _, sc := range []struct {
		name string
		run  func(t *testing.T, s *scenarioEnv)
	}{
		{"online", scenarioOnline},
		{"offline", scenarioOffline},
		{"infeasible-then-recovered", scenarioInfeasible},
		{"kubelet-node-step", scenarioNodeStep},
		{"volume-attributes-class", scenarioModify},
	} {
		t.Run(sc.name, func(t *testing.T) {
			start := time.Now()
			sc.run(t, &scenarioEnv{c: c, ns: ns, ctx: context.Background()})
			t.Logf("scenario %s: %s", sc.name, time.Since(start).Round(100*time.Millisecond))
		})
	}
}

// scenarioOnline grows a volume mounted in a running pod: the controller step by our resizer,
// the node step by the kubelet on its own (no test writes the PVC's status).
func scenarioOnline(t *testing.T, s *scenarioEnv) {
	pv := s.boundPVC(t, "online", "1Gi", "")
	s.podWithClaim(t, "online", "online")
	before := s.df(t, "online")
	s.resize(t, "online", "2Gi")
	p := s.waitPVC(t, "online", 2*time.Minute, "capacity 2Gi, resize state cleared", func(p *corev1.PersistentVolumeClaim) bool {
		return storageIs(p.Status.Capacity, "2Gi") && len(p.Status.AllocatedResourceStatuses) == 0
	})
	s.expectDone(t, p, "2Gi")
	s.expectPV(t, pv, "2Gi")
	s.expectEvents(t, "online", "ExternalExpanding", "FileSystemResizeRequired", "FileSystemResizeSuccessful")
	s.expectNodeExpandCall(t, pv, "2Gi")
	// csi-driver-host-path keeps a file system volume as a plain directory on the node's file
	// system: what df shows in the pod is that file system, whatever the volume's size.
	t.Logf("df /data in the pod before: %s; after: %s (csi-driver-host-path's volumes are directories: no size of their own)",
		before, s.df(t, "online"))
}

// scenarioOffline grows a volume no pod uses: our resizer does the controller step and leaves
// NodeResizePending; the kubelet does the node step when a pod mounts the volume.
func scenarioOffline(t *testing.T, s *scenarioEnv) {
	pv := s.boundPVC(t, "offline", "1Gi", "")
	s.resize(t, "offline", "2Gi")
	p := s.waitPVC(t, "offline", time.Minute, "NodeResizePending after the controller step", func(p *corev1.PersistentVolumeClaim) bool {
		return pvcResizeState(p) == corev1.PersistentVolumeClaimNodeResizePending
	})
	if !storageIs(p.Status.Capacity, "1Gi") || !storageIs(p.Status.AllocatedResources, "2Gi") {
		t.Errorf("after the controller step: capacity %s, allocatedResources %s; want 1Gi (the node step is to come) and 2Gi",
			storageOf(p.Status.Capacity), storageOf(p.Status.AllocatedResources))
	}
	if !pvcHasCondition(p, corev1.PersistentVolumeClaimFileSystemResizePending) {
		t.Errorf("NodeResizePending without a FileSystemResizePending condition: %v", pvcConditionTypes(p))
	}
	s.expectPV(t, pv, "2Gi")
	start := time.Now()
	s.podWithClaim(t, "offline", "offline")
	p = s.waitPVC(t, "offline", 2*time.Minute, "the kubelet's node step at mount", func(p *corev1.PersistentVolumeClaim) bool {
		return storageIs(p.Status.Capacity, "2Gi") && len(p.Status.AllocatedResourceStatuses) == 0
	})
	t.Logf("node step done %s after the pod was created", time.Since(start).Round(100*time.Millisecond))
	s.expectDone(t, p, "2Gi")
	s.expectNodeExpandCall(t, pv, "2Gi")
}

// scenarioInfeasible asks for more than csi-driver-host-path allows (its --max-volume-size,
// 1Ti by default, which its manifests keep: ControllerExpandVolume answers OUT_OF_RANGE), then
// lowers the request to a size above the old capacity, as KEP-1790 allows.
func scenarioInfeasible(t *testing.T, s *scenarioEnv) {
	pv := s.boundPVC(t, "infeasible", "1Gi", "")
	s.podWithClaim(t, "infeasible", "infeasible")
	s.resize(t, "infeasible", "2Ti")
	p := s.waitPVC(t, "infeasible", time.Minute, "ControllerResizeInfeasible", func(p *corev1.PersistentVolumeClaim) bool {
		return pvcResizeState(p) == corev1.PersistentVolumeClaimControllerResizeInfeasible
	})
	if !storageIs(p.Status.AllocatedResources, "2Ti") || !storageIs(p.Status.Capacity, "1Gi") {
		t.Errorf("infeasible: allocatedResources %s, capacity %s; want 2Ti and 1Gi",
			storageOf(p.Status.AllocatedResources), storageOf(p.Status.Capacity))
	}
	cond := pvcCondition(p, corev1.PersistentVolumeClaimControllerResizeError)
	if cond == nil || !strings.Contains(cond.Message, "exceeds maximum allowed") {
		t.Errorf("infeasible: want a ControllerResizeError condition with the driver's message, got %+v", p.Status.Conditions)
	}
	s.expectEvents(t, "infeasible", "VolumeResizeFailed")
	s.expectPV(t, pv, "1Gi")
	tooBig := resource.MustParse("2Ti")
	if !s.driverCalled(t, "ControllerExpandVolume", s.handle(t, pv), "OutOfRange", time.Second) {
		t.Errorf("no ControllerExpandVolume answered OutOfRange in the driver's log")
	}
	if s.driverCalled(t, "NodeExpandVolume", s.handle(t, pv), fmt.Sprintf(`"required_bytes":%d`, tooBig.Value()), time.Second) {
		t.Errorf("the kubelet called NodeExpandVolume with 2Ti for a ControllerResizeInfeasible claim")
	}

	// KEP-1790 lets the request go back down, but only above the capacity the volume has.
	patch := []byte(`{"spec":{"resources":{"requests":{"storage":"1Gi"}}}}`)
	_, err := s.c.Client.CoreV1().PersistentVolumeClaims(s.ns).Patch(s.ctx, "infeasible", types.MergePatchType, patch, metav1.PatchOptions{})
	if err == nil {
		t.Errorf("the apiserver let the request go back to 1Gi, the capacity: KEP-1790 allows only more than the capacity")
	} else {
		t.Logf("lowering to 1Gi (the capacity) refused, as KEP-1790 says: %v", err)
	}
	s.resize(t, "infeasible", "2Gi")
	p = s.waitPVC(t, "infeasible", 2*time.Minute, "recovered to 2Gi", func(p *corev1.PersistentVolumeClaim) bool {
		return storageIs(p.Status.Capacity, "2Gi") && len(p.Status.AllocatedResourceStatuses) == 0
	})
	s.expectDone(t, p, "2Gi")
	s.expectPV(t, pv, "2Gi")
	s.expectNodeExpandCall(t, pv, "2Gi")
	// The recovery is reported once the kubelet's node step is over.
	s.expectEvents(t, "infeasible", "FileSystemResizeRequired", "VolumeResizeRecovered")
	t.Logf("events:\n%s", s.events(t, "infeasible"))
}

// scenarioNodeStep watches a PVC through an online expansion and checks the order of its
// states and who wrote each, by the field managers owning the fields: ControllerResizeInProgress
// then NodeResizePending with FileSystemResizePending (our resizer), NodeResizeInProgress (the
// kubelet), then capacity = the new size with the state and the condition gone (the kubelet).
func scenarioNodeStep(t *testing.T, s *scenarioEnv) {
	s.boundPVC(t, "nodestep", "1Gi", "")
	s.podWithClaim(t, "nodestep", "nodestep")
	w := s.watchPVC(t, "nodestep")
	s.resize(t, "nodestep", "3Gi")
	p := s.waitPVC(t, "nodestep", 2*time.Minute, "capacity 3Gi, resize state cleared", func(p *corev1.PersistentVolumeClaim) bool {
		return storageIs(p.Status.Capacity, "3Gi") && len(p.Status.AllocatedResourceStatuses) == 0
	})
	s.expectDone(t, p, "3Gi")
	steps := w.stop()
	var lines []string
	for _, st := range steps {
		lines = append(lines, st.String())
	}
	t.Logf("status as watched:\n%s", strings.Join(lines, "\n"))

	var resizer string // our resizer's field manager, from the first step it owns
	notKubelet := func(o []string) bool { return len(o) == 1 && o[0] != "kubelet" }
	want := []struct {
		desc string
		ok   func(scenarioStep) bool
	}{
		{"ControllerResizeInProgress with Resizing, written by our resizer", func(st scenarioStep) bool {
			if st.state != corev1.PersistentVolumeClaimControllerResizeInProgress || !st.hasCond(corev1.PersistentVolumeClaimResizing) ||
				st.allocated != "3Gi" || !notKubelet(st.stateOwners) {
				return false
			}
			resizer = st.stateOwners[0]
			return true
		}},
		{"NodeResizePending with FileSystemResizePending, capacity 1Gi, written by our resizer", func(st scenarioStep) bool {
			return st.state == corev1.PersistentVolumeClaimNodeResizePending && st.hasCond(corev1.PersistentVolumeClaimFileSystemResizePending) &&
				st.capacity == "1Gi" && len(st.stateOwners) == 1 && st.stateOwners[0] == resizer
		}},
		{"NodeResizeInProgress, written by the kubelet", func(st scenarioStep) bool {
			return st.state == corev1.PersistentVolumeClaimNodeResizeInProgress && scenContains(st.stateOwners, "kubelet")
		}},
		{"capacity 3Gi written by the kubelet, no state, no condition", func(st scenarioStep) bool {
			return st.capacity == "3Gi" && st.state == "" && len(st.conds) == 0 &&
				len(st.capacityOwners) == 1 && st.capacityOwners[0] == "kubelet"
		}},
	}
	i := 0
	for _, st := range steps {
		if i < len(want) && want[i].ok(st) {
			i++
		}
	}
	if i < len(want) {
		t.Fatalf("the watched status never reached %q after the steps before it", want[i].desc)
	}
	t.Logf("our resizer's field manager: %s; the node step's: kubelet", resizer)
}

// scenarioModify changes VolumeAttributesClasses through csi-driver-host-path's
// ControllerModifyVolume: a PVC created without a class gets one, a PVC created with one moves
// to another, a class with a parameter the driver refuses is Infeasible and is rolled back.
func scenarioModify(t *testing.T, s *scenarioEnv) {
	gold := s.vac(t, "scen-gold", map[string]string{"iops": "3000", "throughput": "100"})
	silver := s.vac(t, "scen-silver", map[string]string{"iops": "1000"})
	bad := s.vac(t, "scen-bad", map[string]string{"color": "red"})

	t.Run("without-class-then-gold", func(t *testing.T) {
		pv := s.boundPVC(t, "vac-none", "1Gi", "")
		s.setClass(t, "vac-none", gold)
		s.waitClass(t, "vac-none", pv, gold)
		s.expectEvents(t, "vac-none", "VolumeModifySuccessful")
		if !s.driverCalled(t, "ControllerModifyVolume", s.handle(t, pv), `"iops":"3000"`, 10*time.Second) {
			t.Errorf("no ControllerModifyVolume with the class's parameters in the driver's log")
		}
	})
	t.Run("silver-then-gold", func(t *testing.T) {
		pv := s.boundPVC(t, "vac-silver", "1Gi", silver)
		p := s.waitPVC(t, "vac-silver", time.Minute, "current class silver", func(p *corev1.PersistentVolumeClaim) bool {
			return scenDeref(p.Status.CurrentVolumeAttributesClassName) == silver
		})
		t.Logf("created with %s: current %s, modifyVolumeStatus %+v", silver, scenDeref(p.Status.CurrentVolumeAttributesClassName), p.Status.ModifyVolumeStatus)
		s.setClass(t, "vac-silver", gold)
		s.waitClass(t, "vac-silver", pv, gold)
	})
	t.Run("refused-then-rolled-back", func(t *testing.T) {
		s.boundPVC(t, "vac-bad", "1Gi", silver)
		s.waitPVC(t, "vac-bad", time.Minute, "current class silver", func(p *corev1.PersistentVolumeClaim) bool {
			return scenDeref(p.Status.CurrentVolumeAttributesClassName) == silver
		})
		s.setClass(t, "vac-bad", bad)
		p := s.waitPVC(t, "vac-bad", time.Minute, "modify Infeasible", func(p *corev1.PersistentVolumeClaim) bool {
			return p.Status.ModifyVolumeStatus != nil && p.Status.ModifyVolumeStatus.Status == corev1.PersistentVolumeClaimModifyVolumeInfeasible
		})
		if p.Status.ModifyVolumeStatus.TargetVolumeAttributesClassName != bad || scenDeref(p.Status.CurrentVolumeAttributesClassName) != silver {
			t.Errorf("infeasible modify: target %q, current %q; want %q and %q", p.Status.ModifyVolumeStatus.TargetVolumeAttributesClassName,
				scenDeref(p.Status.CurrentVolumeAttributesClassName), bad, silver)
		}
		s.expectEvents(t, "vac-bad", "VolumeModifyFailed")
		s.setClass(t, "vac-bad", silver)
		p = s.waitPVC(t, "vac-bad", time.Minute, "rollback: no modifyVolumeStatus", func(p *corev1.PersistentVolumeClaim) bool {
			return p.Status.ModifyVolumeStatus == nil
		})
		if scenDeref(p.Status.CurrentVolumeAttributesClassName) != silver {
			t.Errorf("after the rollback the current class is %q, want %q", scenDeref(p.Status.CurrentVolumeAttributesClassName), silver)
		}
		s.expectEvents(t, "vac-bad", "VolumeModifyCancelled")
	})
}

// useOurResizer puts this checkout's image in csi-driver-host-path's pod in place of
// upstream's resizer, with the project's kustomize component
// (deploy/kubernetes/sidecar/examples/csi-hostpath/component) over the driver's own
// csi-hostpath-plugin.yaml, and enables the driver's ControllerModifyVolume. Cleanup puts the
// StatefulSet back exactly as it was and removes what the component added.
func useOurResizer(t *testing.T, c *Cluster) {
	t.Helper()
	saved, err := savedForReplace(t, c, "statefulset/csi-hostpathplugin")
	if err != nil {
		t.Fatal(err)
	}
	rendered, upstreamFile := renderOurResizer(t, c)
	upstreamNames, err := c.Kubectl(t, "create", "--dry-run=client", "-o", "name", "-f", upstreamFile)
	if err != nil {
		t.Fatal(err)
	}
	// Cleanup is registered before the apply so that a half-done apply is undone too.
	var applied string
	t.Cleanup(func() { restoreUpstreamResizer(t, c, saved, applied, upstreamNames) })
	if applied, err = c.KubectlWithInput(t, rendered, "apply", "-o", "name", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	if out, err := c.Kubectl(t, "rollout", "status", "statefulset/csi-hostpathplugin", "--timeout=180s"); err != nil {
		desc, _ := c.Kubectl(t, "describe", "pod", "csi-hostpathplugin-0")
		t.Fatalf("%v\n%s\n%s", err, out, desc)
	}
	// Our resizer runs its controllers once it leads: wait for its Lease.
	ctx := context.Background()
	var holder string
	err = wait.PollUntilContextTimeout(ctx, time.Second, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := c.Client.CoordinationV1().Leases("default").Get(ctx, "external-resizer-hostpath-csi-k8s-io", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		holder = scenDeref(l.Spec.HolderIdentity)
		return strings.HasPrefix(holder, "csi-hostpathplugin-0"), nil
	})
	if err != nil {
		logs, _ := c.Kubectl(t, "logs", "csi-hostpathplugin-0", "-c", "csi-resizer", "--tail=30")
		t.Fatalf("our resizer did not take its Lease (holder %q): %v\n%s", holder, err, logs)
	}
	image, _ := c.Kubectl(t, "get", "pod", "csi-hostpathplugin-0", "-o",
		`jsonpath={.spec.containers[?(@.name=="csi-resizer")].image}`)
	if image != c.ProductImage {
		t.Fatalf("csi-resizer container runs %q, want %q", image, c.ProductImage)
	}
	c.RequireProductImage(t, "default", hostpathSelector, "csi-resizer")
}

// renderOurResizer renders, with the cluster's kubectl, a kustomization holding the driver's
// csi-hostpath-plugin.yaml, the project's component, this checkout's image, and the two driver
// flags of ControllerModifyVolume. It returns the rendering and the path of the upstream file.
func renderOurResizer(t *testing.T, c *Cluster) (string, string) {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	upstream := filepath.Join(root, "..", "shared", "anchors", "csi-driver-host-path-deploy",
		"deploy", "kubernetes-1.34", "hostpath", "csi-hostpath-plugin.yaml")
	data, err := os.ReadFile(upstream)
	if err != nil {
		t.Fatalf("csi-driver-host-path's manifests (../shared/anchors): %v", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "csi-hostpath-plugin.yaml"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	// kustomize takes components only by relative path.
	component, err := filepath.Rel(dir, filepath.Join(root, "deploy", "kubernetes", "sidecar", "examples", "csi-hostpath", "component"))
	if err != nil {
		t.Fatal(err)
	}
	name, tag, ok := strings.Cut(c.ProductImage, ":")
	if !ok {
		t.Fatalf("product image %q has no tag", c.ProductImage)
	}
	kustomization := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- csi-hostpath-plugin.yaml
components:
- %s
images:
- name: registry.example/csi-resizer
  newName: %s
  newTag: %q
patches:
- patch: |-
    apiVersion: apps/v1
    kind: StatefulSet
    metadata:
      name: csi-hostpathplugin
    spec:
      template:
        spec:
          containers:
          - name: hostpath
            args:
            - --drivername=hostpath.csi.k8s.io
            - --v=5
            - --endpoint=$(CSI_ENDPOINT)
            - --nodeid=$(KUBE_NODE_NAME)
            - --enable-controller-modify-volume
            - --accepted-mutable-parameter-names=%s
`, component, name, tag, scenarioMutableParams)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := c.Kubectl(t, "kustomize", dir)
	if err != nil {
		t.Fatal(err)
	}
	return out, upstream
}

// savedForReplace reads an object as `kubectl replace` can write it back later: without its
// resourceVersion and what the server sets.
func savedForReplace(t *testing.T, c *Cluster, name string) (string, error) {
	t.Helper()
	out, err := c.Kubectl(t, "get", name, "-o", "json")
	if err != nil {
		return "", err
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(out), &obj); err != nil {
		return "", err
	}
	delete(obj, "status")
	if meta, ok := obj["metadata"].(map[string]any); ok {
		for _, k := range []string{"resourceVersion", "uid", "creationTimestamp", "generation", "managedFields"} {
			delete(meta, k)
		}
	}
	data, err := json.Marshal(obj)
	return string(data), err
}

// restoreUpstreamResizer puts back the StatefulSet as saved (spec, labels and annotations,
// last-applied included), deletes the objects the component added and our resizer's Lease,
// and waits for the driver's pod to run the upstream containers again.
func restoreUpstreamResizer(t *testing.T, c *Cluster, saved, applied, upstreamNames string) {
	t.Helper()
	begin := time.Now()
	defer func() { t.Logf("upstream's resizer back in %s", time.Since(begin).Round(time.Second)) }()
	keep := map[string]bool{}
	for _, n := range strings.Fields(upstreamNames) {
		keep[n] = true
	}
	for _, n := range strings.Fields(applied) {
		if !keep[n] {
			if _, err := c.Kubectl(t, "delete", "--ignore-not-found", n); err != nil {
				t.Error(err)
			}
		}
	}
	if _, err := c.KubectlWithInput(t, saved, "replace", "-f", "-"); err != nil {
		t.Errorf("restoring statefulset/csi-hostpathplugin: %v", err)
	}
	if _, err := c.Kubectl(t, "rollout", "status", "statefulset/csi-hostpathplugin", "--timeout=180s"); err != nil {
		t.Error(err)
	}
	if _, err := c.Kubectl(t, "delete", "--ignore-not-found", "lease/external-resizer-hostpath-csi-k8s-io"); err != nil {
		t.Error(err)
	}
	// The driver's pod runs what the saved template says (upstream's resizer, no modify flags).
	const images = `jsonpath={range .spec.template.spec.containers[*]}{.image} {.args}{"\n"}{end}`
	want, _ := c.KubectlWithInput(t, saved, "create", "--dry-run=client", "-f", "-", "-o", images)
	got, _ := c.Kubectl(t, "get", "pod", "csi-hostpathplugin-0", "-o", strings.Replace(images, ".spec.template.spec", ".spec", 1))
	if want == "" || got != want {
		t.Errorf("after the restore the driver's pod runs\n%s\nwant\n%s", got, want)
	}
}

// scenarioNamespace creates a namespace and deletes it at the end, waiting until it is gone
// (its PVs deleted by the driver) so that the next test finds the cluster as it was.
func scenarioNamespace(t *testing.T, c *Cluster, name string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		begin := time.Now()
		defer func() { t.Logf("namespace %s and its PVs gone in %s", name, time.Since(begin).Round(time.Second)) }()
		if err := c.Client.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Error(err)
			return
		}
		err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := c.Client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
			if !apierrors.IsNotFound(err) {
				return false, nil
			}
			pvs, err := c.Client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			for _, pv := range pvs.Items {
				if ref := pv.Spec.ClaimRef; ref != nil && ref.Namespace == name {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			t.Errorf("namespace %s or its PVs not gone: %v", name, err)
		}
	})
	return name
}

// scenarioEnv is what the scenarios share: the cluster and their namespace.
type scenarioEnv struct {
	c   *Cluster
	ns  string
	ctx context.Context
}

// boundPVC creates a PVC of csi-hostpath-sc (with a VolumeAttributesClass if class is set),
// waits until it is bound and returns its PV's name.
func (s *scenarioEnv) boundPVC(t *testing.T, name, size, class string) string {
	t.Helper()
	pvc := hostpathPVC("", name, size)
	if class != "" {
		pvc.Spec.VolumeAttributesClassName = ptrTo(class)
	}
	if _, err := s.c.Client.CoreV1().PersistentVolumeClaims(s.ns).Create(s.ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := s.waitPVC(t, name, 2*time.Minute, "Bound", func(p *corev1.PersistentVolumeClaim) bool {
		return p.Status.Phase == corev1.ClaimBound
	})
	return p.Spec.VolumeName
}

// podWithClaim runs a busybox pod with the claim mounted at /data and waits until it is
// Ready; the namespace's deletion removes it.
func (s *scenarioEnv) podWithClaim(t *testing.T, name, claim string) {
	t.Helper()
	pod := busyboxPod(name, "echo hello > /data/hello && sleep 3600")
	pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
	}}}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	if _, err := s.c.Client.CoreV1().Pods(s.ns).Create(s.ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, err := s.c.Kubectl(t, "-n", s.ns, "wait", "--for=condition=Ready", "pod/"+name, "--timeout=120s"); err != nil {
		desc, _ := s.c.Kubectl(t, "-n", s.ns, "describe", "pod", name)
		t.Fatalf("%v\n%s\n%s", err, out, desc)
	}
}

func (s *scenarioEnv) df(t *testing.T, pod string) string {
	t.Helper()
	out, err := s.c.Kubectl(t, "-n", s.ns, "exec", pod, "--", "df", "-k", "/data")
	if err != nil {
		return fmt.Sprintf("(df: %v)", err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return strings.Join(strings.Fields(lines[len(lines)-1]), " ")
}

func (s *scenarioEnv) resize(t *testing.T, name, size string) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"resources":{"requests":{"storage":%q}}}}`, size)
	if _, err := s.c.Client.CoreV1().PersistentVolumeClaims(s.ns).Patch(s.ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("resizing %s to %s: %v", name, size, err)
	}
}

func (s *scenarioEnv) setClass(t *testing.T, name, class string) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"volumeAttributesClassName":%q}}`, class)
	if _, err := s.c.Client.CoreV1().PersistentVolumeClaims(s.ns).Patch(s.ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("setting the class of %s to %s: %v", name, class, err)
	}
}

// vac creates a VolumeAttributesClass of csi-driver-host-path, deleted at the end.
func (s *scenarioEnv) vac(t *testing.T, name string, params map[string]string) string {
	t.Helper()
	v := &storagev1.VolumeAttributesClass{ObjectMeta: metav1.ObjectMeta{Name: name}, DriverName: "hostpath.csi.k8s.io", Parameters: params}
	if _, err := s.c.Client.StorageV1().VolumeAttributesClasses().Create(s.ctx, v, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A class in use by a PVC is kept (finalizer) until the namespace's PVCs are gone.
		_ = s.c.Client.StorageV1().VolumeAttributesClasses().Delete(s.ctx, name, metav1.DeleteOptions{})
	})
	return name
}

// waitClass waits until the PVC's current class is class with no modification left, and
// checks that the PV names it too.
func (s *scenarioEnv) waitClass(t *testing.T, name, pv, class string) {
	t.Helper()
	s.waitPVC(t, name, time.Minute, "current class "+class+", no modifyVolumeStatus", func(p *corev1.PersistentVolumeClaim) bool {
		return scenDeref(p.Status.CurrentVolumeAttributesClassName) == class && p.Status.ModifyVolumeStatus == nil
	})
	v, err := s.c.Client.CoreV1().PersistentVolumes().Get(s.ctx, pv, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := scenDeref(v.Spec.VolumeAttributesClassName); got != class {
		t.Errorf("PV %s names class %q, want %q", pv, got, class)
	}
}

// waitPVC polls the PVC until ok, or fails the test with its last status and events.
func (s *scenarioEnv) waitPVC(t *testing.T, name string, timeout time.Duration, desc string, ok func(*corev1.PersistentVolumeClaim) bool) *corev1.PersistentVolumeClaim {
	t.Helper()
	var last *corev1.PersistentVolumeClaim
	start := time.Now()
	err := wait.PollUntilContextTimeout(s.ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := s.c.Client.CoreV1().PersistentVolumeClaims(s.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = p
		return ok(p), nil
	})
	if err != nil {
		logs, _ := s.c.Kubectl(t, "logs", "csi-hostpathplugin-0", "-c", "csi-resizer", "--tail=20")
		t.Fatalf("PVC %s: not %s within %s: %s\nevents:\n%s\nour resizer's log:\n%s", name, desc, timeout, pvcStatusString(last), s.events(t, name), logs)
	}
	t.Logf("PVC %s: %s after %s", name, desc, time.Since(start).Round(100*time.Millisecond))
	return last
}

func (s *scenarioEnv) events(t *testing.T, name string) string {
	t.Helper()
	out, _ := s.c.Kubectl(t, "-n", s.ns, "get", "events", "--field-selector", "involvedObject.name="+name,
		"--sort-by=.lastTimestamp", "-o", "custom-columns=REASON:.reason,FROM:.source.component,MESSAGE:.message")
	return out
}

// expectEvents checks the PVC has events with each reason (events arrive asynchronously:
// polled).
func (s *scenarioEnv) expectEvents(t *testing.T, name string, reasons ...string) {
	t.Helper()
	var missing []string
	_ = wait.PollUntilContextTimeout(s.ctx, 500*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, err := s.c.Client.CoreV1().Events(s.ns).List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("involvedObject.name", name).String()})
		if err != nil {
			return false, nil
		}
		missing = nil
		for _, r := range reasons {
			found := false
			for _, e := range evs.Items {
				found = found || e.Reason == r
			}
			if !found {
				missing = append(missing, r)
			}
		}
		return len(missing) == 0, nil
	})
	if len(missing) > 0 {
		t.Errorf("PVC %s: no event %v\n%s", name, missing, s.events(t, name))
	}
}

// expectDone checks the end state of an expansion as KEP-1790 leaves it: capacity and
// allocatedResources the new size, no resize state and no resize condition.
func (s *scenarioEnv) expectDone(t *testing.T, p *corev1.PersistentVolumeClaim, size string) {
	t.Helper()
	t.Logf("PVC %s at the end: %s", p.Name, pvcStatusString(p))
	if !storageIs(p.Status.Capacity, size) || !storageIs(p.Status.AllocatedResources, size) {
		t.Errorf("PVC %s: capacity %s, allocatedResources %s; want both %s", p.Name, storageOf(p.Status.Capacity), storageOf(p.Status.AllocatedResources), size)
	}
	if len(p.Status.AllocatedResourceStatuses) != 0 {
		t.Errorf("PVC %s: allocatedResourceStatuses %v left", p.Name, p.Status.AllocatedResourceStatuses)
	}
	if len(p.Status.Conditions) != 0 {
		t.Errorf("PVC %s: conditions %v left", p.Name, pvcConditionTypes(p))
	}
}

func (s *scenarioEnv) expectPV(t *testing.T, pv, size string) {
	t.Helper()
	v, err := s.c.Client.CoreV1().PersistentVolumes().Get(s.ctx, pv, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !storageIs(v.Spec.Capacity, size) {
		t.Errorf("PV %s: capacity %s, want %s", pv, storageOf(v.Spec.Capacity), size)
	}
}

// expectNodeExpandCall checks, in the driver's log, that the node step reached the driver: a
// NodeExpandVolume of the PV's volume with the new size. Only the kubelet makes that call.
func (s *scenarioEnv) expectNodeExpandCall(t *testing.T, pv, size string) {
	t.Helper()
	q := resource.MustParse(size)
	if !s.driverCalled(t, "NodeExpandVolume", s.handle(t, pv), fmt.Sprintf(`"required_bytes":%d`, q.Value()), 20*time.Second) {
		t.Errorf("no NodeExpandVolume of PV %s to %s in the driver's log", pv, size)
	}
}

func (s *scenarioEnv) handle(t *testing.T, pv string) string {
	t.Helper()
	v, err := s.c.Client.CoreV1().PersistentVolumes().Get(s.ctx, pv, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return v.Spec.CSI.VolumeHandle
}

// driverCalled reports whether the driver's log (at -v=5 it logs every call with its request
// and answer, one line) has a call of method for the volume handle with want in it, waiting
// up to timeout for it to appear.
func (s *scenarioEnv) driverCalled(t *testing.T, method, handle, want string, timeout time.Duration) bool {
	t.Helper()
	var found bool
	_ = wait.PollUntilContextTimeout(s.ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		logs, err := s.c.Kubectl(t, "logs", "csi-hostpathplugin-0", "-c", "hostpath")
		if err != nil {
			return false, nil
		}
		for _, l := range strings.Split(logs, "\n") {
			if strings.Contains(l, `"Method":"/csi.v1.`) && strings.Contains(l, "/"+method+`"`) &&
				strings.Contains(l, handle) && strings.Contains(l, want) {
				found = true
			}
		}
		return found, nil
	})
	return found
}

// scenarioWatch records every status a PVC goes through, and which field managers wrote it.
type scenarioWatch struct {
	stopCh chan struct{}
	done   chan struct{}
	mu     sync.Mutex
	steps  []scenarioStep
}

type scenarioStep struct {
	// stateOwners and capacityOwners own the storage entries of allocatedResourceStatuses and
	// capacity.
	stateOwners, capacityOwners []string
	at                          time.Duration
	capacity, allocated         string
	state                       corev1.ClaimResourceStatus
	conds                       []string
	writers                     []string
}

func (st scenarioStep) hasCond(c corev1.PersistentVolumeClaimConditionType) bool {
	return scenContains(st.conds, string(c))
}

func (st scenarioStep) String() string {
	state := string(st.state)
	if state == "" {
		state = "-"
	}
	return fmt.Sprintf("  +%-6s capacity %-4s (owner %v) allocated %-4s state %-27s (owner %v) conditions %v; written by %v",
		st.at.Round(100*time.Millisecond), st.capacity, st.capacityOwners, st.allocated, state, st.stateOwners, st.conds, st.writers)
}

// watchPVC starts recording the PVC's statuses; stop ends the watch and returns them.
func (s *scenarioEnv) watchPVC(t *testing.T, name string) *scenarioWatch {
	t.Helper()
	w, err := s.c.Client.CoreV1().PersistentVolumeClaims(s.ns).Watch(s.ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	if err != nil {
		t.Fatal(err)
	}
	pw := &scenarioWatch{stopCh: make(chan struct{}), done: make(chan struct{})}
	begin := time.Now()
	go func() {
		defer close(pw.done)
		defer w.Stop()
		var prev *corev1.PersistentVolumeClaim
		for {
			select {
			case <-pw.stopCh:
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				p, isPVC := ev.Object.(*corev1.PersistentVolumeClaim)
				if !isPVC || ev.Type == watch.Deleted {
					continue
				}
				st := scenarioStep{at: time.Since(begin), capacity: storageOf(p.Status.Capacity), allocated: storageOf(p.Status.AllocatedResources),
					state: pvcResizeState(p), conds: pvcConditionTypes(p), writers: statusWriters(prev, p),
					stateOwners: storageOwners(p, "allocatedResourceStatuses"), capacityOwners: storageOwners(p, "capacity")}
				prev = p
				pw.mu.Lock()
				pw.steps = append(pw.steps, st)
				pw.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { pw.stop() })
	return pw
}

func (pw *scenarioWatch) stop() []scenarioStep {
	select {
	case <-pw.stopCh:
	default:
		close(pw.stopCh)
	}
	<-pw.done
	pw.mu.Lock()
	defer pw.mu.Unlock()
	return append([]scenarioStep(nil), pw.steps...)
}

// statusWriters names the field managers that wrote the status between two versions of a PVC: those
// whose entry got a new time. The time has a resolution of one second, so a second write of
// the same manager within it shows no one; only a hint for the log, storageOwners is the proof.
func statusWriters(prev, cur *corev1.PersistentVolumeClaim) []string {
	if prev == nil {
		return []string{"(first seen)"}
	}
	old := map[string]metav1.ManagedFieldsEntry{}
	for _, m := range prev.ManagedFields {
		old[m.Manager+"/"+m.Subresource] = m
	}
	var out []string
	for _, m := range cur.ManagedFields {
		if o, seen := old[m.Manager+"/"+m.Subresource]; m.Subresource == "status" && (!seen || !o.Time.Equal(m.Time)) {
			out = append(out, m.Manager)
		}
	}
	sort.Strings(out)
	return out
}

// storageOwners names the field managers owning the storage entry of a map in a PVC's status
// (f:status.f:<field>.f:storage; the map itself, ".", may stay its creator's): with Update
// operations, the last to change its value.
func storageOwners(p *corev1.PersistentVolumeClaim, field string) []string {
	var out []string
	for _, m := range p.ManagedFields {
		if m.FieldsV1 == nil {
			continue
		}
		var set map[string]map[string]map[string]any
		if json.Unmarshal(m.FieldsV1.Raw, &set) != nil {
			continue
		}
		if _, ok := set["f:status"]["f:"+field]["f:storage"]; ok {
			out = append(out, m.Manager)
		}
	}
	sort.Strings(out)
	return out
}

func pvcResizeState(p *corev1.PersistentVolumeClaim) corev1.ClaimResourceStatus {
	return p.Status.AllocatedResourceStatuses[corev1.ResourceStorage]
}

func pvcCondition(p *corev1.PersistentVolumeClaim, typ corev1.PersistentVolumeClaimConditionType) *corev1.PersistentVolumeClaimCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == typ {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

func pvcHasCondition(p *corev1.PersistentVolumeClaim, typ corev1.PersistentVolumeClaimConditionType) bool {
	return pvcCondition(p, typ) != nil
}

func pvcConditionTypes(p *corev1.PersistentVolumeClaim) []string {
	var out []string
	for _, c := range p.Status.Conditions {
		out = append(out, string(c.Type))
	}
	return out
}

func pvcStatusString(p *corev1.PersistentVolumeClaim) string {
	if p == nil {
		return "(never read)"
	}
	return fmt.Sprintf("phase %s, capacity %s, allocatedResources %s, allocatedResourceStatuses %v, conditions %v, currentVolumeAttributesClassName %q, modifyVolumeStatus %+v",
		p.Status.Phase, storageOf(p.Status.Capacity), storageOf(p.Status.AllocatedResources), p.Status.AllocatedResourceStatuses,
		pvcConditionTypes(p), scenDeref(p.Status.CurrentVolumeAttributesClassName), p.Status.ModifyVolumeStatus)
}

func storageOf(l corev1.ResourceList) string {
	q, ok := l[corev1.ResourceStorage]
	if !ok {
		return "-"
	}
	return q.String()
}

func storageIs(l corev1.ResourceList, want string) bool {
	q, ok := l[corev1.ResourceStorage]
	return ok && q.Cmp(resource.MustParse(want)) == 0
}

func scenContains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

func scenDeref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
