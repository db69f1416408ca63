//go:build integration

package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/csi-resizer/csi-resizer/pkg/expandcontroller"
	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// TestShutdownKeepsEvents: a resizer stopped (SIGTERM) while its worker is in a
// ControllerExpandVolume call records the call's answer on the way out (docs/design.md §1); the
// PVC's event for that answer must reach the API too: the event broadcasters outlive the
// signal and are flushed once the workers stopped (internal/events).
func TestShutdownKeepsEvents(t *testing.T) {
	e := startMock(t, scenario.Options{NoResizer: true})
	r := e.StartResizer(t, "--timeout=30s")
	r.WaitHTTP(t, "/metrics", 90*time.Second)
	_, pv := e.NewClaim(t, "data", "1Gi")
	vol := pv.Spec.CSI.VolumeHandle
	e.Driver.SetFaults(t, []framework.Fault{{Method: "ControllerExpandVolume", VolumeID: vol, Delay: 4 * time.Second, Times: 1}})
	e.SetRequest(t, "data", "2Gi")
	framework.Eventually(t, time.Minute, func() (bool, string) {
		return scenario.LoggedExpandCall(r, vol), "the resizer has not called the driver for " + vol
	})
	if code := terminate(t, r, time.Minute); code != 0 {
		t.Errorf("the resizer exited %d on SIGTERM, want 0:\n%s", code, r.LogTail(20))
	}
	if r.LogContains("broadcaster already stopped") {
		t.Errorf("the stopping resizer dropped an event:\n%s", r.LogTail(5))
	}
	framework.Eventually(t, 10*time.Second, func() (bool, string) {
		var got []string
		for _, ev := range e.Events(t, "data", "") {
			if ev.Reason == expandcontroller.EventFileSystemRequired || ev.Reason == expandcontroller.EventResizeSuccessful {
				return true, ""
			}
			got = append(got, ev.Reason)
		}
		return false, "no event of the finished expansion on the PVC; events: [" + strings.Join(got, ", ") + "]"
	})
}
