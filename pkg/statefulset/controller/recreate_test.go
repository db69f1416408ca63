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
	var deletes atomic.Int32
	h.client.PrependReactor("delete", "statefulsets", func(action clienttesting.Action) (bool, runtime.Object, error) {
		del := action.(clienttesting.DeleteActionImpl)
		if o := del.DeleteOptions; o.PropagationPolicy == nil || *o.PropagationPolicy != "Orphan" || o.Preconditions == nil ||
			o.Preconditions.UID == nil || *o.Preconditions.UID != "uid-1" || o.Preconditions.ResourceVersion == nil {
			t.Errorf("delete without orphan propagation and uid + resourceVersion preconditions: %+v", o)
		}
		if deletes.Add(1) == 1 {
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
		sts := h.statefulSet()
		_, annotated := sts.Annotations[desired.Annotation]
		return sts.UID != "uid-1" && !annotated && sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests.Storage().String() == "2Gi" &&
			len(h.actions("delete", "configmaps")) == 2
	})
	if n := deletes.Load(); n != 2 {
		t.Errorf("%d deletes, want 2 (one failed precondition, then the delete)", n)
	}
	if n := len(h.actions("create", "configmaps")); n != 2 {
		t.Errorf("%d records written, want 2 (the first dropped after the failed precondition)", n)
	}
	if n := len(h.actions("create", "statefulsets")); n != 1 {
		t.Errorf("%d creates, want 1", n)
	}
	if _, err := h.client.CoreV1().ConfigMaps(ns).Get(h.ctx, recreate.RecordName("web"), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("record left behind: %v", err)
	}
	ev := h.events()
	if !hasEvent(ev, "Normal", EventRecreating) || !hasEvent(ev, "Normal", EventRecreated, "uid-1") {
		t.Errorf("events %q, want Recreating and Recreated", ev)
	}
}
