package fakeapi

import (
	"strconv"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clienttesting "k8s.io/client-go/testing"
)

// versioningTracker gives stored objects a metadata.resourceVersion, which
// client-go's tracker leaves empty, and enforces it as a precondition on
// update and patch like the apiserver does. Controllers that tell resyncs
// from changes by resourceVersion, or send it as a precondition, need both.
type versioningTracker struct {
	clienttesting.ObjectTracker
	mu sync.Mutex
	rv int64
}

func (t *versioningTracker) stamp(obj runtime.Object) error {
	m, err := meta.Accessor(obj)
	if err != nil {
		return err
	}
	t.rv++
	m.SetResourceVersion(strconv.FormatInt(t.rv, 10))
	return nil
}

// checkPrecondition fails with a Conflict when obj carries a resourceVersion
// that is not the stored one. An empty resourceVersion is unconditional.
func (t *versioningTracker) checkPrecondition(gvr schema.GroupVersionResource, obj runtime.Object, ns string) error {
	m, err := meta.Accessor(obj)
	if err != nil {
		return err
	}
	if m.GetResourceVersion() == "" {
		return nil
	}
	stored, err := t.ObjectTracker.Get(gvr, ns, m.GetName())
	if err != nil {
		return err
	}
	sm, err := meta.Accessor(stored)
	if err != nil {
		return err
	}
	if sm.GetResourceVersion() != m.GetResourceVersion() {
		return apierrors.NewConflict(gvr.GroupResource(), m.GetName(),
			errorf("the object has been modified; please apply your changes to the latest version and try again"))
	}
	return nil
}

func (t *versioningTracker) Add(obj runtime.Object) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	obj = obj.DeepCopyObject()
	if err := t.stamp(obj); err != nil {
		return err
	}
	return t.ObjectTracker.Add(obj)
}

func (t *versioningTracker) Create(gvr schema.GroupVersionResource, obj runtime.Object, ns string, opts ...metav1.CreateOptions) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.stamp(obj); err != nil {
		return err
	}
	return t.ObjectTracker.Create(gvr, obj, ns, opts...)
}

func (t *versioningTracker) Update(gvr schema.GroupVersionResource, obj runtime.Object, ns string, opts ...metav1.UpdateOptions) error {
	return t.overwrite(gvr, obj, ns, func() error { return t.ObjectTracker.Update(gvr, obj, ns, opts...) })
}

func (t *versioningTracker) Patch(gvr schema.GroupVersionResource, obj runtime.Object, ns string, opts ...metav1.PatchOptions) error {
	return t.overwrite(gvr, obj, ns, func() error { return t.ObjectTracker.Patch(gvr, obj, ns, opts...) })
}

// overwrite checks the resourceVersion precondition, stamps a new version and stores obj,
// atomically, as the apiserver does for an update or a patch.
func (t *versioningTracker) overwrite(gvr schema.GroupVersionResource, obj runtime.Object, ns string, store func() error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.checkPrecondition(gvr, obj, ns); err != nil {
		return err
	}
	if err := t.stamp(obj); err != nil {
		return err
	}
	return store()
}
