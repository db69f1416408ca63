package controller

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/component-base/metrics/testutil"

	"github.com/csi-resizer/csi-resizer/pkg/autoscale/kubeletstats"
	"github.com/csi-resizer/csi-resizer/pkg/autoscale/policy"
)

// TestSync runs one poll round and one sync of PVC "data" and checks the one write (or none),
// the events, and what sync returns.
func TestSync(t *testing.T) {
	full := map[string]kubeletstats.VolumeStats{"data": usage(10*gi, gi/2)}
	forbidden := func(msg string) k8stesting.ReactionFunc {
		return func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "persistentvolumeclaims"}, "data", errors.New(msg))
		}
	}
	for _, tc := range []struct {
		name    string
		pvc     string // default "data"
		objects []runtime.Object
		poller  *fakePoller
		dryRun  bool
		reactor k8stesting.ReactionFunc
		// wantSize is the request after the sync; wantEvents are substrings of the events, in order.
		wantSize   string
		wantEvents [][]string
		wantErr    bool
	}{{
		name:     "above the threshold: grown by the step, usage before in the event",
		objects:  []runtime.Object{optedIn(), claim("data", "10Gi", nil), pod("p", "n1", "data"), node("n1")},
		poller:   report(full),
		wantSize: "11Gi",
		wantEvents: [][]string{{"Normal VolumeAutoscaled", "Grew the request 10Gi -> 11Gi (threshold-bytes)",
			"used 10200547328 bytes, free 536870912 of 10737418240 bytes", "inodes used 100, free 900 of 1000"}},
	}, {
		name:     "below the threshold: nothing, no event",
		objects:  []runtime.Object{optedIn(), claim("data", "10Gi", nil), pod("p", "n1", "data"), node("n1")},
		poller:   report(map[string]kubeletstats.VolumeStats{"data": usage(10*gi, 5*gi)}),
		wantSize: "10Gi",
	}, {
		name:     "not opted in: nothing, no event",
		objects:  []runtime.Object{storageClass(nil), claim("data", "10Gi", nil), pod("p", "n1", "data"), node("n1")},
		poller:   report(full),
		wantSize: "10Gi",
	}, {
		name: "bad annotation: an event naming it and the PVC, untouched",
		objects: []runtime.Object{optedIn(), claim("data", "10Gi", map[string]string{policy.AnnThreshold: "ten"}),
			pod("p", "n1", "data"), node("n1")},
		poller:     report(full),
		wantSize:   "10Gi",
		wantEvents: [][]string{{"Warning VolumeAutoscaleBadAnnotation", "PVC ns/data", policy.AnnThreshold, `"ten"`}},
	}, {
		name:       "dry run: told, not patched",
		objects:    []runtime.Object{optedIn(), claim("data", "10Gi", nil), pod("p", "n1", "data"), node("n1")},
		poller:     report(full),
		dryRun:     true,
		wantSize:   "10Gi",
		wantEvents: [][]string{{"Normal VolumeAutoscaleDryRun", "would grow the request 10Gi -> 11Gi"}},
	}, {
		name:       "quota: told, not retried",
		objects:    []runtime.Object{optedIn(), claim("data", "10Gi", nil), pod("p", "n1", "data"), node("n1")},
		poller:     report(full),
		reactor:    forbidden("exceeded quota: q, requested: requests.storage=11Gi, used: requests.storage=10Gi, limited: requests.storage=10Gi"),
		wantSize:   "10Gi",
		wantEvents: [][]string{{"Warning VolumeAutoscaleQuotaExceeded", "Not grown to 11Gi", "exceeded quota", "raise the quota of namespace ns"}},
	}, {
		name:    "conflict: decided again",
		objects: []runtime.Object{optedIn(), claim("data", "10Gi", nil), pod("p", "n1", "data"), node("n1")},
		poller:  report(full),
		reactor: func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "persistentvolumeclaims"}, "data", errors.New("changed"))
		},
		wantSize: "10Gi",
		wantErr:  true,
	}, {
		name:    "kubelet not readable: an event with the hint, no guess",
		objects: []runtime.Object{optedIn(), claim("data", "10Gi", nil), pod("p", "n1", "data"), node("n1")},
		poller: &fakePoller{results: map[string]kubeletstats.NodeResult{"n1": {Err: &kubeletstats.Error{
			Node: "n1", Address: "10.0.0.1:10250", Reason: kubeletstats.ReasonForbidden, Err: errors.New("403 Forbidden"),
			Hint: "grant nodes/stats get"}}}},
		wantSize:   "10Gi",
		wantEvents: [][]string{{"Warning VolumeStatsUnavailable", "node n1 at 10.0.0.1:10250", "grant nodes/stats get"}},
	}, {
		name:       "Node object missing: reported as unreadable",
		objects:    []runtime.Object{optedIn(), claim("data", "10Gi", nil), pod("p", "gone", "data")},
		poller:     report(full),
		wantSize:   "10Gi",
		wantEvents: [][]string{{"Warning VolumeStatsUnavailable", "node gone", "does not exist"}},
	}, {
		name: "at the limit while filling: a warning",
		objects: []runtime.Object{optedIn(), claim("data", "10Gi", map[string]string{policy.AnnLimit: "10Gi"}),
			pod("p", "n1", "data"), node("n1")},
		poller:     report(full),
		wantSize:   "10Gi",
		wantEvents: [][]string{{"Warning VolumeAutoscaleProblem", "at-limit", "at its limit 10Gi"}},
	}, {
		name: "a PVC whose name is not <template>-<statefulset>-<ordinal> has no StatefulSet siblings",
		objects: []runtime.Object{optedIn(), claim("data", "10Gi", nil), claim("data-web-0", "15Gi", nil),
			claim("data-web-2", "12Gi", nil), claim("data-other-0", "19Gi", nil), statefulSetPod("web-1", "web", "", "data"),
			node("n1")},
		poller:     report(nil),
		wantSize:   "10Gi", // "data" is not web's: its name does not follow <template>-web-<ordinal>
		wantEvents: nil,
	}, {
		name:       "an ephemeral volume's PVC <pod>-<volume> is found on its pod's node",
		pvc:        "web-scratch",
		objects:    []runtime.Object{optedIn(), claim("web-scratch", "10Gi", nil), ephemeralPod("web", "scratch", "n1"), node("n1")},
		poller:     report(map[string]kubeletstats.VolumeStats{"web-scratch": usage(10*gi, gi/2)}),
		wantSize:   "11Gi",
		wantEvents: [][]string{{"Normal VolumeAutoscaled", "10Gi -> 11Gi"}},
	}, {
		name:       "its own request refused as infeasible: lowered back above the capacity (KEP-1790)",
		objects:    []runtime.Object{optedIn(), infeasible(), pod("p", "n1", "data"), node("n1")},
		poller:     report(full),
		wantSize:   "10241Mi",
		wantEvents: [][]string{{"Warning VolumeAutoscaleRecovered", "Lowered the request 11Gi -> 10241Mi (recover)"}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Options{DryRun: tc.dryRun}, tc.poller, tc.objects...)
			if tc.reactor != nil {
				h.client.PrependReactor("patch", "persistentvolumeclaims", tc.reactor)
			}
			name := tc.pvc
			if name == "" {
				name = "data"
			}
			h.ctrl.Poll(h.ctx)
			err := h.ctrl.sync(h.ctx, ns+"/"+name)
			if (err != nil) != tc.wantErr {
				t.Errorf("sync: %v, want an error: %v", err, tc.wantErr)
			}
			got := h.pvc(name).Spec.Resources.Requests[corev1.ResourceStorage]
			if got.String() != tc.wantSize {
				t.Errorf("request %s, want %s", got.String(), tc.wantSize)
			}
			checkEvents(t, h.events(), tc.wantEvents)
		})
	}
}

