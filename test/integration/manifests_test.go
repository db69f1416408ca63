//go:build integration

package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// manifestRender is one render of deploy/kubernetes: a kustomization of the repository, or a
// wrapper kustomization written for the test that uses the namespace-agnostic bases the way a
// user does (with `namespace:`), since those bases do not apply on their own.
type manifestRender struct {
	name string
	// dir is a kustomization directory relative to deploy/kubernetes; empty when wrapper is set.
	dir string
	// wrapper is the body of a kustomization.yaml written to a temp dir, with @DEPLOY@ standing
	// for deploy/kubernetes relative to it (kustomize wants relative paths); files are more
	// files for that dir.
	wrapper string
	files   map[string]string
	// want is the number of objects per kind.
	want map[string]int
}

// A stand-in for a CSI driver's controller, to which the generic sidecar component is applied.
const driverController = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: example-csi-controller
spec:
  replicas: 2
  selector:
    matchLabels: {app: example-csi-controller}
  template:
    metadata:
      labels: {app: example-csi-controller}
    spec:
      containers:
      - name: csi-driver
        image: registry.example/example-csi-driver:v1
        args: ["--endpoint=unix:///csi/csi.sock"]
        volumeMounts:
        - {name: socket-dir, mountPath: /csi}
      volumes:
      - name: socket-dir
        emptyDir: {}
`

var manifestRenders = []manifestRender{
	{
		name: "rbac with controller-expand-secrets",
		wrapper: `namespace: csi-driver
resources:
- @DEPLOY@/rbac
components:
- @DEPLOY@/rbac/controller-expand-secrets
`,
		want: map[string]int{"ServiceAccount": 1, "ClusterRole": 2, "ClusterRoleBinding": 2, "Role": 1, "RoleBinding": 1},
	},
	{
		name: "sidecar component on a driver Deployment, with its metrics Service",
		wrapper: `namespace: csi-driver
resources:
- driver-controller.yaml
- @DEPLOY@/monitoring/csi-resizer-service
components:
- @DEPLOY@/sidecar
images:
- name: registry.example/csi-resizer
  newTag: v0.0.0-test
`,
		files: map[string]string{"driver-controller.yaml": driverController},
		want:  map[string]int{"Deployment": 1, "Service": 1},
	},
	{
		name: "sidecar/examples/csi-hostpath",
		dir:  "sidecar/examples/csi-hostpath",
		want: map[string]int{"ServiceAccount": 1, "ClusterRole": 1, "ClusterRoleBinding": 1, "Role": 1, "RoleBinding": 1, "Service": 1, "StatefulSet": 1},
	},
	{
		name: "node-deployment",
		wrapper: `namespace: csi-driver
resources:
- @DEPLOY@/node-deployment
images:
- name: registry.example/csi-resizer
  newTag: v0.0.0-test
`,
		want: map[string]int{"ServiceAccount": 1, "ClusterRole": 2, "ClusterRoleBinding": 2, "DaemonSet": 1},
	},
	{
		name: "statefulset-resizer",
		wrapper: `namespace: csi-resizer-system
resources:
- @DEPLOY@/statefulset-resizer
`,
		want: map[string]int{"ServiceAccount": 1, "ClusterRole": 1, "ClusterRoleBinding": 1, "Role": 2, "RoleBinding": 2, "Deployment": 1, "Service": 1},
	},
	{
		name: "statefulset-resizer with the webhook component",
		wrapper: `namespace: csi-resizer-system
resources:
- @DEPLOY@/statefulset-resizer
components:
- @DEPLOY@/statefulset-resizer/webhook
`,
		// The webhook is its own Deployment with its own ServiceAccount and roles.
		want: map[string]int{"ServiceAccount": 2, "ClusterRole": 2, "ClusterRoleBinding": 2, "Role": 3, "RoleBinding": 3, "Deployment": 2, "Service": 2,
			"MutatingWebhookConfiguration": 1},
	},
	{
		name: "statefulset-resizer with the webhook and policy components",
		wrapper: `namespace: csi-resizer-system
resources:
- @DEPLOY@/statefulset-resizer
components:
- @DEPLOY@/statefulset-resizer/webhook
- @DEPLOY@/statefulset-resizer/policy
`,
		want: map[string]int{"ServiceAccount": 2, "ClusterRole": 2, "ClusterRoleBinding": 2, "Role": 3, "RoleBinding": 3, "Deployment": 2, "Service": 2,
			"MutatingWebhookConfiguration": 1, "ValidatingAdmissionPolicy": 3, "ValidatingAdmissionPolicyBinding": 3},
	},
	{
		name: "volume-autoscaler",
		wrapper: `namespace: csi-resizer-system
