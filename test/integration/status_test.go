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
