package sidecar

import (
	"reflect"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	rcsi "github.com/csi-resizer/csi-resizer/pkg/csi"
	"github.com/csi-resizer/csi-resizer/pkg/expand"
	"github.com/csi-resizer/csi-resizer/pkg/migration"
)

// fullMeta is metadata as a provisioner and the PV controller leave it: everything the
// transform should drop is set.
func fullMeta(name, ns string) metav1.ObjectMeta {
	del := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	return metav1.ObjectMeta{
		Name: name, Namespace: ns, UID: types.UID("uid-" + name), ResourceVersion: "7", Generation: 2,
		CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		DeletionTimestamp: &del,
		Labels:            map[string]string{"app": "web"},
		Annotations: map[string]string{
			"pv.kubernetes.io/bind-completed":                  "yes",
			"kubectl.kubernetes.io/last-applied-configuration": "{...}",
		},
		Finalizers:      []string{"kubernetes.io/pvc-protection"},
		OwnerReferences: []metav1.OwnerReference{{Kind: "StatefulSet", Name: "web", UID: "o"}},
		ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: "Update"}},
	}
}

func storage(q string) v1.ResourceList {
	return v1.ResourceList{v1.ResourceStorage: resource.MustParse(q)}
}

func fullClaim(name string) *v1.PersistentVolumeClaim {
	fs := v1.PersistentVolumeFilesystem
	class := "fast"
	gold, bronze := "gold", "bronze"
	return &v1.PersistentVolumeClaim{
		ObjectMeta: fullMeta(name, "apps"),
		Spec: v1.PersistentVolumeClaimSpec{
			AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources:        v1.VolumeResourceRequirements{Requests: storage("2Gi"), Limits: storage("10Gi")},
			VolumeName:       "pv-" + name,
			StorageClassName: &class,
			VolumeMode:       &fs,
			Selector:         &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}},
			// VolumeAttributesClass (KEP-3751): the modification's target.
			VolumeAttributesClassName: &gold,
		},
		Status: v1.PersistentVolumeClaimStatus{
			Phase:              v1.ClaimBound,
			AccessModes:        []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Capacity:           storage("1Gi"),
			AllocatedResources: storage("2Gi"),
			AllocatedResourceStatuses: map[v1.ResourceName]v1.ClaimResourceStatus{
				v1.ResourceStorage: v1.PersistentVolumeClaimControllerResizeInProgress,
			},
			Conditions:                       []v1.PersistentVolumeClaimCondition{{Type: v1.PersistentVolumeClaimResizing, Status: v1.ConditionTrue, Message: "m"}},
			CurrentVolumeAttributesClassName: &bronze,
			ModifyVolumeStatus: &v1.ModifyVolumeStatus{
				TargetVolumeAttributesClassName: gold, Status: v1.PersistentVolumeClaimModifyVolumeInProgress,
			},
		},
	}
}

func fullVolume(name string) *v1.PersistentVolume {
	block := v1.PersistentVolumeBlock
	bronze := "bronze"
	pv := &v1.PersistentVolume{
		ObjectMeta: fullMeta(name, ""),
		Spec: v1.PersistentVolumeSpec{
			Capacity:    storage("1Gi"),
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteMany},
			ClaimRef: &v1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: "apps",
				Name: "data", UID: "c", ResourceVersion: "3"},
			VolumeMode:                    &block,
			MountOptions:                  []string{"noatime"},
			PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimDelete,
			StorageClassName:              "fast",
			NodeAffinity:                  &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{}},
			VolumeAttributesClassName:     &bronze,
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
				Driver: "hostpath.csi.k8s.io", VolumeHandle: "vol-1", FSType: "ext4", ReadOnly: true,
				VolumeAttributes:          map[string]string{"storage.kubernetes.io/csiProvisionerIdentity": "x"},
				ControllerExpandSecretRef: &v1.SecretReference{Name: "expand", Namespace: "kube-system"},
				NodeStageSecretRef:        &v1.SecretReference{Name: "stage", Namespace: "kube-system"},
				NodePublishSecretRef:      &v1.SecretReference{Name: "publish", Namespace: "kube-system"},
			}},
		},
		Status: v1.PersistentVolumeStatus{Phase: v1.VolumeBound, Message: "bound"},
	}
	pv.Annotations[expand.AnnPreResizeCapacity] = "1Gi"
	pv.Annotations[expand.AnnControllerExpanded] = `{"capacity":"1Gi","nodeExpansionRequired":true}`
	pv.Annotations[rcsi.AnnModifySecretName] = "modify"
	pv.Annotations[rcsi.AnnModifySecretNamespace] = "kube-system"
	return pv
}

// keptMeta is what slimMeta must keep of fullMeta.
func keptMeta(in metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: in.Name, Namespace: in.Namespace, UID: in.UID, ResourceVersion: in.ResourceVersion,
		Generation: in.Generation, CreationTimestamp: in.CreationTimestamp, DeletionTimestamp: in.DeletionTimestamp}
}

