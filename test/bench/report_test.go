//go:build integration

package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/csi-resizer/csi-resizer/test/framework"
)

// Meta says when and where a section was measured.
type Meta struct {
	Date         string `json:"date"`
	Commit       string `json:"commit"`
	Smoke        bool   `json:"smoke"`
	LoadAvgStart string `json:"loadavgStart"`
	LoadAvgEnd   string `json:"loadavgEnd"`
	// Machine is set when the section was measured on another machine than the report's
	// (File.Machine, that of the sections already there).
	Machine *Machine `json:"machine,omitempty"`
}

// Machine describes the host.
type Machine struct {
	NProc      int    `json:"nproc"`
	MemTotal   string `json:"memTotal"`
	CPUModel   string `json:"cpuModel"`
	Kernel     string `json:"kernel"`
	GoVersion  string `json:"goVersion"`
	APIServer  string `json:"kubeAPIServer"`
	Date       string `json:"date"`
	SharedNote string `json:"note"`
}

// Section is one benchmark's results, replaced as a whole when the benchmark runs again.
type Section struct {
	Meta Meta            `json:"meta"`
	Runs json.RawMessage `json:"runs"`
}

// Target is one row of the summary table: csi-resizer's figure next to upstream's from the
// same run (when -upstream was given), their ratio, and the project's target.
type Target struct {
	Metric   string `json:"metric"`
	Upstream string `json:"upstream"`
	Ours     string `json:"ours"`
	Ratio    string `json:"ratio"` // csi-resizer / upstream
	Target   string `json:"target"`
	Met      string `json:"met"` // "yes", "NO", or "—" (no target / not comparable)
}

// File is docs/benchmarks.json.
type File struct {
	Machine  Machine            `json:"machine"`
	Summary  []Target           `json:"summary"`
	Sections map[string]Section `json:"sections"`
}

type results struct {
	mu         sync.Mutex
	start      time.Time
	loadStart  string
	throughput []ThroughputRun
	infeasible []InfeasibleRun
	memory     []MemoryRun
	decision   []DecisionRun
	sts        []StatefulSetRun
	modify     []ModifyRun
	profiles   []HeapProfile
	// nodeDeployment: BenchmarkNodeDeployment.
	nodeDeployment []NodeDeploymentRun
	// realNode: BenchmarkRealNode (make bench-node).
	realNode []RealNodeRun
	// autoscalerScale: BenchmarkVolumeAutoscalerScale.
	autoscalerScale []AutoscalerScaleRun
	stsSkipped      string
	merged          File
}

var report = &results{start: time.Now(), loadStart: loadAvg()}

// locked runs f with the results locked.
func (r *results) locked(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f()
}

func (r *results) addThroughput(t ThroughputRun) {
	r.locked(func() { r.throughput = append(r.throughput, t) })
}
func (r *results) addInfeasible(t InfeasibleRun) {
	r.locked(func() { r.infeasible = append(r.infeasible, t) })
}
func (r *results) addMemory(t MemoryRun)           { r.locked(func() { r.memory = append(r.memory, t) }) }
func (r *results) addDecision(t DecisionRun)       { r.locked(func() { r.decision = append(r.decision, t) }) }
func (r *results) addStatefulSet(t StatefulSetRun) { r.locked(func() { r.sts = append(r.sts, t) }) }
func (r *results) addModify(t ModifyRun)           { r.locked(func() { r.modify = append(r.modify, t) }) }
func (r *results) addProfile(p HeapProfile)        { r.locked(func() { r.profiles = append(r.profiles, p) }) }
func (r *results) skipStatefulSet(why string)      { r.locked(func() { r.stsSkipped = why }) }

func (r *results) empty() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.throughput)+len(r.infeasible)+len(r.memory)+len(r.decision)+len(r.sts)+len(r.modify)+len(r.profiles)+len(r.nodeDeployment)+len(r.realNode)+len(r.autoscalerScale) == 0 && r.stsSkipped == ""
}