func checkEvents(t *testing.T, got []string, want [][]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("events %q, want %d like %q", got, len(want), want)
	}
	for i := range want {
		if !containsAll(got[i], want[i]...) {
			t.Errorf("event %q, want it to contain %q", got[i], want[i])
		}
	}
}

func ephemeralPod(name, volume, nodeName string) *corev1.Pod {
	p := pod(name, nodeName)
	p.Spec.Volumes = []corev1.Volume{{Name: volume, VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}}}}
	return p
}

// TestResizeWritesRecordInOnePatch checks the patch itself: request and record together,
// guarded by the resourceVersion the decision was made on.
func TestResizeWritesRecordInOnePatch(t *testing.T) {
	h := newHarness(t, Options{}, report(map[string]kubeletstats.VolumeStats{"data": usage(10*gi, gi/2)}),
		optedIn(), claim("data", "10Gi", nil), pod("p", "n1", "data"), node("n1"))
	cached, _ := h.ctrl.pvcLister.PersistentVolumeClaims(ns).Get("data")
	h.ctrl.Poll(h.ctx)
	if err := h.ctrl.sync(h.ctx, ns+"/data"); err != nil {
		t.Fatal(err)
	}
	var patches []string
	for _, a := range h.client.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok {
			patches = append(patches, string(p.GetPatch()))
		}
	}
	if len(patches) != 1 || !containsAll(patches[0], `"resourceVersion":"`+cached.ResourceVersion+`"`, `"storage":"11Gi"`, policy.AnnLastResize) {
		t.Fatalf("patches %q, want one with the request, the record and the resourceVersion %s", patches, cached.ResourceVersion)
	}
	rec, problem := policy.ParseRecord(h.pvc("data"))
	if problem != nil || rec == nil || rec.To.String() != "11Gi" || rec.FSCapacity != 10*gi || !rec.Time.Equal(now) {
		t.Fatalf("record %+v (%v)", rec, problem)
	}

	// The next rounds, before the resize is done: no second resize, and no event per round (the
	// wait that follows a resize is not told as a skip).
	h.waitForCache("data")
	for range 3 {
		h.ctrl.Poll(h.ctx)
		if err := h.ctrl.sync(h.ctx, ns+"/data"); err != nil {
			t.Fatal(err)
		}
	}
	if got := h.pvc("data").Spec.Resources.Requests[corev1.ResourceStorage]; got.String() != "11Gi" {
		t.Errorf("request %s after the waiting rounds, want 11Gi", got.String())
	}
	checkEvents(t, h.events(), [][]string{{"VolumeAutoscaled", "10Gi -> 11Gi"}})
}

