//go:build cluster

package cluster

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/csi-resizer/csi-resizer/test/framework"
)

// The Prometheus Operator's side of TestOperations' scraping (prometheus_test.go): the operator,
// its CRDs and the shipped ServiceMonitor and PrometheusRule, and its Prometheus StatefulSet run
// in the cluster from images assembled offline.

// promOperator runs the Prometheus Operator (hack/build-prometheus-operator.sh) with its CRDs
// installed, out of the cluster with the admin kubeconfig, in the node's network namespace, and
// applies the shipped monitoring kustomization (ServiceMonitors and PrometheusRule) in promNS, the
// test's copy of the alert (shortFor) as a PrometheusRule beside it, and the shipped
// csi-resizer-metrics Service in opsNS. The images the operator's StatefulSets run are imported
// first (promImportImages).
func promOperator(t *testing.T, c *Cluster, shortFor string) {
	t.Helper()
	dir := hackBuild(t, "build-prometheus-operator.sh")
	promImportImages(t, c, promBinary(t, "prometheus"), filepath.Join(dir, "prometheus-config-reloader"))
	crds, err := filepath.Glob(filepath.Join(dir, "crds", "*.yaml"))
	if err != nil || len(crds) == 0 {
		t.Fatalf("no CRDs in %s/crds: %v", dir, err)
	}
	args := []string{"apply", "--server-side"}
	for _, f := range crds {
		args = append(args, "-f", f)
	}
	if out, err := c.Kubectl(t, args...); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Cleanup(func() {
		del := []string{"delete", "--ignore-not-found", "--wait=true", "--timeout=120s"}
		for _, f := range crds {
			del = append(del, "-f", f)
		}
		if _, err := c.Kubectl(t, del...); err != nil {
			t.Error(err)
		}
	})
	// Not `kubectl wait`: it fails at once on a CRD that has no conditions yet.
	for _, crd := range []string{"servicemonitors", "prometheusrules", "prometheuses"} {
		var established string
		err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			established, _ = c.Kubectl(t, "get", "crd", crd+".monitoring.coreos.com",
				"-o", `jsonpath={.status.conditions[?(@.type=="Established")].status}`)
			return established == "True", nil
		})
		if err != nil {
			t.Fatalf("CRD %s.monitoring.coreos.com not Established within 1m (%q): %v", crd, established, err)
		}
	}
	promStartOperator(t, c, filepath.Join(dir, "operator"))
	promApplyMonitoring(t, c, shortFor)
}

// promStartOperator starts the operator in the node's network namespace and stops it at cleanup.
func promStartOperator(t *testing.T, c *Cluster, bin string) {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "operator.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	// --kubelet-service off: it would maintain a kubelet Service in kube-system for nothing.
	// KUBECONFIG: the operator's out-of-cluster mode (pkg/k8sutil reads it).
	cmd := exec.Command("nsenter", "--net=/run/netns/"+c.env["NETNS"], "--", bin,
		"--web.listen-address="+c.NodeIP+":18080", "--kubelet-service=", "--log-level=info",
		"--prometheus-config-reloader="+promReloaderImage)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("prometheus-operator log (tail):\n%s", tail(string(b), 40))
		}
	})
	t.Logf("prometheus-operator (%s) running out of the cluster with the admin kubeconfig", promVersion(bin))
}

