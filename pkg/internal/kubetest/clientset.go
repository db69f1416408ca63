// Package kubetest is the API side of the controller's unit tests: a fake clientset with
// apiserver-like resourceVersions, a recording event recorder and metric readers.
//
// client-go's generated fake clientset (k8s.io/client-go/kubernetes/fake) is not vendored in
// this module, so Clientset is a small stand-in built from the pieces that are vendored:
// client-go/testing (the object tracker and the action log) and client-go/gentype (the generic
// fake typed clients). It serves the core/v1 resources the sidecar uses: PVCs, PVs, Pods and
// Secrets. Any other API group panics, which is what a test wants.
//
// Unlike the generated fake, it behaves like an apiserver where the resizer depends on it:
// every write gets a new resourceVersion, a merge patch that carries metadata.resourceVersion
// is rejected with a conflict when the object has moved on, and a patch of the status
// subresource changes only the status (a patch of the main resource never changes it).
package kubetest

import (
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	corev1apply "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/gentype"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	clienttesting "k8s.io/client-go/testing"
)

// Resources served by the fake.
var (
	PVCs    = v1.SchemeGroupVersion.WithResource("persistentvolumeclaims")
	PVs     = v1.SchemeGroupVersion.WithResource("persistentvolumes")
	Pods    = v1.SchemeGroupVersion.WithResource("pods")
	Secrets = v1.SchemeGroupVersion.WithResource("secrets")
)

// Clientset is a fake kubernetes.Interface for the core/v1 resources the sidecar uses.
type Clientset struct {
	kubernetes.Interface // nil: only CoreV1 is served
	clienttesting.Fake

	tracker clienttesting.ObjectTracker
	// mu serialises writes, so a resourceVersion check and the write it guards are atomic.
	mu sync.Mutex
	rv int64
	// watchDelay delays every watch event, like the latency of a loaded apiserver.
	watchDelay time.Duration
	extra      []reactor
}

// Option configures a Clientset.
type Option func(*Clientset)

// WithWatchDelay delivers every watch event d after the write that caused it (in order), so
// that a test can see what the controller does when its informers lag behind its own writes,
// as they do against a busy apiserver.
func WithWatchDelay(d time.Duration) Option { return func(c *Clientset) { c.watchDelay = d } }

// WithReactor installs a reactor in front of the fake's own, for injecting faults. Reactors
// can only be added before the clientset is used: client-go's Fake does not lock its reactor
// chain against concurrent calls.
func WithReactor(verb, resource string, fn clienttesting.ReactionFunc) Option {
	return func(c *Clientset) { c.extra = append(c.extra, reactor{verb, resource, fn}) }
}

type reactor struct {
	verb, resource string
	fn             clienttesting.ReactionFunc
}

// NewClientset returns a fake holding objects (each given a resourceVersion).
func NewClientset(objects []runtime.Object, opts ...Option) *Clientset {
	c := &Clientset{tracker: clienttesting.NewObjectTracker(scheme.Scheme, scheme.Codecs.UniversalDecoder())}
	for _, o := range opts {
		o(c)
	}
	for _, obj := range objects {
		obj = obj.DeepCopyObject()
		c.setVersion(obj)
		if err := c.tracker.Add(obj); err != nil {
			panic(fmt.Sprintf("adding %T: %v", obj, err))
		}
	}
	for _, r := range c.extra {
		c.AddReactor(r.verb, r.resource, r.fn)
	}
	c.AddReactor("patch", "*", c.patch)
	c.AddReactor("update", "*", c.update)
	c.AddReactor("create", "*", c.create)
	c.AddReactor("*", "*", clienttesting.ObjectReaction(c.tracker))
	c.AddWatchReactor("*", func(action clienttesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if w, ok := action.(clienttesting.WatchActionImpl); ok {
			opts = w.ListOptions
		}
		w, err := c.tracker.Watch(action.GetResource(), action.GetNamespace(), opts)
		if err != nil || c.watchDelay <= 0 {
			return true, w, err
		}
		return true, newDelayedWatch(w, c.watchDelay), nil
	})
	return c
}

// IsWatchListSemanticsUnSupported tells reflectors to list and then watch: the object tracker
// cannot stream an initial list.
func (c *Clientset) IsWatchListSemanticsUnSupported() bool { return true }

// Tracker gives tests direct access to the stored objects.
func (c *Clientset) Tracker() clienttesting.ObjectTracker { return c.tracker }

// CoreV1 implements kubernetes.Interface.
func (c *Clientset) CoreV1() typedcorev1.CoreV1Interface { return &coreV1{fake: &c.Fake} }