resources:
- @DEPLOY@/volume-autoscaler
`,
		want: map[string]int{"ServiceAccount": 1, "ClusterRole": 1, "ClusterRoleBinding": 1, "Role": 1, "RoleBinding": 1, "Deployment": 1, "Service": 1},
	},
	{
		name: "monitoring",
		wrapper: `namespace: monitoring
resources:
- @DEPLOY@/monitoring
`,
		want: map[string]int{"ServiceMonitor": 3, "PrometheusRule": 1},
	},
}

// TestManifestsServerSideDryRun renders every base and overlay of deploy/kubernetes and sends
// the result through `kubectl apply --dry-run=server`: the real kube-apiserver runs defaulting,
// validation and admission on each object (volumeMounts naming existing volumes, named probe
// ports, binding subjects with namespaces, the securityContext combination, ...). The
// ServiceMonitor and PrometheusRule kinds are served by the stand-in CRDs of
// testdata/monitoring-crds.yaml, so the monitoring base is validated too (schema at the top
// level only).
func TestManifestsServerSideDryRun(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	deploy := filepath.Join(root, "deploy", "kubernetes")
	// csi-driver-host-path's driver container is privileged, which kube-apiserver refuses
	// unless allowed (real clusters allow it; the default of the flag is false).
	cluster := framework.StartCluster(t, framework.ClusterOptions{APIServerArgs: []string{"--allow-privileged=true"}})

	kubectl(t, cluster, "apply", "--server-side", "-f", filepath.Join(root, "test", "integration", "testdata", "monitoring-crds.yaml"))
	kubectl(t, cluster, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/servicemonitors.monitoring.coreos.com", "crd/prometheusrules.monitoring.coreos.com")
	for _, ns := range []string{"csi-driver", "csi-resizer-system", "monitoring"} {
		kubectl(t, cluster, "create", "namespace", ns)
	}

	for _, r := range manifestRenders {
		t.Run(r.name, func(t *testing.T) {
			manifests := render(t, cluster, deploy, r)
			if got := countKinds(manifests); !equalCounts(got, r.want) {
				t.Fatalf("render has %v, want %v:\n%s", got, r.want, manifests)
			}
			out := dryRun(t, cluster, manifests)
			applied := strings.Fields(out)
			if want := total(r.want); len(applied) != want {
				t.Errorf("dry-run applied %d objects, want %d:\n%s", len(applied), want, out)
			}
			t.Logf("server-side dry-run accepted: %s", strings.Join(applied, " "))
		})
	}
}

// TestManifestsRBACEffective applies the shipped RBAC for real and asks the authorizer, as each
// ServiceAccount, for what the binaries do and for what they must not be able to do. This
// checks the bindings (subjects, namespaces, roleRefs), which the unit test of the role rules
// (deploy/kubernetes/rbac_test.go) cannot.
func TestManifestsRBACEffective(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	deploy := filepath.Join(root, "deploy", "kubernetes")
	cluster := framework.StartCluster(t, framework.ClusterOptions{})
	for _, ns := range []string{"csi-driver", "csi-resizer-system", "elsewhere"} {
		kubectl(t, cluster, "create", "namespace", ns)
	}
	for _, r := range manifestRenders {
		if r.name != "rbac with controller-expand-secrets" && r.name != "volume-autoscaler" {
			continue
		}
		kubectlInput(t, cluster, render(t, cluster, deploy, r), "apply", "-f", "-")
	}
	// statefulset-resizer's base and webhook component: their ServiceAccounts and RBAC (the
	// configuration, with no webhook running, would only get in the way).
	scenario.ApplyStatefulSetResizerRBAC(t, cluster, "csi-resizer-system")
	// The node-deployment component, bound to the same csi-resizer ServiceAccount (its example
	// DaemonSet is checked by the dry-run: this apiserver refuses privileged pods for real).
	kubectlInput(t, cluster, render(t, cluster, deploy, manifestRender{name: "rbac with node-deployment", wrapper: `namespace: csi-driver