// finish builds the merged view: this run's sections over those of an existing report in the
// output directory (so running one benchmark does not drop the others' results).
func (r *results) finish() {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := File{Sections: map[string]Section{}}
	if dir := outDir(); dir != "" {
		if b, err := os.ReadFile(filepath.Join(dir, "benchmarks.json")); err == nil {
			_ = json.Unmarshal(b, &f)
			if f.Sections == nil {
				f.Sections = map[string]Section{}
			}
		}
	}
	meta := Meta{Date: time.Now().UTC().Format(time.RFC3339), Commit: gitDescribe(), Smoke: smoke, LoadAvgStart: r.loadStart, LoadAvgEnd: loadAvg()}
	var written []string
	put := func(name string, v any, n int) {
		if n == 0 {
			return
		}
		raw, _ := json.Marshal(v)
		f.Sections[name] = Section{Meta: meta, Runs: raw}
		written = append(written, name)
	}
	put("throughput", r.throughput, len(r.throughput))
	put("infeasible", r.infeasible, len(r.infeasible))
	put("memory", r.memory, len(r.memory))
	put("decision", r.decision, len(r.decision))
	put("heapProfiles", r.profiles, len(r.profiles))
	put("modify", r.modify, len(r.modify))
	put("nodeDeployment", r.nodeDeployment, len(r.nodeDeployment))
	put("realNode", r.realNode, len(r.realNode))
	put("autoscalerScale", r.autoscalerScale, len(r.autoscalerScale))
	stsN := len(r.sts)
	if r.stsSkipped != "" {
		stsN = 1
	}
	put("statefulset", stsSection{Runs: r.sts, Skipped: r.stsSkipped}, stsN)
	setMachine(&f, written)
	r.merged = f
	r.merged.Summary = r.summary()
}

// setMachine sets the report's machine to this one, unless sections measured on another
// machine remain (not rewritten by this run): then the report keeps that machine and the
// sections written carry this one, so that a partial run does not relabel the others.
func setMachine(f *File, written []string) {
	cur := machine()
	if f.Machine.CPUModel == "" || sameHost(f.Machine, cur) || len(written) == len(f.Sections) {
		f.Machine = cur
		return
	}
	for _, name := range written {
		s := f.Sections[name]
		s.Meta.Machine = &cur
		f.Sections[name] = s
	}
}

func sameHost(a, b Machine) bool {
	return a.NProc == b.NProc && a.CPUModel == b.CPUModel && a.MemTotal == b.MemTotal && a.Kernel == b.Kernel
}

type stsSection struct {
	Runs    []StatefulSetRun `json:"runs"`
	Skipped string           `json:"skipped,omitempty"`
}

func (r *results) sectionRuns(name string, into any) (Meta, bool) {
	s, ok := r.merged.Sections[name]
	if !ok {
		return Meta{}, false
	}
	return s.Meta, json.Unmarshal(s.Runs, into) == nil
}

const primary = "csi-resizer"

// floorTolerance: the default-flags time may exceed the writes' floor (3 × N / QPS) by 3 %.
const floorTolerance = 1.03

// pair is csi-resizer's run and upstream's of the same configuration, when measured.
type sidePair[T any] struct {
	ours, up *T
}

func byBinary[T any](runs []T, binaryOf func(T) string, keyOf func(T) string) (keys []string, out map[string]*sidePair[T]) {
	out = map[string]*sidePair[T]{}
	for i := range runs {
		r := &runs[i]
		bin, key := binaryOf(*r), keyOf(*r)
		if bin != primary && bin != upstreamLabel {
			continue
		}
		p := out[key]
		if p == nil {
			p = &sidePair[T]{}
			out[key] = p
			keys = append(keys, key)
		}
		if bin == primary {
			p.ours = r
		} else {
			p.up = r
		}
	}
	return keys, out
}

// summaryRows collects the summary table.
type summaryRows struct{ out []Target }

// add appends a row; up and ours are the numbers (nil when not measured), f formats one side.
func (s *summaryRows) add(metric string, up, ours *float64, f func(float64) string, target, met string) {
	t := Target{Metric: metric, Upstream: "not measured", Ours: "not measured", Ratio: "—", Target: target, Met: met}
	if up != nil {
		t.Upstream = f(*up)
	}
	if ours != nil {
		t.Ours = f(*ours)
	}
	if up != nil && ours != nil && *up > 0 && *ours >= 0 {
		t.Ratio = fmt.Sprintf("%.2f×", *ours / *up)
	}
	s.out = append(s.out, t)
}

func yes(ok bool) string {
	if ok {
		return "yes"
	}
	return "NO"
}

// field returns a pointer to f(run), or nil for a run that was not measured.
func field[T any](r *T, f func(T) float64) *float64 {
	if r == nil {
		return nil
	}
	v := f(*r)
	return &v
}

func fmtF(format string) func(float64) string {
	return func(v float64) string { return fmt.Sprintf(format, v) }
}

