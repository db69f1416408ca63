package controller_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"

	"github.com/csi-resizer/csi-resizer/pkg/controller"
	"github.com/csi-resizer/csi-resizer/pkg/csi"
	"github.com/csi-resizer/csi-resizer/pkg/internal/csitest"
	"github.com/csi-resizer/csi-resizer/pkg/internal/kubetest"
)

// TestUncertainExpansionKeepsAllocatedSize: after an error that leaves the outcome unknown (a
// timeout), a lower request must not be followed: the driver may still be growing the volume
// to the allocated size, so that is what is asked again (rule 2, KEP-1790 Case 3).
func TestUncertainExpansionKeepsAllocatedSize(t *testing.T) {
	t.Parallel()
	pvc, pv := claim("data", "10Gi", "1Gi")
	e := start(t, setup{
		objects:     objects(pvc, pv),
		responses:   []csitest.Response{{Code: codes.OK, Grant: true, Delay: 5 * time.Second}},
		callTimeout: 300 * time.Millisecond,
		retryStart:  time.Minute, // no retry of its own: only the user's change triggers one
	})
	e.waitForClaim("data", "DeadlineExceeded", func(p *v1.PersistentVolumeClaim) bool {
		c := condition(p, v1.PersistentVolumeClaimControllerResizeError)
		return c != nil && c.Reason == "DeadlineExceeded"
	})
	e.setRequest("data", "3Gi")
	got := e.waitForClaim("data", "done", func(p *v1.PersistentVolumeClaim) bool {
		return capacityOf(p.Status.Capacity) != "1Gi"
	})
	calls := e.csi.ExpandCalls()
	if len(calls) != 2 {
		t.Fatalf("ControllerExpandVolume calls = %d, want 2", len(calls))
	}
	if b := calls[1].Request.GetCapacityRange().GetRequiredBytes(); b != bytesOf("10Gi") {
		t.Errorf("after an uncertain failure the driver was asked for %d bytes, want the allocated 10Gi (%d)", b, bytesOf("10Gi"))
	}
	if capacityOf(got.Status.Capacity) != "10Gi" || allocated(got) != "10Gi" || state(got) != "" {
		t.Errorf("PVC: %s; want done at 10Gi", describe(got))
	}
	if n := e.events.Count(controller.EventResizeRecovered); n != 0 {
		t.Errorf("%d recovery events for an expansion that was not a recovery", n)
	}
}

// TestRecoveryAfterFinalError: after a final (not infeasible) error the driver is known to have
// stopped, so a lower request is followed (Case 1 with a final error).
func TestRecoveryAfterFinalError(t *testing.T) {
	t.Parallel()
	pvc, pv := claim("data", "10Gi", "1Gi")
	e := start(t, setup{
		objects:    objects(pvc, pv),
		responses:  []csitest.Response{csitest.Fail(codes.Internal, "backend refused")},
		retryStart: time.Minute,
	})
	e.waitForClaim("data", "Internal", func(p *v1.PersistentVolumeClaim) bool {
		c := condition(p, v1.PersistentVolumeClaimControllerResizeError)
		return c != nil && c.Reason == "Internal"
	})
	e.setRequest("data", "3Gi")
	got := e.waitForClaim("data", "recovered", func(p *v1.PersistentVolumeClaim) bool {
		return capacityOf(p.Status.Capacity) == "3Gi"
	})
	if allocated(got) != "3Gi" || state(got) != "" || len(got.Status.Conditions) != 0 {
		t.Errorf("PVC: %s; want done at 3Gi", describe(got))
	}
	e.waitForEvent(controller.EventResizeRecovered)
	if v := e.metric("csi_resizer_volume_recovery_total", map[string]string{"state": "success"}); v != 1 {
		t.Errorf("csi_resizer_volume_recovery_total{state=success} = %v, want 1", v)
	}
}

