package controller

import (
	"sync/atomic"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clienttesting "k8s.io/client-go/testing"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/desired"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/recreate"
)

// The re-create with workers on the fake clientset, where the first delete
// fails its precondition (the object changed after the record was written):
// the record is dropped and the decision made again, and the second attempt
// goes through: stored, deleted with orphan propagation and preconditions,
// created with the desired template and without the annotation, record
// deleted, Recreating and Recreated told. (The real apiserver's part, the
// orphaning and adoption, is tested in test/integration.)
func TestRecreateRetriesAfterAFailedPrecondition(t *testing.T) {
	objects := withDesire(cluster(2, appsv1.ParallelPodManagement, "1Gi", "1Gi"), `[{"name":"data","storage":"2Gi"}]`)
	h := newHarnessWith(t, Options{Recreate: true}, objects...)
	// The fake does not check preconditions: this reactor does, against
	// the object it holds. At the first delete, someone changes the object
	// just before (a new resourceVersion).
	var deletes atomic.Int32
	h.client.PrependReactor("delete", "statefulsets", func(action clienttesting.Action) (bool, runtime.Object, error) {
		del := action.(clienttesting.DeleteActionImpl)
		o := del.DeleteOptions
		if o.PropagationPolicy == nil || *o.PropagationPolicy != metav1.DeletePropagationOrphan || o.Preconditions == nil ||
			o.Preconditions.UID == nil || o.Preconditions.ResourceVersion == nil {
			t.Errorf("delete without orphan propagation and uid + resourceVersion preconditions: %+v", o)
			return true, nil, apierrors.NewBadRequest("test: no preconditions")
		}
		obj, err := h.client.Tracker().Get(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}, ns, "web")
		if err != nil {
			return true, nil, err
		}
		current := obj.(*appsv1.StatefulSet)
		if deletes.Add(1) == 1 {
			changed := current.DeepCopy()
			changed.ResourceVersion = "changed"
			if err := h.client.Tracker().Update(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}, changed, ns); err != nil {
				t.Error(err)
			}
			current = changed
		}
		if *o.Preconditions.UID != current.UID || *o.Preconditions.ResourceVersion != current.ResourceVersion {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "apps", Resource: "statefulsets"}, "web", nil)
		}
		return false, nil, nil
	})
	h.run()
	h.eventually("PVCs patched to the desired size", func() bool {
		return storageOf(h.pvc("data-web-0")) == "2Gi" && storageOf(h.pvc("data-web-1")) == "2Gi"
	})
	h.finishResize("data-web-0")
	h.finishResize("data-web-1")
	h.eventually("re-created", func() bool {
		sts, err := h.client.AppsV1().StatefulSets(ns).Get(h.ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false // between the delete and the create
		}
		_, annotated := sts.Annotations[desired.Annotation]
		_, recErr := h.client.CoreV1().ConfigMaps(ns).Get(h.ctx, recreate.RecordName("web"), metav1.GetOptions{})
		return sts.UID != "uid-1" && !annotated && sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests.Storage().String() == "2Gi" &&
			apierrors.IsNotFound(recErr) && len(h.actions("create", "configmaps")) >= 2
	})
	if n := len(h.actions("create", "configmaps")); n < 2 {
		t.Errorf("%d records written, want the first dropped after the failed precondition and another written", n)
	}
	var ev []string
	h.eventually("Recreated event", func() bool {
		ev = append(ev, h.events()...)
		return hasEvent(ev, "Normal", EventRecreated, "uid-1")
	})
	if !hasEvent(ev, "Normal", EventRecreating) || !hasEvent(ev, "Normal", EventRecreated, "uid-1") {
		t.Errorf("events %q, want Recreating and Recreated", ev)
	}
}
