// Package scenario is the common ground of the sidecar's integration tests, e2e suite and
// benchmarks: a real control plane, a CSI driver process, the csi-resizer binary running with
// the ServiceAccount and RBAC shipped in deploy/kubernetes/rbac, and helpers that read and change
// PVCs the way a user would.
package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/csi-resizer/csi-resizer/test/framework"
)

// Options shape an Env.
type Options struct {
	Cluster framework.ClusterOptions
	Mock    framework.MockDriverOptions
	// ResizerArgs are extra csi-resizer flags.
	ResizerArgs []string
	// NoResizer: the test starts the resizer itself (Env.StartResizer).
	NoResizer bool
	// AdminResizer runs the resizer as cluster admin instead of with the shipped RBAC (only
	// for benchmarks that must not measure RBAC; tests never use it).
	AdminResizer bool
	// MockDriver runs the mock driver even when E2E_DRIVER_CMD or E2E_DRIVER_ENDPOINT name a
	// real one. Tests that inject faults (Driver.SetFaults) or count calls (Driver.Calls) need
	// it: on an external driver those skip the test, so an exported E2E_DRIVER_* would silently
	// turn them into no-ops. Asking for a mock shape or faults in Mock implies it.
	MockDriver bool
}

// needsMock reports whether opts only make sense with the mock driver.
func (o Options) needsMock() bool {
	m := o.Mock
	return o.MockDriver || m.Name != "" || m.NodeOnly || m.NodeExpansionRequired || m.OfflineExpansion ||
		m.DisableAttach || m.ModifyVolume || m.ModifyOnly || len(m.Faults) > 0 || len(m.ExtraArgs) > 0
}

// Env is one running test environment.
type Env struct {
	Ctx          context.Context
	Cluster      *framework.Cluster
	Client       kubernetes.Interface
	Driver       *framework.Driver
	Namespace    string
	StorageClass string
	// Kubeconfig authenticates as the csi-resizer ServiceAccount bound to the shipped RBAC.
	Kubeconfig string
	Resizer    *framework.Process
	opts       Options
	restarts   apiserverRestarts
}

// Start brings up a control plane, the driver (the mock, or the one named by E2E_DRIVER_*),
// the shipped RBAC and, unless NoResizer, the resizer.
func Start(t testing.TB, opts Options) *Env {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cluster := framework.StartCluster(t, opts.Cluster)
	e := &Env{Ctx: ctx, Cluster: cluster, Client: cluster.Client, opts: opts}
	if opts.needsMock() {
		e.Driver = framework.StartMockDriver(t, opts.Mock)
	} else {
		e.Driver = framework.DriverFromEnv(t, opts.Mock)
	}
	e.Namespace = framework.CreateNamespace(t, ctx, e.Client, "resize")
	e.StorageClass = "expandable-" + e.Namespace
	framework.EnsureStorageClass(t, ctx, e.Client, e.StorageClass, e.Driver.Name)
	e.Kubeconfig = cluster.Kubeconfig
	if !opts.AdminResizer {
		e.Kubeconfig = ApplyShippedRBAC(t, cluster, e.Namespace)
	}
	if !opts.NoResizer {
		e.Resizer = e.StartResizer(t)
	}
	return e
}

// ApplyShippedRBAC applies deploy/kubernetes/rbac into namespace ns (through a kustomization
// that sets the namespace, as a user would) and returns a kubeconfig for its ServiceAccount.
func ApplyShippedRBAC(t testing.TB, cluster *framework.Cluster, ns string) string {
	t.Helper()
	rendered := RenderInNamespace(t, cluster, filepath.Join("deploy", "kubernetes", "rbac"), ns)
	if out, err := cluster.KubectlWithInput(t, rendered, "apply", "-f", "-"); err != nil {
		t.Fatalf("apply the csi-resizer RBAC: %v\n%s", err, out)
	}
	return cluster.ServiceAccountKubeconfig(t, ns, "csi-resizer")
}

// RenderInNamespace renders the kustomize base at base (relative to the repository root)
// through a kustomization that sets namespace ns, the way a user installs it.
func RenderInNamespace(t testing.TB, cluster *framework.Cluster, base, ns string) string {
	t.Helper()
	return renderInNamespace(t, cluster, ns, base)
}

