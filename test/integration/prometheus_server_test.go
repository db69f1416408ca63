//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/csi-resizer/csi-resizer/test/framework"
)

// A real Prometheus server (Debian's `prometheus` package) run by a test as a separate process
// on 127.0.0.1, with a generated configuration, and a small client of its HTTP API
// (net/http + encoding/json, no client library).

// envSkipPrometheus set to 1 skips the tests that need the prometheus binary.
const envSkipPrometheus = "CSI_RESIZER_SKIP_PROMETHEUS"

// shippedRules is the rule file that ships with the product, relative to the repository root.
const shippedRules = "deploy/prometheus/rules.yaml"

// prometheusScrapeJob is the job name of the generated scrape config: the static job name
// docs/metrics.md asks for, which CSIResizerNoLeader's up{job=~...} selectors expect.
const prometheusScrapeJob = "csi-resizer"

// prometheusReadyTimeout bounds the wait for /-/ready (TSDB opened, rules loaded).
const prometheusReadyTimeout = 60 * time.Second

// prometheusBinary returns the path of the prometheus server binary. A missing binary fails
// the test (CI installs it through hack/check-prometheus-rules.sh); CSI_RESIZER_SKIP_PROMETHEUS=1
// skips the test instead.
func prometheusBinary(t *testing.T) string {
	t.Helper()
	if os.Getenv(envSkipPrometheus) == "1" {
		t.Skipf("%s=1: skipping the test against a real Prometheus server", envSkipPrometheus)
	}
	p, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("the prometheus server binary is not on PATH (%v): run `apt-get install prometheus` "+
			"(Debian; hack/check-prometheus-rules.sh installs it too), or set %s=1 to skip this test",
			err, envSkipPrometheus)
	}
	return p
}

// promServer is a running Prometheus server.
type promServer struct {
	Proc *framework.Process
	URL  string // http://127.0.0.1:<port>
	// Config is the generated prometheus.yml, for failure messages.
	Config string
	client *http.Client
}

// startPrometheus runs the prometheus binary with its own TSDB in a temp dir of t, listening
// on a free port of 127.0.0.1, scraping target (host:port, /metrics) every second as job
// prometheusScrapeJob and evaluating ruleFiles every second. It waits until the server is
// ready. The process is killed when the test ends (framework.StartProcess).
func startPrometheus(t *testing.T, binary, target string, ruleFiles ...string) *promServer {
	t.Helper()
	var rules strings.Builder
	for _, f := range ruleFiles {
		fmt.Fprintf(&rules, "  - %q\n", f)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
%sscrape_configs:
  - job_name: %q
    metrics_path: /metrics
    static_configs:
      - targets: [%q]
`, rules.String(), prometheusScrapeJob, target)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}

	// FreePort releases the port before Prometheus binds it; another process may take it in
	// between, so a start that fails with "address already in use" is retried on a new port.
	const attempts = 3
	for i := 1; ; i++ {
		addr := fmt.Sprintf("127.0.0.1:%d", framework.FreePort(t))
		proc := framework.StartProcess(t, "prometheus", binary,
			"--config.file="+cfgPath,
			"--storage.tsdb.path="+filepath.Join(dir, fmt.Sprintf("data-%d", i)),
			"--web.listen-address="+addr,
			"--log.level=info",
		)
		s := &promServer{Proc: proc, URL: "http://" + addr, Config: cfg, client: &http.Client{Timeout: 10 * time.Second}}
		err := s.waitReady(prometheusReadyTimeout)
		if err == nil {
			return s
		}
		if exited, _ := proc.Exited(); exited && i < attempts && proc.LogContains("address already in use") {
			t.Logf("prometheus could not bind %s (taken meanwhile); retrying on another port", addr)
			continue
		}
		t.Fatalf("prometheus did not become ready: %v\nconfig:\n%s\nlog:\n%s", err, cfg, proc.LogTail(60))
	}
}

// waitReady polls /-/ready until it answers 200, the process exits, or timeout passes.
func (s *promServer) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(framework.PollInterval)
	defer tick.Stop()
	for {
		if exited, err := s.Proc.Exited(); exited {
			return fmt.Errorf("prometheus exited during start-up: %v", err)
		}
		resp, err := s.client.Get(s.URL + "/-/ready")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET /-/ready: %s", resp.Status)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %v", timeout, err)
		}
		<-tick.C
	}
}

// apiGet calls GET /api/v1/<path>?params and decodes the response's data into out.
func (s *promServer) apiGet(path string, params url.Values, out any) error {
	u := s.URL + "/api/v1/" + path
	if len(params) > 0 {
		u += "?" + params.Encode()
	}
	resp, err := s.client.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("GET %s: %v", u, err)
	}
	var env struct {
		Status    string          `json:"status"`
		Data      json.RawMessage `json:"data"`
		ErrorType string          `json:"errorType"`
		Error     string          `json:"error"`
		Warnings  []string        `json:"warnings"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("GET %s: %s: cannot decode %q: %v", u, resp.Status, truncate(string(body), 500), err)
	}
	if env.Status != "success" {
		return fmt.Errorf("GET %s: %s: %s: %s", u, resp.Status, env.ErrorType, env.Error)
	}
	if err := json.Unmarshal(env.Data, out); err != nil {
		return fmt.Errorf("GET %s: cannot decode data %q: %v", u, truncate(string(env.Data), 500), err)
	}
	return nil
}

