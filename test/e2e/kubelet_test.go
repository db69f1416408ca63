//go:build integration

package e2e

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// env is a scenario.Env with what the driver under test advertises for expansion, read from
// the driver itself, so that the suite knows what to expect of any driver without being told.
type env struct {
	*scenario.Env
	// controller and node are the driver's controller and node EXPAND_VOLUME capabilities. A
	// driver with node only (csi-driver-host-path --disable-controller-expansion) gets no CSI
	// call from the resizer: the resizer's whole part is to hand the new size to the node.
	controller, node bool
}

func newEnv(t *testing.T, se *scenario.Env) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(se.Ctx, 30*time.Second)
	defer cancel()
	ctrl, node, err := se.Driver.ExpansionCapabilities(ctx)
	if err != nil {
		t.Fatalf("reading the expansion capabilities of %s: %v", se.Driver.Name, err)
	}
	if !ctrl && !node {
		t.Fatalf("driver %s advertises neither controller nor node EXPAND_VOLUME: it cannot expand volumes, the suite has nothing to test", se.Driver.Name)
	}
	return &env{Env: se, controller: ctrl, node: node}
}

// nodeStepExpected says whether the resizer must leave the end of an expansion to the node
// (NodeResizePending), and whether that is known: always for a node-only driver, for the mock
// from the answer the suite made it give, for a real driver from E2E_NODE_EXPANSION_REQUIRED.
func (e *env) nodeStepExpected() (want, known bool) {
	switch {
	case !e.controller:
		return true, true
	case e.Driver.IsMock():
		return suite.mockNodeExpansion, true
	case suite.nodeExpansionRequired != nil:
		return *suite.nodeExpansionRequired, true
	}
	return false, false
}

// nodeExpand plays the kubelet's node step for a PVC in NodeResizePending (there is no kubelet
// here): when the driver advertises node EXPAND_VOLUME, NodeExpandVolume to the PVC's
// allocatedResources, with a fresh directory standing for the publish path; then the status
// the kubelet writes. On success that is capacity = allocated size with the state and
// FileSystemResizePending cleared; when the driver refuses the size for good (INVALID_ARGUMENT,
// OUT_OF_RANGE, NOT_FOUND: what the kubelet calls infeasible), NodeResizeInfeasible with a
// NodeResizeError condition, the state KEP-1790 recovers from when the user lowers the
// request. It returns the driver's error. A PVC in any other state is left alone.
func (e *env) nodeExpand(t *testing.T, name string) error {
	t.Helper()
	pvc := e.PVC(t, name)
	if scenario.State(pvc) != v1.PersistentVolumeClaimNodeResizePending {
		return nil
	}
	if e.node {
		alloc := pvc.Status.AllocatedResources[v1.ResourceStorage]
		pv := e.PV(t, pvc.Spec.VolumeName)
		ctx, cancel := context.WithTimeout(e.Ctx, 30*time.Second)
		defer cancel()
		if err := e.Driver.NodeExpandVolume(ctx, pv.Spec.CSI.VolumeHandle, t.TempDir(), alloc.Value()); err != nil {
			if infeasible(err) {
				e.markNodeInfeasible(t, pvc, err)
			}
			return err
		}
	}
	e.FinishNodeExpansion(t, name)
	return nil
}

// infeasible reports whether a driver error is one the kubelet treats as final for the size
// asked for.
func infeasible(err error) bool {
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		return false
	}
	switch se.GRPCStatus().Code() {
	case codes.InvalidArgument, codes.OutOfRange, codes.NotFound:
		return true
	}
	return false
}

// markNodeInfeasible writes what the kubelet writes when NodeExpandVolume fails for good:
// state NodeResizeInfeasible and a NodeResizeError condition with the error, other
// conditions kept.
func (e *env) markNodeInfeasible(t *testing.T, pvc *v1.PersistentVolumeClaim, cause error) {
	t.Helper()
	pvc = pvc.DeepCopy()
	pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage] = v1.PersistentVolumeClaimNodeResizeInfeasible
	conds := []v1.PersistentVolumeClaimCondition{{
		Type: v1.PersistentVolumeClaimNodeResizeError, Status: v1.ConditionTrue,
		LastTransitionTime: metav1.Now(), Message: fmt.Sprintf("failed to expand pvc with %v", cause),
	}}
	for _, c := range pvc.Status.Conditions {
		if c.Type != v1.PersistentVolumeClaimNodeResizeError {
			conds = append(conds, c)
		}
	}
	pvc.Status.Conditions = conds
	if _, err := e.Client.CoreV1().PersistentVolumeClaims(e.Namespace).UpdateStatus(e.Ctx, pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("playing the kubelet's NodeResizeInfeasible for %s: %v", pvc.Name, err)
	}
}
