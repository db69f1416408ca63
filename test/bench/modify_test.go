//go:build integration

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// The VolumeAttributesClass modification benchmark: N PVCs of a driver with MODIFY_VOLUME are
// moved to another class at once (the cost of a completed modification: API writes, events,
// CSI calls per attempt), then one PVC to a class the driver refuses with INVALID_ARGUMENT
// (the retry behaviour over a window) and back to its current class (the rollback).

// Classes of the benchmark: the mock accepts modClassFast and refuses modClassRefused (fault
// injection on its parameter).
const (
	modClassFast    = "fast"
	modClassRefused = "refused"
	refusedParam    = "tier"
)

// modifyPVCCount is -modify-pvcs / BENCH_MODIFY_PVCS: PVCs changed at once (50, smoke 3).
func modifyPVCCount() int { return intKnob(flagModifyPVCs, "BENCH_MODIFY_PVCS", 50, 3) }

// modifyInfeasibleConfig is (--retry-interval-max, window) of the infeasible part.
func modifyInfeasibleConfig() (retryMax, window time.Duration) {
	if smoke {
		return 2 * time.Second, 6 * time.Second
	}
	return 5 * time.Second, 30 * time.Second
}

// ModifyRun is one binary's modification benchmark.
type ModifyRun struct {
	Binary string `json:"binary"`
	PVCs   int    `json:"pvcs"`
	// AllDoneSeconds: from the first class change until every PVC has
	// currentVolumeAttributesClassName = the new class and no modifyVolumeStatus (a watch).
	AllDoneSeconds float64 `json:"allDoneSeconds"`
	// Requests are the window's API requests (apiserver_request_total, minus the benchmark's
	// own PATCHes), per modification below.
	Requests                Requests `json:"requests"`
	ReadsPerModify          float64  `json:"readsPerModify"`
	NonEventWritesPerModify float64  `json:"nonEventWritesPerModify"`
	PVCStatusPerModify      float64  `json:"pvcStatusWritesPerModify"`
	PVPerModify             float64  `json:"pvWritesPerModify"`
	OtherWritesPerModify    float64  `json:"otherWritesPerModify"`
	EventWritesPerModify    float64  `json:"eventWritesPerModify"`
	// CSICalls are the driver calls in the window by method; CSICallsPerAttempt all of them
	// per ControllerModifyVolume.
	CSICalls           map[string]int `json:"csiCalls"`
	ModifyAttempts     int            `json:"modifyAttempts"`
	CSICallsPerAttempt float64        `json:"csiCallsPerAttempt"`
	// Infeasible is the refused class and its rollback on one PVC.
	Infeasible ModifyInfeasible `json:"infeasible"`
	// ModifyMetrics are the metric names on the resizer's /metrics that are about
	// modifications (name contains "modif"), scraped while the PVC is Infeasible.
	ModifyMetrics []string `json:"modifyMetrics"`
}

// ModifyInfeasible is one PVC moved to a class the driver refuses, observed over a window,
// then set back to its current class.
type ModifyInfeasible struct {
	RetryIntervalMax float64 `json:"retryIntervalMaxSeconds"`
	WindowSeconds    float64 `json:"windowSeconds"`
	// Calls are the ControllerModifyVolume calls in the window; Target = 1 + window/max.
	Calls       int       `json:"calls"`
	Target      int       `json:"target"`
	CallOffsets []float64 `json:"callOffsetsSeconds"`
	// Requests in the window.
	Requests Requests `json:"requests"`
	// What the PVC shows at the end of the window.
	Status          string `json:"modifyVolumeStatus"`
	ConditionReason string `json:"conditionReason"`
	// RollbackSeconds: after the window the PVC names its current class again; the time until
	// modifyVolumeStatus is cleared, -1 when not within the timeout. RollbackCalls are the
	// driver calls from the rollback until then (plus 2 s).
	RollbackSeconds float64 `json:"rollbackSeconds"`
	RollbackCalls   int     `json:"rollbackCalls"`
	RollbackStatus  string  `json:"rollbackStatus"`
}

func BenchmarkModify(b *testing.B) {
	bins := []binary{binaries(b)[0]}
	if up, ok := upstreamBinary(b); ok {
		bins = append(bins, up)
	}
	for _, bin := range bins {
		b.Run(bin.Label, func(b *testing.B) {
			r := runModify(b, bin, modifyPVCCount())
			report.addModify(r)
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(r.AllDoneSeconds, "s-all-done")
			b.ReportMetric(r.NonEventWritesPerModify, "writes/modify")
			b.ReportMetric(r.EventWritesPerModify, "event-writes/modify")
			b.ReportMetric(r.CSICallsPerAttempt, "csi-calls/attempt")
			b.ReportMetric(float64(r.Infeasible.Calls), "infeasible-calls")
		})
	}
}