// TestNoSecondPatchRightAfterOne: a sync right after the patch (its cache maybe still at the
// version the patch replaced, design §5 rule 5) makes no second patch.
func TestNoSecondPatchRightAfterOne(t *testing.T) {
	h := newHarness(t, Options{}, report(map[string]kubeletstats.VolumeStats{"data": usage(10*gi, gi/2)}),
		optedIn(), claim("data", "10Gi", nil), pod("p", "n1", "data"), node("n1"))
	h.ctrl.Poll(h.ctx)
	stale, _ := h.ctrl.pvcLister.PersistentVolumeClaims(ns).Get("data")
	for range 2 {
		if err := h.ctrl.sync(h.ctx, ns+"/data"); err != nil {
			t.Fatal(err)
		}
	}
	if !h.ctrl.fresh.Behind(ns+"/data", stale.ResourceVersion) {
		t.Error("the patch did not record the version it replaced")
	}
	if n := countPatches(h); n != 1 {
		t.Errorf("%d patches, want 1", n)
	}
}

func countPatches(h *harness) int {
	n := 0
	for _, a := range h.client.Actions() {
		if _, ok := a.(k8stesting.PatchAction); ok {
			n++
		}
	}
	return n
}

// TestSiblings: a new replica of StatefulSet web (its pod owned by web, created after its
// siblings grew) is raised at once to the largest size the autoscaler grew a sibling of the same
// template to; a replica that existed when they grew keeps its size; the pvc-autoresizer group
// works the same through its label.
func TestSiblings(t *testing.T) {
	grownAgo := now.Add(-time.Hour)
	t.Run("statefulset", func(t *testing.T) {
		h := newHarness(t, Options{}, report(nil), optedIn(), grown(claim("data-web-0", "15Gi", nil), grownAgo), claim("data-web-1", "10Gi", nil),
			grown(claim("data-web-2", "12Gi", nil), grownAgo), grown(claim("data-webx-0", "19Gi", nil), grownAgo), grown(claim("logs-web-0", "18Gi", nil), grownAgo),
			created(claim("data-web-3", "10Gi", nil), now), statefulSetPod("web-1", "web", "n1", "data-web-1"),
			statefulSetPod("web-3", "web", "n1", "data-web-3"), node("n1"))
		h.ctrl.Poll(h.ctx)
		for _, name := range []string{"data-web-1", "data-web-3"} {
			if err := h.ctrl.sync(h.ctx, ns+"/"+name); err != nil {
				t.Fatal(err)
			}
		}
		if got := h.pvc("data-web-3").Spec.Resources.Requests[corev1.ResourceStorage]; got.String() != "15Gi" {
			t.Errorf("new replica: request %s, want 15Gi (data-web-0's)", got.String())
		}
		if got := h.pvc("data-web-1").Spec.Resources.Requests[corev1.ResourceStorage]; got.String() != "10Gi" {
			t.Errorf("replica older than its siblings' growth: request %s, want its own 10Gi", got.String())
		}
		checkEvents(t, h.events(), [][]string{{"VolumeAutoscaled", "10Gi -> 15Gi (siblings)", "usage before: not read"}})
	})
	t.Run("group-by", func(t *testing.T) {
		group := func(name, size, value string) *corev1.PersistentVolumeClaim {
			c := claim(name, size, map[string]string{policy.TopoLVMGroupBy: "app"})
			c.Labels = map[string]string{"app": value}
			return c
		}
		h := newHarness(t, Options{}, report(nil), optedIn(), created(group("a", "10Gi", "db"), now), grown(group("b", "14Gi", "db"), grownAgo),
			grown(group("c", "19Gi", "cache"), grownAgo), pod("p", "n1", "a"), node("n1"))
		h.ctrl.Poll(h.ctx)
		if err := h.ctrl.sync(h.ctx, ns+"/a"); err != nil {
			t.Fatal(err)
		}
		if got := h.pvc("a").Spec.Resources.Requests[corev1.ResourceStorage]; got.String() != "14Gi" {
			t.Errorf("request %s, want 14Gi (b's, same group)", got.String())
		}
	})
}

