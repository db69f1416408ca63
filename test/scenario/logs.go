package scenario

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/csi-resizer/csi-resizer/test/framework"
)

// LoggedExpandCall reports whether the resizer process p has logged that it is calling
// ControllerExpandVolume for volume id vol: the state is written just before the call, so a
// test that must act while the call is in flight waits for this line, not for the state.
func LoggedExpandCall(p *framework.Process, vol string) bool {
	for _, line := range strings.Split(p.Log(), "\n") {
		if strings.Contains(line, "Calling ControllerExpandVolume") && strings.Contains(line, vol) {
			return true
		}
	}
	return false
}

// DescribeEvents renders events for a failure message: "reason xcount: message".
func DescribeEvents(evs []v1.Event) string {
	var out []string
	for _, ev := range evs {
		out = append(out, fmt.Sprintf("%s x%d: %s", ev.Reason, ev.Count, ev.Message))
	}
	return "[" + strings.Join(out, " | ") + "]"
}
