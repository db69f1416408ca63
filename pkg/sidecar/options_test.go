package sidecar

import (
	"flag"
	"strings"
	"testing"
	"time"
)

// defaults parses an empty command line, as the binary does.
func defaults(t *testing.T) *Options {
	t.Helper()
	// standardflags registers --metrics-path on the global flag set: give it a fresh one, as
	// Main does, so this can run more than once.
	saved := flag.CommandLine
	flag.CommandLine = flag.NewFlagSet("test-global", flag.ContinueOnError)
	t.Cleanup(func() { flag.CommandLine = saved })
	fs := flag.NewFlagSet("csi-resizer", flag.ContinueOnError)
	o := AddFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	// Detach from the global configuration so cases do not see each other's changes.
	common := *o.Common
	o.Common = &common
	return o
}

func TestFlagDefaults(t *testing.T) {
	saved := flag.CommandLine
	flag.CommandLine = flag.NewFlagSet("test-global", flag.ContinueOnError)
	defer func() { flag.CommandLine = saved }()
	fs := flag.NewFlagSet("csi-resizer", flag.ContinueOnError)
	AddFlags(fs)
	for name, want := range upstreamDefaults {
		f := fs.Lookup(name)
		if f == nil {
			t.Errorf("flag --%s is not defined", name)
			continue
		}
		if f.DefValue != want {
			t.Errorf("--%s default = %q, want %q", name, f.DefValue, want)
		}
	}
}

// upstreamDefaults are the external-resizer's flags and defaults (docs/design.md §2.1), as
// flag.FlagSet prints them. TestUpstreamHelp checks them against upstream's binary itself.
var upstreamDefaults = map[string]string{
	"csi-address":                    "/run/csi/socket",
	"kubeconfig":                     "",
	"master":                         "",
	"timeout":                        "10s",
	"workers":                        "10",
	"resync-period":                  "10m0s",
	"retry-interval-start":           "1s",
	"retry-interval-max":             "5m0s",
	"handle-volume-inuse-error":      "true",
	"leader-election":                "false",
	"leader-election-namespace":      "",
	"leader-election-lease-duration": "15s",
	"leader-election-renew-deadline": "10s",
	"leader-election-retry-period":   "5s",
	"leader-election-labels":         "map[]",
	"kube-api-qps":                   "5",
	"kube-api-burst":                 "10",
	"http-endpoint":                  "",
	"metrics-address":                "",
	"metrics-path":                   "/metrics",
	"feature-gates":                  "",
	"extra-modify-metadata":          "false",
	"version":                        "false",
	"automaxprocs":                   "",
	"logging-format":                 "text",
	"log-flush-frequency":            "5s",
	"log-text-split-stream":          "false",
	"log-json-split-stream":          "false",
	"log-text-info-buffer-size":      "0",
	"log-json-info-buffer-size":      "0",
	"v":                              "0",
	"vmodule":                        "",
}

// aheadOfUpstream are csi-resizer's flags that upstream's v2.2 binary (the one the drop-in tests
// compare with) lacks: each is upstream's own, merged or proposed after v2.2, with the default it
// has there. TestUpstreamHelp accepts exactly these beyond upstream's list, so a flag is only
// ever added ahead of upstream on purpose; once upstream's binary has one, its default is
// compared like any other.
var aheadOfUpstream = map[string]struct{ def, why string }{
	"resize-timeout": {"10s", "kubernetes-csi/external-resizer#596, merged 2026-08-05 after v2.2"},
	"modify-timeout": {"10s", "kubernetes-csi/external-resizer#596, merged 2026-08-05 after v2.2"},
	// Proposed upstream (issue #142, PR #573, open), as external-provisioner's and
	// external-snapshotter's --node-deployment; upstream's PR reads NODE_NAME only, --node-name
	// is ours for running outside a pod.
	"node-deployment": {"false", "kubernetes-csi/external-resizer#573 (open), as external-provisioner's --node-deployment"},
	"node-name":       {"", "ours: the node's name where NODE_NAME cannot be set"},
}