func (r *results) summary() []Target {
	s := &summaryRows{}
	var tp []ThroughputRun
	if _, ok := r.sectionRuns("throughput", &tp); ok {
		s.throughputRows(tp)
	}
	var inf []InfeasibleRun
	if _, ok := r.sectionRuns("infeasible", &inf); ok {
		keys, runs := byBinary(inf, func(t InfeasibleRun) string { return t.Binary },
			func(t InfeasibleRun) string { return fmt.Sprintf("%v/%v", t.RetryIntervalMax, t.WindowSeconds) })
		for _, k := range keys {
			p := runs[k]
			if p.ours == nil {
				continue
			}
			t := *p.ours
			calls := func(t InfeasibleRun) float64 { return float64(t.Calls) }
			s.add(fmt.Sprintf("Infeasible PVC: driver calls in %.0f s at --retry-interval-max %.0fs", t.WindowSeconds, t.RetryIntervalMax),
				field(p.up, calls), field(p.ours, calls), fmtF("%.0f"), fmt.Sprintf("≤ %d", t.Target), yes(t.Calls <= t.Target))
			s.add(fmt.Sprintf("… then the request lowered to %s: recovered (capacity %s) after", recoverySize, recoverySize),
				field(p.up, recovered), field(p.ours, recovered), fmtRecovery, "recovers", yes(t.RecoverySeconds >= 0))
		}
	}
	var mem []MemoryRun
	if _, ok := r.sectionRuns("memory", &mem); ok {
		s.memoryRows(mem)
	}
	var dec []DecisionRun
	if _, ok := r.sectionRuns("decision", &dec); ok {
		sort.Slice(dec, func(i, j int) bool { return dec[i].Name < dec[j].Name })
		for _, d := range dec {
			s.out = append(s.out, Target{Metric: "pkg/expand " + d.Name, Upstream: "—", Ratio: "—", Target: "—", Met: "—",
				Ours: fmt.Sprintf("%.1f ns/op, %.0f allocs/op", d.NsPerOp, d.AllocsPerOp)})
		}
	}
	var sts stsSection
	if _, ok := r.sectionRuns("statefulset", &sts); ok {
		s.statefulSetRows(sts)
	}
	var mod []ModifyRun
	if _, ok := r.sectionRuns("modify", &mod); ok {
		s.modifyRows(mod)
	}
	var rn []RealNodeRun
	if _, ok := r.sectionRuns("realNode", &rn); ok {
		s.realNodeRows(rn)
	}
	return s.out
}

func (s *summaryRows) throughputRows(tp []ThroughputRun) {
	keys, runs := byBinary(tp, func(t ThroughputRun) string { return t.Binary }, func(t ThroughputRun) string { return t.Config })
	for _, k := range keys {
		p := runs[k]
		if p.ours == nil {
			continue
		}
		t := *p.ours
		switch t.Config {
		case "default-flags":
			floor := t.FloorSeconds
			s.add(fmt.Sprintf("%d PVCs +1Gi at once, default flags (qps 5): all done", t.PVCs), field(p.up, allDone), field(p.ours, allDone), fmtF("%.1f s"),
				fmt.Sprintf("≤ %.1f s (floor 3 × %d / 5 = %.0f s, +3 %%)", floorTolerance*floor, t.PVCs, floor),
				yes(floor > 0 && t.AllDoneSeconds <= floorTolerance*floor))
			s.add("… all done against the floor 3 × N / QPS", field(p.up, overFloor), field(p.ours, overFloor), fmtF("%.3f×"), "≤ 1.03×", yes(floor > 0 && t.AllDoneSeconds <= floorTolerance*floor))
			s.add("… until the last event is written", field(p.up, eventsDone), field(p.ours, eventsDone), fmtF("%.1f s"), "—", "—")
			s.add("API writes per resize, non-event + event", field(p.up, writesTotal), field(p.ours, writesTotal), fmtF("%.2f"), "4 (3 + 1)",
				yes(t.NonEventWritesPerResize <= 3.005 && t.EventWritesPerResize <= 1.005))
			s.add("… non-event (PVC status, PV, other)", field(p.up, nonEvent), field(p.ours, nonEvent), fmtF("%.2f"), "3 (2 + 1 + 0)",
				yes(t.PVCStatusPerResize <= 2.005 && t.PVPerResize <= 1.005 && t.OtherWritesPerResize < 0.005))
			s.add("… events", field(p.up, events), field(p.ours, events), fmtF("%.2f"), "1", yes(t.EventWritesPerResize <= 1.005))
			s.add("API reads per resize", field(p.up, reads), field(p.ours, reads), fmtF("%.2f"), "0", yes(t.ReadsPerResize < 0.005))
			s.add("CSI calls per expansion attempt", field(p.up, csiCalls), field(p.ours, csiCalls), fmtF("%.2f"), "1", yes(t.CSICallsPerAttempt > 0 && t.CSICallsPerAttempt <= 1.005))
			s.add("Expansion work-queue adds per resize", field(p.up, wqAdds), field(p.ours, wqAdds), fmtF("%.2f"), "≤ 3 (echoes of own writes cost no call)", yes(t.WorkqueueAddsPerResize <= 3.005))
		case "qps50-burst100":
			s.add(fmt.Sprintf("%d PVCs, --kube-api-qps 50 --kube-api-burst 100: resizes/s", t.PVCs), field(p.up, rate), field(p.ours, rate), fmtF("%.1f/s"), "— (report)", "—")
		}
	}
}

