//go:build integration

package integration

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// promTimeout bounds each wait for Prometheus to see something (scrapes and rule evaluations
// run every second).
const promTimeout = 60 * time.Second

// A real Prometheus server scrapes the resizer through an infeasible expansion and its
// recovery (KEP-1790), with the shipped rules loaded: the recovery metrics of docs/metrics.md
// must read right through PromQL, and every shipped rule must evaluate without error against
// the real series.
func TestPrometheusScrapesInfeasibleRecovery(t *testing.T) {
	promBin := prometheusBinary(t)
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	rulesFile := filepath.Join(root, shippedRules)
	wantGroups := ruleFileGroups(t, rulesFile)
	dash := loadDashboard(t)

	// --retry-interval-max=3s: the infeasible PVC is retried every 3s instead of every 5 min.
	// The infeasible answer is injected: the mock even when E2E_DRIVER_* name a real driver.
	e := startMock(t, scenario.Options{ResizerArgs: []string{"--retry-interval-max=3s"}})
	prom := startPrometheus(t, promBin, e.Resizer.HTTPAddr, rulesFile)
	t.Logf("%s: prometheus at %s scraping the resizer at %s", promVersion(t, promBin), prom.URL, e.Resizer.HTTPAddr)

	prom.WaitQuery(t, promTimeout, fmt.Sprintf(`up{job=%q}`, prometheusScrapeJob), "one target, up",
		oneSample(func(v float64) bool { return v == 1 }))
	// The shipped rule groups loaded and evaluate: the first check, before any PVC exists.
	prom.WaitRulesHealthy(t, promTimeout, wantGroups, time.Now())

	// The infeasible expansion: the driver rejects every size from 100Gi with OUT_OF_RANGE.
	e.NewClaim(t, "data", "1Gi")
	e.Driver.SetFaults(t, []framework.Fault{{
		Method: "ControllerExpandVolume", Code: codes.OutOfRange,
		Message: "the backend cannot grow a volume to 100Gi or more", MinRequiredBytes: bytesOf("100Gi"),
	}})
	infeasibleSince := time.Now()
	e.SetRequest(t, "data", "100Gi")

	infeasible := fmt.Sprintf(`csi_resizer_volume_infeasible{namespace=%q, persistentvolumeclaim="data"}`, e.Namespace)
	got := prom.WaitQuery(t, promTimeout, infeasible, "one series with value 1",
		oneSample(func(v float64) bool { return v == 1 }))
	if l := got[0].Metric; l["driver_name"] != e.Driver.Name || l["job"] != prometheusScrapeJob {
		t.Errorf("infeasible series labels %v, want driver_name=%q job=%q", l, e.Driver.Name, prometheusScrapeJob)
	}
	sawInfeasible := time.Now()
	// The shipped alert picks the stuck PVC up from the real series (pending: it has a
	// `for: 15m`), with the PVC's namespace and name.
	framework.Eventually(t, promTimeout, func() (bool, string) {
		groups, err := prom.Rules()
		if err != nil {
			return false, err.Error()
		}
		r := findAlertingRule(groups, "CSIResizerVolumeInfeasible")
		if r == nil {
			return false, "no alerting rule CSIResizerVolumeInfeasible loaded"
		}
		for _, a := range r.Alerts {
			if a.Labels["namespace"] == e.Namespace && a.Labels["persistentvolumeclaim"] == "data" &&
				a.Labels["driver_name"] == e.Driver.Name && a.State == "pending" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("CSIResizerVolumeInfeasible state %q, alerts %+v; want a pending alert for %s/data", r.State, r.Alerts, e.Namespace)
	})
	// Every rule evaluated with the infeasible series (and the expand error counter) present.
	prom.WaitRulesHealthy(t, promTimeout, wantGroups, sawInfeasible)

	// The shipped dashboard, with its variables filled the way Grafana fills them, shows the
	// stuck PVC. The error rate is above 0 although this was the driver's first error: the
	// counter was exported at 0 before it.
	vars := dash.resolveVariables(t, prom)
	if got := vars["job"]; len(got) != 1 || got[0] != prometheusScrapeJob {
		t.Errorf("dashboard variable job = %v, want [%s]", got, prometheusScrapeJob)
	}
	if got := vars["driver_name"]; len(got) != 1 || got[0] != e.Driver.Name {
		t.Errorf("dashboard variable driver_name = %v, want [%s]", got, e.Driver.Name)
	}
	stuck := map[string]string{"namespace": e.Namespace, "persistentvolumeclaim": "data", "driver_name": e.Driver.Name}
	checkDashboard(t, prom, dash, vars, map[string]func([]promSample) (bool, string){
		"stat Infeasible PVCs":                                  stat(1),
		"table Infeasible PVCs":                                 rowsWith(stuck, true),
		"stat PVCs in a resize state":                           stat(1),
		"timeseries PVCs per resize state":                      rowsWith(map[string]string{"state": "ControllerResizeInfeasible"}, true),
		"timeseries Expand errors / min by gRPC code and class": rowsWith(map[string]string{"grpc_code": "OutOfRange", "class": "infeasible"}, true),
	})

	// Recovery: lower the request below the allocated 100Gi, to a size the driver accepts.
	e.SetRequest(t, "data", "2Gi")
	e.WaitClaim(t, "data", resizeTimeout, scenario.Done("2Gi"))

	prom.WaitQuery(t, promTimeout, `csi_resizer_volume_recovery_total{state="success"}`, "one series with value 1",
		oneSample(func(v float64) bool { return v == 1 }))
	// The gauge's series goes away when the PVC leaves the infeasible state (a stale marker
	// at the next scrape); a 0 would do as well.
	prom.WaitQuery(t, promTimeout, infeasible, "no series, or 0", noneOrZero)
	goneAt := time.Now()
	// The PromQL comparison of the issue, verbatim.
	prom.WaitQuery(t, promTimeout, `csi_resizer_volume_recovery_total{state="success"} == 1`, "one series",
		func(res []promSample) bool { return len(res) == 1 })
	prom.WaitQuery(t, promTimeout, `csi_resizer_controller_expand_errors_total{class="infeasible", grpc_code="OutOfRange"} >= 1`,
		"one series >= 1", oneSample(func(v float64) bool { return v >= 1 }))
	prom.WaitQuery(t, promTimeout, `csi_resizer_volumes{state="none"}`, "one series >= 1",
		oneSample(func(v float64) bool { return v >= 1 }))
	for _, expr := range []string{
		`csi_resizer_volume_recovery_total{state="failure"}`,
		`csi_resizer_volumes{state="ControllerResizeInfeasible"}`,
		`csi_resizer_volume_infeasible`,
	} {
		if res, err := prom.Query(expr); err != nil || !noneOrZero(res) {
			t.Errorf("after the recovery, %s = %s (err %v), want no series or 0", expr, formatSamples(res), err)
		}
	}
	// The recording rules produced series from the real metrics.
	for _, expr := range []string{
		`driver_name_state:csi_resizer_volume_recovery:rate5m{state="success"}`,
		`driver_name_state:csi_resizer_volumes:max{state="none"}`,
		`driver_name_grpc_code_class:csi_resizer_controller_expand_errors:rate5m{class="infeasible", grpc_code="OutOfRange"}`,
		// The modification series exist at 0 before any modification, in the sidecar (the
		// three statuses, the codes with their class) and through the recording rules, so
		// rate() and the dashboard see the first one.
		`csi_resizer_modify_volumes{status="Infeasible"} == 0`,
		`driver_name_status:csi_resizer_modify_volumes:max{status="Pending"} == 0`,
		`csi_resizer_controller_modify_errors_total{grpc_code="InvalidArgument", class="infeasible"} == 0`,
		`driver_name_grpc_code_class:csi_resizer_controller_modify_errors:rate5m{grpc_code="Unavailable", class="transient"} == 0`,
		`driver_name_result:csi_resizer_volume_modifications:rate5m{result="cancelled"} == 0`,
	} {
		prom.WaitQuery(t, promTimeout, expr, "one series of the driver",
			func(res []promSample) bool { return len(res) == 1 && res[0].Metric["driver_name"] == e.Driver.Name })
	}

	// The gauge's history, as a range query: 1 while infeasible, then gone (or 0).
	const step = time.Second
	// The last step of the range must come after goneAt, when an instant query already saw
	// the series gone; a step just before it may still hold the last 1.
	framework.Eventually(t, promTimeout, func() (bool, string) {
		return time.Since(goneAt) > 2*step, "waiting for two steps after the series ended"
	})
	start, end := infeasibleSince.Add(-step).Truncate(time.Millisecond), time.Now().Truncate(time.Millisecond)
	lastStep := start.Add(end.Sub(start).Truncate(step))
	series, err := prom.QueryRange(infeasible, start, end, step)
	if err != nil {
		t.Fatal(err)
	}
	if len(series) != 1 {
		t.Fatalf("range query %s: %d series, want 1: %+v", infeasible, len(series), series)
	}
	pts := series[0].Points
	ones, last := 0, pts[len(pts)-1]
	for _, p := range pts {
		switch p.Value {
		case 1:
			ones++
		case 0:
		default:
			t.Errorf("range query %s: value %g at %s, want only 1 (or 0)", infeasible, p.Value, p.Time)
		}
	}
	// The series ended if the last step has no point (or has a 0).
	if ones == 0 || (last.Value != 0 && !last.Time.Before(lastStep)) {
		t.Errorf("range query %s over [%s, %s] step %v: %d points of 1, last %g at %s; want 1s, then the series ending (or 0)",
			infeasible, start.Format(time.RFC3339Nano), end.Format(time.RFC3339Nano), step, ones, last.Value, last.Time.Format(time.RFC3339Nano))
	}

	// The dashboard after the recovery: nothing stuck, one recovery seen by its rate (the
	// counter was exported at 0 before it), its duration, the driver calls and the queue.
	checkDashboard(t, prom, dash, vars, map[string]func([]promSample) (bool, string){
		"stat Infeasible PVCs":                      stat(0),
		"stat PVCs in a resize state":               stat(0),
		"stat Failed recoveries (24h)":              stat(0),
		"timeseries Recoveries / min":               rowsWith(map[string]string{"state": "success"}, true),
		"timeseries Expansion duration (last hour)": rowsWith(map[string]string{"result": "success"}, true),
		"timeseries State transitions / min":        rowsWith(map[string]string{"from": "none", "to": "ControllerResizeInProgress"}, true),
		"timeseries CSI calls / s by code":          rowsWith(map[string]string{"method_name": "/csi.v1.Controller/ControllerExpandVolume"}, false),
		"timeseries Work queue depth":               rowsWith(map[string]string{"name": e.Driver.Name + "-pvc"}, false), // upstream's queue name
	})

	// The rules once more with the recovery counters present; the infeasible alert is gone and
	// none of the others is active (CSIResizerNoLeader would be if the job name did not match).
	groups := prom.WaitRulesHealthy(t, promTimeout, wantGroups, time.Now())
	for _, g := range groups {
		for _, r := range g.Rules {
			if r.Type == "alerting" && r.State != "inactive" {
				t.Errorf("after the recovery, alert %s is %s: %+v", r.Name, r.State, r.Alerts)
			}
		}
	}
}

// promVersion returns the first line of `prometheus --version`.
func promVersion(t *testing.T, binary string) string {
	t.Helper()
	out, err := exec.Command(binary, "--version").CombinedOutput()
	if err != nil {
		return fmt.Sprintf("prometheus --version: %v", err)
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return line
}
