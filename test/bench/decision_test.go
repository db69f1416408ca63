//go:build integration

package bench

import (
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/csi-resizer/csi-resizer/test/framework"
)

// DecisionRun is one Go benchmark of pkg/expand (the pure decision function), the median of
// its -count runs.
type DecisionRun struct {
	Name        string  `json:"name"`
	NsPerOp     float64 `json:"nsPerOp"`
	BytesPerOp  float64 `json:"bytesPerOp"`
	AllocsPerOp float64 `json:"allocsPerOp"`
	Runs        int     `json:"runs"`
}

// BenchmarkDecision runs pkg/expand's Go benchmarks (BenchmarkPlanExpansion,
// BenchmarkObservePlanStart) in a child `go test`, so their numbers land in the same report.
func BenchmarkDecision(b *testing.B) {
	root, err := framework.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	benchtime, count := "1s", "5"
	if smoke {
		benchtime, count = "100x", "1"
	}
	cmd := exec.Command("go", "test", "-mod=vendor", "-run", "^$", "-bench", ".", "-benchmem",
		"-benchtime", benchtime, "-count", count, "./pkg/expand")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=vendor")
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("go test ./pkg/expand -bench: %v\n%s", err, out)
	}
	runs := map[string][]DecisionRun{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := f[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			name = name[:i] // the -GOMAXPROCS suffix
		}
		var r DecisionRun
		r.Name = name
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "ns/op":
				r.NsPerOp = v
			case "B/op":
				r.BytesPerOp = v
			case "allocs/op":
				r.AllocsPerOp = v
			}
		}
		runs[name] = append(runs[name], r)
	}
	if len(runs) == 0 {
		b.Fatalf("no benchmark lines in:\n%s", out)
	}
	b.ReportMetric(0, "ns/op")
	for name, rs := range runs {
		sort.Slice(rs, func(i, j int) bool { return rs[i].NsPerOp < rs[j].NsPerOp })
		med := rs[len(rs)/2]
		med.Runs = len(rs)
		report.addDecision(med)
		b.Logf("%s: %.1f ns/op, %.0f B/op, %.0f allocs/op (median of %d)", name, med.NsPerOp, med.BytesPerOp, med.AllocsPerOp, med.Runs)
	}
}
