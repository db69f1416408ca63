//go:build integration

package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/plan"
	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// startGitOpsClassEnv is startGitOpsEnv with a driver that modifies volumes (and refuses the
// class "bad") and the classes "gold" and "bad" of that driver.
func startGitOpsClassEnv(t *testing.T) *gitopsEnv {
	t.Helper()
	e := scenario.Start(t, scenario.Options{Cluster: framework.ClusterOptions{ControllerManager: true},
		Mock: framework.MockDriverOptions{ModifyVolume: true, Faults: []framework.Fault{infeasibleFault}}})
	s := &stsEnv{Env: e, ssrKubeconfig: scenario.ApplyStatefulSetResizerRBAC(t, e.Cluster, e.Namespace)}
	e.CreateClass(t, "gold", gold)
	e.CreateClass(t, "bad", bad)
	s.StartStatefulSetResizer(t, s.ssrKubeconfig)
	return &gitopsEnv{stsEnv: s, webhook: s.StartWebhook(t)}
}

// The GitOps path for a template's VolumeAttributesClass (docs/design.md §3.9 and §3.10): a
// class the driver refuses is applied (the apply succeeds), the StatefulSet is re-created with
// it and `wait` exits 1 with the driver's message; reverting it in Git re-creates the
// StatefulSet without it, rolls the PVC's class back and `wait` exits 0 with the live object
// equal to the manifest; a class the driver gives is applied, the StatefulSet is re-created with
// it (pods adopted), the volumes get it and it equals the manifest. Removing the class from Git
// afterwards is taken too: the template says "no class", the volumes keep theirs (a class that
// took effect cannot be unset), and `wait` passes with a note.
func TestGitOpsClass(t *testing.T) {
	g := startGitOpsClassEnv(t)
	sts := g.gitManifest("web", 2, appsv1.OrderedReadyPodManagement, "1Gi")
	g.createWithSpareBy(t, sts, 0, func() { g.apply(t, sts) })
	old, _ := g.WaitTemplateStatus(t, "web", stsTimeout, scenario.Finished)
	before := g.pods(t, "web", 2)
	first := scenario.ClaimName("web", 0)

	sts.Spec.VolumeClaimTemplates[0].Spec.VolumeAttributesClassName = ptr.To("bad")
	g.apply(t, sts)
	bad := g.infeasibleRecreated(t, "web", first, infeasibleFault.Message, old.UID, "1Gi")
	g.equalsManifest(t, sts)
	g.WaitStatefulSetEvent(t, "web", plan.EventVolumeModifyInfeasible, stsTimeout, first, infeasibleFault.Message)
	second := scenario.ClaimName("web", 1)
	framework.Consistently(t, 3*time.Second, func() (bool, string) {
		c := g.PVC(t, second).Spec.VolumeAttributesClassName
		return c == nil, fmt.Sprintf("%s class %v: want it held back (OrderedReady) behind the infeasible first replica", second, c)
	})

	sts.Spec.VolumeClaimTemplates[0].Spec.VolumeAttributesClassName = nil
	g.apply(t, sts)
	reverted := g.waitRecreated(t, "web", bad.UID, "1Gi")
	g.WaitClaim(t, first, stsTimeout, func(pvc *v1.PersistentVolumeClaim) (bool, string) {
		ok, why := scenario.ModifiedTo("")(pvc)
		return ok && pvc.Spec.VolumeAttributesClassName == nil, why + ", and the class unset"
	})
	if r := g.wait(t, "web"); r.Code != 0 {
		t.Fatalf("wait after the class was reverted in Git: %s; want exit 0", r)
	}
	g.equalsManifest(t, sts)

	sts.Spec.VolumeClaimTemplates[0].Spec.VolumeAttributesClassName = ptr.To("gold")
	g.apply(t, sts)
	recreated := g.waitRecreated(t, "web", reverted.UID, "1Gi")
	for i := 0; i < 2; i++ {
		g.WaitClaim(t, scenario.ClaimName("web", i), stsTimeout, scenario.ModifiedTo("gold"))
	}
	if r := g.wait(t, "web"); r.Code != 0 {
		t.Errorf("wait after the class was set: %s; want exit 0", r)
	}
	g.checkAdopted(t, "web", before, recreated.UID)
	g.equalsManifest(t, sts)

	sts.Spec.VolumeClaimTemplates[0].Spec.VolumeAttributesClassName = nil
	g.apply(t, sts)
	g.waitRecreated(t, "web", recreated.UID, "1Gi")
	r := g.wait(t, "web")
	if r.Code != 0 || !strings.Contains(r.Stdout+r.Stderr, "refuses to unset") {
		t.Errorf("wait after the class was removed from Git: %s; want exit 0 with the note that the volumes keep gold", r)
	}
	for i := 0; i < 2; i++ {
		if c := g.PVC(t, scenario.ClaimName("web", i)).Spec.VolumeAttributesClassName; c == nil || *c != "gold" {
			t.Errorf("%s class %v, want gold kept", scenario.ClaimName("web", i), c)
		}
	}
	g.equalsManifest(t, sts)
}
