//go:build cluster

package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/csi-resizer/csi-resizer/test/framework"
)

// ssrNamespace is where the docs install statefulset-resizer (deploy/kubernetes/statefulset-resizer,
// docs/statefulset-resizer.md).
const ssrNamespace = "csi-resizer-system"

// ssrOptIn is the label that opts a StatefulSet, or a namespace, in to the webhook.
const ssrOptIn = "csi-resizer.io/volume-claim-template-updates"

// TestStatefulSetResizer installs statefulset-resizer with its webhook as a user does, once from
// the kustomize base with the webhook component, once from the Helm chart, with this checkout's
// image, and grows a StatefulSet's volumes through a plain `kubectl apply` of a bigger
// volumeClaimTemplate: the apiserver calls the webhook through its Service, statefulset-resizer
// re-creates the StatefulSet and raises the PVCs, upstream's csi-resizer sidecar of
// csi-driver-host-path expands them, the kubelet does the node step in the running pods, and
// `statefulset-resizer wait` (built from this checkout) exits 0. Each install is removed
// afterwards (`kubectl delete -k`, `helm uninstall`; the namespace too).
func TestStatefulSetResizer(t *testing.T) {
	c := clusterFor(t)
	deployHostpathOnce(t, c)
	bin := buildStatefulSetResizer(t, c)

	t.Run("Kustomize", func(t *testing.T) {
		installKustomize(t, c)
		growStatefulSet(t, c, bin, ssrScenario{namespace: "ssr-kustomize", podManagement: "OrderedReady"})
		// Issue 31 finding 1, on this install (before its removal): a user's delete during a
		// re-create is not undone.
		t.Run("UserDeleteDuringRecreate", func(t *testing.T) { userDeleteDuringRecreate(t, c) })
	})
	t.Run("Helm", func(t *testing.T) {
		installHelm(t, c)
		// The other opt-in (the namespace's label) and the other pod management policy.
		growStatefulSet(t, c, bin, ssrScenario{namespace: "ssr-helm", optInNamespace: true, podManagement: "Parallel"})
	})
}

// buildStatefulSetResizer builds the wait command's binary from this checkout, as the product
// image's build does (same flags, so the build cache is shared).
func buildStatefulSetResizer(t *testing.T, c *Cluster) string {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	_, version := splitImage(c.ProductImage)
	out := filepath.Join(t.TempDir(), "statefulset-resizer")
	start := time.Now()
	cmd := exec.Command("nice", "-n", "10", "go", "build", "-mod=vendor", "-trimpath",
		"-ldflags", "-s -w -X main.version="+version, "-o", out, "./cmd/statefulset-resizer")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/statefulset-resizer: %v\n%s", err, b)
	}
	t.Logf("built statefulset-resizer %s in %s", version, time.Since(start).Round(time.Second))
	return out
}

// splitImage splits name:tag at the tag's colon.
func splitImage(image string) (name, tag string) {
	i := strings.LastIndex(image, ":")
	if i < 0 || strings.Contains(image[i:], "/") {
		return image, ""
	}
	return image[:i], image[i+1:]
}

// installKustomize installs what the kustomize base's header and docs/statefulset-resizer.md
// ("Webhook", "Install") tell a user to write: the base and the webhook component in the
// namespace csi-resizer-system (created first), the image set with `images:`. The webhook's
// certificate is statefulset-resizer's own (no cert-manager). `kubectl apply -k`, and
// `kubectl delete -k` and the namespace's deletion after.
func installKustomize(t *testing.T, c *Cluster) {
	t.Helper()
	dir := productOverlay(t, c, "statefulset-resizer", ssrNamespace, "components:\n- {base}/webhook\n")
	start := time.Now()
	if _, err := c.Kubectl(t, "create", "namespace", ssrNamespace); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		start := time.Now()
		if _, err := c.Kubectl(t, "delete", "-k", dir, "--ignore-not-found", "--wait", "--timeout=2m"); err != nil {
			t.Error(err)
		}
		deleteNamespace(t, c, ssrNamespace)
		checkNoClusterObjects(t, c)
		t.Logf("kustomize install removed in %s", time.Since(start).Round(time.Second))
	})
	if _, err := c.Kubectl(t, "apply", "-k", dir); err != nil {
		t.Fatal(err)
	}
	waitStatefulSetResizerReady(t, c)
	t.Logf("kustomize install (base + webhook component, image %s) ready in %s", c.ProductImage, time.Since(start).Round(time.Second))
}