// promApplyMonitoring applies the shipped monitoring objects, the test's PrometheusRule and the
// shipped metrics Service; promInCluster's Prometheus object selects them.
func promApplyMonitoring(t *testing.T, c *Cluster, shortFor string) {
	t.Helper()
	copyRule := promShortForRule(t, shortFor)
	monitoring := opsRender(t, c, map[string]string{"kustomization.yaml": `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: ` + promNS + `
resources:
- $REPO/deploy/kubernetes/monitoring
`})
	service := opsRender(t, c, map[string]string{"kustomization.yaml": `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: ` + opsNS + `
resources:
- $REPO/deploy/kubernetes/monitoring/csi-resizer-service
`})
	for _, objects := range []string{monitoring, copyRule, service} {
		if out, err := c.KubectlWithInput(t, objects, "apply", "-f", "-"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	t.Cleanup(func() {
		for _, objects := range []string{service, copyRule, monitoring} {
			if _, err := c.KubectlWithInput(t, objects, "delete", "--ignore-not-found", "--wait=true", "--timeout=120s", "-f", "-"); err != nil {
				t.Error(err)
			}
		}
	})
}

// Images of the built prometheus and prometheus-config-reloader, for the operator's StatefulSet.
const (
	promImage         = "localhost/prometheus:v3.16.0"
	promReloaderImage = "localhost/prometheus-config-reloader:v0.85.0"
)

// promImportImages assembles images of the built prometheus and prometheus-config-reloader
// offline, as hack/cluster/build-images.sh assembles the driver's (test/images/cmd/assemble-image:
// the binary, /tmp, its entrypoint, no base), and imports them into the node's containerd: the
// operator's StatefulSet runs them under these names, with imagePullPolicy Never.
func promImportImages(t *testing.T, c *Cluster, promBin, reloaderBin string) {
	t.Helper()
	importBinaryImage(t, c, promImage, promBin, "/bin/prometheus", "hack/build-prometheus.sh")
	importBinaryImage(t, c, promReloaderImage, reloaderBin, "/bin/prometheus-config-reloader", "hack/build-prometheus-operator.sh")
}

// importBinaryImage assembles an image of one static binary at path (run as 65534, /tmp, the
// binary as entrypoint, no base) under tag, and imports it into the node's containerd, where
// pods run it with imagePullPolicy Never. from says where the binary comes from (the layer's
// history).
func importBinaryImage(t *testing.T, c *Cluster, tag, bin, path, from string) {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	build := exec.Command("go", "build", "-trimpath", "-o", dir+"/", "./cmd/assemble-image")
	build.Dir = filepath.Join(root, "test", "images")
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly -buildvcs=false", "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build test/images/cmd/assemble-image: %v\n%s", err, out)
	}
	tar := filepath.Join(dir, filepath.Base(path)+".tar")
	out, err := exec.Command(filepath.Join(dir, "assemble-image"), "--tag", tag, "--out", tar,
		"--user", "65534:65534", "--entrypoint", fmt.Sprintf("[%q]", path),
		"--layer", "COPY "+filepath.Base(path)+" ("+from+")",
		"--file", path+"="+bin+",mode=0755", "--dir", "/tmp,mode=1777").CombinedOutput()
	if err != nil {
		t.Fatalf("assemble %s: %v\n%s", tag, err, out)
	}
	if out, err := c.InNode(t, c.env["CTR"], "--address", c.env["CONTAINERD_SOCK"], "-n", "k8s.io", "images", "import",
		"--snapshotter", c.env["SNAPSHOTTER"], "--local", tar); err != nil {
		t.Fatalf("import %s: %v\n%s", tag, err, out)
	}
}

// promInCluster has the operator run a Prometheus in the cluster, the way it does for users: a
// Prometheus object "incluster" selecting the shipped ServiceMonitor and PrometheusRule, whose
// StatefulSet runs the imported images as promSA (in-cluster credentials, no apiserverConfig),
// with the init container and the config reloader next to Prometheus. A NodePort Service
// reaches its API from the machine. Returns it once the API is ready.
func promInCluster(t *testing.T, c *Cluster) *opsPrometheus {
	t.Helper()
	objects := fmt.Sprintf(`apiVersion: monitoring.coreos.com/v1
kind: Prometheus
metadata: {name: incluster, namespace: %[1]s}
spec:
  replicas: 1
  version: v3.16.0
  image: %[2]s
  imagePullPolicy: Never
  serviceAccountName: %[3]s
  evaluationInterval: 2s
  serviceMonitorNamespaceSelector: {}
  serviceMonitorSelector: {matchLabels: {app.kubernetes.io/part-of: csi-resizer}}
  ruleNamespaceSelector: {}
  ruleSelector: {matchLabels: {prometheus: k8s, role: alert-rules}}
---
apiVersion: v1
kind: Service
metadata: {name: prometheus-incluster-api, namespace: %[1]s}
spec:
  type: NodePort
  selector: {operator.prometheus.io/name: incluster}
  ports: [{name: web, port: 9090, targetPort: web}]
`, promNS, promImage, promSA)
	if out, err := c.KubectlWithInput(t, objects, "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Cleanup(func() {
		if _, err := c.KubectlWithInput(t, objects, "delete", "--ignore-not-found", "--wait=true", "--timeout=120s", "-f", "-"); err != nil {
			t.Error(err)
		}
	})
	start := time.Now()
	ctx := context.Background()
	svc, err := c.Client.CoreV1().Services(promNS).Get(ctx, "prometheus-incluster-api", metav1.GetOptions{})
	if err != nil || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].NodePort == 0 {
		t.Fatalf("Service %s/prometheus-incluster-api has no node port: %v %+v", promNS, err, svc)
	}
	p := &opsPrometheus{api: fmt.Sprintf("http://%s:%d", c.NodeIP, svc.Spec.Ports[0].NodePort)}
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.api+"/-/ready", nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		pods, _ := c.Kubectl(t, "-n", promNS, "get", "pods,statefulsets", "-o", "wide")
		desc, _ := c.Kubectl(t, "-n", promNS, "describe", "pods", "-l", "operator.prometheus.io/name=incluster")
		t.Fatalf("the operator's Prometheus %s/incluster is not ready at %s within 3m: %v\n%s\n%s", promNS, p.api, err, pods, tail(desc, 40))
	}
	t.Logf("the operator's Prometheus %s/incluster (StatefulSet prometheus-incluster, images %s and %s) ready in %s at %s",
		promNS, promImage, promReloaderImage, time.Since(start).Round(time.Second), p.api)
	return p
}

// promShortForRule is a PrometheusRule of the test's copy of CSIResizerVolumeInfeasible (the file
// shortFor), labelled as the shipped one, so that the operator gives it to every Prometheus it
// configures.
func promShortForRule(t *testing.T, shortFor string) string {
	t.Helper()
	data, err := os.ReadFile(shortFor)
	if err != nil {
		t.Fatal(err)
	}
	var spec map[string]any
	if err := yaml.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	out, err := yaml.Marshal(map[string]any{
		"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
		"metadata": map[string]any{"name": "csi-resizer-short-for", "namespace": promNS,
			"labels": map[string]string{"prometheus": "k8s", "role": "alert-rules"}},
		"spec": spec,
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}
