package status_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/csi-resizer/csi-resizer/pkg/status"
)

var (
	t0 = metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	t1 = metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 9, 0, time.UTC))
)

func storage(q string) v1.ResourceList {
	return v1.ResourceList{v1.ResourceStorage: resource.MustParse(q)}
}

func states(s v1.ClaimResourceStatus) map[v1.ResourceName]v1.ClaimResourceStatus {
	return map[v1.ResourceName]v1.ClaimResourceStatus{v1.ResourceStorage: s}
}

func cond(t v1.PersistentVolumeClaimConditionType, reason, msg string, at metav1.Time) v1.PersistentVolumeClaimCondition {
	return v1.PersistentVolumeClaimCondition{Type: t, Status: v1.ConditionTrue, Reason: reason, Message: msg, LastProbeTime: at, LastTransitionTime: at}
}

func claimWith(st v1.PersistentVolumeClaimStatus) *v1.PersistentVolumeClaim {
	return &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "ns", ResourceVersion: "42"},
		Spec:       v1.PersistentVolumeClaimSpec{Resources: v1.VolumeResourceRequirements{Requests: storage("2Gi")}},
		Status:     st,
	}
}

// equalJSON compares two JSON documents by meaning.
func equalJSON(t *testing.T, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("patch is not JSON: %v: %s", err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad expectation: %v", err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("patch =\n  %s\nwant\n  %s", got, want)
	}
}