// productOverlay writes a kustomization of deploy/kubernetes/BASE in namespace ns with the product
// image, plus extra (YAML; "{base}" stands for the base's path), as a user's overlay, and returns
// its directory for `kubectl apply -k`.
func productOverlay(t *testing.T, c *Cluster, baseName, ns, extra string) string {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// kustomize takes only relative paths to a base.
	base, err := filepath.Rel(dir, filepath.Join(root, "deploy", "kubernetes", baseName))
	if err != nil {
		t.Fatal(err)
	}
	name, tag := splitImage(c.ProductImage)
	kustomization := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: %s
resources:
- %s
images:
- name: registry.example/csi-resizer
  newName: %s
  newTag: %q
`, ns, base, name, tag) + strings.ReplaceAll(extra, "{base}", base)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// installHelm installs the chart deploy/helm/statefulset-resizer with the webhook enabled, with
// the helm that `make helm-check` uses (hack/build-helm.sh, or $HELM), and uninstalls it after.
func installHelm(t *testing.T, c *Cluster) {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	helmBin := os.Getenv("HELM")
	if helmBin == "" {
		helmBin = hackBuild(t, "build-helm.sh")
	}
	home := t.TempDir()
	helm := func(args ...string) (string, error) {
		cmd := exec.Command(helmBin, append(args, "--kubeconfig", c.Kubeconfig)...)
		// Helm's cache, configuration and data of this test only, not the machine's user's.
		cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config",
			"HELM_DATA_HOME="+home+"/data")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return string(out), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, out)
		}
		return string(out), nil
	}
	name, tag := splitImage(c.ProductImage)
	start := time.Now()
	t.Cleanup(func() {
		start := time.Now()
		if _, err := helm("uninstall", "statefulset-resizer", "--namespace", ssrNamespace, "--wait", "--timeout", "2m"); err != nil {
			t.Error(err)
		}
		if out, err := helm("list", "--all-namespaces", "--all", "--short"); err != nil || strings.TrimSpace(out) != "" {
			t.Errorf("helm releases left after the uninstall: %q (%v)", out, err)
		}
		deleteNamespace(t, c, ssrNamespace)
		checkNoClusterObjects(t, c)
		t.Logf("helm release uninstalled and namespace removed in %s", time.Since(start).Round(time.Second))
	})
	out, err := helm("install", "statefulset-resizer", filepath.Join(root, "deploy", "helm", "statefulset-resizer"),
		"--namespace", ssrNamespace, "--create-namespace",
		"--set", "image.repository="+name, "--set", "image.tag="+tag, "--set", "webhook.enabled=true",
		"--wait", "--timeout", "2m")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("helm install:\n%s", out)
	waitStatefulSetResizerReady(t, c)
	t.Logf("helm install (webhook enabled, image %s) ready in %s", c.ProductImage, time.Since(start).Round(time.Second))
}

// waitStatefulSetResizerReady waits for the rollout of the controller's Deployment and of the
// webhook's (whose readiness probe is the webhook's /readyz over HTTPS) and for the CA bundle the
// webhook injects into the MutatingWebhookConfiguration, and checks both run the product image.
func waitStatefulSetResizerReady(t *testing.T, c *Cluster) {
	t.Helper()
	for _, d := range []string{"deployment/statefulset-resizer", "deployment/statefulset-resizer-webhook"} {
		if out, err := c.Kubectl(t, "-n", ssrNamespace, "rollout", "status", d, "--timeout=2m"); err != nil {
			desc, _ := c.Kubectl(t, "-n", ssrNamespace, "describe", "pods")
			t.Fatalf("%v\n%s\n%s", err, out, desc)
		}
		image, err := c.Kubectl(t, "-n", ssrNamespace, "get", d, "-o", "jsonpath={.spec.template.spec.containers[0].image}")
		if err != nil {
			t.Fatal(err)
		}
		if image != c.ProductImage {
			t.Fatalf("%s image %q, want this checkout's %q", d, image, c.ProductImage)
		}
	}
	c.RequireProductImage(t, ssrNamespace, "app.kubernetes.io/name=statefulset-resizer", "statefulset-resizer")
	c.RequireProductImage(t, ssrNamespace, "app.kubernetes.io/name=statefulset-resizer", "statefulset-resizer-webhook")
	ctx := context.Background()
	err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		mwc, err := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "statefulset-resizer", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, w := range mwc.Webhooks {
			if len(w.ClientConfig.CABundle) == 0 || w.ClientConfig.Service == nil {
				return false, nil
			}
		}
		return len(mwc.Webhooks) > 0, nil
	})
	if err != nil {
		t.Fatalf("MutatingWebhookConfiguration statefulset-resizer: no Service client config with a CA bundle: %v", err)
	}
	svc, _ := c.Kubectl(t, "-n", ssrNamespace, "get", "service/statefulset-resizer", "-o", "jsonpath={.spec.clusterIP}:{.spec.ports[0].port}")
	eps, _ := c.Kubectl(t, "-n", ssrNamespace, "get", "endpointslices", "-l", "kubernetes.io/service-name=statefulset-resizer",
		"-o", "jsonpath={.items[*].endpoints[*].addresses[*]}")
	t.Logf("webhook Service statefulset-resizer %s, endpoints %s; CA bundle injected", svc, eps)
}

// deleteNamespace deletes a namespace and waits until it is gone.
func deleteNamespace(t *testing.T, c *Cluster, ns string) {
	t.Helper()
	if _, err := c.Kubectl(t, "delete", "namespace", ns, "--ignore-not-found", "--wait", "--timeout=3m"); err != nil {
		t.Error(err)
	}
}

// checkNoClusterObjects checks that no cluster-scoped object of statefulset-resizer is left.
func checkNoClusterObjects(t *testing.T, c *Cluster) {
	t.Helper()
	out, err := c.Kubectl(t, "get", "mutatingwebhookconfiguration/statefulset-resizer", "clusterrole/statefulset-resizer",
		"clusterrolebinding/statefulset-resizer", "clusterrole/statefulset-resizer-webhook", "clusterrolebinding/statefulset-resizer-webhook",
		"--ignore-not-found", "-o", "name")
	if err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("cluster-scoped objects of statefulset-resizer left: %q (%v)", out, err)
	}
}

// ssrScenario is one StatefulSet grown through the webhook.
type ssrScenario struct {
	namespace string
	// optInNamespace labels the namespace instead of the StatefulSet.
	optInNamespace bool
	podManagement  string
	// replicas is the StatefulSet's (ssrReplicas when 0).
	replicas int
}

const ssrReplicas = 2

// manifest is the StatefulSet web with a volumeClaimTemplate data of csi-hostpath-sc of size.
func (s ssrScenario) manifest(size string) string {
	labels := ""
	if !s.optInNamespace {
		labels = fmt.Sprintf("\n  labels:\n    %s: enabled", ssrOptIn)
	}
	return fmt.Sprintf(`apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web%s
spec:
  serviceName: web
  replicas: %d
  podManagementPolicy: %s
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: web
        image: localhost/busybox:1.35.0
        command: ["sh", "-c", "exec sleep 36000"]
        volumeMounts:
        - {name: data, mountPath: /data}
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      storageClassName: csi-hostpath-sc
      resources:
        requests: {storage: %s}
`, labels, s.replicaCount(), s.podManagement, size)
}

func (s ssrScenario) replicaCount() int {
	if s.replicas == 0 {
		return ssrReplicas
	}
	return s.replicas
}

// kubectlStderr runs kubectl and returns stdout and stderr (where kubectl prints the webhook's
// warnings).
func kubectlStderr(c *Cluster, stdin string, args ...string) (string, string, error) {
	cmd := exec.Command(c.KubectlBin, append([]string{"--kubeconfig=" + c.Kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), stderr.String(), err
}

// rollOutScenario creates the scenario's namespace (opted in when the scenario says so; deleted
// when the test ends), applies StatefulSet web at 1Gi and waits for its rollout; it returns when
// it started.
func rollOutScenario(t *testing.T, c *Cluster, s ssrScenario) time.Time {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.namespace}}
	if s.optInNamespace {
		ns.Labels = map[string]string{ssrOptIn: "enabled"}
	}
	if _, err := c.Client.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeScenarioNamespace(t, c, s.namespace) })
	start := time.Now()
	if _, err := c.KubectlWithInput(t, s.manifest("1Gi"), "-n", s.namespace, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	if out, err := c.Kubectl(t, "-n", s.namespace, "rollout", "status", "statefulset/web", "--timeout=3m"); err != nil {
		desc, _ := c.Kubectl(t, "-n", s.namespace, "describe", "pods")
		t.Fatalf("%v\n%s\n%s", err, out, desc)
	}
	return start
}

// growStatefulSet creates the scenario's StatefulSet at 1Gi with running pods, applies it at
// 2Gi with kubectl, waits with `statefulset-resizer wait`, and checks the result: the
// StatefulSet re-created with the new template, the PVCs and PVs at 2Gi with
// statefulset-resizer's annotations, the same pods still running with their data, and the events
// of each step.
func growStatefulSet(t *testing.T, c *Cluster, bin string, s ssrScenario) {
	t.Helper()
	ctx := context.Background()
	start := rollOutScenario(t, c, s)
	podUIDs := map[string]types.UID{}
	for i := 0; i < ssrReplicas; i++ {
		pod := fmt.Sprintf("web-%d", i)
		if _, err := c.Kubectl(t, "-n", s.namespace, "exec", pod, "--", "sh", "-c", "echo "+pod+" >/data/marker"); err != nil {
			t.Fatal(err)
		}
		p, err := c.Client.CoreV1().Pods(s.namespace).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		podUIDs[pod] = p.UID
	}
	old, err := c.Client.AppsV1().StatefulSets(s.namespace).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("StatefulSet %s/web: %d pods running with 1Gi volumes in %s", s.namespace, ssrReplicas, time.Since(start).Round(time.Second))

	waitWebhookAnswers(t, c, s)
	start = time.Now()
	_, warnings, err := kubectlStderr(c, s.manifest("2Gi"), "-n", s.namespace, "apply", "-f", "-")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl apply at 2Gi:\n%s", warnings)
	if want := fmt.Sprintf("volume claim templates of %s/web change (data: 1Gi -> 2Gi)", s.namespace); !strings.Contains(warnings, want) {
		t.Errorf("kubectl apply printed no webhook warning %q", want)
	}
	runWait(t, bin, c, s.namespace+"/web")
	t.Logf("kubectl apply to statefulset-resizer wait exit 0: %s", time.Since(start).Round(time.Second))

	checkStatefulSet(t, c, s.namespace, old.UID)
	checkPVCs(t, c, s.namespace)
	checkPods(t, c, s.namespace, podUIDs)
	checkEvents(t, c, s.namespace)
}

// removeScenarioNamespace deletes the scenario's namespace and waits for the PVs of its PVCs to
// be deleted by the driver (reclaim policy Delete), so that the cluster is as it was.
func removeScenarioNamespace(t *testing.T, c *Cluster, ns string) {
	t.Helper()
	deleteNamespace(t, c, ns)
	var left []string
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pvs, err := c.Client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		left = nil
		for _, pv := range pvs.Items {
			if pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.Namespace == ns {
				left = append(left, pv.Name)
			}
		}
		return len(left) == 0, nil
	})
	if err != nil {
		t.Errorf("PVs of namespace %s not deleted: %v (%v)", ns, left, err)
	}
}

// waitWebhookAnswers polls a server-side dry run of the bigger template until the webhook
// answers it (its warning comes back): the endpoints are ready and kube-proxy's rules for the
// Service are in place. Nothing is stored by a dry run.
func waitWebhookAnswers(t *testing.T, c *Cluster, s ssrScenario) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, time.Minute, true, func(context.Context) (bool, error) {
		_, warnings, err := kubectlStderr(c, s.manifest("2Gi"), "-n", s.namespace, "apply", "--dry-run=server", "-f", "-")
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = warnings
		return strings.Contains(warnings, "statefulset-resizer:"), nil
	})
	if err != nil {
		apiserver, _ := exec.Command("grep", "-i", "webhook", c.LogPath("kube-apiserver")).Output()
		t.Fatalf("the apiserver did not get the webhook's answer: %v\nlast: %s\napiserver log:\n%s", err, last, tail(string(apiserver), 10))
	}
}

// runWait runs `statefulset-resizer wait` and fails the test unless it exits 0.
func runWait(t *testing.T, bin string, c *Cluster, name string) {
	t.Helper()
	start := time.Now()
	cmd := exec.Command(bin, "wait", name, "--timeout", "3m", "--kubeconfig", c.Kubeconfig)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	t.Logf("statefulset-resizer wait %s: %s (%s)\nstdout: %s\nstderr:\n%s", name, exitStatus(err),
		time.Since(start).Round(time.Second), stdout.String(), stderr.String())
	if err != nil {
		t.Fatalf("statefulset-resizer wait %s: %v", name, err)
	}
}

func exitStatus(err error) string {
	var exit *exec.ExitError
	switch {
	case err == nil:
		return "exit 0"
	case errors.As(err, &exit):
		return fmt.Sprintf("exit %d", exit.ExitCode())
	default:
		return err.Error()
	}
}

// ssrStatus is the part of the annotation csi-resizer.io/volume-claim-templates-status the test
// reads (docs/statefulset-resizer.md, "Status annotation").
type ssrStatus struct {
	ObservedGeneration int64  `json:"observedGeneration"`
	UID                string `json:"uid"`
	Templates          []struct {
		TemplateName                     string `json:"templateName"`
		ReadyReplicas                    int    `json:"readyReplicas"`
		FinishedReconciliationGeneration int64  `json:"finishedReconciliationGeneration"`
		InfeasibleReplicas               int    `json:"infeasibleReplicas"`
	} `json:"templates"`
}

// checkStatefulSet: re-created (new uid) with the 2Gi template, no pending desire annotation,
// and a status for this object saying the template is finished with every replica ready.
func checkStatefulSet(t *testing.T, c *Cluster, ns string, oldUID types.UID) {
	t.Helper()
	sts, err := c.Client.AppsV1().StatefulSets(ns).Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sts.UID == oldUID {
		t.Errorf("StatefulSet %s/web not re-created (uid %s unchanged)", ns, oldUID)
	}
	got := sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[corev1.ResourceStorage]
	if got.Cmp(resource.MustParse("2Gi")) != 0 {
		t.Errorf("StatefulSet %s/web template data asks %s, want 2Gi", ns, got.String())
	}
	if v, ok := sts.Annotations["csi-resizer.io/desired-volume-claim-templates"]; ok {
		t.Errorf("StatefulSet %s/web still has the desire annotation %s", ns, v)
	}
	raw := sts.Annotations["csi-resizer.io/volume-claim-templates-status"]
	var st ssrStatus
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		t.Fatalf("status annotation %q: %v", raw, err)
	}
	if st.UID != string(sts.UID) || st.ObservedGeneration != sts.Generation || len(st.Templates) != 1 ||
		st.Templates[0].TemplateName != "data" || st.Templates[0].ReadyReplicas != ssrReplicas ||
		st.Templates[0].InfeasibleReplicas != 0 || st.Templates[0].FinishedReconciliationGeneration != sts.Generation {
		t.Errorf("status annotation %s, want template data finished with %d ready replicas for uid %s generation %d",
			raw, ssrReplicas, sts.UID, sts.Generation)
	}
	t.Logf("StatefulSet %s/web: uid %s (was %s), template data 2Gi, status %s", ns, sts.UID, oldUID, raw)
}

// checkPVCs: each replica's PVC asks 2Gi, has 2Gi, no resize in progress, carries
// statefulset-resizer's annotations, and its PV has 2Gi.
func checkPVCs(t *testing.T, c *Cluster, ns string) {
	t.Helper()
	ctx := context.Background()
	two := resource.MustParse("2Gi")
	for i := 0; i < ssrReplicas; i++ {
		name := fmt.Sprintf("data-web-%d", i)
		pvc, err := c.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		req := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
		capacity := pvc.Status.Capacity[corev1.ResourceStorage]
		if req.Cmp(two) != 0 || capacity.Cmp(two) != 0 || len(pvc.Status.AllocatedResourceStatuses) != 0 {
			t.Errorf("PVC %s: request %s, capacity %s, allocatedResourceStatuses %v; want 2Gi, 2Gi, none",
				name, req.String(), capacity.String(), pvc.Status.AllocatedResourceStatuses)
		}
		want := map[string]string{"csi-resizer.io/pre-resize-storage": "1Gi", "csi-resizer.io/resized-storage": "2Gi",
			"csi-resizer.io/statefulset": "web"}
		for k, v := range want {
			if pvc.Annotations[k] != v {
				t.Errorf("PVC %s: annotation %s=%q, want %q", name, k, pvc.Annotations[k], v)
			}
		}
		pv, err := c.Client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pvCap := pv.Spec.Capacity[corev1.ResourceStorage]
		if pvCap.Cmp(two) != 0 {
			t.Errorf("PV %s of %s: capacity %s, want 2Gi", pv.Name, name, pvCap.String())
		}
	}
}

// checkPods: the pods of before still run (same uid, no restart: the re-create orphans and
// adopts them), owned by the new StatefulSet, with their data. csi-driver-host-path's file
// system volumes are directories of the node's disk, so what the pod sees of the size is the
// node's file system (logged); the node step is checked by its events (checkEvents).
func checkPods(t *testing.T, c *Cluster, ns string, uids map[string]types.UID) {
	t.Helper()
	ctx := context.Background()
	sts, err := c.Client.AppsV1().StatefulSets(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for name, uid := range uids {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("pod %s: %v", name, err)
			continue
		}
		if p.UID != uid || p.Status.Phase != corev1.PodRunning {
			t.Errorf("pod %s: uid %s phase %s, want the same pod (uid %s) still running", name, p.UID, p.Status.Phase, uid)
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.RestartCount != 0 {
				t.Errorf("pod %s: container %s restarted %d times", name, cs.Name, cs.RestartCount)
			}
		}
		if owner := metav1.GetControllerOf(p); owner == nil || owner.UID != sts.UID {
			t.Errorf("pod %s: controller %v, want the re-created StatefulSet (uid %s)", name, owner, sts.UID)
		}
		out, err := c.Kubectl(t, "-n", ns, "exec", name, "--", "sh", "-c", "cat /data/marker && df -k /data | tail -1")
		if err != nil || !strings.HasPrefix(out, name+"\n") {
			t.Errorf("pod %s: /data/marker after the resize: %q (%v)", name, out, err)
		}
		t.Logf("pod %s (uid %s) after the resize: %s", name, p.UID, strings.ReplaceAll(strings.TrimSpace(out), "\n", "; df: "))
	}
}

// checkEvents: statefulset-resizer's Recreating and Recreated on the StatefulSet, the
// controller step (Resizing, by the resizer) and the node step (FileSystemResizeSuccessful, by
// the kubelet) on every PVC.
func checkEvents(t *testing.T, c *Cluster, ns string) {
	t.Helper()
	events, err := c.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var lines []string
	for _, e := range events.Items {
		o := e.InvolvedObject
		if o.Kind == "Pod" && e.Reason != "FileSystemResizeSuccessful" {
			continue
		}
		seen[o.Kind+"/"+o.Name+" "+e.Reason] = true
		lines = append(lines, fmt.Sprintf("%s/%s %s %s (%s): %s", o.Kind, o.Name, e.Type, e.Reason, e.Source.Component, e.Message))
	}
	t.Logf("events:\n%s", strings.Join(lines, "\n"))
	want := []string{"StatefulSet/web Recreating", "StatefulSet/web Recreated"}
	for i := 0; i < ssrReplicas; i++ {
		want = append(want, fmt.Sprintf("PersistentVolumeClaim/data-web-%d Resizing", i),
			fmt.Sprintf("PersistentVolumeClaim/data-web-%d FileSystemResizeSuccessful", i))
	}
	for _, w := range want {
		if !seen[w] {
			t.Errorf("no event %s", w)
		}
	}
}