resources:
- @DEPLOY@/rbac
components:
- @DEPLOY@/rbac/node-deployment
`}), "apply", "-f", "-")

	const sidecar = "system:serviceaccount:csi-driver:csi-resizer"
	const controller = "system:serviceaccount:csi-resizer-system:statefulset-resizer"
	const webhook = "system:serviceaccount:csi-resizer-system:statefulset-resizer-webhook"
	const autoscaler = "system:serviceaccount:csi-resizer-system:volume-autoscaler"
	cases := []struct {
		as, ns, verb, resource, subresource string
		want                                bool
	}{
		// csi-resizer sidecar
		{sidecar, "", "watch", "persistentvolumes", "", true},
		{sidecar, "", "patch", "persistentvolumes", "", true},
		{sidecar, "", "update", "persistentvolumes", "", false},
		{sidecar, "", "delete", "persistentvolumes", "", false},
		{sidecar, "app", "watch", "persistentvolumeclaims", "", true},
		{sidecar, "app", "patch", "persistentvolumeclaims", "status", true},
		{sidecar, "app", "update", "persistentvolumeclaims", "status", false},
		{sidecar, "app", "patch", "persistentvolumeclaims", "", false},
		{sidecar, "app", "update", "persistentvolumeclaims", "", false},
		{sidecar, "app", "list", "pods", "", true},
		{sidecar, "app", "delete", "pods", "", false},
		{sidecar, "app", "create", "events", "", true},
		{sidecar, "app", "patch", "events", "", true},
		{sidecar, "app", "get", "secrets", "", true}, // the controller-expand-secrets component
		{sidecar, "app", "list", "secrets", "", false},
		{sidecar, "csi-driver", "get", "leases.coordination.k8s.io", "", true},
		{sidecar, "csi-driver", "create", "leases.coordination.k8s.io", "", true},
		{sidecar, "csi-driver", "update", "leases.coordination.k8s.io", "", true},
		{sidecar, "elsewhere", "update", "leases.coordination.k8s.io", "", false},
		{sidecar, "app", "patch", "statefulsets.apps", "", false},
		{sidecar, "", "list", "volumeattributesclasses.storage.k8s.io", "", true},
		{sidecar, "", "watch", "volumeattributesclasses.storage.k8s.io", "", true},
		{sidecar, "", "create", "volumeattributesclasses.storage.k8s.io", "", false},
		// --node-deployment (rbac/node-deployment): its own Node, read only
		{sidecar, "", "get", "nodes", "", true},
		{sidecar, "", "watch", "nodes", "", true},
		{sidecar, "", "patch", "nodes", "", false},
		{sidecar, "", "patch", "nodes", "status", false},
		// statefulset-resizer
		{controller, "app", "watch", "statefulsets.apps", "", true},
		{controller, "app", "patch", "statefulsets.apps", "", true},
		{controller, "app", "update", "statefulsets.apps", "", false},
		{controller, "app", "delete", "statefulsets.apps", "", true}, // the re-create (--recreate)
		{controller, "app", "create", "statefulsets.apps", "", true},
		// the re-create's records: in statefulset-resizer's own namespace only, so that
		// someone who may create ConfigMaps in "app" cannot forge one
		{controller, "csi-resizer-system", "watch", "configmaps", "", true},
		{controller, "csi-resizer-system", "create", "configmaps", "", true},
		{controller, "csi-resizer-system", "update", "configmaps", "", true},
		{controller, "csi-resizer-system", "delete", "configmaps", "", true},
		{controller, "app", "watch", "configmaps", "", false},
		{controller, "app", "get", "configmaps", "", false},
		{controller, "app", "create", "configmaps", "", false},
		{controller, "", "list", "configmaps", "", false},
		{controller, "", "watch", "namespaces", "", true}, // the namespace opt-in
		{controller, "", "update", "namespaces", "", false},
		{controller, "app", "patch", "persistentvolumeclaims", "", true},
		{controller, "app", "patch", "persistentvolumeclaims", "status", false},
		{controller, "app", "delete", "persistentvolumeclaims", "", false},
		{controller, "app", "watch", "pods", "", true},
		{controller, "app", "get", "pods", "", false}, // informers only: list and watch
		{controller, "app", "get", "persistentvolumeclaims", "", false},
		{controller, "app", "delete", "pods", "", false},
		{controller, "", "watch", "storageclasses.storage.k8s.io", "", true},
		{controller, "", "get", "storageclasses.storage.k8s.io", "", false},
		// whether a StatefulSet's ControllerRevisions were orphaned; read only
		{controller, "", "list", "controllerrevisions.apps", "", true},
		{controller, "app", "delete", "controllerrevisions.apps", "", false},
		// another install's Lease, in any namespace: listed, never written
		{controller, "", "list", "leases.coordination.k8s.io", "", true},
		{controller, "elsewhere", "get", "leases.coordination.k8s.io", "", false},
		{controller, "", "patch", "storageclasses.storage.k8s.io", "", false},
		{controller, "", "patch", "persistentvolumes", "", false},
		{controller, "app", "create", "events", "", true},
		{controller, "app", "get", "secrets", "", false},
		{controller, "csi-resizer-system", "update", "leases.coordination.k8s.io", "", true},
		{controller, "elsewhere", "update", "leases.coordination.k8s.io", "", false},
		// the webhook's certificate and configuration are not the controller's
		{controller, "csi-resizer-system", "get", "secrets/statefulset-resizer-webhook-tls", "", false},
		{controller, "csi-resizer-system", "create", "secrets", "", false},
		{controller, "", "patch", "mutatingwebhookconfigurations.admissionregistration.k8s.io/statefulset-resizer", "", false},
		// statefulset-resizer's webhook, its own ServiceAccount: its certificate Secret, its
		// configuration's CA bundle, and nothing else (it decides from the admission request)
		{webhook, "csi-resizer-system", "get", "secrets/statefulset-resizer-webhook-tls", "", true},
		{webhook, "csi-resizer-system", "update", "secrets/statefulset-resizer-webhook-tls", "", true},
		{webhook, "csi-resizer-system", "create", "secrets", "", true},
		{webhook, "csi-resizer-system", "get", "secrets/other", "", false},
		{webhook, "csi-resizer-system", "list", "secrets", "", false},
		{webhook, "elsewhere", "create", "secrets", "", false},
		{webhook, "", "get", "mutatingwebhookconfigurations.admissionregistration.k8s.io/statefulset-resizer", "", true},
		{webhook, "", "patch", "mutatingwebhookconfigurations.admissionregistration.k8s.io/statefulset-resizer", "", true},
		{webhook, "", "patch", "mutatingwebhookconfigurations.admissionregistration.k8s.io/other", "", false},
		{webhook, "", "list", "mutatingwebhookconfigurations.admissionregistration.k8s.io", "", false},
		{webhook, "", "patch", "validatingwebhookconfigurations.admissionregistration.k8s.io/statefulset-resizer", "", false},
		{webhook, "app", "get", "statefulsets.apps", "", false},
		{webhook, "app", "list", "statefulsets.apps", "", false},
		{webhook, "app", "patch", "statefulsets.apps", "", false},
		{webhook, "app", "update", "statefulsets.apps", "", false},
		{webhook, "app", "create", "statefulsets.apps", "", false},
		{webhook, "app", "delete", "statefulsets.apps", "", false},
		{webhook, "app", "create", "pods", "", false},
		{webhook, "app", "patch", "persistentvolumeclaims", "", false},
		{webhook, "csi-resizer-system", "update", "configmaps", "", false},
		{webhook, "csi-resizer-system", "update", "leases.coordination.k8s.io", "", false},
		{webhook, "app", "create", "events", "", false},
		{webhook, "app", "create", "serviceaccounts", "token", false},
		// volume-autoscaler: the kubelet's stats, never the node proxy
		{autoscaler, "", "get", "nodes", "stats", true},
		{autoscaler, "", "get", "nodes", "proxy", false},
		{autoscaler, "", "create", "nodes", "proxy", false},
		{autoscaler, "", "watch", "nodes", "", true},
		{autoscaler, "", "patch", "nodes", "", false},
		{autoscaler, "app", "watch", "pods", "", true},
		{autoscaler, "app", "create", "pods", "exec", false},
		{autoscaler, "app", "patch", "persistentvolumeclaims", "", true},
		{autoscaler, "app", "patch", "persistentvolumeclaims", "status", false},
		{autoscaler, "app", "delete", "persistentvolumeclaims", "", false},
		{autoscaler, "", "watch", "storageclasses.storage.k8s.io", "", true},
		{autoscaler, "", "patch", "storageclasses.storage.k8s.io", "", false},
		{autoscaler, "app", "create", "events", "", true},
		{autoscaler, "app", "get", "secrets", "", false},
		{autoscaler, "csi-resizer-system", "update", "leases.coordination.k8s.io", "", true},
		{autoscaler, "elsewhere", "update", "leases.coordination.k8s.io", "", false},
		{autoscaler, "app", "patch", "statefulsets.apps", "", false},
	}
	for _, c := range cases {
		args := []string{"auth", "can-i", c.verb, c.resource, "--as=" + c.as}
		if c.subresource != "" {
			args = append(args, "--subresource="+c.subresource)
		}
		if c.ns != "" {
			args = append(args, "--namespace="+c.ns)
		}
		// can-i exits 1 for "no": read the answer, not the exit code.
		out, err := cluster.Kubectl(t, args...)
		answer := strings.TrimSpace(out)
		if answer != "yes" && answer != "no" {
			t.Errorf("kubectl %s: %q, %v", strings.Join(args, " "), out, err)
			continue
		}
		if got := answer == "yes"; got != c.want {
			what := c.resource
			if c.subresource != "" {
				what += "/" + c.subresource
			}
			t.Errorf("%s may %s %s in namespace %q: %v, want %v", c.as, c.verb, what, c.ns, got, c.want)
		}
	}
}

func render(t *testing.T, cluster *framework.Cluster, deploy string, r manifestRender) string {
	t.Helper()
	dir := filepath.Join(deploy, r.dir)
	if r.wrapper != "" {
		dir = t.TempDir()
		rel, err := filepath.Rel(dir, deploy)
		if err != nil {
			t.Fatal(err)
		}
		body := strings.ReplaceAll(r.wrapper, "@DEPLOY@", filepath.ToSlash(rel))
		if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		for name, content := range r.files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	out, err := cluster.Kubectl(t, "kustomize", dir)
	if err != nil {
		t.Fatalf("render %s: %v", r.name, err)
	}
	return out
}

// dryRun applies manifests with --dry-run=server. Right after a CRD is established kubectl's
// discovery may not know its kinds yet, so "no matches for kind" is retried for a while.
func dryRun(t *testing.T, cluster *framework.Cluster, manifests string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := cluster.KubectlWithInput(t, manifests, "apply", "--dry-run=server", "-o", "name", "-f", "-")
		if err == nil {
			return out
		}
		if time.Now().After(deadline) || !strings.Contains(err.Error(), "no matches for kind") {
			t.Fatalf("server-side dry-run rejected the render: %v\n%s\n--- render:\n%s", err, out, manifests)
		}
		time.Sleep(time.Second)
	}
}

func kubectl(t *testing.T, cluster *framework.Cluster, args ...string) string {
	t.Helper()
	out, err := cluster.Kubectl(t, args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return out
}

func kubectlInput(t *testing.T, cluster *framework.Cluster, stdin string, args ...string) string {
	t.Helper()
	out, err := cluster.KubectlWithInput(t, stdin, args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return out
}

var topLevelKind = regexp.MustCompile(`(?m)^kind: (\S+)$`)

func countKinds(manifests string) map[string]int {
	got := map[string]int{}
	for _, m := range topLevelKind.FindAllStringSubmatch(manifests, -1) {
		got[m[1]]++
	}
	return got
}

func equalCounts(a, b map[string]int) bool {
	return fmt.Sprint(sortedCounts(a)) == fmt.Sprint(sortedCounts(b))
}

func sortedCounts(m map[string]int) []string {
	var s []string
	for k, v := range m {
		s = append(s, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(s)
	return s
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// TestMissingRBACRuleIsReported proves the safety net behind scenario 10: the tests run the
// resizer with the shipped RBAC, and FailOnForbidden fails a test whose resizer the apiserver
// refused something. Here the shipped ClusterRole loses one rule, the patch of
// persistentvolumeclaims/status: the resize must not happen (the target is recorded in the
// status before the driver is called, so the driver never hears of it), the refusal must be
// in the resizer's log, and FailOnForbidden, run against a stand-in for the test, must report
// it. With the rule back the same resizer finishes the resize, so the rule was all it lacked.
// The resizer runs without FailOnForbidden on the real test, which would fail on the refusal
// provoked here on purpose.
func TestMissingRBACRuleIsReported(t *testing.T) {
	e := startMock(t, scenario.Options{NoResizer: true})
	_, pv := e.NewClaim(t, "data", "1Gi")

	// The ClusterRole scenario.Start applied from deploy/kubernetes/rbac, minus one rule.
	roles := e.Client.RbacV1().ClusterRoles()
	shipped, err := roles.Get(e.Ctx, "csi-resizer", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	crippled := shipped.DeepCopy()
	crippled.Rules = nil
	for _, r := range shipped.Rules {
		if !slices.Contains(r.Resources, "persistentvolumeclaims/status") {
			crippled.Rules = append(crippled.Rules, r)
		}
	}
	if removed := len(shipped.Rules) - len(crippled.Rules); removed != 1 {
		t.Fatalf("the shipped ClusterRole has %d rules for persistentvolumeclaims/status, want 1: %+v", removed, shipped.Rules)
	}
	if _, err := roles.Update(e.Ctx, crippled, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The authorizer reads roles from its own informer: wait until it has seen the change, or
	// the resizer's first patch could still be let through.
	waitStatusPatchAllowed(t, e, false)

	p := framework.StartResizer(t, e.Cluster, e.Kubeconfig, e.Driver, "--retry-interval-start=200ms", "--retry-interval-max=1s")
	p.WaitHTTP(t, "/metrics", 90*time.Second)
	e.SetRequest(t, "data", "2Gi")
	framework.Eventually(t, resizeTimeout, func() (bool, string) {
		return refusedStatusPatch(p.Log()), "the resizer has not logged the refused status patch yet"
	})
	// Several attempts (200ms..1s backoff) fit in this window; none gets anywhere.
	framework.Consistently(t, 3*time.Second, func() (bool, string) {
		pvc := e.PVC(t, "data")
		_, capacity, alloc := scenario.Storage(pvc)
		pvCap := e.PV(t, pv.Name).Spec.Capacity[corev1.ResourceStorage]
		calls := len(e.Driver.Calls(t, "ControllerExpandVolume"))
		return scenario.State(pvc) == "" && alloc.IsZero() && scenario.Is(capacity, "1Gi") && scenario.Is(pvCap, "1Gi") && calls == 0,
			fmt.Sprintf("want the resize not started: no state, no allocated size, 1Gi, PV 1Gi (%s), no driver call (%d); PVC: %s",
				pvCap.String(), calls, scenario.Describe(pvc))
	})

	// The detector the other tests rely on, on a stand-in that records instead of failing.
	rec := &recordingTB{TB: t}
	scenario.FailOnForbidden(rec, p)
	rec.runCleanups()
	if len(rec.errors) != 1 || !refusedStatusPatch(rec.errors[0]) {
		t.Errorf("FailOnForbidden reported %q, want one error quoting the refused status patch", rec.errors)
	}

	restored, err := roles.Get(e.Ctx, "csi-resizer", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	restored.Rules = shipped.Rules
	if _, err := roles.Update(e.Ctx, restored, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitStatusPatchAllowed(t, e, true)
	e.WaitClaim(t, "data", resizeTimeout, scenario.Done("2Gi"))
}

// refusedStatusPatch reports whether s quotes the apiserver refusing a patch of
// persistentvolumeclaims/status ("... is forbidden: User ... cannot patch resource
// "persistentvolumeclaims/status" ..."; klog escapes the quotes, so they are not matched).
func refusedStatusPatch(s string) bool {
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, "forbidden") && strings.Contains(line, "cannot patch resource") && strings.Contains(line, "persistentvolumeclaims/status") {
			return true
		}
	}
	return false
}

// waitStatusPatchAllowed waits until the authorizer answers allowed to "may the csi-resizer
// ServiceAccount patch persistentvolumeclaims/status in the env's namespace".
func waitStatusPatchAllowed(t *testing.T, e *scenario.Env, allowed bool) {
	t.Helper()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   "system:serviceaccount:" + e.Namespace + ":csi-resizer",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + e.Namespace, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: e.Namespace, Verb: "patch", Resource: "persistentvolumeclaims", Subresource: "status",
		},
	}}
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		got, err := e.Client.AuthorizationV1().SubjectAccessReviews().Create(e.Ctx, sar, metav1.CreateOptions{})
		if err != nil {
			return false, err.Error()
		}
		return got.Status.Allowed == allowed, fmt.Sprintf("status patch allowed: %v, want %v (%s)", got.Status.Allowed, allowed, got.Status.Reason)
	})
}

// recordingTB stands in for the test where a check must be seen failing: it keeps the
// cleanups and errors registered on it, and passes everything else to the real test.
type recordingTB struct {
	testing.TB
	cleanups []func()
	errors   []string
}

func (r *recordingTB) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }

func (r *recordingTB) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func (r *recordingTB) Error(args ...any) { r.errors = append(r.errors, fmt.Sprint(args...)) }

// runCleanups runs the registered cleanups, last first, as testing does.
func (r *recordingTB) runCleanups() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}
