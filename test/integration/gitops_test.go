//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	appsv1 "k8s.io/api/apps/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/utils/ptr"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/desired"
	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// The GitOps path end to end (issue 18): the user changes a volumeClaimTemplates size in Git and
// the pipeline applies it. A `statefulset-resizer webhook` process serves the admission webhook
// (registered by URL on 127.0.0.1, CA bundle injected by the process) and another process runs
// the controller, each with its shipped ServiceAccount and RBAC, on the environment of statefulset_test.go (kube-controller-manager,
// csi-resizer, the mock driver). kubectl is the pipeline: the apply must succeed, the PVCs
// grow, the StatefulSet is re-created, and the live object ends equal to the manifest.

type gitopsEnv struct {
	*stsEnv
	webhook *scenario.Webhook
}

func startGitOpsEnv(t *testing.T) *gitopsEnv {
	t.Helper()
	s := startSTSEnv(t)
	s.StartStatefulSetResizer(t, s.ssrKubeconfig)
	return &gitopsEnv{stsEnv: s, webhook: s.StartWebhook(t)}
}

// gitManifest is the StatefulSet a team keeps in Git: opted in by its label, at size.
func (g *gitopsEnv) gitManifest(name string, replicas int32, policy appsv1.PodManagementPolicyType, size string) *appsv1.StatefulSet {
	sts := g.NewStatefulSet(scenario.StatefulSetOptions{Name: name, Replicas: replicas, Policy: policy, Size: size})
	sts.Labels = map[string]string{desired.OptInLabel: desired.OptInValue}
	return sts
}

// apply runs `kubectl apply -f -` of the manifest of sts with the extra flags (e.g.
// --server-side), which must succeed.
func (g *gitopsEnv) apply(t *testing.T, sts *appsv1.StatefulSet, flags ...string) {
	t.Helper()
	args := append([]string{"apply", "-f", "-"}, flags...)
	if out, err := g.Cluster.KubectlWithInput(t, manifest(t, sts), args...); err != nil {
		t.Fatalf("kubectl %s of %s: %v\n%s", strings.Join(args, " "), sts.Name, err, out)
	}
}

// equalsManifest checks that the live object is what Git says: its spec is the manifest's spec
// as the apiserver defaults it (a server dry-run create of the manifest under another name: an
// UPDATE dry run such as `kubectl diff` goes through the webhook, whose answer keeps the live
// templates, so it would show no drift while a desire is pending), its labels are the
// manifest's, and no desired annotation is left.
func (g *gitopsEnv) equalsManifest(t *testing.T, sts *appsv1.StatefulSet) {
	t.Helper()
	probe := sts.DeepCopy()
	probe.Name = sts.Name + "-defaulted"
	out, err := g.Cluster.KubectlWithInput(t, manifest(t, probe), "create", "--dry-run=server", "-o", "json", "-f", "-")
	if err != nil {
		t.Fatalf("server dry-run create of the manifest of %s: %v\n%s", sts.Name, err, out)
	}
	var want appsv1.StatefulSet
	if err := json.Unmarshal([]byte(out), &want); err != nil {
		t.Fatalf("server dry-run create of the manifest of %s: %v\n%s", sts.Name, err, out)
	}
	live, _ := g.StatefulSet(t, sts.Name)
	// kubectl's output carries the templates' kind and apiVersion, what the typed client
	// reads does not: a difference of encoding, not of the spec.
	for i := range want.Spec.VolumeClaimTemplates {
		want.Spec.VolumeClaimTemplates[i].TypeMeta = metav1.TypeMeta{}
	}
	if !apiequality.Semantic.DeepEqual(live.Spec, want.Spec) {
		t.Errorf("%s: the live spec is not the manifest's (- live, + manifest):\n%s", sts.Name, diff.Diff(live.Spec, want.Spec))
	}
	if !apiequality.Semantic.DeepEqual(live.Labels, sts.Labels) {
		t.Errorf("%s: labels %v, the manifest says %v", sts.Name, live.Labels, sts.Labels)
	}
	if v, ok := live.Annotations[desired.Annotation]; ok {
		t.Errorf("%s: annotation %s=%s left on the live object", sts.Name, desired.Annotation, v)
	}
}

