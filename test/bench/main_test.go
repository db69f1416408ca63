//go:build integration

// Package bench measures csi-resizer on a real control plane (etcd + kube-apiserver on
// 127.0.0.1, the mock CSI driver and the csi-resizer binary as separate processes, see
// test/framework): throughput, API requests and CSI calls per resize, memory with many
// objects, the cost of an infeasible PVC, VolumeAttributesClass modification, the pure
// decision function, and volume-autoscaler with many simulated kubelets. It is run by
// `make bench` (full size, writes docs/benchmarks.md and docs/benchmarks.json) and
// `make bench-smoke` (BENCH_SMOKE=1: a few objects, prints the table, writes nothing unless
// -out is given), and it never fails on a missed target: it reports.
//
// Knobs (flag, or environment variable when the flag is not given):
//
//	-pvcs N              BENCH_PVCS         PVCs resized at once in the throughput runs (200)
//	-mem-objects N       BENCH_MEM_OBJECTS  PVC/PV pairs (and pods) of the memory runs (10000)
//	-modify-pvcs N       BENCH_MODIFY_PVCS  PVCs moved to another VolumeAttributesClass at once
//	                                        in the modification runs (50, smoke 3)
//	-out DIR             BENCH_OUT          where benchmarks.md/.json go ("" = do not write;
//	                                        default docs/ of the repository, smoke: "")
//	-compare L=PATH,...  BENCH_COMPARE      more resizer binaries to measure next to the
//	                                        working tree's build in the memory runs, e.g.
//	                                        a build of an older commit; L=PATH@GOGC=50 runs it
//	                                        with that environment
//	-mem-reps N          BENCH_MEM_REPS     processes per binary and memory stage; the median
//	                                        RSS is reported (3, smoke 1)
//	-compare-throughput  BENCH_COMPARE_THROUGHPUT  the same for the throughput runs (which take
//	  L=PATH,...                            minutes each at the default client rate)
//	-pprof DIR           BENCH_PPROF        heap profiles of the memory stages, from a build of
//	                                        the same code with net/http/pprof
//	                                        (test/bench/pprofresizer), and their top in the report
//	-settle-steady       BENCH_STEADY       also measure RSS after the Go runtime's periodic
//	                                        GC and scavenger (~2.5 min per memory run)
//	(none)               BENCH_AUTOSCALE_NODES, _PVCS, _FILL, _INTERVAL, _ROUNDS
//	                                        BenchmarkVolumeAutoscalerScale's simulated nodes
//	                                        (1000, smoke 20), PVCs (10000, smoke 100), PVCs made
//	                                        to cross their threshold (100, smoke 10),
//	                                        --interval (60s, smoke 2s) and steady rounds (2,
//	                                        smoke 3)
//	-upstream PATH       UPSTREAM_RESIZER   upstream external-resizer's binary: measured next
//	                                        to csi-resizer in the same run, with the same
//	                                        flags, objects and driver, in the throughput,
//	                                        infeasible, modification and memory benchmarks
//	                                        ("" = not at all;
//	                                        `make bench` passes ../shared/anchors/external-resizer
//	                                        when it exists)
package bench

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/csi-resizer/csi-resizer/test/framework"
)

var (
	flagPVCs       = flag.Int("pvcs", 0, "PVCs resized at once in the throughput runs (env BENCH_PVCS; default 200, smoke 5)")
	flagModifyPVCs = flag.Int("modify-pvcs", 0, "PVCs moved to another VolumeAttributesClass at once in the modification runs (env BENCH_MODIFY_PVCS; default 50, smoke 3)")
	flagMemObjects = flag.Int("mem-objects", 0, "PVC/PV pairs and pods of the memory runs (env BENCH_MEM_OBJECTS; default 10000, smoke 100)")
	flagOut        = flag.String("out", "", "directory for benchmarks.md and benchmarks.json (env BENCH_OUT; default <repo>/docs, smoke: none); '-' = do not write")
	flagCompare    = flag.String("compare", "", "more resizer binaries to measure in the memory runs, label=path[@ENV=value...],... (env BENCH_COMPARE)")
	flagCompareTP  = flag.String("compare-throughput", "", "more resizer binaries to measure in the throughput runs, label=path,... (env BENCH_COMPARE_THROUGHPUT)")
	flagMemReps    = flag.Int("mem-reps", 0, "processes per binary and stage in the memory runs, the median is reported (env BENCH_MEM_REPS; default 3, smoke 1)")
	flagPprof      = flag.String("pprof", "", "directory for heap profiles of the memory runs, taken from a pprof-enabled build of the same code (env BENCH_PPROF; default none)")
	flagSteady     = flag.Bool("settle-steady", false, "also measure steady-state RSS after the runtime's forced GC (env BENCH_STEADY=1; default on outside smoke)")
	flagUpstream   = flag.String("upstream", "", "upstream external-resizer binary to measure side by side (env UPSTREAM_RESIZER; default none)")
)