// ApplyShippedSecretsRBAC applies deploy/kubernetes/rbac with its optional component
// controller-expand-secrets into namespace ns, as a user whose StorageClass names
// controller-expand or controller-modify secrets installs them (the component binds the base's
// ServiceAccount, so it is rendered with the base; applying the base again changes nothing).
func ApplyShippedSecretsRBAC(t testing.TB, cluster *framework.Cluster, ns string) {
	t.Helper()
	rbac := filepath.Join("deploy", "kubernetes", "rbac")
	rendered := renderInNamespace(t, cluster, ns, rbac, filepath.Join(rbac, "controller-expand-secrets"))
	if out, err := cluster.KubectlWithInput(t, rendered, "apply", "-f", "-"); err != nil {
		t.Fatalf("apply the csi-resizer RBAC with controller-expand-secrets: %v\n%s", err, out)
	}
}

// renderInNamespace renders a kustomization that sets namespace ns over the base at base and
// the components (paths relative to the repository root).
func renderInNamespace(t testing.TB, cluster *framework.Cluster, ns, base string, components ...string) string {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rel := func(path string) string {
		r, err := filepath.Rel(dir, filepath.Join(root, path))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	k := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: %s\nresources:\n- %s\n", ns, rel(base))
	if len(components) > 0 {
		k += "components:\n"
		for _, c := range components {
			k += "- " + rel(c) + "\n"
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	rendered, err := cluster.Kubectl(t, "kustomize", dir)
	if err != nil {
		t.Fatalf("kustomize %s %v: %v", base, components, err)
	}
	return rendered
}

// StartResizer starts one csi-resizer process with the env's credentials, the options' extra
// flags and then args, and waits until it serves metrics. When the test ends, a "forbidden"
// answer of the apiserver in its log fails the test (see FailOnForbidden): the resizer runs with
// the shipped RBAC, and a missing permission must not pass unnoticed because the resize that
// needed it happened to succeed on a retry or was not asserted on.
func (e *Env) StartResizer(t testing.TB, args ...string) *framework.Process {
	t.Helper()
	all := append([]string{"--leader-election-namespace=" + e.Namespace}, e.opts.ResizerArgs...)
	all = append(all, args...)
	p := framework.StartResizer(t, e.Cluster, e.Kubeconfig, e.Driver, all...)
	p.WaitHTTP(t, "/metrics", 90*time.Second)
	e.failOnForbidden(t, p)
	return p
}

// NewClaim creates a volume of size on the driver and a bound PVC/PV pair for it.
func (e *Env) NewClaim(t testing.TB, name, size string) (*v1.PersistentVolumeClaim, *v1.PersistentVolume) {
	t.Helper()
	q := resource.MustParse(size)
	id, err := e.Driver.CreateVolume(e.Ctx, e.Namespace+"-"+name, q.Value())
	if err != nil {
		t.Fatalf("creating the volume of %s: %v", name, err)
	}
	return framework.CreateBoundClaim(t, e.Ctx, e.Client, e.Namespace, name, e.Driver.Name, id, size, e.StorageClass)
}

// SetRequest changes the PVC's storage request, as `kubectl patch` would.
func (e *Env) SetRequest(t testing.TB, name, size string) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"resources": map[string]any{"requests": map[string]string{"storage": size}}}})
	if _, err := e.Client.CoreV1().PersistentVolumeClaims(e.Namespace).Patch(e.Ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("setting the request of %s to %s: %v", name, size, err)
	}
}

// PVC reads a PVC from the API.
func (e *Env) PVC(t testing.TB, name string) *v1.PersistentVolumeClaim {
	t.Helper()
	pvc, err := e.Client.CoreV1().PersistentVolumeClaims(e.Namespace).Get(e.Ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get PVC %s: %v", name, err)
	}
	return pvc
}

// PV reads a PV from the API.
func (e *Env) PV(t testing.TB, name string) *v1.PersistentVolume {
	t.Helper()
	pv, err := e.Client.CoreV1().PersistentVolumes().Get(e.Ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get PV %s: %v", name, err)
	}
	return pv
}

