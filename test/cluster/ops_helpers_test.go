//go:build cluster

package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/csi-resizer/csi-resizer/test/framework"
)

// Helpers of ops_test.go, named ops* so that they do not collide with other tests' helpers in
// this package.

// opsLease is the Lease our csi-resizer takes for csi-driver-host-path (external-resizer-<driver>,
// sanitized), in the pod's namespace.
const opsLease = "external-resizer-hostpath-csi-k8s-io"

// opsRender writes files (kustomization.yaml and what it names) into a new directory and
// renders it with `kubectl kustomize`, as a user of the shipped bases would. In the files,
// $REPO is the repository's root relative to that directory (kustomize wants relative paths)
// and $IMAGE_TAG the tag of the product image the cluster imported.
func opsRender(t *testing.T, c *Cluster, files map[string]string) string {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rel, err := filepath.Rel(dir, root)
	if err != nil {
		t.Fatal(err)
	}
	name, tag, ok := strings.Cut(c.ProductImage, ":")
	if !ok || name != "csi-resizer" {
		t.Fatalf("product image %q: want csi-resizer:<tag>", c.ProductImage)
	}
	for f, content := range files {
		content = strings.NewReplacer("$REPO", rel, "$IMAGE_TAG", tag).Replace(content)
		if err := os.WriteFile(filepath.Join(dir, f), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := c.Kubectl(t, "kustomize", dir)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// opsApply creates namespace ns, applies the rendered manifests, and removes both at cleanup
// (the cluster-scoped objects too, and the PVs of ns's claims, which the provisioner deletes
// once the namespace's PVCs are gone).
func opsApply(t *testing.T, c *Cluster, ns, rendered string) {
	t.Helper()
	if _, err := c.Kubectl(t, "create", "namespace", ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := c.KubectlWithInput(t, rendered, "delete", "--ignore-not-found", "--wait=true", "-f", "-"); err != nil {
			t.Error(err)
		}
		if _, err := c.Kubectl(t, "delete", "namespace", ns, "--wait=true", "--timeout=120s"); err != nil {
			t.Error(err)
		}
		ctx := context.Background()
		err := wait.PollUntilContextTimeout(ctx, time.Second, 90*time.Second, true, func(ctx context.Context) (bool, error) {
			pvs, err := c.Client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			for _, pv := range pvs.Items {
				if pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.Namespace == ns {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			t.Errorf("PVs of namespace %s left behind: %v", ns, err)
		}
	})
	if _, err := c.KubectlWithInput(t, rendered, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
}

// opsWithoutUpstreamResizer removes the csi-resizer container (upstream's sidecar) from the
// csi-hostpathplugin StatefulSet, so that only the resizers under test act on the driver's
// volumes, and puts the very same container back at the same place at cleanup.
func opsWithoutUpstreamResizer(t *testing.T, c *Cluster) {
	t.Helper()
	ctx := context.Background()
	sts, err := c.Client.AppsV1().StatefulSets("default").Get(ctx, "csi-hostpathplugin", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	index := -1
	for i, ctr := range sts.Spec.Template.Spec.Containers {
		if ctr.Name == "csi-resizer" {
			index = i
		}
	}
	if index < 0 {
		t.Fatal("statefulset/csi-hostpathplugin has no csi-resizer container (left so by an earlier test?)")
	}
	saved, err := json.Marshal(sts.Spec.Template.Spec.Containers[index])
	if err != nil {
		t.Fatal(err)
	}
	before, err := json.Marshal(sts.Spec.Template.Spec)
	if err != nil {
		t.Fatal(err)
	}
	path := fmt.Sprintf("/spec/template/spec/containers/%d", index)
	remove := fmt.Sprintf(`[{"op":"test","path":"%s/name","value":"csi-resizer"},{"op":"remove","path":"%s"}]`, path, path)
	restore := fmt.Sprintf(`[{"op":"add","path":"%s","value":%s}]`, path, saved)
	t.Cleanup(func() {
		begin := time.Now()
		if _, err := c.Client.AppsV1().StatefulSets("default").Patch(ctx, "csi-hostpathplugin", types.JSONPatchType, []byte(restore), metav1.PatchOptions{}); err != nil {
			t.Errorf("restoring the csi-resizer container of statefulset/csi-hostpathplugin: %v", err)
			return
		}
		if out, err := c.Kubectl(t, "rollout", "status", "statefulset/csi-hostpathplugin", "--timeout=180s"); err != nil {
			t.Errorf("%v\n%s", err, out)
		}
		restored, err := c.Client.AppsV1().StatefulSets("default").Get(ctx, "csi-hostpathplugin", metav1.GetOptions{})
		if err != nil {
			t.Error(err)
			return
		}
		if after, _ := json.Marshal(restored.Spec.Template.Spec); string(after) != string(before) {
			t.Errorf("statefulset/csi-hostpathplugin's pod template differs from before the test:\nbefore %s\nafter  %s", before, after)
		}
		t.Logf("csi-hostpathplugin's csi-resizer container restored in %s", time.Since(begin).Round(time.Second))
	})
	begin := time.Now()
	if _, err := c.Client.AppsV1().StatefulSets("default").Patch(ctx, "csi-hostpathplugin", types.JSONPatchType, []byte(remove), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, err := c.Kubectl(t, "rollout", "status", "statefulset/csi-hostpathplugin", "--timeout=180s"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	pod, err := c.Client.CoreV1().Pods("default").Get(ctx, "csi-hostpathplugin-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ctr := range pod.Spec.Containers {
		if ctr.Name == "csi-resizer" {
			t.Fatal("csi-hostpathplugin-0 still runs a csi-resizer container after the rollout")
		}
	}
	t.Logf("csi-hostpathplugin runs without its csi-resizer container (rollout %s)", time.Since(begin).Round(time.Second))
}

// opsCreateBound creates the PVCs and waits until all are bound.
func opsCreateBound(t *testing.T, c *Cluster, pvcs ...*corev1.PersistentVolumeClaim) {
	t.Helper()
	ctx := context.Background()
	for _, pvc := range pvcs {
		if _, err := c.Client.CoreV1().PersistentVolumeClaims(pvc.Namespace).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, pvc := range pvcs {
		err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			p, err := c.Client.CoreV1().PersistentVolumeClaims(pvc.Namespace).Get(ctx, pvc.Name, metav1.GetOptions{})
			return err == nil && p.Status.Phase == corev1.ClaimBound, nil
		})
		if err != nil {
			t.Fatalf("PVC %s/%s not bound: %v", pvc.Namespace, pvc.Name, err)
		}
	}
}

func opsRequest(ctx context.Context, c *Cluster, ns, name, size string) error {
	patch := fmt.Sprintf(`{"spec":{"resources":{"requests":{"storage":%q}}}}`, size)
	_, err := c.Client.CoreV1().PersistentVolumeClaims(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// opsPVSize is the capacity of the PV bound to PVC ns/name: what the controller step wrote.
func opsPVSize(ctx context.Context, c *Cluster, ns, name string) (resource.Quantity, error) {
	p, err := c.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return resource.Quantity{}, err
	}
	pv, err := c.Client.CoreV1().PersistentVolumes().Get(ctx, p.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return resource.Quantity{}, err
	}
	return pv.Spec.Capacity[corev1.ResourceStorage], nil
}

// opsGrown counts the PVCs whose PV is at size.
func opsGrown(ctx context.Context, c *Cluster, ns string, names []string, size string) (int, error) {
	want := resource.MustParse(size)
	n := 0
	for _, name := range names {
		got, err := opsPVSize(ctx, c, ns, name)
		if err != nil {
			return 0, err
		}
		if got.Cmp(want) == 0 {
			n++
		}
	}
	return n, nil
}

// opsLeaderPod returns the pod of ns whose process holds the Lease, "" when none does. Our
// holder identity is the pod's host name plus "-" and 8 hex digits (lifecycle.Identity,
// sanitized); upstream's (csi-lib-utils) is the host name alone.
func opsLeaderPod(ctx context.Context, c *Cluster, ns string, pods []string) (pod, holder string, transitions int32, err error) {
	lease, err := c.Client.CoordinationV1().Leases(ns).Get(ctx, opsLease, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", "", 0, nil
	}
	if err != nil {
		return "", "", 0, err
	}
	if lease.Spec.HolderIdentity != nil {
		holder = *lease.Spec.HolderIdentity
	}
	if lease.Spec.LeaseTransitions != nil {
		transitions = *lease.Spec.LeaseTransitions
	}
	for _, p := range pods {
		if holder == p || strings.HasPrefix(holder, p+"-") && len(holder) == len(p)+9 {
			return p, holder, transitions, nil
		}
	}
	return "", holder, transitions, nil
}

// opsPods lists the names of the running, not terminating, pods of ns matching selector.
func opsPods(ctx context.Context, c *Cluster, ns, selector string) ([]string, error) {
	list, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	var names []string
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			names = append(names, p.Name)
		}
	}
	return names, nil
}

// opsLogLines returns the lines of a container's log that contain every one of want.
func opsLogLines(t *testing.T, c *Cluster, ns, pod, container string, want ...string) []string {
	t.Helper()
	logs, err := c.Kubectl(t, "logs", "-n", ns, pod, "-c", container)
	if err != nil {
		t.Logf("logs of %s/%s: %v", ns, pod, err)
		return nil
	}
	var lines []string
next:
	for _, l := range strings.Split(logs, "\n") {
		for _, w := range want {
			if !strings.Contains(l, w) {
				continue next
			}
		}
		lines = append(lines, l)
	}
	return lines
}

// opsPrometheus is a prometheus of hack/build-prometheus.sh run in the node's network namespace,
// where pod IPs are routed, serving its HTTP API on the node's address (reachable from the
// machine).
type opsPrometheus struct {
	api string
	cmd *exec.Cmd
	log string
}

// opsStartPrometheus starts prometheus with config (a prometheus.yml), its API on the node's
// address and port, and returns once it is ready, or the error and log of a process that exited
// first. At cleanup it is stopped and its data directory removed.
func opsStartPrometheus(t *testing.T, c *Cluster, port int, config string) (*opsPrometheus, error) {
	t.Helper()
	bin := promBinary(t, "prometheus")
	dir := t.TempDir() // removed after the process is stopped: cleanups run last-in first-out
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	listen := fmt.Sprintf("%s:%d", c.NodeIP, port)
	p := &opsPrometheus{api: "http://" + listen, log: filepath.Join(dir, "prometheus.log")}
	logFile, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	// nsenter execs prometheus (no fork for a network namespace): the pid is prometheus's.
	p.cmd = exec.Command("nsenter", "--net=/run/netns/"+c.env["NETNS"], "--", bin,
		"--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+listen, "--log.level=warn")
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-exited
		}
		logFile.Close()
	})
	err = wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-exited:
			exited <- err // for the cleanup
			return false, fmt.Errorf("prometheus exited: %v", err)
		default:
		}
		resp, err := http.Get(p.api + "/-/ready")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return nil, fmt.Errorf("prometheus not ready: %v\n%s", err, p.logTail())
	}
	return p, nil
}

func (p *opsPrometheus) logTail() string {
	b, _ := os.ReadFile(p.log)
	return tail(string(b), 20)
}

// query runs an instant query through /api/v1/query and returns the vector's samples as
// label set -> value.
func (p *opsPrometheus) query(ctx context.Context, q string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.api+"/api/v1/query?query="+url.QueryEscape(q), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("query %s: %w", q, err)
	}
	if r.Status != "success" || r.Data.ResultType != "vector" {
		return nil, fmt.Errorf("query %s: status %s, type %s: %s", q, r.Status, r.Data.ResultType, r.Error)
	}
	out := map[string]float64{}
	for _, s := range r.Data.Result {
		v, _ := s.Value[1].(string)
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, fmt.Errorf("query %s: value %v: %w", q, s.Value[1], err)
		}
		out[fmt.Sprint(s.Metric)] = f
	}
	return out, nil
}

// sum is the sum of query's samples (0 for an empty vector: a counter series exists only
// from its first event).
func (p *opsPrometheus) sum(ctx context.Context, q string) (float64, error) {
	samples, err := p.query(ctx, q)
	var s float64
	for _, v := range samples {
		s += v
	}
	return s, err
}

// opsScrapePrometheus starts Prometheus with the README's scrape config for the csi-resizer
// pods, the kubernetes_sd_configs line, given kubeconfig_file since Prometheus runs outside the
// cluster (a kubeconfig with promSA's token: the permissions a Prometheus pod would have), and
// the rule files.
func opsScrapePrometheus(t *testing.T, c *Cluster, kubeconfig string, rules []string) *opsPrometheus {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	sd := regexp.MustCompile("(?m)^scrape_configs: \\[\\{job_name: csi-resizer, kubernetes_sd_configs: .*$").FindString(string(readme))
	withKubeconfig := strings.Replace(sd, "{role: pod}", fmt.Sprintf("{role: pod, kubeconfig_file: %q}", kubeconfig), 1)
	if sd == "" || withKubeconfig == sd {
		t.Fatalf("README.md lacks the one-line scrape config with kubernetes_sd_configs: [{role: pod}] (found %q)", sd)
	}
	quoted := make([]string, len(rules))
	for i, r := range rules {
		quoted[i] = strconv.Quote(r)
	}
	global := "global: {scrape_interval: 2s, scrape_timeout: 2s, evaluation_interval: 2s}\n" +
		"rule_files: [" + strings.Join(quoted, ", ") + "]\n"
	t.Logf("README's scrape config: %s", sd)
	prom, err := opsStartPrometheus(t, c, 19090, global+withKubeconfig+"\n")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s (%s) scrapes with the README's kubernetes_sd_configs as ServiceAccount %s/%s", prom.api,
		promVersion(promBinary(t, "prometheus")), promNS, promSA)
	return prom
}
