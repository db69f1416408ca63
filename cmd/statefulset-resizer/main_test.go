package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/fakeapi"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/status"
)

func runMain(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = Main(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestVersionAndHelp(t *testing.T) {
	code, out, _ := runMain("--version")
	if code != 0 || out != "statefulset-resizer dev\n" {
		t.Errorf("--version: %d %q", code, out)
	}
	code, out, _ = runMain("--help")
	if code != 0 {
		t.Errorf("--help exit %d", code)
	}
	for _, f := range []string{"kubeconfig", "workers", "kube-api-qps", "kube-api-burst", "leader-election",
		"leader-election-namespace", "leader-election-lease-duration", "leader-election-renew-deadline",
		"leader-election-retry-period", "leader-election-labels", "http-endpoint", "metrics-path", "resync-period",
		"version", "v", "vmodule", "wait NAMESPACE/NAME"} {
		if !strings.Contains(out, f) {
			t.Errorf("--help does not mention %q", f)
		}
	}
	code, out, _ = runMain("wait", "--help")
	if code != 0 || !strings.Contains(out, "Exit codes") || !strings.Contains(out, "-timeout") {
		t.Errorf("wait --help: %d %q", code, out)
	}
}

func TestFlagDefaults(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	o := addFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	want := options{workers: 10, qps: 5, burst: 10, resync: 10 * time.Minute, leaseDuration: 15 * time.Second,
		renewDeadline: 10 * time.Second, retryPeriod: 5 * time.Second, metricsPath: "/metrics", leaderElectionLabels: labelMap{}}
	if fmt.Sprintf("%+v", *o) != fmt.Sprintf("%+v", want) {
		t.Errorf("defaults\n got  %+v\n want %+v", *o, want)
	}
	if err := o.validate(); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}
	if err := fs.Parse([]string{"--leader-election-labels", "a:b,c:d"}); err != nil || o.leaderElectionLabels["a"] != "b" || o.leaderElectionLabels["c"] != "d" {
		t.Errorf("labels: %v %v", o.leaderElectionLabels, err)
	}
}

// Bad input: a non-zero exit and one clear line on stderr.
func TestBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--workers", "0"}, 2, "--workers must be positive"},
		{[]string{"--workers=-3"}, 2, "--workers must be positive"},
		{[]string{"--workers", "many"}, 2, "invalid value"},
		{[]string{"--kube-api-qps", "0"}, 2, "--kube-api-qps must be positive"},
		{[]string{"--metrics-path", "metrics"}, 2, "--metrics-path must start with /"},
		{[]string{"--resync-period", "-1s"}, 2, "--resync-period must not be negative"},
		{[]string{"--leader-election", "--leader-election-lease-duration", "5s"}, 2, "lease-duration (5s) must be greater"},
		{[]string{"--leader-election", "--leader-election-retry-period", "9s"}, 2, "renew-deadline (10s) must be greater than 1.2"},
		{[]string{"--leader-election-labels", "novalue"}, 2, "malformed label"},
		{[]string{"--no-such-flag"}, 2, "flag provided but not defined"},
		{[]string{"run"}, 2, `unexpected argument "run"`},
		{[]string{"wait"}, 3, "missing NAMESPACE/NAME"},
		{[]string{"wait", "--timeout", "1m"}, 3, "missing NAMESPACE/NAME"},
		{[]string{"wait", "web"}, 3, `want NAMESPACE/NAME, got "web"`},
		{[]string{"wait", "default/"}, 3, "want NAMESPACE/NAME"},
		{[]string{"wait", "Default/web"}, 3, `invalid namespace "Default"`},
		{[]string{"wait", "a/b", "c/d"}, 3, `unexpected argument "c/d"`},
		{[]string{"wait", "a/b", "--timeout", "0s"}, 3, "--timeout must be positive"},
		{[]string{"wait", "a/b", "--timeout", "soon"}, 3, "invalid value"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errOut := runMain(tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.want) || strings.Count(errOut, "\n") != 1 || out != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d and one line containing %q", code, out, errOut, tc.code, tc.want)
			}
		})
	}
}

