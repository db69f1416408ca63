package inuse

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
)

func pod(ns, name string, phase v1.PodPhase, claims ...string) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name), ResourceVersion: "1",
			Labels: map[string]string{"app": "x"}, Annotations: map[string]string{"big": "value"}},
		Spec: v1.PodSpec{
			NodeName:   "node-1",
			Containers: []v1.Container{{Name: "app", Image: "example", Env: []v1.EnvVar{{Name: "A", Value: "B"}}}},
			Volumes:    []v1.Volume{{Name: "tmp", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}},
		},
		Status: v1.PodStatus{Phase: phase, Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}}},
	}
	for _, c := range claims {
		p.Spec.Volumes = append(p.Spec.Volumes, v1.Volume{Name: "v-" + c, VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: c}}})
	}
	return p
}

// unscheduled is a pod the scheduler has not placed (yet): no nodeName.
func unscheduled(p *v1.Pod) *v1.Pod {
	p.Spec.NodeName = ""
	return p
}

// withEphemeral adds a generic ephemeral volume named vol, whose PVC is <pod>-<vol>.
func withEphemeral(p *v1.Pod, vol string) *v1.Pod {
	p.Spec.Volumes = append(p.Spec.Volumes, v1.Volume{Name: vol, VolumeSource: v1.VolumeSource{
		Ephemeral: &v1.EphemeralVolumeSource{VolumeClaimTemplate: &v1.PersistentVolumeClaimTemplate{}}}})
	return p
}

// released collects the keys passed to onRelease.
type released struct {
	mu   sync.Mutex
	keys []string
}

func (r *released) add(keys []string) {
	r.mu.Lock()
	r.keys = append(r.keys, keys...)
	r.mu.Unlock()
}

func (r *released) has(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.keys, key)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for !cond() {
		select {
		case <-poll.C:
		case <-deadline.C:
			t.Fatalf("waited 10s for %s", what)
		}
	}
}

