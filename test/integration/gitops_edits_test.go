//go:build integration

package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/desired"
	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// Finding 2 of issue 24 with the real clients: a size raised through the webhook, then, while
// the first replica's volume is still at its node step, a second write by the same client that
// changes something else. The old webhook took that second write for a re-statement of the live
// templates and cancelled the pending change: the second replica stayed at 1Gi and `wait`
// passed while the first was still growing.

// startGitOpsNodeStepEnv is startGitOpsEnv with a driver whose expansions need a node step: a
// volume stays NodeResizePending until the test plays the kubelet (FinishNodeExpansion).
func startGitOpsNodeStepEnv(t *testing.T) *gitopsEnv {
	t.Helper()
	e := scenario.Start(t, scenario.Options{Cluster: framework.ClusterOptions{ControllerManager: true},
		Mock: framework.MockDriverOptions{NodeExpansionRequired: true}})
	s := &stsEnv{Env: e, ssrKubeconfig: scenario.ApplyStatefulSetResizerRBAC(t, e.Cluster, e.Namespace)}
	s.StartStatefulSetResizer(t, s.ssrKubeconfig)
	return &gitopsEnv{stsEnv: s, webhook: s.StartWebhook(t)}
}

// kubectlEdit runs the real `kubectl edit` of the StatefulSet with an editor that applies the
// sed expression to the object's YAML, as a person would in vi.
func (g *gitopsEnv) kubectlEdit(t *testing.T, name, sedExpr string) {
	t.Helper()
	cmd := exec.Command(framework.Bin(t, "kubectl"), "--kubeconfig="+g.Cluster.Kubeconfig, "edit", "statefulset", name, "-n", g.Namespace)
	cmd.Env = append(os.Environ(), "KUBE_EDITOR=sed -i -e '"+sedExpr+"'")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl edit statefulset %s (%s): %v\n%s", name, sedExpr, err, out)
	}
}

