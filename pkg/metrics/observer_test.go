package metrics

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/clock"

	"github.com/csi-resizer/csi-resizer/pkg/expand"
)

// TestObserverForgets (docs/design.md §2.3 rule 10): a deleted PVC's expansion is dropped
// without an outcome, and nothing is kept about it.
func TestObserverForgets(t *testing.T) {
	rec, reg := newRegistry(t, func() []ClaimState { return nil })
	o := NewObserver(rec, clock.RealClock{})
	pvc := &v1.PersistentVolumeClaim{}
	o.Begin("ns/a", pvc, expand.Observed{})
	o.Started("ns/a", expand.Plan{Recovery: true})
	o.Forget("ns/a")
	o.Failed("ns/a", expand.ClassifiedError{Class: expand.ClassInfeasible, Reason: "OutOfRange"})
	if len(o.episodes) != 0 {
		t.Errorf("episodes %v kept after Forget", o.episodes)
	}
	if got := counterValues(t, reg, "csi_resizer_volume_recovery_total"); got[`csi_resizer_volume_recovery_total{driver_name="hostpath.csi.k8s.io",state="failure"}`] != 0 {
		t.Errorf("a deleted claim's recovery was counted: %v", got)
	}
}

// TestObserverNodeStep: an expansion with a node step is done when the node finishes; a
// recovery is reported then, once.
func TestObserverNodeStep(t *testing.T) {
	rec, _ := newRegistry(t, func() []ClaimState { return nil })
	o := NewObserver(rec, clock.RealClock{})
	pvc := &v1.PersistentVolumeClaim{}
	o.Begin("ns/a", pvc, expand.Observed{})
	o.Started("ns/a", expand.Plan{Recovery: true})
	if recovery, _ := o.Expanded("ns/a", resource.MustParse("1Gi"), resource.MustParse("3Gi"), true); recovery {
		t.Error("a recovery reported before the node finished")
	}
	pending := expand.Observed{State: v1.PersistentVolumeClaimNodeResizePending, PVCCap: resource.MustParse("1Gi")}
	if r := o.NodeProgress(t.Context(), "ns/a", pvc, pending); r != nil {
		t.Errorf("recovery %+v while the node works", r)
	}
	done := expand.Observed{PVCCap: resource.MustParse("3Gi")}
	if r := o.NodeProgress(t.Context(), "ns/a", pvc, done); r == nil || r.To.String() != "3Gi" || r.Took < 0 || r.Took > time.Minute {
		t.Errorf("recovery %+v when the node finished, want one to 3Gi", r)
	}
	if r := o.NodeProgress(t.Context(), "ns/a", pvc, done); r != nil {
		t.Errorf("the recovery was reported twice")
	}
}