// TestConflictBeforeCall: when the guarded write before the call fails (the PVC changed since
// it was read), the driver is not called on that decision (rule 3).
func TestConflictBeforeCall(t *testing.T) {
	t.Parallel()
	pvc, pv := claim("data", "3Gi", "1Gi")
	var conflicts atomic.Int32
	conflictOnce := kubetest.WithReactor("patch", "persistentvolumeclaims", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "status" || !conflicts.CompareAndSwap(0, 1) {
			return false, nil, nil
		}
		return true, nil, apierrors.NewConflict(kubetest.PVCs.GroupResource(), "data", fmt.Errorf("injected"))
	})
	e := start(t, setup{objects: objects(pvc, pv), retryStart: 200 * time.Millisecond, kubeOptions: []kubetest.Option{conflictOnce}})
	got := e.waitForClaim("data", "resized", func(p *v1.PersistentVolumeClaim) bool {
		return capacityOf(p.Status.Capacity) == "3Gi"
	})
	if n := conflicts.Load(); n != 1 {
		t.Fatalf("injected %d conflicts, want 1", n)
	}
	calls := e.csi.ExpandCalls()
	if len(calls) != 1 {
		t.Errorf("ControllerExpandVolume calls = %d, want 1 (none for the decision whose write conflicted)", len(calls))
	}
	if state(got) != "" || allocated(got) != "3Gi" {
		t.Errorf("PVC: %s", describe(got))
	}
}

// TestControllerExpandSecret: the PV's controller-expand secret reaches the driver; a missing
// secret is reported and the driver is not called.
func TestControllerExpandSecret(t *testing.T) {
	secretRef := func(pv *v1.PersistentVolume) {
		pv.Spec.CSI.ControllerExpandSecretRef = &v1.SecretReference{Namespace: "kube-system", Name: "expand"}
	}
	t.Run("present", func(t *testing.T) {
		t.Parallel()
		pvc, pv := claim("data", "2Gi", "1Gi")
		secretRef(pv)
		secret := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "expand"},
			Data: map[string][]byte{"token": []byte("s3cr3t")}}
		e := start(t, setup{objects: objects(pvc, pv, secret)})
		e.waitForClaim("data", "resized", func(p *v1.PersistentVolumeClaim) bool {
			return capacityOf(p.Status.Capacity) == "2Gi"
		})
		if s := e.csi.ExpandCalls()[0].Request.GetSecrets(); len(s) != 1 || s["token"] != "s3cr3t" {
			t.Errorf("secrets in the request = %v, want token", s)
		}
	})
	t.Run("missing", func(t *testing.T) {
		t.Parallel()
		pvc, pv := claim("data", "2Gi", "1Gi")
		secretRef(pv)
		e := start(t, setup{objects: objects(pvc, pv), retryStart: time.Minute})
		ev := e.waitForEvent(controller.EventResizeFailed)
		if ev.Type != v1.EventTypeWarning || !contains(ev.Message, "kube-system/expand") {
			t.Errorf("event = %v, want a Warning naming the secret", ev)
		}
		if n := len(e.csi.ExpandCalls()); n != 0 {
			t.Errorf("ControllerExpandVolume calls without the secret = %d, want 0", n)
		}
	})
}

