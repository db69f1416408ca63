package sidecar

import (
	"bytes"
	"context"
	"encoding/json"
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
		"resize-timeout": "10s", "modify-timeout": "10s", "node-deployment": "", "node-name": "",
		"resync-period": "10m0s", "retry-interval-start": "1s", "retry-interval-max": "5m0s",
		"handle-volume-inuse-error": "true", "leader-election": "", "leader-election-namespace": "",
		"leader-election-lease-duration": "15s", "leader-election-renew-deadline": "10s",
		"leader-election-retry-period": "5s", "leader-election-labels": "", "kube-api-qps": "5",
		"kube-api-burst": "10", "http-endpoint": "", "metrics-address": "", "metrics-path": `"/metrics"`,
		"feature-gates": "", "extra-modify-metadata": "", "version": "", "v": "", "vmodule": "",
		"automaxprocs": "", "logging-format": `"text"`, "log-flush-frequency": "5s", "log-text-split-stream": "",
		"log-json-split-stream": "", "log-text-info-buffer-size": "", "log-json-info-buffer-size": "",
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
	for _, gate := range []string{"RecoverVolumeExpansionFailure=true|false (GA - default=true)", "AnnotateFsResize=true|false (BETA - default=true)",
		"VolumeAttributesClass=true|false (GA - default=true)", "ReleaseLeaderElectionOnExit=true|false (ALPHA - default=false)"} {
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
		{"alpha logging option", []string{"--log-json-split-stream"}, []string{"--log-json-split-stream", "LoggingAlphaOptions"}},
		{"vmodule with json", []string{"--logging-format=json", "--vmodule=run=4"}, []string{"--vmodule"}},
		{"retry start above max", []string{"--retry-interval-start=10m", "--retry-interval-max=1m"}, []string{"--retry-interval-start"}},
		{"node deployment with leader election", []string{"--node-deployment", "--node-name=n1", "--leader-election"}, []string{"--node-deployment and --leader-election cannot be used together"}},
		{"zero resize timeout", []string{"--resize-timeout=0"}, []string{"--resize-timeout"}},
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

// TestBinaryJSONLogging: with --logging-format=json everything the process writes on stderr,
// the feature gates' warnings and the reason it stops included, is one JSON object per line.
// (test/integration's TestDriverChartArgs checks a whole resize at -v=5.)
func TestBinaryJSONLogging(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.sock")
	r := runBinary(t, "--logging-format=json", "-v=5", "--csi-address="+missing, "--timeout=1s",
		"--feature-gates=RecoverVolumeExpansionFailure=false,AnnotateFsResize=true")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1 (no driver); stderr:\n%s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
	if len(lines) < 3 {
		t.Fatalf("%d lines on stderr, want the gates' lines and the error:\n%s", len(lines), r.stderr)
	}
	for i, line := range lines {
		var obj map[string]any
		if err := json.Unmarshal([]byte(line), &obj); err != nil {
			t.Errorf("stderr line %d is not a JSON object (%v): %s", i+1, err, line)
		}
	}
	if last := lines[len(lines)-1]; !strings.Contains(last, `"err":`) || !strings.Contains(last, missing) {
		t.Errorf("the last line is not the error naming the socket: %s", last)
	}
	if !strings.Contains(r.stderr, "RecoverVolumeExpansionFailure") {
		t.Errorf("the GA gate's warning is missing:\n%s", r.stderr)
	}
}
