//go:build integration

package integration

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// TestPausedLeaderDoesNotCallAfterLosingTheLease (docs/design.md §2.1, found by the soak): a
// leader frozen past its lease, while the other replica takes over and calls the driver, wakes up
// still believing it leads. It must not call the driver for the PVC the new leader is working on
// (the call would be a second one in flight for the same volume), and it exits once its renewal
// fails.
func TestPausedLeaderDoesNotCallAfterLosingTheLease(t *testing.T) {
	e := startMock(t, scenario.Options{
		NoResizer: true,
		ResizerArgs: []string{"--leader-election", "--leader-election-lease-duration=4s", "--leader-election-renew-deadline=3s",
			"--leader-election-retry-period=500ms", "--retry-interval-start=200ms", "--timeout=30s"},
	})
	a := e.StartResizer(t)
	e.NewClaim(t, "warm", "1Gi")
	e.SetRequest(t, "warm", "2Gi")
	e.WaitClaim(t, "warm", resizeTimeout, scenario.Done("2Gi"))
	holder := leaseHolder(t, e)
	b := e.StartResizer(t)

	if err := a.Freeze(); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, func() (bool, string) {
		h := leaseHolder(t, e)
		return h != "" && h != holder, "the Lease is still held by the frozen leader " + holder
	})
	// The new leader's call is held by the driver while the old one wakes up: the PVC is then
	// ControllerResizeInProgress with no answer, which a leader would call for again.
	_, pv := e.NewClaim(t, "data", "1Gi")
	vol := pv.Spec.CSI.VolumeHandle
	e.Driver.SetFaults(t, []framework.Fault{{Method: "ControllerExpandVolume", VolumeID: vol, Delay: 8 * time.Second, Times: 1}})
	e.SetRequest(t, "data", "2Gi")
	framework.Eventually(t, time.Minute, func() (bool, string) {
		return scenario.LoggedExpandCall(b, vol), "the new leader has not called the driver for " + vol
	})
	thawedAt := len(a.Log())
	if err := a.Thaw(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Done(): // exit status 1, "Stopped leading", as upstream's
	case <-time.After(30 * time.Second):
		t.Fatalf("the deposed leader did not exit after its renewal failed:\n%s", a.LogTail(30))
	}
	if after := a.Log()[thawedAt:]; strings.Contains(after, "Calling ControllerExpandVolume") {
		t.Errorf("the deposed leader called the driver after waking up:\n%s", after)
	}
	e.WaitClaim(t, "data", resizeTimeout, scenario.Done("2Gi"))
	if calls := expandCallsFor(e.Driver.Calls(t, "ControllerExpandVolume"), vol); len(calls) != 1 {
		t.Errorf("%d ControllerExpandVolume calls for %s, want the new leader's one: %+v", len(calls), vol, calls)
	}
}

// leaseHolder is the holder of the resizer's Lease ("" before there is one).
func leaseHolder(t *testing.T, e *scenario.Env) string {
	t.Helper()
	leases, err := e.Client.CoordinationV1().Leases("").List(e.Ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases.Items {
		if strings.HasPrefix(l.Name, "external-resizer-") && l.Spec.HolderIdentity != nil {
			return *l.Spec.HolderIdentity
		}
	}
	return ""
}

func expandCallsFor(calls []framework.Call, vol string) []framework.Call {
	var out []framework.Call
	for _, c := range calls {
		if c.VolumeID == vol {
			out = append(out, c)
		}
	}
	return out
}