// promSample is one element of an instant vector.
type promSample struct {
	Metric map[string]string
	Time   time.Time
	Value  float64
}

func (s promSample) String() string {
	keys := make([]string, 0, len(s.Metric))
	for k := range s.Metric {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var l []string
	for _, k := range keys {
		l = append(l, fmt.Sprintf("%s=%q", k, s.Metric[k]))
	}
	return fmt.Sprintf("{%s} %g", strings.Join(l, ", "), s.Value)
}

// promSeries is one element of a range query's matrix.
type promSeries struct {
	Metric map[string]string
	Points []promPoint
}

type promPoint struct {
	Time  time.Time
	Value float64
}

// parsePoint decodes the API's [<unix seconds>, "<value>"] pair.
func parsePoint(raw [2]json.RawMessage) (promPoint, error) {
	var ts float64
	if err := json.Unmarshal(raw[0], &ts); err != nil {
		return promPoint{}, fmt.Errorf("timestamp %s: %v", raw[0], err)
	}
	var vs string
	if err := json.Unmarshal(raw[1], &vs); err != nil {
		return promPoint{}, fmt.Errorf("value %s: %v", raw[1], err)
	}
	v, err := strconv.ParseFloat(vs, 64)
	if err != nil {
		return promPoint{}, fmt.Errorf("value %q: %v", vs, err)
	}
	sec := int64(ts)
	return promPoint{Time: time.Unix(sec, int64((ts-float64(sec))*1e9)), Value: v}, nil
}

// Query runs an instant PromQL query at the server's current time; the result must be an
// instant vector.
func (s *promServer) Query(expr string) ([]promSample, error) {
	var data struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string  `json:"metric"`
			Value  [2]json.RawMessage `json:"value"`
		} `json:"result"`
	}
	if err := s.apiGet("query", url.Values{"query": {expr}}, &data); err != nil {
		return nil, err
	}
	if data.ResultType != "vector" {
		return nil, fmt.Errorf("query %s: result type %q, want vector", expr, data.ResultType)
	}
	out := make([]promSample, 0, len(data.Result))
	for _, r := range data.Result {
		p, err := parsePoint(r.Value)
		if err != nil {
			return nil, fmt.Errorf("query %s: %v", expr, err)
		}
		out = append(out, promSample{Metric: r.Metric, Time: p.Time, Value: p.Value})
	}
	return out, nil
}

// QueryRange runs a range query over [start, end] at step.
func (s *promServer) QueryRange(expr string, start, end time.Time, step time.Duration) ([]promSeries, error) {
	var data struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string    `json:"metric"`
			Values [][2]json.RawMessage `json:"values"`
		} `json:"result"`
	}
	params := url.Values{
		"query": {expr},
		"start": {strconv.FormatFloat(float64(start.UnixMilli())/1000, 'f', 3, 64)},
		"end":   {strconv.FormatFloat(float64(end.UnixMilli())/1000, 'f', 3, 64)},
		"step":  {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)},
	}
	if err := s.apiGet("query_range", params, &data); err != nil {
		return nil, err
	}
	if data.ResultType != "matrix" {
		return nil, fmt.Errorf("query_range %s: result type %q, want matrix", expr, data.ResultType)
	}
	out := make([]promSeries, 0, len(data.Result))
	for _, r := range data.Result {
		ser := promSeries{Metric: r.Metric}
		for _, raw := range r.Values {
			p, err := parsePoint(raw)
			if err != nil {
				return nil, fmt.Errorf("query_range %s: %v", expr, err)
			}
			ser.Points = append(ser.Points, p)
		}
		out = append(out, ser)
	}
	return out, nil
}

