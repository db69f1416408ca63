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
	return loggedCall(p, "Calling ControllerExpandVolume", "volumeID", vol)
}

// loggedCall reports whether p's log has a line with msg and every key=value pair of kv (klog's
// text or JSON rendering of the key and value, matched whole: volume "1" is not volume "12").
func loggedCall(p *framework.Process, msg string, kv ...string) bool {
	for _, line := range strings.Split(p.Log(), "\n") {
		ok := strings.Contains(line, msg)
		for i := 0; ok && i+1 < len(kv); i += 2 {
			text := fmt.Sprintf("%s=%q", kv[i], kv[i+1])
			jsonForm := fmt.Sprintf("%q:%q", kv[i], kv[i+1])
			ok = strings.Contains(line, text+" ") || strings.HasSuffix(line, text) || strings.Contains(line, jsonForm)
		}
		if ok {
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
