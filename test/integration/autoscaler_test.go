//go:build integration

package integration

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"

	"github.com/csi-resizer/csi-resizer/pkg/autoscale/policy"
	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// kubeletStandIn serves the kubelet's /stats/summary over TLS for one Node, and authorizes
// each request as the kubelet does: the bearer token through a TokenReview, then a
// SubjectAccessReview for nodes/stats get on the node. So the autoscaler's token and the
// shipped ClusterRole are checked by the real apiserver. (A stand-in is acceptable here only:
// the real kubelet is test/cluster's.)
type kubeletStandIn struct {
	t      *testing.T
	client kubernetes.Interface
	node   string
	srv    *httptest.Server

	mu sync.Mutex
	// volumes is the usage reported per PVC ("namespace/name").
	volumes map[string]statsv1alpha1.FsStats
	refused []string
}

func startKubeletStandIn(t *testing.T, client kubernetes.Interface, node string, ca *framework.CA) *kubeletStandIn {
	k := &kubeletStandIn{t: t, client: client, node: node, volumes: map[string]statsv1alpha1.FsStats{}}
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := ca.Issue(node, []string{"127.0.0.1"}, cert, key); err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	k.srv = httptest.NewUnstartedServer(http.HandlerFunc(k.serve))
	k.srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	k.srv.StartTLS()
	t.Cleanup(k.srv.Close)
	return k
}

func (k *kubeletStandIn) port() int32 {
	_, p, _ := net.SplitHostPort(k.srv.Listener.Addr().String())
	n, _ := strconv.Atoi(p)
	return int32(n)
}

func (k *kubeletStandIn) set(key string, capacity, available int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := metav1.Now()
	k.volumes[key] = statsv1alpha1.FsStats{Time: now, CapacityBytes: ptr.To(uint64(capacity)), AvailableBytes: ptr.To(uint64(available)),
		UsedBytes: ptr.To(uint64(capacity - available)), Inodes: ptr.To(uint64(100000)), InodesFree: ptr.To(uint64(90000)), InodesUsed: ptr.To(uint64(10000))}
}

func (k *kubeletStandIn) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/stats/summary" || r.Method != http.MethodGet {
		http.NotFound(w, r)
		return
	}
	if code, why := k.authorize(r); code != http.StatusOK {
		k.mu.Lock()
		k.refused = append(k.refused, why)
		k.mu.Unlock()
		http.Error(w, why, code)
		return
	}
	k.mu.Lock()
	summary := statsv1alpha1.Summary{Node: statsv1alpha1.NodeStats{NodeName: k.node}}
	for key, fs := range k.volumes {
		ns, name, _ := strings.Cut(key, "/")
		summary.Pods = append(summary.Pods, statsv1alpha1.PodStats{
			PodRef: statsv1alpha1.PodReference{Namespace: ns, Name: "pod-" + name, UID: "uid-" + name},
			VolumeStats: []statsv1alpha1.VolumeStats{{Name: "data", FsStats: fs,
				PVCRef: &statsv1alpha1.PVCReference{Namespace: ns, Name: name}}},
		})
	}
	k.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(summary)
}

// authorize is the kubelet's webhook authentication and authorization of a GET /stats/summary.
func (k *kubeletStandIn) authorize(r *http.Request) (int, string) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return http.StatusUnauthorized, "no bearer token"
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	review, err := k.client.AuthenticationV1().TokenReviews().Create(ctx,
		&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil || !review.Status.Authenticated {
		return http.StatusUnauthorized, fmt.Sprintf("token not authenticated: %v", err)
	}
	u := review.Status.User
	extra := map[string]authorizationv1.ExtraValue{}
	for key, v := range u.Extra {
		extra[key] = authorizationv1.ExtraValue(v)
	}
	sar, err := k.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: u.Username, Groups: u.Groups, UID: u.UID, Extra: extra,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Resource: "nodes", Subresource: "stats", Name: k.node},
	}}, metav1.CreateOptions{})
	if err != nil || !sar.Status.Allowed {
		return http.StatusForbidden, fmt.Sprintf("%s may not get nodes/stats of %s: %v", u.Username, k.node, err)
	}
	return http.StatusOK, ""
}

