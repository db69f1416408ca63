package controller

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/plan"
)

// docs/design.md §3.11 rule 15: the template's labels and annotations go
// into the same merge patch as the size and the class, under the one
// resourceVersion precondition; a removed key is a JSON null, and a key the
// patch does not name is not in the body (so the PVC's other labels and
// annotations stay). Without label changes the body has no labels at all.
func TestPVCMergePatchTemplateMetadata(t *testing.T) {
	for _, tc := range []struct {
		name  string
		patch plan.PVCPatch
		want  string
	}{
		{"labels and annotations alone",
			plan.PVCPatch{ResourceVersion: "5",
				Labels: map[string]string{"helm.sh/chart": "db-1.3"}, RemoveLabels: []string{"old"},
				Annotations: map[string]string{"note": "x", plan.AnnotationStatefulSet: "web",
					plan.AnnotationTemplateMetadata: `{"labels":{"helm.sh/chart":"db-1.3"},"annotations":{"note":"x"}}`},
				RemoveAnnotations: []string{"gone"}},
			`{"metadata":{"annotations":{"csi-resizer.io/statefulset":"web","csi-resizer.io/template-metadata":"{\"labels\":{\"helm.sh/chart\":\"db-1.3\"},\"annotations\":{\"note\":\"x\"}}","gone":null,"note":"x"},` +
				`"labels":{"helm.sh/chart":"db-1.3","old":null},"resourceVersion":"5"},"spec":{}}`},
		{"size, class and labels in one patch",
			plan.PVCPatch{ResourceVersion: "6", From: resource.MustParse("1Gi"), To: resource.MustParse("2Gi"),
				Class:       &plan.ClassChange{From: "", To: "gold"},
				Labels:      map[string]string{"tier": "db"},
				Annotations: map[string]string{plan.AnnotationResizedStorage: "2Gi"}},
			`{"metadata":{"annotations":{"csi-resizer.io/resized-storage":"2Gi"},"labels":{"tier":"db"},"resourceVersion":"6"},` +
				`"spec":{"resources":{"requests":{"storage":"2Gi"}},"volumeAttributesClassName":"gold"}}`},
		{"only a label removed, and the record with it",
			plan.PVCPatch{ResourceVersion: "7", RemoveLabels: []string{"helm.sh/chart"},
				Annotations: map[string]string{plan.AnnotationStatefulSet: "web"}, RemoveAnnotations: []string{plan.AnnotationTemplateMetadata}},
			`{"metadata":{"annotations":{"csi-resizer.io/statefulset":"web","csi-resizer.io/template-metadata":null},"labels":{"helm.sh/chart":null},"resourceVersion":"7"},"spec":{}}`},
		{"no label change: no labels in the body",
			plan.PVCPatch{ResourceVersion: "8", To: resource.MustParse("3Gi"), Labels: map[string]string{}},
			`{"metadata":{"annotations":{},"resourceVersion":"8"},"spec":{"resources":{"requests":{"storage":"3Gi"}}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, err := pvcMergePatch(&tc.patch)
			if err != nil {
				t.Fatal(err)
			}
			if string(body) != tc.want {
				t.Errorf("got  %s\nwant %s", body, tc.want)
			}
			if !json.Valid(body) {
				t.Errorf("body is not JSON: %s", body)
			}
		})
	}
}

// Applied as a merge patch, the body changes only the keys it names: the
// PVC keeps its other labels and annotations (a person's, the storage
// system's), loses exactly the removed ones, and gets the request with them.
func TestPVCMergePatchKeepsOtherKeys(t *testing.T) {
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "data-web-0",
			Labels:      map[string]string{"app": "web", "team": "a", "old": "1"},
			Annotations: map[string]string{"pv.kubernetes.io/bind-completed": "yes", "backup": "daily", "gone": "z"}},
		Spec: corev1.PersistentVolumeClaimSpec{Resources: corev1.VolumeResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
	}
	c := &Controller{client: fake.NewClientset(pvc)}
	p := plan.PVCPatch{Namespace: "ns", Name: "data-web-0", From: resource.MustParse("1Gi"), To: resource.MustParse("2Gi"),
		Labels: map[string]string{"helm.sh/chart": "db-1.3"}, RemoveLabels: []string{"old"},
		Annotations: map[string]string{"note": "x"}, RemoveAnnotations: []string{"gone"}}
	if _, err := c.patchPVC(context.Background(), &p); err != nil {
		t.Fatal(err)
	}
	got, err := c.client.CoreV1().PersistentVolumeClaims("ns").Get(context.Background(), "data-web-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"app": "web", "team": "a", "helm.sh/chart": "db-1.3"}; !reflect.DeepEqual(got.Labels, want) {
		t.Errorf("labels %v, want %v", got.Labels, want)
	}
	if want := map[string]string{"pv.kubernetes.io/bind-completed": "yes", "backup": "daily", "note": "x"}; !reflect.DeepEqual(got.Annotations, want) {
		t.Errorf("annotations %v, want %v", got.Annotations, want)
	}
	if storage := got.Spec.Resources.Requests[corev1.ResourceStorage]; storage.String() != "2Gi" {
		t.Errorf("request %s, want 2Gi", &storage)
	}
}
