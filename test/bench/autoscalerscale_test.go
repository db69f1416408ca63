//go:build integration

package bench

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"

	"github.com/csi-resizer/csi-resizer/pkg/autoscale/policy"
	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// BenchmarkVolumeAutoscalerScale runs the volume-autoscaler binary against a real apiserver
// with many simulated nodes (plain Node objects, see simKubelet) and PVCs: kubelet and API
// requests per minute in steady state, its CPU and memory, one poll round's duration, and the
// time from K volumes crossing their threshold to their request being patched.
//
// Knobs: BENCH_AUTOSCALE_NODES (1000, smoke 20), BENCH_AUTOSCALE_PVCS (10000, smoke 100),
// BENCH_AUTOSCALE_FILL (PVCs made to cross the threshold, 100, smoke 10),
// BENCH_AUTOSCALE_INTERVAL (--interval, 60s, smoke 2s), BENCH_AUTOSCALE_ROUNDS (steady rounds
// measured, 2, smoke 3).
func BenchmarkVolumeAutoscalerScale(b *testing.B) {
	b.ReportMetric(0, "ns/op")
	var none int
	cfg := scaleConfig{
		nodes:    intKnob(&none, "BENCH_AUTOSCALE_NODES", 1000, 20),
		pvcs:     intKnob(&none, "BENCH_AUTOSCALE_PVCS", 10000, 100),
		fill:     intKnob(&none, "BENCH_AUTOSCALE_FILL", 100, 10),
		rounds:   intKnob(&none, "BENCH_AUTOSCALE_ROUNDS", 2, 3),
		interval: time.Minute,
	}
	if smoke {
		cfg.interval = 2 * time.Second
	}
	if v := os.Getenv("BENCH_AUTOSCALE_INTERVAL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			b.Fatalf("BENCH_AUTOSCALE_INTERVAL=%q: want a Go duration above zero", v)
		}
		cfg.interval = d
	}
	cfg.fill = min(cfg.fill, cfg.pvcs)
	run := measureAutoscalerScale(b, cfg)
	report.addAutoscalerScale(run)
	b.ReportMetric(run.KubeletRequestsPerMinute, "kubelet-req/min")
	b.ReportMetric(run.APIRequestsPerMinute, "api-req/min")
	b.ReportMetric(run.CPUSecondsPerMinute, "cpu-s/min")
	b.ReportMetric(mib(run.PeakRSSBytes), "peak-RSS-MiB")
	b.ReportMetric(run.ReactP95Seconds, "react-p95-s")
}

type scaleConfig struct {
	nodes, pvcs, fill, rounds int
	interval                  time.Duration
}

// AutoscalerScaleRun is one run of BenchmarkVolumeAutoscalerScale.
type AutoscalerScaleRun struct {
	Nodes           int     `json:"nodes"`
	PVCs            int     `json:"pvcs"`
	IntervalSeconds float64 `json:"intervalSeconds"`
	Concurrency     string  `json:"kubeletConcurrency"`
	// SetupSeconds: creating the nodes, PVCs and pods; FirstRoundSeconds: process start to the
	// end of its first poll round (caches synced, every kubelet read once, each stand-in
	// checking the token once).
	SetupSeconds      float64 `json:"setupSeconds"`
	FirstRoundSeconds float64 `json:"firstRoundSeconds"`
	// The steady window: Rounds poll rounds after the first, nothing above its threshold.
	Rounds                   int            `json:"rounds"`
	WindowSeconds            float64        `json:"windowSeconds"`
	PollSecondsMean          float64        `json:"pollSecondsMean"`
	KubeletRequestsPerMinute float64        `json:"kubeletRequestsPerMinute"`
	APIRequestsPerMinute     float64        `json:"apiRequestsPerMinute"`
	APIPerMinute             map[string]int `json:"apiPerMinuteByVerb"`
	Background               map[string]int `json:"background,omitempty"`
	CPUSecondsPerMinute      float64        `json:"cpuSecondsPerMinute"`
	RSSBytes                 int64          `json:"rssBytes"`
	PeakRSSBytes             int64          `json:"peakRssBytes"`
	HeapInuseBytes           int64          `json:"heapInuseBytes"`
	// MetricsBytes: one scrape of its /metrics (text format) at the end of the window. The
	// harness scrapes once a second to see rounds end; that cost is in CPUSecondsPerMinute.
	MetricsBytes int `json:"metricsBytes"`
	// Reaction: Fill PVCs cross their threshold at once (in the stand-ins' answers); seconds
	// until each one's request is patched.
	Fill             int            `json:"fill"`
	Reacted          int            `json:"reacted"`
	ReactP50Seconds  float64        `json:"reactP50Seconds"`
	ReactP95Seconds  float64        `json:"reactP95Seconds"`
	ReactMaxSeconds  float64        `json:"reactMaxSeconds"`
	ReactAPIRequests map[string]int `json:"reactApiRequests"`
	// PVCWrites: writes of PVC objects from the fill to two poll rounds after the last patch.
	PVCWrites int `json:"pvcWrites"`
	// AuthChecks: TokenReview + SubjectAccessReview pairs the stand-ins made (one per node).
	AuthChecks   int     `json:"authChecks"`
	TotalSeconds float64 `json:"totalSeconds"`
}