// TestIgnoresOtherClaims: PVCs that are not this driver's, not bound, or whose PV belongs to
// another claim, or whose PV's claimRef has no UID, are left alone (rule 1).
func TestIgnoresOtherClaims(t *testing.T) {
	t.Parallel()
	otherDriverPVC, otherDriverPV := claim("other-driver", "2Gi", "1Gi")
	otherDriverPV.Spec.CSI.Driver = "other.example.com"
	staleRefPVC, staleRefPV := claim("stale-ref", "2Gi", "1Gi")
	staleRefPV.Spec.ClaimRef.UID = types.UID("uid-of-a-deleted-claim")
	noUIDPVC, noUIDPV := claim("no-uid", "2Gi", "1Gi")
	noUIDPV.Spec.ClaimRef.UID = ""
	pendingPVC, _ := claim("pending", "2Gi", "1Gi")
	pendingPVC.Status.Phase = v1.ClaimPending
	noPVPVC, _ := claim("no-pv", "2Gi", "1Gi")
	notCSIPVC, notCSIPV := claim("not-csi", "2Gi", "1Gi")
	notCSIPV.Spec.CSI = nil
	notCSIPV.Spec.HostPath = &v1.HostPathVolumeSource{Path: "/tmp"}
	// And one that is ours, to know when the controller has been through the queue.
	mine, minePV := claim("mine", "2Gi", "1Gi")
	e := start(t, setup{objects: objects(otherDriverPVC, otherDriverPV, staleRefPVC, staleRefPV, noUIDPVC, noUIDPV, pendingPVC, noPVPVC,
		notCSIPVC, notCSIPV, mine, minePV), workers: 1})
	e.waitForClaim("mine", "resized", func(p *v1.PersistentVolumeClaim) bool {
		return capacityOf(p.Status.Capacity) == "2Gi"
	})
	// Showing that nothing happens to the others: wait on a timer.
	quiet(300 * time.Millisecond)
	if n := len(e.csi.ExpandCalls()); n != 1 {
		t.Errorf("ControllerExpandVolume calls = %d, want 1 (only for default/mine)", n)
	}
	for _, w := range e.kube.Writes() {
		if p, ok := w.(clienttesting.PatchActionImpl); ok && p.GetName() != "mine" && p.GetName() != "pv-mine" {
			t.Errorf("wrote %s %s", p.GetResource().Resource, p.GetName())
		}
	}
	if states := e.ctrl.ClaimStates(); len(states) != 1 || states[0].Name != "mine" {
		t.Errorf("ClaimStates() = %+v, want only default/mine", states)
	}
}

// TestManyClaims: many PVCs at once, each costing exactly one call, three writes and one
// event, also when the watch lags behind the writes.
func TestManyClaims(t *testing.T) {
	t.Parallel()
	const n = 40
	var objs []runtime.Object
	for i := range n {
		pvc, pv := claim(fmt.Sprintf("data-%d", i), "2Gi", "1Gi")
		objs = append(objs, pvc, pv)
	}
	e := start(t, setup{objects: objs, watchDelay: 50 * time.Millisecond, workers: 10})
	e.waitFor("all resized", func() (bool, string) {
		done := 0
		for i := range n {
			if capacityOf(e.pvc(fmt.Sprintf("data-%d", i)).Status.Capacity) == "2Gi" {
				done++
			}
		}
		return done == n, fmt.Sprintf("%d of %d done", done, n)
	})
	// Until every echo of the controller's writes was seen and nothing is left to do.
	var refs []ref
	for i := range n {
		refs = append(refs, claimRef(fmt.Sprintf("data-%d", i)), volumeRef(fmt.Sprintf("pv-data-%d", i)))
	}
	e.settle(refs...)
	if c := len(e.csi.ExpandCalls()); c != n {
		t.Errorf("ControllerExpandVolume calls = %d, want %d", c, n)
	}
	if p := e.work.Processed(); p != n {
		t.Errorf("PVCs were processed %d times, want %d (once each: their own writes are not processed again)", p, n)
	}
	if w := len(e.kube.Writes()); w != 3*n {
		t.Errorf("API writes = %d, want %d", w, 3*n)
	}
	if ev := e.events.Count(controller.EventResizeSuccessful); ev != n || len(e.events.Events()) != n {
		t.Errorf("events: %d %s of %d, want %d", ev, controller.EventResizeSuccessful, len(e.events.Events()), n)
	}
	seen := map[string]bool{}
	for _, c := range e.csi.ExpandCalls() {
		seen[c.Request.GetVolumeId()] = true
	}
	if len(seen) != n {
		t.Errorf("%d volumes were expanded, want %d", len(seen), n)
	}
}