func recovered(t InfeasibleRun) float64 { return t.RecoverySeconds }

func fmtRecovery(v float64) string {
	if v < 0 {
		return "not recovered"
	}
	return fmt.Sprintf("%.1f s", v)
}

func allDone(t ThroughputRun) float64    { return t.AllDoneSeconds }
func eventsDone(t ThroughputRun) float64 { return t.EventsDoneSeconds }
func overFloor(t ThroughputRun) float64 {
	if t.FloorSeconds == 0 {
		return 0
	}
	return t.AllDoneSeconds / t.FloorSeconds
}
func writesTotal(t ThroughputRun) float64 { return t.NonEventWritesPerResize + t.EventWritesPerResize }
func nonEvent(t ThroughputRun) float64    { return t.NonEventWritesPerResize }
func events(t ThroughputRun) float64      { return t.EventWritesPerResize }
func reads(t ThroughputRun) float64       { return t.ReadsPerResize }
func csiCalls(t ThroughputRun) float64    { return t.CSICallsPerAttempt }
func wqAdds(t ThroughputRun) float64      { return t.WorkqueueAddsPerResize }
func rate(t ThroughputRun) float64        { return t.ResizesPerSecond }

func (s *summaryRows) memoryRows(mem []MemoryRun) {
	_, runs := byBinary(mem, func(m MemoryRun) string { return m.Binary }, func(m MemoryRun) string { return m.Stage })
	rss := func(m MemoryRun) float64 { return mib(m.RSSBytes) }
	steady := func(m MemoryRun) float64 { return mib(m.SteadyRSSBytes) }
	label := map[string]string{
		stageIdle:       "RSS idle",
		stagePairs:      "RSS with %d PVC/PV pairs",
		stagePods:       "RSS with %d pairs + %d pods, default driver (csi-resizer: no pod informer)",
		stagePodsActive: "RSS with %d pairs + %d pods, offline-only driver (pod informer in both)",
	}
	for _, st := range []string{stageIdle, stagePairs, stagePods, stagePodsActive} {
		p, ok := runs[st]
		if !ok || p.ours == nil {
			continue
		}
		m := *p.ours
		metric := label[st]
		switch st {
		case stagePairs:
			metric = fmt.Sprintf(metric, m.Pairs)
		case stagePods, stagePodsActive:
			metric = fmt.Sprintf(metric, m.Pairs, m.Pods)
		}
		target, met := "—", "—"
		if st == stagePods || st == stagePodsActive {
			target = "≤ 0.5× upstream"
			switch {
			case m.Pairs != 10000:
				met = "— (target is for 10k)"
			case p.up != nil:
				met = yes(m.RSSBytes*2 <= p.up.RSSBytes)
			}
		}
		s.add(metric, field(p.up, rss), field(p.ours, rss), fmtF("%.1f MiB"), target, met)
		if m.SteadyRSSBytes > 0 {
			s.add("… steady (150 s after the sync)", field(p.up, steady), field(p.ours, steady), fmtF("%.1f MiB"), "—", "—")
		}
	}
	perObject := func(side func(*sidePair[MemoryRun]) *MemoryRun) *float64 {
		idle, pairs := runs[stageIdle], runs[stagePairs]
		if idle == nil || pairs == nil || side(idle) == nil || side(pairs) == nil || side(pairs).Pairs == 0 {
			return nil
		}
		v := float64(side(pairs).RSSBytes-side(idle).RSSBytes) / float64(2*side(pairs).Pairs)
		return &v
	}
	ours := func(p *sidePair[MemoryRun]) *MemoryRun { return p.ours }
	up := func(p *sidePair[MemoryRun]) *MemoryRun { return p.up }
	if o := perObject(ours); o != nil {
		s.add("RSS per cached object (PVC or PV)", perObject(up), o, fmtF("%.0f B"), "—", "—")
	}
}

