//go:build integration

package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// MemoryRun is the resident memory of a resizer binary with a cluster's worth of objects in its
// informer caches: the median over MemoryReps processes started one after the other.
type MemoryRun struct {
	Binary string `json:"binary"`
	// Stage: idle, pairs, pairs+pods (default driver: no pod informer), pairs+pods+pod-informer
	// (offline-only driver: the pod informer runs).
	Stage       string `json:"stage"`
	Pairs       int    `json:"pairs"`
	Pods        int    `json:"pods"`
	OfflineOnly bool   `json:"offlineOnlyDriver"`
	PodInformer bool   `json:"podInformerStarted"`
	Reps        int    `json:"reps"`
	// SyncSeconds: process start until the caches synced (workers start), median.
	SyncSeconds float64 `json:"syncSeconds"`
	// RSSBytes: VmRSS once it settled after the sync (changes < 1 MiB over 3 s), median over
	// the reps, with their minimum and maximum; HWMBytes is VmHWM, the peak, at that point.
	RSSBytes    int64 `json:"rssBytes"`
	RSSMinBytes int64 `json:"rssMinBytes"`
	RSSMaxBytes int64 `json:"rssMaxBytes"`
	HWMBytes    int64 `json:"hwmBytes"`
	// RssAnonBytes and RssFileBytes split RSSBytes (same process): anonymous memory (heap,
	// stacks, runtime) and file-backed pages (the executable's text and data).
	RssAnonBytes int64 `json:"rssAnonBytes"`
	RssFileBytes int64 `json:"rssFileBytes"`
	Settled      bool  `json:"settled"`
	// SteadyRSSBytes: VmRSS of the first rep again after steadyAfter, when the Go runtime's
	// periodic GC (every 2 min) and the scavenger have had their turn; 0 if not measured.
	SteadyRSSBytes int64   `json:"steadyRssBytes,omitempty"`
	SteadySeconds  float64 `json:"steadyAfterSeconds,omitempty"`
	// HeapInuseBytes is go_memstats_heap_inuse_bytes from the resizer's /metrics after the
	// settle, median.
	HeapInuseBytes int64 `json:"heapInuseBytes"`
}

// HeapProfile is the top of a heap profile (inuse_space, after a GC) of the pprof build.
type HeapProfile struct {
	Stage string   `json:"stage"`
	File  string   `json:"file"`
	Top   []string `json:"top"`
}

const (
	stageIdle       = "idle"
	stagePairs      = "pairs"
	stagePods       = "pairs+pods"
	stagePodsActive = "pairs+pods+pod-informer"
	// steadyAfter is past the runtime's forced GC period (2 min) with time for the scavenger.
	steadyAfter = 150 * time.Second
	pprofLabel  = "pprof-build"
)

func memReps() int { return intKnob(flagMemReps, "BENCH_MEM_REPS", 3, 1) }

// pprofDir is where heap profiles go (BENCH_PPROF or -pprof); "" = no profiles.
func pprofDir() string {
	if *flagPprof != "" {
		return *flagPprof
	}
	return os.Getenv("BENCH_PPROF")
}

func BenchmarkMemory(b *testing.B) {
	n := memObjectCount()
	bins := binaries(b)
	var prof *binary
	if dir := pprofDir(); dir != "" {
		prof = buildPprofResizer(b, dir)
	}
	e := scenario.Start(b, scenario.Options{AdminResizer: true, NoResizer: true})
	// The same driver name, offline-only: with it the resizer starts its pod informer.
	offline := framework.StartMockDriver(b, framework.MockDriverOptions{Name: e.Driver.Name, OfflineExpansion: true})
	client, err := bulkClient(e.Cluster)
	if err != nil {
		b.Fatal(err)
	}
	measure := func(stage string, pairs, pods int, driver *framework.Driver) {
		b.Run(stage, func(b *testing.B) {
			b.ReportMetric(0, "ns/op")
			for _, r := range measureMemory(b, e, bins, prof, driver, stage, pairs, pods, driver == offline) {
				report.addMemory(r)
				b.ReportMetric(mib(r.RSSBytes), r.Binary+"-RSS-MiB")
			}
		})
	}

	measure(stageIdle, 0, 0, e.Driver)

	start := time.Now()
	created, err := createPairs(e.Ctx, client, pairSpec{
		Namespace: e.Namespace, Driver: e.Driver.Name, StorageClass: e.StorageClass, Size: "10Gi", Prefix: "data-web",
	}, n)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("created %d bound PVC/PV pairs in %v", n, time.Since(start).Round(time.Millisecond))
	measure(stagePairs, n, 0, e.Driver)

	start = time.Now()
	claims := make([]string, len(created))
	for i, p := range created {
		claims[i] = p.PVC
	}
	framework.EnsureNode(b, e.Ctx, e.Client, framework.DefaultNodeName)
	if err := createPods(e.Ctx, client, e.Namespace, claims, framework.DefaultNodeName); err != nil {
		b.Fatal(err)
	}
	b.Logf("created %d running pods in %v", n, time.Since(start).Round(time.Millisecond))
	measure(stagePods, n, n, e.Driver)
	measure(stagePodsActive, n, n, offline)
}