func TestFlagsAheadOfUpstream(t *testing.T) {
	saved := flag.CommandLine
	flag.CommandLine = flag.NewFlagSet("test-global", flag.ContinueOnError)
	defer func() { flag.CommandLine = saved }()
	fs := flag.NewFlagSet("csi-resizer", flag.ContinueOnError)
	AddFlags(fs)
	for name, ahead := range aheadOfUpstream {
		f := fs.Lookup(name)
		switch {
		case f == nil:
			t.Errorf("flag --%s (%s) is not defined", name, ahead.why)
		case f.DefValue != ahead.def:
			t.Errorf("--%s default = %q, want upstream's %q (%s)", name, f.DefValue, ahead.def, ahead.why)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Options)
		// want are substrings of the error; none = valid.
		want []string
	}{
		{name: "defaults", change: func(*Options) {}},
		{name: "zero workers", change: func(o *Options) { o.Workers = 0 }, want: []string{"--workers"}},
		{name: "negative workers", change: func(o *Options) { o.Workers = -3 }, want: []string{"--workers", "-3"}},
		{name: "zero timeout", change: func(o *Options) { o.Timeout = 0 }, want: []string{"--timeout"}},
		{name: "zero resize timeout", change: func(o *Options) { o.ResizeTimeout = 0 }, want: []string{"--resize-timeout"}},
		{name: "negative modify timeout", change: func(o *Options) { o.ModifyTimeout = -time.Second }, want: []string{"--modify-timeout", "-1s"}},
		{name: "zero retry start", change: func(o *Options) { o.RetryIntervalStart = 0 }, want: []string{"--retry-interval-start"}},
		{name: "retry start above max", change: func(o *Options) { o.RetryIntervalStart, o.RetryIntervalMax = time.Minute, 30*time.Second },
			want: []string{"--retry-interval-start", "--retry-interval-max"}},
		{name: "retry start equal to max", change: func(o *Options) { o.RetryIntervalStart, o.RetryIntervalMax = time.Minute, time.Minute }},
		{name: "both endpoints", change: func(o *Options) { o.Common.HttpEndpoint, o.Common.MetricsAddress = ":8080", ":8081" },
			want: []string{"--http-endpoint", "--metrics-address"}},
		{name: "http endpoint only", change: func(o *Options) { o.Common.HttpEndpoint = ":8080" }},
		{name: "metrics address only", change: func(o *Options) { o.Common.MetricsAddress = ":8080" }},
		{name: "zero qps", change: func(o *Options) { o.Common.KubeAPIQPS = 0 }, want: []string{"--kube-api-qps"}},
		{name: "zero burst", change: func(o *Options) { o.Common.KubeAPIBurst = 0 }, want: []string{"--kube-api-burst"}},
		{name: "empty csi address", change: func(o *Options) { o.Common.CSIAddress = "" }, want: []string{"--csi-address"}},
		{name: "node deployment", change: func(o *Options) { o.NodeDeployment, o.NodeName = true, "node-1" }},
		{name: "node deployment without a node name", change: func(o *Options) { o.NodeDeployment = true }, want: []string{"--node-deployment", "NODE_NAME", "--node-name"}},
		{name: "node deployment with leader election", change: func(o *Options) { o.NodeDeployment, o.NodeName, o.Common.LeaderElection = true, "node-1", true },
			want: []string{"--node-deployment and --leader-election cannot be used together"}},
		{name: "node name alone", change: func(o *Options) { o.NodeName = "node-1" }, want: []string{"--node-name is only used with --node-deployment"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := defaults(t)
			tc.change(o)
			err := o.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want an error naming %v", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, does not name %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("Validate() = %q, want one line", err)
			}
		})
	}
}

// TestValidateOneLine: several problems at once come back as one line, each problem joined by
// "; ", in flag order, so the binary's single stderr line lists them all.
func TestValidateOneLine(t *testing.T) {
	o := defaults(t)
	o.Workers, o.Timeout, o.Common.CSIAddress = 0, 0, ""
	o.Common.HttpEndpoint, o.Common.MetricsAddress = ":8080", ":8081"
	err := o.Validate()
	if err == nil {
		t.Fatal("Validate() = nil, want an error")
	}
	want := "--workers must be positive, got 0; --timeout must be positive, got 0s; " +
		"only one of --http-endpoint and --metrics-address (deprecated) can be set: use --http-endpoint; " +
		"--csi-address must not be empty"
	if got := err.Error(); got != want {
		t.Errorf("Validate() =\n%q\nwant\n%q", got, want)
	}
	if strings.ContainsAny(err.Error(), "\r\n") {
		t.Errorf("Validate() = %q, want one line", err)
	}
}

