package expand

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestRetryWait(t *testing.T) {
	r := Retry{Start: time.Second, Max: time.Minute}
	failing := func(reason string, since, last int) v1.PersistentVolumeClaimCondition {
		c := cond(v1.PersistentVolumeClaimControllerResizeError, reason, mt(last))
		c.LastTransitionTime = mt(since)
		return c
	}
	for _, tc := range []struct {
		name   string
		spec   string
		st     v1.PersistentVolumeClaimStatus
		legacy bool
		failed *resource.Quantity
		now    int
		want   time.Duration
	}{
		{"no failure recorded", "10Gi", statusAt("1Gi", "10Gi", v1.PersistentVolumeClaimControllerResizeInProgress), false, nil, 0, 0},
		{"first transient failure: start", "10Gi", statusAt("1Gi", "10Gi", v1.PersistentVolumeClaimControllerResizeInProgress, failing("Unavailable", 0, 0)), false, nil, 0, 2 * time.Second},
		{"failing for 7s: 8s", "10Gi", statusAt("1Gi", "10Gi", v1.PersistentVolumeClaimControllerResizeInProgress, failing("Unavailable", 0, 7)), false, nil, 7, 9 * time.Second},
		{"failing for an hour: max", "10Gi", statusAt("1Gi", "10Gi", v1.PersistentVolumeClaimControllerResizeInProgress, failing("Unavailable", 0, 3600)), false, nil, 3600, 61 * time.Second},
		{"final errors counted from the Resizing condition", "10Gi", statusAt("1Gi", "10Gi", v1.PersistentVolumeClaimControllerResizeInProgress, cond(v1.PersistentVolumeClaimResizing, "", mt(0)), failing("Internal", 7, 7)), false, nil, 7, 9 * time.Second},
		{"lowered request keeps the transient wait", "3Gi", statusAt("1Gi", "10Gi", v1.PersistentVolumeClaimControllerResizeInProgress, failing("Unavailable", 0, 0)), false, nil, 0, 2 * time.Second},
		{"infeasible: max after the failure", "10Gi", statusAt("1Gi", "10Gi", v1.PersistentVolumeClaimControllerResizeInfeasible, failing("OutOfRange", 0, 0)), false, nil, 30, 31 * time.Second},
		{"infeasible, new request: at once", "3Gi", statusAt("1Gi", "10Gi", v1.PersistentVolumeClaimControllerResizeInfeasible, failing("OutOfRange", 0, 0)), false, nil, 0, 0},
		{"infeasible, time is up", "10Gi", statusAt("1Gi", "10Gi", v1.PersistentVolumeClaimControllerResizeInfeasible, failing("OutOfRange", 0, 0)), false, nil, 61, 0},
		{"node infeasible: from the node's error", "10Gi", statusAt("1Gi", "10Gi", v1.PersistentVolumeClaimNodeResizeInfeasible, cond(v1.PersistentVolumeClaimNodeResizeError, "", mt(5))), false, nil, 10, 56 * time.Second},
		{"legacy infeasible, same request", "10Gi", statusAt("1Gi", "", "", failing("OutOfRange", 0, 0)), true, qp("10Gi"), 0, 61 * time.Second},
		{"legacy infeasible, request not known: wait", "10Gi", statusAt("1Gi", "", "", failing("OutOfRange", 0, 0)), true, nil, 0, 61 * time.Second},
		{"legacy infeasible, new request: at once", "20Gi", statusAt("1Gi", "", "", failing("OutOfRange", 0, 0)), true, qp("10Gi"), 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pvc := &v1.PersistentVolumeClaim{Status: tc.st, Spec: v1.PersistentVolumeClaimSpec{Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: q(tc.spec)}}}}
			pv := &v1.PersistentVolume{Spec: v1.PersistentVolumeSpec{Capacity: v1.ResourceList{v1.ResourceStorage: q("1Gi")}}}
			o := Observe(pvc, pv, false, tc.legacy)
			if got := RetryWait(pvc, o, PlanExpansion(o), tc.failed, r, mt(tc.now).Time); got != tc.want {
				t.Errorf("RetryWait = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestWaitsForPods(t *testing.T) {
	pvc := &v1.PersistentVolumeClaim{Status: statusAt("1Gi", "10Gi", "", cond(v1.PersistentVolumeClaimControllerResizeError, ReasonFailedPrecondition, mt(0)))}
	plain := &v1.PersistentVolumeClaim{}
	for _, tc := range []struct {
		pvc                   *v1.PersistentVolumeClaim
		handle, offline, want bool
	}{
		{pvc, true, false, true}, {pvc, false, true, false}, {plain, true, true, true}, {plain, true, false, false},
	} {
		if got := WaitsForPods(tc.pvc, tc.handle, tc.offline); got != tc.want {
			t.Errorf("WaitsForPods(%v, handle %v, offline %v) = %v", tc.pvc.Status.Conditions, tc.handle, tc.offline, got)
		}
	}
}

func TestNodeStepOutcome(t *testing.T) {
	for _, tc := range []struct {
		state     v1.ClaimResourceStatus
		capacity  string
		fsPending bool
		want      NodeOutcome
	}{
		{v1.PersistentVolumeClaimNodeResizePending, "1Gi", true, NodePending},
		{v1.PersistentVolumeClaimNodeResizeInProgress, "1Gi", true, NodePending},
		{v1.PersistentVolumeClaimNodeResizeInfeasible, "1Gi", false, NodeFailed},
		{"", "2Gi", false, NodeDone},
		{"", "1Gi", true, NodePending},
		{"", "1Gi", false, NodeGone},
		{v1.PersistentVolumeClaimControllerResizeInProgress, "1Gi", false, NodeGone},
	} {
		o := Observed{State: tc.state, PVCCap: q(tc.capacity), FileSystemResizePending: tc.fsPending}
		if got := NodeStepOutcome(o, q("2Gi")); got != tc.want {
			t.Errorf("NodeStepOutcome(%q, capacity %s, fs pending %v) = %v, want %v", tc.state, tc.capacity, tc.fsPending, got, tc.want)
		}
	}
}