// sample is one process's measurement.
type sample struct {
	rss, hwm, steady, heap int64
	anon, file             int64
	settled                bool
	sync                   time.Duration
	podInformer            bool
}

// measureMemory starts memReps() rounds of every binary. In a round the binaries run at the
// same time (memory is per process; only their start-up competes for the CPU); the first
// round also waits for the steady value and takes the heap profile.
func measureMemory(b *testing.B, e *scenario.Env, bins []binary, prof *binary, driver *framework.Driver, stage string, pairs, pods int, offline bool) []MemoryRun {
	reps := memReps()
	samples := make([][]sample, len(bins))
	for rep := range reps {
		round := bins
		if rep == 0 && prof != nil {
			round = append(append([]binary{}, bins...), *prof)
		}
		procs := make([]*framework.Process, len(round))
		got := make([]sample, len(round))
		for i, bin := range round {
			// Started one after the other (startResizer may Fatal, which must happen on this
			// goroutine), then measured in parallel.
			p, took := startResizer(b, e, bin, driver, pairs)
			procs[i], got[i].sync = p, took
		}
		synced := time.Now()
		var wg sync.WaitGroup
		for i := range round {
			wg.Go(func() {
				s, pid := &got[i], procs[i].Pid()
				s.rss, s.hwm, s.settled = settledRSS(pid, time.Minute)
				if m, err := procStatus(pid); err == nil {
					s.anon, s.file = m["RssAnon"], m["RssFile"]
				}
				if rep == 0 && steadyRSS() {
					pollUntil(steadyAfter+time.Second, time.Second, func() bool { return time.Since(synced) >= steadyAfter })
					s.steady, _, _ = settledRSS(pid, time.Minute)
				}
			})
		}
		wg.Wait()
		for i, p := range procs {
			// Upstream registers its pod informer at start unless --handle-volume-inuse-error=false.
			got[i].podInformer = p.LogContains("Started the pod informer") || p.LogContains("Register Pod informer")
			got[i].heap = int64(resizerMetric(b, p, "go_memstats_heap_inuse_bytes"))
			if round[i].Label == pprofLabel {
				report.addProfile(heapProfile(b, round[i], stage))
			}
			b.Logf("%s %s rep %d (%d pairs, %d pods, pod informer %v): RSS %.1f MiB (settled %v, peak %.1f MiB, steady %s), heap in use %.1f MiB, synced in %.1fs",
				round[i].Label, stage, rep, pairs, pods, got[i].podInformer, mib(got[i].rss), got[i].settled, mib(got[i].hwm), fmtMiB(got[i].steady), mib(got[i].heap), got[i].sync.Seconds())
			if err := p.Stop(); err != nil {
				b.Logf("stopping %s: %v", round[i].Label, err)
			}
		}
		for i := range bins {
			samples[i] = append(samples[i], got[i])
		}
	}
	out := make([]MemoryRun, len(bins))
	for i, bin := range bins {
		ss := samples[i]
		r := MemoryRun{Binary: bin.Label, Stage: stage, Pairs: pairs, Pods: pods, OfflineOnly: offline, Reps: len(ss),
			Settled: true, PodInformer: true, SteadyRSSBytes: ss[0].steady}
		if ss[0].steady > 0 {
			r.SteadySeconds = steadyAfter.Seconds()
		}
		var rss, heap []int64
		var syncs []time.Duration
		for _, s := range ss {
			rss, heap, syncs = append(rss, s.rss), append(heap, s.heap), append(syncs, s.sync)
			r.Settled = r.Settled && s.settled
			r.PodInformer = r.PodInformer && s.podInformer
		}
		mid := medianIndex(rss)
		r.RSSBytes, r.HWMBytes, r.RssAnonBytes, r.RssFileBytes = ss[mid].rss, ss[mid].hwm, ss[mid].anon, ss[mid].file
		r.RSSMinBytes, r.RSSMaxBytes = slicesMin(rss), slicesMax(rss)
		r.HeapInuseBytes = heap[medianIndex(heap)]
		sort.Slice(syncs, func(a, b int) bool { return syncs[a] < syncs[b] })
		r.SyncSeconds = seconds(syncs[len(syncs)/2])
		out[i] = r
	}
	return out
}