// helmRelease runs the real helm on the test chart (testdata/gitops-chart) with values.
func (g *gitopsEnv) helmRelease(t *testing.T, helm, verb, name string, values ...string) string {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(os.TempDir(), "helm-home-"+g.Namespace)
	args := []string{verb, name, filepath.Join(root, "test", "integration", "testdata", "gitops-chart"),
		"--kubeconfig", g.Cluster.Kubeconfig, "--namespace", g.Namespace, "--set", "storageClassName=" + g.StorageClass}
	for _, v := range values {
		args = append(args, "--set", v)
	}
	cmd := exec.Command(helm, args...)
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// rollPods plays the kubelet through a rolling update of the StatefulSet's n pods: each pod the
// StatefulSet controller re-creates at the update revision is marked Running, highest ordinal
// first, as the controller replaces them.
func (g *gitopsEnv) rollPods(t *testing.T, name string, n int) {
	t.Helper()
	for i := n - 1; i >= 0; i-- {
		podName := scenario.PodName(name, i)
		framework.Eventually(t, stsTimeout, func() (bool, string) {
			sts, _ := g.StatefulSet(t, name)
			pod, err := g.Client.CoreV1().Pods(g.Namespace).Get(g.Ctx, podName, metav1.GetOptions{})
			if err != nil || pod.DeletionTimestamp != nil {
				return false, fmt.Sprintf("pod %s: %v (being replaced)", podName, err)
			}
			if rev := pod.Labels[appsv1.StatefulSetRevisionLabel]; rev != sts.Status.UpdateRevision || sts.Status.UpdateRevision == sts.Status.CurrentRevision {
				return false, fmt.Sprintf("pod %s at revision %s, update revision %s", podName, rev, sts.Status.UpdateRevision)
			}
			if pod.Status.Phase != v1.PodRunning {
				framework.MarkPodRunning(t, g.Ctx, g.Client, pod)
			}
			return true, ""
		})
	}
}

// The five clients (subtests, in parallel on one environment), each on its own 2-replica
// OrderedReady StatefulSet at 1Gi: kubectl edit twice (the second edit changes only
// revisionHistoryLimit), kubectl patch (a JSON patch of the size, then a merge patch of
// revisionHistoryLimit), kubectl apply client-side and server-side (the manifest at 2Gi, then
// the same manifest with another revisionHistoryLimit), and helm (upgrade to 2Gi, then an
// upgrade that changes only the image, which rolls the pods). After the second write the live
// object still has the 2Gi template, `wait` does not pass while the first volume is at its node
// step, and once the node steps are played both volumes are at 2Gi and `wait` exits 0.
func TestGitOpsSecondWriteKeepsPendingChange(t *testing.T) {
	helm := gitOpsHelm(t, repoRoot(t))
	g := startGitOpsNodeStepEnv(t)
	clients := []struct {
		name         string
		create       func(t *testing.T, sts *appsv1.StatefulSet)
		raise        func(t *testing.T, sts *appsv1.StatefulSet)
		second       func(t *testing.T, sts *appsv1.StatefulSet)
		rollsThePods bool
	}{
		{name: "edit",
			create: func(t *testing.T, sts *appsv1.StatefulSet) { g.apply(t, sts) },
			raise: func(t *testing.T, sts *appsv1.StatefulSet) {
				g.kubectlEdit(t, sts.Name, "s/storage: 1Gi/storage: 2Gi/")
			},
			second: func(t *testing.T, sts *appsv1.StatefulSet) {
				g.kubectlEdit(t, sts.Name, "s/revisionHistoryLimit: 10/revisionHistoryLimit: 5/")
			}},
		{name: "patch",
			create: func(t *testing.T, sts *appsv1.StatefulSet) { g.apply(t, sts) },
			raise: func(t *testing.T, sts *appsv1.StatefulSet) {
				g.kubectl(t, "patch", "statefulset", sts.Name, "--type=json", "-p",
					`[{"op":"replace","path":"/spec/volumeClaimTemplates/0/spec/resources/requests/storage","value":"2Gi"}]`)
			},
			second: func(t *testing.T, sts *appsv1.StatefulSet) {
				g.kubectl(t, "patch", "statefulset", sts.Name, "-p", `{"spec":{"revisionHistoryLimit":5}}`)
			}},
		{name: "csa",
			create: func(t *testing.T, sts *appsv1.StatefulSet) { g.apply(t, sts) },
			raise:  func(t *testing.T, sts *appsv1.StatefulSet) { scenario.WithSize("2Gi")(sts); g.apply(t, sts) },
			second: func(t *testing.T, sts *appsv1.StatefulSet) {
				sts.Spec.RevisionHistoryLimit = ptr.To[int32](5)
				g.apply(t, sts)
			}},
		{name: "ssa",
			create: func(t *testing.T, sts *appsv1.StatefulSet) { g.apply(t, sts, "--server-side") },
			raise: func(t *testing.T, sts *appsv1.StatefulSet) {
				scenario.WithSize("2Gi")(sts)
				g.apply(t, sts, "--server-side")
			},
			second: func(t *testing.T, sts *appsv1.StatefulSet) {
				sts.Spec.RevisionHistoryLimit = ptr.To[int32](5)
				g.apply(t, sts, "--server-side")
			}},
		{name: "helm",
			create: func(t *testing.T, sts *appsv1.StatefulSet) {
				g.helmRelease(t, helm, "install", sts.Name, "podManagementPolicy=OrderedReady")
			},
			raise: func(t *testing.T, sts *appsv1.StatefulSet) {
				g.helmRelease(t, helm, "upgrade", sts.Name, "podManagementPolicy=OrderedReady", "size=2Gi")
			},
			second: func(t *testing.T, sts *appsv1.StatefulSet) {
				g.helmRelease(t, helm, "upgrade", sts.Name, "podManagementPolicy=OrderedReady", "size=2Gi", "image=registry.k8s.io/pause:3.9")
			},
			rollsThePods: true},
	}
	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			sts := g.gitManifest(c.name, 2, appsv1.OrderedReadyPodManagement, "1Gi")
			g.createWithSpareBy(t, sts, 0, func() { c.create(t, sts) })
			old, _ := g.WaitTemplateStatus(t, c.name, stsTimeout, scenario.Finished)
			first, second := scenario.ClaimName(c.name, 0), scenario.ClaimName(c.name, 1)

			c.raise(t, sts)
			raised := g.waitRecreated(t, c.name, old.UID, "2Gi")
			g.WaitClaim(t, first, stsTimeout, scenario.InState(v1.PersistentVolumeClaimNodeResizePending))
			c.second(t, sts)
			waiting := g.StartWait(t, g.ssrKubeconfig, c.name, "--timeout", stsTimeout.String())
			if c.rollsThePods {
				g.rollPods(t, c.name, 2)
			}
			framework.Consistently(t, 3*time.Second, func() (bool, string) {
				cur, _ := g.StatefulSet(t, c.name)
				size := cur.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests.Storage().String()
				_, pending := cur.Annotations[desired.Annotation]
				if waiting.Exited() {
					return false, fmt.Sprintf("wait ended while %s is at its node step: %s", first, waiting.Result(t))
				}
				return size == "2Gi" && !pending, fmt.Sprintf("after the second write: template %s, desire pending %v; want 2Gi live", size, pending)
			})
			for _, claim := range []string{first, second} {
				g.WaitClaim(t, claim, stsTimeout, func(pvc *v1.PersistentVolumeClaim) (bool, string) {
					g.FinishNodeExpansion(t, claim)
					return scenario.Done("2Gi")(g.PVC(t, claim))
				})
			}
			if r := waiting.Result(t); r.Code != 0 {
				t.Fatalf("wait: %s; want exit 0 once both volumes are at 2Gi", r)
			}
			if cur, _ := g.StatefulSet(t, c.name); cur.UID != raised.UID {
				t.Errorf("re-created again by the second write: uid %s, want %s", cur.UID, raised.UID)
			}
		})
	}
}

