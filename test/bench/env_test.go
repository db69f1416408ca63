//go:build integration

package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// syncedMarker is what csi-resizer logs once its informers (and, when it needs it, the pod
// informer) have synced and the workers start.
const syncedMarker = "Starting workers"

// resizerLogLevel: -v=2, what a production sidecar typically runs with; the framework's -v=4
// debug logging of every sync would be part of what is measured.
const resizerLogLevel = "-v=2"

// upstreamStartedMarker is what upstream external-resizer logs when its controller starts,
// before it waits for its caches.
const upstreamStartedMarker = "Starting external resizer"

// startResizer runs bin against driver with the benchmark's defaults and args, waits until it
// serves metrics and its caches have synced with the pvcs PVCs present, and returns the process
// and how long the start took (process start to synced).
func startResizer(tb testing.TB, e *scenario.Env, bin binary, driver *framework.Driver, pvcs int, args ...string) (*framework.Process, time.Duration) {
	tb.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", framework.FreePort(tb))
	all := append([]string{
		"--csi-address=" + driver.SocketPath,
		"--kubeconfig=" + e.Cluster.Kubeconfig,
		"--http-endpoint=" + addr,
		resizerLogLevel,
		"--timeout=" + framework.DefaultResizerTimeout.String(),
	}, args...)
	p := framework.NewProcess(tb, bin.Label, bin.Path, all...)
	p.HTTPAddr = addr
	p.Env = bin.Env
	start := time.Now()
	p.Start(tb)
	p.WaitHTTP(tb, "/metrics", 2*time.Minute)
	waitFor(tb, 5*time.Minute, func() (bool, string) {
		if exited, err := p.Exited(); exited {
			tb.Fatalf("%s exited: %v\n%s", bin.Label, err, p.LogTail(40))
		}
		if !bin.Upstream {
			return p.LogContains(syncedMarker), fmt.Sprintf("%s has not logged %q; log tail:\n%s", bin.Label, syncedMarker, p.LogTail(10))
		}
		// Upstream logs nothing once synced; its informer queues every PVC it lists, so its
		// resize queue has had one add per PVC by then.
		queue := resizeQueue(bin, driver)[0]
		adds := resizerMetric(tb, p, "workqueue_adds_total", queue)
		return p.LogContains(upstreamStartedMarker) && adds >= float64(pvcs),
			fmt.Sprintf("%s: logged %q: %v, %v of %d PVCs queued (workqueue_adds_total{%s}); log tail:\n%s",
				bin.Label, upstreamStartedMarker, p.LogContains(upstreamStartedMarker), adds, pvcs, queue, p.LogTail(10))
	})
	return p, time.Since(start)
}

// waitFor polls cond every 100 ms until it holds, failing the benchmark after timeout.
func waitFor(tb testing.TB, timeout time.Duration, cond func() (bool, string)) {
	tb.Helper()
	framework.Eventually(tb, timeout, cond)
}

// pollUntil polls cond every interval until it holds or timeout passes; it reports whether
// cond held.
func pollUntil(timeout, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
}

// parallel runs fn(i) for i in [0, n) on workers goroutines and returns the first error.
func parallel(n, workers int, fn func(i int) error) error {
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
		next  = make(chan int)
	)
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := fn(i); err != nil {
					once.Do(func() { first = err })
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}

// procMemory reads VmRSS and VmHWM (bytes) of pid.
func procMemory(pid int) (rss, hwm int64, err error) {
	m, err := procStatus(pid)
	return m["VmRSS"], m["VmHWM"], err
}

// procStatus reads the memory lines (kB) of /proc/<pid>/status, in bytes.
func procStatus(pid int) (map[string]int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 3 && f[2] == "kB" {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			out[strings.TrimSuffix(f[0], ":")] = v << 10
		}
	}
	return out, nil
}

// cpuSeconds is the user+system CPU time pid has used.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses and may contain spaces.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100 // USER_HZ is 100 on Linux
}

// apiKey is one series of the apiserver's apiserver_request_total.
type apiKey struct {
	Verb, Group, Resource, Subresource, Code string
}

func (k apiKey) String() string {
	r := k.Resource
	if k.Group != "" {
		r += "." + k.Group
	}
	if k.Subresource != "" {
		r += "/" + k.Subresource
	}
	return k.Verb + " " + r + " " + k.Code
}

type apiCounts map[apiKey]float64

// scrapeAPIServer reads apiserver_request_total from the apiserver's /metrics (admin client).
func scrapeAPIServer(tb testing.TB, ctx context.Context, c *framework.Cluster) apiCounts {
	tb.Helper()
	raw, err := c.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		tb.Fatalf("apiserver /metrics: %v", err)
	}
	out := apiCounts{}
	for _, line := range strings.Split(string(raw), "\n") {
		rest, ok := strings.CutPrefix(line, "apiserver_request_total{")
		if !ok {
			continue
		}
		end := strings.LastIndex(rest, "}")
		if end < 0 {
			continue
		}
		labels := parseLabels(rest[:end])
		v, err := strconv.ParseFloat(strings.TrimSpace(rest[end+1:]), 64)
		if err != nil {
			continue
		}
		k := apiKey{Verb: labels["verb"], Group: labels["group"], Resource: labels["resource"], Subresource: labels["subresource"], Code: labels["code"]}
		out[k] += v
	}
	return out
}