// grown marks c as grown by the autoscaler to its request at the time at, created a day before.
func grown(c *corev1.PersistentVolumeClaim, at time.Time) *corev1.PersistentVolumeClaim {
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	to := c.Spec.Resources.Requests[corev1.ResourceStorage]
	c.Annotations[policy.AnnLastResize] = policy.FormatRecord(policy.Record{Time: at, From: resource.MustParse("10Gi"), To: to, Reason: policy.ReasonThresholdBytes})
	return created(c, at.Add(-24*time.Hour))
}

func created(c *corev1.PersistentVolumeClaim, at time.Time) *corev1.PersistentVolumeClaim {
	c.CreationTimestamp = metav1.NewTime(at)
	return c
}

// TestPollReadsOnlyNodesThatMatter: only nodes running a pod that mounts an autoscaled PVC are
// read; finished pods and pods not yet scheduled do not count.
func TestPollReadsOnlyNodesThatMatter(t *testing.T) {
	done := pod("done", "n3", "data")
	done.Status.Phase = corev1.PodSucceeded
	poller := report(nil)
	h := newHarness(t, Options{}, poller, optedIn(), storageClassNamed("plain"), claim("data", "10Gi", nil),
		claimOfClass("other", "plain"), pod("a", "n1", "data"), pod("b", "n2", "other"), done, pod("pending", "", "data"),
		node("n1"), node("n2"), node("n3"))
	h.ctrl.Poll(h.ctx)
	if len(poller.asked) != 1 || strings.Join(poller.asked[0], ",") != "n1" {
		t.Fatalf("nodes read %v, want [[n1]]", poller.asked)
	}
	if len(h.ctrl.stats.volumes) != 1 {
		t.Errorf("stats kept for %v, want only ns/data", h.ctrl.stats.volumes)
	}
}

