//go:build integration

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// throughputConfigs are the sidecar flag sets of the throughput runs.
var throughputConfigs = []struct {
	Name string
	Args []string
	QPS  float64
}{
	{Name: "default-flags", Args: nil, QPS: 5},
	{Name: "qps50-burst100", Args: []string{"--kube-api-qps=50", "--kube-api-burst=100"}, QPS: 50},
}

// writesPerResize are the rate-limited writes a resize cannot do without: the PVC status that
// records the target before the driver call, the PV capacity and the final PVC status. N
// resizes at a client rate of QPS need at least 3 × N / QPS seconds (FloorSeconds).
const writesPerResize = 3

// ThroughputRun is one throughput measurement.
type ThroughputRun struct {
	Binary string   `json:"binary"`
	Config string   `json:"config"`
	Flags  []string `json:"flags"`
	PVCs   int      `json:"pvcs"`
	// QPS is the run's --kube-api-qps; FloorSeconds = writesPerResize × PVCs / QPS.
	QPS          float64 `json:"qps"`
	FloorSeconds float64 `json:"floorSeconds"`
	// AllDoneSeconds: from the first request change until every PVC has status.capacity = the
	// new size (seen through a watch).
	AllDoneSeconds float64 `json:"allDoneSeconds"`
	P50DoneSeconds float64 `json:"p50DoneSeconds"`
	P90DoneSeconds float64 `json:"p90DoneSeconds"`
	// EventsDoneSeconds: until the last VolumeResizeSuccessful event arrived.
	EventsDoneSeconds float64 `json:"eventsDoneSeconds"`
	// EventsAtAllDone: events that had arrived when the last PVC was done.
	EventsAtAllDone  int     `json:"eventsAtAllDone"`
	ResizesPerSecond float64 `json:"resizesPerSecond"`
	// WriteRateUntilDone is (non-event writes + events arrived) / AllDoneSeconds: with a
	// shared client-side token bucket it cannot exceed --kube-api-qps (plus the burst).
	WriteRateUntilDone float64 `json:"writeRateUntilDone"`
	// Requests are the window's API requests (whole window, not per resize).
	Requests Requests `json:"requests"`
	// Per resize: from Requests divided by PVCs.
	ReadsPerResize          float64 `json:"readsPerResize"`
	NonEventWritesPerResize float64 `json:"nonEventWritesPerResize"`
	PVCStatusPerResize      float64 `json:"pvcStatusWritesPerResize"`
	PVPerResize             float64 `json:"pvWritesPerResize"`
	OtherWritesPerResize    float64 `json:"otherWritesPerResize"`
	EventWritesPerResize    float64 `json:"eventWritesPerResize"`
	// CSI: driver calls in the window by method, and per ControllerExpandVolume.
	CSICalls           map[string]int `json:"csiCalls"`
	CSICallsPerAttempt float64        `json:"csiCallsPerAttempt"`
	ExpandAttempts     int            `json:"expandAttempts"`
	// WorkqueueAddsPerResize from the resizer's workqueue_adds_total.
	WorkqueueAddsPerResize float64 `json:"workqueueAddsPerResize"`
	// CPUSecondsPerResize: user+system time of the resizer process.
	CPUSecondsPerResize float64 `json:"cpuSecondsPerResize"`
	// StartSeconds: resizer process start until its caches synced with the PVCs present.
	StartSeconds float64 `json:"startSeconds"`
	// AuditResizer are the resizer's requests in the window according to the apiserver's audit
	// log (by user agent): a cross-check of Requests, which come from apiserver_request_total.
	AuditResizer *clientRequests `json:"auditResizer"`
}

func BenchmarkThroughput(b *testing.B) {
	n := pvcCount()
	// -compare binaries are measured in the memory runs; the throughput runs take
	// -compare-throughput ones (a run takes minutes at the default client rate).
	for _, bin := range binariesFrom(b, *flagCompareTP, "BENCH_COMPARE_THROUGHPUT") {
		for _, cfg := range throughputConfigs {
			if smoke && bin.Upstream && cfg.Name != throughputConfigs[0].Name {
				continue // the smoke run only proves that upstream's side still works
			}
			b.Run(bin.Label+"/"+cfg.Name, func(b *testing.B) {
				r := runThroughput(b, bin, cfg.Name, cfg.Args, n)
				r.QPS, r.FloorSeconds = cfg.QPS, round(writesPerResize*float64(n)/cfg.QPS, 2)
				report.addThroughput(r)
				b.ReportMetric(0, "ns/op")
				b.ReportMetric(r.AllDoneSeconds, "s-all-done")
				b.ReportMetric(r.ResizesPerSecond, "resizes/s")
				b.ReportMetric(r.NonEventWritesPerResize, "writes/resize")
				b.ReportMetric(r.EventWritesPerResize, "event-writes/resize")
				b.ReportMetric(r.ReadsPerResize, "reads/resize")
				b.ReportMetric(r.CSICallsPerAttempt, "csi-calls/attempt")
			})
		}
	}
}