func TestTracker(t *testing.T) {
	kube := fake.NewClientset(
		pod("a", "running", v1.PodRunning, "data", "logs"),
		pod("a", "pending", v1.PodPending, "queued"),
		unscheduled(pod("a", "unplaced", v1.PodPending, "waiting")),
		unscheduled(pod("a", "unplaced-2", v1.PodPending, "waiting-2")),
		withEphemeral(pod("a", "web-0", v1.PodRunning), "scratch"),
		pod("a", "done", v1.PodSucceeded, "finished"),
		pod("a", "crashed", v1.PodFailed, "failed"),
		pod("b", "other-ns", v1.PodRunning, "elsewhere"),
	)
	pods := func(ns string) typedcorev1.PodInterface { return kube.CoreV1().Pods(ns) }
	ctx := context.Background()
	life, cancel := context.WithCancel(context.Background())
	defer cancel()
	rel := &released{}
	tr := New(life, kube, "", rel.add)

	// Lazy: nothing is watched, and nothing is known, until the first Start.
	if tr.Started() || tr.InUse("a", "data") {
		t.Fatal("the tracker watches pods before it was started")
	}
	if n := len(kube.Actions()); n != 0 {
		t.Fatalf("%d API requests before Start", n)
	}
	if err := tr.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := tr.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	v := map[string]int{}
	for _, a := range kube.Actions() {
		v[a.GetVerb()+" "+a.GetResource().Resource]++
	}
	if v["list pods"] != 1 || v["watch pods"] != 1 || len(v) != 2 {
		t.Errorf("API requests after two Starts: %v, want one list and one watch of pods", v)
	}

	for _, tc := range []struct {
		ns, claim string
		want      bool
	}{
		{"a", "data", true},
		{"a", "logs", true},
		{"a", "queued", true},        // a scheduled pending pod may already have the volume attached
		{"a", "waiting", false},      // an unscheduled one cannot: no kubelet has it
		{"a", "web-0-scratch", true}, // the generic ephemeral volume's PVC
		{"a", "scratch", false},
		{"a", "finished", false},
		{"a", "failed", false},
		{"a", "elsewhere", false},
		{"b", "elsewhere", true},
		{"a", "unused", false},
	} {
		if got := tr.InUse(tc.ns, tc.claim); got != tc.want {
			t.Errorf("InUse(%s, %s) = %v, want %v", tc.ns, tc.claim, got, tc.want)
		}
	}

	// Wait reports a wait once, until the claim is free again.
	for i, want := range []bool{true, false} {
		if inUse, first, err := tr.Wait(ctx, "a", "logs"); err != nil || !inUse || first != want {
			t.Errorf("Wait #%d: in use %v, first %v, err %v; want true, %v", i+1, inUse, first, err, want)
		}
	}
	if inUse, first, _ := tr.Wait(ctx, "a", "unused"); inUse || first {
		t.Errorf("Wait on an unused claim: in use %v, first %v", inUse, first)
	}

	// The cache keeps only what the check reads: identity, claim keys, finished.
	for _, obj := range tr.informer.GetStore().List() {
		p, ok := obj.(*podClaims)
		if !ok {
			t.Fatalf("cached object is a %T, want the compact *podClaims", obj)
		}
		if p.Labels != nil || p.Annotations != nil || p.Name == "" || p.ResourceVersion == "" {
			t.Errorf("cached pod %s/%s keeps the wrong metadata: %+v", p.Namespace, p.Name, p.ObjectMeta)
		}
		for _, k := range p.claimKeys {
			if k == p.Namespace+"/tmp" {
				t.Errorf("cached pod %s/%s keeps its non-PVC volume", p.Namespace, p.Name)
			}
		}
	}

	// A pod that finishes or goes away releases its claims.
	mutate(t, pods("a"), "running", func(p *v1.Pod) { p.Status.Phase = v1.PodSucceeded })
	waitFor(t, "a/data to be released", func() bool { return rel.has("a/data") && rel.has("a/logs") })
	if tr.InUse("a", "data") {
		t.Error("a/data in use after its pod succeeded")
	}
	if err := pods("b").Delete(ctx, "other-ns", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b/elsewhere to be released", func() bool { return rel.has("b/elsewhere") })
	if tr.InUse("b", "elsewhere") {
		t.Error("b/elsewhere in use after its pod was deleted")
	}
	// A pod the scheduler places becomes a user; one deleted before that released nothing.
	mutate(t, pods("a"), "unplaced", func(p *v1.Pod) { p.Spec.NodeName = "node-2" })
	waitFor(t, "a/waiting to be in use once its pod is scheduled", func() bool { return tr.InUse("a", "waiting") })
	if err := pods("a").Delete(ctx, "unplaced-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// A new pod makes a claim used again.
	if _, err := pods("a").Create(ctx, pod("a", "new", v1.PodRunning, "finished"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a/finished to be in use", func() bool { return tr.InUse("a", "finished") })
	if rel.has("a/queued") || rel.has("a/finished") || rel.has("a/waiting") || rel.has("a/waiting-2") {
		t.Errorf("released keys %v include claims whose pods did not let go", rel.keys)
	}
}

func TestTrackerStartGivesUp(t *testing.T) {
	kube := fake.NewClientset()
	// The informer's lifetime has ended: it can never sync.
	life, cancel := context.WithCancel(context.Background())
	cancel()
	tr := New(life, kube, "", nil)
	ctx, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	if err := tr.Start(ctx); err == nil {
		t.Fatal("Start returned nil although the informer cannot sync")
	}
}

func TestSlimPod(t *testing.T) {
	in := pod("a", "web-0", v1.PodSucceeded, "data", "logs")
	in.ResourceVersion = "42"
	out, err := slimPod(in)
	if err != nil {
		t.Fatal(err)
	}
	p := out.(*podClaims)
	if p.Name != "web-0" || p.Namespace != "a" || p.UID != "uid-web-0" || p.ResourceVersion != "42" {
		t.Errorf("identity not kept: %+v", p.ObjectMeta)
	}
	if want := []string{"a/data", "a/logs"}; !slices.Equal(p.claimKeys, want) || !p.idle {
		t.Errorf("slimPod = claims %v idle %v, want %v true", p.claimKeys, p.idle, want)
	}
	// client-go may hand cached (already transformed) objects to the transform again.
	again, err := slimPod(p)
	if err != nil || again != any(p) {
		t.Errorf("slimPod of a slimmed pod = %v, %v; want the same object", again, err)
	}
	// The index function returns the cached strings, and copies are independent.
	keys, _ := claimsOfPod(p)
	if !slices.Equal(keys, p.claimKeys) {
		t.Errorf("claimsOfPod = %v, want %v", keys, p.claimKeys)
	}
	if keys, _ := claimsOfPod(in); keys != nil {
		t.Errorf("claimsOfPod of an untransformed pod = %v, want nothing", keys)
	}
	c := p.DeepCopyObject().(*podClaims)
	c.claimKeys[0] = "changed"
	if p.claimKeys[0] != "a/data" || c.Name != p.Name || !c.idle {
		t.Errorf("DeepCopyObject shares or loses state: original %+v copy %+v", p, c)
	}
	// Running and pending pods on a node hold their volumes; without a node, none.
	for _, phase := range []v1.PodPhase{v1.PodRunning, v1.PodPending, ""} {
		out, _ := slimPod(pod("a", "x", phase, "data"))
		if out.(*podClaims).idle {
			t.Errorf("a scheduled %q pod is treated as idle", phase)
		}
		out, _ = slimPod(unscheduled(pod("a", "x", phase, "data")))
		if !out.(*podClaims).idle {
			t.Errorf("an unscheduled %q pod is treated as a user of its volumes", phase)
		}
	}
	// Generic ephemeral volumes are indexed by the PVC name the ephemeral controller gives.
	out, _ = slimPod(withEphemeral(pod("a", "web-1", v1.PodRunning, "data"), "cache"))
	if want := []string{"a/data", "a/web-1-cache"}; !slices.Equal(out.(*podClaims).claimKeys, want) {
		t.Errorf("claims of a pod with an ephemeral volume = %v, want %v", out.(*podClaims).claimKeys, want)
	}
}

// mutate changes a pod in the API.
func mutate(t *testing.T, pods typedcorev1.PodInterface, name string, change func(*v1.Pod)) {
	t.Helper()
	p, err := pods.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	change(p)
	if _, err := pods.Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
