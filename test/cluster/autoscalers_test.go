//go:build cluster

package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/csi-resizer/csi-resizer/pkg/autoscale/policy"
	"github.com/csi-resizer/csi-resizer/test/framework"
)

// TestAutoscalersSideBySide (`make bench-node-autoscalers`; skipped unless BENCH_AUTOSCALERS=1)
// measures volume-autoscaler and topolvm/pvc-autoresizer v0.21.0 (the real binary of
// ../shared/anchors, installed by its own Helm chart, with the Prometheus it needs scraping the
// kubelet) on the same fill of the same kind of volume, one after the other: the time from a
// volume crossing its threshold (fallocate returned) to its PVC's new request, and the CPU and memory
// of every container each needs, from their cgroups. Both poll every sbsInterval, and the
// kubelet refreshes volume stats every 10s (up.sh), so the comparison is of the mechanisms, not
// of their default intervals (ours 60s, pvc-autoresizer's 1m, its chart's 10s).
func TestAutoscalersSideBySide(t *testing.T) {
	if os.Getenv("BENCH_AUTOSCALERS") == "" {
		t.Skip("a benchmark: run it with make bench-node-autoscalers (BENCH_AUTOSCALERS=1)")
	}
	cycles := 5
	if v, err := strconv.Atoi(os.Getenv("BENCH_AUTOSCALERS_CYCLES")); err == nil && v > 0 {
		cycles = v
	}
	c := clusterFor(t)
	deployHostpathOnce(t, c)
	useOurResizer(t, c)
	fs := mountHostpathDataFS(t, c, 300)
	// Opted in by pvc-autoresizer's key; the policy is on the PVCs, in its keys (measure).
	createHostpathClass(t, c, sbsClass, map[string]string{policy.TopoLVMEnabled: "true"})
	var runs []sbsRun
	sizeMi := 300
	for _, tool := range []sbsTool{sbsVolumeAutoscaler(), sbsPVCAutoresizer()} {
		t.Run(tool.name, func(t *testing.T) {
			containers := tool.install(t, c)
			a := &sbsEnv{autoscaleEnv: autoscaleEnv{scenarioEnv: scenarioEnv{c: c, ns: scenarioNamespace(t, c, "sbs-"+tool.name), ctx: context.Background()}, fs: fs}, sizeMi: sizeMi}
			runs = append(runs, a.measure(t, tool, containers, cycles))
			sizeMi = a.sizeMi
		})
	}
	report := sbsMarkdown(runs, cycles, c)
	t.Logf("side by side:\n%s", report)
	if out := os.Getenv("BENCH_AUTOSCALERS_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(report), 0o644); err != nil {
			t.Error(err)
		}
	}
}

const (
	// sbsClass is the StorageClass both autoscalers act on, opted in by pvc-autoresizer's key.
	sbsClass = "csi-hostpath-sbs"
	// sbsInterval is both tools' poll interval and Prometheus' scrape interval.
	sbsInterval = 10 * time.Second
	// sbsThreshold is the PVCs' free-space threshold (resize.topolvm.io/threshold, percent);
	// the fill leaves half of it free.
	sbsThreshold = 20
	// sbsPromNS holds the Prometheus pvc-autoresizer queries.
	sbsPromNS = "sbs-prometheus"
	// pvcAutoresizerNS is where its chart is installed.
	pvcAutoresizerNS = "pvc-autoresizer"
	// pvcAutoresizerImage is the anchor binary in an image assembled offline.
	pvcAutoresizerImage = "localhost/pvc-autoresizer:v0.21.0"
)

// sbsEnv is one tool's namespace on the shared data file system, whose size it tracks.
type sbsEnv struct {
	autoscaleEnv
	sizeMi int
}

// sbsTool installs one autoscaler (removed at the end of the subtest) and returns the
// containers whose cgroups are its cost: namespace, pod label selector, container.
type sbsTool struct {
	name    string
	install func(t *testing.T, c *Cluster) []sbsContainer
}

type sbsContainer struct{ ns, selector, container string }

// sbsRun is one tool's measurement.
type sbsRun struct {
	Tool      string
	Reactions []time.Duration
	// Extra counts the steps that were not the first answer to a fill.
	Extra  int
	Window time.Duration
	Usage  []sbsUsage
}

// sbsUsage is one container's cgroup over the measured window.
type sbsUsage struct {
	Container            string
	CPUWindow, CPUTotal  float64
	MemPeak, MemAtTheEnd int64
}