func storageClassNamed(name string) runtime.Object {
	sc := storageClass(nil)
	sc.Name = name
	return sc
}

func claimOfClass(name, class string) *corev1.PersistentVolumeClaim {
	c := claim(name, "10Gi", nil)
	c.Spec.StorageClassName = &class
	return c
}

// TestMetrics checks the names and labels the alert rules and dashboards read.
func TestMetrics(t *testing.T) {
	poller := report(map[string]kubeletstats.VolumeStats{"data": usage(10*gi, gi/2), "full": usage(10*gi, gi/2)})
	poller.results["n2"] = kubeletstats.NodeResult{Err: &kubeletstats.Error{Node: "n2", Reason: kubeletstats.ReasonTimeout, Err: errors.New("timeout")}}
	h := newHarness(t, Options{}, poller, optedIn(), claim("data", "10Gi", nil),
		claim("full", "10Gi", map[string]string{policy.AnnLimit: "10Gi"}), claim("lost", "10Gi", nil),
		pod("p", "n1", "data", "full"), pod("q", "n2", "lost"), node("n1"), node("n2"))
	h.ctrl.Poll(h.ctx)
	for _, name := range []string{"data", "full", "lost"} {
		if err := h.ctrl.sync(h.ctx, ns+"/"+name); err != nil {
			t.Fatal(err)
		}
	}
	want := `
# HELP volume_autoscaler_pvc_above_threshold [ALPHA] 1 while an autoscaled PVC's free bytes or inodes were below its threshold in the last round that read it; no series otherwise.
# TYPE volume_autoscaler_pvc_above_threshold gauge
volume_autoscaler_pvc_above_threshold{namespace="ns",persistentvolumeclaim="data"} 1
volume_autoscaler_pvc_above_threshold{namespace="ns",persistentvolumeclaim="full"} 1
# HELP volume_autoscaler_pvc_at_limit [ALPHA] 1 while an autoscaled PVC is at its limit and a resize is wanted (the volume will fill); no series otherwise.
# TYPE volume_autoscaler_pvc_at_limit gauge
volume_autoscaler_pvc_at_limit{namespace="ns",persistentvolumeclaim="full"} 1
# HELP volume_autoscaler_resizes_total [ALPHA] PVC requests changed by volume-autoscaler, by reason: threshold-bytes, threshold-inodes, siblings, recover.
# TYPE volume_autoscaler_resizes_total counter
volume_autoscaler_resizes_total{reason="recover"} 0
volume_autoscaler_resizes_total{reason="siblings"} 0
volume_autoscaler_resizes_total{reason="threshold-bytes"} 1
volume_autoscaler_resizes_total{reason="threshold-inodes"} 0
# HELP volume_autoscaler_skips_total [ALPHA] Decisions to leave an autoscaled PVC alone, by reason (cooldown, at-limit, resizing, resize-wait-expired, infeasible, quota, stats-missing, bad-settings, ...); one per PVC and round.
# TYPE volume_autoscaler_skips_total counter
volume_autoscaler_skips_total{reason="at-limit"} 1
volume_autoscaler_skips_total{reason="stats-missing"} 1
# HELP volume_autoscaler_stats_read_errors_total [ALPHA] Failed reads of a kubelet's /stats/summary, by node and reason (NoEndpoint, Unauthorized, Forbidden, TLS, Timeout, Refused, ...).
# TYPE volume_autoscaler_stats_read_errors_total counter
volume_autoscaler_stats_read_errors_total{node="n2",reason="Timeout"} 1
`
	if err := testutil.GatherAndCompare(h.registry, strings.NewReader(want), "volume_autoscaler_pvc_above_threshold",
		"volume_autoscaler_pvc_at_limit", "volume_autoscaler_resizes_total", "volume_autoscaler_skips_total",
		"volume_autoscaler_stats_read_errors_total"); err != nil {
		t.Error(err)
	}
	// A deleted PVC loses its series.
	if err := h.client.CoreV1().PersistentVolumeClaims(ns).Delete(h.ctx, "full", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, err := h.ctrl.pvcLister.PersistentVolumeClaims(ns).Get("full"); err == nil; _, err = h.ctrl.pvcLister.PersistentVolumeClaims(ns).Get("full") {
		if time.Now().After(deadline) {
			t.Fatal("the cache still has the deleted PVC")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := h.ctrl.sync(h.ctx, ns+"/full"); err != nil {
		t.Fatal(err)
	}
	want = `
# HELP volume_autoscaler_pvc_above_threshold [ALPHA] 1 while an autoscaled PVC's free bytes or inodes were below its threshold in the last round that read it; no series otherwise.
# TYPE volume_autoscaler_pvc_above_threshold gauge
volume_autoscaler_pvc_above_threshold{namespace="ns",persistentvolumeclaim="data"} 1
`
	if err := testutil.GatherAndCompare(h.registry, strings.NewReader(want), "volume_autoscaler_pvc_above_threshold", "volume_autoscaler_pvc_at_limit"); err != nil {
		t.Error(err)
	}
}

// TestCooldownThenGrowAgain: once the kubelet reports the grown file system, a volume still
// filling waits for the cooldown (told once), then grows again, clamped to its limit.
func TestCooldownThenGrowAgain(t *testing.T) {
	poller := report(map[string]kubeletstats.VolumeStats{"data": usage(10*gi, gi/2)})
	h := newHarness(t, Options{}, poller, optedIn(),
		claim("data", "10Gi", map[string]string{policy.AnnLimit: "11.5Gi"}), pod("p", "n1", "data"), node("n1"))
	round := func() {
		t.Helper()
		h.waitForCache("data")
		h.ctrl.Poll(h.ctx)
		if err := h.ctrl.sync(h.ctx, ns+"/data"); err != nil {
			t.Fatal(err)
		}
	}
	round() // 10Gi -> 11Gi
	// The resizer and the kubelet did their part: capacity 11Gi, and still nearly full.
	pvc := h.pvc("data")
	pvc.Status.Capacity[corev1.ResourceStorage] = resource.MustParse("11Gi")
	if _, err := h.client.CoreV1().PersistentVolumeClaims(ns).UpdateStatus(h.ctx, pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poller.results["n1"].Volumes[ns+"/data"] = usage(11*gi, gi/2)
	round()
	round()
	h.clock.Step(policy.NewDefaults().Cooldown)
	round() // 11Gi -> 11.5Gi, the limit
	if got := h.pvc("data").Spec.Resources.Requests[corev1.ResourceStorage]; got.String() != "11776Mi" {
		t.Errorf("request %s, want 11776Mi (the limit)", got.String())
	}
	checkEvents(t, h.events(), [][]string{{"VolumeAutoscaled", "10Gi -> 11Gi"}, {"VolumeAutoscaleSkipped", "cooldown"},
		{"VolumeAutoscaled", "11Gi -> 11776Mi", "clamped to the limit"}})
}

// infeasible is PVC "data" whose resize 10Gi -> 11Gi, asked for by the autoscaler, the driver
// refused.
func infeasible() *corev1.PersistentVolumeClaim {
	rec := policy.FormatRecord(policy.Record{Time: now.Add(-time.Hour), From: resource.MustParse("10Gi"), To: resource.MustParse("11Gi"),
		Reason: policy.ReasonThresholdBytes, FSCapacity: 10 * gi})
	c := claim("data", "11Gi", map[string]string{policy.AnnLastResize: rec})
	c.Status.Capacity[corev1.ResourceStorage] = resource.MustParse("10Gi")
	c.Status.AllocatedResourceStatuses = map[corev1.ResourceName]corev1.ClaimResourceStatus{
		corev1.ResourceStorage: corev1.PersistentVolumeClaimControllerResizeInfeasible}
	return c
}

// TestHandlersQueue: a StorageClass change queues its PVCs; a new pod queues the PVCs it
// mounts (a new StatefulSet replica's PVC comes before its pod).
func TestHandlersQueue(t *testing.T) {
	h := newHarness(t, Options{}, report(nil), optedIn(), claim("data", "10Gi", nil), claimOfClass("other", "plain"))
	drain := func() map[string]bool {
		got := map[string]bool{}
		for h.ctrl.queue.Len() > 0 {
			key, _ := h.ctrl.queue.Get()
			got[key] = true
			h.ctrl.queue.Done(key)
		}
		return got
	}
	waitQueued := func(want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if drain()[want] {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Fatalf("%s was not queued", want)
	}
	drain()
	sc := optedIn()
	sc.Annotations[policy.AnnThreshold] = "20%"
	if _, err := h.client.StorageV1().StorageClasses().Update(h.ctx, sc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitQueued(ns + "/data")
	if _, err := h.client.CoreV1().Pods(ns).Create(h.ctx, statefulSetPod("web-0", "web", "", "other"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitQueued(ns + "/other")
}

// TestRunPollsEveryInterval: Run polls at once, then on every tick of the clock, and its
// workers act on what the poll found.
func TestRunPollsEveryInterval(t *testing.T) {
	poller := report(map[string]kubeletstats.VolumeStats{"data": usage(10*gi, gi/2)})
	h := newHarness(t, Options{Interval: time.Minute}, poller, optedIn(), claim("data", "10Gi", nil), pod("p", "n1", "data"), node("n1"))
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(h.ctx)
	go func() { done <- h.ctrl.Run(ctx, 2) }()
	polls := func() int {
		poller.mu.Lock()
		defer poller.mu.Unlock()
		return len(poller.asked)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s (polls: %d)", what, polls())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor("the first poll and its resize", func() bool { return polls() == 1 && h.pvc("data").Annotations[policy.AnnLastResize] != "" })
	waitFor("the ticker", h.clock.HasWaiters)
	h.clock.Step(time.Minute)
	waitFor("the second poll", func() bool { return polls() == 2 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestClaimPrefix: PVCs the autoscaler grew and named like a StatefulSet replica's are indexed
// by their group, the rest not at all, so that a sibling lookup reads the grown ones only.
func TestClaimPrefix(t *testing.T) {
	for name, want := range map[string][]string{
		"data-web-0":   {"ns/data-web-"},
		"data-web-12":  {"ns/data-web-"},
		"data-web-1-3": {"ns/data-web-1-"},
		"data-web":     nil,
		"data-web-":    nil,
		"data-web-x1":  nil,
		"-0":           nil,
		"7":            nil,
	} {
		got, err := claimPrefix(grown(claim(name, "10Gi", nil), now))
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("claimPrefix(%q) = %q, %v; want %q", name, got, err, want)
		}
		if got, _ := claimPrefix(claim(name, "10Gi", nil)); got != nil {
			t.Errorf("claimPrefix(%q) never grown = %q, want none", name, got)
		}
	}
	if _, err := claimPrefix(&corev1.Pod{}); err == nil {
		t.Error("claimPrefix of a pod: no error")
	}
}
