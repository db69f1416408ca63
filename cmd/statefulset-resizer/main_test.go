package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/csi-resizer/csi-resizer/internal/cli"
	"github.com/csi-resizer/csi-resizer/test/framework"
)

// runBinary runs the command with args; nothing here reaches an apiserver, so it ends at once.
// The build is the process's: its exit codes and stderr are those of a process (the logging it
// sets up is the process's, once).
func runBinary(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return framework.RunCommand(t, framework.BuildCommand(t, command), args...)
}

func TestVersionAndHelp(t *testing.T) {
	code, out, _ := runBinary(t, "--version")
	if code != 0 || out != "statefulset-resizer dev\n" {
		t.Errorf("--version: %d %q", code, out)
	}
	code, out, _ = runBinary(t, "--help")
	if code != 0 {
		t.Errorf("--help exit %d", code)
	}
	for _, f := range []string{"--kubeconfig", "--workers", "--kube-api-qps", "--kube-api-burst", "--leader-election ",
		"--leader-election-namespace", "--leader-election-lease-duration", "--leader-election-renew-deadline",
		"--leader-election-retry-period", "--leader-election-labels", "--http-endpoint", "--metrics-path", "--resync-period",
		"--version", "-v, --v", "--vmodule", "--logging-format", "--log-flush-frequency", "wait NAMESPACE/NAME",
		"webhook [--webhook-port 9443]"} {
		if !strings.Contains(out, f) {
			t.Errorf("--help does not mention %q", f)
		}
	}
	if strings.Contains(out, "logtostderr") || regexp.MustCompile(`(?m)^\s+--webhook-`).MatchString(out) {
		t.Errorf("--help lists klog's own flags or the webhook's:\n%s", out)
	}
	code, out, _ = runBinary(t, "webhook", "--help")
	if code != 0 {
		t.Errorf("webhook --help exit %d", code)
	}
	for _, f := range []string{"--kubeconfig", "--kube-api-qps", "--kube-api-burst", "--http-endpoint", "--metrics-path",
		"--version", "-v, --v", "--logging-format", "no leader election",
		"--webhook-port", "--webhook-service-name", "--webhook-namespace", "--webhook-host", "--webhook-secret-name",
		"--webhook-configuration-name", "--webhook-tls-cert-file", "--webhook-tls-private-key-file", "--webhook-shutdown-delay"} {
		if !strings.Contains(out, f) {
			t.Errorf("webhook --help does not mention %q", f)
		}
	}
	for _, f := range []string{"--leader-election", "--workers", "--recreate", "--resync-period"} {
		if strings.Contains(out, f) {
			t.Errorf("webhook --help lists the controller's %s", f)
		}
	}
	if code, out, _ = runBinary(t, "webhook", "--version"); code != 0 || out != "statefulset-resizer dev\n" {
		t.Errorf("webhook --version: %d %q", code, out)
	}
	code, out, _ = runBinary(t, "wait", "--help")
	if code != 0 || !strings.Contains(out, "Exit codes") || !strings.Contains(out, "--timeout") || !strings.Contains(out, "--logging-format") {
		t.Errorf("wait --help: %d %q", code, out)
	}
}

func TestFlagDefaults(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	o := addFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	want := options{workers: 10, api: cli.API{QPS: 5, Burst: 10}, resync: 10 * time.Minute, le: cli.LeaderElection{LeaseDuration: 15 * time.Second,
		RenewDeadline: 10 * time.Second, RetryPeriod: 5 * time.Second, Labels: cli.LabelMap{}}, http: cli.HTTP{MetricsPath: "/metrics"},
		recreate: true, logging: o.logging}
	if fmt.Sprintf("%+v", *o) != fmt.Sprintf("%+v", want) {
		t.Errorf("defaults\n got  %+v\n want %+v", *o, want)
	}
	if err := o.validate(); err == nil || !strings.Contains(err.Error(), "--recreate-record-namespace") {
		t.Errorf("defaults out of a cluster: %v, want the records' namespace asked for", err)
	}
	t.Setenv("POD_NAMESPACE", "ssr-system")
	if err := o.validate(); err != nil || o.recordNamespace != "ssr-system" {
		t.Errorf("defaults in a pod do not validate: %v (records' namespace %q)", err, o.recordNamespace)
	}
	if o.logging.Config.Format != "text" || o.logging.Config.Verbosity != 0 {
		t.Errorf("logging defaults %q -v=%d, want text and 0", o.logging.Config.Format, o.logging.Config.Verbosity)
	}
	if err := fs.Parse([]string{"--leader-election-labels", "a:b,c:d"}); err != nil || o.le.Labels["a"] != "b" || o.le.Labels["c"] != "d" {
		t.Errorf("labels: %v %v", o.le.Labels, err)
	}
	if err := fs.Parse([]string{"-v=4", "--recreate=false"}); err != nil || o.logging.Config.Verbosity != 4 || o.recreate {
		t.Errorf("-v=4 --recreate=false: -v=%d recreate=%t %v", o.logging.Config.Verbosity, o.recreate, err)
	}
}