func TestClaimStatusPatch(t *testing.T) {
	base := v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound, Capacity: storage("1Gi")}
	started := *base.DeepCopy()
	started.AllocatedResources = storage("2Gi")
	started.AllocatedResourceStatuses = states(v1.PersistentVolumeClaimControllerResizeInProgress)
	started.Conditions = []v1.PersistentVolumeClaimCondition{cond(v1.PersistentVolumeClaimResizing, "ControllerExpansionInProgress", "expanding to 2Gi", t0)}

	failed := *started.DeepCopy()
	failed.AllocatedResourceStatuses = states(v1.PersistentVolumeClaimControllerResizeInfeasible)
	failed.Conditions = []v1.PersistentVolumeClaimCondition{cond(v1.PersistentVolumeClaimControllerResizeError, "OutOfRange", "at most 5Gi", t1)}

	done := *started.DeepCopy()
	done.Capacity = storage("2Gi")
	done.AllocatedResourceStatuses = nil
	done.Conditions = nil

	withOtherState := *started.DeepCopy()
	withOtherState.AllocatedResourceStatuses["example.com/other"] = "Something"
	withOtherDone := *withOtherState.DeepCopy()
	delete(withOtherDone.AllocatedResourceStatuses, v1.ResourceStorage)

	probed := *failed.DeepCopy()
	probed.Conditions[0].LastProbeTime = metav1.NewTime(t1.Add(time.Minute))

	sameInBytes := *started.DeepCopy()
	sameInBytes.AllocatedResources = v1.ResourceList{v1.ResourceStorage: *resource.NewQuantity(2<<30, resource.BinarySI)}
	sameInBytes.Capacity = v1.ResourceList{v1.ResourceStorage: *resource.NewQuantity(1<<30, resource.DecimalSI)}

	noAlloc := *started.DeepCopy()
	noAlloc.AllocatedResources = nil

	const nenr = "volume.kubernetes.io/node-expansion-not-required"
	yes := "true"
	for _, tc := range []struct {
		name     string
		old, new v1.PersistentVolumeClaimStatus
		oldAnn   map[string]string
		ann      map[string]*string
		guard    bool
		want     string // "" = no patch
	}{
		{
			name: "start, guarded", old: base, new: started, guard: true,
			want: `{"metadata":{"resourceVersion":"42"},"status":{
				"allocatedResources":{"storage":"2Gi"},
				"allocatedResourceStatuses":{"storage":"ControllerResizeInProgress"},
				"conditions":[{"type":"Resizing","status":"True","reason":"ControllerExpansionInProgress","message":"expanding to 2Gi",
					"lastProbeTime":"2026-01-02T03:04:05Z","lastTransitionTime":"2026-01-02T03:04:05Z"}]}}`,
		},
		{
			name: "start, unguarded", old: base, new: started, guard: false,
			want: `{"status":{
				"allocatedResources":{"storage":"2Gi"},
				"allocatedResourceStatuses":{"storage":"ControllerResizeInProgress"},
				"conditions":[{"type":"Resizing","status":"True","reason":"ControllerExpansionInProgress","message":"expanding to 2Gi",
					"lastProbeTime":"2026-01-02T03:04:05Z","lastTransitionTime":"2026-01-02T03:04:05Z"}]}}`,
		},
		{
			name: "failure: state changed, conditions replaced whole", old: started, new: failed,
			want: `{"status":{
				"allocatedResourceStatuses":{"storage":"ControllerResizeInfeasible"},
				"conditions":[{"type":"ControllerResizeError","status":"True","reason":"OutOfRange","message":"at most 5Gi",
					"lastProbeTime":"2026-01-02T03:04:09Z","lastTransitionTime":"2026-01-02T03:04:09Z"}]}}`,
		},
		{
			name: "done: state removed with null, conditions removed with null", old: started, new: done,
			want: `{"status":{"capacity":{"storage":"2Gi"},"allocatedResourceStatuses":{"storage":null},"conditions":null}}`,
		},
		{
			name: "another resource's state is left alone", old: withOtherState, new: withOtherDone,
			want: `{"status":{"allocatedResourceStatuses":{"storage":null}}}`,
		},
		{
			name: "allocatedResources removed with null", old: started, new: noAlloc,
			want: `{"status":{"allocatedResources":{"storage":null}}}`,
		},
		{
			name: "only a condition's probe time changed", old: failed, new: probed,
			want: `{"status":{"conditions":[{"type":"ControllerResizeError","status":"True","reason":"OutOfRange","message":"at most 5Gi",
				"lastProbeTime":"2026-01-02T03:05:09Z","lastTransitionTime":"2026-01-02T03:04:09Z"}]}}`,
		},
		{name: "nothing changed, guarded", old: started, new: started, guard: true},
		{name: "nothing changed, unguarded", old: failed, new: *failed.DeepCopy()},
		{name: "same quantities in another notation", old: started, new: sameInBytes, guard: true},
		{
			name: "done with an annotation added, guarded: one write", old: started, new: done, ann: map[string]*string{nenr: &yes}, guard: true,
			want: `{"metadata":{"resourceVersion":"42","annotations":{"volume.kubernetes.io/node-expansion-not-required":"true"}},
				"status":{"capacity":{"storage":"2Gi"},"allocatedResourceStatuses":{"storage":null},"conditions":null}}`,
		},
		{
			name: "start with an annotation removed", old: base, new: started, oldAnn: map[string]string{nenr: "true", "keep": "me"}, ann: map[string]*string{nenr: nil},
			want: `{"metadata":{"annotations":{"volume.kubernetes.io/node-expansion-not-required":null}},"status":{
				"allocatedResources":{"storage":"2Gi"},
				"allocatedResourceStatuses":{"storage":"ControllerResizeInProgress"},
				"conditions":[{"type":"Resizing","status":"True","reason":"ControllerExpansionInProgress","message":"expanding to 2Gi",
					"lastProbeTime":"2026-01-02T03:04:05Z","lastTransitionTime":"2026-01-02T03:04:05Z"}]}}`,
		},
		{
			name: "annotation change only", old: done, new: done, ann: map[string]*string{nenr: &yes},
			want: `{"metadata":{"annotations":{"volume.kubernetes.io/node-expansion-not-required":"true"}}}`,
		},
		{name: "annotation already as wanted, status unchanged: no write", old: done, new: done, oldAnn: map[string]string{nenr: "true"}, ann: map[string]*string{nenr: &yes}, guard: true},
		{name: "removing an absent annotation: no write", old: done, new: done, ann: map[string]*string{nenr: nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pvc := claimWith(tc.old)
			pvc.Annotations = tc.oldAnn
			before := pvc.DeepCopy()
			patch, changed, err := status.ClaimStatusPatch(pvc, tc.new, tc.ann, tc.guard)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(pvc, before) {
				t.Error("ClaimStatusPatch modified the PVC")
			}
			if tc.want == "" {
				if changed || patch != nil {
					t.Errorf("patch = %s (changed=%v), want none", patch, changed)
				}
				return
			}
			if !changed {
				t.Fatalf("changed = false, want a patch %s", tc.want)
			}
			equalJSON(t, patch, tc.want)
		})
	}
}

