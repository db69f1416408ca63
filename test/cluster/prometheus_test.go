//go:build cluster

package cluster

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/csi-resizer/csi-resizer/test/framework"
)

// Prometheus as SREs run it next to TestOperations' csi-resizer replicas: Prometheus built from
// its Go module with Kubernetes discovery (hack/build-prometheus.sh), given the README's
// kubernetes_sd_configs line, and the Prometheus Operator (hack/build-prometheus-operator.sh)
// turning the shipped ServiceMonitor and PrometheusRule (deploy/kubernetes/monitoring) into a
// Prometheus configuration. Both load the shipped alerting rules.

const (
	// promNS holds the Prometheus ServiceAccount, the Prometheus object and the shipped
	// monitoring objects (ServiceMonitors, PrometheusRule).
	promNS = "ops-monitoring"
	// promSA is the identity both Prometheus processes discover targets with.
	promSA = "prometheus"
	// promShortFor is the `for` of the test's copy of CSIResizerVolumeInfeasible.
	promShortFor = "10s"
)

// promBuild runs a cached build script of hack/ and returns the directory it prints last.
func promBuild(t *testing.T, script string) string {
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

// promBinary is the prometheus (or promtool) of hack/build-prometheus.sh.
func promBinary(t *testing.T, name string) string {
	t.Helper()
	return filepath.Join(promBuild(t, "build-prometheus.sh"), name)
}

// promVersion is the first line of `prometheus --version`.
func promVersion(bin string) string {
	out, _ := exec.Command(bin, "--version").CombinedOutput()
	first, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(first)
}

// promServiceAccount creates promNS and, in it, the ServiceAccount a Prometheus in the cluster
// would discover targets with: get, list and watch on pods, services, endpoints and
// endpointslices, nothing else. Prometheus runs outside the cluster here, so it gets that
// identity as a bound token (an hour) in a file; a missing permission fails discovery as it
// would in a pod, which the admin's credentials would hide. Returns the token file and a
// kubeconfig that uses it.
func promServiceAccount(t *testing.T, c *Cluster) (tokenFile, kubeconfig string) {
	t.Helper()
	rbac := fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: %[2]s, namespace: %[1]s}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: %[1]s-%[2]s}
rules:
- apiGroups: [""]
  resources: [pods, services, endpoints]
  verbs: [get, list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: %[1]s-%[2]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: %[1]s-%[2]s}
subjects: [{kind: ServiceAccount, name: %[2]s, namespace: %[1]s}]
`, promNS, promSA)
	if out, err := c.KubectlWithInput(t, rbac, "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Cleanup(func() {
		if _, err := c.KubectlWithInput(t, rbac, "delete", "--ignore-not-found", "--wait=true", "--timeout=120s", "-f", "-"); err != nil {
			t.Error(err)
		}
	})
	tr, err := c.Client.CoreV1().ServiceAccounts(promNS).CreateToken(context.Background(), promSA,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptrTo(int64(3600))}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token of ServiceAccount %s/%s: %v", promNS, promSA, err)
	}
	dir := t.TempDir()
	tokenFile = filepath.Join(dir, "token")
	kubeconfig = filepath.Join(dir, "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: node, cluster: {server: %q, certificate-authority: %q}}]
users: [{name: %s, user: {tokenFile: %q}}]
contexts: [{name: %s, context: {cluster: node, user: %s}}]
current-context: %s
`, c.Server, c.Config.CAFile, promSA, tokenFile, promSA, promSA, promSA)
	if err := os.WriteFile(tokenFile, []byte(tr.Status.Token), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kubeconfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return tokenFile, kubeconfig
}

