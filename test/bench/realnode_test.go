//go:build integration

package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/csi-resizer/csi-resizer/test/cluster"
)

// BenchmarkRealNode (make bench-node) resizes N bound PVCs, mounted by running pods, on the
// one-node cluster of hack/cluster (a real kubelet and containerd, docs/cluster.md), once with
// each image as the csi-resizer container of csi-driver-host-path's pod: this project's product
// image and the image of the driver's manifests (upstream external-resizer v2.2.1, built from
// its release source). Per image: the time from each PVC's patch to the controller step done
// (its status says NodeResizePending), to the resizer's FileSystemResizeRequired event and to
// the kubelet's FileSystemResizeSuccessful event (the node step done); the API writes of the
// resizer (its ServiceAccount and user agent) and of the kubelet, from the apiserver's audit
// log, until the resizer has been quiet for resizerQuiet; the driver's CSI calls, from its
// log; the resizer container's CPU time and peak memory, from its cgroup. It reports; it fails
// only when a resize does not finish.
//
// It runs only with BENCH_NODE=1 (make bench-node): `make bench` and bench-smoke run every
// benchmark of the package, and this one starts a cluster (root, namespaces, cgroups).
// BENCH_NODE_PVCS sets N (default 50); the cluster's names are CLUSTER_NAME, CLUSTER_NET and
// CLUSTER_VETH, as for hack/cluster.

// RealNodeRun is one image's measurement.
type RealNodeRun struct {
	Binary   string `json:"binary"` // csi-resizer or upstream
	Image    string `json:"image"`
	ImageID  string `json:"imageID"`
	PVCs     int    `json:"pvcs"`
	Pods     int    `json:"pods"`
	LoadAvg0 string `json:"loadavgStart"`
	LoadAvg1 string `json:"loadavgEnd"`
	// Seconds from each PVC's patch to its event; Last is from the first patch to the last
	// event.
	Controller Latency `json:"nodeResizePending"`
	Required   Latency `json:"fileSystemResizeRequired"`
	Successful Latency `json:"fileSystemResizeSuccessful"`
	// Resizer, Kubelet: the writes of the resizer and of the kubelet in the window, from the
	// audit log. Sidecars: the writes of the pod's other containers (same ServiceAccount).
	Resizer  auditWrites `json:"resizer"`
	Kubelet  auditWrites `json:"kubelet"`
	Sidecars auditWrites `json:"otherSidecars"`
	// CSICalls are the driver's calls in the window, by method, from its log.
	CSICalls map[string]int `json:"csiCalls"`
	// Cgroup at the start and end of the window (CPU and memory since the container started).
	CgroupStart cluster.CgroupUsage `json:"cgroupStart"`
	CgroupEnd   cluster.CgroupUsage `json:"cgroupEnd"`
	// WindowSec: from the first patch until every PVC is at the new size; QuietSec: until the
	// resizer has written nothing for resizerQuiet (writes, CPU and CSI calls are counted up
	// to then); LastWriteSec: the resizer's last write (events included).
	WindowSec    float64 `json:"windowSeconds"`
	QuietSec     float64 `json:"quietSeconds"`
	LastWriteSec float64 `json:"lastWriteSeconds"`
}

// Latency is a distribution of per-PVC seconds.
type Latency struct {
	P50  float64 `json:"p50"`
	P95  float64 `json:"p95"`
	Last float64 `json:"last"`
}

// auditWrites are one client's write requests, by "verb resource[/subresource]".
type auditWrites struct {
	Total    int            `json:"total"`
	Events   int            `json:"events"`
	Failed   int            `json:"failed"`
	ByTarget map[string]int `json:"detail"`
}

func (r *results) addRealNode(t RealNodeRun) {
	r.locked(func() { r.realNode = append(r.realNode, t) })
}

const (
	hostpathPod      = "csi-hostpathplugin-0"
	hostpathSet      = "statefulset/csi-hostpathplugin"
	reasonRequired   = "FileSystemResizeRequired"
	reasonSuccessful = "FileSystemResizeSuccessful"
	// nodeResizePending: the key of the time a PVC's status first said the controller step
	// was done (allocatedResourceStatuses NodeResizePending, or the capacity reached).
	nodeResizePending = "NodeResizePending"
	// resizerQuiet: the counting window ends once the resizer has written nothing for this
	// long after the last PVC is done. Its events may trail its status writes (csi-resizer
	// gives an event a token only when no status write waits), and at the default 5 QPS a
	// backlog never leaves such a gap.
	resizerQuiet      = 10 * time.Second
	realNodeClaimsPer = 10 // PVCs per pod
)

