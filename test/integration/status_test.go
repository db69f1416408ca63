//go:build integration

package integration

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/csi-resizer/csi-resizer/pkg/status"
	"github.com/csi-resizer/csi-resizer/test/framework"
)

// TestStatusWriterGuard: the resizer's status write is guarded by resourceVersion on a real
// apiserver: a decision taken on a stale PVC is refused with a conflict (client-go's fake does
// not enforce this, so pkg/status cannot prove it), an unguarded one goes through, and an
// unchanged status costs no request and keeps the version.
func TestStatusWriterGuard(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cluster := framework.StartCluster(t, framework.ClusterOptions{})
	client := cluster.Client
	ns := framework.CreateNamespace(t, ctx, client, "guard")
	stale, _ := framework.CreateBoundClaim(t, ctx, client, ns, "data", "guard.csi-resizer.io", "vol-1", "1Gi", "guard-sc")
	w := &status.APIWriter{Client: client, FieldManager: "csi-resizer"}

	st := *stale.Status.DeepCopy()
	st.AllocatedResources = v1.ResourceList{v1.ResourceStorage: resource.MustParse("2Gi")}
	st.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{v1.ResourceStorage: v1.PersistentVolumeClaimControllerResizeInProgress}
	out, err := w.PatchClaimStatus(ctx, stale, st, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if out.ResourceVersion == stale.ResourceVersion || out.Status.AllocatedResourceStatuses[v1.ResourceStorage] != v1.PersistentVolumeClaimControllerResizeInProgress {
		t.Fatalf("written PVC: resourceVersion %s (was %s), status %+v", out.ResourceVersion, stale.ResourceVersion, out.Status)
	}

	st2 := *st.DeepCopy()
	st2.AllocatedResources = v1.ResourceList{v1.ResourceStorage: resource.MustParse("3Gi")}
	if _, err := w.PatchClaimStatus(ctx, stale, st2, nil, true); !apierrors.IsConflict(err) {
		t.Errorf("guarded write on the stale PVC: err = %v, want a conflict", err)
	}
	unguarded, err := w.PatchClaimStatus(ctx, stale, st2, nil, false)
	if err != nil {
		t.Fatalf("unguarded write: %v", err)
	}
	same, err := w.PatchClaimStatus(ctx, unguarded, unguarded.Status, nil, true)
	if err != nil || same != unguarded {
		t.Errorf("unchanged status: got %p, err %v; want the same object back, no request", same, err)
	}
	cur, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cur.ResourceVersion != unguarded.ResourceVersion {
		t.Errorf("resourceVersion %s after an unchanged status, want %s", cur.ResourceVersion, unguarded.ResourceVersion)
	}
}

// TestStatusWriterModifyFields: the modification's writes are accepted by a real apiserver (its
// validation of modifyVolumeStatus and of a PV's volumeAttributesClassName, which client-go's
// fake does not run) and store what pkg/status computed: the guarded start (InProgress + the
// ModifyingVolume condition), the PV's class, and the finish (current class set, status and
// condition removed), each leaving the expansion's status fields alone.
func TestStatusWriterModifyFields(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cluster := framework.StartCluster(t, framework.ClusterOptions{})
	client := cluster.Client
	ns := framework.CreateNamespace(t, ctx, client, "modify")
	pvc, pv := framework.CreateBoundClaim(t, ctx, client, ns, "data", "modify.csi-resizer.io", "vol-1", "1Gi", "modify-sc")
	w := &status.APIWriter{Client: client, FieldManager: "csi-resizer"}
	expanding := map[v1.ResourceName]v1.ClaimResourceStatus{v1.ResourceStorage: v1.PersistentVolumeClaimControllerResizeInProgress}

	// An expansion in progress, written first.
	st := *pvc.Status.DeepCopy()
	st.AllocatedResources = v1.ResourceList{v1.ResourceStorage: resource.MustParse("2Gi")}
	st.AllocatedResourceStatuses = expanding
	pvc, err := w.PatchClaimStatus(ctx, pvc, st, nil, true)
	if err != nil {
		t.Fatal(err)
	}

	now := metav1.Now()
	start := *pvc.Status.DeepCopy()
	start.ModifyVolumeStatus = &v1.ModifyVolumeStatus{TargetVolumeAttributesClassName: "gold", Status: v1.PersistentVolumeClaimModifyVolumeInProgress}
	start.Conditions = append(start.Conditions, v1.PersistentVolumeClaimCondition{
		Type: v1.PersistentVolumeClaimVolumeModifyingVolume, Status: v1.ConditionTrue, LastTransitionTime: now, Message: "modifying to gold"})
	started, err := w.PatchClaimStatus(ctx, pvc, start, nil, true)
	if err != nil {
		t.Fatalf("guarded start of the modification: %v", err)
	}
	if ms := started.Status.ModifyVolumeStatus; ms == nil || *ms != *start.ModifyVolumeStatus || len(started.Status.Conditions) != 1 ||
		started.Status.Conditions[0].Type != v1.PersistentVolumeClaimVolumeModifyingVolume {
		t.Fatalf("stored after the start: modifyVolumeStatus %+v, conditions %+v", ms, started.Status.Conditions)
	}
	if started.Status.AllocatedResourceStatuses[v1.ResourceStorage] != v1.PersistentVolumeClaimControllerResizeInProgress {
		t.Errorf("the modification's write changed the expansion's status: %+v", started.Status.AllocatedResourceStatuses)
	}

	pvOut, err := w.PatchVolumeAttributesClass(ctx, pv, "gold")
	if err != nil {
		t.Fatalf("setting the PV's class: %v", err)
	}
	if c := pvOut.Spec.VolumeAttributesClassName; c == nil || *c != "gold" {
		t.Fatalf("PV class after the write: %v", c)
	}
	if again, err := w.PatchVolumeAttributesClass(ctx, pvOut, "gold"); err != nil || again.ResourceVersion != pvOut.ResourceVersion {
		t.Errorf("unchanged class: err %v, resourceVersion %s -> %s", err, pvOut.ResourceVersion, again.ResourceVersion)
	}

	done := *started.Status.DeepCopy()
	done.CurrentVolumeAttributesClassName = ptr.To("gold")
	done.ModifyVolumeStatus = nil
	done.Conditions = nil
	finished, err := w.PatchClaimStatus(ctx, started, done, nil, true)
	if err != nil {
		t.Fatalf("finishing the modification: %v", err)
	}
	cur, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := cur.Status.CurrentVolumeAttributesClassName; c == nil || *c != "gold" || cur.Status.ModifyVolumeStatus != nil || len(cur.Status.Conditions) != 0 {
		t.Errorf("stored after the finish: current %v, modifyVolumeStatus %+v, conditions %+v", c, cur.Status.ModifyVolumeStatus, cur.Status.Conditions)
	}
	if cur.ResourceVersion != finished.ResourceVersion || cur.Status.AllocatedResourceStatuses[v1.ResourceStorage] != v1.PersistentVolumeClaimControllerResizeInProgress {
		t.Errorf("stored after the finish: resourceVersion %s (written %s), expansion status %+v", cur.ResourceVersion, finished.ResourceVersion, cur.Status.AllocatedResourceStatuses)
	}
}