// promRuleFiles returns the shipped rules (deploy/prometheus/rules.yaml, as it is) and a copy of
// its CSIResizerVolumeInfeasible alone with `for: promShortFor` in a group of its own
// (<group>.short-for), written next to dir: the shipped rule waits 15 minutes before it fires,
// longer than the test holds the PVC infeasible. The shipped rule must still go pending with the
// copy (same expression, same labels); deploy/prometheus/rules_test.yaml, run here with the
// built promtool, tests its 15 minutes.
func promRuleFiles(t *testing.T, dir string) []string {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	shipped := filepath.Join(root, "deploy", "prometheus", "rules.yaml")
	// The unit tests of the shipped rules (their `for` and windows included) with this
	// Prometheus' promtool too: make check-rules runs them with Debian's (2.42).
	unit := filepath.Join(root, "deploy", "prometheus", "rules_test.yaml")
	promtool := promBinary(t, "promtool")
	if out, err := exec.Command(promtool, "test", "rules", unit).CombinedOutput(); err != nil {
		t.Fatalf("%s (%s) test rules %s: %v\n%s", promtool, promVersion(promtool), unit, err, out)
	}
	data, err := os.ReadFile(shipped)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Name  string           `json:"name"`
			Rules []map[string]any `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatalf("%s: %v", shipped, err)
	}
	type group struct {
		Name  string           `json:"name"`
		Rules []map[string]any `json:"rules"`
	}
	var short []group
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r["alert"] == "CSIResizerVolumeInfeasible" {
				r["for"] = promShortFor
				short = append(short, group{Name: g.Name + ".short-for", Rules: []map[string]any{r}})
			}
		}
	}
	if len(short) != 1 {
		t.Fatalf("%s: want one alert CSIResizerVolumeInfeasible, found %d", shipped, len(short))
	}
	out, err := yaml.Marshal(map[string]any{"groups": short})
	if err != nil {
		t.Fatal(err)
	}
	copyFile := filepath.Join(dir, "short-for.yaml")
	if err := os.WriteFile(copyFile, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{shipped, copyFile}
}

// promTarget is an active target of /api/v1/targets.
type promTarget struct {
	DiscoveredLabels map[string]string `json:"discoveredLabels"`
	Labels           map[string]string `json:"labels"`
	ScrapePool       string            `json:"scrapePool"`
	ScrapeURL        string            `json:"scrapeUrl"`
	Health           string            `json:"health"`
	LastError        string            `json:"lastError"`
}

// get decodes the data of a Prometheus HTTP API answer into data.
func (p *opsPrometheus) get(ctx context.Context, path string, data any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.api+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var r struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if r.Status != "success" {
		return fmt.Errorf("%s: status %s: %s", path, r.Status, r.Error)
	}
	return json.Unmarshal(r.Data, data)
}

// targets returns the active targets of a scrape pool.
func (p *opsPrometheus) targets(ctx context.Context, pool string) ([]promTarget, error) {
	var data struct {
		ActiveTargets []promTarget `json:"activeTargets"`
	}
	if err := p.get(ctx, "/api/v1/targets?state=active", &data); err != nil {
		return nil, err
	}
	var out []promTarget
	for _, tg := range data.ActiveTargets {
		if tg.ScrapePool == pool {
			out = append(out, tg)
		}
	}
	return out, nil
}

// promWaitDiscovered waits until every running pod of TestOperations' Deployment is a target of
// pool that Kubernetes discovery found (its discovered labels name the pod: no static list) and
// that is up. It returns the targets.
func promWaitDiscovered(t *testing.T, c *Cluster, p *opsPrometheus, pool string, timeout time.Duration) []promTarget {
	t.Helper()
	var targets []promTarget
	var pods []string
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		var err error
		if pods, err = opsPods(ctx, c, opsNS, opsSelector); err != nil || len(pods) == 0 {
			return false, err
		}
		if targets, err = p.targets(ctx, pool); err != nil {
			return false, nil
		}
		for _, pod := range pods {
			found := false
			for _, tg := range targets {
				if tg.DiscoveredLabels["__meta_kubernetes_pod_name"] == pod &&
					tg.DiscoveredLabels["__meta_kubernetes_namespace"] == opsNS && tg.Health == "up" {
					found = true
				}
			}
			if !found {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("prometheus %s: the pods %v of %s are not all discovered and up in scrape pool %s within %s: %v\ntargets: %+v\n%s",
			p.api, pods, opsDeployment, pool, timeout, err, targets, p.logTail())
	}
	for _, tg := range targets {
		t.Logf("prometheus %s: %s target %s (pod %s/%s, discovered by role %s) %s",
			p.api, pool, tg.ScrapeURL, tg.DiscoveredLabels["__meta_kubernetes_namespace"],
			tg.DiscoveredLabels["__meta_kubernetes_pod_name"], promRole(tg), tg.Health)
	}
	return targets
}

// promRole names the Kubernetes discovery role that found a target, from its meta labels.
func promRole(tg promTarget) string {
	switch {
	case tg.DiscoveredLabels["__meta_kubernetes_endpointslice_name"] != "":
		return "endpointslice"
	case tg.DiscoveredLabels["__meta_kubernetes_endpoints_name"] != "":
		return "endpoints"
	case tg.DiscoveredLabels["__meta_kubernetes_pod_name"] != "":
		return "pod"
	}
	return "?"
}

// promAlert is an alert of a rule in /api/v1/rules.
type promAlert struct {
	Group    string
	State    string
	ActiveAt string
	Labels   map[string]string
}

// alerts returns the active (pending or firing) alerts of the rule named alert, with the group
// each comes from (a group tells the shipped rule from the test's copy).
func (p *opsPrometheus) alerts(ctx context.Context, alert string) ([]promAlert, error) {
	var data struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Name   string `json:"name"`
				Alerts []struct {
					Labels   map[string]string `json:"labels"`
					State    string            `json:"state"`
					ActiveAt string            `json:"activeAt"`
				} `json:"alerts"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := p.get(ctx, "/api/v1/rules?type=alert", &data); err != nil {
		return nil, err
	}
	var out []promAlert
	for _, g := range data.Groups {
		for _, r := range g.Rules {
			if r.Name != alert {
				continue
			}
			for _, a := range r.Alerts {
				out = append(out, promAlert{Group: g.Name, State: a.State, ActiveAt: a.ActiveAt, Labels: a.Labels})
			}
		}
	}
	return out, nil
}