func TestWebhookFlagDefaults(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	o := addWebhookModeFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	want := webhookModeOptions{api: cli.API{QPS: 5, Burst: 10}, http: cli.HTTP{MetricsPath: "/metrics"},
		webhook: webhookOptions{port: 9443, serviceName: "statefulset-resizer", secretName: "statefulset-resizer-webhook-tls",
			configurationName: "statefulset-resizer", checkInterval: time.Minute, shutdownDelay: 10 * time.Second},
		logging: o.logging}
	if fmt.Sprintf("%+v", *o) != fmt.Sprintf("%+v", want) {
		t.Errorf("defaults\n got  %+v\n want %+v", *o, want)
	}
	if err := o.validate(); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}
	if err := fs.Parse([]string{"--webhook-host", "127.0.0.1,a.example", "--webhook-host", "::1"}); err != nil || o.webhook.hosts.String() != "127.0.0.1,a.example,::1" {
		t.Errorf("hosts: %v %v", o.webhook.hosts, err)
	}
}

// Bad input: a non-zero exit and one clear line on stderr.
func TestBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--workers", "0"}, 2, "--workers must be positive"},
		{[]string{"--workers=-3"}, 2, "--workers must be positive"},
		{[]string{"--workers", "many"}, 2, `invalid argument "many" for "--workers"`},
		{[]string{"--kube-api-qps", "0"}, 2, "--kube-api-qps must be positive"},
		{[]string{"--metrics-path", "metrics"}, 2, "--metrics-path must start with /"},
		{[]string{"--resync-period", "-1s"}, 2, "--resync-period must not be negative"},
		{[]string{"--leader-election", "--leader-election-lease-duration", "5s"}, 2, "lease-duration (5s) must be greater"},
		{[]string{"--leader-election", "--leader-election-retry-period", "9s"}, 2, "renew-deadline (10s) must be greater than 1.2"},
		{[]string{"--leader-election-labels", "novalue"}, 2, "malformed label"},
		{[]string{"--no-such-flag"}, 2, "unknown flag: --no-such-flag"},
		// The controller does not serve the webhook any more: its flags name the subcommand.
		{[]string{"--webhook-port", "9443"}, 2, "--webhook-port: the admission webhook is not served by the controller any more; run it as its own process (its own Deployment and ServiceAccount): statefulset-resizer webhook --webhook-port=..."},
		{[]string{"--workers=2", "--webhook-shutdown-delay=10s"}, 2, "statefulset-resizer webhook --webhook-shutdown-delay=..."},
		{[]string{"webhook", "--webhook-port", "70000"}, 2, "--webhook-port must be between 1 and 65535"},
		{[]string{"webhook", "--webhook-port", "0"}, 2, "--webhook-port must be between 1 and 65535"},
		{[]string{"webhook", "--webhook-tls-cert-file", "c.pem"}, 2, "go together: give both"},
		{[]string{"webhook", "--webhook-tls-cert-file", "c.pem", "--webhook-tls-private-key-file", "k.pem", "--webhook-host", "a.example"}, 2, "--webhook-host is for generated certificates"},
		{[]string{"webhook", "--webhook-service-name", ""}, 2, "--webhook-service-name must not be empty"},
		{[]string{"webhook", "--webhook-certificate-check-interval", "0s"}, 2, "--webhook-certificate-check-interval must be positive"},
		{[]string{"webhook", "--webhook-shutdown-delay=-1s"}, 2, "--webhook-shutdown-delay must not be negative"},
		{[]string{"webhook", "--webhook-host", "a b"}, 2, `malformed host "a b"`},
		{[]string{"webhook", "--kube-api-qps", "0"}, 2, "--kube-api-qps must be positive"},
		{[]string{"webhook", "extra"}, 2, `unexpected argument "extra"`},
		// The controller's flags given to the webhook say so.
		{[]string{"webhook", "--leader-election"}, 2, "--leader-election: is a flag of the controller (statefulset-resizer without a subcommand); the webhook has no leader election"},
		{[]string{"webhook", "--recreate=false"}, 2, "--recreate: is a flag of the controller (statefulset-resizer without a subcommand), not of the webhook subcommand"},
		{[]string{"webhook", "--logtostderr"}, 2, "klog's own flags are not accepted"},
		{[]string{"webhook", "-webhook-port=9443"}, 2, "use --webhook-port=9443"},
		{[]string{"--logging-format=xml"}, 2, "--logging-format"},
		{[]string{"--logging-format=json", "--vmodule=controller=4"}, 2, "--vmodule"},
		{[]string{"run"}, 2, `unexpected argument "run" (the subcommands are "webhook" and "wait", given first`},
		// Go's flag package took single-dash long flags; pflag reads them as short flags.
		{[]string{"-kubeconfig=/k"}, 2, "-kubeconfig=/k: long flags take two dashes: use --kubeconfig=/k"},
		{[]string{"--workers=2", "-leader-election"}, 2, "use --leader-election"},
		// klog's own flags are gone.
		{[]string{"--logtostderr=false"}, 2, "klog's own flags are not accepted"},
		{[]string{"-log_dir=/tmp"}, 2, "klog's own flags are not accepted"},
		{[]string{"wait"}, 3, "missing NAMESPACE/NAME"},
		{[]string{"wait", "--timeout", "1m"}, 3, "missing NAMESPACE/NAME"},
		{[]string{"wait", "web"}, 3, `want NAMESPACE/NAME, got "web"`},
		{[]string{"wait", "default/"}, 3, "want NAMESPACE/NAME"},
		{[]string{"wait", "Default/web"}, 3, `invalid namespace "Default"`},
		{[]string{"wait", "a/b", "c/d"}, 3, `unexpected argument "c/d"`},
		{[]string{"wait", "a/b", "--timeout", "0s"}, 3, "--timeout must be positive"},
		{[]string{"wait", "--timeout", "0s", "a/b"}, 3, "--timeout must be positive"},
		{[]string{"wait", "a/b", "--interval=0s"}, 3, "--interval must be positive"},
		{[]string{"wait", "a/b", "--timeout", "soon"}, 3, `invalid argument "soon" for "--timeout"`},
		{[]string{"wait", "-timeout", "1m", "a/b"}, 3, "use --timeout"},
		{[]string{"wait", "a/b", "--stderrthreshold=INFO"}, 3, "klog's own flags are not accepted"},
		{[]string{"wait", "a/b", "--kubeconfig", "/nonexistent/kubeconfig"}, 3, "check --kubeconfig"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Setenv("POD_NAMESPACE", "ssr-system")
			code, out, errOut := runBinary(t, tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.want) || strings.Count(errOut, "\n") != 1 || out != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d and one line containing %q", code, out, errOut, tc.code, tc.want)
			}
			prefix := command + ": "
			if tc.args[0] == "wait" || tc.args[0] == "webhook" {
				prefix = command + " " + tc.args[0] + ": "
			}
			if !strings.HasPrefix(errOut, prefix) {
				t.Errorf("stderr %q does not start with %q", errOut, prefix)
			}
		})
	}
}

