//go:build integration

package integration

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	v1 "k8s.io/api/core/v1"

	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// TestCallTimeouts: --resize-timeout and --modify-timeout are the deadlines of each
// ControllerExpandVolume and ControllerModifyVolume call (docs/design.md §2.1, upstream's
// flags from after v2.2), with upstream's precedence. The mock delays every expand and modify
// call by the same callDelay. With --resize-timeout below it and --modify-timeout above it, the
// expansion is cut (DeadlineExceeded, a transient error: kept in progress and retried) while
// the modification completes. Restarted with --timeout set explicitly above the delay, which
// overrides both, the expansion completes, and a modification does though --modify-timeout is
// below the delay.
func TestCallTimeouts(t *testing.T) {
	const callDelay = 3 * time.Second
	slow := []framework.Fault{
		{Method: "ControllerExpandVolume", Delay: callDelay},
		{Method: "ControllerModifyVolume", Delay: callDelay},
	}
	e := startMock(t, scenario.Options{NoResizer: true, Mock: framework.MockDriverOptions{ModifyVolume: true, Faults: slow}})
	for name, params := range map[string]map[string]string{"silver": silver, "gold": gold, "bronze": bronze} {
		e.CreateClass(t, name, params)
	}
	_, pv := e.NewClaimWithClass(t, "data", "1Gi", "silver")
	vol := pv.Spec.CSI.VolumeHandle

	first := e.StartResizer(t, "--resize-timeout=1s", "--modify-timeout=1m", "--retry-interval-start=200ms", "--retry-interval-max=2s")
	e.SetRequest(t, "data", "2Gi")
	e.SetClass(t, "data", "gold")
	e.WaitClaim(t, "data", modifyTimeout, scenario.ModifiedTo("gold"))
	// The expansion is cut at its deadline, again at every retry: each records DeadlineExceeded
	// and keeps the allocated size in progress (docs/design.md §2.3 rule 6).
	framework.Eventually(t, resizeTimeout, func() (bool, string) {
		return len(e.Driver.VolumeCalls(t, vol)) >= 2, "fewer than 2 ControllerExpandVolume calls yet"
	})
	pvc := e.WaitClaim(t, "data", resizeTimeout, func(pvc *v1.PersistentVolumeClaim) (bool, string) {
		c := scenario.Condition(pvc, v1.PersistentVolumeClaimControllerResizeError)
		return c != nil && c.Reason == "DeadlineExceeded" && scenario.State(pvc) == v1.PersistentVolumeClaimControllerResizeInProgress,
			"want ControllerResizeInProgress with a DeadlineExceeded ControllerResizeError"
	})
	if _, capacity, _ := scenario.Storage(pvc); !scenario.Is(capacity, "1Gi") {
		t.Errorf("capacity %s after expansions cut by --resize-timeout, want 1Gi still", capacity.String())
	}
	for _, c := range e.Driver.ModifyCalls(t, vol) {
		if c.Code != codes.OK {
			t.Errorf("a ControllerModifyVolume call answered %s under --modify-timeout=1m, want OK: %s", c.CodeName, describeModifyCalls(e.Driver.ModifyCalls(t, vol)))
		}
	}
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}

	// --timeout given explicitly overrides both (backwards compatible, as upstream), and says so.
	second := e.StartResizer(t, "--timeout=1m", "--resize-timeout=1s", "--modify-timeout=1s", "--retry-interval-start=200ms", "--retry-interval-max=2s")
	e.WaitClaim(t, "data", resizeTimeout, scenario.Done("2Gi"))
	e.SetClass(t, "data", "bronze")
	e.WaitClaim(t, "data", modifyTimeout, scenario.ModifiedTo("bronze"))
	for _, flag := range []string{"--resize-timeout", "--modify-timeout"} {
		if !second.LogContains("--timeout=1m0s is set, so it overrides " + flag) {
			t.Errorf("no start-up line says that --timeout overrides %s:\n%s", flag, second.LogTail(40))
		}
	}
}
