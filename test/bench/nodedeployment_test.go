//go:build integration

package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// The --node-deployment benchmark (docs/design.md §2.12): what N instances, one per node, cost
// the apiserver and each instance, next to one instance in controller mode, on the same objects
// and workload. P PVC/PV pairs are pinned to the N nodes round-robin (node affinity on a
// per-node topology label); every other claim has a running pod on its node. The driver is the
// mock, offline-only, one process per instance: so each instance runs its Pod informer, the
// most expensive watch, which --node-deployment limits to its node's pods by a field selector.
// Window: all instances synced, then every pod's labels changed once (pod churn) and K claims
// without a pod resized at once, until all are done.

// nodeTopologyKey is the nodes' per-node topology label (its value is the node's name, as a
// node-local driver's is).
const nodeTopologyKey = "topology.bench.csi-resizer.io/node"

// NodeDeploymentRun is one configuration's measurement.
type NodeDeploymentRun struct {
	Mode      string `json:"mode"` // "controller" or "node"
	Instances int    `json:"instances"`
	Pairs     int    `json:"pairs"`
	Pods      int    `json:"pods"`
	Resized   int    `json:"resized"`
	// StartWatchEvents and StartWatchEventBytes are the watch events the apiserver sent from
	// the instances' start until all synced: the informers' initial lists (client-go streams
	// them as watch events), all instances together. OpenWatches are the watches open then
	// (apiserver_longrunning_requests), on the resources the instances watch.
	StartWatchEvents     int     `json:"startWatchEvents"`
	StartWatchEventBytes float64 `json:"startWatchEventBytes"`
	OpenWatches          int     `json:"openWatches"`
	// WatchEvents and WatchEventBytes are the watch events the apiserver sent in the window,
	// by resource (all instances together; the benchmark's own watch is none).
	WatchEvents     map[string]int     `json:"watchEvents"`
	WatchEventBytes map[string]float64 `json:"watchEventBytes"`
	// Writes are the instances' writes in the window (PVC status, PV, events).
	Writes int `json:"writes"`
	// RSS of each instance at the end of the window: sum and largest.
	RSSSumBytes int64 `json:"rssSumBytes"`
	RSSMaxBytes int64 `json:"rssMaxBytes"`
	// CPU seconds of all instances, and of kube-apiserver, over the window.
	InstancesCPUSeconds float64 `json:"instancesCpuSeconds"`
	APIServerCPUSeconds float64 `json:"apiServerCpuSeconds"`
	AllDoneSeconds      float64 `json:"allDoneSeconds"`
}

func (r *results) addNodeDeployment(t NodeDeploymentRun) {
	r.locked(func() { r.nodeDeployment = append(r.nodeDeployment, t) })
}

func BenchmarkNodeDeployment(b *testing.B) {
	var unset int // no flag: the environment or the defaults
	pairs := intKnob(&unset, "BENCH_NODE_PAIRS", 2000, 60)
	resized := intKnob(&unset, "BENCH_NODE_RESIZED", 60, 6)
	bin := binaries(b)[0]
	for _, cfg := range []struct {
		mode      string
		instances int
	}{{"controller", 1}, {"node", 3}, {"node", 10}} {
		b.Run(fmt.Sprintf("%s-%d", cfg.mode, cfg.instances), func(b *testing.B) {
			b.ReportMetric(0, "ns/op")
			r := measureNodeDeployment(b, bin, cfg.mode, cfg.instances, pairs, resized)
			report.addNodeDeployment(r)
			b.ReportMetric(float64(sumInts(r.WatchEvents)), "watch-events")
			b.ReportMetric(mib(r.RSSMaxBytes), "max-RSS-MiB")
		})
	}
}

