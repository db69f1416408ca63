//go:build integration

package integration

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/csi-resizer/csi-resizer/test/framework"
)

// helmTemplateChart is `helm template release deploy/helm/chart --namespace namespace --set ...`.
func helmTemplateChart(t *testing.T, helm, root, chart, release, namespace string, set ...string) string {
	t.Helper()
	args := []string{"template", release, filepath.Join(root, "deploy", "helm", chart), "--namespace", namespace}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := exec.Command(helm, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestManifestsHelmChartVolumeAutoscaler sends the volume-autoscaler chart's renders through the
// real kube-apiserver (server-side dry-run of the defaults and of the values that change the
// objects), then applies two installs for real, the kustomize base's names (release
// volume-autoscaler in csi-resizer-system) and another release in another namespace, and asks
// the authorizer, as each install's ServiceAccount, what it may do: the kubelet's stats, never
// the node proxy, and no more than deploy/kubernetes/volume-autoscaler grants
// (TestManifestsRBACEffective asks the same of the kustomize base).
func TestManifestsHelmChartVolumeAutoscaler(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	helm := helmBinary(t, root)
	cluster := framework.StartCluster(t, framework.ClusterOptions{})
	for _, ns := range []string{"csi-resizer-system", "ops"} {
		kubectl(t, cluster, "create", "namespace", ns)
	}

	def := helmTemplateChart(t, helm, root, "volume-autoscaler", "volume-autoscaler", "csi-resizer-system")
	for name, manifests := range map[string]string{
		"default values":                     def,
		"leaderElection.enabled=false":       helmTemplateChart(t, helm, root, "volume-autoscaler", "volume-autoscaler", "csi-resizer-system", "leaderElection.enabled=false"),
		"kubelet.insecureSkipTLSVerify=true": helmTemplateChart(t, helm, root, "volume-autoscaler", "volume-autoscaler", "csi-resizer-system", "kubelet.insecureSkipTLSVerify=true"),
		"a Secret CA and scheduling values": helmTemplateChart(t, helm, root, "volume-autoscaler", "volume-autoscaler", "csi-resizer-system",
			"kubelet.certificateAuthority.secret=kubelet-ca", "nodeSelector.role=infra", "tolerations[0].key=infra", "tolerations[0].operator=Exists",
			"podSecurityContext.fsGroup=65532", "replicas=2", "defaults.limit=100Gi", "dryRun=true"),
	} {
		applied := strings.Fields(dryRun(t, cluster, manifests))
		if want := total(countKinds(manifests)); len(applied) != want {
			t.Errorf("%s: dry-run applied %d objects, want %d: %v", name, len(applied), want, applied)
		}
		t.Logf("%s: server-side dry-run accepted: %s", name, strings.Join(applied, " "))
	}
	kubectlInput(t, cluster, def, "apply", "-f", "-")
	kubectlInput(t, cluster, helmTemplateChart(t, helm, root, "volume-autoscaler", "scaler", "ops"), "apply", "-f", "-")

	for _, c := range []struct{ as, leaseNS string }{
		{"system:serviceaccount:csi-resizer-system:volume-autoscaler", "csi-resizer-system"},
		{"system:serviceaccount:ops:scaler-volume-autoscaler", "ops"},
	} {
		for _, q := range []struct {
			ns, verb, resource, subresource string
			want                            bool
		}{
			{"", "get", "nodes", "stats", true},
			{"", "get", "nodes", "proxy", false},
			{"", "create", "nodes", "proxy", false},
			{"", "watch", "nodes", "", true},
			{"", "get", "nodes", "", false},
			{"", "patch", "nodes", "", false},
			{"app", "watch", "pods", "", true},
			{"app", "get", "pods", "", false},
			{"app", "create", "pods", "exec", false},
			{"app", "watch", "persistentvolumeclaims", "", true},
			{"app", "patch", "persistentvolumeclaims", "", true},
			{"app", "update", "persistentvolumeclaims", "", false},
			{"app", "patch", "persistentvolumeclaims", "status", false},
			{"app", "delete", "persistentvolumeclaims", "", false},
			{"", "watch", "storageclasses.storage.k8s.io", "", true},
			{"", "patch", "storageclasses.storage.k8s.io", "", false},
			{"app", "create", "events", "", true},
			{"app", "get", "secrets", "", false},
			{"app", "get", "configmaps", "", false},
			{"app", "patch", "statefulsets.apps", "", false},
			{c.leaseNS, "update", "leases.coordination.k8s.io", "", true},
			{"elsewhere", "update", "leases.coordination.k8s.io", "", false},
		} {
			args := []string{"auth", "can-i", q.verb, q.resource, "--as=" + c.as}
			if q.subresource != "" {
				args = append(args, "--subresource="+q.subresource)
			}
			if q.ns != "" {
				args = append(args, "--namespace="+q.ns)
			}
			out, _ := cluster.Kubectl(t, args...) // exits 1 for "no": read the answer
			if got := strings.TrimSpace(out); got != map[bool]string{true: "yes", false: "no"}[q.want] {
				t.Errorf("%s may %s %s/%s in %q: %q, want %v", c.as, q.verb, q.resource, q.subresource, q.ns, got, q.want)
			}
		}
	}
}
