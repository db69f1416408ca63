package metrics

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// TestClaimLister: nothing (nil) until the caches have synced; then only the driver's bound
// PVCs, with their resize and modify states, and an empty, non-nil list when there are none.
func TestClaimLister(t *testing.T) {
	pvcs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	pvs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	synced := false
	list := ClaimLister("d.example.com", corelisters.NewPersistentVolumeClaimLister(pvcs), corelisters.NewPersistentVolumeLister(pvs),
		nil, func() bool { return synced })
	if got := list(); got != nil {
		t.Fatalf("before sync: %v, want nil", got)
	}
	synced = true
	if got := list(); got == nil || len(got) != 0 {
		t.Fatalf("synced, no PVCs: %v, want empty and non-nil", got)
	}
	add := func(name, driver string, st v1.PersistentVolumeClaimStatus) {
		st.Phase = v1.ClaimBound
		pvc := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: "uid-" + types.UID(name)},
			Spec: v1.PersistentVolumeClaimSpec{VolumeName: "pv-" + name}, Status: st}
		pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-" + name}, Spec: v1.PersistentVolumeSpec{
			ClaimRef:               &v1.ObjectReference{Namespace: "ns", Name: name, UID: pvc.UID},
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: name}}}}
		_ = pvcs.Add(pvc)
		_ = pvs.Add(pv)
	}
	add("mine", "d.example.com", v1.PersistentVolumeClaimStatus{ModifyVolumeStatus: &v1.ModifyVolumeStatus{Status: v1.PersistentVolumeClaimModifyVolumeInfeasible, TargetVolumeAttributesClassName: "gold"}})
	add("theirs", "other.example.com", v1.PersistentVolumeClaimStatus{})
	got := list()
	if len(got) != 1 || got[0].Name != "mine" || got[0].ModifyStatus != v1.PersistentVolumeClaimModifyVolumeInfeasible || got[0].ModifyTarget != "gold" {
		t.Errorf("claims %+v, want only mine, Infeasible for gold", got)
	}

	// include (--node-deployment) keeps only some of the driver's volumes.
	add("elsewhere", "d.example.com", v1.PersistentVolumeClaimStatus{})
	local := ClaimLister("d.example.com", corelisters.NewPersistentVolumeClaimLister(pvcs), corelisters.NewPersistentVolumeLister(pvs),
		func(pv *v1.PersistentVolume) bool { return pv.Name != "pv-elsewhere" }, func() bool { return true })
	if got := local(); len(got) != 1 || got[0].Name != "mine" {
		t.Errorf("claims %+v with a filter dropping pv-elsewhere, want only mine", got)
	}
	if got := list(); len(got) != 2 {
		t.Errorf("claims %+v without a filter, want mine and elsewhere", got)
	}
}