func runThroughput(b *testing.B, bin binary, config string, args []string, n int) ThroughputRun {
	auditFlags, auditLog := auditArgs(b, b.TempDir())
	e := scenario.Start(b, scenario.Options{AdminResizer: true, NoResizer: true, Cluster: framework.ClusterOptions{APIServerArgs: auditFlags}})
	ctx := e.Ctx
	client, err := bulkClient(e.Cluster)
	if err != nil {
		b.Fatal(err)
	}
	oldSize, newSize := resource.MustParse("1Gi"), resource.MustParse("2Gi")

	// Setup, all before the measurement window: volumes on the driver, bound pairs, the
	// resizer (its informers list the pairs, which need nothing), the benchmark's watches.
	ids := make([]string, n)
	if err := parallel(n, 8, func(i int) error {
		id, err := e.Driver.CreateVolume(ctx, fmt.Sprintf("%s-%d", e.Namespace, i), oldSize.Value())
		ids[i] = id
		return err
	}); err != nil {
		b.Fatal(err)
	}
	pairs, err := createPairs(ctx, client, pairSpec{
		Namespace: e.Namespace, Driver: e.Driver.Name, StorageClass: e.StorageClass, Size: oldSize.String(),
		Prefix: "data-web", VolumeIDs: ids,
	}, n)
	if err != nil {
		b.Fatal(err)
	}
	p, startTook := startResizer(b, e, bin, e.Driver, n, args...)
	w := startWatch(b, ctx, client, e.Namespace, n)

	before := scrapeAPIServer(b, ctx, e.Cluster)
	adds0 := resizerMetric(b, p, "workqueue_adds_total", resizeQueue(bin, e.Driver)...)
	cpu0 := cpuSeconds(p.Pid())

	// The window: every PVC asks for 2Gi at once.
	t0 := time.Now()
	w.arm(t0, newSize)
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"resources": map[string]any{"requests": map[string]string{"storage": newSize.String()}}}})
	if err := parallel(n, bulkConcurrency, func(i int) error {
		_, err := client.CoreV1().PersistentVolumeClaims(e.Namespace).Patch(ctx, pairs[i].PVC, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	}); err != nil {
		b.Fatal(err)
	}
	timeout := 10*time.Minute + time.Duration(n)*2*time.Second
	waitFor(b, timeout, func() (bool, string) {
		done, _ := w.progress()
		return done == n, fmt.Sprintf("%d of %d PVCs at %s", done, n, newSize.String())
	})
	waitFor(b, timeout, func() (bool, string) {
		_, events := w.progress()
		return events >= n, fmt.Sprintf("%d of %d VolumeResizeSuccessful events", events, n)
	})
	// Let the last writes land: the resizer's requests stop changing for 3 s (a poll with a
	// deadline; a resizer that keeps writing shows up in the counts, not as a hang).
	var after apiCounts
	stable := 0
	pollUntil(time.Minute, time.Second, func() bool {
		cur := scrapeAPIServer(b, ctx, e.Cluster)
		if after != nil && attributedEqual(cur, after) {
			stable++
		} else {
			stable = 0
		}
		after = cur
		return stable >= 3
	})
	windowEnd := time.Now()
	adds1 := resizerMetric(b, p, "workqueue_adds_total", resizeQueue(bin, e.Driver)...)
	cpu1 := cpuSeconds(p.Pid())
	w.stop()

	own := map[apiKey]int{{Verb: "PATCH", Resource: "persistentvolumeclaims"}: n}
	req := classify(after.minus(before), own)
	calls := map[string]int{}
	for _, c := range callsSince(b, e.Driver, t0) {
		calls[c.Method]++
	}
	attempts := calls["ControllerExpandVolume"]
	total := 0
	for _, v := range calls {
		total += v
	}

	doneTimes, eventTimes := w.times()
	r := ThroughputRun{
		Binary: bin.Label, Config: config, Flags: args, PVCs: n,
		AllDoneSeconds:    seconds(doneTimes[len(doneTimes)-1]),
		P50DoneSeconds:    seconds(doneTimes[len(doneTimes)/2]),
		P90DoneSeconds:    seconds(doneTimes[len(doneTimes)*9/10]),
		EventsDoneSeconds: seconds(eventTimes[n-1]),
		Requests:          req,
		CSICalls:          calls,
		ExpandAttempts:    attempts,
		StartSeconds:      seconds(startTook),
		AuditResizer:      auditByClient(b, auditLog, t0, windowEnd)[filepath.Base(bin.Path)],
	}
	if r.Flags == nil {
		r.Flags = []string{}
	}
	allDone := doneTimes[len(doneTimes)-1]
	for _, t := range eventTimes {
		if t <= allDone {
			r.EventsAtAllDone++
		}
	}
	r.ResizesPerSecond = round(float64(n)/allDone.Seconds(), 2)
	r.WriteRateUntilDone = round(float64(req.NonEventWrites()+r.EventsAtAllDone)/allDone.Seconds(), 2)
	per := func(v int) float64 { return round(float64(v)/float64(n), 3) }
	r.ReadsPerResize = per(req.Reads)
	r.NonEventWritesPerResize = per(req.NonEventWrites())
	r.PVCStatusPerResize = per(req.PVCStatusWrites)
	r.PVPerResize = per(req.PVWrites)
	r.OtherWritesPerResize = per(req.OtherWrites)
	r.EventWritesPerResize = per(req.EventWrites)
	if attempts > 0 {
		r.CSICallsPerAttempt = round(float64(total)/float64(attempts), 3)
	}
	r.WorkqueueAddsPerResize = round((adds1-adds0)/float64(n), 3)
	r.CPUSecondsPerResize = round((cpu1-cpu0)/float64(n), 4)
	b.Logf("%s %s: %d PVCs done in %.1fs (p50 %.1fs), events done %.1fs, %.2f resizes/s; per resize: %.2f reads, %.2f writes (%.2f PVC status, %.2f PV, %.2f other), %.2f event writes; %.2f CSI calls/attempt %v; background %v",
		bin.Label, config, n, r.AllDoneSeconds, r.P50DoneSeconds, r.EventsDoneSeconds, r.ResizesPerSecond,
		r.ReadsPerResize, r.NonEventWritesPerResize, r.PVCStatusPerResize, r.PVPerResize, r.OtherWritesPerResize, r.EventWritesPerResize,
		r.CSICallsPerAttempt, calls, req.Background)
	if err := p.Stop(); err != nil {
		b.Logf("stopping the resizer: %v", err)
	}
	return r
}