func BenchmarkRealNode(b *testing.B) {
	if os.Getenv("BENCH_NODE") != "1" {
		b.Skip("BENCH_NODE=1 (make bench-node) runs it: it starts a one-node cluster")
	}
	var unset int
	n := intKnob(&unset, "BENCH_NODE_PVCS", 50, 3)
	c := cluster.Start(b, cluster.Options{})
	c.DeployHostpath(b)
	upstream, err := c.Kubectl(b, "get", hostpathSet, "-o",
		`jsonpath={.spec.template.spec.containers[?(@.name=="csi-resizer")].image}`)
	if err != nil || upstream == "" {
		b.Fatalf("the csi-resizer image of csi-driver-host-path's manifests: %q, %v", upstream, err)
	}
	for _, img := range []struct{ label, image string }{{primary, c.ProductImage}, {upstreamLabel, upstream}} {
		b.Run(img.label, func(b *testing.B) {
			b.ReportMetric(0, "ns/op")
			ns := "bench-node-" + img.label
			r := measureRealNode(b, c, ns, img.label, img.image, n)
			report.addRealNode(r)
			deleteNamespace(b, c, ns)
			b.ReportMetric(r.Successful.P50, "p50-s")
			b.ReportMetric(float64(r.Resizer.Total)/float64(n), "writes/resize")
		})
	}
}

// measureRealNode runs the resizer image in the driver's pod, makes N mounted PVCs in a
// namespace ns, resizes them at once and measures.
func measureRealNode(b *testing.B, c *cluster.Cluster, ns, label, image string, n int) RealNodeRun {
	ctx := context.Background()
	run := RealNodeRun{Binary: label, Image: image, PVCs: n, Pods: (n + realNodeClaimsPer - 1) / realNodeClaimsPer}
	setResizerImage(b, c, image)
	if label == primary {
		c.RequireProductImage(b, "default", "app.kubernetes.io/name=csi-hostpathplugin", "csi-resizer")
	}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	claims := makeMountedClaims(b, c, ns, n, run.Pods)
	warmUp(b, c, ns)

	pod, ctr := resizerContainer(b, c)
	run.ImageID = ctr.ImageID
	pid, err := c.ContainerPID(b, ctr.ContainerID)
	if err != nil {
		b.Fatal(err)
	}
	events := watchClaimEvents(b, c, ns)
	watchClaimStatus(b, c, ns, events, resource.MustParse("2Gi"))
	run.LoadAvg0 = loadAvg()
	if run.CgroupStart, err = cluster.ProcessCgroupUsage(pid); err != nil {
		b.Fatalf("cgroup of the resizer container (pid %d): %v", pid, err)
	}
	start := time.Now()
	patched := patchClaims(b, c, ns, claims, "2Gi")
	waitFor(b, 10*time.Minute, func() (bool, string) { return events.all(reasonSuccessful, claims) })
	waitFor(b, 2*time.Minute, func() (bool, string) { return claimsAt(c, ns, claims, "2Gi") })
	done := time.Now()
	sa := fmt.Sprintf("system:serviceaccount:%s:%s", pod.Namespace, pod.Spec.ServiceAccountName)
	end, lastWrite := waitResizerQuiet(b, c, sa, start)
	if run.CgroupEnd, err = cluster.ProcessCgroupUsage(pid); err != nil {
		b.Fatalf("cgroup of the resizer container (pid %d) at the end: %v (did it restart?)", pid, err)
	}
	run.LoadAvg1 = loadAvg()
	run.WindowSec = round(done.Sub(start).Seconds(), 2)
	run.QuietSec = round(end.Sub(start).Seconds(), 2)
	run.LastWriteSec = round(lastWrite.Sub(start).Seconds(), 2)
	if _, after := resizerContainer(b, c); after.ContainerID != ctr.ContainerID || after.RestartCount != ctr.RestartCount {
		b.Fatalf("the resizer container restarted during the window (%s, %d restarts → %s, %d)", ctr.ContainerID, ctr.RestartCount, after.ContainerID, after.RestartCount)
	}
	run.Controller = events.latency(nodeResizePending, claims, patched, start)
	run.Required = events.latency(reasonRequired, claims, patched, start)
	run.Successful = events.latency(reasonSuccessful, claims, patched, start)
	run.Resizer, run.Kubelet, run.Sidecars = countWrites(b, c, sa, start, end)
	run.CSICalls = driverCalls(b, c, start, end)
	return run
}