// A 2-replica StatefulSet made by `kubectl apply`; the next apply raises the template to 2Gi,
// scales to 3 and adds a label: it succeeds, `wait` (started right after) exits 0 for the
// re-created object, every PVC (the new replica's too) is at 2Gi, the pods of the original
// replicas are adopted, and the live object equals the manifest. A later apply of another
// replica count works as usual (field ownership kept through the re-create; server-side
// without --force-conflicts). Client-side and server-side apply, one StatefulSet each.
func TestGitOpsApply(t *testing.T) {
	g := startGitOpsEnv(t)
	for _, c := range []struct {
		name  string
		flags []string
	}{{"csa", nil}, {"ssa", []string{"--server-side"}}} {
		t.Run(c.name, func(t *testing.T) {
			sts := g.gitManifest(c.name, 2, appsv1.ParallelPodManagement, "1Gi")
			g.createWithSpareBy(t, sts, 1, func() { g.apply(t, sts, c.flags...) })
			old, _ := g.WaitTemplateStatus(t, c.name, stsTimeout, scenario.Finished)
			before := g.pods(t, c.name, 2)

			scenario.WithSize("2Gi")(sts)
			sts.Spec.Replicas = ptr.To[int32](3)
			sts.Labels["tier"] = "db"
			g.apply(t, sts, c.flags...)
			waiting := g.StartWait(t, g.ssrKubeconfig, c.name, "--timeout", stsTimeout.String())
			g.RunPod(t, c.name, 2)
			for i := 0; i < 3; i++ {
				g.waitDone(t, scenario.ClaimName(c.name, i), "2Gi")
			}
			recreated := g.waitRecreated(t, c.name, old.UID, "2Gi")
			if r := waiting.Result(t); r.Code != 0 || !strings.Contains(r.Stdout, "finished for generation 1") {
				t.Fatalf("wait: %s; want exit 0, finished for generation 1 (the re-created object)", r)
			}
			g.checkAdopted(t, c.name, before, recreated.UID)
			g.equalsManifest(t, sts)

			sts.Spec.Replicas = ptr.To[int32](2)
			g.apply(t, sts, c.flags...)
			g.equalsManifest(t, sts)
		})
	}
}

// A size the driver refuses: the apply succeeds (the webhook records it), the StatefulSet is
// re-created with it (the live object says what Git says), and `wait` exits 1 with the driver's
// message. Lowering the size in Git to one the driver gives recovers: the StatefulSet is
// re-created with it, the PVC goes down to it and grows, the pods are adopted, `wait` exits 0
// and the live object equals the manifest.
func TestGitOpsInfeasible(t *testing.T) {
	g := startGitOpsEnv(t)
	sts := g.gitManifest("web", 1, appsv1.OrderedReadyPodManagement, "1Gi")
	ids := g.createWithSpareBy(t, sts, 0, func() { g.apply(t, sts) })
	old, _ := g.WaitTemplateStatus(t, "web", stsTimeout, scenario.Finished)
	before := g.pods(t, "web", 1)
	const driverMessage = "no such size in this pool"
	claim := scenario.ClaimName("web", 0)
	g.Driver.SetFaults(t, []framework.Fault{{Method: "ControllerExpandVolume", Code: codes.OutOfRange, Message: driverMessage,
		VolumeID: ids[claim], MinRequiredBytes: 50 << 30}})

	scenario.WithSize("100Gi")(sts)
	g.apply(t, sts)
	infeasible := g.infeasibleRecreated(t, "web", claim, driverMessage, old.UID, "100Gi")
	g.equalsManifest(t, sts)

	scenario.WithSize("2Gi")(sts)
	g.apply(t, sts)
	g.waitDone(t, claim, "2Gi")
	recreated := g.waitRecreated(t, "web", infeasible.UID, "2Gi")
	if r := g.wait(t, "web"); r.Code != 0 {
		t.Errorf("wait after the size was lowered in Git: %s; want exit 0", r)
	}
	g.checkAdopted(t, "web", before, recreated.UID)
	g.equalsManifest(t, sts)
}