func TestVolumePatch(t *testing.T) {
	vol := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv", ResourceVersion: "7", Annotations: map[string]string{"keep": "me"}},
		Spec:       v1.PersistentVolumeSpec{Capacity: storage("1Gi")},
	}
	const ann = "volume.alpha.kubernetes.io/pre-resize-capacity"
	annotated := vol.DeepCopy()
	annotated.Annotations[ann] = "1Gi"
	oneGi := "1Gi"
	set := map[string]*string{ann: &oneGi}
	remove := map[string]*string{ann: nil}
	for _, tc := range []struct {
		name        string
		pv          *v1.PersistentVolume
		capacity    string
		annotations map[string]*string
		want        string
	}{
		{name: "capacity", pv: vol, capacity: "2Gi", want: `{"spec":{"capacity":{"storage":"2Gi"}}}`},
		{name: "capacity and annotation", pv: vol, capacity: "2Gi", annotations: set,
			want: `{"spec":{"capacity":{"storage":"2Gi"}},"metadata":{"annotations":{"volume.alpha.kubernetes.io/pre-resize-capacity":"1Gi"}}}`},
		{name: "annotation only", pv: vol, capacity: "1Gi", annotations: set,
			want: `{"metadata":{"annotations":{"volume.alpha.kubernetes.io/pre-resize-capacity":"1Gi"}}}`},
		{name: "annotation already there", pv: annotated, capacity: "2Gi", annotations: set,
			want: `{"spec":{"capacity":{"storage":"2Gi"}}}`},
		{name: "nothing changes", pv: annotated, capacity: "1024Mi", annotations: set},
		{name: "annotation removed with null, capacity kept", pv: annotated, capacity: "1Gi", annotations: remove,
			want: `{"metadata":{"annotations":{"volume.alpha.kubernetes.io/pre-resize-capacity":null}}}`},
		{name: "removing an absent annotation: nothing", pv: vol, capacity: "1Gi", annotations: remove},
		{name: "lower capacity (node-only recovery)", pv: vol, capacity: "512Mi", want: `{"spec":{"capacity":{"storage":"512Mi"}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			patch, changed, err := status.VolumePatch(tc.pv, resource.MustParse(tc.capacity), tc.annotations)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if changed || patch != nil {
					t.Errorf("patch = %s, want none", patch)
				}
				return
			}
			if !changed {
				t.Fatalf("no patch, want %s", tc.want)
			}
			equalJSON(t, patch, tc.want)
		})
	}
}

// TestAPIWriter runs the patches through client-go's fake clientset: an unchanged status costs
// no request, and what comes back is the stored object. (The fake does not enforce the
// resourceVersion guard; test/integration's TestStatusWriterGuard proves it on a real
// apiserver.)
func TestAPIWriter(t *testing.T) {
	pvc := claimWith(v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound, Capacity: storage("1Gi")})
	vol := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv"}, Spec: v1.PersistentVolumeSpec{Capacity: storage("1Gi")}}
	kube := fake.NewClientset(pvc, vol)
	w := &status.APIWriter{Client: kube, FieldManager: "test"}
	ctx := context.Background()

	cur, err := kube.CoreV1().PersistentVolumeClaims("ns").Get(ctx, "data", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := *cur.Status.DeepCopy()
	st.AllocatedResources = storage("2Gi")
	st.AllocatedResourceStatuses = states(v1.PersistentVolumeClaimControllerResizeInProgress)

	out, err := w.PatchClaimStatus(ctx, cur, st, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if out.Status.AllocatedResourceStatuses[v1.ResourceStorage] != v1.PersistentVolumeClaimControllerResizeInProgress {
		t.Errorf("written PVC status %+v", out.Status)
	}
	if !out.Spec.Resources.Requests.Storage().Equal(resource.MustParse("2Gi")) {
		t.Errorf("spec changed by a status write: %v", out.Spec.Resources.Requests)
	}

	n := len(kube.Actions())
	same, err := w.PatchClaimStatus(ctx, out, out.Status, nil, true)
	if err != nil || same != out {
		t.Errorf("unchanged status: got %p err %v, want the same object back", same, err)
	}
	if len(kube.Actions()) != n {
		t.Errorf("unchanged status made %d API requests", len(kube.Actions())-n)
	}

	b := "b"
	pvOut, err := w.PatchVolume(ctx, vol, resource.MustParse("2Gi"), map[string]*string{"a": &b})
	if err != nil {
		t.Fatal(err)
	}
	if c := pvOut.Spec.Capacity[v1.ResourceStorage]; c.String() != "2Gi" || pvOut.Annotations["a"] != "b" {
		t.Errorf("written PV: capacity %s, annotations %v", c.String(), pvOut.Annotations)
	}
	n = len(kube.Actions())
	if _, err := w.PatchVolume(ctx, pvOut, resource.MustParse("2Gi"), map[string]*string{"a": &b}); err != nil {
		t.Fatal(err)
	}
	if len(kube.Actions()) != n {
		t.Error("unchanged PV made an API request")
	}
	missing := claimWith(v1.PersistentVolumeClaimStatus{})
	missing.Name = "gone"
	if _, err := w.PatchClaimStatus(ctx, missing, st, nil, false); !apierrors.IsNotFound(err) {
		t.Errorf("patching a missing PVC: err = %v, want NotFound (wrapped)", err)
	}
}