func sbsVolumeAutoscaler() sbsTool {
	return sbsTool{name: "volume-autoscaler", install: func(t *testing.T, c *Cluster) []sbsContainer {
		installAutoscalerWith(t, c, "--interval="+sbsInterval.String(), "--cooldown=0s", "--default-min-increase=1Mi")
		return []sbsContainer{{autoscalerNS, "app.kubernetes.io/name=volume-autoscaler", "volume-autoscaler"}}
	}}
}

func sbsPVCAutoresizer() sbsTool {
	return sbsTool{name: "pvc-autoresizer", install: func(t *testing.T, c *Cluster) []sbsContainer {
		promURL := sbsPrometheus(t, c)
		installPVCAutoresizer(t, c, promURL)
		return []sbsContainer{{sbsPromNS, "app=prometheus", "prometheus"},
			{pvcAutoresizerNS, "app.kubernetes.io/name=pvc-autoresizer", "pvc-autoresizer"}}
	}}
}

// measure runs the cycles on a PVC of its own: fill past the threshold, time until the request
// changes, let the resize finish, free the space and grow the file system as a block driver's
// node expansion would, and wait until the kubelet (and whatever the tool reads) shows it.
func (a *sbsEnv) measure(t *testing.T, tool sbsTool, containers []sbsContainer, cycles int) sbsRun {
	const pvc = "data"
	claim := hostpathPVC(a.ns, pvc, "300Mi")
	claim.Spec.StorageClassName = ptrTo(sbsClass)
	claim.Annotations = map[string]string{policy.TopoLVMStorageLimit: "100Gi", policy.TopoLVMThreshold: fmt.Sprintf("%d%%", sbsThreshold),
		policy.TopoLVMIncrease: "10%", policy.TopoLVMInodesThreshold: "1%"}
	if _, err := a.c.Client.CoreV1().PersistentVolumeClaims(a.ns).Create(a.ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a.podWithClaim(t, "writer", pvc)
	a.settled(t, tool, pvc)
	run := sbsRun{Tool: tool.name}
	begin := time.Now()
	start := a.usage(t, containers)
	for i := range cycles {
		reaction, extra := a.cycle(t, tool, pvc, i+1)
		run.Reactions = append(run.Reactions, reaction)
		run.Extra += extra
	}
	run.Window = time.Since(begin)
	end := a.usage(t, containers)
	for i := range containers {
		end[i].CPUWindow -= start[i].CPUWindow
	}
	run.Usage = end
	return run
}

// cycle fills the volume past its threshold and times its new request from when fallocate returned;
// then, once the resize is done, it frees the space and grows the file system by the step, as a
// block driver's node expansion would, and waits until the tool can see that. extra counts
// the request changes besides the one timed (a second step on the same fill).
func (a *sbsEnv) cycle(t *testing.T, tool sbsTool, pvc string, n int) (reaction time.Duration, extra int) {
	t.Helper()
	before := a.get(t, pvc).Spec.Resources.Requests.Storage().DeepCopy()
	_, crossed := a.fillTo(t, "writer", "fill", sbsThreshold/2, fallocateFill)
	var after *corev1.PersistentVolumeClaim
	err := wait.PollUntilContextTimeout(a.ctx, 100*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := a.c.Client.CoreV1().PersistentVolumeClaims(a.ns).Get(ctx, pvc, metav1.GetOptions{})
		after = p
		return err == nil && p.Spec.Resources.Requests.Storage().Cmp(before) > 0, nil
	})
	if err != nil {
		t.Fatalf("%s: fill %d: PVC %s/%s not resized within 3m of crossing its threshold (request %s)\n%s", tool.name, n, a.ns, pvc, before.String(), a.events(t, pvc))
	}
	reaction = time.Since(crossed)
	to := after.Spec.Resources.Requests.Storage().DeepCopy()
	t.Logf("%s: fill %d: %s -> %s, %s after fallocate returned", tool.name, n, before.String(), to.String(), reaction.Round(100*time.Millisecond))
	a.waitPVC(t, pvc, 2*time.Minute, "capacity "+to.String(), func(p *corev1.PersistentVolumeClaim) bool {
		return p.Status.Capacity.Storage().Cmp(to) >= 0 && len(p.Status.AllocatedResourceStatuses) == 0
	})
	if out, err := a.c.Kubectl(t, "-n", a.ns, "exec", "writer", "--", "sh", "-c", "rm -f /data/fill && sync"); err != nil {
		t.Fatalf("rm in writer: %v\n%s", err, out)
	}
	now := a.get(t, pvc).Spec.Resources.Requests.Storage().DeepCopy()
	if now.Cmp(to) != 0 {
		t.Logf("%s: fill %d: a second step before the file system grew: %s -> %s", tool.name, n, to.String(), now.String())
		extra++
	}
	// Grown by the step, as a block driver's node expansion grows a volume's own file system:
	// the XFS is shared, and after the first tool's run it is larger than the second tool's
	// PVC, which both tools must see grow (each waits for the file system after a resize).
	if step := int((now.Value() - before.Value()) >> 20); step > 0 {
		a.sizeMi += step
		a.fs.grow(t, a.c, a.sizeMi)
	}
	a.settled(t, tool, pvc)
	if last := a.get(t, pvc).Spec.Resources.Requests.Storage(); last.Cmp(now) != 0 {
		t.Logf("%s: fill %d: a step after the file system grew and was freed: %s -> %s", tool.name, n, now.String(), last.String())
		extra++
	}
	return reaction, extra
}