// repoRoot is the repository's root directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// gitOpsHelm returns $HELM, else the helm that hack/build-helm.sh built (cached). When it has
// not been built, the test is skipped, except under CI=true, where it is built (and a failed
// build fails the test).
func gitOpsHelm(t *testing.T, root string) string {
	t.Helper()
	if p := os.Getenv("HELM"); p != "" {
		return p
	}
	out, err := exec.Command("bash", filepath.Join(root, "hack", "build-helm.sh"), "--print-path").Output()
	path := strings.TrimSpace(string(out))
	if _, statErr := os.Stat(path); err == nil && statErr == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		return helmBinary(t, root)
	}
	if err != nil {
		path = err.Error()
	}
	t.Skipf("helm is not built (%s): run `bash hack/build-helm.sh` (a few minutes, from the Go module proxy) or set HELM", path)
	return ""
}

// Helm 3 as the pipeline: a chart with an opted-in StatefulSet whose size is a value.
// `helm upgrade --set size=2Gi` succeeds, the PVCs grow, the StatefulSet is re-created with the
// pods adopted and equals the chart's render; `helm upgrade` with the same values again
// succeeds and changes nothing, and a later upgrade with another replica count succeeds: Helm 3's
// three-way merge patch works on the re-created object. (Helm 3 patches, it does not apply
// server-side, so field ownership is not at stake here; TestGitOpsApply/ssa covers it.)
func TestGitOpsHelmUpgrade(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	helm := gitOpsHelm(t, root)
	g := startGitOpsEnv(t)
	chart := filepath.Join(root, "test", "integration", "testdata", "gitops-chart")
	home := t.TempDir()
	release := func(verb string, replicas int32, size string) {
		t.Helper()
		args := []string{verb, "db", chart, "--kubeconfig", g.Cluster.Kubeconfig, "--namespace", g.Namespace,
			"--set", "storageClassName=" + g.StorageClass, "--set", fmt.Sprintf("replicas=%d", replicas), "--set", "size=" + size}
		cmd := exec.Command(helm, args...)
		cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+filepath.Join(home, "config"),
			"HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// The chart's render, with the label Helm adds to what it manages.
	sts := g.gitManifest("db", 2, appsv1.ParallelPodManagement, "1Gi")
	sts.Labels["app.kubernetes.io/managed-by"] = "Helm"
	g.createWithSpareBy(t, sts, 0, func() { release("install", 2, "1Gi") })
	old, _ := g.WaitTemplateStatus(t, "db", stsTimeout, scenario.Finished)
	before := g.pods(t, "db", 2)

	release("upgrade", 2, "2Gi")
	scenario.WithSize("2Gi")(sts)
	waiting := g.StartWait(t, g.ssrKubeconfig, "db", "--timeout", stsTimeout.String())
	for i := 0; i < 2; i++ {
		g.waitDone(t, scenario.ClaimName("db", i), "2Gi")
	}
	recreated := g.waitRecreated(t, "db", old.UID, "2Gi")
	if r := waiting.Result(t); r.Code != 0 || !strings.Contains(r.Stdout, "finished for generation 1") {
		t.Fatalf("wait: %s; want exit 0, finished for generation 1 (the re-created object)", r)
	}
	g.checkAdopted(t, "db", before, recreated.UID)
	g.equalsManifest(t, sts)

	release("upgrade", 2, "2Gi")
	if cur, _ := g.StatefulSet(t, "db"); cur.UID != recreated.UID || cur.Generation != recreated.Generation {
		t.Errorf("helm upgrade with the same values: uid %s generation %d, want %s at %d unchanged", cur.UID, cur.Generation, recreated.UID, recreated.Generation)
	}
	g.equalsManifest(t, sts)

	release("upgrade", 1, "2Gi")
	sts.Spec.Replicas = ptr.To[int32](1)
	g.equalsManifest(t, sts)
}