// Get returns a stored object, or fails the caller with the error.
func (c *Clientset) Get(gvr schema.GroupVersionResource, namespace, name string) (runtime.Object, error) {
	return c.tracker.Get(gvr, namespace, name)
}

// Mutate changes a stored object as another API client would (a user, the kubelet): the
// change gets a new resourceVersion and is sent to watchers, and it is not recorded in
// Actions, which therefore lists only what the code under test did.
func (c *Clientset) Mutate(gvr schema.GroupVersionResource, namespace, name string, change func(runtime.Object)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	obj, err := c.tracker.Get(gvr, namespace, name)
	if err != nil {
		return err
	}
	change(obj)
	c.setVersion(obj)
	return c.tracker.Update(gvr, obj, namespace)
}

// Delete removes a stored object as another API client would (not recorded in Actions).
func (c *Clientset) Delete(gvr schema.GroupVersionResource, namespace, name string) error {
	return c.tracker.Delete(gvr, namespace, name)
}

// Add stores a new object as another API client would (not recorded in Actions).
func (c *Clientset) Add(obj runtime.Object) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	obj = obj.DeepCopyObject()
	c.setVersion(obj)
	return c.tracker.Add(obj)
}

// Writes returns the write actions (create, update, patch, delete) recorded so far.
func (c *Clientset) Writes() []clienttesting.Action {
	var out []clienttesting.Action
	for _, a := range c.Actions() {
		switch a.GetVerb() {
		case "create", "update", "patch", "delete", "deletecollection":
			out = append(out, a)
		}
	}
	return out
}

// Verbs counts the recorded actions by "verb resource[/subresource]", e.g. "patch
// persistentvolumeclaims/status" or "list persistentvolumes".
func (c *Clientset) Verbs() map[string]int {
	out := map[string]int{}
	for _, a := range c.Actions() {
		k := a.GetVerb() + " " + a.GetResource().Resource
		if s := a.GetSubresource(); s != "" {
			k += "/" + s
		}
		out[k]++
	}
	return out
}

func (c *Clientset) setVersion(obj runtime.Object) {
	c.rv++
	m, err := meta.Accessor(obj)
	if err != nil {
		panic(err)
	}
	m.SetResourceVersion(strconv.FormatInt(c.rv, 10))
}