func (r *results) addAutoscalerScale(t AutoscalerScaleRun) {
	r.locked(func() { r.autoscalerScale = append(r.autoscalerScale, t) })
}

// autoscalerResources are what volume-autoscaler reads or writes; requests on other resources
// are the apiserver's own loops (and the stand-ins' auth checks) and are reported apart.
var autoscalerResources = map[string]bool{
	"persistentvolumeclaims": true, "pods": true, "nodes": true, "storageclasses": true, "events": true,
	"statefulsets": true,
}

func measureAutoscalerScale(b *testing.B, cfg scaleConfig) AutoscalerScaleRun {
	begin := time.Now()
	run := AutoscalerScaleRun{Nodes: cfg.nodes, PVCs: cfg.pvcs, IntervalSeconds: cfg.interval.Seconds(), Concurrency: "20 (default)", Fill: cfg.fill, Rounds: cfg.rounds}
	cluster := framework.StartCluster(b, framework.ClusterOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	client, err := bulkClient(cluster)
	if err != nil {
		b.Fatal(err)
	}
	const system = "autoscaler-system"
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: system}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	kubeconfig := scenario.ApplyVolumeAutoscalerRBAC(b, cluster, system)
	ns := framework.CreateNamespace(b, ctx, client, "scale")

	setup := time.Now()
	f := startFleet(b, client, cfg.nodes)
	createScaleObjects(b, ctx, client, ns, f, cfg.pvcs)
	run.SetupSeconds = seconds(time.Since(setup))
	b.Logf("%d nodes with their stats servers, %d bound PVCs and their pods in %v", cfg.nodes, cfg.pvcs, time.Since(setup).Round(time.Second))

	p := startScaleAutoscaler(b, f, kubeconfig, cfg.interval)
	started := time.Now()
	polls := func() (count, sum float64) {
		body := scenario.Scrape(b, p)
		return scenario.MetricValue(body, "volume_autoscaler_poll_duration_seconds_count"), scenario.MetricValue(body, "volume_autoscaler_poll_duration_seconds_sum")
	}
	// Polled once a second, as a scrape: the harness's own load on the process stays small.
	waitRounds := func(want float64, timeout time.Duration) {
		if !pollUntil(timeout, time.Second, func() bool { c, _ := polls(); return c >= want }) {
			c, _ := polls()
			b.Fatalf("volume-autoscaler finished %v poll rounds in %v, want %v; log tail:\n%s", c, timeout, want, p.LogTail(30))
		}
	}
	waitRounds(1, 10*time.Minute)
	run.FirstRoundSeconds = seconds(time.Since(started))
	steadyWindow(b, ctx, cluster, p, f, cfg, polls, waitRounds, &run)
	beforeFill := react(b, ctx, cluster, client, ns, f, cfg, &run)
	checkOneWritePerCrossing(b, ctx, cluster, beforeFill, polls, waitRounds, cfg, &run)
	if refused := f.refusedCount(); refused > 0 {
		b.Errorf("the stats servers refused %d requests, e.g. %s", refused, f.firstRefusal())
	}
	run.AuthChecks = int(f.authChecks.Load())
	run.TotalSeconds = seconds(time.Since(begin))
	js, _ := json.Marshal(run)
	b.Logf("run: %s", js)
	return run
}

