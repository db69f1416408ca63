package controller_test

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-resizer/csi-resizer/pkg/internal/csitest"
	"github.com/csi-resizer/csi-resizer/pkg/migration"
)

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

// TestMigratedInTreeVolume: the EBS CSI driver expands an in-tree EBS PV whose PVC the
// storage-resizer annotation hands to it, with the translated volume id and fsType, and writes
// the new capacity on the in-tree PV; an in-tree PV without the annotation is not its.
func TestMigratedInTreeVolume(t *testing.T) {
	t.Parallel()
	driver := csitest.ControllerDriver()
	driver.Name = "ebs.csi.aws.com"
	handed, handedPV := ebsClaim("handed", "2Gi", "1Gi", "ebs.csi.aws.com")
	notYet, notYetPV := ebsClaim("notyet", "2Gi", "1Gi", "")
	e := start(t, setup{driver: driver, objects: objects(handed, handedPV, notYet, notYetPV)})

	e.waitForClaim("handed", "expanded", func(p *v1.PersistentVolumeClaim) bool {
		c := p.Status.Capacity[v1.ResourceStorage]
		return c.String() == "2Gi"
	})
	e.settle(claimRef("handed"), claimRef("notyet"))
	calls := e.csi.ExpandCalls()
	if len(calls) != 1 {
		t.Fatalf("ControllerExpandVolume calls = %d, want 1 (for the annotated PVC only)", len(calls))
	}
	req := calls[0].Request
	if req.GetVolumeId() != "vol-handed" || req.GetVolumeCapability().GetMount().GetFsType() != "xfs" {
		t.Errorf("request: volume %q fsType %q, want the translated vol-handed and xfs", req.GetVolumeId(), req.GetVolumeCapability().GetMount().GetFsType())
	}
	pv := e.pv("pv-handed")
	if c := pv.Spec.Capacity[v1.ResourceStorage]; c.String() != "2Gi" || pv.Spec.AWSElasticBlockStore == nil || pv.Spec.CSI != nil {
		t.Errorf("PV: capacity %s, source %+v; want 2Gi on the in-tree EBS source", c.String(), pv.Spec.PersistentVolumeSource)
	}
	if s := state(e.pvc("notyet")); s != "" {
		t.Errorf("the PVC without the annotation got state %q", s)
	}

	// kube-controller-manager hands the other PVC over: that update alone queues it.
	cur := e.pvc("notyet")
	cur.Annotations = map[string]string{migration.AnnStorageResizer: "ebs.csi.aws.com"}
	if _, err := e.kube.CoreV1().PersistentVolumeClaims(cur.Namespace).Update(context.Background(), cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitForClaim("notyet", "expanded once the annotation names the driver", func(p *v1.PersistentVolumeClaim) bool {
		c := p.Status.Capacity[v1.ResourceStorage]
		return c.String() == "2Gi"
	})
	if calls := e.csi.ExpandCalls(); len(calls) != 2 || calls[1].Request.GetVolumeId() != "vol-notyet" {
		t.Errorf("calls after the annotation: %d, last for %q; want 2, the last for vol-notyet", len(calls), calls[len(calls)-1].Request.GetVolumeId())
	}
}
