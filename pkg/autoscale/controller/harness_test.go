package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/metrics"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/csi-resizer/csi-resizer/pkg/autoscale/kubeletstats"
	asmetrics "github.com/csi-resizer/csi-resizer/pkg/autoscale/metrics"
	"github.com/csi-resizer/csi-resizer/pkg/autoscale/policy"
)

const (
	ns        = "ns"
	className = "auto"
	gi        = int64(1) << 30
)

var now = time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)

// fakePoller answers each node with a prepared result and remembers which nodes were asked.
type fakePoller struct {
	mu      sync.Mutex
	results map[string]kubeletstats.NodeResult
	asked   [][]string
}

func (f *fakePoller) Poll(_ context.Context, nodes []*corev1.Node) []kubeletstats.NodeResult {
	f.mu.Lock()
	defer f.mu.Unlock()
	var names []string
	var out []kubeletstats.NodeResult
	for _, n := range nodes {
		names = append(names, n.Name)
		r := f.results[n.Name]
		r.Node, r.Duration = n.Name, time.Millisecond
		out = append(out, r)
	}
	f.asked = append(f.asked, names)
	return out
}

type harness struct {
	t        *testing.T
	ctx      context.Context
	client   *fake.Clientset
	recorder *record.FakeRecorder
	clock    *testingclock.FakeClock
	poller   *fakePoller
	registry metrics.KubeRegistry
	ctrl     *Controller
}

func newHarness(t *testing.T, opts Options, poller *fakePoller, objects ...runtime.Object) *harness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{t: t, ctx: ctx, client: fake.NewClientset(objects...), recorder: record.NewFakeRecorder(100),
		clock: testingclock.NewFakeClock(now), poller: poller, registry: metrics.NewKubeRegistry()}
	factory := informers.NewSharedInformerFactory(h.client, 0)
	m := asmetrics.New()
	if err := m.Register(h.registry.Register); err != nil {
		t.Fatal(err)
	}
	if opts.Defaults == (policy.Defaults{}) {
		opts.Defaults = policy.NewDefaults()
	}
	opts.Poller, opts.Metrics = poller, m
	c, err := New(ctx, h.client, factory, h.recorder, h.clock, opts)
	if err != nil {
		t.Fatal(err)
	}
	h.ctrl = c
	h.client.PrependReactor("patch", "persistentvolumeclaims", h.guardedPatch)
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	// The handlers have seen the initial lists too: what a test queues after this is its own.
	cache.WaitForCacheSync(ctx.Done(), c.synced...)
	t.Cleanup(func() { cancel(); c.queue.ShutDown(); factory.Shutdown() })
	return h
}

// events drains the events recorded so far.
func (h *harness) events() []string {
	var out []string
	for {
		select {
		case e := <-h.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// waitForCache waits until the informer cache shows the PVC as the API has it.
func (h *harness) waitForCache(name string) {
	h.t.Helper()
	want := h.pvc(name)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		// The fake keeps the resourceVersion on updates other than guardedPatch's: compare what
		// the controller reads.
		pvc, err := h.ctrl.pvcLister.PersistentVolumeClaims(ns).Get(name)
		if err == nil && pvc.ResourceVersion == want.ResourceVersion && equality.Semantic.DeepEqual(pvc.Spec, want.Spec) &&
			equality.Semantic.DeepEqual(pvc.Status, want.Status) && equality.Semantic.DeepEqual(pvc.Annotations, want.Annotations) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	h.t.Fatalf("the cache did not show PVC %s as the API has it", name)
}

func (h *harness) pvc(name string) *corev1.PersistentVolumeClaim {
	h.t.Helper()
	pvc, err := h.client.CoreV1().PersistentVolumeClaims(ns).Get(h.ctx, name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return pvc
}

func storageClass(annotations map[string]string) *storagev1.StorageClass {
	return &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: className, Annotations: annotations},
		Provisioner: "hostpath.csi.k8s.io", AllowVolumeExpansion: ptr.To(true)}
}

// optedIn is an opted-in class with a 20Gi limit.
func optedIn() *storagev1.StorageClass {
	return storageClass(map[string]string{policy.AnnAutoscale: "true", policy.AnnLimit: "20Gi"})
}

func claim(name, size string, annotations map[string]string) *corev1.PersistentVolumeClaim {
	q := resource.MustParse(size)
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations, ResourceVersion: "1"},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To(className), VolumeName: "pv-" + name,
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: q}}},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, Capacity: corev1.ResourceList{corev1.ResourceStorage: q}},
	}
}

func pod(name, node string, claims ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	for i, c := range claims {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "v" + string(rune('0'+i)),
			VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c}}})
	}
	return p
}

// statefulSetPod is pod name of StatefulSet sts, as its controller makes it.
func statefulSetPod(name, sts, node string, claims ...string) *corev1.Pod {
	p := pod(name, node, claims...)
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: sts, UID: types.UID("uid-" + sts), Controller: ptr.To(true)}}
	return p
}

func node(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// usage is the kubelet's report of a volume of capacity bytes with free bytes available.
func usage(capacity, free int64) kubeletstats.VolumeStats {
	return kubeletstats.VolumeStats{CapacityBytes: uint64(capacity), AvailableBytes: uint64(free), UsedBytes: uint64(capacity - free),
		HasInodes: true, Inodes: 1000, InodesFree: 900, InodesUsed: 100, Time: now.Add(-time.Minute)}
}

// report is a poller whose node n1 reports the given volumes ("name" -> stats).
func report(volumes map[string]kubeletstats.VolumeStats) *fakePoller {
	v := map[string]kubeletstats.VolumeStats{}
	for name, st := range volumes {
		v[ns+"/"+name] = st
	}
	return &fakePoller{results: map[string]kubeletstats.NodeResult{"n1": {Volumes: v}}}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// guardedPatch makes the fake apiserver do what the real one does with a merge patch that
// carries a resourceVersion: refuse it with a conflict when the object changed, and give the
// patched object a new resourceVersion.
func (h *harness) guardedPatch(action k8stesting.Action) (bool, runtime.Object, error) {
	p := action.(k8stesting.PatchAction)
	gvr := corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims")
	obj, err := h.client.Tracker().Get(gvr, p.GetNamespace(), p.GetName())
	if err != nil {
		return true, nil, err
	}
	current := obj.(*corev1.PersistentVolumeClaim)
	var meta struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(p.GetPatch(), &meta); err != nil {
		return true, nil, err
	}
	if rv := meta.Metadata.ResourceVersion; rv != "" && rv != current.ResourceVersion {
		return true, nil, apierrors.NewConflict(gvr.GroupResource(), p.GetName(), fmt.Errorf("resourceVersion %s is not %s", rv, current.ResourceVersion))
	}
	old, _ := json.Marshal(current)
	merged, err := jsonpatch.MergePatch(old, p.GetPatch())
	if err != nil {
		return true, nil, err
	}
	updated := &corev1.PersistentVolumeClaim{}
	if err := json.Unmarshal(merged, updated); err != nil {
		return true, nil, err
	}
	n, _ := strconv.Atoi(current.ResourceVersion)
	updated.ResourceVersion = strconv.Itoa(n + 1)
	return true, updated, h.client.Tracker().Update(gvr, updated, p.GetNamespace())
}