// parseLabels parses `a="x",b="y"` (the apiserver's label values hold no quotes or commas).
func parseLabels(s string) map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if ok {
			out[k] = strings.Trim(v, `"`)
		}
	}
	return out
}

func (a apiCounts) minus(b apiCounts) apiCounts {
	out := apiCounts{}
	for k, v := range a {
		if d := v - b[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// resizerResources are the resources the sidecar reads or writes. Requests on other resources
// in a window are the apiserver's own loops (its identity Lease, the kubernetes Service
// endpoints, APF configuration, ...) and are reported apart, not attributed to the resizer.
var resizerResources = map[string]bool{
	"persistentvolumeclaims": true, "persistentvolumes": true, "events": true, "pods": true, "secrets": true,
	"volumeattributesclasses": true,
}

var writeVerbs = map[string]bool{"POST": true, "PUT": true, "PATCH": true, "APPLY": true, "DELETE": true, "DELETECOLLECTION": true}
var readVerbs = map[string]bool{"GET": true, "LIST": true}

// Requests are API requests in a measurement window, from the apiserver's own counters.
type Requests struct {
	// Writes by what they change.
	PVCStatusWrites int `json:"pvcStatusWrites"`
	PVWrites        int `json:"pvWrites"`
	OtherWrites     int `json:"otherWrites"`
	EventWrites     int `json:"eventWrites"`
	// Reads are GET and LIST; Watches are WATCH requests that ended in the window (a watch is
	// counted when it ends).
	Reads   int `json:"reads"`
	Watches int `json:"watches"`
	// Conflicts are writes answered 409.
	Conflicts int `json:"conflicts"`
	// Own are the benchmark's own requests in the window, subtracted from the counts above.
	Own map[string]int `json:"own"`
	// Detail is every attributed series: "VERB resource[/subresource] code" → count.
	Detail map[string]int `json:"detail"`
	// Background are requests on resources the resizer never touches (the apiserver's loops).
	Background map[string]int `json:"background,omitempty"`
}

// NonEventWrites is PVC status + PV + other writes.
func (r Requests) NonEventWrites() int { return r.PVCStatusWrites + r.PVWrites + r.OtherWrites }

// classify splits a window's apiserver counts. own holds the benchmark's own requests as
// apiKey without Code, which are subtracted.
func classify(d apiCounts, own map[apiKey]int) Requests {
	r := Requests{Own: map[string]int{}, Detail: map[string]int{}, Background: map[string]int{}}
	left := map[apiKey]int{}
	for k, n := range own {
		left[k] = n
		r.Own[k.String()] = n
	}
	keys := make([]apiKey, 0, len(d))
	for k := range d {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	for _, k := range keys {
		n := int(d[k] + 0.5)
		if !resizerResources[k.Resource] {
			r.Background[k.String()] += n
			continue
		}
		nc := apiKey{Verb: k.Verb, Group: k.Group, Resource: k.Resource, Subresource: k.Subresource}
		if o := left[nc]; o > 0 {
			sub := min(o, n)
			left[nc] -= sub
			n -= sub
		}
		if n == 0 {
			continue
		}
		r.Detail[k.String()] += n
		switch {
		case writeVerbs[k.Verb]:
			if k.Code == "409" {
				r.Conflicts += n
			}
			switch {
			case k.Resource == "events":
				r.EventWrites += n
			case k.Resource == "persistentvolumeclaims" && k.Subresource == "status":
				r.PVCStatusWrites += n
			case k.Resource == "persistentvolumes" && k.Subresource == "":
				r.PVWrites += n
			default:
				r.OtherWrites += n
			}
		case readVerbs[k.Verb]:
			r.Reads += n
		case k.Verb == "WATCH" || k.Verb == "WATCHLIST":
			r.Watches += n
		}
	}
	if len(r.Background) == 0 {
		r.Background = nil
	}
	return r
}

// resizerMetric reads one metric (summed over series matching labels) from a process's
// /metrics.
func resizerMetric(tb testing.TB, p *framework.Process, metric string, labels ...string) float64 {
	tb.Helper()
	return scenario.MetricValue(scenario.Scrape(tb, p), metric, labels...)
}

// callsSince returns the driver calls (all methods) that arrived at or after t.
func callsSince(tb testing.TB, d *framework.Driver, t time.Time) []framework.Call {
	tb.Helper()
	var out []framework.Call
	for _, c := range d.Calls(tb, "") {
		if !c.Time.Before(t) {
			out = append(out, c)
		}
	}
	return out
}

func seconds(d time.Duration) float64 { return round(d.Seconds(), 2) }

func round(v float64, digits int) float64 {
	p := 1.0
	for range digits {
		p *= 10
	}
	if v < 0 {
		return -float64(int64(-v*p+0.5)) / p
	}
	return float64(int64(v*p+0.5)) / p
}