func (s *summaryRows) statefulSetRows(sts stsSection) {
	if sts.Skipped != "" {
		s.out = append(s.out, Target{Metric: "statefulset-resizer: 100-replica Parallel StatefulSet", Upstream: "—", Ours: "not measured: " + sts.Skipped, Ratio: "—", Target: "—", Met: "—"})
	}
	for _, st := range sts.Runs {
		c := st.Clients["statefulset-resizer"]
		if c == nil {
			c = &clientRequests{}
		}
		n := float64(st.Replicas)
		s.out = append(s.out, Target{
			Metric:   fmt.Sprintf("statefulset-resizer: %d-replica Parallel StatefulSet %s → %s, until finishedReconciliationGeneration", st.Replicas, st.From, st.To),
			Upstream: "— (no upstream equivalent)", Ratio: "—", Target: "— (report)", Met: "—",
			Ours: fmt.Sprintf("%.1f s (requests patched at %.1f s); per replica %.2f writes, %.2f reads, %.2f event writes", st.FinishedSeconds, st.PatchedSeconds,
				float64(c.Writes)/n, float64(c.Reads)/n, float64(c.Events)/n),
		})
	}
}

func orNone(s string) string {
	if s == "" {
		return "(empty)"
	}
	return strings.ReplaceAll(s, "|", "\\|")
}

func firstGap(g []float64) string {
	if len(g) == 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f", g[0])
}

func rssText(m MemoryRun) string {
	s := fmt.Sprintf("%.1f MiB", mib(m.RSSBytes))
	if m.SteadyRSSBytes > 0 {
		s += fmt.Sprintf(" (steady %.1f)", mib(m.SteadyRSSBytes))
	}
	return s
}

// table is the summary as a Markdown table (also printed on stdout).
func (r *results) table() string {
	var b strings.Builder
	b.WriteString("| metric | upstream | csi-resizer | csi-resizer / upstream | target | met |\n|---|---|---|---|---|---|\n")
	for _, t := range r.merged.Summary {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", t.Metric, t.Upstream, t.Ours, t.Ratio, t.Target, t.Met)
	}
	return b.String()
}

const (
	beginMarker = "<!-- bench:begin (generated by test/bench; do not edit between the markers) -->"
	endMarker   = "<!-- bench:end -->"
)

// write stores benchmarks.json and the generated part of benchmarks.md in dir.
func (r *results) write(dir string) (string, string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	js := filepath.Join(dir, "benchmarks.json")
	raw, err := json.MarshalIndent(r.merged, "", "  ")
	if err != nil {
		return "", "", err
	}
	if err := os.WriteFile(js, append(raw, '\n'), 0o644); err != nil {
		return "", "", err
	}
	md := filepath.Join(dir, "benchmarks.md")
	gen := beginMarker + "\n" + r.markdown() + endMarker + "\n"
	old, err := os.ReadFile(md)
	var doc string
	switch {
	case errors.Is(err, os.ErrNotExist):
		doc = "# csi-resizer benchmarks\n\n" + gen
	case err != nil:
		return "", "", err
	default:
		s := string(old)
		i, j := strings.Index(s, beginMarker), strings.Index(s, endMarker)
		if i < 0 || j < i {
			doc = s + "\n" + gen
		} else {
			doc = s[:i] + gen + s[j+len(endMarker)+1:]
		}
	}
	return md, js, os.WriteFile(md, []byte(doc), 0o644)
}