// settled waits until the kubelet reports the file system as statfs in the pod shows it now
// (its size, more free than the threshold) and, for pvc-autoresizer, until its Prometheus has
// scraped that: the tool starts the next fill from a volume it sees as not crossing.
func (a *sbsEnv) settled(t *testing.T, tool sbsTool, pvc string) {
	t.Helper()
	want := a.df(t, "writer")
	if want.avail*100 <= want.capacity*sbsThreshold {
		t.Fatalf("PVC %s/%s: the writer's file system is past the threshold after the fill was removed: %+v", a.ns, pvc, want)
	}
	last := "nothing read"
	seen := func(source string, capacity, avail int64, err error) bool {
		switch {
		case err != nil:
			last = source + ": " + err.Error()
		case capacity != want.capacity || avail*100 <= capacity*sbsThreshold:
			last = fmt.Sprintf("%s: capacity %d, available %d", source, capacity, avail)
		default:
			return true
		}
		return false
	}
	err := wait.PollUntilContextTimeout(a.ctx, time.Second, 2*time.Minute, true, func(context.Context) (bool, error) {
		ctx, cancel := context.WithTimeout(a.ctx, 10*time.Second)
		defer cancel()
		if capacity, avail, err := a.kubeletVolume(ctx, pvc); !seen("kubelet", capacity, avail, err) {
			return false, nil
		}
		if tool.name != "pvc-autoresizer" {
			return true, nil
		}
		capacity, avail, err := a.promVolume(ctx, pvc)
		return seen("prometheus", capacity, avail, err), nil
	})
	if err != nil {
		t.Fatalf("PVC %s/%s: the file system as statfs shows it (%d bytes, %d free) not seen within 2m; last: %s", a.ns, pvc, want.capacity, want.avail, last)
	}
}

// kubeletVolume reads the PVC's volume from the kubelet's /stats/summary (the admin, through
// the apiserver's node proxy): what volume-autoscaler reads, and Prometheus scrapes as metrics.
func (a *sbsEnv) kubeletVolume(ctx context.Context, pvc string) (capacity, avail int64, err error) {
	raw, err := a.c.Client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", a.c.NodeName, "proxy", "stats", "summary").DoRaw(ctx)
	if err != nil {
		return 0, 0, err
	}
	var s statsapi.Summary
	if err := json.Unmarshal(raw, &s); err != nil {
		return 0, 0, err
	}
	for _, p := range s.Pods {
		for _, v := range p.VolumeStats {
			if r := v.PVCRef; r != nil && r.Namespace == a.ns && r.Name == pvc && v.CapacityBytes != nil && v.AvailableBytes != nil {
				return int64(*v.CapacityBytes), int64(*v.AvailableBytes), nil
			}
		}
	}
	return 0, 0, fmt.Errorf("no stats of %s/%s in the kubelet's summary yet", a.ns, pvc)
}

