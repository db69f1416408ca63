//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// TestJSONLogging: one convention for both binaries. With --logging-format=json, every line
// csi-resizer, statefulset-resizer and `statefulset-resizer wait` write on stderr is a JSON
// object, on the real control plane, through a StatefulSet resize (-v=4, so the verbose lines
// too), wait's progress lines, its success, its timeout and its failure to start (exit 3), and
// both controllers' SIGTERM.
func TestJSONLogging(t *testing.T) {
	e := scenario.Start(t, scenario.Options{Cluster: framework.ClusterOptions{ControllerManager: true}, ResizerArgs: []string{"--logging-format=json"}})
	kubeconfig := scenario.ApplyStatefulSetResizerRBAC(t, e.Cluster, e.Namespace)
	ssr := e.StartStatefulSetResizer(t, kubeconfig, "--logging-format=json", "--leader-election")
	e.CreateStatefulSet(t, e.NewStatefulSet(scenario.StatefulSetOptions{Name: "web", Replicas: 2, Policy: appsv1.ParallelPodManagement, Size: "1Gi"}))
	e.WaitTemplateStatus(t, "web", stsTimeout, scenario.Finished)

	// With the resizer stopped the PVCs cannot grow: wait's first look is a progress line.
	if err := e.Resizer.Stop(); err != nil {
		t.Fatal(err)
	}
	e.RecreateStatefulSet(t, "web", scenario.WithSize("2Gi"))
	waiting := e.StartWait(t, kubeconfig, "web", "--timeout", stsTimeout.String(), "--logging-format=json")
	framework.Eventually(t, stsTimeout, func() (bool, string) {
		return e.ClaimRequests(t, "web", 2)[0] == "2Gi", "the PVCs were not raised"
	})
	e.Resizer.Start(t)
	r := waiting.Result(t)
	if r.Code != 0 || !strings.HasPrefix(r.Stdout, "StatefulSet "+e.Namespace+"/web: ") || strings.Count(r.Stdout, "\n") != 1 {
		t.Errorf("wait: %s; want exit 0 and its one success line on stdout", r)
	}
	if entries := jsonLines(t, "wait", r.Stderr); countMsg(entries, "Waiting for StatefulSet") == 0 {
		t.Errorf("wait logged no progress line: %s", r.Stderr)
	}

	timedOut := e.Wait(t, kubeconfig, "missing", "--timeout", "2s", "--logging-format=json")
	entries := jsonLines(t, "wait --timeout 2s", timedOut.Stderr)
	if timedOut.Code != 2 || countMsg(entries, "Waiting for StatefulSet") == 0 || countMsg(entries, "Wait ended without the volumes resized") != 1 {
		t.Errorf("wait for a missing StatefulSet: %s; want exit 2, a progress line and the timeout", timedOut)
	}
	noConfig := e.Wait(t, "/nonexistent/kubeconfig", "web", "--logging-format=json")
	entries = jsonLines(t, "wait --kubeconfig /nonexistent/kubeconfig", noConfig.Stderr)
	if noConfig.Code != 3 || len(entries) != 1 || !strings.Contains(fmt.Sprint(entries[0]["err"]), "/nonexistent/kubeconfig") {
		t.Errorf("wait with a missing kubeconfig: %s; want exit 3 and one JSON line naming the file", noConfig)
	}

	for _, p := range []*framework.Process{ssr, e.Resizer} {
		if err := p.Stop(); err != nil {
			t.Error(err)
		}
		if code := p.ExitCode(); code != 0 {
			t.Errorf("%s exited %d on SIGTERM, want 0", p.Name, code)
		}
		if entries := scenario.JSONLog(t, p); len(entries) < 10 {
			t.Errorf("%s logged %d lines: want its whole run", p.Name, len(entries))
		}
	}
}

// jsonLines parses output, one JSON object per line, failing the test for each line that is not.
func jsonLines(t *testing.T, what, output string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimRight(output, "\n"), "\n") {
		var obj map[string]any
		if err := json.Unmarshal([]byte(line), &obj); err != nil {
			t.Errorf("%s: stderr line is not a JSON object (%v): %q", what, err, line)
			continue
		}
		out = append(out, obj)
	}
	return out
}

func countMsg(entries []map[string]any, msg string) int {
	n := 0
	for _, e := range entries {
		if e["msg"] == msg {
			n++
		}
	}
	return n
}