// TestSlimObjectKeepsWhatTheResizerReads pins the transform's contract (see slimObject's
// comment): every field the controller, the decision, the CSI call and the status writer
// read is there, with its value; the rest is gone. A field read elsewhere must be added to
// both the transform and this test.
func TestSlimObjectKeepsWhatTheResizerReads(t *testing.T) {
	pvc := fullClaim("data")
	pvc.Annotations[migration.AnnStorageResizer] = "ebs.csi.aws.com"
	pvc.Annotations[expand.AnnNodeExpansionNotRequired] = "true"
	out, err := slimObject(pvc.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	wantMeta := keptMeta(pvc.ObjectMeta)
	wantMeta.Annotations = map[string]string{migration.AnnStorageResizer: "ebs.csi.aws.com", expand.AnnNodeExpansionNotRequired: "true"}
	want := &v1.PersistentVolumeClaim{
		ObjectMeta: wantMeta,
		Spec: v1.PersistentVolumeClaimSpec{
			Resources:                 pvc.Spec.Resources,
			VolumeName:                pvc.Spec.VolumeName,
			VolumeAttributesClassName: pvc.Spec.VolumeAttributesClassName,
		},
		Status: pvc.Status,
	}
	if got := out.(*v1.PersistentVolumeClaim); !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("slim PVC:\n got %+v\nwant %+v", got, want)
	}

	pv := fullVolume("pv-data")
	out, err = slimObject(pv.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	csi := pv.Spec.CSI
	wantPV := &v1.PersistentVolume{
		ObjectMeta: keptMeta(pv.ObjectMeta),
		Spec: v1.PersistentVolumeSpec{
			Capacity:                  pv.Spec.Capacity,
			AccessModes:               pv.Spec.AccessModes,
			ClaimRef:                  pv.Spec.ClaimRef,
			VolumeMode:                pv.Spec.VolumeMode,
			MountOptions:              pv.Spec.MountOptions,
			VolumeAttributesClassName: pv.Spec.VolumeAttributesClassName,
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
				Driver: csi.Driver, VolumeHandle: csi.VolumeHandle, FSType: csi.FSType,
				ControllerExpandSecretRef: csi.ControllerExpandSecretRef,
			}},
		},
		Status: v1.PersistentVolumeStatus{Phase: pv.Status.Phase},
	}
	wantPV.Annotations = map[string]string{expand.AnnPreResizeCapacity: "1Gi", expand.AnnControllerExpanded: `{"capacity":"1Gi","nodeExpansionRequired":true}`, rcsi.AnnModifySecretName: "modify", rcsi.AnnModifySecretNamespace: "kube-system"}
	if got := out.(*v1.PersistentVolume); !equality.Semantic.DeepEqual(got, wantPV) {
		t.Errorf("slim PV:\n got %+v\nwant %+v", got, wantPV)
	}
	// With --node-deployment the PV keeps its node affinity too, which nodelocal.Decide reads.
	out, _ = slimNodeObject(pv.DeepCopy())
	wantPV.Spec.NodeAffinity = pv.Spec.NodeAffinity
	if got := out.(*v1.PersistentVolume); !equality.Semantic.DeepEqual(got, wantPV) {
		t.Errorf("slim PV of a node deployment:\n got %+v\nwant %+v", got, wantPV)
	}

	// A PV without the annotations gets no annotation map at all, nor a PVC without either.
	bare := fullVolume("pv-bare")
	delete(bare.Annotations, expand.AnnPreResizeCapacity)
	delete(bare.Annotations, expand.AnnControllerExpanded)
	delete(bare.Annotations, rcsi.AnnModifySecretName)
	delete(bare.Annotations, rcsi.AnnModifySecretNamespace)
	out, _ = slimObject(bare)
	if a := out.(*v1.PersistentVolume).Annotations; a != nil {
		t.Errorf("slim PV without the resizer's annotations keeps annotations %v", a)
	}
	out, _ = slimObject(fullClaim("bare"))
	if a := out.(*v1.PersistentVolumeClaim).Annotations; a != nil {
		t.Errorf("slim PVC without the resizer's annotations keeps annotations %v", a)
	}

	// An in-tree PV keeps what csi-translation-lib reads: its whole source, labels and node
	// affinity; and its translation is the same as the full PV's.
	inTree := fullVolume("pv-ebs")
	inTree.Spec.CSI = nil
	inTree.Spec.AWSElasticBlockStore = &v1.AWSElasticBlockStoreVolumeSource{VolumeID: "aws://us-east-1a/vol-0abc", FSType: "xfs", Partition: 1}
	inTree.Labels = map[string]string{v1.LabelTopologyZone: "us-east-1a"}
	out, _ = slimObject(inTree.DeepCopy())
	slim := out.(*v1.PersistentVolume)
	if !equality.Semantic.DeepEqual(slim.Spec.PersistentVolumeSource, inTree.Spec.PersistentVolumeSource) ||
		!equality.Semantic.DeepEqual(slim.Spec.NodeAffinity, inTree.Spec.NodeAffinity) || !equality.Semantic.DeepEqual(slim.Labels, inTree.Labels) {
		t.Errorf("slim in-tree PV lost translation input: %+v", slim)
	}
	fromFull, _, err := migration.CSIView(klog.Background(), inTree)
	if err != nil {
		t.Fatal(err)
	}
	fromSlim, _, err := migration.CSIView(klog.Background(), slim)
	if err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(fromFull.Spec.CSI, fromSlim.Spec.CSI) || !equality.Semantic.DeepEqual(fromFull.Spec.NodeAffinity, fromSlim.Spec.NodeAffinity) {
		t.Errorf("translation of the slim PV %+v differs from the full PV's %+v", fromSlim.Spec, fromFull.Spec)
	}
}

