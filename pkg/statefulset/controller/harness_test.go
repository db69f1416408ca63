package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	ssmetrics "github.com/csi-resizer/csi-resizer/pkg/statefulset/metrics"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/status"
)

const (
	ns       = "ns"
	revision = "web-rev1"
	scName   = "expandable"
	// recordNS is statefulset-resizer's own namespace, where its re-create
	// records live.
	recordNS = "ssr-system"
)

// harness runs the controller against client-go's fake clientset. Tests
// either drive sync directly, Kubernetes sample-controller style (the
// informers are not started: catchUp copies what the fake API holds into
// their caches, so each step sees exactly the state the test made), or start
// the full loop with run (informers and workers, fed by the fake's watches).
type harness struct {
	t        *testing.T
	ctx      context.Context
	client   *fake.Clientset
	factory  informers.SharedInformerFactory
	ctrl     *Controller
	recorder *record.FakeRecorder
	registry metrics.KubeRegistry
}

func newHarness(t *testing.T, objects ...runtime.Object) *harness {
	t.Helper()
	return newHarnessWith(t, Options{}, objects...)
}

// newHarnessWith is newHarness with options (Metrics and the retry delays
// are the harness's own).
func newHarnessWith(t *testing.T, opts Options, objects ...runtime.Object) *harness {
	t.Helper()
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), testLogger(t)))
	h := &harness{t: t, ctx: ctx, client: fake.NewClientset(objects...), recorder: record.NewFakeRecorder(100)}
	h.factory = informers.NewSharedInformerFactory(h.client, 0)
	m := ssmetrics.New()
	h.registry = metrics.NewKubeRegistry()
	if err := m.Register(h.registry.Register); err != nil {
		t.Fatal(err)
	}
	opts.Metrics, opts.RetryBaseDelay, opts.RetryMaxDelay = m, time.Millisecond, 10*time.Millisecond
	if opts.RecordNamespace == "" {
		opts.RecordNamespace = recordNS
	}
	ctrl, err := New(ctx, h.client, h.factory, h.recorder, clock.RealClock{}, opts)
	if err != nil {
		t.Fatal(err)
	}
	h.ctrl = ctrl
	t.Cleanup(func() {
		cancel()
		h.ctrl.queue.ShutDown()
		h.factory.Shutdown() // waits for started informers to stop
	})
	h.catchUp()
	return h
}

// testLogger sends the controller's logs to t.Log until the test ends
// (goroutines that are still winding down must not log into a finished test).
func testLogger(t *testing.T) klog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(func() { w.done.Store(true) })
	return textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(w), textlogger.Verbosity(4)))
}

type testWriter struct {
	t    *testing.T
	done atomic.Bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	if !w.done.Load() {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

// run starts the informers and workers; they stop at the end of the test.
// After run, the informers own their caches: do not call catchUp.
func (h *harness) run() {
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(h.ctx)
	go func() { done <- h.ctrl.Run(ctx, 2) }()
	h.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			h.t.Errorf("Run: %v", err)
		}
	})
}

// sync reconciles the StatefulSet once, from the caches as catchUp left them.
func (h *harness) sync() error {
	h.t.Helper()
	return h.ctrl.sync(h.ctx, ns+"/web")
}