// setResizerImage sets the image of the csi-resizer container of the driver's StatefulSet
// (restarting the pod when it already has it, so that each image starts fresh) and waits until
// the new pod is ready with it.
func setResizerImage(b *testing.B, c *cluster.Cluster, image string) {
	current, err := c.Kubectl(b, "get", hostpathSet, "-o", `jsonpath={.spec.template.spec.containers[?(@.name=="csi-resizer")].image}`)
	if err != nil {
		b.Fatal(err)
	}
	args := []string{"set", "image", hostpathSet, "csi-resizer=" + image}
	if current == image {
		args = []string{"rollout", "restart", hostpathSet}
	}
	if _, err := c.Kubectl(b, args...); err != nil {
		b.Fatal(err)
	}
	if out, err := c.Kubectl(b, "rollout", "status", hostpathSet, "--timeout=180s"); err != nil {
		b.Fatalf("%v\n%s", err, out)
	}
	waitFor(b, 3*time.Minute, func() (bool, string) {
		p, err := c.Client.CoreV1().Pods("default").Get(context.Background(), hostpathPod, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, s := range p.Status.ContainerStatuses {
			if !s.Ready {
				return false, fmt.Sprintf("container %s of %s not ready", s.Name, hostpathPod)
			}
			if s.Name == "csi-resizer" && !strings.HasSuffix(s.Image, image) {
				return false, fmt.Sprintf("csi-resizer runs %s, want %s", s.Image, image)
			}
		}
		return len(p.Status.ContainerStatuses) > 0, "no container status yet"
	})
}

// resizerContainer returns the driver's pod and the status of its csi-resizer container.
func resizerContainer(b *testing.B, c *cluster.Cluster) (*corev1.Pod, corev1.ContainerStatus) {
	p, err := c.Client.CoreV1().Pods("default").Get(context.Background(), hostpathPod, metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == "csi-resizer" && s.ContainerID != "" {
			return p, s
		}
	}
	b.Fatalf("pod %s has no running csi-resizer container", hostpathPod)
	return nil, corev1.ContainerStatus{}
}

func claimName(i int) string { return fmt.Sprintf("data-%03d", i) }

// makeMountedClaims creates n 1Gi PVCs of csi-driver-host-path's StorageClass and pods pods
// that mount them (realNodeClaimsPer each), and waits until the pods run.
func makeMountedClaims(b *testing.B, c *cluster.Cluster, ns string, n, pods int) []string {
	ctx := context.Background()
	claims := make([]string, n)
	for i := range claims {
		claims[i] = claimName(i)
	}
	if err := parallel(n, 8, func(i int) error {
		_, err := c.Client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, hostpathClaim(claims[i], "1Gi"), metav1.CreateOptions{})
		return err
	}); err != nil {
		b.Fatal(err)
	}
	for p := 0; p < pods; p++ {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("mount-%d", p)},
			Spec: corev1.PodSpec{
				// Not 0: a pod deleted at once leaves its volumes mounted, its PVCs are
				// released and the driver deletes the volumes before the kubelet unpublishes
				// them, which then fails for ever (NotFound). Graceful, the pod object stays
				// until the kubelet has unmounted them.
				TerminationGracePeriodSeconds: ptr.To(int64(1)),
				Containers:                    []corev1.Container{{Name: "sleep", Image: "localhost/busybox:1.35.0", Command: []string{"sleep", "36000"}}},
			},
		}
		for i := p * realNodeClaimsPer; i < min(n, (p+1)*realNodeClaimsPer); i++ {
			pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: claims[i], VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claims[i]}}})
			pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: claims[i], MountPath: "/" + claims[i]})
		}
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	waitFor(b, 10*time.Minute, func() (bool, string) {
		list, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		running := 0
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == pods, fmt.Sprintf("%d of %d pods mounting the PVCs of %s running", running, pods, ns)
	})
	return claims
}

func hostpathClaim(name, size string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To("csi-hostpath-sc"),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
		},
	}
}

