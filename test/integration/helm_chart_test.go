//go:build integration

package integration

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/csi-resizer/csi-resizer/test/framework"
)

// helmBinary returns $HELM, else builds helm with hack/build-helm.sh (cached; a few minutes
// cold), as framework.BinDir does for the Kubernetes binaries.
func helmBinary(t *testing.T, root string) string {
	t.Helper()
	if p := os.Getenv("HELM"); p != "" {
		return p
	}
	cmd := exec.Command("bash", filepath.Join(root, "hack", "build-helm.sh"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("hack/build-helm.sh: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	return lines[len(lines)-1]
}

func helmTemplate(t *testing.T, helm, root string, set ...string) string {
	t.Helper()
	return helmTemplateChart(t, helm, root, "statefulset-resizer", "statefulset-resizer", "csi-resizer-system", set...)
}

// TestManifestsHelmChart sends the Helm chart's renders through the real kube-apiserver: a
// server-side dry-run of the default values and of webhook.enabled=false, then the default render
// applied for real, with the webhook not running (the controller never started, so no caBundle
// and no endpoints). It checks what the chart's two ServiceAccounts may do, and that the webhook
// configuration is what issues 18 and 31 promise when the webhook is down: the apiserver calls it
// only for opted-in StatefulSets, goes on without it (failurePolicy Ignore), and answers a
// volumeClaimTemplates change with its usual error while any other change goes through; but an
// update of a StatefulSet with a pending change is refused, naming the Fail entry, except the
// controller's and the garbage collector's.
func TestManifestsHelmChart(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	helm := helmBinary(t, root)
	cluster := framework.StartCluster(t, framework.ClusterOptions{})
	kubectl(t, cluster, "create", "namespace", "csi-resizer-system")

	def := helmTemplate(t, helm, root)
	for name, manifests := range map[string]string{
		"default values":        def,
		"webhook.enabled=false": helmTemplate(t, helm, root, "webhook.enabled=false"),
	} {
		applied := strings.Fields(dryRun(t, cluster, manifests))
		if want := total(countKinds(manifests)); len(applied) != want {
			t.Errorf("%s: dry-run applied %d objects, want %d: %v", name, len(applied), want, applied)
		}
		t.Logf("%s: server-side dry-run accepted: %s", name, strings.Join(applied, " "))
	}
	kubectlInput(t, cluster, def, "apply", "-f", "-")

	const sa = "system:serviceaccount:csi-resizer-system:statefulset-resizer"
	const webhookSA = "system:serviceaccount:csi-resizer-system:statefulset-resizer-webhook"
	for _, c := range []struct {
		as, ns, verb, resource string
		want                   bool
	}{
		{sa, "app", "patch", "statefulsets.apps", true},
		{sa, "app", "delete", "statefulsets.apps", true},
		{sa, "app", "create", "statefulsets.apps", true},
		{sa, "app", "update", "statefulsets.apps", false},
		{sa, "app", "patch", "persistentvolumeclaims", true},
		{sa, "app", "create", "configmaps", false},
		{sa, "app", "list", "configmaps", false},
		{sa, "csi-resizer-system", "create", "configmaps", true},
		{sa, "csi-resizer-system", "update", "configmaps", true},
		{sa, "", "watch", "namespaces", true},
		{sa, "app", "get", "secrets", false},
		{sa, "csi-resizer-system", "get", "secrets/statefulset-resizer-webhook-tls", false},
		{sa, "csi-resizer-system", "create", "secrets", false},
		{webhookSA, "csi-resizer-system", "get", "secrets/statefulset-resizer-webhook-tls", true},
		{webhookSA, "csi-resizer-system", "update", "secrets/statefulset-resizer-webhook-tls", true},
		{webhookSA, "csi-resizer-system", "create", "secrets", true},
		{webhookSA, "csi-resizer-system", "get", "secrets/another", false},
		{webhookSA, "csi-resizer-system", "list", "secrets", false},
		{sa, "csi-resizer-system", "update", "leases.coordination.k8s.io", true},
		{sa, "app", "update", "leases.coordination.k8s.io", false},
		{sa, "", "patch", "mutatingwebhookconfigurations.admissionregistration.k8s.io/statefulset-resizer", false},
		{sa, "", "list", "leases.coordination.k8s.io", true},
		{sa, "app", "get", "pods", false},
		{webhookSA, "", "patch", "mutatingwebhookconfigurations.admissionregistration.k8s.io/statefulset-resizer", true},
		{webhookSA, "", "patch", "mutatingwebhookconfigurations.admissionregistration.k8s.io/another", false},
		{webhookSA, "app", "patch", "statefulsets.apps", false},
		{webhookSA, "app", "get", "statefulsets.apps", false},
		{webhookSA, "app", "create", "statefulsets.apps", false},
		{webhookSA, "app", "delete", "statefulsets.apps", false},
		{webhookSA, "csi-resizer-system", "update", "leases.coordination.k8s.io", false},
		{webhookSA, "csi-resizer-system", "create", "configmaps", false},
	} {
		args := []string{"auth", "can-i", c.verb, c.resource, "--as=" + c.as}
		if c.ns != "" {
			args = append(args, "--namespace="+c.ns)
		}
		out, _ := cluster.Kubectl(t, args...) // exits 1 for "no": read the answer
		if got := strings.TrimSpace(out); got != map[bool]string{true: "yes", false: "no"}[c.want] {
			t.Errorf("%s may %s %s in %q: %q, want %v", c.as, c.verb, c.resource, c.ns, got, c.want)
		}
	}

	// Opted-in StatefulSets (their own label, their namespace's, both), one that is not, and one
	// that opts out of its namespace's opt-in.
	kubectl(t, cluster, "create", "namespace", "opted-in")
	kubectl(t, cluster, "label", "namespace", "opted-in", "csi-resizer.io/volume-claim-template-updates=enabled")
	kubectl(t, cluster, "create", "namespace", "plain")
	cases := []struct{ ns, name, labels string }{
		{"plain", "labelled", "csi-resizer.io/volume-claim-template-updates: enabled"},
		{"opted-in", "in-namespace", "app: db"},
		{"opted-in", "both", "csi-resizer.io/volume-claim-template-updates: enabled"}, // one entry, not two
		{"plain", "not-opted-in", "app: db"},
		{"opted-in", "opted-out", "csi-resizer.io/volume-claim-template-updates: disabled"},
	}
	for _, c := range cases {
		kubectlInput(t, cluster, statefulSet(c.ns, c.name, c.labels), "apply", "-f", "-")
	}
	for _, c := range cases {
		t.Run(c.ns+"/"+c.name, func(t *testing.T) {
			optedIn := c.name != "not-opted-in" && c.name != "opted-out"
			before := failOpenCalls(t, cluster)
			out, err := cluster.Kubectl(t, "-n", c.ns, "patch", "statefulset", c.name, "--type=json",
				"-p", `[{"op":"replace","path":"/spec/volumeClaimTemplates/0/spec/resources/requests/storage","value":"2Gi"}]`)
			if err == nil || !strings.Contains(err.Error(), "Forbidden: updates to statefulset spec for fields other than") {
				t.Errorf("template change with the webhook down: %v %s, want the apiserver's usual Forbidden error", err, out)
			}
			kubectl(t, cluster, "-n", c.ns, "patch", "statefulset", c.name, "--type=merge", "-p", `{"spec":{"replicas":2}}`)
			if got := kubectl(t, cluster, "-n", c.ns, "get", "statefulset", c.name, "-o",
				`jsonpath={.spec.replicas} {.spec.volumeClaimTemplates[0].spec.resources.requests.storage} {.metadata.annotations.csi-resizer\.io/desired-volume-claim-templates}`); got != "2 1Gi " {
				t.Errorf("after the updates: %q, want replicas 2, the template at 1Gi and no desired-templates annotation", got)
			}
			// Two updates (one refused after admission, one accepted), each a failed-open call
			// of exactly one webhook entry when opted in (by either label, or both), none otherwise.
			want := 0
			if optedIn {
				want = 2
			}
			if got := failOpenCalls(t, cluster) - before; got != want {
				t.Errorf("webhook calls that failed open: %d, want %d", got, want)
			}
		})
	}
	t.Run("pending change", func(t *testing.T) { checkPendingChangeNeedsWebhook(t, cluster) })
}

// checkPendingChangeNeedsWebhook: with the webhook down, an update of an opted-in StatefulSet
// whose live object carries a pending change (here written by hand: that update, whose old
// object has none, fails open) is refused with the Fail entry's name, by either opt-in; the
// controller's and the garbage collector's updates of the same object are not.
func checkPendingChangeNeedsWebhook(t *testing.T, cluster *framework.Cluster) {
	const desire = `csi-resizer.io/desired-volume-claim-templates=[{"name":"data","storage":"2Gi"}]`
	for _, c := range []struct{ ns, name, labels, entry string }{
		{"plain", "pending", "csi-resizer.io/volume-claim-template-updates: enabled", "pending-volume-claim-template-change.statefulsets.csi-resizer.io"},
		{"opted-in", "pending-in-namespace", "app: db", "pending-volume-claim-template-change.namespaces.csi-resizer.io"},
	} {
		kubectlInput(t, cluster, statefulSet(c.ns, c.name, c.labels), "apply", "-f", "-")
		kubectl(t, cluster, "-n", c.ns, "annotate", "statefulset", c.name, desire)
		out, err := cluster.Kubectl(t, "-n", c.ns, "patch", "statefulset", c.name, "--type=merge", "-p", `{"spec":{"replicas":3}}`)
		if want := `failed calling webhook "` + c.entry + `"`; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s/%s: an update with a pending change and the webhook down: %v %s; want a refusal containing %q", c.ns, c.name, err, out, want)
		}
		// The status annotation: the controller's admission policy lets it write that one.
		for _, as := range []string{"system:serviceaccount:csi-resizer-system:statefulset-resizer", "system:serviceaccount:kube-system:generic-garbage-collector"} {
			kubectl(t, cluster, "--as="+as, "-n", c.ns, "patch", "statefulset", c.name, "--type=merge",
				"-p", `{"metadata":{"annotations":{"csi-resizer.io/volume-claim-templates-status":"{}"}}}`)
		}
		if got := kubectl(t, cluster, "-n", c.ns, "get", "statefulset", c.name, "-o", `jsonpath={.spec.replicas}`); got != "1" {
			t.Errorf("%s/%s: replicas %s after a refused update, want 1", c.ns, c.name, got)
		}
	}
}

func statefulSet(ns, name, labels string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: %[2]s
  namespace: %[1]s
  labels:
    %[3]s
spec:
  replicas: 1
  serviceName: %[2]s
  selector:
    matchLabels: {app: %[2]s}
  template:
    metadata:
      labels: {app: %[2]s}
    spec:
      containers:
      - name: app
        image: registry.example/app:1
  volumeClaimTemplates:
  - metadata:
      name: data
    spec:
      accessModes: [ReadWriteOnce]
      resources:
        requests:
          storage: 1Gi
`, ns, name, labels)
}

var failOpenLine = regexp.MustCompile(`(?m)^apiserver_admission_webhook_fail_open_count\{([^}]*)\} (\S+)$`)

// failOpenCalls sums the apiserver's count of calls to this chart's webhook entries that failed
// and were ignored (failurePolicy Ignore).
func failOpenCalls(t *testing.T, cluster *framework.Cluster) int {
	t.Helper()
	var total int
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := cluster.Kubectl(t, "get", "--raw", "/metrics")
		if err == nil {
			for _, m := range failOpenLine.FindAllStringSubmatch(out, -1) {
				if !strings.Contains(m[1], `volume-claim-templates.csi-resizer.io"`) {
					continue
				}
				v, err := strconv.ParseFloat(m[2], 64)
				if err != nil {
					t.Fatalf("metric line %q: %v", m[0], err)
				}
				total += int(v)
			}
			return total
		}
		if time.Now().After(deadline) {
			t.Fatalf("apiserver /metrics: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