func runModify(b *testing.B, bin binary, n int) ModifyRun {
	retryMax, window := modifyInfeasibleConfig()
	e := scenario.Start(b, scenario.Options{AdminResizer: true, NoResizer: true, Mock: framework.MockDriverOptions{
		ModifyVolume: true,
		Faults: []framework.Fault{{Method: "ControllerModifyVolume", Code: codes.InvalidArgument,
			Message: "mutable parameter " + refusedParam + " is not supported", MutableParameter: refusedParam}},
	}})
	ctx := e.Ctx
	client, err := bulkClient(e.Cluster)
	if err != nil {
		b.Fatal(err)
	}
	for name, params := range map[string]map[string]string{
		modClassFast:    {"iops": "3000", "throughput": "125"},
		modClassRefused: {refusedParam: "gold"},
	} {
		vac := &storagev1.VolumeAttributesClass{ObjectMeta: metav1.ObjectMeta{Name: name}, DriverName: e.Driver.Name, Parameters: params}
		if _, err := client.StorageV1().VolumeAttributesClasses().Create(ctx, vac, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	size := resource.MustParse("1Gi")
	ids := make([]string, n)
	if err := parallel(n, 8, func(i int) error {
		id, err := e.Driver.CreateVolume(ctx, fmt.Sprintf("%s-%d", e.Namespace, i), size.Value())
		ids[i] = id
		return err
	}); err != nil {
		b.Fatal(err)
	}
	pairs, err := createPairs(ctx, client, pairSpec{
		Namespace: e.Namespace, Driver: e.Driver.Name, StorageClass: e.StorageClass, Size: size.String(),
		Prefix: "data-db", VolumeIDs: ids,
	}, n)
	if err != nil {
		b.Fatal(err)
	}
	p, _ := startResizer(b, e, bin, e.Driver, n, "--retry-interval-max="+retryMax.String())
	w := startClassWatch(b, ctx, client, e.Namespace)

	// The window: every PVC asks for the class at once.
	before := scrapeAPIServer(b, ctx, e.Cluster)
	t0 := time.Now()
	w.arm(t0, modClassFast)
	if err := parallel(n, bulkConcurrency, func(i int) error {
		return patchClass(ctx, client, e.Namespace, pairs[i].PVC, modClassFast)
	}); err != nil {
		b.Fatal(err)
	}
	waitFor(b, 10*time.Minute+time.Duration(n)*2*time.Second, func() (bool, string) {
		done := w.doneCount()
		return done == n, fmt.Sprintf("%d of %d PVCs modified to %s", done, n, modClassFast)
	})
	after := settle(b, ctx, e.Cluster)

	r := ModifyRun{Binary: bin.Label, PVCs: n, AllDoneSeconds: seconds(w.lastDone()), CSICalls: map[string]int{}}
	r.Requests = classify(after.minus(before), map[apiKey]int{{Verb: "PATCH", Resource: "persistentvolumeclaims"}: n})
	total := 0
	for _, c := range callsSince(b, e.Driver, t0) {
		r.CSICalls[c.Method]++
		total++
	}
	r.ModifyAttempts = r.CSICalls["ControllerModifyVolume"]
	if r.ModifyAttempts > 0 {
		r.CSICallsPerAttempt = round(float64(total)/float64(r.ModifyAttempts), 3)
	}
	per := func(v int) float64 { return round(float64(v)/float64(n), 3) }
	r.ReadsPerModify = per(r.Requests.Reads)
	r.NonEventWritesPerModify = per(r.Requests.NonEventWrites())
	r.PVCStatusPerModify = per(r.Requests.PVCStatusWrites)
	r.PVPerModify = per(r.Requests.PVWrites)
	r.OtherWritesPerModify = per(r.Requests.OtherWrites)
	r.EventWritesPerModify = per(r.Requests.EventWrites)
	w.stop()

	r.Infeasible, r.ModifyMetrics = runModifyInfeasible(b, e, p, client, pairs[0].PVC, ids[0], retryMax, window)
	b.Logf("%s: %d PVCs modified in %.1fs; per modification %.2f reads, %.2f writes (%.2f PVC status, %.2f PV, %.2f other), %.2f event writes; CSI %v (%.2f per attempt); detail %v; infeasible: %+v",
		bin.Label, n, r.AllDoneSeconds, r.ReadsPerModify, r.NonEventWritesPerModify, r.PVCStatusPerModify, r.PVPerModify, r.OtherWritesPerModify,
		r.EventWritesPerModify, r.CSICalls, r.CSICallsPerAttempt, r.Requests.Detail, r.Infeasible)
	if err := p.Stop(); err != nil {
		b.Logf("stopping the resizer: %v", err)
	}
	return r
}

// runModifyInfeasible moves one PVC to the refused class, counts the calls over window, then
// sets it back to the class it has and waits for the modification to be cancelled.
func runModifyInfeasible(b *testing.B, e *scenario.Env, p *framework.Process, client kubernetes.Interface, pvc, vol string, retryMax, window time.Duration) (ModifyInfeasible, []string) {
	ctx := e.Ctx
	r := ModifyInfeasible{RetryIntervalMax: retryMax.Seconds(), WindowSeconds: window.Seconds(), Target: 1 + int(window/retryMax)}
	before := scrapeAPIServer(b, ctx, e.Cluster)
	t0 := time.Now()
	if err := patchClass(ctx, client, e.Namespace, pvc, modClassRefused); err != nil {
		b.Fatal(err)
	}
	end := t0.Add(window)
	pollUntil(window+time.Second, 500*time.Millisecond, func() bool { return time.Now().After(end) })
	after := scrapeAPIServer(b, ctx, e.Cluster)
	for _, c := range e.Driver.ModifyCalls(b, vol) {
		if !c.Time.Before(t0) && !c.Time.After(end) {
			r.Calls++
			r.CallOffsets = append(r.CallOffsets, seconds(c.Time.Sub(t0)))
		}
	}
	r.Requests = classify(after.minus(before), map[apiKey]int{{Verb: "PATCH", Resource: "persistentvolumeclaims"}: 1})
	claim := e.PVC(b, pvc)
	r.Status, r.ConditionReason = modifyState(claim)
	metrics := modifyMetricNames(scenario.Scrape(b, p))

	// Roll back.
	t1 := time.Now()
	if err := patchClass(ctx, client, e.Namespace, pvc, modClassFast); err != nil {
		b.Fatal(err)
	}
	done := pollUntil(retryMax+15*time.Second, 100*time.Millisecond, func() bool {
		claim = e.PVC(b, pvc)
		cur := claim.Status.CurrentVolumeAttributesClassName
		return claim.Status.ModifyVolumeStatus == nil && cur != nil && *cur == modClassFast
	})
	r.RollbackSeconds = -1
	if done {
		r.RollbackSeconds = seconds(time.Since(t1))
		// Observe 2 s more: a call that comes right after the status was cleared counts too.
		tail := time.Now().Add(2 * time.Second)
		pollUntil(3*time.Second, 500*time.Millisecond, func() bool { return time.Now().After(tail) })
	}
	r.RollbackStatus, _ = modifyState(claim)
	for _, c := range e.Driver.ModifyCalls(b, vol) {
		if !c.Time.Before(t1) {
			r.RollbackCalls++
		}
	}
	return r, metrics
}

// modifyMetricNames are the metric names (histogram suffixes folded) in a /metrics body that
// contain "modif".
func modifyMetricNames(body string) []string {
	seen := map[string]bool{}
	for _, line := range strings.Split(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name := line[:strings.IndexAny(line+" ", "{ ")]
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			name = strings.TrimSuffix(name, suffix)
		}
		if strings.Contains(strings.ToLower(name), "modif") {
			seen[name] = true
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// modifyState is the PVC's modifyVolumeStatus ("none" when unset) and ModifyVolumeError reason.
func modifyState(pvc *v1.PersistentVolumeClaim) (status, reason string) {
	status = "none"
	if s := pvc.Status.ModifyVolumeStatus; s != nil {
		status = fmt.Sprintf("%s (%s)", s.Status, s.TargetVolumeAttributesClassName)
	}
	for _, c := range pvc.Status.Conditions {
		if c.Type == v1.PersistentVolumeClaimVolumeModifyVolumeError {
			reason = c.Reason
		}
	}
	return status, reason
}

func patchClass(ctx context.Context, client kubernetes.Interface, ns, name, class string) error {
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"volumeAttributesClassName": class}})
	_, err := client.CoreV1().PersistentVolumeClaims(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// settle waits until the requests a resizer could cause stop changing for 3 s (a resizer that
// keeps writing shows up in the counts, not as a hang) and returns the last snapshot.
func settle(tb testing.TB, ctx context.Context, c *framework.Cluster) apiCounts {
	tb.Helper()
	var after apiCounts
	stable := 0
	pollUntil(time.Minute, time.Second, func() bool {
		cur := scrapeAPIServer(tb, ctx, c)
		if after != nil && attributedEqual(cur, after) {
			stable++
		} else {
			stable = 0
		}
		after = cur
		return stable >= 3
	})
	return after
}

// classWatch follows the namespace's PVCs through an informer started before the window, so
// waiting for the modifications costs no API read in it.
type classWatch struct {
	mu       sync.Mutex
	t0       time.Time
	class    string
	armed    bool
	done     map[string]time.Duration
	stopCh   chan struct{}
	stopOnce sync.Once
}

func startClassWatch(tb testing.TB, ctx context.Context, client kubernetes.Interface, ns string) *classWatch {
	tb.Helper()
	w := &classWatch{done: map[string]time.Duration{}, stopCh: make(chan struct{})}
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns))
	inf := f.Core().V1().PersistentVolumeClaims().Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: w.claim, UpdateFunc: func(_, obj any) { w.claim(obj) }})
	f.Start(w.stopCh)
	tb.Cleanup(w.stop)
	syncCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), inf.HasSynced) {
		tb.Fatal("the benchmark's own PVC informer did not sync")
	}
	return w
}