func (r *results) markdown() string {
	var b strings.Builder
	m := r.merged.Machine
	fmt.Fprintf(&b, "Machine: %d CPUs (%s), %s RAM, kernel %s, %s, kube-apiserver and etcd %s on 127.0.0.1. %s\n\n",
		m.NProc, m.CPUModel, m.MemTotal, m.Kernel, m.GoVersion, m.APIServer, m.SharedNote)
	b.WriteString("| section | measured (UTC) | commit | load avg start → end | smoke |\n|---|---|---|---|---|\n")
	names := make([]string, 0, len(r.merged.Sections))
	for name := range r.merged.Sections {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		s := r.merged.Sections[name]
		fmt.Fprintf(&b, "| %s | %s | %s | %s → %s | %v |\n", name, s.Meta.Date, s.Meta.Commit, s.Meta.LoadAvgStart, s.Meta.LoadAvgEnd, s.Meta.Smoke)
	}
	for _, name := range names {
		if m := r.merged.Sections[name].Meta.Machine; m != nil {
			fmt.Fprintf(&b, "\n%s was measured on another machine: %d CPUs (%s), %s RAM, kernel %s, %s.\n", name, m.NProc, m.CPUModel, m.MemTotal, m.Kernel, m.GoVersion)
		}
	}
	b.WriteString("\n### Summary\n\n")
	b.WriteString(r.table())

	var tp []ThroughputRun
	if _, ok := r.sectionRuns("throughput", &tp); ok {
		b.WriteString("\n### Throughput and API requests\n\n")
		b.WriteString("Times are from the first request change (all PVCs are patched at once by the benchmark's own unthrottled client) until a watch shows `status.capacity` = new size. Requests are the apiserver's `apiserver_request_total` over the window (after − before) on the resources the sidecar uses, minus the benchmark's own PATCHes; the benchmark itself only watches during the window.\n\n")
		b.WriteString("| binary | flags | PVCs | all done | floor 3N/QPS | all done / floor | p50 | p90 | last event | resizes/s | (writes+events)/s until done | reads | PVC status | PV | other | events | 409s | CSI calls/attempt | wq adds | CPU ms |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, t := range tp {
			flags := strings.Join(t.Flags, " ")
			if flags == "" {
				flags = "(defaults: qps 5, burst 10)"
			}
			fmt.Fprintf(&b, "| %s | %s | %d | %.1f s | %.1f s | %.3f | %.1f s | %.1f s | %.1f s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %d | %.2f | %.2f | %.1f |\n",
				t.Binary, flags, t.PVCs, t.AllDoneSeconds, t.FloorSeconds, overFloor(t), t.P50DoneSeconds, t.P90DoneSeconds, t.EventsDoneSeconds, t.ResizesPerSecond, t.WriteRateUntilDone,
				t.ReadsPerResize, t.PVCStatusPerResize, t.PVPerResize, t.OtherWritesPerResize, t.EventWritesPerResize, t.Requests.Conflicts,
				t.CSICallsPerAttempt, t.WorkqueueAddsPerResize, t.CPUSecondsPerResize*1000)
		}
		b.WriteString("\nPer-resize columns are window totals divided by the PVC count; \"wq adds\" is the resizer's `workqueue_adds_total` per resize, \"CPU ms\" its user+system CPU per resize.\n\n")
		for _, t := range tp {
			fmt.Fprintf(&b, "- %s, %s: requests %s; CSI calls %s; events written by the time the last PVC was done: %d of %d; resizer start-up (process start → caches synced with %d pairs): %.1f s; apiserver background in the window (not counted): %s.",
				t.Binary, t.Config, kv(t.Requests.Detail), kv(t.CSICalls), t.EventsAtAllDone, t.PVCs, t.PVCs, t.StartSeconds, kv(t.Requests.Background))
			if a := t.AuditResizer; a != nil {
				fmt.Fprintf(&b, " Audit log, the resizer's own requests (by user agent): %d reads, %d writes, %d event writes, %d watches started: %s.", a.Reads, a.Writes, a.Events, a.Watches, kv(a.Detail))
			}
			b.WriteString("\n")
		}
	}

	var inf []InfeasibleRun
	if _, ok := r.sectionRuns("infeasible", &inf); ok {
		b.WriteString("\n### Infeasible PVC\n\n")
		b.WriteString("One PVC asks for 100Gi; the mock driver answers every ControllerExpandVolume with OUT_OF_RANGE. Calls are counted from the driver's calls log over the window that starts at the request change (`--retry-interval-start` 1s, the default).\n\n")
		b.WriteString("After the window the request is lowered to " + recoverySize + " (above the capacity, below the infeasible size): \"recovery\" is the time until the capacity is " + recoverySize + ".\n\n")
		b.WriteString("| binary | --retry-interval-max | window | calls | target | call times (s after the change) | gaps (s) | other CSI calls | PVC status writes | event writes | state | condition reason: message | recovery |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, t := range inf {
			recovery := "not within the timeout"
			if t.RecoverySeconds >= 0 {
				recovery = fmt.Sprintf("%.1f s", t.RecoverySeconds)
			}
			fmt.Fprintf(&b, "| %s | %.0fs | %.0f s | %d | ≤ %d | %v | %v | %d | %d | %d | %s | %s: %s | %s |\n", t.Binary, t.RetryIntervalMax, t.WindowSeconds, t.Calls, t.Target,
				t.CallOffsets, t.GapsSeconds, t.OtherCSICalls, t.Requests.PVCStatusWrites, t.Requests.EventWrites,
				t.State, orNone(t.ConditionReason), orNone(t.ConditionMessage), recovery)
		}
	}

	var mem []MemoryRun
	if _, ok := r.sectionRuns("memory", &mem); ok {
		b.WriteString("\n### Memory\n\n")
		b.WriteString("VmRSS of the resizer process (`/proc/<pid>/status`) once it settled after its caches synced (< 1 MiB change over 3 s), VmHWM (peak) at that point, VmRSS again after the Go runtime's periodic GC and scavenger had their turn (\"steady\", 150 s after the sync), and the Go heap in use from its /metrics. Objects were created before the resizer started; shapes are described in test/bench/bulk_test.go (realistic labels, annotations, finalizers, managedFields, volumeAttributes, nodeAffinity; Running StatefulSet-like pods).\n\n")
		b.WriteString("| binary | stage | pairs | pods | pod informer | sync | RSS median (min–max, reps) | anon / file | peak | steady RSS | heap in use |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, t := range mem {
			fmt.Fprintf(&b, "| %s | %s | %d | %d | %v | %.1f s | %.1f MiB (%.1f–%.1f, %d) | %.1f / %.1f | %s | %s | %s |\n", t.Binary, t.Stage, t.Pairs, t.Pods, t.PodInformer, t.SyncSeconds,
				mib(t.RSSBytes), mib(t.RSSMinBytes), mib(t.RSSMaxBytes), t.Reps, mib(t.RssAnonBytes), mib(t.RssFileBytes), fmtMiB(t.HWMBytes), fmtMiB(t.SteadyRSSBytes), fmtMiB(t.HeapInuseBytes))
		}
		perObject := map[string]map[string]MemoryRun{}
		for _, t := range mem {
			if perObject[t.Binary] == nil {
				perObject[t.Binary] = map[string]MemoryRun{}
			}
			perObject[t.Binary][t.Stage] = t
		}
		bins := make([]string, 0, len(perObject))
		for k := range perObject {
			bins = append(bins, k)
		}
		sort.Strings(bins)
		b.WriteString("\n")
		for _, bin := range bins {
			s := perObject[bin]
			idle, pairs, pods, active := s[stageIdle], s[stagePairs], s[stagePods], s[stagePodsActive]
			if pairs.Pairs == 0 {
				continue
			}
			// A binary whose pod informer runs in the default-driver stage too (upstream's
			// always does) pays for its pods there.
			withInformer, withoutInformer := perPod(active, pods), perPod(pods, pairs)
			if pods.PodInformer {
				withInformer, withoutInformer = perPod(pods, pairs), "— (its pod informer always runs)"
			}
			fmt.Fprintf(&b, "- %s: per cached PVC or PV %.0f B of RSS (%.0f B steady, %.0f B of heap); per pod with the pod informer running %s of RSS; pods without the informer cost %s.\n",
				bin,
				float64(pairs.RSSBytes-idle.RSSBytes)/float64(2*pairs.Pairs),
				float64(pairs.SteadyRSSBytes-idle.SteadyRSSBytes)/float64(2*pairs.Pairs),
				float64(pairs.HeapInuseBytes-idle.HeapInuseBytes)/float64(2*pairs.Pairs),
				withInformer, withoutInformer)
		}
	}

	var profs []HeapProfile
	if _, ok := r.sectionRuns("heapProfiles", &profs); ok {
		b.WriteString("\n#### Heap profiles\n\n")
		b.WriteString("In-use space after a forced GC (live objects), of a build of the same code with net/http/pprof (test/bench/pprofresizer), run next to the measured binaries with -pprof.\n")
		for _, p := range profs {
			fmt.Fprintf(&b, "\n<details><summary>%s</summary>\n\n```\n%s\n```\n</details>\n", p.Stage, strings.Join(p.Top, "\n"))
		}
	}

	var dec []DecisionRun
	if meta, ok := r.sectionRuns("decision", &dec); ok {
		b.WriteString("\n### Decision function (pkg/expand Go benchmarks)\n\n")
		fmt.Fprintf(&b, "`go test ./pkg/expand -run '^$' -bench . -benchmem` (median of %s runs).\n\n", runsOf(dec, meta))
		b.WriteString("| benchmark | ns/op | B/op | allocs/op |\n|---|---|---|---|\n")
		sort.Slice(dec, func(i, j int) bool { return dec[i].Name < dec[j].Name })
		for _, d := range dec {
			fmt.Fprintf(&b, "| %s | %.1f | %.0f | %.0f |\n", d.Name, d.NsPerOp, d.BytesPerOp, d.AllocsPerOp)
		}
	}

	var mod []ModifyRun
	if _, ok := r.sectionRuns("modify", &mod); ok {
		b.WriteString(modifyMarkdown(mod))
	}

	var nd []NodeDeploymentRun
	if _, ok := r.sectionRuns("nodeDeployment", &nd); ok {
		b.WriteString(nodeDeploymentMarkdown(nd))
	}

	var rn []RealNodeRun
	if meta, ok := r.sectionRuns("realNode", &rn); ok {
		b.WriteString(realNodeMarkdown(rn, meta))
	}

	var as []AutoscalerScaleRun
	if meta, ok := r.sectionRuns("autoscalerScale", &as); ok {
		b.WriteString(autoscalerScaleMarkdown(as, meta))
	}

	var sts stsSection
	if _, ok := r.sectionRuns("statefulset", &sts); ok {
		b.WriteString("\n### statefulset-resizer\n\n")
		if sts.Skipped != "" {
			fmt.Fprintf(&b, "Not measured: %s\n", sts.Skipped)
		}
		for _, s := range sts.Runs {
			fmt.Fprintf(&b, "%d-replica Parallel StatefulSet, template %s → %s by delete --cascade=orphan and re-create (kube-controller-manager running, pods made Running by the benchmark), csi-resizer with %s: every PVC request patched %.1f s after the re-create, finishedReconciliationGeneration = generation with all replicas ready after %.1f s. Requests in the window by client, from the apiserver's audit log:\n\n",
				s.Replicas, s.From, s.To, strings.Join(s.ResizerFlags, " "), s.PatchedSeconds, s.FinishedSeconds)
			b.WriteString("| client | reads | writes | event writes | watches started | detail |\n|---|---|---|---|---|---|\n")
			names := make([]string, 0, len(s.Clients))
			for name := range s.Clients {
				names = append(names, name)
			}
			sort.Strings(names)
			for _, name := range names {
				c := s.Clients[name]
				fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %s |\n", name, c.Reads, c.Writes, c.Events, c.Watches, kv(c.Detail))
			}
		}
	}
	return b.String()
}

