package expandcontroller

import (
	"testing"

	"google.golang.org/grpc/codes"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-resizer/csi-resizer/pkg/csi"
	"github.com/csi-resizer/csi-resizer/pkg/expand"
	"github.com/csi-resizer/csi-resizer/pkg/migration"
)

const ebsDriver = "ebs.csi.aws.com"

// ebsClaim is claim() with an in-tree awsElasticBlockStore PV, and the PVC's storage-resizer
// annotation set to resizer ("" = none).
func ebsClaim(name, request, capacity, resizer string) (*v1.PersistentVolumeClaim, *v1.PersistentVolume) {
	pvc, pv := claim(name, request, capacity)
	pv.Spec.CSI = nil
	pv.Spec.AWSElasticBlockStore = &v1.AWSElasticBlockStoreVolumeSource{VolumeID: "aws://us-east-1a/vol-" + name, FSType: "xfs"}
	if resizer != "" {
		pvc.Annotations = map[string]string{migration.AnnStorageResizer: resizer}
	}
	return pvc, pv
}

func (f *fixture) pv(name string) *v1.PersistentVolume {
	f.t.Helper()
	pv, err := f.client.CoreV1().PersistentVolumes().Get(f.ctx, name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return pv
}

// TestMigratedInTreeVolume (docs/design.md §2.8): the EBS CSI driver expands an in-tree EBS PV
// whose PVC the storage-resizer annotation hands to it, with the translated volume id and
// fsType, and writes the new capacity on the in-tree PV; an in-tree PV without the annotation
// is not its until the annotation comes, and that update queues the PVC.
func TestMigratedInTreeVolume(t *testing.T) {
	handed, handedPV := ebsClaim("handed", "2Gi", "1Gi", ebsDriver)
	notYet, notYetPV := ebsClaim("notyet", "2Gi", "1Gi", "")
	f := newFixture(t, Config{Driver: csi.Driver{Name: ebsDriver, ControllerExpand: true}}, handed, handedPV, notYet, notYetPV)
	f.sync("handed")
	f.sync("notyet")
	if n := f.driver.count(); n != 1 {
		t.Fatalf("%d driver calls, want 1 (for the annotated PVC only)", n)
	}
	req := f.driver.calls[0]
	if req.VolumeID != "vol-handed" || req.Capability.GetMount().GetFsType() != "xfs" || !req.Migrated {
		t.Errorf("request: volume %q fsType %q migrated %v; want the translated vol-handed, xfs, true", req.VolumeID, req.Capability.GetMount().GetFsType(), req.Migrated)
	}
	if got := f.pvc("handed"); storage(got.Status.Capacity) != "2Gi" {
		t.Errorf("PVC capacity %s, want 2Gi", storage(got.Status.Capacity))
	}
	if pv := f.pv("pv-handed"); storage(pv.Spec.Capacity) != "2Gi" || pv.Spec.AWSElasticBlockStore == nil || pv.Spec.CSI != nil {
		t.Errorf("PV: capacity %s, source %+v; want 2Gi on the in-tree EBS source", storage(pv.Spec.Capacity), pv.Spec.PersistentVolumeSource)
	}
	if s := state(f.pvc("notyet")); s != "" {
		t.Errorf("the PVC without the annotation got state %q", s)
	}

	// kube-controller-manager hands the other PVC over: the handler queues that update.
	old := f.pvc("notyet")
	f.update("notyet", func(pvc *v1.PersistentVolumeClaim) {
		pvc.Annotations = map[string]string{migration.AnnStorageResizer: ebsDriver}
	})
	f.ctrl.claimUpdated(old, f.pvc("notyet"))
	if n := f.ctrl.queue.Len(); n != 1 {
		t.Errorf("queue length %d after the annotation update, want 1", n)
	}
	f.sync("notyet")
	if n := f.driver.count(); n != 2 || f.driver.calls[1].VolumeID != "vol-notyet" {
		t.Errorf("%d calls, the last %+v; want 2, the last for vol-notyet", n, f.driver.calls[n-1])
	}
}

// TestUpstreamAnnotations (docs/design.md §2.9): pre-resize-capacity holds the PVC's
// status.capacity from before a resize with a node step and is removed, in one PV write, once
// the node is done; node-expansion-not-required is set by the write that finishes a resize
// without a node step, removed by the write before the next driver call, and left alone by a
// failure's write.
func TestUpstreamAnnotations(t *testing.T) {
	pvc, pv := claim("data", "2Gi", "1Gi")
	f := newFixture(t, Config{AnnotateFsResize: true}, pvc, pv)
	f.driver.answers = []answer{{node: true}}
	f.sync("data")
	if got := f.pv("pv-data").Annotations[expand.AnnPreResizeCapacity]; got != "1Gi" {
		t.Errorf("pre-resize-capacity %q, want the PVC's capacity before, 1Gi", got)
	}
	f.update("data", func(pvc *v1.PersistentVolumeClaim) { // the kubelet finishes
		pvc.Status.Capacity[v1.ResourceStorage] = resource.MustParse("2Gi")
		pvc.Status.AllocatedResourceStatuses = nil
		pvc.Status.Conditions = nil
	})
	f.sync("data")
	f.sync("data")
	if got, ok := f.pv("pv-data").Annotations[expand.AnnPreResizeCapacity]; ok {
		t.Errorf("pre-resize-capacity %q still there after the node step", got)
	}
	if w := f.writes(); w["persistentvolumes/"] != 2 {
		t.Errorf("API writes %v, want 2 PV writes: the capacity, then the removal", w)
	}
	if _, ok := f.pvc("data").Annotations[expand.AnnNodeExpansionNotRequired]; ok {
		t.Error("node-expansion-not-required set on a resize with a node step")
	}

	f.update("data", setRequest("3Gi")) // no node step: the annotation is set
	f.sync("data")
	if got := f.pvc("data"); got.Annotations[expand.AnnNodeExpansionNotRequired] != "true" || storage(got.Status.Capacity) != "3Gi" {
		t.Errorf("annotations %v capacity %s, want node-expansion-not-required and 3Gi", got.Annotations, storage(got.Status.Capacity))
	}
	f.update("data", setRequest("4Gi")) // the next call removes it; its failure does not set it
	f.driver.answers = []answer{{err: grpcErr(codes.Internal, "boom")}}
	f.sync("data")
	if got := f.pvc("data"); got.Annotations[expand.AnnNodeExpansionNotRequired] != "" || condition(got, v1.PersistentVolumeClaimControllerResizeError) == nil {
		t.Errorf("annotations %v conditions %v; want the annotation gone and the error recorded", got.Annotations, got.Status.Conditions)
	}
}

// TestPreResizeCapacityQueued: a PVC with nothing left to expand whose PV still carries a
// finished pre-resize-capacity (a restart between the node step and the removal) is queued
// when it is listed, and sync removes the annotation.
func TestPreResizeCapacityQueued(t *testing.T) {
	pvc, pv := claim("data", "2Gi", "2Gi")
	pv.Annotations = map[string]string{expand.AnnPreResizeCapacity: "1Gi"}
	f := newFixture(t, Config{AnnotateFsResize: true}, pvc, pv)
	f.ctrl.claimAdded(f.pvc("data"))
	if n := f.ctrl.queue.Len(); n != 1 {
		t.Fatalf("queue length %d, want 1", n)
	}
	f.sync("data")
	if got, ok := f.pv("pv-data").Annotations[expand.AnnPreResizeCapacity]; ok || f.driver.count() != 0 {
		t.Errorf("pre-resize-capacity %q, %d driver calls; want it removed and no call", got, f.driver.count())
	}
}

// TestPVUpdateQueuesOnlyTheRemoval: an update of a PV carrying pre-resize-capacity queues its
// PVC only once the removal is due; while the node works (the echo of the PV write that set
// it), it queues nothing.
func TestPVUpdateQueuesOnlyTheRemoval(t *testing.T) {
	pvc, pv := claim("data", "2Gi", "1Gi")
	pv.Spec.Capacity[v1.ResourceStorage] = resource.MustParse("2Gi")
	pv.Annotations = map[string]string{expand.AnnPreResizeCapacity: "1Gi"}
	pvc.Status.AllocatedResources = v1.ResourceList{v1.ResourceStorage: resource.MustParse("2Gi")}
	pvc.Status.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{v1.ResourceStorage: v1.PersistentVolumeClaimNodeResizePending}
	f := newFixture(t, Config{AnnotateFsResize: true}, pvc, pv)
	f.ctrl.volumeUpdated(pv, f.pv("pv-data"))
	if n := f.ctrl.queue.Len(); n != 0 {
		t.Fatalf("queue length %d while the node works, want 0", n)
	}
	f.update("data", func(pvc *v1.PersistentVolumeClaim) { // the kubelet finishes
		pvc.Status.Capacity[v1.ResourceStorage] = resource.MustParse("2Gi")
		pvc.Status.AllocatedResourceStatuses = nil
	})
	f.ctrl.volumeUpdated(pv, f.pv("pv-data"))
	if n := f.ctrl.queue.Len(); n != 1 {
		t.Errorf("queue length %d once the node is done, want 1", n)
	}
}
