//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/csi-resizer/csi-resizer/test/framework"
)

// shippedDashboard is the Grafana dashboard, relative to the repository root.
const shippedDashboard = "deploy/grafana/csi-resizer-dashboard.json"

// dashboardRateInterval stands in for Grafana's $__rate_interval: at least four scrape
// intervals (1 s here), as Grafana computes it.
const dashboardRateInterval = "15s"

// dashboard is what these tests read of the shipped Grafana dashboard: its query variables
// and, per panel, the PromQL of its queries.
type dashboard struct {
	Variables []dashboardVariable
	Panels    []dashboardPanel
}

type dashboardVariable struct {
	Name  string
	Query string // label_values(<selector>, <label>)
}

type dashboardPanel struct {
	Type, Title string
	Exprs       []string
}

// key names a panel the way a person reading the dashboard does; two panels may share a title.
func (p dashboardPanel) key() string { return p.Type + " " + p.Title }

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, shippedDashboard))
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatalf("%s: %v", shippedDashboard, err)
	}
	var d dashboard
	for _, v := range raw.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("%s: variable %s: query: %v", shippedDashboard, v.Name, err)
		}
		d.Variables = append(d.Variables, dashboardVariable{Name: v.Name, Query: q.Query})
	}
	for _, p := range raw.Panels {
		if p.Type == "row" {
			continue
		}
		panel := dashboardPanel{Type: p.Type, Title: p.Title}
		for _, tg := range p.Targets {
			panel.Exprs = append(panel.Exprs, tg.Expr)
		}
		d.Panels = append(d.Panels, panel)
	}
	return d
}

// unresolvedVariable finds a Grafana variable left in a query ($name or ${name}); label_replace's
// "$1" is PromQL's, not Grafana's.
var unresolvedVariable = regexp.MustCompile(`\$\{?[A-Za-z_]`)

var labelValuesQuery = regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

// resolveVariables asks Prometheus for each query variable's values in dashboard order, the
// way Grafana fills its drop-downs (label_values(selector, label) = the label's values over
// the series the selector matches), and returns them.
func (d dashboard) resolveVariables(t *testing.T, prom *promServer) map[string][]string {
	t.Helper()
	values := map[string][]string{}
	for _, v := range d.Variables {
		m := labelValuesQuery.FindStringSubmatch(v.Query)
		if m == nil {
			t.Fatalf("%s: variable %s: query %q is not label_values(selector, label)", shippedDashboard, v.Name, v.Query)
		}
		selector, label := substituteVariables(m[1], values), m[2]
		var series []map[string]string
		if err := prom.apiGet("series", url.Values{"match[]": {selector}}, &series); err != nil {
			t.Fatalf("variable %s: %v", v.Name, err)
		}
		seen := map[string]bool{}
		for _, s := range series {
			if val, ok := s[label]; ok && !seen[val] {
				seen[val] = true
				values[v.Name] = append(values[v.Name], val)
			}
		}
		sort.Strings(values[v.Name])
	}
	return values
}

// substituteVariables replaces $name and ${name} with the variable's values as Grafana does
// for a multi-value variable inside a regex matcher: (a|b), escaped for a PromQL string. $__rate_interval becomes
// dashboardRateInterval.
func substituteVariables(expr string, values map[string][]string) string {
	expr = strings.ReplaceAll(expr, "$__rate_interval", dashboardRateInterval)
	names := make([]string, 0, len(values))
	for n := range values {
		names = append(names, n)
	}
	// Longer names first, so $job never eats the start of a $jobs.
	sort.Slice(names, func(i, j int) bool { return len(names[i]) > len(names[j]) })
	for _, n := range names {
		quoted := make([]string, len(values[n]))
		for i, v := range values[n] {
			// As Grafana does: regex-escaped, then the backslashes doubled, since the value
			// lands inside a PromQL string literal.
			quoted[i] = strings.ReplaceAll(regexp.QuoteMeta(v), `\`, `\\`)
		}
		val := "(" + strings.Join(quoted, "|") + ")"
		expr = strings.ReplaceAll(expr, "${"+n+"}", val)
		expr = strings.ReplaceAll(expr, "$"+n, val)
	}
	return expr
}

// checkDashboard evaluates every query of the shipped dashboard against the real Prometheus
// with the variables as Grafana would fill them, and fails when a query is rejected, leaves a
// variable unresolved, or a panel in want does not show what the scenario put there. Panels in
// want wait up to promTimeout (rules are evaluated every second); the rest are checked once.
func checkDashboard(t *testing.T, prom *promServer, d dashboard, vars map[string][]string, want map[string]func([]promSample) (bool, string)) {
	t.Helper()
	found := map[string]bool{}
	for _, p := range d.Panels {
		check := want[p.key()]
		found[p.key()] = found[p.key()] || check != nil
		for _, raw := range p.Exprs {
			expr := substituteVariables(raw, vars)
			if unresolvedVariable.MatchString(expr) {
				t.Errorf("panel %q: unresolved variable in %s", p.key(), expr)
				continue
			}
			if check == nil {
				if _, err := prom.Query(expr); err != nil {
					t.Errorf("panel %q: Prometheus rejects its query: %v", p.key(), err)
				}
				continue
			}
			framework.Eventually(t, promTimeout, func() (bool, string) {
				res, err := prom.Query(expr)
				if err != nil {
					return false, fmt.Sprintf("panel %q: %v", p.key(), err)
				}
				ok, why := check(res)
				return ok, fmt.Sprintf("panel %q, %s = %s: %s", p.key(), expr, formatSamples(res), why)
			})
		}
	}
	for k := range want {
		if !found[k] {
			t.Errorf("the dashboard has no panel %q", k)
		}
	}
}

// stat is a check for a single-number panel.
func stat(want float64) func([]promSample) (bool, string) {
	return func(res []promSample) (bool, string) {
		return len(res) == 1 && res[0].Value == want, fmt.Sprintf("want one value %g", want)
	}
}

// rowsWith is a check for a panel whose series must include one with all the given labels
// (and, with positive, a value above 0: a rate that saw the event).
func rowsWith(labels map[string]string, positive bool) func([]promSample) (bool, string) {
	return func(res []promSample) (bool, string) {
		for _, s := range res {
			match := !positive || s.Value > 0
			for k, v := range labels {
				match = match && s.Metric[k] == v
			}
			if match {
				return true, ""
			}
		}
		if positive {
			return false, fmt.Sprintf("want a series with %v above 0", labels)
		}
		return false, fmt.Sprintf("want a series with %v", labels)
	}
}

// TestDashboardVariables pins the helper's substitution, so a dashboard check cannot pass
// because a variable silently stayed in the query.
func TestDashboardVariables(t *testing.T) {
	got := substituteVariables(`rate(x{job=~"$job", d=~"${driver_name}"}[$__rate_interval])`,
		map[string][]string{"job": {"csi-resizer"}, "driver_name": {"a.example.com", "b"}})
	want := `rate(x{job=~"(csi-resizer)", d=~"(a\\.example\\.com|b)"}[` + dashboardRateInterval + `])`
	if got != want {
		t.Errorf("substituteVariables = %s, want %s", got, want)
	}
	for expr, want := range map[string]bool{`label_replace(x, "a", "$1", "b", "(.+)")`: false, `x{job=~"$job"}`: true, `x{d=~"${driver_name}"}`: true} {
		if got := unresolvedVariable.MatchString(expr); got != want {
			t.Errorf("unresolvedVariable(%s) = %v, want %v", expr, got, want)
		}
	}
}
