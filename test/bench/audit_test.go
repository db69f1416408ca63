//go:build integration

package bench

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The apiserver's audit log attributes every request to its client (user agent), which
// apiserver_request_total cannot: the benchmarks that run several clients (the StatefulSet one:
// kube-controller-manager, statefulset-resizer, csi-resizer, the benchmark) count requests per
// client from it, and the throughput runs use it to cross-check the metric.

// auditPolicy logs every request at Metadata level (no bodies) once, when it completes; long
// running requests (watches) also when their response starts.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
`

// auditArgs writes the policy into dir and returns the kube-apiserver flags that log to
// dir/audit.log.
func auditArgs(tb testing.TB, dir string) (args []string, logPath string) {
	tb.Helper()
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o644); err != nil {
		tb.Fatal(err)
	}
	logPath = filepath.Join(dir, "audit.log")
	return []string{
		"--audit-policy-file=" + policy,
		"--audit-log-path=" + logPath,
		"--audit-log-format=json",
		"--audit-log-maxsize=0",
	}, logPath
}

type auditEvent struct {
	Stage     string `json:"stage"`
	Verb      string `json:"verb"`
	UserAgent string `json:"userAgent"`
	User      struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		APIGroup    string `json:"apiGroup"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	Received time.Time `json:"requestReceivedTimestamp"`
}

// clientRequests are one client's requests in a window, by "verb resource[/subresource]".
type clientRequests struct {
	Reads   int            `json:"reads"`
	Writes  int            `json:"writes"`
	Events  int            `json:"eventWrites"`
	Watches int            `json:"watches"`
	Detail  map[string]int `json:"detail"`
}

// auditByClient counts the audit log's requests received in [from, to), by client: the user
// agent's program name (before the first "/").
func auditByClient(tb testing.TB, logPath string, from, to time.Time) map[string]*clientRequests {
	tb.Helper()
	f, err := os.Open(logPath)
	if err != nil {
		tb.Fatalf("audit log: %v", err)
	}
	defer f.Close()
	out := map[string]*clientRequests{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		var ev auditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			continue
		}
		if ev.Received.Before(from) || !ev.Received.Before(to) {
			continue
		}
		watch := ev.Verb == "watch"
		// A watch is counted when its response starts, every other request when it completes.
		if (watch && ev.Stage != "ResponseStarted") || (!watch && ev.Stage != "ResponseComplete") {
			continue
		}
		client, _, _ := strings.Cut(ev.UserAgent, "/")
		c := out[client]
		if c == nil {
			c = &clientRequests{Detail: map[string]int{}}
			out[client] = c
		}
		what := ev.Verb
		resource := ""
		if ev.ObjectRef != nil {
			resource = ev.ObjectRef.Resource
			if ev.ObjectRef.APIGroup != "" {
				resource += "." + ev.ObjectRef.APIGroup
			}
			if ev.ObjectRef.Subresource != "" {
				resource += "/" + ev.ObjectRef.Subresource
			}
			what += " " + resource
		}
		c.Detail[what]++
		switch ev.Verb {
		case "get", "list":
			c.Reads++
		case "watch":
			c.Watches++
		case "create", "update", "patch", "delete", "deletecollection":
			if ev.ObjectRef != nil && ev.ObjectRef.Resource == "events" {
				c.Events++
			} else {
				c.Writes++
			}
		}
	}
	return out
}