// steadyWindow measures cfg.rounds poll rounds after the first: no volume above its threshold.
func steadyWindow(b *testing.B, ctx context.Context, cluster *framework.Cluster, p *framework.Process, f *fleet, cfg scaleConfig,
	polls func() (float64, float64), waitRounds func(float64, time.Duration), run *AutoscalerScaleRun) {
	c0, s0 := polls()
	api0, kub0, cpu0, t0 := scrapeAPIServer(b, ctx, cluster), f.requests(), cpuSeconds(p.Pid()), time.Now()
	waitRounds(c0+float64(cfg.rounds), time.Duration(cfg.rounds+2)*cfg.interval+5*time.Minute)
	c1, s1 := polls()
	api1, kub1, cpu1 := scrapeAPIServer(b, ctx, cluster), f.requests(), cpuSeconds(p.Pid())
	// The window holds exactly c1-c0 rounds (it starts and ends when a round is seen done), and
	// between rounds the process reads nothing: rates are per nominal minute of rounds, which
	// the 1 s polling of its /metrics does not blur.
	run.WindowSeconds, run.Rounds = seconds(time.Since(t0)), int(c1-c0)
	perMin := 60 / (cfg.interval.Seconds() * (c1 - c0))
	run.PollSecondsMean = round((s1-s0)/(c1-c0), 3)
	run.KubeletRequestsPerMinute = round(float64(kub1-kub0)*perMin, 1)
	run.CPUSecondsPerMinute = round((cpu1-cpu0)*perMin, 3)
	run.APIPerMinute, run.Background = map[string]int{}, map[string]int{}
	total := 0
	for k, v := range api1.minus(api0) {
		key := k.Verb + " " + k.Resource
		if k.Subresource != "" {
			key += "/" + k.Subresource
		}
		if !autoscalerResources[k.Resource] {
			run.Background[key] += int(v + 0.5)
			continue
		}
		run.APIPerMinute[key] += int(v*perMin + 0.5)
		total += int(v + 0.5)
	}
	run.APIRequestsPerMinute = round(float64(total)*perMin, 1)
	rss, hwm, err := procMemory(p.Pid())
	if err != nil {
		b.Fatal(err)
	}
	run.RSSBytes, run.PeakRSSBytes = rss, hwm
	body := scenario.Scrape(b, p)
	run.HeapInuseBytes = int64(scenario.MetricValue(body, "go_memstats_heap_inuse_bytes"))
	run.MetricsBytes = len(body)
	if n := scenario.MetricValue(body, "volume_autoscaler_pvc_patches_total"); n != 0 {
		b.Errorf("volume-autoscaler patched %v PVCs with every volume below its threshold", n)
	}
}