// promVolume queries sbsPromNS's Prometheus (the apiserver's service proxy) for the series
// pvc-autoresizer reads.
func (a *sbsEnv) promVolume(ctx context.Context, pvc string) (capacity, avail int64, err error) {
	get := func(metric string) (int64, error) {
		q := fmt.Sprintf(`%s{namespace=%q,persistentvolumeclaim=%q}`, metric, a.ns, pvc)
		raw, err := a.c.Client.CoreV1().RESTClient().Get().AbsPath("/api/v1/namespaces", sbsPromNS, "services", "prometheus:9090", "proxy", "api", "v1", "query").
			Param("query", q).DoRaw(ctx)
		if err != nil {
			return 0, err
		}
		var r struct {
			Data struct {
				Result []struct {
					Value []any `json:"value"`
				} `json:"result"`
			} `json:"data"`
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			return 0, err
		}
		if len(r.Data.Result) != 1 || len(r.Data.Result[0].Value) != 2 {
			return 0, fmt.Errorf("%s: %s", q, raw)
		}
		s, _ := r.Data.Result[0].Value[1].(string)
		f, err := strconv.ParseFloat(s, 64)
		return int64(f), err
	}
	if capacity, err = get("kubelet_volume_stats_capacity_bytes"); err != nil {
		return 0, 0, err
	}
	avail, err = get("kubelet_volume_stats_available_bytes")
	return capacity, avail, err
}

// The commands fillTo runs in the pod, of the file's name and its size in MiB. dd writes the
// bytes, as an application would; fallocate takes the space at once without writing it (the
// loop image stays sparse), so the file system crosses its threshold when the command returns.
const (
	ddFill        = "dd if=/dev/zero of=/data/%[1]s bs=1M count=%[2]d 2>&1 && sync"
	fallocateFill = "fallocate -l %[2]dM /data/%[1]s && sync"
)

// fillTo fills a file until pct percent of the file system is free, with command (ddFill,
// fallocateFill), and returns the file system as it is after and when the command returned.
func (a *autoscaleEnv) fillTo(t *testing.T, pod, file string, pct int64, command string) (fsUsage, time.Time) {
	t.Helper()
	u := a.df(t, pod)
	mi := (u.avail - u.capacity*pct/100) >> 20
	if mi <= 0 {
		t.Fatalf("%s: nothing to fill, %+v", pod, u)
	}
	if out, err := a.c.Kubectl(t, "-n", a.ns, "exec", pod, "--", "sh", "-c",
		fmt.Sprintf(command, file, mi)); err != nil {
		t.Fatalf("%s in %s: %v\n%s", strings.Fields(command)[0], pod, err, out)
	}
	done := time.Now()
	after := a.df(t, pod)
	t.Logf("%s: %dMi to /data/%s: free %d of %d bytes (%.1f%%)", strings.Fields(command)[0], mi, file, after.avail, after.capacity,
		100*float64(after.avail)/float64(after.capacity))
	return after, done
}

// usage reads each container's cgroup now (CPUWindow holds the CPU time so far).
func (a *sbsEnv) usage(t *testing.T, containers []sbsContainer) []sbsUsage {
	t.Helper()
	var out []sbsUsage
	for _, ct := range containers {
		pods, err := a.c.Client.CoreV1().Pods(ct.ns).List(a.ctx, metav1.ListOptions{LabelSelector: ct.selector})
		if err != nil || len(pods.Items) != 1 {
			t.Fatalf("pods %s in %s: %v (%d, want 1)", ct.selector, ct.ns, err, len(pods.Items))
		}
		pod := pods.Items[0]
		for _, st := range pod.Status.ContainerStatuses {
			if st.Name != ct.container || st.State.Running == nil {
				continue
			}
			pid, err := a.c.ContainerPID(t, st.ContainerID)
			if err != nil {
				t.Fatal(err)
			}
			u, err := ProcessCgroupUsage(pid)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, sbsUsage{Container: ct.ns + "/" + pod.Name + "/" + ct.container, CPUWindow: u.CPUSeconds, CPUTotal: u.CPUSeconds,
				MemPeak: u.MemoryPeakBytes, MemAtTheEnd: u.MemoryBytes})
		}
	}
	if len(out) != len(containers) {
		t.Fatalf("running containers %v, want %d", out, len(containers))
	}
	return out
}

// sbsPrometheus runs Prometheus (hack/build-prometheus.sh's, in an image assembled offline) in
// the cluster as pvc-autoresizer's users do, with the least it needs to scrape the kubelet's
// /metrics (kubelet_volume_stats_*): node discovery and nodes/metrics, its ServiceAccount's
// token, the cluster CA verifying the kubelet. Returns the Service's URL for pvc-autoresizer.
func sbsPrometheus(t *testing.T, c *Cluster) string {
	t.Helper()
	importBinaryImage(t, c, promImage, promBinary(t, "prometheus"), "/bin/prometheus", "hack/build-prometheus.sh")
	objects := fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: prometheus, namespace: %[1]s}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: %[1]s}