// patch applies a JSON merge patch the way the apiserver does for the resizer's writes.
func (c *Clientset) patch(action clienttesting.Action) (bool, runtime.Object, error) {
	pa, ok := action.(clienttesting.PatchActionImpl)
	if !ok {
		return false, nil, nil
	}
	if pa.GetPatchType() != types.MergePatchType {
		return true, nil, apierrors.NewBadRequest(fmt.Sprintf("the fake clientset supports merge patches only, got %s", pa.GetPatchType()))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	gvr, ns := pa.GetResource(), pa.GetNamespace()
	obj, err := c.tracker.Get(gvr, ns, pa.GetName())
	if err != nil {
		return true, nil, err
	}
	var guard struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(pa.GetPatch(), &guard); err != nil {
		return true, nil, apierrors.NewBadRequest(err.Error())
	}
	m, _ := meta.Accessor(obj)
	if rv := guard.Metadata.ResourceVersion; rv != "" && rv != m.GetResourceVersion() {
		return true, nil, conflict(gvr, pa.GetName(), rv, m.GetResourceVersion())
	}
	old, err := json.Marshal(obj)
	if err != nil {
		return true, nil, err
	}
	patched, err := jsonpatch.MergePatch(old, pa.GetPatch())
	if err != nil {
		return true, nil, apierrors.NewBadRequest(err.Error())
	}
	patched, err = keepStatusRule(old, patched, pa.GetSubresource())
	if err != nil {
		return true, nil, err
	}
	out, err := decodeLike(obj, patched)
	if err != nil {
		return true, nil, apierrors.NewBadRequest(err.Error())
	}
	c.setVersion(out)
	if err := c.tracker.Update(gvr, out, ns); err != nil {
		return true, nil, err
	}
	return true, out.DeepCopyObject(), nil
}

func (c *Clientset) update(action clienttesting.Action) (bool, runtime.Object, error) {
	ua, ok := action.(clienttesting.UpdateActionImpl)
	if !ok {
		return false, nil, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	gvr, ns := ua.GetResource(), ua.GetNamespace()
	newObj := ua.GetObject().DeepCopyObject()
	nm, _ := meta.Accessor(newObj)
	cur, err := c.tracker.Get(gvr, ns, nm.GetName())
	if err != nil {
		return true, nil, err
	}
	cm, _ := meta.Accessor(cur)
	if rv := nm.GetResourceVersion(); rv != "" && rv != cm.GetResourceVersion() {
		return true, nil, conflict(gvr, nm.GetName(), rv, cm.GetResourceVersion())
	}
	oldJSON, _ := json.Marshal(cur)
	newJSON, _ := json.Marshal(newObj)
	merged, err := keepStatusRule(oldJSON, newJSON, ua.GetSubresource())
	if err != nil {
		return true, nil, err
	}
	out, err := decodeLike(cur, merged)
	if err != nil {
		return true, nil, err
	}
	c.setVersion(out)
	if err := c.tracker.Update(gvr, out, ns); err != nil {
		return true, nil, err
	}
	return true, out.DeepCopyObject(), nil
}

func (c *Clientset) create(action clienttesting.Action) (bool, runtime.Object, error) {
	ca, ok := action.(clienttesting.CreateActionImpl)
	if !ok || ca.GetSubresource() != "" {
		return false, nil, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	obj := ca.GetObject().DeepCopyObject()
	c.setVersion(obj)
	if err := c.tracker.Create(ca.GetResource(), obj, ca.GetNamespace()); err != nil {
		return true, nil, err
	}
	return true, obj.DeepCopyObject(), nil
}

// keepStatusRule is the apiserver's split between an object and its status subresource: a
// write to "status" changes only .status, a write to the object never changes .status.
func keepStatusRule(oldJSON, newJSON []byte, subresource string) ([]byte, error) {
	var oldMap, newMap map[string]any
	if err := json.Unmarshal(oldJSON, &oldMap); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(newJSON, &newMap); err != nil {
		return nil, err
	}
	switch subresource {
	case "status":
		st, ok := newMap["status"]
		out := oldMap
		if ok {
			out["status"] = st
		} else {
			delete(out, "status")
		}
		return json.Marshal(out)
	case "":
		if st, ok := oldMap["status"]; ok {
			newMap["status"] = st
		} else {
			delete(newMap, "status")
		}
		return json.Marshal(newMap)
	default:
		return nil, apierrors.NewBadRequest("the fake clientset does not serve subresource " + subresource)
	}
}

func decodeLike(like runtime.Object, data []byte) (runtime.Object, error) {
	out := like.DeepCopyObject()
	// Reset before decoding: a merge patch can remove fields.
	switch o := out.(type) {
	case *v1.PersistentVolumeClaim:
		*o = v1.PersistentVolumeClaim{}
	case *v1.PersistentVolume:
		*o = v1.PersistentVolume{}
	case *v1.Pod:
		*o = v1.Pod{}
	case *v1.Secret:
		*o = v1.Secret{}
	default:
		return nil, fmt.Errorf("the fake clientset does not serve %T", like)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return nil, err
	}
	return out, nil
}

func conflict(gvr schema.GroupVersionResource, name, want, have string) error {
	return apierrors.NewConflict(gvr.GroupResource(), name,
		fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again (resourceVersion %s, now %s)", want, have))
}

// coreV1 serves the core/v1 resources used by the sidecar.
type coreV1 struct {
	typedcorev1.CoreV1Interface // nil: other resources are not served
	fake                        *clienttesting.Fake
}

func (c *coreV1) RESTClient() rest.Interface { return nil }

func (c *coreV1) PersistentVolumeClaims(ns string) typedcorev1.PersistentVolumeClaimInterface {
	return &pvcClient{FakeClientWithListAndApply: gentype.NewFakeClientWithListAndApply[*v1.PersistentVolumeClaim, *v1.PersistentVolumeClaimList, *corev1apply.PersistentVolumeClaimApplyConfiguration](
		c.fake, ns, PVCs, v1.SchemeGroupVersion.WithKind("PersistentVolumeClaim"),
		func() *v1.PersistentVolumeClaim { return &v1.PersistentVolumeClaim{} },
		func() *v1.PersistentVolumeClaimList { return &v1.PersistentVolumeClaimList{} },
		func(dst, src *v1.PersistentVolumeClaimList) { dst.ListMeta = src.ListMeta },
		func(l *v1.PersistentVolumeClaimList) []*v1.PersistentVolumeClaim {
			return gentype.ToPointerSlice(l.Items)
		},
		func(l *v1.PersistentVolumeClaimList, items []*v1.PersistentVolumeClaim) {
			l.Items = gentype.FromPointerSlice(items)
		})}
}

func (c *coreV1) PersistentVolumes() typedcorev1.PersistentVolumeInterface {
	return &pvClient{FakeClientWithListAndApply: gentype.NewFakeClientWithListAndApply[*v1.PersistentVolume, *v1.PersistentVolumeList, *corev1apply.PersistentVolumeApplyConfiguration](
		c.fake, "", PVs, v1.SchemeGroupVersion.WithKind("PersistentVolume"),
		func() *v1.PersistentVolume { return &v1.PersistentVolume{} },
		func() *v1.PersistentVolumeList { return &v1.PersistentVolumeList{} },
		func(dst, src *v1.PersistentVolumeList) { dst.ListMeta = src.ListMeta },
		func(l *v1.PersistentVolumeList) []*v1.PersistentVolume { return gentype.ToPointerSlice(l.Items) },
		func(l *v1.PersistentVolumeList, items []*v1.PersistentVolume) {
			l.Items = gentype.FromPointerSlice(items)
		})}
}

func (c *coreV1) Pods(ns string) typedcorev1.PodInterface {
	return &podClient{FakeClientWithListAndApply: gentype.NewFakeClientWithListAndApply[*v1.Pod, *v1.PodList, *corev1apply.PodApplyConfiguration](
		c.fake, ns, Pods, v1.SchemeGroupVersion.WithKind("Pod"),
		func() *v1.Pod { return &v1.Pod{} },
		func() *v1.PodList { return &v1.PodList{} },
		func(dst, src *v1.PodList) { dst.ListMeta = src.ListMeta },
		func(l *v1.PodList) []*v1.Pod { return gentype.ToPointerSlice(l.Items) },
		func(l *v1.PodList, items []*v1.Pod) { l.Items = gentype.FromPointerSlice(items) })}
}

func (c *coreV1) Secrets(ns string) typedcorev1.SecretInterface {
	return &secretClient{FakeClientWithListAndApply: gentype.NewFakeClientWithListAndApply[*v1.Secret, *v1.SecretList, *corev1apply.SecretApplyConfiguration](
		c.fake, ns, Secrets, v1.SchemeGroupVersion.WithKind("Secret"),
		func() *v1.Secret { return &v1.Secret{} },
		func() *v1.SecretList { return &v1.SecretList{} },
		func(dst, src *v1.SecretList) { dst.ListMeta = src.ListMeta },
		func(l *v1.SecretList) []*v1.Secret { return gentype.ToPointerSlice(l.Items) },
		func(l *v1.SecretList, items []*v1.Secret) { l.Items = gentype.FromPointerSlice(items) })}
}

type pvcClient struct {
	*gentype.FakeClientWithListAndApply[*v1.PersistentVolumeClaim, *v1.PersistentVolumeClaimList, *corev1apply.PersistentVolumeClaimApplyConfiguration]
}

type pvClient struct {
	*gentype.FakeClientWithListAndApply[*v1.PersistentVolume, *v1.PersistentVolumeList, *corev1apply.PersistentVolumeApplyConfiguration]
}

// podClient leaves the pod expansion methods (bind, evict, logs...) unimplemented: they are
// embedded deeper than the generic client's methods, so they only fill the interface.
type podClient struct {
	*gentype.FakeClientWithListAndApply[*v1.Pod, *v1.PodList, *corev1apply.PodApplyConfiguration]
	unimplementedPods
}

type unimplementedPods struct{ nilPods }

type nilPods struct{ typedcorev1.PodInterface }

type secretClient struct {
	*gentype.FakeClientWithListAndApply[*v1.Secret, *v1.SecretList, *corev1apply.SecretApplyConfiguration]
}

// delayedWatch passes on the events of a watch, each delay after it arrived.
type delayedWatch struct {
	src  watch.Interface
	out  chan watch.Event
	stop chan struct{}
	once sync.Once
}

type stampedEvent struct {
	at time.Time
	ev watch.Event
}

func newDelayedWatch(src watch.Interface, delay time.Duration) *delayedWatch {
	d := &delayedWatch{src: src, out: make(chan watch.Event), stop: make(chan struct{})}
	// The source must be drained at once: the tracker's watchers panic when their buffer of
	// 100 events is full.
	buf := make(chan stampedEvent, 10000)
	go func() {
		defer close(buf)
		for {
			select {
			case ev, ok := <-src.ResultChan():
				if !ok {
					return
				}
				buf <- stampedEvent{time.Now(), ev}
			case <-d.stop:
				return
			}
		}
	}()
	go func() {
		defer close(d.out)
		for se := range buf {
			t := time.NewTimer(time.Until(se.at.Add(delay)))
			select {
			case <-t.C:
			case <-d.stop:
				t.Stop()
				return
			}
			select {
			case d.out <- se.ev:
			case <-d.stop:
				return
			}
		}
	}()
	return d
}

func (d *delayedWatch) Stop() {
	d.once.Do(func() {
		close(d.stop)
		d.src.Stop()
	})
}

func (d *delayedWatch) ResultChan() <-chan watch.Event { return d.out }