// promInfeasibleAlerts returns, per group, the state of CSIResizerVolumeInfeasible for the PVC
// opsNS/pvc of csi-driver-host-path ("" when it has no active alert).
func promInfeasibleAlerts(ctx context.Context, p *opsPrometheus, pvc string) (map[string]string, error) {
	alerts, err := p.alerts(ctx, "CSIResizerVolumeInfeasible")
	if err != nil {
		return nil, err
	}
	states := map[string]string{}
	for _, a := range alerts {
		if a.Labels["namespace"] == opsNS && a.Labels["persistentvolumeclaim"] == pvc &&
			a.Labels["driver_name"] == "hostpath.csi.k8s.io" && a.Labels["severity"] == "warning" {
			states[a.Group] = a.State
		}
	}
	return states, nil
}

// promWaitAlerts polls promInfeasibleAlerts until want holds (the state per group), and fails
// the test with what was seen after timeout.
func promWaitAlerts(t *testing.T, p *opsPrometheus, pvc string, timeout time.Duration, want map[string]string) {
	t.Helper()
	start := time.Now()
	var got map[string]string
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		var err error
		if got, err = promInfeasibleAlerts(ctx, p, pvc); err != nil {
			return false, nil
		}
		for g, s := range want {
			if got[g] != s {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("prometheus %s: CSIResizerVolumeInfeasible for %s/%s per rule group: %v within %s, want %v: %v\n%s",
			p.api, opsNS, pvc, got, timeout, want, err, p.logTail())
	}
	t.Logf("prometheus %s: CSIResizerVolumeInfeasible for %s/%s per rule group %v after %s",
		p.api, opsNS, pvc, want, time.Since(start).Round(time.Second))
}

// promOperator runs the Prometheus Operator (hack/build-prometheus-operator.sh) with its CRDs
// installed, out of the cluster with the admin kubeconfig, in the node's network namespace; the
// shipped monitoring kustomization (ServiceMonitors and PrometheusRule) in promNS, and the shipped
// csi-resizer-metrics Service in opsNS. A Prometheus object selects them by the labels the shipped
// files carry. The operator writes the configuration it generates for that Prometheus to the
// Secret prometheus-<name> and the rules to the ConfigMap prometheus-<name>-rulefiles-0, which
// this returns (the configuration decompressed, the rule files by name).
//
// The Prometheus runs with replicas: 0: the operator's StatefulSet would run Prometheus and the
// config reloader from images (quay.io), which no registry here serves; the test runs the built
// prometheus with the operator's configuration instead (promOperatorPrometheus).
func promOperator(t *testing.T, c *Cluster, tokenFile, shortFor string) (config []byte, rules map[string]string) {
	t.Helper()
	dir := promBuild(t, "build-prometheus-operator.sh")
	promImportImages(t, c, promBinary(t, "prometheus"), filepath.Join(dir, "prometheus-config-reloader"))
	crds, err := filepath.Glob(filepath.Join(dir, "crds", "*.yaml"))
	if err != nil || len(crds) == 0 {
		t.Fatalf("no CRDs in %s/crds: %v", dir, err)
	}
	args := []string{"apply", "--server-side"}
	for _, f := range crds {
		args = append(args, "-f", f)
	}
	if out, err := c.Kubectl(t, args...); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Cleanup(func() {
		del := []string{"delete", "--ignore-not-found", "--wait=true", "--timeout=120s"}
		for _, f := range crds {
			del = append(del, "-f", f)
		}
		if _, err := c.Kubectl(t, del...); err != nil {
			t.Error(err)
		}
	})
	// Not `kubectl wait`: it fails at once on a CRD that has no conditions yet.
	for _, crd := range []string{"servicemonitors", "prometheusrules", "prometheuses"} {
		var established string
		err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			established, _ = c.Kubectl(t, "get", "crd", crd+".monitoring.coreos.com",
				"-o", `jsonpath={.status.conditions[?(@.type=="Established")].status}`)
			return established == "True", nil
		})
		if err != nil {
			t.Fatalf("CRD %s.monitoring.coreos.com not Established within 1m (%q): %v", crd, established, err)
		}
	}
	promStartOperator(t, c, filepath.Join(dir, "operator"))
	promApplyMonitoring(t, c, tokenFile, shortFor)
	return promOperatorOutput(t, c)
}