// measureNodeDeployment runs one configuration on a fresh control plane: nodes = instances in
// node mode, and the same number of nodes (10) for the single controller-mode instance.
func measureNodeDeployment(b *testing.B, bin binary, mode string, instances, pairs, resized int) NodeDeploymentRun {
	nodes := instances
	if mode == "controller" {
		nodes = 10
	}
	e := scenario.Start(b, scenario.Options{AdminResizer: true, NoResizer: true})
	client, err := bulkClient(e.Cluster)
	if err != nil {
		b.Fatal(err)
	}
	names := make([]string, nodes)
	for i := range names {
		names[i] = fmt.Sprintf("node-%d", i)
		framework.EnsureNodeWithLabels(b, e.Ctx, e.Client, names[i], map[string]string{nodeTopologyKey: names[i]})
	}
	// One offline-only driver per instance; the claims resized in the window (the first odd
	// ones) get a real volume on the driver of their node.
	drivers := make([]*framework.Driver, instances)
	for i := range drivers {
		drivers[i] = framework.StartMockDriver(b, framework.MockDriverOptions{Name: e.Driver.Name, OfflineExpansion: true})
	}
	run := NodeDeploymentRun{Mode: mode, Instances: instances, Pairs: pairs, Pods: (pairs + 1) / 2, Resized: min(resized, pairs/2)}
	ids := make([]string, pairs)
	for i := 1; i < 2*run.Resized; i += 2 {
		if ids[i], err = drivers[(i%nodes)%instances].CreateVolume(e.Ctx, fmt.Sprintf("%s-%d", e.Namespace, i), 10<<30); err != nil {
			b.Fatal(err)
		}
	}
	created, err := createPairs(e.Ctx, client, pairSpec{Namespace: e.Namespace, Driver: e.Driver.Name, StorageClass: e.StorageClass, Size: "10Gi", Prefix: "data",
		VolumeIDs: ids, Affinity: func(i int) *v1.VolumeNodeAffinity { return pinnedTo(names[i%nodes]) }}, pairs)
	if err != nil {
		b.Fatal(err)
	}
	// A pod for every even claim, on the claim's node; the odd claims are the ones resized
	// (an offline-only driver waits while a pod uses a claim).
	podsOn := map[string][]string{}
	for i, p := range created {
		if i%2 == 0 {
			podsOn[names[i%nodes]] = append(podsOn[names[i%nodes]], p.PVC)
		}
	}
	for node, claims := range podsOn {
		if err := createPodsNamed(e.Ctx, client, e.Namespace, claims, node, "web-"+node); err != nil {
			b.Fatal(err)
		}
	}
	before := scrapeAPIServerFamilies(b, e)
	procs := startNodeInstances(b, e, bin, mode, names[:instances], drivers, pairs)
	synced := scrapeAPIServerFamilies(b, e)
	startWindow := synced.minus(before)
	run.StartWatchEvents = sumInts(startWindow.byResource("apiserver_watch_events_total"))
	for _, v := range startWindow.byResourceF("apiserver_watch_events_sizes_sum") {
		run.StartWatchEventBytes += v
	}
	run.OpenWatches = int(startWindow.sum("apiserver_longrunning_requests", "verb", "WATCH"))

	cpu0, apiCPU0 := instancesCPU(procs), cpuSeconds(e.Cluster.APIServer.Pid())
	start := time.Now()
	churnPods(b, e.Ctx, client, e.Namespace)
	var targets []string
	for i := 1; i < 2*run.Resized; i += 2 {
		targets = append(targets, created[i].PVC)
	}
	patch := []byte(`{"spec":{"resources":{"requests":{"storage":"20Gi"}}}}`)
	if err := parallel(len(targets), bulkConcurrency, func(i int) error {
		_, err := client.CoreV1().PersistentVolumeClaims(e.Namespace).Patch(e.Ctx, targets[i], types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	}); err != nil {
		b.Fatal(err)
	}
	waitFor(b, 10*time.Minute, func() (bool, string) { return allExpanded(e, targets, "20Gi") })
	run.AllDoneSeconds = round(time.Since(start).Seconds(), 2)
	after := scrapeAPIServerFamilies(b, e)
	run.InstancesCPUSeconds = round(instancesCPU(procs)-cpu0, 2)
	run.APIServerCPUSeconds = round(cpuSeconds(e.Cluster.APIServer.Pid())-apiCPU0, 2)
	window := after.minus(synced)
	run.WatchEvents, run.WatchEventBytes = window.byResource("apiserver_watch_events_total"), window.byResourceF("apiserver_watch_events_sizes_sum")
	run.Writes = window.writes()
	for _, p := range procs {
		rss, _, _ := procMemory(p.Pid())
		run.RSSSumBytes += rss
		run.RSSMaxBytes = max(run.RSSMaxBytes, rss)
	}
	return run
}

func pinnedTo(node string) *v1.VolumeNodeAffinity {
	return &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
		MatchExpressions: []v1.NodeSelectorRequirement{{Key: nodeTopologyKey, Operator: v1.NodeSelectorOpIn, Values: []string{node}}},
	}}}}
}

