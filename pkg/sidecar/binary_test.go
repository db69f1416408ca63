package sidecar

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// build compiles cmd/csi-resizer once for the package's tests.
func build(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "csi-resizer-bin")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "csi-resizer")
		gobin, err := exec.LookPath("go")
		if err != nil {
			gobin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
		}
		cmd := exec.Command(gobin, "build", "-o", binary, "./cmd/csi-resizer")
		cmd.Dir = filepath.Join("..", "..")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = errors.New("go build: " + err.Error() + "\n" + string(out))
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binary != "" {
		_ = os.RemoveAll(filepath.Dir(binary))
	}
	os.Exit(code)
}

type result struct {
	code           int
	stdout, stderr string
}

func runBinary(t *testing.T, args ...string) result {
	t.Helper()
	// Build first: on a cold cache the build alone can take longer than the run's deadline.
	bin := build(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	default:
		t.Fatalf("running csi-resizer %v: %v", args, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("csi-resizer %v did not exit within 30s", args)
	}
	return r
}

// helpFlags parses `--help` output ("  -name type\n    \tusage (default X)") into the text
// of each flag.
func helpFlags(help string) map[string]string {
	out := map[string]string{}
	name := ""
	for _, line := range strings.Split(help, "\n") {
		if m := regexp.MustCompile(`^  -([a-z0-9_-]+)`).FindStringSubmatch(line); m != nil {
			name = m[1]
			out[name] = line
			continue
		}
		if name != "" {
			out[name] += "\n" + line
		}
	}
	return out
}

func TestBinaryHelp(t *testing.T) {
	r := runBinary(t, "--help")
	if r.code != 0 {
		t.Fatalf("--help exited %d; stderr: %s", r.code, r.stderr)
	}
	flags := helpFlags(r.stdout)
	// The defaults as --help prints them; "" = no default shown (zero value).
	shown := map[string]string{
		"csi-address": `"/run/csi/socket"`, "kubeconfig": "", "master": "", "timeout": "10s", "workers": "10",
		"resync-period": "10m0s", "retry-interval-start": "1s", "retry-interval-max": "5m0s",
		"handle-volume-inuse-error": "true", "leader-election": "", "leader-election-namespace": "",
		"leader-election-lease-duration": "15s", "leader-election-renew-deadline": "10s",
		"leader-election-retry-period": "5s", "leader-election-labels": "", "kube-api-qps": "5",
		"kube-api-burst": "10", "http-endpoint": "", "metrics-address": "", "metrics-path": `"/metrics"`,
		"feature-gates": "", "extra-modify-metadata": "", "version": "", "v": "",
	}
	for name, def := range shown {
		text, ok := flags[name]
		if !ok {
			t.Errorf("--help does not list --%s", name)
			continue
		}
		m := regexp.MustCompile(`\(default (.*)\)\s*$`).FindStringSubmatch(strings.TrimSpace(text))
		got := ""
		if m != nil {
			got = m[1]
		}
		if got != def {
			t.Errorf("--help shows --%s default %q, want %q:\n%s", name, got, def, text)
		}
	}
	for _, gate := range []string{"RecoverVolumeExpansionFailure=true|false (GA - default=true)", "AnnotateFsResize=true|false (BETA - default=true)"} {
		if !strings.Contains(flags["feature-gates"], gate) {
			t.Errorf("--feature-gates help does not list %q:\n%s", gate, flags["feature-gates"])
		}
	}
}

func TestBinaryVersion(t *testing.T) {
	r := runBinary(t, "--version")
	if r.code != 0 || !strings.Contains(r.stdout, "dev") {
		t.Errorf("--version: exit %d, stdout %q, want 0 and the version", r.code, r.stdout)
	}
}

// TestBinaryInvalidInput: a bad command line exits non-zero with exactly one line on stderr
// that names the flag to fix.
func TestBinaryInvalidInput(t *testing.T) {
	dir, err := os.MkdirTemp("", "csi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	missing := filepath.Join(dir, "missing.sock")
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"zero workers", []string{"--workers=0"}, []string{"--workers"}},
		{"unknown feature gate", []string{"--feature-gates=NoSuchGate=true"}, []string{"feature-gates", "NoSuchGate"}},
		{"both endpoints", []string{"--http-endpoint=:0", "--metrics-address=:0"}, []string{"--http-endpoint", "--metrics-address"}},
		{"retry start above max", []string{"--retry-interval-start=10m", "--retry-interval-max=1m"}, []string{"--retry-interval-start"}},
		{"missing socket", []string{"--csi-address=" + missing, "--timeout=1s"}, []string{"--csi-address", missing, "--timeout"}},
		// Past csi-lib-utils' 10s "Still connecting" interval: the progress line must not reach
		// stderr at the default verbosity.
		{"missing socket, longer than the progress interval", []string{"--csi-address=" + missing, "--timeout=11s"}, []string{"--csi-address", missing, "--timeout 11s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := runBinary(t, tc.args...)
			if r.code == 0 {
				t.Fatalf("exit 0, want non-zero; stderr: %s", r.stderr)
			}
			lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
			last := lines[len(lines)-1]
			for _, w := range tc.want {
				if !strings.Contains(last, w) {
					t.Errorf("the error line does not name %q:\n%s", w, r.stderr)
				}
			}
			if len(lines) != 1 {
				t.Errorf("stderr has %d lines, want 1:\n%s", len(lines), r.stderr)
			}
		})
	}
}