// WaitClaim polls the PVC until cond holds.
func (e *Env) WaitClaim(t testing.TB, name string, timeout time.Duration, cond func(*v1.PersistentVolumeClaim) (bool, string)) *v1.PersistentVolumeClaim {
	t.Helper()
	var last *v1.PersistentVolumeClaim
	framework.Eventually(t, timeout, func() (bool, string) {
		pvc, err := e.Client.CoreV1().PersistentVolumeClaims(e.Namespace).Get(e.Ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		last = pvc
		ok, why := cond(pvc)
		return ok, why + "; PVC: " + Describe(pvc)
	})
	return last
}

// Events lists the events of a PVC with the given reason ("" = all), emitted by the resizer.
func (e *Env) Events(t testing.TB, claim, reason string) []v1.Event {
	t.Helper()
	return e.eventsOn(t, "PersistentVolumeClaim", claim, reason, func(ev *v1.Event) bool {
		return strings.HasPrefix(ev.Source.Component, "external-resizer")
	})
}

// eventsOn lists the events on one object of the namespace with the given reason ("" = all)
// whose source passes from, oldest first.
func (e *Env) eventsOn(t testing.TB, kind, name, reason string, from func(*v1.Event) bool) []v1.Event {
	t.Helper()
	list, err := e.Client.CoreV1().Events(e.Namespace).List(e.Ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list events: %v", err)
	}
	var out []v1.Event
	for i := range list.Items {
		ev := &list.Items[i]
		if ev.InvolvedObject.Kind != kind || ev.InvolvedObject.Name != name || !from(ev) {
			continue
		}
		if reason == "" || ev.Reason == reason {
			out = append(out, *ev)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].FirstTimestamp.Before(&out[j].FirstTimestamp) })
	return out
}

// WaitEvent polls until the resizer has emitted an event with reason on the claim.
func (e *Env) WaitEvent(t testing.TB, claim, reason string, timeout time.Duration) v1.Event {
	t.Helper()
	var got v1.Event
	framework.Eventually(t, timeout, func() (bool, string) {
		evs := e.Events(t, claim, reason)
		if len(evs) == 0 {
			return false, fmt.Sprintf("no %s event on %s yet; events: %s", reason, claim, reasons(e.Events(t, claim, "")))
		}
		got = evs[len(evs)-1]
		return true, ""
	})
	return got
}

func reasons(evs []v1.Event) string {
	var r []string
	for _, e := range evs {
		r = append(r, e.Reason+": "+e.Message)
	}
	return "[" + strings.Join(r, " | ") + "]"
}

// Describe renders what a test cares about in a PVC: request, capacity, allocated size, state,
// the VolumeAttributesClass fields when there are any, and conditions.
func Describe(pvc *v1.PersistentVolumeClaim) string {
	spec := pvc.Spec.Resources.Requests[v1.ResourceStorage]
	capacity := pvc.Status.Capacity[v1.ResourceStorage]
	alloc := "-"
	if a, ok := pvc.Status.AllocatedResources[v1.ResourceStorage]; ok {
		alloc = a.String()
	}
	state := string(pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage])
	if state == "" {
		state = "-"
	}
	var conds []string
	for _, c := range pvc.Status.Conditions {
		conds = append(conds, fmt.Sprintf("%s(%s: %s)", c.Type, c.Reason, c.Message))
	}
	return fmt.Sprintf("request=%s capacity=%s allocated=%s state=%s%s conditions=[%s]", spec.String(), capacity.String(), alloc, state, describeClass(pvc), strings.Join(conds, ", "))
}

// Storage returns a PVC's storage quantities: request, capacity, allocated (zero if absent).
func Storage(pvc *v1.PersistentVolumeClaim) (request, capacity, allocated resource.Quantity) {
	return pvc.Spec.Resources.Requests[v1.ResourceStorage], pvc.Status.Capacity[v1.ResourceStorage], pvc.Status.AllocatedResources[v1.ResourceStorage]
}

// Is reports whether q equals size.
func Is(q resource.Quantity, size string) bool {
	return q.Cmp(resource.MustParse(size)) == 0
}