rules:
- {apiGroups: [""], resources: [nodes], verbs: [get, list, watch]}
- {apiGroups: [""], resources: [nodes/metrics], verbs: [get]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: %[1]s}
subjects: [{kind: ServiceAccount, name: prometheus, namespace: %[1]s}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: prometheus, namespace: %[1]s}
data:
  prometheus.yml: |
    global: {scrape_interval: %[2]s, evaluation_interval: %[2]s}
    scrape_configs:
    - job_name: kubelet
      scheme: https
      kubernetes_sd_configs: [{role: node}]
      authorization: {credentials_file: /var/run/secrets/kubernetes.io/serviceaccount/token}
      tls_config: {ca_file: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: prometheus, namespace: %[1]s}
spec:
  replicas: 1
  selector: {matchLabels: {app: prometheus}}
  template:
    metadata: {labels: {app: prometheus}}
    spec:
      serviceAccountName: prometheus
      containers:
      - name: prometheus
        image: %[3]s
        imagePullPolicy: Never
        args: [--config.file=/etc/prometheus/prometheus.yml, --storage.tsdb.path=/prometheus, --web.listen-address=:9090]
        ports: [{name: web, containerPort: 9090}]
        readinessProbe: {httpGet: {path: /-/ready, port: web}}
        volumeMounts:
        - {name: config, mountPath: /etc/prometheus}
        - {name: data, mountPath: /prometheus}
      volumes:
      - {name: config, configMap: {name: prometheus}}
      - {name: data, emptyDir: {}}
---
apiVersion: v1
kind: Service
metadata: {name: prometheus, namespace: %[1]s}
spec:
  selector: {app: prometheus}
  ports: [{name: web, port: 9090, targetPort: web}]