// catchUp replaces the (not started) informers' caches with what the fake
// API holds now: the caches catch up with every write so far.
func (h *harness) catchUp() {
	h.t.Helper()
	lists := []struct {
		informer cache.SharedIndexInformer
		list     func() (runtime.Object, error)
	}{
		{h.factory.Apps().V1().StatefulSets().Informer(), func() (runtime.Object, error) {
			return h.client.AppsV1().StatefulSets("").List(h.ctx, metav1.ListOptions{})
		}},
		{h.factory.Core().V1().Pods().Informer(), func() (runtime.Object, error) {
			return h.client.CoreV1().Pods("").List(h.ctx, metav1.ListOptions{})
		}},
		{h.factory.Core().V1().PersistentVolumeClaims().Informer(), func() (runtime.Object, error) {
			return h.client.CoreV1().PersistentVolumeClaims("").List(h.ctx, metav1.ListOptions{})
		}},
		{h.factory.Storage().V1().StorageClasses().Informer(), func() (runtime.Object, error) {
			return h.client.StorageV1().StorageClasses().List(h.ctx, metav1.ListOptions{})
		}},
		{h.factory.Core().V1().Namespaces().Informer(), func() (runtime.Object, error) {
			return h.client.CoreV1().Namespaces().List(h.ctx, metav1.ListOptions{})
		}},
	}
	for _, l := range lists {
		list, err := l.list()
		if err != nil {
			h.t.Fatal(err)
		}
		objs, err := meta.ExtractList(list)
		if err != nil {
			h.t.Fatal(err)
		}
		items := make([]any, len(objs))
		for i := range objs {
			items[i] = objs[i]
		}
		if err := l.informer.GetIndexer().Replace(items, ""); err != nil {
			h.t.Fatal(err)
		}
	}
}

// eventually polls cond until it holds or 20s pass (generous: the machine is
// shared and -race is slow).
func (h *harness) eventually(what string, cond func() bool) {
	h.t.Helper()
	err := wait.PollUntilContextTimeout(h.ctx, 2*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		h.t.Fatalf("timed out waiting for %s", what)
	}
}

// resyncChangesNothing syncs again once the caches show every write so far:
// no event is repeated and the unchanged status is not rewritten.
func (h *harness) resyncChangesNothing() {
	h.t.Helper()
	h.catchUp()
	writes := len(h.actions("patch", "statefulsets"))
	if err := h.sync(); err != nil {
		h.t.Fatal(err)
	}
	if ev := h.events(); len(ev) != 0 {
		h.t.Errorf("repeated events %q", ev)
	}
	if n := len(h.actions("patch", "statefulsets")); n != writes {
		h.t.Errorf("status rewritten although unchanged (%d -> %d writes)", writes, n)
	}
}

// wantMetrics checks every series of a metric family: want maps its labels,
// rendered as name="value" pairs in name order, to its value.
func (h *harness) wantMetrics(family string, want map[string]float64) {
	h.t.Helper()
	if got := h.gather(family); fmt.Sprint(got) != fmt.Sprint(want) {
		h.t.Errorf("%s: got %v, want %v", family, got, want)
	}
}

// series returns the label sets of a metric family's series, rendered as in
// wantMetrics, sorted and joined by ";" ("" for none): for values, such as
// timestamps, that a test cannot predict.
func (h *harness) series(family string) string {
	h.t.Helper()
	return strings.Join(slices.Sorted(maps.Keys(h.gather(family))), ";")
}

// gather maps each series of a metric family, by its labels rendered as
// name="value" pairs in name order, to its value.
func (h *harness) gather(family string) map[string]float64 {
	h.t.Helper()
	families, err := h.registry.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		if f.GetName() != family {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			got[strings.Join(labels, ",")] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	return got
}

// actions returns the requests the fake API received with the given verb and
// resource.
func (h *harness) actions(verb, resource string) []clienttesting.Action {
	var out []clienttesting.Action
	for _, a := range h.client.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == resource {
			out = append(out, a)
		}
	}
	return out
}