func medianIndex(v []int64) int {
	idx := make([]int, len(v))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return v[idx[a]] < v[idx[b]] })
	return idx[len(idx)/2]
}

func slicesMin(v []int64) int64 {
	m := v[0]
	for _, x := range v {
		m = min(m, x)
	}
	return m
}

func slicesMax(v []int64) int64 {
	m := v[0]
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

// settledRSS samples VmRSS every 500 ms until the last 6 samples (3 s) lie within 1 MiB, or
// timeout passes (then settled is false and the last sample is returned).
func settledRSS(pid int, timeout time.Duration) (rss, hwm int64, settled bool) {
	var samples []int64
	settled = pollUntil(timeout, 500*time.Millisecond, func() bool {
		r, h, err := procMemory(pid)
		if err != nil {
			return false
		}
		rss, hwm = r, h
		samples = append(samples, r)
		if len(samples) < 6 {
			return false
		}
		lo, hi := samples[len(samples)-6], samples[len(samples)-6]
		for _, s := range samples[len(samples)-6:] {
			lo, hi = min(lo, s), max(hi, s)
		}
		return hi-lo <= 1<<20
	})
	return rss, hwm, settled
}

// buildPprofResizer builds test/bench/pprofresizer (cmd/csi-resizer's code plus
// net/http/pprof) into dir.
func buildPprofResizer(tb testing.TB, dir string) *binary {
	tb.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	dir, _ = filepath.Abs(dir)
	path := filepath.Join(dir, "pprofresizer")
	cmd := exec.Command("go", "build", "-mod=vendor", "-o", path, "./test/bench/pprofresizer")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("building the pprof resizer: %v\n%s", err, out)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", framework.FreePort(tb))
	return &binary{Label: pprofLabel, Path: path, Env: []string{"BENCH_PPROF_ADDR=" + addr}}
}

// heapProfile saves the pprof build's heap profile (after a forced GC: live objects only) and
// returns its top entries by in-use space.
func heapProfile(tb testing.TB, bin binary, stage string) HeapProfile {
	tb.Helper()
	addr := strings.TrimPrefix(bin.Env[0], "BENCH_PPROF_ADDR=")
	dir := filepath.Dir(bin.Path)
	file := filepath.Join(dir, strings.NewReplacer("+", "-").Replace(stage)+".heap.pb.gz")
	hp := HeapProfile{Stage: stage, File: file}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/pprof/heap?gc=1", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Logf("heap profile: %v", err)
		return hp
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		tb.Logf("heap profile: status %d, %v", resp.StatusCode, err)
		return hp
	}
	if err := os.WriteFile(file, raw, 0o644); err != nil {
		tb.Logf("heap profile: %v", err)
		return hp
	}
	out, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=25", "-sample_index=inuse_space", bin.Path, file).CombinedOutput()
	if err != nil {
		tb.Logf("go tool pprof: %v\n%s", err, out)
		return hp
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.HasPrefix(line, "File:") || strings.HasPrefix(line, "Build ID:") || strings.HasPrefix(line, "Type:") || strings.HasPrefix(line, "Time:") {
			continue
		}
		hp.Top = append(hp.Top, line)
	}
	return hp
}

func mib(v int64) float64 { return round(float64(v)/(1<<20), 1) }

func fmtMiB(v int64) string {
	if v == 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f MiB", mib(v))
}
