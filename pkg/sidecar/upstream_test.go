package sidecar

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

// These tests hold csi-resizer's command line to upstream's: the external-resizer binary the
// repository's CI keeps next to the clone (../shared/anchors/external-resizer, or the path in
// UPSTREAM_RESIZER).

// upstreamResizer returns the path of upstream's binary. Without it the test is skipped with
// one line saying why, except in CI (CI=true), where that fails the test: CI must compare.
func upstreamResizer(t *testing.T) string {
	t.Helper()
	path := os.Getenv("UPSTREAM_RESIZER")
	if path == "" {
		path = filepath.Join("..", "..", "..", "shared", "anchors", "external-resizer")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(abs); err != nil {
		msg := "upstream external-resizer binary not found at " + abs + " (set UPSTREAM_RESIZER to compare against upstream)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + "; CI=true: the comparison must run in CI")
		}
		t.Skip(msg)
	}
	return abs
}

// exec runs bin with args and no Kubernetes in-cluster environment (upstream then stops at
// "Failed to create cluster config", right after its feature gates are set), and returns the
// exit code and the combined output.
func execBinary(t *testing.T, bin string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KUBERNETES_SERVICE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %v did not exit within 30s:\n%s", bin, args, out.String())
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), out.String()
	}
	t.Fatalf("running %s %v: %v", bin, args, err)
	return 0, ""
}

var (
	defaultRe = regexp.MustCompile(`\(default (.*)\)\s*$`)
	gateRe    = regexp.MustCompile(`(?m)^\s+([A-Za-z0-9]+)=true\|false \(([A-Z-]+) - default=(true|false)\)`)
)

// helpDefault is the default --help shows for a flag's text, "" when none.
func helpDefault(text string) string {
	if m := defaultRe.FindStringSubmatch(strings.TrimSpace(text)); m != nil {
		return m[1]
	}
	return ""
}

// helpGates maps each gate of a --feature-gates help text to "MATURITY default=bool".
func helpGates(text string) map[string]string {
	out := map[string]string{}
	for _, m := range gateRe.FindAllStringSubmatch(text, -1) {
		out[m[1]] = m[2] + " default=" + m[3]
	}
	return out
}

// TestUpstreamHelp: every flag upstream's --help lists, ours lists with the same default, and
// every feature gate it lists, ours lists with the same maturity and default. A flag of ours
// that upstream's binary lacks must be one of aheadOfUpstream (upstream's own, merged or
// proposed after the binary compared with).
func TestUpstreamHelp(t *testing.T) {
	upstream := upstreamResizer(t)
	code, upHelp := execBinary(t, upstream, "--help")
	if code != 0 {
		t.Fatalf("upstream --help exited %d:\n%s", code, upHelp)
	}
	r := runBinary(t, "--help")
	if r.code != 0 {
		t.Fatalf("--help exited %d; stderr: %s", r.code, r.stderr)
	}
	up, ours := helpFlags(upHelp), helpFlags(r.stdout)
	if len(up) < 30 {
		t.Fatalf("parsed only %d flags from upstream's --help, the parser is broken:\n%s", len(up), upHelp)
	}
	names := make([]string, 0, len(up))
	for name := range up {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		text, ok := ours[name]
		if !ok {
			t.Errorf("upstream's --%s is missing from ours", name)
			continue
		}
		if name == "feature-gates" {
			continue // compared gate by gate below
		}
		if u, o := helpDefault(up[name]), helpDefault(text); u != o {
			t.Errorf("--%s: default %q, upstream's %q", name, o, u)
		}
	}
	for name := range ours {
		if _, ok := up[name]; !ok {
			if _, ahead := aheadOfUpstream[name]; !ahead {
				t.Errorf("ours has --%s, which upstream's --help lacks: a drop-in adds a flag only ahead of upstream (aheadOfUpstream, with the reason)", name)
			}
		}
	}
	upGates, ourGates := helpGates(up["feature-gates"]), helpGates(ours["feature-gates"])
	if len(upGates) < 10 {
		t.Fatalf("parsed only %d gates from upstream's --help, the parser is broken:\n%s", len(upGates), up["feature-gates"])
	}
	for gate, spec := range upGates {
		if got, ok := ourGates[gate]; !ok {
			t.Errorf("upstream's feature gate %s (%s) is missing from ours", gate, spec)
		} else if got != spec {
			t.Errorf("feature gate %s: %s, upstream's %s", gate, got, spec)
		}
	}
}

// TestUpstreamGatesStart: every gate upstream's --help lists (and upstream's own GA gates,
// which it accepts without listing them), switched on and off, starts ours exactly when it
// starts upstream. Ours is given a socket nobody serves: it gets past the flags and fails to
// connect (exit 1), or refuses the command line (exit 2). Upstream is given no cluster: it
// gets past the gates and fails at "Failed to create cluster config", or stops at "Failed to
// set feature gates".
func TestUpstreamGatesStart(t *testing.T) {
	upstream := upstreamResizer(t)
	_, upHelp := execBinary(t, upstream, "--help")
	gates := []string{"RecoverVolumeExpansionFailure", "VolumeAttributesClass", "NoSuchGate"}
	for gate := range helpGates(helpFlags(upHelp)["feature-gates"]) {
		gates = append(gates, gate)
	}
	if len(gates) < 13 {
		t.Fatalf("found only %d gates in upstream's --help:\n%s", len(gates), upHelp)
	}
	socket := filepath.Join(t.TempDir(), "nobody.sock")
	build(t)
	for _, gate := range gates {
		for _, value := range []string{"true", "false"} {
			arg := "--feature-gates=" + gate + "=" + value
			t.Run(gate+"="+value, func(t *testing.T) {
				t.Parallel()
				upCode, upOut := execBinary(t, upstream, "--csi-address="+socket, "--timeout=100ms", arg)
				var upStarts bool
				switch {
				case strings.Contains(upOut, "Failed to set feature gates"):
				case strings.Contains(upOut, "Failed to create cluster config"):
					upStarts = true
				default:
					t.Fatalf("upstream %s exited %d without reaching either the gates' or the cluster config's error:\n%s", arg, upCode, upOut)
				}
				r := runBinary(t, "--csi-address="+socket, "--timeout=100ms", arg)
				ourStarts := r.code != 2
				if ourStarts != upStarts {
					t.Fatalf("%s: upstream starts: %t, ours: %t (exit %d):\n%s", arg, upStarts, ourStarts, r.code, r.stderr)
				}
				lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
				switch {
				case ourStarts && (r.code != 1 || !strings.Contains(r.stderr, "--csi-address")):
					t.Errorf("%s: exit %d, want 1 for the socket nobody serves:\n%s", arg, r.code, r.stderr)
				case !ourStarts && (len(lines) != 1 || !strings.Contains(lines[0], gate)):
					t.Errorf("%s refused with %d lines, want one naming %s:\n%s", arg, len(lines), gate, r.stderr)
				}
			})
		}
	}
}
