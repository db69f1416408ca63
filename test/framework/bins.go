package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// EnvK8sBins names a directory with prebuilt etcd, kube-apiserver,
// kube-controller-manager, kubectl and mock-csi-driver; when set, BinDir
// uses it instead of running hack/build-k8s-bins.sh.
const EnvK8sBins = "CSI_RESIZER_K8S_BINS"

// k8sBinaries are the files BinDir guarantees.
var k8sBinaries = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kubectl", "mock-csi-driver"}

var binDir struct {
	once sync.Once
	dir  string
	err  error
}

// BinDir returns the directory with the control-plane binaries and the mock
// CSI driver, building them on first use (hack/build-k8s-bins.sh: ~10 min
// cold, instant when cached). The result is shared by all tests of the
// binary.
func BinDir(t testing.TB) string {
	t.Helper()
	binDir.once.Do(func() { binDir.dir, binDir.err = findBinDir() })
	if binDir.err != nil {
		t.Fatalf("k8s binaries: %v", binDir.err)
	}
	return binDir.dir
}

func findBinDir() (string, error) {
	dir := os.Getenv(EnvK8sBins)
	if dir == "" {
		root, err := RepoRoot()
		if err != nil {
			return "", err
		}
		cmd := exec.Command(filepath.Join(root, "hack", "build-k8s-bins.sh"))
		cmd.Dir = root
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("hack/build-k8s-bins.sh: %w\n%s", err, tailLines(stderr.String(), 40))
		}
		lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
		dir = strings.TrimSpace(lines[len(lines)-1])
	}
	for _, b := range k8sBinaries {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("%s missing in %s: %w", b, dir, err)
		}
	}
	return dir, nil
}

// Bin returns the path of one of the binaries in BinDir.
func Bin(t testing.TB, name string) string {
	t.Helper()
	return filepath.Join(BinDir(t), name)
}

var repoRoot struct {
	once sync.Once
	dir  string
	err  error
}

// RepoRoot returns the main module's root directory (where go.mod is), found
// from the test's working directory.
func RepoRoot() (string, error) {
	repoRoot.once.Do(func() {
		dir, err := os.Getwd()
		if err != nil {
			repoRoot.err = err
			return
		}
		for {
			b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
			if err == nil && modulePath(b) == "github.com/csi-resizer/csi-resizer" {
				repoRoot.dir = dir
				return
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				repoRoot.err = fmt.Errorf("no go.mod of github.com/csi-resizer/csi-resizer above the working directory")
				return
			}
			dir = parent
		}
	})
	return repoRoot.dir, repoRoot.err
}

// productBuilds holds one build per product binary, so a binary that does
// not compile yet does not block tests of the other.
var productBuilds struct {
	mu     sync.Mutex
	dir    string
	dirErr error
	byName map[string]*productBuild
}

type productBuild struct {
	once sync.Once
	path string
	err  error
}

// BuildResizer builds ./cmd/csi-resizer once per test binary with
// -mod=vendor into a temp dir and returns the binary's path.
func BuildResizer(t testing.TB) string {
	t.Helper()
	return BuildCommand(t, "csi-resizer")
}

// BuildStatefulSetResizer is BuildResizer for ./cmd/statefulset-resizer.
func BuildStatefulSetResizer(t testing.TB) string {
	t.Helper()
	return BuildCommand(t, "statefulset-resizer")
}

// BuildCommand builds ./cmd/<name> of the main module once per test binary
// (go build -mod=vendor) and returns the binary's path.
func BuildCommand(t testing.TB, name string) string {
	t.Helper()
	productBuilds.mu.Lock()
	if productBuilds.byName == nil {
		productBuilds.byName = map[string]*productBuild{}
	}
	b := productBuilds.byName[name]
	if b == nil {
		b = &productBuild{}
		productBuilds.byName[name] = b
	}
	productBuilds.mu.Unlock()
	b.once.Do(func() { b.path, b.err = buildCommand(name) })
	if b.err != nil {
		t.Fatalf("build ./cmd/%s: %v", name, b.err)
	}
	return b.path
}

// tempBinPrefix names the per-process build dirs; the pid in the name lets a
// later run remove the dirs of test binaries that are gone (there is no
// process-exit hook to do it in the owner).
const tempBinPrefix = "csi-resizer-test-bin-"

func buildDir() (string, error) {
	productBuilds.mu.Lock()
	defer productBuilds.mu.Unlock()
	if productBuilds.dir == "" && productBuilds.dirErr == nil {
		removeStaleBinDirs()
		productBuilds.dir, productBuilds.dirErr = os.MkdirTemp("", fmt.Sprintf("%s%d-", tempBinPrefix, os.Getpid()))
	}
	return productBuilds.dir, productBuilds.dirErr
}

func buildCommand(name string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	dir, err := buildDir()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, name)
	args := []string{"build", "-mod=vendor", "-o", out, "./cmd/" + name}
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, b)
	}
	return out, nil
}

func removeStaleBinDirs() {
	entries, err := os.ReadDir(os.TempDir())
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), tempBinPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid == os.Getpid() {
			continue
		}
		// Signal 0 only checks existence; ESRCH = the owner is gone.
		if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
			_ = os.RemoveAll(filepath.Join(os.TempDir(), e.Name()))
		}
	}
}

// modulePath returns the module path declared in a go.mod file.
func modulePath(gomod []byte) string {
	for _, line := range strings.Split(string(gomod), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}

// RunCommand runs binary with args to its end (at most 30s) and returns its exit code, stdout
// and stderr: the command tests' check of exit codes and of the one line a bad flag prints.
func RunCommand(t testing.TB, binary string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		code = exit.ExitCode()
	default:
		t.Fatalf("%s %v: %v (stderr %q)", filepath.Base(binary), args, err, errOut.String())
	}
	return code, out.String(), errOut.String()
}
