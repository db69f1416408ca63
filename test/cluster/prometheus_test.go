//go:build cluster

package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/csi-resizer/csi-resizer/test/framework"
)

// Prometheus as SREs run it next to TestOperations' csi-resizer replicas: Prometheus built from
// its Go module with Kubernetes discovery (hack/build-prometheus.sh), given the README's
// kubernetes_sd_configs line, and the Prometheus Operator (hack/build-prometheus-operator.sh)
// running Prometheus in the cluster from the shipped ServiceMonitor and PrometheusRule
// (deploy/kubernetes/monitoring), with images of the same builds. Both load the shipped
// alerting rules.

const (
	// promNS holds the Prometheus ServiceAccount, the Prometheus object and the shipped
	// monitoring objects (ServiceMonitors, PrometheusRule).
	promNS = "ops-monitoring"
	// promSA is the identity both Prometheus discover targets with.
	promSA = "prometheus"
	// promShortFor is the `for` of the test's copy of CSIResizerVolumeInfeasible.
	promShortFor = "10s"
)

// promBinary is the prometheus (or promtool) of hack/build-prometheus.sh.
func promBinary(t *testing.T, name string) string {
	t.Helper()
	return filepath.Join(hackBuild(t, "build-prometheus.sh"), name)
}

// promVersion is the first line of `prometheus --version`.
func promVersion(bin string) string {
	out, _ := exec.Command(bin, "--version").CombinedOutput()
	first, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(first)
}

// promServiceAccount creates promNS and, in it, the ServiceAccount a Prometheus in the cluster
// would discover targets with: get, list and watch on pods, services, endpoints and
// endpointslices, nothing else. The operator's Prometheus runs as it; the README's runs outside
// the cluster, so it gets that identity as a bound token (an hour) in a file, and a missing
// permission fails its discovery as it would in a pod, which the admin's credentials would hide.
// Returns a kubeconfig with that token.
func promServiceAccount(t *testing.T, c *Cluster) (kubeconfig string) {
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
	tokenFile := filepath.Join(dir, "token")
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
	return kubeconfig
}

// promRuleFiles returns the shipped rules (deploy/prometheus/rules.yaml, as it is) and a copy of
// its CSIResizerVolumeInfeasible alone with `for: promShortFor` in a group of its own
// (<group>.short-for), written into dir: the shipped rule waits 15 minutes before it fires,
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

// promScrapers starts the two ways an SRE scrapes the replicas, each with the shipped alerting
// rules and the test's short-`for` copy of CSIResizerVolumeInfeasible: the README's
// kubernetes_sd_configs line (opsScrapePrometheus, scrape pool csi-resizer) and the operator's
// Prometheus in the cluster, configured from the shipped ServiceMonitor (scrape pool
// serviceMonitor/ops-monitoring/csi-resizer/0). It returns them once each has discovered every
// replica and scrapes it up (the README's first: the recovery counter is read there).
func promScrapers(t *testing.T, c *Cluster) []*opsPrometheus {
	t.Helper()
	kubeconfig := promServiceAccount(t, c)
	rules := promRuleFiles(t, t.TempDir())
	readme := opsScrapePrometheus(t, c, kubeconfig, rules)
	promOperator(t, c, rules[1])
	operated := promInCluster(t, c)
	promWaitDiscovered(t, c, readme, "csi-resizer", time.Minute)
	// The ServiceMonitor's interval is 30s: the first scrape may come that late.
	promWaitDiscovered(t, c, operated, "serviceMonitor/"+promNS+"/csi-resizer/0", 2*time.Minute)
	return []*opsPrometheus{readme, operated}
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
