package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

func runMain(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = Main(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestVersionAndHelp(t *testing.T) {
	code, out, _ := runMain("--version")
	if code != 0 || out != "statefulset-resizer dev\n" {
		t.Errorf("--version: %d %q", code, out)
	}
	code, out, _ = runMain("--help")
	if code != 0 {
		t.Errorf("--help exit %d", code)
	}
	for _, f := range []string{"kubeconfig", "workers", "kube-api-qps", "kube-api-burst", "leader-election",
		"leader-election-namespace", "leader-election-lease-duration", "leader-election-renew-deadline",
		"leader-election-retry-period", "leader-election-labels", "http-endpoint", "metrics-path", "resync-period",
		"version", "v", "vmodule", "wait NAMESPACE/NAME", "webhook-port", "webhook-service-name", "webhook-namespace",
		"webhook-host", "webhook-secret-name", "webhook-configuration-name", "webhook-tls-cert-file", "webhook-tls-private-key-file"} {
		if !strings.Contains(out, f) {
			t.Errorf("--help does not mention %q", f)
		}
	}
	code, out, _ = runMain("wait", "--help")
	if code != 0 || !strings.Contains(out, "Exit codes") || !strings.Contains(out, "-timeout") {
		t.Errorf("wait --help: %d %q", code, out)
	}
}

func TestFlagDefaults(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	o := addFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	want := options{workers: 10, qps: 5, burst: 10, resync: 10 * time.Minute, leaseDuration: 15 * time.Second,
		renewDeadline: 10 * time.Second, retryPeriod: 5 * time.Second, metricsPath: "/metrics", leaderElectionLabels: labelMap{},
		webhook: webhookOptions{serviceName: "statefulset-resizer", secretName: "statefulset-resizer-webhook-tls",
			configurationName: "statefulset-resizer", checkInterval: time.Minute}, recreate: true}
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
	if err := fs.Parse([]string{"--webhook-host", "127.0.0.1,a.example", "--webhook-host", "::1"}); err != nil || o.webhook.hosts.String() != "127.0.0.1,a.example,::1" {
		t.Errorf("hosts: %v %v", o.webhook.hosts, err)
	}
	if err := fs.Parse([]string{"--leader-election-labels", "a:b,c:d"}); err != nil || o.leaderElectionLabels["a"] != "b" || o.leaderElectionLabels["c"] != "d" {
		t.Errorf("labels: %v %v", o.leaderElectionLabels, err)
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
		{[]string{"--workers", "many"}, 2, "invalid value"},
		{[]string{"--kube-api-qps", "0"}, 2, "--kube-api-qps must be positive"},
		{[]string{"--metrics-path", "metrics"}, 2, "--metrics-path must start with /"},
		{[]string{"--resync-period", "-1s"}, 2, "--resync-period must not be negative"},
		{[]string{"--leader-election", "--leader-election-lease-duration", "5s"}, 2, "lease-duration (5s) must be greater"},
		{[]string{"--leader-election", "--leader-election-retry-period", "9s"}, 2, "renew-deadline (10s) must be greater than 1.2"},
		{[]string{"--leader-election-labels", "novalue"}, 2, "malformed label"},
		{[]string{"--no-such-flag"}, 2, "flag provided but not defined"},
		{[]string{"--webhook-port", "70000"}, 2, "--webhook-port must be between 0 (webhook off) and 65535"},
		{[]string{"--webhook-tls-cert-file", "c.pem", "--webhook-tls-private-key-file", "k.pem"}, 2, "need --webhook-port (the webhook is off)"},
		{[]string{"--webhook-host", "127.0.0.1"}, 2, "--webhook-host needs --webhook-port"},
		{[]string{"--webhook-port", "9443", "--webhook-tls-cert-file", "c.pem"}, 2, "go together: give both"},
		{[]string{"--webhook-port", "9443", "--webhook-tls-cert-file", "c.pem", "--webhook-tls-private-key-file", "k.pem", "--webhook-host", "a.example"}, 2, "--webhook-host is for generated certificates"},
		{[]string{"--webhook-port", "9443", "--webhook-service-name", ""}, 2, "--webhook-service-name must not be empty"},
		{[]string{"--webhook-port", "9443", "--webhook-certificate-check-interval", "0s"}, 2, "--webhook-certificate-check-interval must be positive"},
		{[]string{"--webhook-host", "a b"}, 2, `malformed host "a b"`},
		{[]string{"--webhook-port", "9443", "--recreate=false"}, 2, "--recreate=false cannot be combined with --webhook-port"},
		{[]string{"run"}, 2, `unexpected argument "run"`},
		{[]string{"wait"}, 3, "missing NAMESPACE/NAME"},
		{[]string{"wait", "--timeout", "1m"}, 3, "missing NAMESPACE/NAME"},
		{[]string{"wait", "web"}, 3, `want NAMESPACE/NAME, got "web"`},
		{[]string{"wait", "default/"}, 3, "want NAMESPACE/NAME"},
		{[]string{"wait", "Default/web"}, 3, `invalid namespace "Default"`},
		{[]string{"wait", "a/b", "c/d"}, 3, `unexpected argument "c/d"`},
		{[]string{"wait", "a/b", "--timeout", "0s"}, 3, "--timeout must be positive"},
		{[]string{"wait", "a/b", "--timeout", "soon"}, 3, "invalid value"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Setenv("POD_NAMESPACE", "ssr-system")
			code, out, errOut := runMain(tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.want) || strings.Count(errOut, "\n") != 1 || out != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d and one line containing %q", code, out, errOut, tc.code, tc.want)
			}
		})
	}
}

// The binary's run loop (client from --kubeconfig, informers, workers, the
// metrics endpoint, leader election) and the wait subcommand's exit codes
// against a cluster are exercised on a real apiserver, by the StatefulSet
// tests in test/integration.

// Two processes on one host must not share a Lease identity: client-go would let both lead.
func TestLeaderIdentityIsUniquePerProcess(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Skip(err)
	}
	a, errA := leaderIdentity()
	b, errB := leaderIdentity()
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	if a == b || !strings.HasPrefix(a, host+"_") || !strings.HasPrefix(b, host+"_") {
		t.Errorf("identities %q and %q: want %s_<random>, different each time", a, b, host)
	}
}