func perPod(with, without MemoryRun) string {
	if with.Pods == 0 || with.RSSBytes == 0 || without.RSSBytes == 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f B", float64(with.RSSBytes-without.RSSBytes)/float64(with.Pods))
}

func runsOf(dec []DecisionRun, _ Meta) string {
	if len(dec) == 0 {
		return "0"
	}
	return fmt.Sprint(dec[0].Runs)
}

func kv[V int | float64](m map[string]V) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("`%s`: %v", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func machine() Machine {
	m := Machine{
		NProc:     runtime.NumCPU(),
		GoVersion: runtime.Version(),
		Date:      time.Now().UTC().Format(time.RFC3339),
		SharedNote: "The machine is shared with other engineers' builds and tests: timings are noisy " +
			"(see the load averages); request and call counts are not.",
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				var kb int64
				fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), &kb)
				m.MemTotal = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
			}
		}
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if root, err := framework.RepoRoot(); err == nil {
		if b, err := os.ReadFile(filepath.Join(root, "test", "k8s-bins", "go.mod")); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				f := strings.Fields(line)
				if len(f) >= 2 && f[0] == "k8s.io/kubernetes" {
					m.APIServer = f[1]
				}
			}
		}
	}
	return m
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func gitDescribe() string {
	root, err := framework.RepoRoot()
	if err != nil {
		return "?"
	}
	cmd := exec.Command("git", "describe", "--always", "--dirty")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "?"
	}
	return string(bytes.TrimSpace(out))
}