// react makes cfg.fill PVCs (spread over the nodes) cross their threshold at once and times
// each one's request patch, from a watch. It returns the apiserver's counts from before the fill.
func react(b *testing.B, ctx context.Context, cluster *framework.Cluster, client kubernetes.Interface, ns string, f *fleet, cfg scaleConfig, run *AutoscalerScaleRun) apiCounts {
	list, err := client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		b.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	w, err := client.CoreV1().PersistentVolumeClaims(ns).Watch(wctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	want := map[string]bool{}
	step := cfg.pvcs / cfg.fill
	for i := range cfg.fill {
		want[scaleClaim(i*step)] = true
	}
	api0 := scrapeAPIServer(b, ctx, cluster)
	t0 := time.Now()
	f.fill(want)
	took := watchPatches(w, want, scaleSize, t0, 3*cfg.interval+2*time.Minute)
	api1 := scrapeAPIServer(b, ctx, cluster) // before the watch ends: it is counted when it ends
	run.Reacted = len(took)
	if len(took) < cfg.fill {
		b.Errorf("%d of %d PVCs above their threshold were patched within %v", len(took), cfg.fill, 3*cfg.interval+2*time.Minute)
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	if len(took) > 0 {
		run.ReactP50Seconds = seconds(took[len(took)/2])
		run.ReactP95Seconds = seconds(took[min(len(took)-1, len(took)*95/100)])
		run.ReactMaxSeconds = seconds(took[len(took)-1])
	}
	run.ReactAPIRequests = map[string]int{}
	for k, v := range api1.minus(api0) {
		if autoscalerResources[k.Resource] && writeVerbs[k.Verb] {
			run.ReactAPIRequests[k.Verb+" "+k.Resource+" "+k.Code] += int(v + 0.5)
		}
	}
	return api0
}

// checkOneWritePerCrossing waits two more poll rounds (every PVC is synced again after each)
// and checks that the autoscaler wrote only the PVCs that crossed their threshold: every replica
// existed before its siblings grew, so none is raised for them.
func checkOneWritePerCrossing(b *testing.B, ctx context.Context, cluster *framework.Cluster, before apiCounts,
	polls func() (float64, float64), waitRounds func(float64, time.Duration), cfg scaleConfig, run *AutoscalerScaleRun) {
	c, _ := polls()
	waitRounds(c+2, 4*cfg.interval+5*time.Minute)
	run.PVCWrites = pvcWrites(scrapeAPIServer(b, ctx, cluster).minus(before))
	if run.PVCWrites != run.Reacted {
		b.Errorf("%d PVC writes from %d replicas crossing their threshold to two poll rounds later, want one each", run.PVCWrites, run.Reacted)
	}
}

// pvcWrites counts the writes of PVC objects (not their status) in c.
func pvcWrites(c apiCounts) int {
	n := 0
	for k, v := range c {
		if k.Resource == "persistentvolumeclaims" && k.Subresource == "" && writeVerbs[k.Verb] {
			n += int(v + 0.5)
		}
	}
	return n
}

// watchPatches returns, for each PVC in want whose request moves off from, the time from t0
// until the watch saw it.
func watchPatches(w kwatch.Interface, want map[string]bool, from resource.Quantity, t0 time.Time, timeout time.Duration) []time.Duration {
	var took []time.Duration
	seen := map[string]bool{}
	deadline := time.After(timeout)
	for len(seen) < len(want) {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return took
			}
			pvc, isClaim := ev.Object.(*corev1.PersistentVolumeClaim)
			if !isClaim || !want[pvc.Name] || seen[pvc.Name] {
				continue
			}
			if q := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; q.Cmp(from) != 0 {
				seen[pvc.Name] = true
				took = append(took, time.Since(t0))
			}
		case <-deadline:
			return took
		}
	}
	return took
}

var scaleSize = resource.MustParse("10Gi")

// The PVCs and pods are the replicas of benchStatefulSet (createPodsPlaced makes it the pods'
// controller) with the volume claim template "data", named as the StatefulSet controller names
// them: every sync of a replica that never grew looks up its grown siblings
// (policy.SiblingSize), the autoscaler's most expensive path.
func scaleClaim(i int) string { return fmt.Sprintf("data-%s-%d", benchStatefulSet, i) }
func scaleNode(i int) string  { return fmt.Sprintf("sim-node-%04d", i) }

// createScaleObjects makes the opted-in StorageClass (limit 100Gi), the nodes (one per stats
// server), pvcs bound PVCs of 10Gi and one running pod per PVC, pod i on node i mod nodes.
func createScaleObjects(b *testing.B, ctx context.Context, client kubernetes.Interface, ns string, f *fleet, pvcs int) {
	const class = "autoscaled"
	f.mu.Lock()
	f.ns = ns
	f.mu.Unlock()
	if _, err := client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta:  metav1.ObjectMeta{Name: class, Annotations: map[string]string{policy.AnnAutoscale: "true", policy.AnnLimit: "100Gi"}},
		Provisioner: "example.csi.io", AllowVolumeExpansion: ptr.To(true),
	}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	if err := parallel(len(f.kubelets), bulkConcurrency, func(i int) error { return createSimNode(ctx, client, f.kubelets[i]) }); err != nil {
		b.Fatal(err)
	}
	claims := make([]string, pvcs)
	for i := range claims {
		claims[i] = scaleClaim(i)
		k := f.kubelets[i%len(f.kubelets)]
		k.pods = append(k.pods, simPod{pod: fmt.Sprintf("%s-%d", benchStatefulSet, i), claim: claims[i]})
	}
	if err := parallel(pvcs, bulkConcurrency, func(i int) error { return createBoundPVC(ctx, client, ns, claims[i], class) }); err != nil {
		b.Fatal(err)
	}
	if err := createPodsPlaced(ctx, client, ns, claims, func(i int) string { return scaleNode(i % len(f.kubelets)) }, benchStatefulSet); err != nil {
		b.Fatal(err)
	}
}

