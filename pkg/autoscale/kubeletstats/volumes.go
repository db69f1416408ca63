package kubeletstats

import (
	"time"

	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// VolumeStats is the usage of one PVC's file system as a kubelet measured it.
type VolumeStats struct {
	CapacityBytes  uint64
	AvailableBytes uint64 // free to unprivileged users: what the application can still write
	UsedBytes      uint64
	// HasInodes is false when the file system reports no inode counts (some do not, e.g.
	// btrfs reports 0 inodes): an inode threshold cannot be judged then.
	HasInodes  bool
	Inodes     uint64
	InodesFree uint64
	InodesUsed uint64
	// Time is when the kubelet took the measurement; the kubelet measures volumes in the
	// background, so this may be a minute or more before the read.
	Time time.Time
	// Pod is "namespace/name" of the pod whose entry was taken.
	Pod string
}

// Volumes returns the usage of every PVC in summary, keyed "namespace/name". Only a pod's
// volume entries that carry pvcRef count (emptyDir, configMap, projected and ephemeral volumes
// without a claim do not). An entry without capacity, available and used bytes is skipped:
// the kubelet has not measured it yet, and a guess could trigger a resize. When several pods
// on the node mount one PVC, each reports it; the newest measurement is kept, and on equal
// times the one reporting more used bytes, so that a stale low reading never hides a full one.
func Volumes(summary *statsv1alpha1.Summary) map[string]VolumeStats {
	out := map[string]VolumeStats{}
	if summary == nil {
		return out
	}
	for _, pod := range summary.Pods {
		for _, v := range pod.VolumeStats {
			if v.PVCRef == nil || v.PVCRef.Name == "" {
				continue
			}
			s, ok := volumeStats(v.FsStats)
			if !ok {
				continue
			}
			s.Pod = pod.PodRef.Namespace + "/" + pod.PodRef.Name
			key := v.PVCRef.Namespace + "/" + v.PVCRef.Name
			if old, seen := out[key]; seen && !newer(s, old) {
				continue
			}
			out[key] = s
		}
	}
	return out
}

func volumeStats(fs statsv1alpha1.FsStats) (VolumeStats, bool) {
	if fs.CapacityBytes == nil || fs.AvailableBytes == nil || fs.UsedBytes == nil || *fs.CapacityBytes == 0 {
		return VolumeStats{}, false
	}
	s := VolumeStats{
		CapacityBytes:  *fs.CapacityBytes,
		AvailableBytes: *fs.AvailableBytes,
		UsedBytes:      *fs.UsedBytes,
		Time:           fs.Time.Time,
	}
	if fs.Inodes != nil && fs.InodesFree != nil && *fs.Inodes > 0 {
		s.HasInodes = true
		s.Inodes, s.InodesFree = *fs.Inodes, *fs.InodesFree
		if fs.InodesUsed != nil {
			s.InodesUsed = *fs.InodesUsed
		} else if s.Inodes >= s.InodesFree {
			s.InodesUsed = s.Inodes - s.InodesFree
		}
	}
	return s, true
}

// newer tells whether a should replace b for the same PVC.
func newer(a, b VolumeStats) bool {
	if !a.Time.Equal(b.Time) {
		return a.Time.After(b.Time)
	}
	return a.UsedBytes > b.UsedBytes
}
