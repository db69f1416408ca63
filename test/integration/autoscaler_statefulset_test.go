//go:build integration

package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/csi-resizer/csi-resizer/pkg/autoscale/policy"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/status"
	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// TestStatefulSetResizerKeepsWhatTheAutoscalerRaised: volume-autoscaler and statefulset-resizer on
// one StatefulSet, each as the shipped ServiceAccount, with csi-resizer doing the resizes. The
// autoscaler grows both replicas' PVCs as they fill (1Gi -> 2Gi).
// While those resizes are still in flight (csi-resizer stopped: capacity 1Gi), the template grows
// to 1536Mi, above the capacity and below the autoscaler's request: statefulset-resizer could
// lower the request to 1536Mi, and must not (KEP-4650's rule: a PVC keeps the larger of the
// template and its own request; only a request statefulset-resizer raised is its to lower). Once
// the resizes finish the StatefulSet is reported finished. A replica added by a scale-up starts
// at the template's 1536Mi, the autoscaler raises it at once to the 2Gi its siblings were grown
// to (it is new: created after they grew), and statefulset-resizer leaves that alone too.
func TestStatefulSetResizerKeepsWhatTheAutoscalerRaised(t *testing.T) {
	s := startSTSEnv(t)
	s.StartStatefulSetResizer(t, s.ssrKubeconfig)
	sts := s.NewStatefulSet(scenario.StatefulSetOptions{Name: "web", Replicas: 2, Policy: appsv1.ParallelPodManagement, Size: "1Gi"})
	s.CreateStatefulSet(t, sts)
	s.WaitTemplateStatus(t, "web", stsTimeout, scenario.Finished)
	web0, web1, web2 := scenario.ClaimName("web", 0), scenario.ClaimName("web", 1), scenario.ClaimName("web", 2)

	kubelet := s.startAutoscaler(t)
	if err := s.Resizer.Stop(); err != nil { // the autoscaler's resizes stay in flight
		t.Fatal(err)
	}
	kubelet.set(s.Namespace+"/"+web0, gib, 50*mib) // 5% free: past the 10% threshold
	kubelet.set(s.Namespace+"/"+web1, gib, 60*mib)
	for _, claim := range []string{web0, web1} {
		waitForRequest(t, s.Client, s.Namespace, claim, "2Gi")
		waitForEvent(t, s.Client, s.Namespace, claim, "VolumeAutoscaled", "1Gi -> 2Gi (threshold-bytes)")
	}
	keeps2Gi := func(claims ...string) func() (bool, string) {
		return func() (bool, string) {
			for _, claim := range claims {
				if pvc := s.PVC(t, claim); scenario.Request(pvc) != "2Gi" {
					return false, claim + " lowered: " + scenario.Describe(pvc)
				}
			}
			return true, ""
		}
	}

	// The template grows to between the capacity (1Gi) and the autoscaler's request: not lowered.
	s.RecreateStatefulSet(t, "web", scenario.WithSize("1536Mi"))
	s.WaitTemplateStatus(t, "web", stsTimeout, func(sts *appsv1.StatefulSet, ts status.Template) (bool, string) {
		// Reconciled: no replica ready (capacity 1Gi < 1536Mi), none infeasible, nothing lowered.
		return ts.ReadyReplicas == 0 && ts.InfeasibleReplicas == 0, fmt.Sprintf("want the new template's status, got %+v", ts)
	})
	framework.Consistently(t, 3*time.Second, keeps2Gi(web0, web1))
	s.Resizer.Start(t)
	for _, claim := range []string{web0, web1} {
		s.waitDone(t, claim, "2Gi")
	}
	kubelet.set(s.Namespace+"/"+web0, 2*gib, 1900*mib) // grown, and plenty free: no further step
	kubelet.set(s.Namespace+"/"+web1, 2*gib, 1900*mib)
	s.WaitTemplateStatus(t, "web", stsTimeout, scenario.Finished)
	framework.Consistently(t, 3*time.Second, keeps2Gi(web0, web1))

	// A new replica: the StatefulSet controller makes its PVC at the template's 1536Mi.
	grown, _ := s.StatefulSet(t, "web")
	s.PrecreateVolume(t, grown, 2)
	if _, err := s.Client.AppsV1().StatefulSets(s.Namespace).Patch(s.Ctx, "web", types.MergePatchType,
		[]byte(`{"spec":{"replicas":3}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("scale web to 3: %v", err)
	}
	s.RunPod(t, "web", 2)
	kubelet.set(s.Namespace+"/"+web2, 1536*mib, 1400*mib) // nearly empty: only its siblings raise it
	s.waitDone(t, web2, "2Gi")
	waitForEvent(t, s.Client, s.Namespace, web2, "VolumeAutoscaled", "1536Mi -> 2Gi (siblings)")
	kubelet.set(s.Namespace+"/"+web2, 2*gib, 1900*mib)
	s.WaitTemplateStatus(t, "web", stsTimeout, func(sts *appsv1.StatefulSet, ts status.Template) (bool, string) {
		ok, why := scenario.Finished(sts, ts)
		return ok && ts.ReadyReplicas == 3, why
	})
	framework.Consistently(t, 3*time.Second, keeps2Gi(web0, web1, web2))
}

// startAutoscaler opts the env's StorageClass in (limit 4Gi), serves the node's stats from a
// kubelet stand-in and runs volume-autoscaler as its shipped ServiceAccount; it returns the
// stand-in, whose usage the test sets.
func (s *stsEnv) startAutoscaler(t *testing.T) *kubeletStandIn {
	t.Helper()
	patch := `{"metadata":{"annotations":{"` + policy.AnnAutoscale + `":"true","` + policy.AnnLimit + `":"4Gi"}}}`
	if _, err := s.Client.StorageV1().StorageClasses().Patch(s.Ctx, s.StorageClass, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("opt StorageClass %s in: %v", s.StorageClass, err)
	}
	const system = "autoscaler-system"
	if _, err := s.Client.CoreV1().Namespaces().Create(s.Ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: system}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubeconfig := scenario.ApplyVolumeAutoscalerRBAC(t, s.Cluster, system)
	ca, err := framework.NewCA("kubelet-ca")
	if err != nil {
		t.Fatal(err)
	}
	kubelet := startKubeletStandIn(t, s.Client, framework.DefaultNodeName, ca)
	// kube-controller-manager writes the Node too: retry on a conflict.
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		node, err := s.Client.CoreV1().Nodes().Get(s.Ctx, framework.DefaultNodeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		node.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "127.0.0.1"}}
		node.Status.DaemonEndpoints.KubeletEndpoint.Port = kubelet.port()
		_, err = s.Client.CoreV1().Nodes().UpdateStatus(s.Ctx, node, metav1.UpdateOptions{})
		return err == nil, fmt.Sprintf("node status: %v", err)
	})
	dir := t.TempDir()
	caFile, tokenFile := filepath.Join(dir, "kubelet-ca.crt"), filepath.Join(dir, "token")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokenFile, []byte(kubeconfigToken(t, kubeconfig)), 0o600); err != nil {
		t.Fatal(err)
	}
	p := framework.StartProcess(t, "volume-autoscaler", framework.BuildCommand(t, "volume-autoscaler"),
		"--kubeconfig="+kubeconfig, "--interval=1s", "--cooldown=1s", "--kubelet-certificate-authority="+caFile,
		"--token-file="+tokenFile, "--kubelet-timeout=5s", "-v=4")
	t.Cleanup(func() {
		if p.LogContains("is forbidden") {
			t.Errorf("the shipped ServiceAccount lacks a permission:\n%s", p.LogTail(40))
		}
		kubelet.mu.Lock()
		defer kubelet.mu.Unlock()
		if len(kubelet.refused) > 0 {
			t.Errorf("the kubelet stand-in refused %d requests, e.g. %s", len(kubelet.refused), strings.TrimSpace(kubelet.refused[0]))
		}
	})
	return kubelet
}
