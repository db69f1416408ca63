package status_test

import (
	"context"
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/csi-resizer/csi-resizer/pkg/status"
)

// TestWriteOutcome: a conflict costs one read of the PVC from the API, and the outcome is
// applied to what it holds; a PVC re-created during the call gets nothing.
func TestWriteOutcome(t *testing.T) {
	ctx := context.Background()
	cached := claimWith(v1.PersistentVolumeClaimStatus{Capacity: storage("1Gi")})
	stored := cached.DeepCopy()
	stored.ResourceVersion = "43"
	stored.Status.Conditions = []v1.PersistentVolumeClaimCondition{{Type: "Other", Status: v1.ConditionTrue}}
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "persistentvolumeclaims"}, "data", errors.New("changed"))
	grow := func(st v1.PersistentVolumeClaimStatus) v1.PersistentVolumeClaimStatus {
		st.Capacity = storage("2Gi")
		return st
	}

	var bases []string
	write := func(p *v1.PersistentVolumeClaim, st v1.PersistentVolumeClaimStatus) (*v1.PersistentVolumeClaim, error) {
		bases = append(bases, p.ResourceVersion)
		if len(bases) == 1 {
			return nil, conflict
		}
		out := p.DeepCopy()
		out.Status = st
		return out, nil
	}
	var replaced [][2]string
	out, err := status.WriteOutcome(ctx, fake.NewClientset(stored), cached, grow, write,
		func(old, latest *v1.PersistentVolumeClaim) {
			replaced = append(replaced, [2]string{old.ResourceVersion, latest.ResourceVersion})
		})
	if err != nil {
		t.Fatal(err)
	}
	if len(bases) != 2 || bases[1] != "43" || len(out.Status.Conditions) != 1 || out.Status.Capacity.Storage().String() != "2Gi" {
		t.Errorf("writes based on %v, result %+v; want the second on the stored 43, keeping its condition", bases, out.Status)
	}
	if len(replaced) != 1 || replaced[0] != [2]string{"42", "43"} {
		t.Errorf("reread told %v, want 42 replaced by 43", replaced)
	}

	recreated := stored.DeepCopy()
	recreated.UID = types.UID("another")
	bases = nil
	if _, err := status.WriteOutcome(ctx, fake.NewClientset(recreated), cached, grow, write, func(_, _ *v1.PersistentVolumeClaim) {}); err == nil || len(bases) != 1 {
		t.Errorf("re-created PVC: err %v after %d writes, want an error and no second write", err, len(bases))
	}
}