// WaitQuery polls the instant query expr until ok accepts its result, failing the test with
// the last result (or error) after timeout. It returns the accepted result.
func (s *promServer) WaitQuery(t *testing.T, timeout time.Duration, expr string, want string, ok func([]promSample) bool) []promSample {
	t.Helper()
	var got []promSample
	framework.Eventually(t, timeout, func() (bool, string) {
		res, err := s.Query(expr)
		if err != nil {
			return false, fmt.Sprintf("query %s: %v", expr, err)
		}
		got = res
		return ok(res), fmt.Sprintf("Prometheus query %s = %s, want %s", expr, formatSamples(res), want)
	})
	return got
}

func formatSamples(res []promSample) string {
	if len(res) == 0 {
		return "<no series>"
	}
	var s []string
	for _, r := range res {
		s = append(s, r.String())
	}
	return "[" + strings.Join(s, " | ") + "]"
}

// oneSample accepts a result of exactly one series whose value satisfies ok.
func oneSample(ok func(float64) bool) func([]promSample) bool {
	return func(res []promSample) bool { return len(res) == 1 && ok(res[0].Value) }
}

// noneOrZero accepts a result without series, or with only 0s.
func noneOrZero(res []promSample) bool {
	for _, r := range res {
		if r.Value != 0 {
			return false
		}
	}
	return true
}

// promRuleGroup and promRule are the parts of /api/v1/rules the tests read.
type promRuleGroup struct {
	Name           string     `json:"name"`
	File           string     `json:"file"`
	Rules          []promRule `json:"rules"`
	LastEvaluation time.Time  `json:"lastEvaluation"`
}

type promRule struct {
	Name           string    `json:"name"`
	Type           string    `json:"type"` // "recording" | "alerting"
	Health         string    `json:"health"`
	LastError      string    `json:"lastError"`
	LastEvaluation time.Time `json:"lastEvaluation"`
	State          string    `json:"state"` // alerting: "inactive" | "pending" | "firing"
	Alerts         []struct {
		Labels map[string]string `json:"labels"`
		State  string            `json:"state"`
		Value  string            `json:"value"`
	} `json:"alerts"`
}

// Rules returns the loaded rule groups.
func (s *promServer) Rules() ([]promRuleGroup, error) {
	var data struct {
		Groups []promRuleGroup `json:"groups"`
	}
	if err := s.apiGet("rules", nil, &data); err != nil {
		return nil, err
	}
	return data.Groups, nil
}

// ruleFileGroups reads a Prometheus rule file and returns its group names and the number of
// rules in each.
func ruleFileGroups(t *testing.T, path string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Name  string            `json:"name"`
			Rules []json.RawMessage `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("parsing %s: %v", path, err)
	}
	out := map[string]int{}
	for _, g := range f.Groups {
		out[g.Name] = len(g.Rules)
	}
	if len(out) == 0 {
		t.Fatalf("%s has no rule groups", path)
	}
	return out
}

// WaitRulesHealthy waits until Prometheus has loaded exactly the groups of want (name → number
// of rules) and evaluated every rule after since, then requires every rule's health to be
// "ok" with no error. It returns the groups of that evaluation.
func (s *promServer) WaitRulesHealthy(t *testing.T, timeout time.Duration, want map[string]int, since time.Time) []promRuleGroup {
	t.Helper()
	var groups []promRuleGroup
	framework.Eventually(t, timeout, func() (bool, string) {
		var err error
		if groups, err = s.Rules(); err != nil {
			return false, err.Error()
		}
		got := map[string]int{}
		for _, g := range groups {
			got[g.Name] = len(g.Rules)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return false, fmt.Sprintf("loaded rule groups (name: rules) %v, want %v", got, want)
		}
		for _, g := range groups {
			for _, r := range g.Rules {
				if !r.LastEvaluation.After(since) {
					return false, fmt.Sprintf("rule %s/%s last evaluated at %s, waiting for an evaluation after %s",
						g.Name, r.Name, r.LastEvaluation.Format(time.RFC3339Nano), since.Format(time.RFC3339Nano))
				}
			}
		}
		return true, ""
	})
	for _, g := range groups {
		for _, r := range g.Rules {
			if r.Health != "ok" || r.LastError != "" {
				t.Errorf("rule %s/%s (%s, %s): health %q, lastError %q", g.Name, r.Name, r.Type, g.File, r.Health, r.LastError)
			}
		}
	}
	return groups
}

// findAlertingRule returns the alerting rule called name, or nil.
func findAlertingRule(groups []promRuleGroup, name string) *promRule {
	for _, g := range groups {
		for i := range g.Rules {
			if g.Rules[i].Type == "alerting" && g.Rules[i].Name == name {
				return &g.Rules[i]
			}
		}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