`, sbsPromNS, sbsInterval, promImage)
	applyUntilDeleted(t, c, objects)
	if out, err := c.Kubectl(t, "-n", sbsPromNS, "rollout", "status", "deployment/prometheus", "--timeout=180s"); err != nil {
		desc, _ := c.Kubectl(t, "-n", sbsPromNS, "describe", "pods")
		t.Fatalf("%v\n%s\n%s", err, out, tail(desc, 40))
	}
	svc, err := c.Client.CoreV1().Services(sbsPromNS).Get(context.Background(), "prometheus", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Prometheus (%s) scraping the kubelet every %s", promVersion(promBinary(t, "prometheus")), sbsInterval)
	return "http://" + svc.Spec.ClusterIP + ":9090"
}

// installPVCAutoresizer installs pvc-autoresizer v0.21.0 with its own chart (helm template of
// ../shared/anchors/pvc-autoresizer-deploy/chart): one replica, its interval sbsInterval, its
// mutating webhook off (it needs cert-manager or a CA bundle, and only sizes new PVCs), and
// Prometheus at promURL. The chart is copied without its cert-manager dependency, which helm
// wants present even when disabled; nothing else of it changes.
func installPVCAutoresizer(t *testing.T, c *Cluster, promURL string) {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	anchors := filepath.Join(root, "..", "shared", "anchors")
	importBinaryImage(t, c, pvcAutoresizerImage, filepath.Join(anchors, "pvc-autoresizer"), "/pvc-autoresizer", "../shared/anchors/pvc-autoresizer")
	chart := filepath.Join(t.TempDir(), "pvc-autoresizer")
	if out, err := exec.Command("cp", "-a", filepath.Join(anchors, "pvc-autoresizer-deploy", "chart"), chart).CombinedOutput(); err != nil {
		t.Fatalf("copy the chart: %v\n%s", err, out)
	}
	meta, err := os.ReadFile(filepath.Join(chart, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	before, _, _ := strings.Cut(string(meta), "\ndependencies:")
	if err := os.WriteFile(filepath.Join(chart, "Chart.yaml"), []byte(before+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(filepath.Join(chart, "Chart.lock"))
	helmBin := os.Getenv("HELM")
	if helmBin == "" {
		helmBin = hackBuild(t, "build-helm.sh")
	}
	name, tag, _ := strings.Cut(pvcAutoresizerImage, ":")
	cmd := exec.Command(helmBin, "template", "pvc-autoresizer", chart, "--namespace", pvcAutoresizerNS,
		"--set", "image.repository="+name, "--set", "image.tag="+tag, "--set", "image.pullPolicy=Never",
		"--set", "controller.replicas=1", "--set", "controller.args.prometheusURL="+promURL,
		"--set", "controller.args.interval="+sbsInterval.String(), "--set", "webhook.pvcMutatingWebhook.enabled=false",
		"--set", "controller.podDisruptionBudget.enabled=false")
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	rendered, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template pvc-autoresizer: %v", err)
	}
	applyUntilDeleted(t, c, "apiVersion: v1\nkind: Namespace\nmetadata: {name: "+pvcAutoresizerNS+"}\n---\n"+string(rendered))
	if out, err := c.Kubectl(t, "-n", pvcAutoresizerNS, "rollout", "status", "deployment/pvc-autoresizer-controller", "--timeout=120s"); err != nil {
		desc, _ := c.Kubectl(t, "-n", pvcAutoresizerNS, "describe", "pods")
		t.Fatalf("%v\n%s\n%s", err, out, tail(desc, 40))
	}
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := c.Kubectl(t, "-n", pvcAutoresizerNS, "logs", "deployment/pvc-autoresizer-controller", "--tail=40")
			t.Logf("pvc-autoresizer's log:\n%s", logs)
		}
	})
}

// applyUntilDeleted applies the objects and deletes them at the end of the test.
func applyUntilDeleted(t *testing.T, c *Cluster, objects string) {
	t.Helper()
	if out, err := c.KubectlWithInput(t, objects, "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Cleanup(func() {
		if _, err := c.KubectlWithInput(t, objects, "delete", "--ignore-not-found", "--wait=true", "--timeout=120s", "-f", "-"); err != nil {
			t.Error(err)
		}
	})
}

// sbsMarkdown is the table of docs/benchmarks.md's "volume-autoscaler and pvc-autoresizer on the
// real node".
func sbsMarkdown(runs []sbsRun, cycles int, c *Cluster) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d fills per tool, poll and scrape interval %s, kubelet volume stats every 10s, on %s.\n\n", cycles, sbsInterval, time.Now().UTC().Format("2006-01-02 15:04 MST"))
	b.WriteString("| | " + strings.Join(sbsCol(runs, func(r sbsRun) string { return r.Tool }), " | ") + " |\n|---|")
	b.WriteString(strings.Repeat("---|", len(runs)) + "\n")
	row := func(name string, f func(sbsRun) string) {
		b.WriteString("| " + name + " | " + strings.Join(sbsCol(runs, f), " | ") + " |\n")
	}
	row("crossing → new request: median / max", func(r sbsRun) string {
		d := slices.Clone(r.Reactions)
		slices.Sort(d)
		return fmt.Sprintf("%.1f s / %.1f s", d[len(d)/2].Seconds(), d[len(d)-1].Seconds())
	})
	row("each fill", func(r sbsRun) string {
		var s []string
		for _, d := range r.Reactions {
			s = append(s, fmt.Sprintf("%.1f", d.Seconds()))
		}
		return strings.Join(s, ", ") + " s"
	})
	row("resizes per fill", func(r sbsRun) string {
		return fmt.Sprintf("%.2f (%d extra steps)", float64(len(r.Reactions)+r.Extra)/float64(len(r.Reactions)), r.Extra)
	})
	row("containers it needs", func(r sbsRun) string { return strconv.Itoa(len(r.Usage)) })
	row("CPU in the window (all its containers)", func(r sbsRun) string {
		var cpu float64
		for _, u := range r.Usage {
			cpu += u.CPUWindow
		}
		return fmt.Sprintf("%.2f s in %.0f s (%.1f millicores)", cpu, r.Window.Seconds(), 1000*cpu/r.Window.Seconds())
	})
	row("memory at the end / peak (all its containers)", func(r sbsRun) string {
		var now, peak int64
		for _, u := range r.Usage {
			now, peak = now+u.MemAtTheEnd, peak+u.MemPeak
		}
		return fmt.Sprintf("%.1f MiB / %.1f MiB", float64(now)/(1<<20), float64(peak)/(1<<20))
	})
	for i := range 2 {
		row(fmt.Sprintf("container %d: CPU in the window, since start; memory at the end, peak", i+1), func(r sbsRun) string {
			if i >= len(r.Usage) {
				return "none"
			}
			u := r.Usage[i]
			return fmt.Sprintf("%s: %.2f s, %.2f s; %.1f MiB, %.1f MiB", u.Container[strings.LastIndexByte(u.Container, '/')+1:], u.CPUWindow, u.CPUTotal,
				float64(u.MemAtTheEnd)/(1<<20), float64(u.MemPeak)/(1<<20))
		})
	}
	return b.String()
}

func sbsCol(runs []sbsRun, f func(sbsRun) string) []string {
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = f(r)
	}
	return out
}
