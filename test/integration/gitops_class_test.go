//go:build integration

package integration

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

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
	return &gitopsEnv{stsEnv: s, webhook: s.StartWebhook(t, s.ssrKubeconfig)}
}

// The GitOps path for a template's VolumeAttributesClass (docs/design.md §3.9 and §3.10): a
// class the driver refuses is applied (the apply succeeds), `wait` exits 1 with the driver's
// message and nothing is re-created; reverting it in Git rolls the PVC's class back and `wait`
// exits 0 with the live object equal to the manifest; a class the driver gives is applied, the
// volumes get it, the StatefulSet is re-created with it (pods adopted) and equals the manifest.
// Removing the class from Git afterwards gets the apiserver's usual error: a class cannot be
// taken from the volumes.
func TestGitOpsClass(t *testing.T) {
	g := startGitOpsClassEnv(t)
	sts := g.gitManifest("web", 2, appsv1.OrderedReadyPodManagement, "1Gi")
	g.createWithSpareBy(t, sts, 0, func() { g.apply(t, sts) })
	old, _ := g.WaitTemplateStatus(t, "web", stsTimeout, scenario.Finished)
	before := g.pods(t, "web", 2)
	first := scenario.ClaimName("web", 0)

	sts.Spec.VolumeClaimTemplates[0].Spec.VolumeAttributesClassName = ptr.To("bad")
	g.apply(t, sts)
	g.infeasibleNotRecreated(t, "web", first, infeasibleFault.Message, old.UID)

	sts.Spec.VolumeClaimTemplates[0].Spec.VolumeAttributesClassName = nil
	g.apply(t, sts)
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
	for i := 0; i < 2; i++ {
		g.WaitClaim(t, scenario.ClaimName("web", i), stsTimeout, scenario.ModifiedTo("gold"))
	}
	recreated := g.waitRecreated(t, "web", old.UID, "1Gi")
	if r := g.wait(t, "web"); r.Code != 0 {
		t.Errorf("wait after the class was set: %s; want exit 0", r)
	}
	g.checkAdopted(t, "web", before, recreated.UID)
	g.equalsManifest(t, sts)

	noClass := sts.DeepCopy()
	noClass.Spec.VolumeClaimTemplates[0].Spec.VolumeAttributesClassName = nil
	out, err := g.Cluster.KubectlWithInput(t, manifest(t, noClass), "apply", "-f", "-")
	if err == nil || !strings.Contains(out+err.Error(), forbiddenTemplates) {
		t.Errorf("apply removing the class: err %v, output %s; want the apiserver's Forbidden", err, out)
	}
	g.equalsManifest(t, sts)
}