func (w *classWatch) stop() { w.stopOnce.Do(func() { close(w.stopCh) }) }

func (w *classWatch) arm(t0 time.Time, class string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.t0, w.class, w.armed = t0, class, true
}

func (w *classWatch) claim(obj any) {
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
	if cur := pvc.Status.CurrentVolumeAttributesClassName; cur != nil && *cur == w.class && pvc.Status.ModifyVolumeStatus == nil {
		w.done[pvc.Name] = time.Since(w.t0)
	}
}

func (w *classWatch) doneCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.done)
}

func (w *classWatch) lastDone() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ds []time.Duration
	for _, d := range w.done {
		ds = append(ds, d)
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	if len(ds) == 0 {
		return 0
	}
	return ds[len(ds)-1]
}

// modifyRows are the modification benchmark's rows of the summary table.
func (s *summaryRows) modifyRows(mod []ModifyRun) {
	_, runs := byBinary(mod, func(m ModifyRun) string { return m.Binary }, func(ModifyRun) string { return "modify" })
	p := runs["modify"]
	if p == nil || p.ours == nil {
		return
	}
	m := *p.ours
	done := func(m ModifyRun) float64 { return m.AllDoneSeconds }
	writes := func(m ModifyRun) float64 { return m.NonEventWritesPerModify + m.EventWritesPerModify }
	nonEvent := func(m ModifyRun) float64 { return m.NonEventWritesPerModify }
	events := func(m ModifyRun) float64 { return m.EventWritesPerModify }
	reads := func(m ModifyRun) float64 { return m.ReadsPerModify }
	calls := func(m ModifyRun) float64 { return m.CSICallsPerAttempt }
	s.add(fmt.Sprintf("%d PVCs moved to another VolumeAttributesClass at once, default flags: all done", m.PVCs),
		field(p.up, done), field(p.ours, done), fmtF("%.1f s"), "— (report)", "—")
	s.add("API writes per modification, non-event + event", field(p.up, writes), field(p.ours, writes), fmtF("%.2f"), "≤ 4 (3 + 1)",
		yes(m.NonEventWritesPerModify <= 3.005 && m.EventWritesPerModify <= 1.005))
	s.add("… non-event (PVC status, PV, other)", field(p.up, nonEvent), field(p.ours, nonEvent), fmtF("%.2f"), "≤ 3 (2 + 1 + 0)",
		yes(m.PVCStatusPerModify <= 2.005 && m.PVPerModify <= 1.005 && m.OtherWritesPerModify < 0.005))
	s.add("… events", field(p.up, events), field(p.ours, events), fmtF("%.2f"), "1", yes(m.EventWritesPerModify <= 1.005))
	s.add("API reads per modification", field(p.up, reads), field(p.ours, reads), fmtF("%.2f"), "0", yes(m.ReadsPerModify < 0.005))
	s.add("CSI calls per ControllerModifyVolume attempt", field(p.up, calls), field(p.ours, calls), fmtF("%.2f"), "1",
		yes(m.CSICallsPerAttempt > 0 && m.CSICallsPerAttempt <= 1.005))
	inf := m.Infeasible
	infCalls := func(m ModifyRun) float64 { return float64(m.Infeasible.Calls) }
	s.add(fmt.Sprintf("Infeasible class (INVALID_ARGUMENT): ControllerModifyVolume calls in %.0f s at --retry-interval-max %.0fs", inf.WindowSeconds, inf.RetryIntervalMax),
		field(p.up, infCalls), field(p.ours, infCalls), fmtF("%.0f"), fmt.Sprintf("≤ %d", inf.Target), yes(inf.Calls <= inf.Target))
	infWrites := func(m ModifyRun) float64 {
		return float64(m.Infeasible.Requests.NonEventWrites() + m.Infeasible.Requests.EventWrites)
	}
	s.add(fmt.Sprintf("… API writes in those %.0f s, non-event + event", inf.WindowSeconds), field(p.up, infWrites), field(p.ours, infWrites), fmtF("%.0f"), "—", "—")
	rollbackCalls := func(m ModifyRun) float64 { return float64(m.Infeasible.RollbackCalls) }
	s.add("… then set back to the current class: ControllerModifyVolume calls", field(p.up, rollbackCalls), field(p.ours, rollbackCalls), fmtF("%.0f"),
		"0 (the volume has that class)", yes(inf.RollbackSeconds >= 0 && inf.RollbackCalls == 0))
	// The time is reported, not compared: both are a fraction of a second.
	t := Target{Metric: "… modification cancelled (modifyVolumeStatus cleared) after", Upstream: "not measured", Ours: fmtCancelled(inf.RollbackSeconds),
		Ratio: "—", Target: "cancelled", Met: yes(inf.RollbackSeconds >= 0)}
	if p.up != nil {
		t.Upstream = fmtCancelled(p.up.Infeasible.RollbackSeconds)
	}
	s.out = append(s.out, t)
	families := func(m ModifyRun) float64 { return float64(len(m.ModifyMetrics)) }
	s.add("Metrics about modifications on /metrics (names containing \"modif\", a PVC Infeasible)", field(p.up, families), field(p.ours, families), fmtF("%.0f"), "—", "—")
}