// promStartOperator starts the operator in the node's network namespace and stops it at cleanup.
func promStartOperator(t *testing.T, c *Cluster, bin string) {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "operator.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	// --kubelet-service off: it would maintain a kubelet Service in kube-system for nothing.
	// KUBECONFIG: the operator's out-of-cluster mode (pkg/k8sutil reads it).
	cmd := exec.Command("nsenter", "--net=/run/netns/"+c.env["NETNS"], "--", bin,
		"--web.listen-address="+c.NodeIP+":18080", "--kubelet-service=", "--log-level=info",
		"--prometheus-config-reloader="+promReloaderImage)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("prometheus-operator log (tail):\n%s", tail(string(b), 40))
		}
	})
	t.Logf("prometheus-operator (%s) running out of the cluster with the admin kubeconfig", promVersion(bin))
}

// promApplyMonitoring applies the shipped monitoring objects and a Prometheus that selects them.
// The Prometheus reaches the apiserver as promSA (apiserverConfig: the token file and the
// cluster's CA, paths on this machine, where the configuration is used).
func promApplyMonitoring(t *testing.T, c *Cluster, tokenFile, shortFor string) {
	t.Helper()
	copyRule := promShortForRule(t, shortFor)
	monitoring := opsRender(t, c, map[string]string{"kustomization.yaml": `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: ` + promNS + `
resources:
- $REPO/deploy/kubernetes/monitoring
`})
	service := opsRender(t, c, map[string]string{"kustomization.yaml": `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: ` + opsNS + `
resources:
- $REPO/deploy/kubernetes/monitoring/csi-resizer-service
`})
	prometheus := fmt.Sprintf(`apiVersion: monitoring.coreos.com/v1
kind: Prometheus
metadata: {name: ops, namespace: %s}
spec:
  replicas: 0
  imagePullPolicy: Never
  serviceAccountName: %s
  evaluationInterval: 2s
  serviceMonitorNamespaceSelector: {}
  serviceMonitorSelector: {matchLabels: {app.kubernetes.io/part-of: csi-resizer}}
  ruleNamespaceSelector: {}
  ruleSelector: {matchLabels: {prometheus: k8s, role: alert-rules}}
  apiserverConfig:
    host: %q
    authorization: {type: Bearer, credentialsFile: %q}
    tlsConfig: {caFile: %q}
`, promNS, promSA, c.Server, tokenFile, c.Config.CAFile)
	for _, objects := range []string{monitoring, copyRule, service, prometheus} {
		if out, err := c.KubectlWithInput(t, objects, "apply", "-f", "-"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	t.Cleanup(func() {
		for _, objects := range []string{prometheus, service, copyRule, monitoring} {
			if _, err := c.KubectlWithInput(t, objects, "delete", "--ignore-not-found", "--wait=true", "--timeout=120s", "-f", "-"); err != nil {
				t.Error(err)
			}
		}
	})
}

// promOperatorOutput waits for the operator's Secret and rules ConfigMap of the Prometheus
// "ops", with a scrape job from the shipped ServiceMonitor and the shipped alerts.
func promOperatorOutput(t *testing.T, c *Cluster) (config []byte, rules map[string]string) {
	t.Helper()
	const job = "serviceMonitor/" + promNS + "/csi-resizer/0"
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		s, err := c.Client.CoreV1().Secrets(promNS).Get(ctx, "prometheus-ops", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		zr, err := gzip.NewReader(bytes.NewReader(s.Data["prometheus.yaml.gz"]))
		if err != nil {
			return false, nil
		}
		if config, err = io.ReadAll(zr); err != nil || !bytes.Contains(config, []byte(job)) {
			return false, nil
		}
		cm, err := c.Client.CoreV1().ConfigMaps(promNS).Get(ctx, "prometheus-ops-rulefiles-0", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		rules = cm.Data
		shipped, short := false, false
		for _, r := range rules {
			shipped = shipped || strings.Contains(r, "name: csi-resizer.alerts\n")
			short = short || strings.Contains(r, "name: csi-resizer.alerts.short-for\n")
		}
		return shipped && short, nil
	})
	if err != nil {
		t.Fatalf("the operator wrote no configuration with job %s and rules with CSIResizerVolumeInfeasible "+
			"(Secret %s/prometheus-ops, ConfigMap prometheus-ops-rulefiles-0) within 2m: %v\nconfig:\n%s", job, promNS, err, config)
	}
	return config, rules
}

// promOperatorPrometheus runs what the operator's StatefulSet prometheus-ops would run, with the
// built binaries and the operator's own output: its init container (init-config-reloader: the
// built prometheus-config-reloader with the container's arguments and environment, run once)
// turns the Secret's prometheus.yaml.gz into prometheus.env.yaml, substituting $(POD_NAME) and
// $(SHARD), and the built prometheus is started with that. The paths under /etc/prometheus
// become files of the test (the Secret, the rules ConfigMap, the output); rule_files, which name
// the ConfigMap's mount, name the test's copy of its files. extraRules are loaded too (the
// test's copy of the alert with a short `for`).
func promOperatorPrometheus(t *testing.T, c *Cluster, config []byte, rules map[string]string, extraRules ...string) *opsPrometheus {
	t.Helper()
	dir := t.TempDir()
	const mount = "/etc/prometheus/rules/prometheus-ops-rulefiles-0"
	paths := map[string]string{
		"/etc/prometheus/config/prometheus.yaml.gz":      filepath.Join(dir, "prometheus.yaml.gz"),
		"/etc/prometheus/config_out/prometheus.env.yaml": filepath.Join(dir, "prometheus.env.yaml"),
		mount: filepath.Join(dir, "prometheus-ops-rulefiles-0"),
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write(config); err != nil || zw.Close() != nil {
		t.Fatalf("gzip: %v", err)
	}
	if err := os.WriteFile(paths["/etc/prometheus/config/prometheus.yaml.gz"], gz.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(paths[mount], 0o755); err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(rules))
	for name, content := range rules {
		if err := os.WriteFile(filepath.Join(paths[mount], name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	sort.Strings(names)
	promRunInitReloader(t, c, paths)
	envYAML, err := os.ReadFile(paths["/etc/prometheus/config_out/prometheus.env.yaml"])
	if err != nil {
		t.Fatalf("init-config-reloader wrote no configuration: %v", err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(envYAML, &cfg); err != nil {
		t.Fatalf("init-config-reloader's configuration: %v\n%s", err, envYAML)
	}
	if got, want := fmt.Sprint(cfg["rule_files"]), "["+mount+"/*.yaml]"; got != want {
		t.Fatalf("the operator's rule_files are %s, want %s: update this test", got, want)
	}
	cfg["rule_files"] = append([]string{filepath.Join(paths[mount], "*.yaml")}, extraRules...)
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the operator's configuration, through init-config-reloader (rule files %v from ConfigMap prometheus-ops-rulefiles-0):\n%s", names, out)
	prom, err := opsStartPrometheus(t, c, 19091, string(out))
	if err != nil {
		t.Fatal(err)
	}
	return prom
}

// promRunInitReloader runs the init container init-config-reloader of the operator's
// StatefulSet prometheus-ops with the built prometheus-config-reloader: the container's
// arguments with the paths mapped by paths (every /etc/prometheus path must be there) and no
// metrics listener, and its environment (POD_NAME the first replica's name).
func promRunInitReloader(t *testing.T, c *Cluster, paths map[string]string) {
	t.Helper()
	sts, err := c.Client.AppsV1().StatefulSets(promNS).Get(context.Background(), "prometheus-ops", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the operator's StatefulSet %s/prometheus-ops: %v", promNS, err)
	}
	var init *corev1.Container
	for i := range sts.Spec.Template.Spec.InitContainers {
		if ic := &sts.Spec.Template.Spec.InitContainers[i]; ic.Name == "init-config-reloader" {
			init = ic
		}
	}
	if init == nil || len(init.Command) != 1 || init.Command[0] != "/bin/prometheus-config-reloader" {
		t.Fatalf("StatefulSet %s/prometheus-ops has no init container init-config-reloader running /bin/prometheus-config-reloader: %+v",
			promNS, sts.Spec.Template.Spec.InitContainers)
	}
	var args []string
	for _, a := range init.Args {
		if strings.HasPrefix(a, "--listen-address=") {
			a = "--listen-address="
		}
		for from, to := range paths {
			a = strings.Replace(a, "="+from, "="+to, 1)
		}
		if strings.Contains(a, "/etc/prometheus") {
			t.Fatalf("init-config-reloader argument %q names a mount this test does not provide: update it", a)
		}
		args = append(args, a)
	}
	env := []string{}
	for _, e := range init.Env {
		switch {
		case e.ValueFrom == nil:
			env = append(env, e.Name+"="+e.Value)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			env = append(env, e.Name+"=prometheus-ops-0")
		default:
			t.Fatalf("init-config-reloader's variable %s comes from %+v: update this test", e.Name, e.ValueFrom)
		}
	}
	bin := filepath.Join(promBuild(t, "build-prometheus-operator.sh"), "prometheus-config-reloader")
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("init-config-reloader %v (env %v): %v\n%s", args, env, err, out)
	}
	t.Logf("init-config-reloader (built prometheus-config-reloader) %v with %v", args, env)
}

// promScrapers starts the two ways an SRE scrapes the replicas, each with the shipped alerting
// rules and the test's short-`for` copy of CSIResizerVolumeInfeasible: the README's
// kubernetes_sd_configs line (opsScrapePrometheus, scrape pool csi-resizer) and the operator's
// configuration from the shipped ServiceMonitor (scrape pool
// serviceMonitor/ops-monitoring/csi-resizer/0). It returns them once each has discovered every
// replica and scrapes it up (the README's first: the recovery counter is read there).
func promScrapers(t *testing.T, c *Cluster) []*opsPrometheus {
	t.Helper()
	tokenFile, kubeconfig := promServiceAccount(t, c)
	rules := promRuleFiles(t, t.TempDir())
	readme := opsScrapePrometheus(t, c, kubeconfig, rules)
	config, operatorRules := promOperator(t, c, tokenFile, rules[1])
	operated := promOperatorPrometheus(t, c, config, operatorRules)
	incluster := promInCluster(t, c)
	promWaitDiscovered(t, c, readme, "csi-resizer", time.Minute)
	// The ServiceMonitor's interval is 30s: the first scrape may come that late.
	promWaitDiscovered(t, c, operated, "serviceMonitor/"+promNS+"/csi-resizer/0", 2*time.Minute)
	promWaitDiscovered(t, c, incluster, "serviceMonitor/"+promNS+"/csi-resizer/0", 2*time.Minute)
	return []*opsPrometheus{readme, operated, incluster}
}

// promAlertsFire waits, in each Prometheus, for the test's copy of CSIResizerVolumeInfeasible to
// fire for the PVC opsNS/pvc and the shipped rule (for: 15m) to be pending for it.
func promAlertsFire(t *testing.T, proms []*opsPrometheus, pvc string) {
	t.Helper()
	for _, p := range proms {
		promWaitAlerts(t, p, pvc, 2*time.Minute, map[string]string{
			"csi-resizer.alerts": "pending", "csi-resizer.alerts.short-for": "firing"})
	}
}

// promAlertsResolve waits, in each Prometheus, until neither rule has an alert for opsNS/pvc.
func promAlertsResolve(t *testing.T, proms []*opsPrometheus, pvc string) {
	t.Helper()
	for _, p := range proms {
		promWaitAlerts(t, p, pvc, 2*time.Minute, map[string]string{
			"csi-resizer.alerts": "", "csi-resizer.alerts.short-for": ""})
	}
}

// Images of the built prometheus and prometheus-config-reloader, for the operator's StatefulSet.
const (
	promImage         = "localhost/prometheus:v3.16.0"
	promReloaderImage = "localhost/prometheus-config-reloader:v0.85.0"
)

// promImportImages assembles images of the built prometheus and prometheus-config-reloader
// offline, as hack/cluster/build-images.sh assembles the driver's (test/images/cmd/assemble-image:
// the binary, /tmp, its entrypoint, no base), and imports them into the node's containerd: the
// operator's StatefulSet runs them under these names, with imagePullPolicy Never.
func promImportImages(t *testing.T, c *Cluster, promBin, reloaderBin string) {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	build := exec.Command("go", "build", "-trimpath", "-o", dir+"/", "./cmd/assemble-image")
	build.Dir = filepath.Join(root, "test", "images")
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly -buildvcs=false", "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build test/images/cmd/assemble-image: %v\n%s", err, out)
	}
	for _, img := range []struct{ tag, bin, path string }{
		{promImage, promBin, "/bin/prometheus"},
		{promReloaderImage, reloaderBin, "/bin/prometheus-config-reloader"},
	} {
		tar := filepath.Join(dir, filepath.Base(img.path)+".tar")
		out, err := exec.Command(filepath.Join(dir, "assemble-image"), "--tag", img.tag, "--out", tar,
			"--user", "65534:65534", "--entrypoint", fmt.Sprintf("[%q]", img.path),
			"--layer", "COPY "+filepath.Base(img.path)+" (hack/build-prometheus*.sh)",
			"--file", img.path+"="+img.bin+",mode=0755", "--dir", "/tmp,mode=1777").CombinedOutput()
		if err != nil {
			t.Fatalf("assemble %s: %v\n%s", img.tag, err, out)
		}
		if out, err := c.InNode(t, c.env["CTR"], "--address", c.env["CONTAINERD_SOCK"], "-n", "k8s.io", "images", "import",
			"--snapshotter", c.env["SNAPSHOTTER"], "--local", tar); err != nil {
			t.Fatalf("import %s: %v\n%s", img.tag, err, out)
		}
	}
}

// promInCluster has the operator run a Prometheus in the cluster, the way it does for users: a
// Prometheus object "incluster" selecting the shipped ServiceMonitor and PrometheusRule, whose
// StatefulSet runs the imported images as promSA (in-cluster credentials, no apiserverConfig),
// with the init container and the config reloader next to Prometheus. A NodePort Service
// reaches its API from the machine. Returns it once the API is ready.
func promInCluster(t *testing.T, c *Cluster) *opsPrometheus {
	t.Helper()
	objects := fmt.Sprintf(`apiVersion: monitoring.coreos.com/v1
kind: Prometheus
metadata: {name: incluster, namespace: %[1]s}
spec:
  replicas: 1
  version: v3.16.0
  image: %[2]s
  imagePullPolicy: Never
  serviceAccountName: %[3]s
  evaluationInterval: 2s
  serviceMonitorNamespaceSelector: {}
  serviceMonitorSelector: {matchLabels: {app.kubernetes.io/part-of: csi-resizer}}
  ruleNamespaceSelector: {}
  ruleSelector: {matchLabels: {prometheus: k8s, role: alert-rules}}
---
apiVersion: v1
kind: Service
metadata: {name: prometheus-incluster-api, namespace: %[1]s}
spec:
  type: NodePort
  selector: {operator.prometheus.io/name: incluster}
  ports: [{name: web, port: 9090, targetPort: web}]
`, promNS, promImage, promSA)
	if out, err := c.KubectlWithInput(t, objects, "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Cleanup(func() {
		if _, err := c.KubectlWithInput(t, objects, "delete", "--ignore-not-found", "--wait=true", "--timeout=120s", "-f", "-"); err != nil {
			t.Error(err)
		}
	})
	start := time.Now()
	ctx := context.Background()
	svc, err := c.Client.CoreV1().Services(promNS).Get(ctx, "prometheus-incluster-api", metav1.GetOptions{})
	if err != nil || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].NodePort == 0 {
		t.Fatalf("Service %s/prometheus-incluster-api has no node port: %v %+v", promNS, err, svc)
	}
	p := &opsPrometheus{api: fmt.Sprintf("http://%s:%d", c.NodeIP, svc.Spec.Ports[0].NodePort)}
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.api+"/-/ready", nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		pods, _ := c.Kubectl(t, "-n", promNS, "get", "pods,statefulsets", "-o", "wide")
		desc, _ := c.Kubectl(t, "-n", promNS, "describe", "pods", "-l", "operator.prometheus.io/name=incluster")
		t.Fatalf("the operator's Prometheus %s/incluster is not ready at %s within 3m: %v\n%s\n%s", promNS, p.api, err, pods, tail(desc, 40))
	}
	t.Logf("the operator's Prometheus %s/incluster (StatefulSet prometheus-incluster, images %s and %s) ready in %s at %s",
		promNS, promImage, promReloaderImage, time.Since(start).Round(time.Second), p.api)
	return p
}

// promShortForRule is a PrometheusRule of the test's copy of CSIResizerVolumeInfeasible (the file
// shortFor), labelled as the shipped one, so that the operator gives it to every Prometheus it
// configures.
func promShortForRule(t *testing.T, shortFor string) string {
	t.Helper()
	data, err := os.ReadFile(shortFor)
	if err != nil {
		t.Fatal(err)
	}
	var spec map[string]any
	if err := yaml.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	out, err := yaml.Marshal(map[string]any{
		"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
		"metadata": map[string]any{"name": "csi-resizer-short-for", "namespace": promNS,
			"labels": map[string]string{"prometheus": "k8s", "role": "alert-rules"}},
		"spec": spec,
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}
