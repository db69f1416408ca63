package framework

import (
	"regexp"
	"strings"
)

var hostpathVolumeID = regexp.MustCompile(`"volume_id":"([^"]+)"`)

// HostpathExpandCalls returns the volume ids of the ControllerExpandVolume calls in a
// csi-driver-host-path log at -v=5, in order. Each call logs a "GRPC call: <method>" line and a
// "GRPC request: <json>" line, but concurrent calls interleave them, so a request is recognised
// by its fields: a volume_id and a capacity_range without the volume_path of NodeExpandVolume
// (CreateVolume has a capacity_range but no volume_id).
func HostpathExpandCalls(log string) []string {
	var ids []string
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, "GRPC request:") || !strings.Contains(line, `"capacity_range"`) || strings.Contains(line, `"volume_path"`) {
			continue
		}
		if m := hostpathVolumeID.FindStringSubmatch(line); m != nil {
			ids = append(ids, m[1])
		}
	}
	return ids
}