// resizeQueue selects the expansion work queue's series of workqueue_adds_total: upstream
// also runs a VolumeAttributesClass modification controller with a queue of its own.
func resizeQueue(bin binary, d *framework.Driver) []string {
	if !bin.Upstream {
		return nil
	}
	return []string{fmt.Sprintf("name=%q", d.Name+"-pvc")}
}

// attributedEqual reports whether two snapshots agree on every series the resizer could
// have caused.
func attributedEqual(a, b apiCounts) bool {
	for k, v := range a {
		if resizerResources[k.Resource] && k.Verb != "WATCH" && b[k] != v {
			return false
		}
	}
	for k, v := range b {
		if resizerResources[k.Resource] && k.Verb != "WATCH" && a[k] != v {
			return false
		}
	}
	return true
}

// watch follows the namespace's PVCs and the resizer's events through informers started
// before the window, so polling for completion costs no API request in the window.
type watch struct {
	mu       sync.Mutex
	t0       time.Time
	target   resource.Quantity
	armed    bool
	done     map[string]time.Duration
	events   map[types.UID]bool
	evTimes  []time.Duration
	stopCh   chan struct{}
	stopOnce sync.Once
}

func startWatch(tb testing.TB, ctx context.Context, client kubernetes.Interface, ns string, n int) *watch {
	tb.Helper()
	w := &watch{done: make(map[string]time.Duration, n), events: map[types.UID]bool{}, stopCh: make(chan struct{})}
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns))
	pvcInf := f.Core().V1().PersistentVolumeClaims().Informer()
	evInf := f.Core().V1().Events().Informer()
	_, _ = pvcInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    w.claim,
		UpdateFunc: func(_, obj any) { w.claim(obj) },
	})
	_, _ = evInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    w.event,
		UpdateFunc: func(_, obj any) { w.event(obj) },
	})
	f.Start(w.stopCh)
	tb.Cleanup(w.stop)
	syncCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), pvcInf.HasSynced, evInf.HasSynced) {
		tb.Fatal("the benchmark's own informers did not sync")
	}
	return w
}

func (w *watch) stop() { w.stopOnce.Do(func() { close(w.stopCh) }) }

func (w *watch) arm(t0 time.Time, target resource.Quantity) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.t0, w.target, w.armed = t0, target, true
}

func (w *watch) claim(obj any) {
	pvc, ok := obj.(*v1.PersistentVolumeClaim)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.armed {
		return
	}
	if _, seen := w.done[pvc.Name]; seen {
		return
	}
	if c, ok := pvc.Status.Capacity[v1.ResourceStorage]; ok && c.Cmp(w.target) == 0 {
		w.done[pvc.Name] = time.Since(w.t0)
	}
}

func (w *watch) event(obj any) {
	ev, ok := obj.(*v1.Event)
	if !ok || ev.Reason != "VolumeResizeSuccessful" || ev.InvolvedObject.Kind != "PersistentVolumeClaim" ||
		!strings.HasPrefix(ev.Source.Component, "external-resizer") {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.armed || w.events[ev.UID] {
		return
	}
	w.events[ev.UID] = true
	w.evTimes = append(w.evTimes, time.Since(w.t0))
}

func (w *watch) progress() (done, events int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.done), len(w.events)
}

// times returns the sorted completion times of the PVCs and the arrival times of the events.
func (w *watch) times() (done, events []time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, d := range w.done {
		done = append(done, d)
	}
	events = append(events, w.evTimes...)
	sort.Slice(done, func(i, j int) bool { return done[i] < done[j] })
	sort.Slice(events, func(i, j int) bool { return events[i] < events[j] })
	return done, events
}
