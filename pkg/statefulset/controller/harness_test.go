package controller

import (
	"context"
	"fmt"
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
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/fakeapi"
	ssmetrics "github.com/csi-resizer/csi-resizer/pkg/statefulset/metrics"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/status"
)

const (
	ns       = "ns"
	revision = "web-rev1"
	scName   = "expandable"
)

// harness runs the controller against the fake API server with real
// informers. Tests either call h.sync for deterministic steps, or h.run for
// the full loop with workers.
type harness struct {
	t        *testing.T
	ctx      context.Context
	api      *fakeapi.Server
	client   kubernetes.Interface
	factory  informers.SharedInformerFactory
	ctrl     *Controller
	recorder *record.FakeRecorder
	registry metrics.KubeRegistry
}

func newHarness(t *testing.T, objects ...runtime.Object) *harness {
	t.Helper()
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), testLogger(t)))
	h := &harness{t: t, ctx: ctx, api: fakeapi.New(t, objects...), recorder: record.NewFakeRecorder(100)}
	h.client = h.api.Clientset(t)
	h.factory = informers.NewSharedInformerFactory(h.client, 0)
	m := ssmetrics.New()
	h.registry = metrics.NewKubeRegistry()
	if err := m.Register(h.registry.Register); err != nil {
		t.Fatal(err)
	}
	ctrl, err := New(ctx, h.client, h.factory, h.recorder, clock.RealClock{},
		Options{Metrics: m, RetryBaseDelay: time.Millisecond, RetryMaxDelay: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	h.ctrl = ctrl
	h.factory.Start(ctx.Done())
	t.Cleanup(func() {
		cancel()
		h.ctrl.queue.ShutDown()
		h.factory.Shutdown() // waits for the informers to stop
	})
	for typ, ok := range h.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("cache for %v did not sync", typ)
		}
	}
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

// run starts the workers; they stop at the end of the test.
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

func (h *harness) sync() error {
	h.t.Helper()
	return h.ctrl.Sync(h.ctx, ns+"/web")
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

// cached waits until the informer caches show the StatefulSet, PVCs and
// pods as the API server has them, so that a following sync sees them.
func (h *harness) cached() {
	h.t.Helper()
	h.eventually("informer caches to catch up", func() bool {
		for _, pair := range []struct {
			resource string
			lister   func(name string) (metav1.Object, error)
		}{
			{"statefulsets", func(n string) (metav1.Object, error) { return h.ctrl.stsLister.StatefulSets(ns).Get(n) }},
			{"persistentvolumeclaims", func(n string) (metav1.Object, error) {
				return h.ctrl.pvcLister.PersistentVolumeClaims(ns).Get(n)
			}},
			{"pods", func(n string) (metav1.Object, error) { return h.ctrl.podLister.Pods(ns).Get(n) }},
		} {
			list, err := h.api.Tracker.List(gvr(pair.resource), gvk(pair.resource), ns)
			if err != nil {
				return false
			}
			items, _ := metaList(list)
			for _, item := range items {
				cached, err := pair.lister(item.GetName())
				if err != nil || cached.GetResourceVersion() != item.GetResourceVersion() {
					return false
				}
			}
		}
		return true
	})
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

// updatePVCStatus plays the resizer: it changes a PVC's status through the
// API (tracker), which informers then deliver.
func (h *harness) updatePVCStatus(name string, mutate func(*corev1.PersistentVolumeClaimStatus)) {
	h.t.Helper()
	pvc := h.pvc(name)
	mutate(&pvc.Status)
	if err := h.api.Tracker.Update(gvr("persistentvolumeclaims"), pvc, ns); err != nil {
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

var resources = map[string]schema.GroupVersionKind{
	"statefulsets":           appsv1.SchemeGroupVersion.WithKind("StatefulSet"),
	"persistentvolumeclaims": corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaim"),
	"pods":                   corev1.SchemeGroupVersion.WithKind("Pod"),
}

func gvk(resource string) schema.GroupVersionKind { return resources[resource] }

func gvr(resource string) schema.GroupVersionResource {
	return resources[resource].GroupVersion().WithResource(resource)
}

func metaList(list runtime.Object) ([]metav1.Object, error) {
	objs, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	out := make([]metav1.Object, 0, len(objs))
	for _, o := range objs {
		m, err := meta.Accessor(o)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}