func (h *harness) pvc(name string) *corev1.PersistentVolumeClaim {
	h.t.Helper()
	pvc, err := h.client.CoreV1().PersistentVolumeClaims(ns).Get(h.ctx, name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return pvc
}

func (h *harness) statefulSet() *appsv1.StatefulSet {
	h.t.Helper()
	sts, err := h.client.AppsV1().StatefulSets(ns).Get(h.ctx, "web", metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return sts
}

func (h *harness) status() *status.VolumeClaimTemplates {
	h.t.Helper()
	st, err := status.FromStatefulSet(h.statefulSet())
	if err != nil {
		h.t.Fatal(err)
	}
	return st
}

// newVersion plays the apiserver for a change the test makes as another
// actor: client-go's fake stores objects as given, so the test gives the
// changed object a new resourceVersion (the controller's informer handlers
// tell resyncs from changes by it).
func newVersion(obj metav1.Object) {
	rv, _ := strconv.Atoi(obj.GetResourceVersion())
	obj.SetResourceVersion(strconv.Itoa(rv + 1))
}

// updatePVCStatus plays the resizer: it changes a PVC's status through the
// API, which informers (or catchUp) then deliver.
func (h *harness) updatePVCStatus(name string, mutate func(*corev1.PersistentVolumeClaimStatus)) {
	h.t.Helper()
	pvc := h.pvc(name)
	mutate(&pvc.Status)
	newVersion(pvc)
	if _, err := h.client.CoreV1().PersistentVolumeClaims(ns).UpdateStatus(h.ctx, pvc, metav1.UpdateOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

// updatePod plays the StatefulSet controller or the kubelet on a pod.
func (h *harness) updatePod(p *corev1.Pod) {
	h.t.Helper()
	current, err := h.client.CoreV1().Pods(ns).Get(h.ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	p.ResourceVersion = current.ResourceVersion
	newVersion(p)
	if _, err := h.client.CoreV1().Pods(ns).Update(h.ctx, p, metav1.UpdateOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

// finishResize plays the resizer completing an expansion.
func (h *harness) finishResize(name string) {
	h.updatePVCStatus(name, func(s *corev1.PersistentVolumeClaimStatus) {
		s.Capacity[corev1.ResourceStorage] = h.pvc(name).Spec.Resources.Requests.Storage().DeepCopy()
		s.AllocatedResourceStatuses, s.Conditions = nil, nil
	})
}

// events drains the fake recorder.
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

func storageOf(pvc *corev1.PersistentVolumeClaim) string {
	return pvc.Spec.Resources.Requests.Storage().String()
}

// --- objects ---

func statefulSet(uid string, replicas int32, policy appsv1.PodManagementPolicyType, size string) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", UID: typesUID(uid), Generation: 1},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To(replicas),
			PodManagementPolicy: policy,
			Selector:            &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{
					StorageClassName: ptr.To(scName),
					Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
				},
			}},
		},
		Status: appsv1.StatefulSetStatus{ObservedGeneration: 1, UpdateRevision: revision, CurrentRevision: revision, Replicas: replicas},
	}
}

func pod(stsUID string, ordinal int) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("web-%d", ordinal),
			Labels: map[string]string{"app": "web", appsv1.StatefulSetRevisionLabel: revision}},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if stsUID != "" {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "web",
			UID: typesUID(stsUID), Controller: ptr.To(true)}}
	}
	return p
}

func pvc(ordinal int, size string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("data-web-%d", ordinal),
			Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"keep": "me"}},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(scName),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
		},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound,
			Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
	}
}

func storageClass(name string, allowExpansion bool) *storagev1.StorageClass {
	return &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: "csi.example.com",
		AllowVolumeExpansion: ptr.To(allowExpansion)}
}

// cluster returns a StatefulSet of replicas pods with template size
// stsSize whose PVCs are at pvcSize.
func cluster(replicas int, policy appsv1.PodManagementPolicyType, stsSize, pvcSize string) []runtime.Object {
	objs := []runtime.Object{statefulSet("uid-1", int32(replicas), policy, stsSize), storageClass(scName, true)}
	for i := 0; i < replicas; i++ {
		objs = append(objs, pod("uid-1", i), pvc(i, pvcSize))
	}
	return objs
}

func hasEvent(events []string, substrings ...string) bool {
	for _, e := range events {
		all := true
		for _, s := range substrings {
			all = all && strings.Contains(e, s)
		}
		if all {
			return true
		}
	}
	return false
}

func typesUID(s string) types.UID { return types.UID(s) }