// createSimNode creates k's Node: Ready, at 127.0.0.1, its kubelet port that of k's server. No
// kube-controller-manager runs, so nothing marks it NotReady without heartbeats; the
// autoscaler reads only the address and port.
func createSimNode(ctx context.Context, client kubernetes.Interface, k *simKubelet) error {
	node, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: k.name,
		Labels: map[string]string{"kubernetes.io/hostname": k.name, "type": "simulated"}}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create node %s: %w", k.name, err)
	}
	now := metav1.Now()
	node.Status = corev1.NodeStatus{
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "simulated by the benchmark", LastHeartbeatTime: now, LastTransitionTime: now}},
		Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}, {Type: corev1.NodeHostName, Address: k.name}},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: k.port}},
		Capacity:        corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourcePods: resource.MustParse("110")},
	}
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("node %s status: %w", k.name, err)
	}
	return nil
}

// createBoundPVC creates a PVC bound to a PV name with capacity 10Gi (2 writes). No PV object:
// volume-autoscaler never reads PVs, and the apiserver lets a bound claim's request grow
// without one.
func createBoundPVC(ctx context.Context, client kubernetes.Interface, ns, name, class string) error {
	rwo := []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	pvcs := client.CoreV1().PersistentVolumeClaims(ns)
	pvc, err := pvcs.Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "web"},
			Annotations: map[string]string{"pv.kubernetes.io/bind-completed": "yes", "volume.kubernetes.io/storage-provisioner": "example.csi.io"}},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: rwo, StorageClassName: ptr.To(class), VolumeName: "pv-" + name,
			VolumeMode: ptr.To(corev1.PersistentVolumeFilesystem),
			Resources:  corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: scaleSize}}},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create PVC %s: %w", name, err)
	}
	pvc.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, AccessModes: rwo, Capacity: corev1.ResourceList{corev1.ResourceStorage: scaleSize}}
	if _, err := pvcs.UpdateStatus(ctx, pvc, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("PVC %s status: %w", name, err)
	}
	return nil
}

// startScaleAutoscaler runs the volume-autoscaler binary as the shipped ServiceAccount with
// --kubelet-concurrency at its default.
func startScaleAutoscaler(b *testing.B, f *fleet, kubeconfig string, interval time.Duration) *framework.Process {
	dir := b.TempDir()
	caFile, tokenFile := filepath.Join(dir, "kubelet-ca.crt"), filepath.Join(dir, "token")
	if err := os.WriteFile(caFile, f.caPEM, 0o600); err != nil {
		b.Fatal(err)
	}
	kc, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		b.Fatal(err)
	}
	var token string
	for _, u := range kc.AuthInfos {
		token = u.Token
	}
	if token == "" {
		b.Fatalf("no token in %s", kubeconfig)
	}
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		b.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", framework.FreePort(b))
	p := framework.NewProcess(b, "volume-autoscaler", framework.BuildCommand(b, "volume-autoscaler"),
		"--kubeconfig="+kubeconfig, "--interval="+interval.String(), "--kubelet-certificate-authority="+caFile,
		"--token-file="+tokenFile, "--http-endpoint="+addr, "-v=2")
	p.HTTPAddr = addr
	p.Start(b)
	p.WaitHTTP(b, "/metrics", 2*time.Minute)
	return p
}

// fleet is the simulated kubelets: one TLS listener and http.Server each, on 127.0.0.1, with a
// certificate from one CA. A kubelet authorizes a request by a TokenReview and a
// SubjectAccessReview (nodes/stats get on its node); doing that on every request would make
// the benchmark measure the stand-ins' load on the apiserver, so each stand-in checks a token
// once and caches the answer, as the kubelet's webhook authenticator and authorizer cache theirs
// (2 and 5 minutes by default).
type fleet struct {
	admin      kubernetes.Interface
	caPEM      []byte
	kubelets   []*simKubelet
	authChecks atomic.Int64

	mu      sync.RWMutex
	ns      string          // the PVCs' namespace
	full    map[string]bool // claims reported 5% free; the others 50%
	refused []string
}

type simPod struct{ pod, claim string }

type simKubelet struct {
	f    *fleet
	name string
	port int32
	pods []simPod
	reqs atomic.Int64

	mu      sync.Mutex
	allowed map[string]bool // bearer tokens already authorized
}

