package status_test

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/csi-resizer/csi-resizer/pkg/status"
)

// TestAPIWriterAnnotations: annotation changes go out with the PVC's status write and the PV's
// capacity write, as a set or a removal, leaving other annotations alone; the apiserver side
// (metadata through the status subresource) is tested on the real apiserver in
// test/integration.
func TestAPIWriterAnnotations(t *testing.T) {
	const (
		nenr = "volume.kubernetes.io/node-expansion-not-required"
		pre  = "volume.alpha.kubernetes.io/pre-resize-capacity"
	)
	pvc := claimWith(v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound, Capacity: storage("1Gi")})
	pvc.Annotations = map[string]string{"keep": "me"}
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv", Annotations: map[string]string{pre: "1Gi", "keep": "me"}},
		Spec:       v1.PersistentVolumeSpec{Capacity: storage("2Gi")},
	}
	kube := fake.NewClientset(pvc, pv)
	w := &status.APIWriter{Client: kube, FieldManager: "test"}
	ctx := context.Background()

	done := *pvc.Status.DeepCopy()
	done.Capacity = storage("2Gi")
	yes := "true"
	out, err := w.PatchClaimStatus(ctx, pvc, done, map[string]*string{nenr: &yes}, false)
	if err != nil {
		t.Fatal(err)
	}
	if out.Annotations[nenr] != "true" || out.Annotations["keep"] != "me" || !out.Status.Capacity.Storage().Equal(resource.MustParse("2Gi")) {
		t.Errorf("PVC after the finishing write: annotations %v, capacity %v", out.Annotations, out.Status.Capacity)
	}
	if n := len(kube.Actions()); n != 1 {
		t.Errorf("%d API requests for one status write with an annotation, want 1", n)
	}

	// A write that only removes the annotation, and one that finds it gone: one request.
	again, err := w.PatchClaimStatus(ctx, out, out.Status, map[string]*string{nenr: nil}, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := again.Annotations[nenr]; ok || again.Annotations["keep"] != "me" {
		t.Errorf("annotations after the removal: %v", again.Annotations)
	}
	if _, err := w.PatchClaimStatus(ctx, again, again.Status, map[string]*string{nenr: nil}, false); err != nil {
		t.Fatal(err)
	}
	if n := len(kube.Actions()); n != 2 {
		t.Errorf("%d API requests, want 2: removing an absent annotation costs none", n)
	}

	// The PV: removing pre-resize-capacity keeps its capacity and other annotations.
	pvOut, err := w.PatchVolume(ctx, pv, pv.Spec.Capacity[v1.ResourceStorage], map[string]*string{pre: nil})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := pvOut.Annotations[pre]; ok || pvOut.Annotations["keep"] != "me" || !pvOut.Spec.Capacity.Storage().Equal(resource.MustParse("2Gi")) {
		t.Errorf("PV after the removal: annotations %v, capacity %v", pvOut.Annotations, pvOut.Spec.Capacity)
	}
}