// With --logging-format=json, once the logging flags are valid, the reason the command stops
// is one JSON object on stderr (the controller's and wait's). The runs on a real apiserver
// (progress lines, a whole run) are test/integration's TestJSONLogging.
func TestJSONStderr(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--logging-format=json", "--workers=0"}, 2, "--workers must be positive"},
		{[]string{"webhook", "--logging-format=json", "--webhook-shutdown-delay=-1s"}, 2, "--webhook-shutdown-delay"},
		{[]string{"wait", "--logging-format=json"}, 3, "missing NAMESPACE/NAME"},
		{[]string{"wait", "a/b", "--logging-format=json", "--kubeconfig=/nonexistent/kubeconfig"}, 3, "/nonexistent/kubeconfig"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errOut := runBinary(t, tc.args...)
			if code != tc.code || out != "" {
				t.Errorf("exit %d, stdout %q; want exit %d and nothing on stdout", code, out, tc.code)
			}
			lines := strings.Split(strings.TrimRight(errOut, "\n"), "\n")
			if len(lines) != 1 {
				t.Fatalf("stderr has %d lines, want 1:\n%s", len(lines), errOut)
			}
			var entry struct {
				Msg string `json:"msg"`
				Err string `json:"err"`
			}
			if err := json.Unmarshal([]byte(lines[0]), &entry); err != nil || !strings.Contains(entry.Err, tc.want) || !strings.HasSuffix(entry.Msg, " stops") {
				t.Errorf("stderr %q (%v): want one JSON object \"... stops\" whose err names %q", lines[0], err, tc.want)
			}
		})
	}
}