// TestVolumeAutoscaler runs the volume-autoscaler binary against a real apiserver as the
// shipped ServiceAccount, with a kubelet stand-in as the Node's kubelet: --dry-run only tells;
// then a volume above its threshold is grown by the step, the next rounds wait for the file
// system to grow, then after the cooldown it grows again, clamped to its limit, and then stays
// at its limit; a bad annotation is an event naming it, and that PVC is left alone.
func TestVolumeAutoscaler(t *testing.T) {
	cluster := framework.StartCluster(t, framework.ClusterOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	client := cluster.Client
	const system = "autoscaler-system"
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: system}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubeconfig := scenario.ApplyVolumeAutoscalerRBAC(t, cluster, system)
	ns := framework.CreateNamespace(t, ctx, client, "autoscale")

	ca, err := framework.NewCA("kubelet-ca")
	if err != nil {
		t.Fatal(err)
	}
	kubelet := startKubeletStandIn(t, client, framework.DefaultNodeName, ca)
	node := framework.EnsureNode(t, ctx, client, framework.DefaultNodeName)
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
	node.Status.DaemonEndpoints.KubeletEndpoint.Port = kubelet.port()
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	class := "autoscaled"
	if _, err := client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta:  metav1.ObjectMeta{Name: class, Annotations: map[string]string{policy.AnnAutoscale: "true", policy.AnnLimit: "2560Mi"}},
		Provisioner: "example.csi.io", AllowVolumeExpansion: ptr.To(true), ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimRetain),
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.CreateBoundClaim(t, ctx, client, ns, "data", "example.csi.io", "vol-data", "1Gi", class)
	framework.CreateBoundClaimWithSource(t, ctx, client, ns, "bad", "example.csi.io", corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
		Driver: "example.csi.io", VolumeHandle: "vol-bad"}}, "1Gi", class, map[string]string{policy.AnnThreshold: "ten"})
	framework.CreatePodWithClaim(t, ctx, client, ns, "app", "data")
	framework.CreatePodWithClaim(t, ctx, client, ns, "bad-app", "bad")
	kubelet.set(ns+"/data", gib, 50*mib) // 5% free: below the 10% threshold
	kubelet.set(ns+"/bad", gib, 50*mib)

	caFile := filepath.Join(t.TempDir(), "kubelet-ca.crt")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(kubeconfigToken(t, kubeconfig)), 0o600); err != nil {
		t.Fatal(err)
	}
	binary := framework.BuildCommand(t, "volume-autoscaler")
	args := []string{"--kubeconfig=" + kubeconfig, "--interval=1s", "--cooldown=4s", "--kubelet-certificate-authority=" + caFile,
		"--token-file=" + tokenFile, "--kubelet-timeout=5s", "--leader-election", "--leader-election-namespace=" + system,
		"--leader-election-lease-duration=4s", "--leader-election-renew-deadline=3s", "--leader-election-retry-period=1s", "-v=4"}

	t.Run("dry-run", func(t *testing.T) {
		p := framework.StartProcess(t, "volume-autoscaler-dry-run", binary, append(args, "--dry-run")...)
		waitForEvent(t, client, ns, "data", "VolumeAutoscaleDryRun", "would grow the request 1Gi -> 2Gi")
		// A few more rounds: still no patch.
		framework.Consistently(t, 3*time.Second, func() (bool, string) {
			pvc := getClaim(t, client, ns, "data")
			return requestOf(pvc) == "1Gi" && pvc.Annotations[policy.AnnLastResize] == "", framework.DescribeClaim(pvc)
		})
		if err := p.Stop(); err != nil {
			t.Fatal(err)
		}
	})

	metricsAddr := fmt.Sprintf("127.0.0.1:%d", framework.FreePort(t))
	p := framework.StartProcess(t, "volume-autoscaler", binary, append(args, "--http-endpoint="+metricsAddr)...)
	t.Cleanup(func() {
		kubelet.mu.Lock()
		defer kubelet.mu.Unlock()
		if len(kubelet.refused) > 0 {
			t.Errorf("the kubelet stand-in refused %d requests, e.g. %s", len(kubelet.refused), kubelet.refused[0])
		}
		if t.Failed() {
			t.Logf("volume-autoscaler log:\n%s", p.LogTail(60))
		}
	})

	// Round 1: 1Gi + max(10%, 1Gi) = 2Gi, in one patch with the record.
	waitForRequest(t, client, ns, "data", "2Gi")
	waitForEvent(t, client, ns, "data", "VolumeAutoscaled", "Grew the request 1Gi -> 2Gi (threshold-bytes)",
		"used 1021313024 bytes, free 52428800 of 1073741824 bytes")
	rec, problem := policy.ParseRecord(getClaim(t, client, ns, "data"))
	if problem != nil || rec == nil || rec.FSCapacity != gib {
		t.Fatalf("record %+v, %v: want one with the file system's capacity before, %d", rec, problem, gib)
	}

	// The next rounds, past the cooldown: the resize is not done, so no second resize.
	framework.Consistently(t, 6*time.Second, func() (bool, string) {
		pvc := getClaim(t, client, ns, "data")
		return requestOf(pvc) == "2Gi", framework.DescribeClaim(pvc)
	})

	// The resizer did its part, but the kubelet still reports the old file system (the node
	// expansion is not done): still no second resize.
	setCapacity(t, client, ns, "data", "2Gi")
	framework.Consistently(t, 3*time.Second, func() (bool, string) {
		pvc := getClaim(t, client, ns, "data")
		return requestOf(pvc) == "2Gi", framework.DescribeClaim(pvc)
	})
	// The kubelet reports the grown file system, still nearly full: the cooldown is long past,
	// so it grows to 3Gi, clamped to the limit 2560Mi.
	kubelet.set(ns+"/data", 2*gib, 50*mib)
	waitForRequest(t, client, ns, "data", "2560Mi")
	waitForEvent(t, client, ns, "data", "VolumeAutoscaled", "2Gi -> 2560Mi", "clamped to the limit")

	// At the limit and still filling: told, never grown past it.
	setCapacity(t, client, ns, "data", "2560Mi")
	kubelet.set(ns+"/data", 2560*mib, 50*mib)
	waitForEvent(t, client, ns, "data", "VolumeAutoscaleProblem", "at-limit")
	framework.Consistently(t, 3*time.Second, func() (bool, string) {
		pvc := getClaim(t, client, ns, "data")
		return requestOf(pvc) == "2560Mi", framework.DescribeClaim(pvc)
	})

	// Told once, not every round (3 rounds passed): no event storm.
	list, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=data,reason=VolumeAutoscaleProblem"})
	if err != nil || len(list.Items) != 1 || list.Items[0].Count != 1 {
		t.Errorf("at-limit events: %+v (%v), want one, told once", list, err)
	}

	// The bad annotation: an event naming it and the PVC; the PVC untouched.
	waitForEvent(t, client, ns, "bad", "VolumeAutoscaleBadAnnotation", policy.AnnThreshold, `"ten"`, "PVC "+ns+"/bad")
	if pvc := getClaim(t, client, ns, "bad"); requestOf(pvc) != "1Gi" || pvc.Annotations[policy.AnnLastResize] != "" {
		t.Errorf("the PVC with a bad annotation was changed: %s", framework.DescribeClaim(pvc))
	}
	// The metrics the alerts and dashboards read, from the process's endpoint.
	metrics := scrape(t, "http://"+metricsAddr+"/metrics")
	for _, want := range []string{
		`volume_autoscaler_resizes_total{reason="threshold-bytes"} 2`,
		`volume_autoscaler_pvc_at_limit{namespace="` + ns + `",persistentvolumeclaim="data"} 1`,
		`volume_autoscaler_pvc_above_threshold{namespace="` + ns + `",persistentvolumeclaim="data"} 1`,
		`volume_autoscaler_pvc_patches_total{result="success"} 2`,
		`volume_autoscaler_skips_total{reason="bad-settings"}`,
		`volume_autoscaler_stats_read_last_duration_seconds{node="` + framework.DefaultNodeName + `"}`,
		`leader_election_master_status{name="volume-autoscaler"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
	if strings.Contains(metrics, "volume_autoscaler_stats_read_errors_total{") {
		t.Errorf("kubelet read errors counted:\n%s", metrics)
	}
	if p.LogContains("is forbidden") {
		t.Errorf("the shipped ServiceAccount lacks a permission:\n%s", p.LogTail(40))
	}
}

const (
	mib = int64(1) << 20
	gib = int64(1) << 30
)

// kubeconfigToken is the bearer token of a kubeconfig written by ServiceAccountKubeconfig.
func kubeconfigToken(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var kc struct {
		Users []struct {
			User struct {
				Token string `json:"token"`
			} `json:"user"`
		} `json:"users"`
	}
	if err := json.Unmarshal(data, &kc); err != nil || len(kc.Users) != 1 || kc.Users[0].User.Token == "" {
		t.Fatalf("no token in %s: %v", path, err)
	}
	return kc.Users[0].User.Token
}

func getClaim(t *testing.T, client kubernetes.Interface, ns, name string) *corev1.PersistentVolumeClaim {
	t.Helper()
	pvc, err := client.CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pvc
}

func requestOf(pvc *corev1.PersistentVolumeClaim) string {
	q := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	return q.String()
}

func waitForRequest(t *testing.T, client kubernetes.Interface, ns, name, want string) {
	t.Helper()
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		pvc := getClaim(t, client, ns, name)
		return requestOf(pvc) == want, "want request " + want + ": " + framework.DescribeClaim(pvc)
	})
}

// setCapacity plays the resizer: the resize is done, the claim's capacity is size.
func setCapacity(t *testing.T, client kubernetes.Interface, ns, name, size string) {
	t.Helper()
	pvc := getClaim(t, client, ns, name)
	pvc.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}
	if _, err := client.CoreV1().PersistentVolumeClaims(ns).UpdateStatus(context.Background(), pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitForEvent waits for an event of reason on the PVC whose message contains every part.
func waitForEvent(t *testing.T, client kubernetes.Interface, ns, pvc, reason string, parts ...string) {
	t.Helper()
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		list, err := client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + pvc})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range list.Items {
			seen = append(seen, e.Reason+": "+e.Message)
			if e.Reason != reason {
				continue
			}
			match := true
			for _, p := range parts {
				match = match && strings.Contains(e.Message, p)
			}
			if match {
				return true, ""
			}
		}
		return false, fmt.Sprintf("no event %s containing %q on PVC %s; events: %q", reason, parts, pvc, seen)
	})
}

// scrape returns the text of a metrics endpoint.
func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url) //nolint:gosec // the test's own endpoint
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v", url, resp.Status, err)
	}
	return string(body)
}