// TestResolveTimeouts: upstream's precedence of the call timeouts (kubernetes-csi/
// external-resizer#596): each defaults to 10s; an explicit --timeout, even at its default
// value, is both; otherwise each is its own. --timeout keeps its own value for the socket.
func TestResolveTimeouts(t *testing.T) {
	for _, tc := range []struct {
		args                []string
		socket, resize, mod time.Duration
		notes               []string
	}{
		{args: nil, socket: 10 * time.Second, resize: 10 * time.Second, mod: 10 * time.Second},
		{args: []string{"--resize-timeout=2s", "--modify-timeout=3m"}, socket: 10 * time.Second, resize: 2 * time.Second, mod: 3 * time.Minute},
		{args: []string{"--modify-timeout=3m"}, socket: 10 * time.Second, resize: 10 * time.Second, mod: 3 * time.Minute},
		{args: []string{"--timeout=1m"}, socket: time.Minute, resize: time.Minute, mod: time.Minute},
		{args: []string{"--timeout=10s", "--modify-timeout=3m"}, socket: 10 * time.Second, resize: 10 * time.Second, mod: 10 * time.Second,
			notes: []string{"--timeout=10s is set, so it overrides --modify-timeout"}},
		{args: []string{"--resize-timeout=2s", "-timeout", "30s", "--modify-timeout=3m"}, socket: 30 * time.Second, resize: 30 * time.Second, mod: 30 * time.Second,
			notes: []string{"overrides --resize-timeout", "overrides --modify-timeout"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			saved := flag.CommandLine
			flag.CommandLine = flag.NewFlagSet("test-global", flag.ContinueOnError)
			t.Cleanup(func() { flag.CommandLine = saved })
			fs := flag.NewFlagSet("csi-resizer", flag.ContinueOnError)
			o := AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			o.ResolveTimeouts(fs)
			if o.Timeout != tc.socket || o.ResizeTimeout != tc.resize || o.ModifyTimeout != tc.mod {
				t.Errorf("timeout, resize, modify = %s, %s, %s; want %s, %s, %s", o.Timeout, o.ResizeTimeout, o.ModifyTimeout, tc.socket, tc.resize, tc.mod)
			}
			if len(o.startupNotes) != len(tc.notes) {
				t.Fatalf("start-up notes %q, want %d", o.startupNotes, len(tc.notes))
			}
			for i, n := range tc.notes {
				if !strings.Contains(o.startupNotes[i], n) {
					t.Errorf("note %q does not say %q", o.startupNotes[i], n)
				}
			}
			if got := o.CallTimeout(); got != max(tc.resize, tc.mod) {
				t.Errorf("CallTimeout() = %s, want %s", got, max(tc.resize, tc.mod))
			}
		})
	}
}

// TestResolveNodeName: --node-name, else NODE_NAME, and only with --node-deployment.
func TestResolveNodeName(t *testing.T) {
	env := func(string) string { return "from-env" }
	for _, tc := range []struct {
		deployment bool
		flag, want string
	}{
		{true, "", "from-env"},
		{true, "from-flag", "from-flag"},
		{false, "", ""},
	} {
		o := defaults(t)
		o.NodeDeployment, o.NodeName = tc.deployment, tc.flag
		o.ResolveNodeName(env)
		if o.NodeName != tc.want {
			t.Errorf("--node-deployment=%v --node-name=%q, NODE_NAME=from-env: node %q, want %q", tc.deployment, tc.flag, o.NodeName, tc.want)
		}
	}
}

func TestHTTPAddress(t *testing.T) {
	o := defaults(t)
	if a := o.HTTPAddress(); a != "" {
		t.Errorf("HTTPAddress() = %q by default, want off", a)
	}
	o.Common.MetricsAddress = ":9000"
	if a := o.HTTPAddress(); a != ":9000" {
		t.Errorf("HTTPAddress() = %q with --metrics-address, want :9000", a)
	}
	o.Common.MetricsAddress, o.Common.HttpEndpoint = "", ":9100"
	if a := o.HTTPAddress(); a != ":9100" {
		t.Errorf("HTTPAddress() = %q with --http-endpoint, want :9100", a)
	}
}