// warmUp resizes one unmounted PVC and waits until its PV has grown: the resizer has synced its
// caches and reached the driver before the window starts.
func warmUp(b *testing.B, c *cluster.Cluster, ns string) {
	ctx := context.Background()
	if _, err := c.Client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, hostpathClaim("warm-up", "1Gi"), metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	waitFor(b, 3*time.Minute, func() (bool, string) { return claimsBound(c, ns, []string{"warm-up"}) })
	patchClaims(b, c, ns, []string{"warm-up"}, "2Gi")
	waitFor(b, 3*time.Minute, func() (bool, string) {
		p, err := c.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "warm-up", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		pv, err := c.Client.CoreV1().PersistentVolumes().Get(ctx, p.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		capacity := pv.Spec.Capacity[corev1.ResourceStorage]
		return capacity.Cmp(resource.MustParse("2Gi")) == 0, fmt.Sprintf("warm-up PV %s at %s, want 2Gi (is the resizer working? kubectl logs %s -c csi-resizer)", pv.Name, capacity.String(), hostpathPod)
	})
}

func claimsBound(c *cluster.Cluster, ns string, claims []string) (bool, string) {
	list, err := c.Client.CoreV1().PersistentVolumeClaims(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return false, err.Error()
	}
	bound := 0
	for _, p := range list.Items {
		if slices.Contains(claims, p.Name) && p.Status.Phase == corev1.ClaimBound {
			bound++
		}
	}
	return bound == len(claims), fmt.Sprintf("%d of %d PVCs of %s bound", bound, len(claims), ns)
}

// claimsAt: every claim has capacity size and no resize in progress.
func claimsAt(c *cluster.Cluster, ns string, claims []string, size string) (bool, string) {
	list, err := c.Client.CoreV1().PersistentVolumeClaims(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return false, err.Error()
	}
	want, done, last := resource.MustParse(size), 0, ""
	for _, p := range list.Items {
		if !slices.Contains(claims, p.Name) {
			continue
		}
		capacity := p.Status.Capacity[corev1.ResourceStorage]
		if capacity.Cmp(want) == 0 && len(p.Status.AllocatedResourceStatuses) == 0 {
			done++
		} else {
			last = fmt.Sprintf("; %s: capacity %s, %v", p.Name, capacity.String(), p.Status.AllocatedResourceStatuses)
		}
	}
	return done == len(claims), fmt.Sprintf("%d of %d PVCs at %s with no resize in progress%s", done, len(claims), size, last)
}

// patchClaims raises the request of claims to size, all at once, and returns when each patch
// was sent.
func patchClaims(b *testing.B, c *cluster.Cluster, ns string, claims []string, size string) map[string]time.Time {
	body := []byte(`{"spec":{"resources":{"requests":{"storage":"` + size + `"}}}}`)
	var mu sync.Mutex
	sent := map[string]time.Time{}
	if err := parallel(len(claims), 16, func(i int) error {
		t := time.Now()
		_, err := c.Client.CoreV1().PersistentVolumeClaims(ns).Patch(context.Background(), claims[i], types.MergePatchType, body, metav1.PatchOptions{})
		mu.Lock()
		sent[claims[i]] = t
		mu.Unlock()
		return err
	}); err != nil {
		b.Fatal(err)
	}
	return sent
}

func deleteNamespace(b *testing.B, c *cluster.Cluster, ns string) {
	ctx := context.Background()
	pvs, err := c.Client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Error(err)
		return
	}
	var mine []string
	for _, pv := range pvs.Items {
		if pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.Namespace == ns {
			mine = append(mine, pv.Name)
		}
	}
	if err := c.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		b.Error(err)
		return
	}
	// The next image's run starts with nothing of this one left: no claim in its resizer's
	// caches, and no volume still mounted on the node (the kubelet would unpublish it from the
	// next run's driver pod, in the next run's window). The attach/detach controller deletes a
	// volume's VolumeAttachment only once the node has unmounted it.
	waitFor(b, 10*time.Minute, func() (bool, string) {
		_, err := c.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		left := 0
		for _, name := range mine {
			if _, err := c.Client.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{}); err == nil {
				left++
			}
		}
		attached := 0
		if vas, err := c.Client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{}); err == nil {
			for _, va := range vas.Items {
				if pv := va.Spec.Source.PersistentVolumeName; pv != nil && slices.Contains(mine, *pv) {
					attached++
				}
			}
		}
		return err != nil && left == 0 && attached == 0,
			fmt.Sprintf("namespace %s still there (%v), or %d of its %d PVs, or %d of their VolumeAttachments left", ns, err, left, len(mine), attached)
	})
}