func startFleet(b *testing.B, admin kubernetes.Interface, n int) *fleet {
	ca, err := framework.NewCA("kubelet-ca")
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := ca.Issue("simulated-kubelet", []string{"127.0.0.1"}, cert, key); err != nil {
		b.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		b.Fatal(err)
	}
	f := &fleet{admin: admin, caPEM: ca.PEM, full: map[string]bool{}}
	for i := range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatalf("listener of simulated kubelet %d: %v (raise ulimit -n?)", i, err)
		}
		k := &simKubelet{f: f, name: scaleNode(i), port: int32(l.Addr().(*net.TCPAddr).Port), allowed: map[string]bool{}}
		srv := &http.Server{Handler: k, ReadHeaderTimeout: 10 * time.Second,
			TLSConfig: &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}}
		go func() { _ = srv.ServeTLS(l, "", "") }()
		b.Cleanup(func() { _ = srv.Close() })
		f.kubelets = append(f.kubelets, k)
	}
	return f
}

func (f *fleet) requests() int64 {
	var n int64
	for _, k := range f.kubelets {
		n += k.reqs.Load()
	}
	return n
}

func (f *fleet) fill(claims map[string]bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range claims {
		f.full[c] = true
	}
}

func (f *fleet) refusedCount() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return len(f.refused)
}

func (f *fleet) firstRefusal() string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if len(f.refused) == 0 {
		return ""
	}
	return f.refused[0]
}

func (k *simKubelet) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/stats/summary" || r.Method != http.MethodGet {
		http.NotFound(w, r)
		return
	}
	k.reqs.Add(1)
	if err := k.authorize(r); err != nil {
		k.f.mu.Lock()
		k.f.refused = append(k.f.refused, err.Error())
		k.f.mu.Unlock()
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(k.summary())
}

func (k *simKubelet) summary() statsv1alpha1.Summary {
	capacity := uint64(scaleSize.Value())
	now := metav1.Now()
	s := statsv1alpha1.Summary{Node: statsv1alpha1.NodeStats{NodeName: k.name}}
	k.f.mu.RLock()
	defer k.f.mu.RUnlock()
	ns := k.f.ns
	for _, p := range k.pods {
		avail := capacity / 2
		if k.f.full[p.claim] {
			avail = capacity / 20
		}
		fs := statsv1alpha1.FsStats{Time: now, CapacityBytes: ptr.To(capacity), AvailableBytes: ptr.To(avail), UsedBytes: ptr.To(capacity - avail),
			Inodes: ptr.To(uint64(655360)), InodesFree: ptr.To(uint64(600000)), InodesUsed: ptr.To(uint64(55360))}
		s.Pods = append(s.Pods, statsv1alpha1.PodStats{
			PodRef: statsv1alpha1.PodReference{Namespace: ns, Name: p.pod, UID: "uid-" + p.pod},
			VolumeStats: []statsv1alpha1.VolumeStats{{Name: "data", FsStats: fs,
				PVCRef: &statsv1alpha1.PVCReference{Namespace: ns, Name: p.claim}}},
		})
	}
	return s
}

// authorize is the kubelet's check of GET /stats/summary (TokenReview, then SubjectAccessReview
// for nodes/stats get on this node), once per token.
func (k *simKubelet) authorize(r *http.Request) error {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return errors.New("no bearer token")
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.allowed[token] {
		return nil
	}
	k.f.authChecks.Add(1)
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	review, err := k.f.admin.AuthenticationV1().TokenReviews().Create(ctx,
		&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil || !review.Status.Authenticated {
		return fmt.Errorf("token not authenticated: %v", err)
	}
	u := review.Status.User
	extra := map[string]authorizationv1.ExtraValue{}
	for key, v := range u.Extra {
		extra[key] = authorizationv1.ExtraValue(v)
	}
	sar, err := k.f.admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: u.Username, Groups: u.Groups, UID: u.UID, Extra: extra,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Resource: "nodes", Subresource: "stats", Name: k.name},
	}}, metav1.CreateOptions{})
	if err != nil || !sar.Status.Allowed {
		return fmt.Errorf("%s may not get nodes/stats of %s: %v", u.Username, k.name, err)
	}
	k.allowed[token] = true
	return nil
}

