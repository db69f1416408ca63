package main

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/csi-resizer/csi-resizer/pkg/autoscale/policy"
	"github.com/csi-resizer/csi-resizer/test/framework"
)

// runBinary runs the built command with args; nothing here reaches an apiserver, so it ends
// at once.
func runBinary(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return framework.RunCommand(t, framework.BuildCommand(t, command), args...)
}

func TestVersionAndHelp(t *testing.T) {
	if code, out, _ := runBinary(t, "--version"); code != 0 || out != "volume-autoscaler dev\n" {
		t.Errorf("--version: %d %q", code, out)
	}
	code, out, _ := runBinary(t, "--help")
	if code != 0 {
		t.Errorf("--help exit %d", code)
	}
	for _, f := range []string{"--kubeconfig", "--interval", "--kubelet-certificate-authority", "--kubelet-insecure-tls",
		"--kubelet-preferred-address-types", "--kubelet-timeout", "--kubelet-concurrency", "--kubelet-max-response-bytes",
		"--token-file", "--dry-run", "--default-threshold", "--default-inodes-threshold", "--default-increase",
		"--default-min-increase", "--default-limit", "--cooldown", "--resize-wait", "--all-storage-classes",
		"--leader-election ", "--leader-election-namespace", "--leader-election-lease-duration", "--leader-election-renew-deadline",
		"--leader-election-retry-period", "--leader-election-labels", "--http-endpoint", "--metrics-path", "--workers",
		"-v, --v", "--vmodule", "--logging-format", "nodes/stats", "never nodes/proxy"} {
		if !strings.Contains(out, f) {
			t.Errorf("--help does not mention %q", f)
		}
	}
	if strings.Contains(out, "logtostderr") || strings.Contains(out, "nodes/proxy ") {
		t.Errorf("--help lists klog's own flags or offers nodes/proxy:\n%s", out)
	}
}

// TestFlagDefaults: the flags' defaults are the policy's documented defaults.
func TestFlagDefaults(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	o := addFlags(fs)
	if err := fs.Parse([]string{"--kubelet-insecure-tls"}); err != nil {
		t.Fatal(err)
	}
	if err := o.validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	if o.defaults != policy.NewDefaults() {
		t.Errorf("policy defaults from the flags %+v, want %+v", o.defaults, policy.NewDefaults())
	}
	if o.interval != time.Minute || o.kubelet.TokenFile != serviceAccountToken || o.dryRun || o.le.Enabled || len(o.kubelet.AddressTypes) != 3 {
		t.Errorf("defaults: %+v", *o)
	}
	if err := fs.Parse([]string{"--default-threshold=5Gi", "--default-limit=100Gi", "--default-increase=2Gi", "--cooldown=6h",
		"--all-storage-classes", "--default-inodes-threshold=7.5%"}); err != nil {
		t.Fatal(err)
	}
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	d := o.defaults
	if d.Threshold != policy.BytesAmount(5<<30) || d.Limit != 100<<30 || d.Increase != policy.BytesAmount(2<<30) ||
		d.Cooldown != 6*time.Hour || !d.AllClasses || d.InodesThreshold != 750 {
		t.Errorf("parsed defaults %+v", d)
	}
}

// Bad input: exit 2 and one clear line on stderr naming the flag.
func TestBadInput(t *testing.T) {
	insecure := "--kubelet-insecure-tls"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, "give --kubelet-certificate-authority"},
		{[]string{insecure, "--kubelet-certificate-authority=/ca.pem"}, "exclude each other"},
		{[]string{insecure, "--interval=0s"}, "--interval must be positive"},
		{[]string{insecure, "--kubelet-timeout=0s"}, "--kubelet-timeout must be positive"},
		{[]string{insecure, "--kubelet-concurrency=0"}, "--kubelet-concurrency must be positive"},
		{[]string{insecure, "--kubelet-max-response-bytes=0"}, "--kubelet-max-response-bytes must be positive"},
		{[]string{insecure, "--kubelet-preferred-address-types=InternalIP,Nope"}, "--kubelet-preferred-address-types"},
		{[]string{insecure, "--default-threshold=ten"}, `--default-threshold="ten"`},
		{[]string{insecure, "--default-threshold=100%"}, "threshold 100%"},
		{[]string{insecure, "--default-inodes-threshold=5Gi"}, "--default-inodes-threshold"},
		{[]string{insecure, "--default-increase=-1"}, "--default-increase"},
		{[]string{insecure, "--default-min-increase=0"}, "--default-min-increase"},
		{[]string{insecure, "--default-limit=lots"}, "--default-limit"},
		{[]string{insecure, "--cooldown=-1s"}, "cooldown -1s"},
		{[]string{insecure, "--resize-wait=0s"}, "resize wait 0s"},
		{[]string{insecure, "--workers=0"}, "--workers must be positive"},
		{[]string{insecure, "--metrics-path=metrics"}, "--metrics-path must start with /"},
		{[]string{insecure, "--leader-election", "--leader-election-lease-duration=5s"}, "lease-duration (5s) must be greater"},
		{[]string{insecure, "-kubeconfig=/k"}, "long flags take two dashes"},
		{[]string{insecure, "--logtostderr"}, "klog's own flags are not accepted"},
		{[]string{insecure, "run"}, `unexpected argument "run"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errOut := runBinary(t, tc.args...)
			if code != 2 || !strings.Contains(errOut, tc.want) || strings.Count(errOut, "\n") != 1 || out != "" ||
				!strings.HasPrefix(errOut, command+": ") {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 and one line %q... containing %q", code, out, errOut, command+": ", tc.want)
			}
		})
	}
}
