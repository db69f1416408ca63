//go:build integration

package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedappsv1 "k8s.io/client-go/kubernetes/typed/apps/v1"
	"k8s.io/utils/ptr"

	ssstatus "github.com/csi-resizer/csi-resizer/pkg/statefulset/status"
	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// StatefulSetRun is one statefulset-resizer measurement.
type StatefulSetRun struct {
	Replicas int    `json:"replicas"`
	From     string `json:"from"`
	To       string `json:"to"`
	// PatchedSeconds: template change until every replica's PVC request is the new size.
	PatchedSeconds float64 `json:"patchedSeconds"`
	// FinishedSeconds: template change until the status annotation reports
	// finishedReconciliationGeneration = the StatefulSet's generation.
	FinishedSeconds float64 `json:"finishedSeconds"`
	// ResizerFlags are the csi-resizer's flags (the expansions are part of the time).
	ResizerFlags []string `json:"csiResizerFlags"`
	// Clients are the window's API requests by client (user agent), from the audit log.
	Clients map[string]*clientRequests `json:"clients"`
}

// statefulSetResizerMissing says why the statefulset-resizer cannot be measured, or "" when
// ./cmd/statefulset-resizer exists and builds.
func statefulSetResizerMissing() string {
	root, err := framework.RepoRoot()
	if err != nil {
		return err.Error()
	}
	dir := filepath.Join(root, "cmd", "statefulset-resizer")
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	if len(files) == 0 {
		return fmt.Sprintf("cmd/statefulset-resizer has no Go files at %s (being written by another engineer)", gitDescribe())
	}
	tmp, err := os.MkdirTemp("", "bench-sts-build-")
	if err != nil {
		return err.Error()
	}
	defer os.RemoveAll(tmp)
	cmd := exec.Command("go", "build", "-mod=vendor", "-o", filepath.Join(tmp, "statefulset-resizer"), "./cmd/statefulset-resizer")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Sprintf("./cmd/statefulset-resizer does not build at %s: %v: %s", gitDescribe(), err, strings.TrimSpace(string(out)))
	}
	return ""
}

func BenchmarkStatefulSetResizer(b *testing.B) {
	if why := statefulSetResizerMissing(); why != "" {
		report.skipStatefulSet(why)
		b.Skip(why)
	}
	runStatefulSet(b)
}

// stsResizerFlags: the csi-resizer expands the PVCs the statefulset-resizer raises; it runs
// with a higher client rate than its default so that the time measured is mostly the
// statefulset-resizer's (at qps 5 the 100 expansions alone take ~80 s: 4 requests each).
var stsResizerFlags = []string{"--kube-api-qps=50", "--kube-api-burst=100"}