// autoscalerScaleMarkdown is the report's section "volume-autoscaler at scale".
func autoscalerScaleMarkdown(runs []AutoscalerScaleRun, meta Meta) string {
	var b strings.Builder
	b.WriteString("\n### volume-autoscaler at scale\n\n")
	fmt.Fprintf(&b, "`go test -tags integration -run '^$' -bench BenchmarkVolumeAutoscalerScale -benchtime 1x ./test/bench/` (smoke: %v). The volume-autoscaler binary runs as the shipped ServiceAccount against a real kube-apiserver + etcd. Each simulated node is a plain Node object (Ready, address 127.0.0.1, `daemonEndpoints` port of its own TLS stats server; no kube-controller-manager runs, so no heartbeat is needed; kwok is not on the module proxy this project uses). Each stats server is one listener and `http.Server` in the benchmark process serving `/stats/summary` for the pods placed on its node, and authorizes like the kubelet (TokenReview, then SubjectAccessReview nodes/stats get) once per token, then from its cache, as the kubelet's webhook caches do. One bound PVC (10Gi, no PV object: the autoscaler reads none) and one running pod per PVC, pod i on node i mod nodes, all at 50%% free; they are the replicas of one StatefulSet (PVC `data-web-<i>`, pod `web-<i>` with the StatefulSet `web` as its controller), so every sync of a replica that never grew looks up its grown siblings; the StorageClass is opted in with a 100Gi limit. The steady window is the poll rounds after the first, with nothing to resize; requests are the apiserver's `apiserver_request_total` over it on the resources the autoscaler uses (the benchmark makes none there in the window), per minute. Reaction: K PVCs (every (PVCs/K)-th, on several nodes) are reported 5%% free at once, right after a round was seen done; the time until a watch sees each request patched, and the PVC patches the autoscaler made (one per crossing: the other replicas existed before their siblings grew, so none is raised for them).\n\n", meta.Smoke)
	b.WriteString("| nodes | PVCs | --interval | kubelet req/min | API req/min | CPU s/min | RSS / peak | heap in use | poll round (mean) | first round | K | react p50 / p95 / max | setup | run |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range runs {
		fmt.Fprintf(&b, "| %d | %d | %.0fs | %.0f | %.1f | %.3f | %.1f / %.1f MiB | %.1f MiB | %.2f s | %.1f s | %d of %d | %.1f / %.1f / %.1f s | %.0f s | %.0f s |\n",
			r.Nodes, r.PVCs, r.IntervalSeconds, r.KubeletRequestsPerMinute, r.APIRequestsPerMinute, r.CPUSecondsPerMinute,
			mib(r.RSSBytes), mib(r.PeakRSSBytes), mib(r.HeapInuseBytes), r.PollSecondsMean, r.FirstRoundSeconds,
			r.Reacted, r.Fill, r.ReactP50Seconds, r.ReactP95Seconds, r.ReactMaxSeconds, r.SetupSeconds, r.TotalSeconds)
	}
	b.WriteString("\n")
	for _, r := range runs {
		fmt.Fprintf(&b, "- %d nodes: steady window %.0f s (%d rounds, --kubelet-concurrency %s); API requests per minute by verb: %s; writes in the reaction window: %s; PVC writes from the fill to two rounds after the last patch: %d; one /metrics scrape: %.0f KiB (the harness scrapes once a second to see rounds end, in the CPU figure); stand-in auth checks (TokenReview + SubjectAccessReview, once per node): %d; apiserver background in the steady window (not counted): %s.\n",
			r.Nodes, r.WindowSeconds, r.Rounds, r.Concurrency, orNone(kv(r.APIPerMinute)), orNone(kv(r.ReactAPIRequests)), r.PVCWrites, float64(r.MetricsBytes)/1024, r.AuthChecks, orNone(kv(r.Background)))
	}
	b.WriteString("\nThe volumes cross their threshold just after a round, so each waits about one full --interval for the next (the worst phase; a volume crossing at a random moment waits half of it on average), then that round's reads, then its patch: the K patches queue behind the autoscaler's client-side rate limit (--kube-api-qps 5, --kube-api-burst 10 by default), about (K − 10) / 5 s for the last. CPU is the process's user+system time over the steady window; the machine is shared (see the load average above), so CPU and times are upper bounds.\n")
	return b.String()
}