func fmtCancelled(v float64) string {
	if v < 0 {
		return "never (stays Infeasible)"
	}
	return fmt.Sprintf("%.1f s", v)
}

// modifyMarkdown is the modification benchmark's section of docs/benchmarks.md.
func modifyMarkdown(mod []ModifyRun) string {
	var b strings.Builder
	b.WriteString("\n### VolumeAttributesClass modification\n\n")
	b.WriteString("N PVCs of the mock driver (MODIFY_VOLUME on) are moved to another VolumeAttributesClass at once by the benchmark's own unthrottled client; \"all done\" is until a watch shows every PVC with `currentVolumeAttributesClassName` = the new class and no `modifyVolumeStatus`. Requests are the apiserver's `apiserver_request_total` over the window on the resources the sidecar uses, minus the benchmark's PATCHes, per modification. Then one PVC is moved to a class the mock refuses with INVALID_ARGUMENT and observed over a window, and set back to the class it has (the rollback).\n\n")
	b.WriteString("| binary | PVCs | all done | reads | PVC status | PV | other | events | 409s | CSI calls/attempt | infeasible: --retry-interval-max | window | calls | target | call times (s) | PVC status writes | event writes | status | rollback: cancelled after | calls after rollback |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, m := range mod {
		in := m.Infeasible
		fmt.Fprintf(&b, "| %s | %d | %.1f s | %.2f | %.2f | %.2f | %.2f | %.2f | %d | %.2f | %.0fs | %.0f s | %d | ≤ %d | %v | %d | %d | %s %s | %s | %d |\n",
			m.Binary, m.PVCs, m.AllDoneSeconds, m.ReadsPerModify, m.PVCStatusPerModify, m.PVPerModify, m.OtherWritesPerModify, m.EventWritesPerModify,
			m.Requests.Conflicts, m.CSICallsPerAttempt, in.RetryIntervalMax, in.WindowSeconds, in.Calls, in.Target, in.CallOffsets,
			in.Requests.PVCStatusWrites, in.Requests.EventWrites, in.Status, orNone(in.ConditionReason), fmtCancelled(in.RollbackSeconds), in.RollbackCalls)
	}
	b.WriteString("\n")
	for _, m := range mod {
		names := "none"
		if len(m.ModifyMetrics) > 0 {
			names = "`" + strings.Join(m.ModifyMetrics, "`, `") + "`"
		}
		fmt.Fprintf(&b, "- %s: requests %s; CSI calls %s; infeasible window requests %s; metrics about modifications: %s.\n",
			m.Binary, kv(m.Requests.Detail), kv(m.CSICalls), kv(m.Infeasible.Requests.Detail), names)
	}
	return b.String()
}