// startNodeInstances starts one csi-resizer per node against that node's driver (node mode),
// or one (controller mode), and waits until every instance has synced.
func startNodeInstances(b *testing.B, e *scenario.Env, bin binary, mode string, nodes []string, drivers []*framework.Driver, pairs int) []*framework.Process {
	var procs []*framework.Process
	for i, node := range nodes {
		driver := drivers[i]
		var args []string
		if mode == "node" {
			args = []string{"--node-deployment", "--node-name=" + node}
		}
		bin := bin
		bin.Label = "csi-resizer-" + node
		p, _ := startResizer(b, e, bin, driver, pairs, args...)
		procs = append(procs, p)
	}
	return procs
}

// churnPods changes a label of every pod of ns once, as a pod's status updates would.
func churnPods(b *testing.B, ctx context.Context, client kubernetes.Interface, ns string) {
	list, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	all := make([]string, 0, len(list.Items))
	for _, p := range list.Items {
		all = append(all, p.Name)
	}
	patch := []byte(`{"metadata":{"labels":{"bench-churn":"1"}}}`)
	if err := parallel(len(all), bulkConcurrency, func(i int) error {
		_, err := client.CoreV1().Pods(ns).Patch(ctx, all[i], types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	}); err != nil {
		b.Fatal(err)
	}
}

func allExpanded(e *scenario.Env, claims []string, size string) (bool, string) {
	list, err := e.Client.CoreV1().PersistentVolumeClaims(e.Namespace).List(e.Ctx, metav1.ListOptions{})
	if err != nil {
		return false, err.Error()
	}
	done := map[string]bool{}
	for i := range list.Items {
		pvc := &list.Items[i]
		if c := pvc.Status.Capacity[v1.ResourceStorage]; scenario.Is(c, size) {
			done[pvc.Name] = true
		}
	}
	n := 0
	for _, c := range claims {
		if done[c] {
			n++
		}
	}
	return n == len(claims), fmt.Sprintf("%d of %d PVCs expanded to %s", n, len(claims), size)
}

func instancesCPU(procs []*framework.Process) float64 {
	var s float64
	for _, p := range procs {
		s += cpuSeconds(p.Pid())
	}
	return s
}

// families are samples of the apiserver's metrics: "name{labels}" → value.
type families map[string]float64

// scrapeAPIServerFamilies reads the apiserver's request, response size and watch event
// counters.
func scrapeAPIServerFamilies(tb testing.TB, e *scenario.Env) families {
	tb.Helper()
	raw, err := e.Cluster.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(e.Ctx)
	if err != nil {
		tb.Fatalf("apiserver /metrics: %v", err)
	}
	out := families{}
	for _, line := range strings.Split(string(raw), "\n") {
		for _, name := range []string{"apiserver_request_total{", "apiserver_watch_events_total{", "apiserver_watch_events_sizes_sum{", "apiserver_longrunning_requests{"} {
			if strings.HasPrefix(line, name) {
				i := strings.LastIndex(line, " ")
				if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
					out[line[:i]] += v
				}
			}
		}
	}
	return out
}