// kubectl runs kubectl with the admin kubeconfig in the test's namespace; it must succeed.
func (g *gitopsEnv) kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := g.Cluster.Kubectl(t, append(args, "-n", g.Namespace)...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// Finding 3 with the real helm, on a chart that spells out the fields the apiserver adds to a
// template (apiVersion, kind, volumeMode, status): `helm upgrade` to a size the driver refuses,
// then back to the previous size. The StatefulSet is re-created with each, so Helm's three-way
// patch of the revert is not empty. Nothing reports "done" while the PVC still requests the
// refused size: `wait` exits 1, and its message, the status annotation and a Warning event name
// the PVC and the smallest size that recovers (above the capacity). An upgrade to that kind of
// size recovers, and `wait` exits 0.
func TestGitOpsHelmRevertFromInfeasible(t *testing.T) {
	helm := gitOpsHelm(t, repoRoot(t))
	g := startGitOpsEnv(t)
	values := []string{"replicas=1", "spelledOut=true"}
	sts := g.gitManifest("db", 1, appsv1.ParallelPodManagement, "1Gi")
	ids := g.createWithSpareBy(t, sts, 0, func() { g.helmRelease(t, helm, "install", "db", values...) })
	old, _ := g.WaitTemplateStatus(t, "db", stsTimeout, scenario.Finished)
	claim := scenario.ClaimName("db", 0)
	const driverMessage = "no such size in this pool"
	g.Driver.SetFaults(t, []framework.Fault{{Method: "ControllerExpandVolume", Code: codes.OutOfRange, Message: driverMessage,
		VolumeID: ids[claim], MinRequiredBytes: 50 << 30}})

	g.helmRelease(t, helm, "upgrade", "db", append(values, "size=100Gi")...)
	refused := g.infeasibleRecreated(t, "db", claim, driverMessage, old.UID, "100Gi")

	g.helmRelease(t, helm, "upgrade", "db", append(values, "size=1Gi")...)
	reverted := g.waitRecreated(t, "db", refused.UID, "1Gi")
	r := g.wait(t, "db")
	if r.Code != 1 || !strings.Contains(r.Stderr, claim) || !strings.Contains(r.Stderr, "1025Mi") || !strings.Contains(r.Stderr, driverMessage) {
		t.Fatalf("wait after the revert: %s; want exit 1 naming %s, the driver's message and 1025Mi", r, claim)
	}
	if req := scenario.Request(g.PVC(t, claim)); req != "100Gi" {
		t.Errorf("%s requests %s after the revert, want the refused 100Gi still (a request cannot go down to the capacity)", claim, req)
	}
	g.WaitStatefulSetEvent(t, "db", "VolumeResizeInfeasible", stsTimeout, claim, "1025Mi")
	_, st := g.StatefulSet(t, "db")
	if st == nil || st.Templates[0].InfeasibleReplicas != 1 || !strings.Contains(st.Templates[0].Message, "1025Mi") {
		t.Errorf("status after the revert: %+v; want 1 infeasible replica and the size that recovers", st)
	}

	g.helmRelease(t, helm, "upgrade", "db", append(values, "size=2Gi")...)
	g.waitRecreated(t, "db", reverted.UID, "2Gi")
	g.waitDone(t, claim, "2Gi")
	if r := g.wait(t, "db"); r.Code != 0 {
		t.Errorf("wait after an upgrade above the capacity: %s; want exit 0", r)
	}
}

// Item 5 of issue 24 with the real helm: a chart that puts its version into the volume claim
// template's labels, as many do. Without the webhook every upgrade of the chart would fail with
// the apiserver's "Forbidden: updates to statefulset spec"; with it, the upgrade succeeds (Helm
// prints the webhook's warning), the StatefulSet is re-created with the new labels, and the PVCs
// get them, a label a person put on a PVC is kept, and a label the template drops is removed
// from the PVCs only because statefulset-resizer had set it.
func TestGitOpsTemplateLabels(t *testing.T) {
	helm := gitOpsHelm(t, repoRoot(t))
	g := startGitOpsEnv(t)
	chart := func(version string, extra ...string) []string {
		return append([]string{"replicas=2", `templateLabels.helm\.sh/chart=db-` + version}, extra...)
	}
	sts := g.gitManifest("db", 2, appsv1.ParallelPodManagement, "1Gi")
	g.createWithSpareBy(t, sts, 0, func() { g.helmRelease(t, helm, "install", "db", chart("1.0")...) })
	old, _ := g.WaitTemplateStatus(t, "db", stsTimeout, scenario.Finished)
	claims := []string{scenario.ClaimName("db", 0), scenario.ClaimName("db", 1)}
	pvc := g.PVC(t, claims[0])
	pvc.Labels["backup"] = "daily"
	if _, err := g.Client.CoreV1().PersistentVolumeClaims(g.Namespace).Update(g.Ctx, pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	out := g.helmRelease(t, helm, "upgrade", "db", chart("1.1", "templateLabels.tier=gold")...)
	if !strings.Contains(out, "statefulset-resizer:") {
		t.Errorf("helm upgrade printed no warning of the webhook:\n%s", out)
	}
	recreated := g.waitRecreated(t, "db", old.UID, "1Gi")
	if l := recreated.Spec.VolumeClaimTemplates[0].Labels; l["helm.sh/chart"] != "db-1.1" || l["tier"] != "gold" {
		t.Errorf("re-created template labels %v, want the chart's db-1.1 and tier=gold", l)
	}
	labels := func(want map[string]string, absent ...string) {
		t.Helper()
		for _, claim := range claims {
			g.WaitClaim(t, claim, stsTimeout, func(pvc *v1.PersistentVolumeClaim) (bool, string) {
				for k, v := range want {
					if pvc.Labels[k] != v {
						return false, fmt.Sprintf("labels %v, want %s=%s", pvc.Labels, k, v)
					}
				}
				for _, k := range absent {
					if _, ok := pvc.Labels[k]; ok {
						return false, fmt.Sprintf("labels %v, want no %s", pvc.Labels, k)
					}
				}
				return true, ""
			})
		}
	}
	labels(map[string]string{"helm.sh/chart": "db-1.1", "tier": "gold"})
	if got := g.PVC(t, claims[0]).Labels["backup"]; got != "daily" {
		t.Errorf("%s: backup=%q, want the person's label kept", claims[0], got)
	}
	if r := g.wait(t, "db"); r.Code != 0 {
		t.Errorf("wait after the label change: %s; want exit 0", r)
	}

	g.helmRelease(t, helm, "upgrade", "db", chart("1.2")...)
	g.waitRecreated(t, "db", recreated.UID, "1Gi")
	labels(map[string]string{"helm.sh/chart": "db-1.2"}, "tier")
	if got := g.PVC(t, claims[0]).Labels["backup"]; got != "daily" {
		t.Errorf("%s: backup=%q after the template dropped tier, want the person's label kept", claims[0], got)
	}
	if r := g.wait(t, "db"); r.Code != 0 {
		t.Errorf("wait after the label was dropped: %s; want exit 0", r)
	}
}