// upstreamLabel is the label of upstream external-resizer's binary in the report.
const upstreamLabel = "upstream"

// smoke is BENCH_SMOKE=1: every benchmark runs with a few objects, so they cannot rot.
var smoke = os.Getenv("BENCH_SMOKE") == "1"

func intKnob(f *int, env string, full, small int) int {
	if *f > 0 {
		return *f
	}
	if v, err := strconv.Atoi(os.Getenv(env)); err == nil && v > 0 {
		return v
	}
	if smoke {
		return small
	}
	return full
}

func pvcCount() int       { return intKnob(flagPVCs, "BENCH_PVCS", 200, 5) }
func memObjectCount() int { return intKnob(flagMemObjects, "BENCH_MEM_OBJECTS", 10000, 100) }

func steadyRSS() bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "settle-steady" })
	if set {
		return *flagSteady
	}
	if v := os.Getenv("BENCH_STEADY"); v != "" {
		return v == "1"
	}
	return !smoke
}

// outDir is where the report goes; "" = nowhere.
func outDir() string {
	out := *flagOut
	if out == "" {
		out = os.Getenv("BENCH_OUT")
	}
	if out == "-" {
		return ""
	}
	if out != "" {
		return out
	}
	if smoke {
		return ""
	}
	root, err := framework.RepoRoot()
	if err != nil {
		return ""
	}
	return filepath.Join(root, "docs")
}

// binary is one resizer build under test.
type binary struct {
	Label string
	Path  string
	// Env is added to the process's environment.
	Env []string
	// Upstream: upstream external-resizer, which logs no line once its caches have synced
	// (startResizer watches its work queue instead).
	Upstream bool
}

// upstreamBinary is -upstream / UPSTREAM_RESIZER, if set.
func upstreamBinary(tb testing.TB) (binary, bool) {
	tb.Helper()
	path := *flagUpstream
	if path == "" {
		path = os.Getenv("UPSTREAM_RESIZER")
	}
	if path == "" {
		return binary{}, false
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		tb.Fatalf("-upstream %s: %v", path, err)
	}
	if _, err := os.Stat(abs); err != nil {
		tb.Fatalf("-upstream / UPSTREAM_RESIZER: %v (unset it to measure csi-resizer alone)", err)
	}
	return binary{Label: upstreamLabel, Path: abs, Upstream: true}, true
}

// releaseBuild is the working tree's csi-resizer built as `make build` and the image build it:
// CGO off, -trimpath, -ldflags "-s -w" (the executable's pages are a third of the idle RSS, and
// stripping changes them). Built once per test binary.
var releaseBuild struct {
	once sync.Once
	path string
	err  error
}

func buildRelease() (string, error) {
	root, err := framework.RepoRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "bench-csi-resizer-")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "csi-resizer")
	cmd := exec.Command("go", "build", "-mod=vendor", "-trimpath", "-ldflags", "-s -w -X main.version=bench", "-o", path, "./cmd/csi-resizer")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%v: %w\n%s", cmd.Args, err, out)
	}
	return path, nil
}

// binaries returns the working tree's csi-resizer (release build, see releaseBuild), upstream's
// (-upstream) and the -compare ones.
func binaries(tb testing.TB) []binary {
	tb.Helper()
	return binariesFrom(tb, *flagCompare, "BENCH_COMPARE")
}

func binariesFrom(tb testing.TB, spec, env string) []binary {
	tb.Helper()
	releaseBuild.once.Do(func() { releaseBuild.path, releaseBuild.err = buildRelease() })
	if releaseBuild.err != nil {
		tb.Fatalf("building csi-resizer: %v", releaseBuild.err)
	}
	out := []binary{{Label: "csi-resizer", Path: releaseBuild.path}}
	if up, ok := upstreamBinary(tb); ok {
		out = append(out, up)
	}
	if spec == "" {
		spec = os.Getenv(env)
	}
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		label, path, ok := strings.Cut(item, "=")
		if !ok {
			tb.Fatalf("-compare %q: want label=path[@ENV=value...]", item)
		}
		parts := strings.Split(path, "@")
		if _, err := os.Stat(parts[0]); err != nil {
			tb.Fatalf("-compare %s: %v", label, err)
		}
		out = append(out, binary{Label: label, Path: parts[0], Env: parts[1:]})
	}
	return out
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if releaseBuild.path != "" {
		_ = os.RemoveAll(filepath.Dir(releaseBuild.path))
	}
	if report.empty() {
		os.Exit(code)
	}
	report.finish()
	fmt.Println()
	fmt.Print(report.table())
	if dir := outDir(); dir != "" {
		md, js, err := report.write(dir)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: writing the report: %v\n", err)
			if code == 0 {
				code = 1
			}
		} else {
			fmt.Printf("\nwrote %s and %s\n", md, js)
		}
	}
	os.Exit(code)
}
