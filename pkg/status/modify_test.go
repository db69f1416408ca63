package status_test

import (
	"context"
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/csi-resizer/csi-resizer/pkg/status"
)

// TestClaimStatusPatchModifyFields: currentVolumeAttributesClassName and modifyVolumeStatus go
// out only when they change, set, replaced or removed with null, next to the expansion fields.
func TestClaimStatusPatchModifyFields(t *testing.T) {
	base := v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound, Capacity: storage("1Gi")}
	with := func(current *string, ms *v1.ModifyVolumeStatus, conds ...v1.PersistentVolumeClaimCondition) v1.PersistentVolumeClaimStatus {
		st := *base.DeepCopy()
		st.CurrentVolumeAttributesClassName, st.ModifyVolumeStatus, st.Conditions = current, ms, conds
		return st
	}
	pending := &v1.ModifyVolumeStatus{TargetVolumeAttributesClassName: "gold", Status: v1.PersistentVolumeClaimModifyVolumePending}
	inProgress := &v1.ModifyVolumeStatus{TargetVolumeAttributesClassName: "gold", Status: v1.PersistentVolumeClaimModifyVolumeInProgress}
	otherTarget := &v1.ModifyVolumeStatus{TargetVolumeAttributesClassName: "silver", Status: v1.PersistentVolumeClaimModifyVolumeInProgress}
	noTarget := &v1.ModifyVolumeStatus{Status: v1.PersistentVolumeClaimModifyVolumeInProgress}
	modifying := cond(v1.PersistentVolumeClaimVolumeModifyingVolume, "", "modifying to gold", t0)
	for _, tc := range []struct {
		name     string
		old, new v1.PersistentVolumeClaimStatus
		guard    bool
		want     string // "" = no patch
	}{
		{name: "start: InProgress and the condition, guarded", old: with(ptr.To("bronze"), nil), new: with(ptr.To("bronze"), inProgress, modifying), guard: true,
			want: `{"metadata":{"resourceVersion":"42"},"status":{
				"modifyVolumeStatus":{"targetVolumeAttributesClassName":"gold","status":"InProgress"},
				"conditions":[{"type":"ModifyingVolume","status":"True","message":"modifying to gold",
					"lastProbeTime":"2026-01-02T03:04:05Z","lastTransitionTime":"2026-01-02T03:04:05Z"}]}}`},
		{name: "status changes, target kept", old: with(nil, pending), new: with(nil, inProgress),
			want: `{"status":{"modifyVolumeStatus":{"targetVolumeAttributesClassName":"gold","status":"InProgress"}}}`},
		{name: "target changes", old: with(nil, inProgress), new: with(nil, otherTarget),
			want: `{"status":{"modifyVolumeStatus":{"targetVolumeAttributesClassName":"silver","status":"InProgress"}}}`},
		{name: "target removed: named with null, not left to the merge", old: with(nil, inProgress), new: with(nil, noTarget),
			want: `{"status":{"modifyVolumeStatus":{"targetVolumeAttributesClassName":null,"status":"InProgress"}}}`},
		{name: "done: current set, status and condition removed", old: with(ptr.To("bronze"), inProgress, modifying), new: with(ptr.To("gold"), nil),
			want: `{"status":{"currentVolumeAttributesClassName":"gold","modifyVolumeStatus":null,"conditions":null}}`},
		{name: "first class: current set from nothing", old: with(nil, inProgress), new: with(ptr.To("gold"), nil),
			want: `{"status":{"currentVolumeAttributesClassName":"gold","modifyVolumeStatus":null}}`},
		{name: "current removed", old: with(ptr.To("gold"), nil), new: with(nil, nil),
			want: `{"status":{"currentVolumeAttributesClassName":null}}`},
		{name: "unchanged, equal but distinct pointers: no patch", old: with(ptr.To("gold"), pending), new: with(ptr.To("gold"), pending.DeepCopy()), guard: true},
		{name: "unchanged, both unset: no patch", old: with(nil, nil), new: with(nil, nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pvc := claimWith(tc.old)
			before := pvc.DeepCopy()
			patch, changed, err := status.ClaimStatusPatch(pvc, tc.new, nil, tc.guard)
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

func TestVolumeAttributesClassPatch(t *testing.T) {
	vol := func(class *string) *v1.PersistentVolume {
		return &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv"}, Spec: v1.PersistentVolumeSpec{VolumeAttributesClassName: class}}
	}
	for _, tc := range []struct {
		name  string
		pv    *v1.PersistentVolume
		class string
		want  string // "" = no patch
	}{
		{name: "set", pv: vol(nil), class: "gold", want: `{"spec":{"volumeAttributesClassName":"gold"}}`},
		{name: "change", pv: vol(ptr.To("bronze")), class: "gold", want: `{"spec":{"volumeAttributesClassName":"gold"}}`},
		{name: "unchanged: no patch", pv: vol(ptr.To("gold")), class: "gold"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			patch, changed, err := status.VolumeAttributesClassPatch(tc.pv, tc.class)
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
	// The apiserver refuses to remove a PV's class; asking for it is a bug named as such.
	if _, _, err := status.VolumeAttributesClassPatch(vol(ptr.To("gold")), ""); err == nil || !strings.Contains(err.Error(), "PV pv") {
		t.Errorf("empty class: err = %v, want an error naming the PV", err)
	}
}

// TestAPIWriterVolumeAttributesClass: the PV write is one request, and none when the class is
// already set (test/integration's TestStatusWriterModifyFields runs it on a real apiserver).
func TestAPIWriterVolumeAttributesClass(t *testing.T) {
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv", Annotations: map[string]string{"keep": "me"}},
		Spec:       v1.PersistentVolumeSpec{Capacity: storage("1Gi"), VolumeAttributesClassName: ptr.To("bronze")},
	}
	kube := fake.NewClientset(pv)
	w := &status.APIWriter{Client: kube, FieldManager: "test"}
	ctx := context.Background()
	out, err := w.PatchVolumeAttributesClass(ctx, pv, "gold")
	if err != nil {
		t.Fatal(err)
	}
	if c := out.Spec.VolumeAttributesClassName; c == nil || *c != "gold" || out.Annotations["keep"] != "me" || !out.Spec.Capacity.Storage().Equal(*pv.Spec.Capacity.Storage()) {
		t.Errorf("written PV: class %v, annotations %v, capacity %v", c, out.Annotations, out.Spec.Capacity)
	}
	if n := len(kube.Actions()); n != 1 {
		t.Errorf("%d API requests, want 1", n)
	}
	same, err := w.PatchVolumeAttributesClass(ctx, out, "gold")
	if err != nil || same != out {
		t.Errorf("unchanged class: got %p err %v, want the same object back", same, err)
	}
	if n := len(kube.Actions()); n != 1 {
		t.Errorf("an unchanged class made %d more API requests", n-1)
	}
	gone := pv.DeepCopy()
	gone.Name = "gone"
	if _, err := w.PatchVolumeAttributesClass(ctx, gone, "gold"); err == nil || !strings.Contains(err.Error(), "PV gone") {
		t.Errorf("patching a missing PV: err = %v, want an error naming it", err)
	}
}
