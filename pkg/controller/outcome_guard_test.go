package controller_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/csi-resizer/csi-resizer/pkg/csi"
	"github.com/csi-resizer/csi-resizer/pkg/internal/csitest"
	"github.com/csi-resizer/csi-resizer/pkg/internal/kubetest"
)

// backupCondition is a condition another component keeps on the PVC.
const backupCondition v1.PersistentVolumeClaimConditionType = "example.com/BackupInProgress"

// changeDuringCall lets the driver answer, and then, before the resizer records the answer,
// changes the PVC as another API client would: the write that records the answer meets a
// newer version than the one it was computed from.
type changeDuringCall struct {
	next   csi.Expander
	change func()
	calls  atomic.Int32
}

func (c *changeDuringCall) Expand(ctx context.Context, req csi.ExpandRequest) (csi.ExpandResult, error) {
	res, err := c.next.Expand(ctx, req)
	if c.calls.Add(1) == 1 {
		c.change()
	}
	return res, err
}

// TestOutcomeWriteIsGuarded: the status write that records the driver's answer is guarded by
// resourceVersion like the one before the call. When the PVC changed during the call (here
// another component added a condition), the answer is recorded over the latest version: the
// other component's condition survives (an unguarded write of the whole conditions list would
// drop it), the driver is not called a second time, and the PVC is read from the API once.
func TestOutcomeWriteIsGuarded(t *testing.T) {
	for _, tc := range []struct {
		name      string
		answer    *csitest.Response
		wantState v1.ClaimResourceStatus
		wantCap   string
		wantError string // reason of ControllerResizeError, "" for none
	}{
		{name: "success", wantCap: "3Gi"},
		{name: "infeasible", answer: fail(codes.OutOfRange, "at most 2Gi"),
			wantState: v1.PersistentVolumeClaimControllerResizeInfeasible, wantCap: "1Gi", wantError: "OutOfRange"},
		{name: "final error", answer: fail(codes.Internal, "backend busy"),
			wantState: v1.PersistentVolumeClaimControllerResizeInProgress, wantCap: "1Gi", wantError: "Internal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pvc, pv := claim("data", "3Gi", "1Gi")
			var e *env
			wrapper := &changeDuringCall{change: func() {
				err := e.kube.Mutate(kubetest.PVCs, ns, "data", func(o runtime.Object) {
					p := o.(*v1.PersistentVolumeClaim)
					p.Status.Conditions = append(p.Status.Conditions, v1.PersistentVolumeClaimCondition{
						Type: backupCondition, Status: v1.ConditionTrue, Reason: "Snapshotting",
						LastTransitionTime: metav1.Now(),
					})
				})
				if err != nil {
					t.Errorf("adding the other component's condition: %v", err)
				}
			}}
			// Retries an hour away: the one attempt's answer is what is looked at.
			s := setup{objects: objects(pvc, pv), retryStart: time.Hour, retryMax: time.Hour,
				wrapExpander: func(next csi.Expander) csi.Expander { wrapper.next = next; return wrapper }}
			if tc.answer != nil {
				s.defaultResponse = tc.answer
			}
			e = start(t, s)
			got := e.waitForClaim("data", "the answer recorded", func(p *v1.PersistentVolumeClaim) bool {
				if tc.wantError != "" {
					c := condition(p, v1.PersistentVolumeClaimControllerResizeError)
					return c != nil && c.Reason == tc.wantError
				}
				return capacityOf(p.Status.Capacity) == tc.wantCap
			})
			if state(got) != tc.wantState || capacityOf(got.Status.Capacity) != tc.wantCap || allocated(got) != "3Gi" {
				t.Errorf("PVC: %s; want state %q, capacity %s, allocated 3Gi", describe(got), tc.wantState, tc.wantCap)
			}
			if c := condition(got, backupCondition); c == nil || c.Reason != "Snapshotting" {
				t.Errorf("the other component's condition was lost: %s", describe(got))
			}
			if n := wrapper.calls.Load(); n != 1 {
				t.Errorf("driver calls = %d, want 1 (the answer is known; a conflict must not repeat the call)", n)
			}
			verbs := e.kube.Verbs()
			if n := verbs["get persistentvolumeclaims"]; n != 1 {
				t.Errorf("PVC reads = %d, want 1 (after the conflict); requests: %v", n, verbs)
			}
		})
	}
}

func fail(code codes.Code, message string) *csitest.Response {
	r := csitest.Fail(code, message)
	return &r
}

// TestUnrelatedUpdatesKeepTheBackoff: after a final error the PVC waits for its backoff. An
// update by another client that changes nothing the resizer decides on (labels, annotations,
// another component's condition) neither calls the driver again nor writes anything; a new
// request does, at once.
func TestUnrelatedUpdatesKeepTheBackoff(t *testing.T) {
	t.Parallel()
	pvc, pv := claim("data", "3Gi", "1Gi")
	e := start(t, setup{objects: objects(pvc, pv), retryStart: time.Hour, retryMax: time.Hour,
		defaultResponse: fail(codes.Internal, "backend busy")})
	e.waitForClaim("data", "the final error recorded", func(p *v1.PersistentVolumeClaim) bool {
		c := condition(p, v1.PersistentVolumeClaimControllerResizeError)
		return c != nil && c.Reason == "Internal"
	})
	e.settle(claimRef("data"), volumeRef("pv-data"))
	writes := len(e.kube.Writes())

	for i, change := range []func(p *v1.PersistentVolumeClaim){
		func(p *v1.PersistentVolumeClaim) { p.Labels = map[string]string{"team": "db"} },
		func(p *v1.PersistentVolumeClaim) { p.Annotations = map[string]string{"example.com/owner": "x"} },
		func(p *v1.PersistentVolumeClaim) {
			p.Status.Conditions = append(p.Status.Conditions, v1.PersistentVolumeClaimCondition{
				Type: backupCondition, Status: v1.ConditionTrue, Reason: "Snapshotting"})
		},
		func(p *v1.PersistentVolumeClaim) { p.Labels["team"] = "storage" },
	} {
		if err := e.kube.Mutate(kubetest.PVCs, ns, "data", func(o runtime.Object) { change(o.(*v1.PersistentVolumeClaim)) }); err != nil {
			t.Fatalf("change %d: %v", i, err)
		}
	}
	e.settle(claimRef("data"), volumeRef("pv-data"))
	if n := len(e.csi.ExpandCalls()); n != 1 {
		t.Errorf("driver calls = %d after unrelated updates, want 1 (the backoff of the final error holds)", n)
	}
	if after := e.kube.Writes()[writes:]; len(after) != 0 {
		var what []string
		for _, a := range after {
			what = append(what, a.GetVerb()+" "+a.GetResource().Resource+"/"+a.GetSubresource())
		}
		t.Errorf("%d writes after unrelated updates, want none: %v", len(after), what)
	}

	// A new request is an input: it goes at once, backoff or not.
	e.setRequest("data", "2Gi")
	calls := e.csi.WaitForExpandCalls(t, 2, waitLimit)
	if got := calls[1].Request.GetCapacityRange().GetRequiredBytes(); got != 2<<30 {
		t.Errorf("second call asks for %d bytes, want 2Gi", got)
	}
}
