package expandcontroller

import (
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/csi-resizer/csi-resizer/pkg/expand"
)

// TestClaimDeletedAfterNodeStep: the PV of a claim deleted after its node step loses its
// pre-resize-capacity annotation (docs/design.md §2.9), through a key of its own, since the
// claim will never be updated again; the PV of a claim deleted before its node step keeps it
// (it still holds the file system's size).
func TestClaimDeletedAfterNodeStep(t *testing.T) {
	done, donePV := claim("done", "2Gi", "2Gi")
	pending, pendingPV := claim("pending", "2Gi", "1Gi")
	for _, pv := range []*v1.PersistentVolume{donePV, pendingPV} {
		pv.Spec.Capacity = v1.ResourceList{v1.ResourceStorage: resource.MustParse("2Gi")}
		pv.Annotations = map[string]string{expand.AnnPreResizeCapacity: "1Gi"}
	}
	f := newFixture(t, Config{AnnotateFsResize: true}, done, donePV, pending, pendingPV)
	for _, pvc := range []*v1.PersistentVolumeClaim{done, pending} {
		if err := f.client.CoreV1().PersistentVolumeClaims(ns).Delete(f.ctx, pvc.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		_ = f.pvcs.Delete(pvc)
		f.ctrl.claimDeleted(cache.DeletedFinalStateUnknown{Key: ns + "/" + pvc.Name, Obj: pvc})
	}
	var keys []string
	for f.ctrl.queue.Len() > 0 {
		k, _ := f.ctrl.queue.Get()
		keys = append(keys, k)
		f.ctrl.queue.Done(k)
		if _, err := f.ctrl.sync(f.ctx, k); err != nil {
			t.Fatalf("sync %s: %v", k, err)
		}
	}
	if want := []string{ns + "/done", volumeKey("pv-done"), ns + "/pending"}; !slices.Equal(keys, want) {
		t.Errorf("queued %v, want %v", keys, want)
	}
	for name, want := range map[string]bool{"pv-done": false, "pv-pending": true} {
		pv, err := f.client.CoreV1().PersistentVolumes().Get(f.ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, has := pv.Annotations[expand.AnnPreResizeCapacity]; has != want {
			t.Errorf("%s has pre-resize-capacity: %v, want %v", name, has, want)
		}
	}
	if f.driver.count() != 0 {
		t.Errorf("%d driver calls, want none", f.driver.count())
	}
}