func runStatefulSet(b *testing.B) {
	replicas := 100
	if smoke {
		replicas = 3
	}
	auditFlags, auditLog := auditArgs(b, b.TempDir())
	e := scenario.Start(b, scenario.Options{AdminResizer: true, NoResizer: true,
		Cluster: framework.ClusterOptions{ControllerManager: true, APIServerArgs: auditFlags}})
	ctx := e.Ctx
	client, err := bulkClient(e.Cluster)
	if err != nil {
		b.Fatal(err)
	}
	from, to := resource.MustParse("1Gi"), resource.MustParse("2Gi")

	// The replicas' PVCs exist, bound, before the StatefulSet: the StatefulSet controller adopts
	// claims named <template>-<set>-<ordinal>.
	ids := make([]string, replicas)
	if err := parallel(replicas, 8, func(i int) error {
		id, err := e.Driver.CreateVolume(ctx, fmt.Sprintf("%s-%d", e.Namespace, i), from.Value())
		ids[i] = id
		return err
	}); err != nil {
		b.Fatal(err)
	}
	if _, err := createPairs(ctx, client, pairSpec{Namespace: e.Namespace, Driver: e.Driver.Name, StorageClass: e.StorageClass,
		Size: from.String(), Prefix: "data-web", VolumeIDs: ids}, replicas); err != nil {
		b.Fatal(err)
	}
	csiResizer, _ := startResizer(b, e, binaries(b)[0], e.Driver, replicas, stsResizerFlags...)
	defer func() { _ = csiResizer.Stop() }()

	sets := client.AppsV1().StatefulSets(e.Namespace)
	if _, err := sets.Create(ctx, statefulSet(e.Namespace, e.StorageClass, replicas, from), metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	// No scheduler and no kubelet: the benchmark binds the pods and marks them Running.
	var pods []v1.Pod
	waitFor(b, 2*time.Minute, func() (bool, string) {
		list, err := e.Client.CoreV1().Pods(e.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, err.Error()
		}
		pods = list.Items
		return len(pods) == replicas, fmt.Sprintf("%d of %d pods created", len(pods), replicas)
	})
	for i := range pods {
		framework.MarkPodRunning(b, ctx, e.Client, &pods[i])
	}

	addr := fmt.Sprintf("127.0.0.1:%d", framework.FreePort(b))
	ssr := framework.NewProcess(b, "statefulset-resizer", framework.BuildStatefulSetResizer(b),
		"--kubeconfig="+e.Cluster.Kubeconfig, "--http-endpoint="+addr, "--recreate-record-namespace=default", resizerLogLevel)
	ssr.HTTPAddr = addr
	ssr.Start(b)
	ssr.WaitHTTP(b, "/metrics", 2*time.Minute)
	// Template = PVCs: the first reconcile finishes generation 1 at once.
	waitFinished(b, ctx, sets, replicas, 3*time.Minute)

	// The resize, as a user does it on a vanilla apiserver: delete --cascade=orphan, re-create
	// with the larger template. The window starts at the re-create.
	if err := sets.Delete(ctx, "web", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationOrphan)}); err != nil {
		b.Fatal(err)
	}
	waitFor(b, 2*time.Minute, func() (bool, string) {
		_, err := sets.Get(ctx, "web", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprintf("StatefulSet web still there (%v)", err)
	})
	t0 := time.Now()
	if _, err := sets.Create(ctx, statefulSet(e.Namespace, e.StorageClass, replicas, to), metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	var patched time.Duration
	pvcs := client.CoreV1().PersistentVolumeClaims(e.Namespace)
	waitFor(b, 10*time.Minute, func() (bool, string) {
		list, err := pvcs.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		n := 0
		for _, pvc := range list.Items {
			if q := pvc.Spec.Resources.Requests[v1.ResourceStorage]; q.Cmp(to) == 0 {
				n++
			}
		}
		return n == replicas, fmt.Sprintf("%d of %d PVC requests at %s", n, replicas, to.String())
	})
	patched = time.Since(t0)
	waitFinished(b, ctx, sets, replicas, 10*time.Minute)
	finished := time.Since(t0)
	// The statefulset-resizer's last status write and the resizers' events land shortly after:
	// count until the audit log has been quiet for the benchmark's clients for 3 s.
	end := quietAudit(b, auditLog, t0)

	r := StatefulSetRun{Replicas: replicas, From: from.String(), To: to.String(), ResizerFlags: stsResizerFlags,
		PatchedSeconds: seconds(patched), FinishedSeconds: seconds(finished), Clients: auditByClient(b, auditLog, t0, end)}
	report.addStatefulSet(r)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(r.FinishedSeconds, "s-finished")
	if c := r.Clients["statefulset-resizer"]; c != nil {
		b.ReportMetric(float64(c.Writes)/float64(replicas), "ssr-writes/replica")
		b.ReportMetric(float64(c.Reads)/float64(replicas), "ssr-reads/replica")
	}
	for name, c := range r.Clients {
		b.Logf("%s: %d reads, %d writes, %d event writes, %d watches: %v", name, c.Reads, c.Writes, c.Events, c.Watches, c.Detail)
	}
	b.Logf("%d replicas %s -> %s: PVC requests patched after %.1fs, finished after %.1fs", replicas, from.String(), to.String(), r.PatchedSeconds, r.FinishedSeconds)
	if err := ssr.Stop(); err != nil {
		b.Logf("stopping the statefulset-resizer: %v", err)
	}
}

// waitFinished polls the StatefulSet until its status annotation says every template is
// finished for its current generation with all replicas ready.
func waitFinished(b *testing.B, ctx context.Context, sets typedappsv1.StatefulSetInterface, replicas int, timeout time.Duration) {
	b.Helper()
	waitFor(b, timeout, func() (bool, string) {
		sts, err := sets.Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		st, err := ssstatus.FromStatefulSet(sts)
		if err != nil || st == nil {
			return false, fmt.Sprintf("no status annotation yet (%v)", err)
		}
		if st.ObservedGeneration != sts.Generation || len(st.Templates) == 0 {
			return false, fmt.Sprintf("status for generation %d, StatefulSet at %d", st.ObservedGeneration, sts.Generation)
		}
		for _, t := range st.Templates {
			if t.FinishedReconciliationGeneration != sts.Generation || int(t.ReadyReplicas) != replicas {
				return false, fmt.Sprintf("template %s: %d of %d ready, finished generation %d of %d, %d infeasible %s",
					t.TemplateName, t.ReadyReplicas, replicas, t.FinishedReconciliationGeneration, sts.Generation, t.InfeasibleReplicas, t.Message)
			}
		}
		return true, ""
	})
}

// quietAudit polls the audit log until the product's clients have made no request for 3 s
// (at most a minute) and returns the end of the window.
func quietAudit(b *testing.B, auditLog string, from time.Time) time.Time {
	b.Helper()
	last, stable := -1, 0
	pollUntil(time.Minute, time.Second, func() bool {
		n := 0
		for name, c := range auditByClient(b, auditLog, from, time.Now().Add(time.Hour)) {
			if name == "statefulset-resizer" || name == "csi-resizer" {
				n += c.Reads + c.Writes + c.Events
			}
		}
		if n == last {
			stable++
		} else {
			stable = 0
		}
		last = n
		return stable >= 3
	})
	return time.Now()
}

// statefulSet is a Parallel StatefulSet web with one volume claim template "data" of size.
func statefulSet(ns, storageClass string, replicas int, size resource.Quantity) *appsv1.StatefulSet {
	labels := map[string]string{"app": "web"}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To(int32(replicas)),
			PodManagementPolicy: appsv1.ParallelPodManagement,
			ServiceName:         "web",
			Selector:            &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: v1.PodSpec{Containers: []v1.Container{{
					Name: "app", Image: "registry.k8s.io/pause:3.10",
					VolumeMounts: []v1.VolumeMount{{Name: "data", MountPath: "/data"}},
				}}},
			},
			VolumeClaimTemplates: []v1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: v1.PersistentVolumeClaimSpec{
					AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
					StorageClassName: ptr.To(storageClass),
					Resources:        v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: size}},
				},
			}},
		},
	}
}