// client-go may pass objects already in the cache through the transform again (a watch-list
// Replace); the result must not change.
func TestSlimObjectIsIdempotent(t *testing.T) {
	for _, obj := range []any{fullClaim("data"), fullVolume("pv-data")} {
		once, _ := slimObject(obj)
		twice, _ := slimObject(once)
		if !equality.Semantic.DeepEqual(once, twice) {
			t.Errorf("transform of a transformed %T changed it:\n once %+v\ntwice %+v", obj, once, twice)
		}
	}
	// Other objects, such as a deletion tombstone, pass through untouched.
	tomb := cache.DeletedFinalStateUnknown{Key: "apps/data", Obj: fullClaim("data")}
	if got, _ := slimObject(tomb); !reflect.DeepEqual(got, tomb) {
		t.Errorf("tombstone changed by the transform: %+v", got)
	}
}

// Equal sizes, access modes and volume modes are one value in memory, not one per object;
// different sizes stay apart.
func TestSlimObjectSharesEqualValues(t *testing.T) {
	a, _ := slimObject(fullClaim("a"))
	b, _ := slimObject(fullClaim("b"))
	ca, cb := a.(*v1.PersistentVolumeClaim), b.(*v1.PersistentVolumeClaim)
	same := func(what string, x, y any) {
		t.Helper()
		if reflect.ValueOf(x).Pointer() != reflect.ValueOf(y).Pointer() {
			t.Errorf("%s of two claims are separate copies; want one shared value", what)
		}
	}
	same("spec.resources.requests", ca.Spec.Resources.Requests, cb.Spec.Resources.Requests)
	same("status.capacity", ca.Status.Capacity, cb.Status.Capacity)
	same("status.accessModes", ca.Status.AccessModes, cb.Status.AccessModes)
	// requests (2Gi) and capacity (1Gi) differ, so they must not be one map.
	if reflect.ValueOf(ca.Spec.Resources.Requests).Pointer() == reflect.ValueOf(ca.Status.Capacity).Pointer() {
		t.Error("2Gi requests and 1Gi capacity share one map")
	}
	// allocatedResources equals requests (2Gi): shared too.
	same("status.allocatedResources and spec.resources.requests", ca.Status.AllocatedResources, ca.Spec.Resources.Requests)

	p1, _ := slimObject(fullVolume("p1"))
	p2, _ := slimObject(fullVolume("p2"))
	v1p, v2p := p1.(*v1.PersistentVolume), p2.(*v1.PersistentVolume)
	same("PV spec.capacity", v1p.Spec.Capacity, v2p.Spec.Capacity)
	same("PV spec.volumeMode", v1p.Spec.VolumeMode, v2p.Spec.VolumeMode)
	same("PV spec.accessModes", v1p.Spec.AccessModes, v2p.Spec.AccessModes)

	// The same quantity written another way (format) is kept apart: the resizer prints it.
	dec, _ := slimObject(&v1.PersistentVolumeClaim{Spec: v1.PersistentVolumeClaimSpec{
		Resources: v1.VolumeResourceRequirements{Requests: storage("2147483648")}}})
	if reflect.ValueOf(dec.(*v1.PersistentVolumeClaim).Spec.Resources.Requests).Pointer() == reflect.ValueOf(ca.Spec.Resources.Requests).Pointer() {
		t.Error("2Gi and 2147483648 share one map although they print differently")
	}
}

func TestListInternerIsBounded(t *testing.T) {
	in := &listInterner{max: 4}
	for i := range 10 {
		in.intern(v1.ResourceList{v1.ResourceStorage: *resource.NewQuantity(int64(i+1)<<30, resource.BinarySI)})
		if len(in.lists) > in.max {
			t.Fatalf("interner holds %d lists, bound is %d", len(in.lists), in.max)
		}
	}
	if got := in.intern(nil); got != nil {
		t.Errorf("intern(nil) = %v, want nil", got)
	}
}