// writeKubeconfig points a kubeconfig file at the fake API server.
func writeKubeconfig(t *testing.T, api *fakeapi.Server) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	data := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: fake, cluster: {server: %q}}]
users: [{name: fake, user: {}}]
contexts: [{name: fake, context: {cluster: fake, user: fake}}]
current-context: fake
`, api.Config().Host)
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func statefulSetWithStatus(st *status.VolumeClaimTemplates) *appsv1.StatefulSet {
	s := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", Generation: 2},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](2),
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"}}}},
	}
	value, _ := st.Encode()
	s.Annotations = map[string]string{status.Annotation: value}
	return s
}

// The wait subcommand as a CI job runs it, against the fake API server
// through a kubeconfig file; flags before and after NAMESPACE/NAME.
func TestWaitCommandExitCodes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status status.VolumeClaimTemplates
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"finished", status.VolumeClaimTemplates{ObservedGeneration: 2, Templates: []status.Template{
			{TemplateName: "data", ReadyReplicas: 2, FinishedReconciliationGeneration: 2}}},
			[]string{"ns/web", "--timeout", "20s"}, 0, "finished for generation 2", ""},
		{"infeasible", status.VolumeClaimTemplates{ObservedGeneration: 2, Templates: []status.Template{
			{TemplateName: "data", ReadyReplicas: 1, InfeasibleReplicas: 1, Message: "data-web-1: cannot resize to 9Gi: OutOfRange: pool full"}}},
			[]string{"--timeout", "20s", "ns/web"}, 1, "", "data-web-1: cannot resize to 9Gi: OutOfRange: pool full"},
		{"timeout", status.VolumeClaimTemplates{ObservedGeneration: 2, Templates: []status.Template{
			{TemplateName: "data", ReadyReplicas: 1, FinishedReconciliationGeneration: 1}}},
			[]string{"ns/web", "--timeout=100ms"}, 2, "", "timed out after 100ms: template data: 1 of 2 replicas ready"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := fakeapi.New(t, statefulSetWithStatus(&tc.status))
			args := append([]string{"wait", "--kubeconfig", writeKubeconfig(t, api), "--interval", "10ms"}, tc.args...)
			code, out, errOut := runMain(args...)
			if code != tc.code || !strings.Contains(out, tc.stdout) || !strings.Contains(errOut, tc.stderr) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d, %q, %q", code, out, errOut, tc.code, tc.stdout, tc.stderr)
			}
		})
	}
}

// The controller binary's run loop in-process against the fake API server:
// it patches a PVC and serves its metrics. (Leader election is left to the
// integration tests: csi-lib-utils exits the process when leadership ends.)
func TestRunServesAndReconciles(t *testing.T) {
	size := resource.MustParse("1Gi")
	objs := []runtime.Object{
		&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "sc"}, AllowVolumeExpansion: ptr.To(true)},
		&appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", Generation: 1},
			Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1), PodManagementPolicy: appsv1.ParallelPodManagement,
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
				VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"},
					Spec: corev1.PersistentVolumeClaimSpec{Resources: corev1.VolumeResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}}}}}},
			Status: appsv1.StatefulSetStatus{ObservedGeneration: 1, UpdateRevision: "r1"},
		},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-0",
			Labels: map[string]string{"app": "web", appsv1.StatefulSetRevisionLabel: "r1"}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}},
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "data-web-0"},
			Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To("sc"),
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}}},
			Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, Capacity: corev1.ResourceList{corev1.ResourceStorage: size}}},
	}
	api := fakeapi.New(t, objs...)
	client := api.Clientset(t)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()

	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	o := addFlags(fs)
	if err := fs.Parse([]string{"--kubeconfig", writeKubeconfig(t, api), "--http-endpoint", addr, "--workers", "1"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, o) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()

	poll := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true,
			func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
	poll("PVC patched", func() bool {
		pvc, err := client.CoreV1().PersistentVolumeClaims("ns").Get(ctx, "data-web-0", metav1.GetOptions{})
		return err == nil && pvc.Spec.Resources.Requests.Storage().String() == "2Gi"
	})
	// The duration is observed when the sync returns, after the patch counter moved: wait for
	// every series, not just the first.
	wantSeries := []string{
		`statefulset_resizer_replicas_pending{namespace="ns",statefulset="web",template="data"} 1`,
		`statefulset_resizer_reconcile_duration_seconds_count{result="success"}`,
		`workqueue_adds_total{name="statefulset-resizer"}`,
	}
	var metrics string
	poll("metrics served", func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		metrics = string(body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(metrics, `statefulset_resizer_pvc_patches_total{result="success"}`) {
			return false
		}
		for _, want := range wantSeries {
			if !strings.Contains(metrics, want) {
				return false
			}
		}
		return true
	})
}

// Two processes on one host must not share a Lease identity: client-go would let both lead.
func TestLeaderIdentityIsUniquePerProcess(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Skip(err)
	}
	a, errA := leaderIdentity()
	b, errB := leaderIdentity()
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	if a == b || !strings.HasPrefix(a, host+"_") || !strings.HasPrefix(b, host+"_") {
		t.Errorf("identities %q and %q: want %s_<random>, different each time", a, b, host)
	}
}
