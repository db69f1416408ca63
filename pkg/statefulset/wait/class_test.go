package wait

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/desired"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/plan"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/status"
)

// A class recorded by the webhook that the driver refuses: the controller's
// status (plan.Decide over the PVC the resizer marked Infeasible) makes
// `wait` exit 1 with the driver's message; while the modification is only in
// progress it keeps waiting, and once the class is current it passes.
func TestWaitOnAClass(t *testing.T) {
	const desire = `[{"name":"data","storage":"1Gi","volumeAttributesClassName":"gold"}]`
	set := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "uid-1", Generation: 1,
			Annotations: map[string]string{desired.Annotation: desire}},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{Resources: corev1.VolumeResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}},
			PodManagementPolicy: appsv1.ParallelPodManagement,
		},
		Status: appsv1.StatefulSetStatus{ObservedGeneration: 1, UpdateRevision: "r1"},
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-0",
		Labels: map[string]string{"app": "web", appsv1.StatefulSetRevisionLabel: "r1"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "data-web-0"},
		Spec: corev1.PersistentVolumeClaimSpec{VolumeAttributesClassName: ptr.To("gold"),
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound,
			Capacity:           corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			ModifyVolumeStatus: &corev1.ModifyVolumeStatus{Status: corev1.PersistentVolumeClaimModifyVolumeInProgress, TargetVolumeAttributesClassName: "gold"}}}

	evaluate := func() Verdict {
		t.Helper()
		ds, _, err := desired.FromStatefulSet(set)
		if err != nil {
			t.Fatal(err)
		}
		templates, err := desired.Apply(set.Spec.VolumeClaimTemplates, ds)
		if err != nil {
			t.Fatal(err)
		}
		d := plan.Decide(plan.Input{StatefulSet: set, Templates: templates, Desired: desire,
			Pods: map[string]*corev1.Pod{pod.Name: pod}, PVCs: map[string]*corev1.PersistentVolumeClaim{pvc.Name: pvc}})
		value, err := d.Status().Encode()
		if err != nil {
			t.Fatal(err)
		}
		set.Annotations[status.Annotation] = value
		return Evaluate(set)
	}

	if v := evaluate(); v.Done || !strings.Contains(v.Message, "0 of 1 replicas ready") {
		t.Errorf("modifying: %+v, want not done", v)
	}

	pvc.Status.ModifyVolumeStatus.Status = corev1.PersistentVolumeClaimModifyVolumeInfeasible
	pvc.Status.Conditions = []corev1.PersistentVolumeClaimCondition{{Type: corev1.PersistentVolumeClaimVolumeModifyVolumeError,
		Status: corev1.ConditionTrue, Reason: "InvalidArgument", Message: "tier gold is not offered"}}
	v := evaluate()
	if !v.Done || v.Outcome != Infeasible || !strings.Contains(v.Message, `data-web-0: cannot modify the volume to VolumeAttributesClass "gold": InvalidArgument: tier gold is not offered`) {
		t.Errorf("infeasible: %+v, want exit 1 with the driver's message", v)
	}

	pvc.Status.ModifyVolumeStatus, pvc.Status.Conditions = nil, nil
	pvc.Status.CurrentVolumeAttributesClassName = ptr.To("gold")
	if v := evaluate(); !v.Done || v.Outcome != Finished {
		t.Errorf("class current: %+v, want finished", v)
	}
}