// Condition returns the PVC condition of type ct, or nil.
func Condition(pvc *v1.PersistentVolumeClaim, ct v1.PersistentVolumeClaimConditionType) *v1.PersistentVolumeClaimCondition {
	for i := range pvc.Status.Conditions {
		if pvc.Status.Conditions[i].Type == ct {
			return &pvc.Status.Conditions[i]
		}
	}
	return nil
}

// State returns allocatedResourceStatuses.storage.
func State(pvc *v1.PersistentVolumeClaim) v1.ClaimResourceStatus {
	return pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage]
}

// Done reports whether the PVC's expansion finished at size: capacity = size, no state left.
func Done(size string) func(*v1.PersistentVolumeClaim) (bool, string) {
	return func(pvc *v1.PersistentVolumeClaim) (bool, string) {
		_, capacity, _ := Storage(pvc)
		return Is(capacity, size) && State(pvc) == "", "want capacity " + size + " and no resize state"
	}
}

// InState reports whether the PVC is in state.
func InState(state v1.ClaimResourceStatus) func(*v1.PersistentVolumeClaim) (bool, string) {
	return func(pvc *v1.PersistentVolumeClaim) (bool, string) {
		return State(pvc) == state, "want state " + string(state)
	}
}

// Scrape returns the text of a process's /metrics.
func Scrape(t testing.TB, p *framework.Process) string {
	t.Helper()
	resp, err := http.Get("http://" + p.HTTPAddr + "/metrics")
	if err != nil {
		t.Fatalf("scraping %s: %v", p.Name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scraping %s: status %d, %v", p.Name, resp.StatusCode, err)
	}
	return string(b)
}

// MetricValue sums the samples of metric whose label set contains every labels entry
// (`name="value"` strings), from a /metrics text.
func MetricValue(body, metric string, labels ...string) float64 {
	var sum float64
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, metric+"{") && !strings.HasPrefix(line, metric+" ") {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(line, l) {
				ok = false
			}
		}
		if !ok {
			continue
		}
		var v float64
		if _, err := fmt.Sscanf(line[strings.LastIndex(line, " ")+1:], "%g", &v); err == nil {
			sum += v
		}
	}
	return sum
}

// FailNodeExpansion plays the kubelet whose node expansion of claim name failed for good:
// NodeResizeInfeasible with a NodeResizeError condition.
func (e *Env) FailNodeExpansion(t testing.TB, name string) {
	t.Helper()
	pvc := e.PVC(t, name)
	pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage] = v1.PersistentVolumeClaimNodeResizeInfeasible
	pvc.Status.Conditions = append(pvc.Status.Conditions, v1.PersistentVolumeClaimCondition{
		Type: v1.PersistentVolumeClaimNodeResizeError, Status: v1.ConditionTrue, Reason: "NodeResizeFailed", Message: "filesystem too small to grow", LastTransitionTime: metav1.Now(),
	})
	if _, err := e.Client.CoreV1().PersistentVolumeClaims(e.Namespace).UpdateStatus(e.Ctx, pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("playing the kubelet's failure for %s: %v", name, err)
	}
}

// FinishNodeExpansion plays the kubelet for a PVC waiting in NodeResizePending (there is no
// kubelet here): capacity = allocated size, state and FileSystemResizePending cleared. A PVC in
// any other state is left alone.
func (e *Env) FinishNodeExpansion(t testing.TB, name string) {
	t.Helper()
	pvc := e.PVC(t, name)
	if State(pvc) != v1.PersistentVolumeClaimNodeResizePending {
		return
	}
	pvc.Status.Capacity[v1.ResourceStorage] = pvc.Status.AllocatedResources[v1.ResourceStorage]
	delete(pvc.Status.AllocatedResourceStatuses, v1.ResourceStorage)
	var conds []v1.PersistentVolumeClaimCondition
	for _, c := range pvc.Status.Conditions {
		if c.Type != v1.PersistentVolumeClaimFileSystemResizePending {
			conds = append(conds, c)
		}
	}
	pvc.Status.Conditions = conds
	if _, err := e.Client.CoreV1().PersistentVolumeClaims(e.Namespace).UpdateStatus(e.Ctx, pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("playing the kubelet for %s: %v", name, err)
	}
}