// TestRedriveNodeFailure: NodeResizeInfeasible on a driver with controller expansion cannot be
// undone; the PVC goes back to NodeResizePending for the node to retry, without a driver call.
func TestRedriveNodeFailure(t *testing.T) {
	t.Parallel()
	pvc, pv := claim("data", "2Gi", "1Gi")
	pv.Spec.Capacity = v1.ResourceList{v1.ResourceStorage: resource.MustParse("2Gi")}
	long := metav1.NewTime(time.Now().Add(-time.Hour))
	pvc.Status.AllocatedResources = v1.ResourceList{v1.ResourceStorage: resource.MustParse("2Gi")}
	pvc.Status.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{v1.ResourceStorage: v1.PersistentVolumeClaimNodeResizeInfeasible}
	pvc.Status.Conditions = []v1.PersistentVolumeClaimCondition{{Type: v1.PersistentVolumeClaimNodeResizeError, Status: v1.ConditionTrue,
		Reason: "NodeFailed", Message: "resize2fs failed", LastProbeTime: long, LastTransitionTime: long}}
	e := start(t, setup{objects: objects(pvc, pv)})
	got := e.waitForClaim("data", "NodeResizePending", func(p *v1.PersistentVolumeClaim) bool {
		return state(p) == v1.PersistentVolumeClaimNodeResizePending
	})
	if allocated(got) != "2Gi" || condition(got, v1.PersistentVolumeClaimNodeResizeError) != nil ||
		condition(got, v1.PersistentVolumeClaimFileSystemResizePending) == nil {
		t.Errorf("PVC: %s; want allocated 2Gi, FileSystemResizePending, no NodeResizeError", describe(got))
	}
	e.waitForEvent(controller.EventFileSystemRequired)
	if n := len(e.csi.ExpandCalls()); n != 0 {
		t.Errorf("ControllerExpandVolume calls = %d, want 0", n)
	}
}

// failFirst returns a plain error, without a gRPC status, from its first call: a broken
// connection, say.
type failFirst struct {
	next  csi.Expander
	calls atomic.Int32
}

func (f *failFirst) Expand(ctx context.Context, req csi.ExpandRequest) (csi.ExpandResult, error) {
	if f.calls.Add(1) == 1 {
		return csi.ExpandResult{}, errors.New("connection reset by peer")
	}
	return f.next.Expand(ctx, req)
}

// TestErrorWithoutStatus: an error that carries no gRPC status is uncertain: reason
// "Uncertain", state unchanged, class transient, and the retry keeps the allocated size.
func TestErrorWithoutStatus(t *testing.T) {
	t.Parallel()
	pvc, pv := claim("data", "2Gi", "1Gi")
	e := start(t, setup{
		objects:      objects(pvc, pv),
		retryStart:   time.Minute,
		wrapExpander: func(next csi.Expander) csi.Expander { return &failFirst{next: next} },
	})
	got := e.waitForClaim("data", "an error condition", func(p *v1.PersistentVolumeClaim) bool {
		return condition(p, v1.PersistentVolumeClaimControllerResizeError) != nil
	})
	c := condition(got, v1.PersistentVolumeClaimControllerResizeError)
	if c.Reason != "Uncertain" || !contains(c.Message, "connection reset by peer") {
		t.Errorf("condition %s %q, want Uncertain with the error text", c.Reason, c.Message)
	}
	if state(got) != v1.PersistentVolumeClaimControllerResizeInProgress || allocated(got) != "2Gi" {
		t.Errorf("PVC: %s; want ControllerResizeInProgress at 2Gi", describe(got))
	}
	e.waitForEvent(controller.EventResizeFailed)
	if v := e.metric("csi_resizer_controller_expand_errors_total", map[string]string{"grpc_code": "Uncertain", "class": "transient"}); v != 1 {
		t.Errorf("csi_resizer_controller_expand_errors_total{grpc_code=Uncertain,class=transient} = %v, want 1", v)
	}
	// A lower request is not followed: the outcome of the failed call is unknown.
	e.setRequest("data", "1500Mi")
	got = e.waitForClaim("data", "done", func(p *v1.PersistentVolumeClaim) bool { return state(p) == "" })
	if capacityOf(got.Status.Capacity) != "2Gi" {
		t.Errorf("PVC: %s; want done at the allocated 2Gi", describe(got))
	}
}
