//go:build integration

package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/desired"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/plan"
	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// classDesire is the desired-templates annotation for the template at 1Gi with class.
func classDesire(t *testing.T, class string) string {
	t.Helper()
	v, err := desired.Format([]desired.Template{{Name: scenario.TemplateName, Storage: resource.MustParse("1Gi"), VolumeAttributesClassName: ptr.To(class)}})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// The VolumeAttributesClass of a StatefulSet's volumes (docs/design.md §3.10) on the real
// control plane, csi-resizer and the mock driver with ControllerModifyVolume. The desire is
// written to the annotation directly (as the webhook would record it). A class the driver
// refuses: the first replica's PVC gets it, the resizer marks it Infeasible, `wait` exits 1
// with the driver's message, the second replica is held back (OrderedReady) and nothing is
// re-created. The desire is withdrawn (Git reverted): the class is unset again on the real
// apiserver (allowed, no class being current), the resizer cancels the modification, the
// episode's annotations are gone and `wait` exits 0. Then a class the driver gives: both
// volumes are modified in order, the StatefulSet is re-created with the class in its template,
// and `wait` exits 0.
func TestStatefulSetClass(t *testing.T) {
	e := scenario.Start(t, scenario.Options{Cluster: framework.ClusterOptions{ControllerManager: true},
		Mock: framework.MockDriverOptions{ModifyVolume: true, Faults: []framework.Fault{infeasibleFault}}})
	s := &stsEnv{Env: e, ssrKubeconfig: scenario.ApplyStatefulSetResizerRBAC(t, e.Cluster, e.Namespace)}
	e.CreateClass(t, "gold", gold)
	e.CreateClass(t, "bad", bad)
	s.StartStatefulSetResizer(t, s.ssrKubeconfig)
	s.createWithSpare(t, s.NewStatefulSet(scenario.StatefulSetOptions{Name: "web", Replicas: 2, Policy: appsv1.OrderedReadyPodManagement, Size: "1Gi"}), 0)
	old, _ := s.WaitTemplateStatus(t, "web", stsTimeout, scenario.Finished)
	first, second := scenario.ClaimName("web", 0), scenario.ClaimName("web", 1)

	s.setDesire(t, "web", classDesire(t, "bad"), nil)
	s.WaitClaim(t, first, stsTimeout, infeasible("bad"))
	r := s.wait(t, "web")
	if r.Code != 1 || !strings.Contains(r.Stderr, infeasibleFault.Message) || !strings.Contains(r.Stderr, first) {
		t.Fatalf("wait: %s; want exit 1 naming %s and the driver's message", r, first)
	}
	s.WaitStatefulSetEvent(t, "web", plan.EventVolumeModifyInfeasible, stsTimeout, first, infeasibleFault.Message)
	framework.Consistently(t, 3*time.Second, func() (bool, string) {
		cur, _ := s.StatefulSet(t, "web")
		held := s.PVC(t, second).Spec.VolumeAttributesClassName == nil
		return cur.UID == old.UID && s.recordOf(t, "web") == nil && held,
			fmt.Sprintf("uid %s (was %s), record %v, %s class %v: want no re-create and the second replica held back",
				cur.UID, old.UID, s.recordOf(t, "web") != nil, second, s.PVC(t, second).Spec.VolumeAttributesClassName)
	})

	s.setDesire(t, "web", "", nil)
	pvc := s.WaitClaim(t, first, stsTimeout, func(pvc *v1.PersistentVolumeClaim) (bool, string) {
		ok, why := scenario.ModifiedTo("")(pvc)
		return ok && pvc.Spec.VolumeAttributesClassName == nil, why + ", and the class unset"
	})
	for _, k := range []string{plan.AnnotationModifiedClass, plan.AnnotationPreModifyClass} {
		if v, ok := pvc.Annotations[k]; ok {
			t.Errorf("%s: annotation %s=%q left after the rollback", first, k, v)
		}
	}
	if r := s.wait(t, "web"); r.Code != 0 {
		t.Fatalf("wait after the desire was withdrawn: %s; want exit 0", r)
	}

	s.setDesire(t, "web", classDesire(t, "gold"), nil)
	for _, claim := range []string{first, second} {
		pvc := s.WaitClaim(t, claim, stsTimeout, scenario.ModifiedTo("gold"))
		if got := pvc.Annotations[plan.AnnotationModifiedClass]; got != "gold" || scenario.Request(pvc) != "1Gi" {
			t.Errorf("%s: %s=%q, request %s; want gold and the request unchanged", claim, plan.AnnotationModifiedClass, got, scenario.Request(pvc))
		}
	}
	recreated := s.waitRecreated(t, "web", old.UID, "1Gi")
	if c := recreated.Spec.VolumeClaimTemplates[0].Spec.VolumeAttributesClassName; c == nil || *c != "gold" {
		t.Errorf("re-created template class %v, want gold", c)
	}
	if r := s.wait(t, "web"); r.Code != 0 {
		t.Errorf("wait after the class was set: %s; want exit 0", r)
	}
}
