// Package prometheus_test checks the shipped Prometheus rules without promtool, so that
// `go test ./...` catches drift and missing runbooks even where promtool is not installed.
// The PromQL itself is checked by hack/check-prometheus-rules.sh (promtool check/test rules).
package prometheus_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const (
	rulesFile     = "rules.yaml"
	rulesTestFile = "rules_test.yaml"
	crFile        = "../kubernetes/monitoring/prometheusrule.yaml"
	docsFile      = "../../docs/metrics.md"
	dashboardFile = "../grafana/csi-resizer-dashboard.json"
	runbookPrefix = "https://github.com/csi-resizer/csi-resizer/blob/main/docs/metrics.md#"
)

type rule struct {
	Record      string            `json:"record"`
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

type group struct {
	Name  string `json:"name"`
	Rules []rule `json:"rules"`
}

func readYAML(t *testing.T, path string, into interface{}) {
	t.Helper()
	data, err := os.ReadFile(filepath.FromSlash(path))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func alerts(t *testing.T) []rule {
	t.Helper()
	var f struct {
		Groups []group `json:"groups"`
	}
	readYAML(t, rulesFile, &f)
	var out []rule
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s has no alerts", rulesFile)
	}
	return out
}

// TestPrometheusRuleMatchesRulesFile: the PrometheusRule carries exactly the groups of
// rules.yaml (regenerate with hack/check-prometheus-rules.sh --update).
func TestPrometheusRuleMatchesRulesFile(t *testing.T) {
	var plain map[string]interface{}
	readYAML(t, rulesFile, &plain)
	var cr struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name   string            `json:"name"`
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec map[string]interface{} `json:"spec"`
	}
	readYAML(t, crFile, &cr)

	if cr.APIVersion != "monitoring.coreos.com/v1" || cr.Kind != "PrometheusRule" || cr.Metadata.Name != "csi-resizer" {
		t.Errorf("%s: got %s %s %q, want monitoring.coreos.com/v1 PrometheusRule \"csi-resizer\"",
			crFile, cr.APIVersion, cr.Kind, cr.Metadata.Name)
	}
	if len(plain) != 1 || plain["groups"] == nil {
		t.Errorf("%s: want only a top-level groups key, got %d keys", rulesFile, len(plain))
	}
	if !reflect.DeepEqual(plain, cr.Spec) {
		t.Errorf("%s spec differs from %s; run hack/check-prometheus-rules.sh --update", crFile, rulesFile)
	}
}

// TestAlertsHaveRunbooks: every alert has a severity, a summary, a description and a
// runbook_url whose anchor is a section of docs/metrics.md named after the alert.
func TestAlertsHaveRunbooks(t *testing.T) {
	docs, err := os.ReadFile(filepath.FromSlash(docsFile))
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	heading := regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*$`)
	for _, m := range heading.FindAllStringSubmatch(string(docs), -1) {
		anchors[githubAnchor(m[1])] = true
	}

	seen := map[string]bool{}
	for _, a := range alerts(t) {
		if seen[a.Alert] {
			t.Errorf("alert %s defined twice", a.Alert)
		}
		seen[a.Alert] = true
		switch a.Labels["severity"] {
		case "critical", "warning", "info":
		default:
			t.Errorf("alert %s: severity %q, want critical, warning or info", a.Alert, a.Labels["severity"])
		}
		for _, k := range []string{"summary", "description", "runbook_url"} {
			if strings.TrimSpace(a.Annotations[k]) == "" {
				t.Errorf("alert %s: annotation %s missing", a.Alert, k)
			}
		}
		want := runbookPrefix + strings.ToLower(a.Alert)
		if got := a.Annotations["runbook_url"]; got != want {
			t.Errorf("alert %s: runbook_url %q, want %q", a.Alert, got, want)
		}
		if !anchors[strings.ToLower(a.Alert)] {
			t.Errorf("alert %s: %s has no section %q", a.Alert, docsFile, a.Alert)
		}
	}
}

// TestEveryAlertHasFiringAndQuietTests: rules_test.yaml has, for every alert, at least
// one case where it fires and one where it must not.
func TestEveryAlertHasFiringAndQuietTests(t *testing.T) {
	var f struct {
		RuleFiles []string `json:"rule_files"`
		Tests     []struct {
			AlertRuleTest []struct {
				Alertname string        `json:"alertname"`
				ExpAlerts []interface{} `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	readYAML(t, rulesTestFile, &f)
	if !reflect.DeepEqual(f.RuleFiles, []string{rulesFile}) {
		t.Errorf("%s: rule_files %v, want [%s]", rulesTestFile, f.RuleFiles, rulesFile)
	}
	firing, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range f.Tests {
		for _, at := range tc.AlertRuleTest {
			if len(at.ExpAlerts) > 0 {
				firing[at.Alertname] = true
			} else {
				quiet[at.Alertname] = true
			}
		}
	}
	for _, a := range alerts(t) {
		if !firing[a.Alert] {
			t.Errorf("%s: no test where %s fires", rulesTestFile, a.Alert)
		}
		if !quiet[a.Alert] {
			t.Errorf("%s: no test where %s does not fire", rulesTestFile, a.Alert)
		}
	}
}

// githubAnchor approximates GitHub's heading anchors: lower case, punctuation other than
// '-' and '_' dropped, spaces to '-'.
func githubAnchor(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	var b strings.Builder
	for _, r := range h {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestDashboard: the Grafana dashboard is valid JSON, takes its data source from the
// `datasource` variable, has a `driver_name` variable, and uses only recording rules that
// rules.yaml defines.
func TestDashboard(t *testing.T) {
	data, err := os.ReadFile(filepath.FromSlash(dashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID        string `json:"uid"`
		Templating struct {
			List []struct {
				Name  string      `json:"name"`
				Type  string      `json:"type"`
				Query interface{} `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Title      string `json:"title"`
			Type       string `json:"type"`
			Datasource *struct {
				UID string `json:"uid"`
			} `json:"datasource"`
			Targets []struct {
				Expr       string `json:"expr"`
				Datasource *struct {
					UID string `json:"uid"`
				} `json:"datasource"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
	}
	if vars["datasource"] != "datasource" {
		t.Errorf("%s: want a datasource variable named datasource, got %v", dashboardFile, vars)
	}
	if _, ok := vars["driver_name"]; !ok {
		t.Errorf("%s: want a driver_name variable, got %v", dashboardFile, vars)
	}

	var f struct {
		Groups []group `json:"groups"`
	}
	readYAML(t, rulesFile, &f)
	records := map[string]bool{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				records[r.Record] = true
			}
		}
	}
	recordRef := regexp.MustCompile(`[a-z_]+:[a-z_]+:[a-z0-9_]+`)
	queries := 0
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource must be ${datasource}", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no queries", p.Title)
		}
		for _, tg := range p.Targets {
			queries++
			if tg.Datasource == nil || tg.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: query datasource must be ${datasource}", p.Title)
			}
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q: empty query", p.Title)
			}
			for _, rec := range recordRef.FindAllString(tg.Expr, -1) {
				if !records[rec] {
					t.Errorf("panel %q uses %s, which %s does not record", p.Title, rec, rulesFile)
				}
			}
		}
	}
	if queries == 0 {
		t.Errorf("%s has no queries", dashboardFile)
	}
}