func (f families) minus(g families) families {
	out := families{}
	for k, v := range f {
		if d := v - g[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// each calls fn for the samples of metric whose labels pass.
func (f families) each(metric string, fn func(labels map[string]string, v float64)) {
	for k, v := range f {
		rest, ok := strings.CutPrefix(k, metric+"{")
		if ok {
			fn(parseLabels(strings.TrimSuffix(rest, "}")), v)
		}
	}
}

// nodeBenchResources are what the instances watch or write.
var nodeBenchResources = map[string]bool{"persistentvolumeclaims": true, "persistentvolumes": true, "pods": true, "nodes": true,
	"events": true, "volumeattributesclasses": true}

func (f families) writes() int {
	n := 0.0
	f.each("apiserver_request_total", func(l map[string]string, v float64) {
		// The benchmark's own writes in the window are pod labels and PVC spec patches (no
		// subresource); the instances' are PVC status, PV and events.
		own := l["resource"] == "pods" || (l["resource"] == "persistentvolumeclaims" && l["subresource"] == "")
		if writeVerbs[l["verb"]] && nodeBenchResources[l["resource"]] && !own {
			n += v
		}
	})
	return int(n)
}

func (f families) sum(metric, label, value string) float64 {
	s := 0.0
	f.each(metric, func(l map[string]string, v float64) {
		if l[label] == value && nodeBenchResources[l["resource"]] {
			s += v
		}
	})
	return s
}

func (f families) byResourceF(metric string) map[string]float64 {
	out := map[string]float64{}
	f.each(metric, func(l map[string]string, v float64) {
		if nodeBenchResources[l["resource"]] {
			out[l["resource"]] += v
		}
	})
	return out
}

func (f families) byResource(metric string) map[string]int {
	out := map[string]int{}
	for k, v := range f.byResourceF(metric) {
		out[k] = int(v)
	}
	return out
}

func sumInts(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// nodeDeploymentMarkdown is the report's section.
func nodeDeploymentMarkdown(runs []NodeDeploymentRun) string {
	var b strings.Builder
	b.WriteString("\n### --node-deployment: N instances against one in controller mode\n\n")
	if len(runs) > 0 {
		r := runs[0]
		fmt.Fprintf(&b, "`go test -tags integration -run '^$' -bench BenchmarkNodeDeployment -benchtime 1x ./test/bench/` (part of `make bench`). %d bound PVC/PV pairs pinned to the nodes round-robin (a per-node topology label in the PV's required node affinity), a running pod on its node for every other claim (%d pods), an offline-only mock driver per instance (so each runs its Pod informer). Window: every pod's labels changed once, then %d claims without a pod resized at once, until all are done. Watch events are the apiserver's `apiserver_watch_events_total` over the window, all instances together; RSS is each instance's at the end of the window.\n\n",
			r.Pairs, r.Pods, r.Resized)
	}
	b.WriteString("| mode | instances | watches open | start: watch events / MiB | watch events in the window: PVC / PV / pod / node | window: watch event MiB | window: events per instance | instances' writes | all done | RSS per instance: max / sum | CPU s in the window: instances / apiserver |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range runs {
		ev := r.WatchEvents
		bytes := 0.0
		for _, v := range r.WatchEventBytes {
			bytes += v
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d / %.1f | %d / %d / %d / %d | %.2f | %.0f | %d | %.1f s | %s / %s | %.2f / %.2f |\n",
			r.Mode, r.Instances, r.OpenWatches, r.StartWatchEvents, r.StartWatchEventBytes/(1<<20),
			ev["persistentvolumeclaims"], ev["persistentvolumes"], ev["pods"], ev["nodes"], bytes/(1<<20),
			float64(sumInts(ev))/float64(r.Instances), r.Writes, r.AllDoneSeconds,
			fmtMiB(r.RSSMaxBytes), fmtMiB(r.RSSSumBytes), r.InstancesCPUSeconds, r.APIServerCPUSeconds)
	}
	return b.String()
}