// claimEvents records when the benchmark first saw each event reason on each PVC of a
// namespace (an informer on its PVC events; the time is when it arrived here).
type claimEvents struct {
	mu   sync.Mutex
	seen map[string]map[string]time.Time // reason -> PVC -> time
}

func watchClaimEvents(b *testing.B, c *cluster.Cluster, ns string) *claimEvents {
	e := &claimEvents{seen: map[string]map[string]time.Time{}}
	lw := cache.NewFilteredListWatchFromClient(c.Client.CoreV1().RESTClient(), "events", ns, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("involvedObject.kind", "PersistentVolumeClaim").String()
	})
	record := func(obj any) {
		ev, ok := obj.(*corev1.Event)
		if !ok {
			return
		}
		e.first(ev.Reason, ev.InvolvedObject.Name, time.Now())
	}
	runInformer(b, lw, &corev1.Event{}, record, "event")
	return e
}

// first records t for reason and claim unless a time is recorded already.
func (e *claimEvents) first(reason, claim string, t time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.seen[reason] == nil {
		e.seen[reason] = map[string]time.Time{}
	}
	if _, ok := e.seen[reason][claim]; !ok {
		e.seen[reason][claim] = t
	}
}

// runInformer runs an informer of lw calling record on each added or updated object until the
// benchmark ends, and returns once it has synced.
func runInformer(b *testing.B, lw cache.ListerWatcher, obj runtime.Object, record func(any), what string) {
	inf := cache.NewSharedIndexInformer(lw, obj, 0, cache.Indexers{})
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: record, UpdateFunc: func(_, o any) { record(o) }}); err != nil {
		b.Fatal(err)
	}
	stop := make(chan struct{})
	b.Cleanup(func() { close(stop) })
	go inf.Run(stop)
	if !cache.WaitForCacheSync(stop, inf.HasSynced) {
		b.Fatalf("the %s informer did not sync", what)
	}
}

// watchClaimStatus records in e, under nodeResizePending, when each PVC of ns first showed
// its controller step done: allocatedResourceStatuses NodeResizePending (the node step
// remains), or its capacity at size already.
func watchClaimStatus(b *testing.B, c *cluster.Cluster, ns string, e *claimEvents, size resource.Quantity) {
	lw := cache.NewListWatchFromClient(c.Client.CoreV1().RESTClient(), "persistentvolumeclaims", ns, fields.Everything())
	record := func(obj any) {
		pvc, ok := obj.(*corev1.PersistentVolumeClaim)
		if !ok {
			return
		}
		capacity := pvc.Status.Capacity[corev1.ResourceStorage]
		if pvc.Status.AllocatedResourceStatuses[corev1.ResourceStorage] != corev1.PersistentVolumeClaimNodeResizePending && capacity.Cmp(size) < 0 {
			return
		}
		e.first(nodeResizePending, pvc.Name, time.Now())
	}
	runInformer(b, lw, &corev1.PersistentVolumeClaim{}, record, "PVC")
}

func (e *claimEvents) all(reason string, claims []string) (bool, string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, c := range claims {
		if _, ok := e.seen[reason][c]; ok {
			n++
		}
	}
	return n == len(claims), fmt.Sprintf("%d of %d PVCs have a %s event", n, len(claims), reason)
}

// latency: per claim, its event's time minus its patch's; Last: the last event minus start.
func (e *claimEvents) latency(reason string, claims []string, patched map[string]time.Time, start time.Time) Latency {
	e.mu.Lock()
	defer e.mu.Unlock()
	var d []float64
	var last time.Time
	for _, c := range claims {
		t, ok := e.seen[reason][c]
		if !ok {
			continue
		}
		d = append(d, t.Sub(patched[c]).Seconds())
		if t.After(last) {
			last = t
		}
	}
	if len(d) == 0 {
		return Latency{P50: -1, P95: -1, Last: -1}
	}
	slices.Sort(d)
	q := func(p float64) float64 { return round(d[min(len(d)-1, int(p*float64(len(d))))], 2) }
	return Latency{P50: q(0.5), P95: q(0.95), Last: round(last.Sub(start).Seconds(), 2)}
}
