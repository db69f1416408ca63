package kubeletstats

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"
)

// decodeFixture decodes testdata/summary.json refusing unknown fields, so the fixture cannot
// drift from the kubelet's real types.
func decodeFixture(t *testing.T) *statsv1alpha1.Summary {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(fixture(t)))
	dec.DisallowUnknownFields()
	var s statsv1alpha1.Summary
	if err := dec.Decode(&s); err != nil {
		t.Fatalf("testdata/summary.json is not a kubelet Summary: %v", err)
	}
	return &s
}

func at(s string) time.Time {
	tm, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return tm
}

// fixtureVolumes is what Volumes must find in testdata/summary.json.
var fixtureVolumes = map[string]VolumeStats{
	"shop/data-web-0": {CapacityBytes: 10464022528, AvailableBytes: 1546813440, UsedBytes: 8900431872,
		HasInodes: true, Inodes: 655360, InodesFree: 650201, InodesUsed: 5159,
		Time: at("2026-11-29T06:59:31Z"), Pod: "shop/web-0"},
	"shop/data-web-1": {CapacityBytes: 10464022528, AvailableBytes: 9420357632, UsedBytes: 1026883584,
		HasInodes: true, Inodes: 655360, InodesFree: 655001, InodesUsed: 359,
		Time: at("2026-11-29T06:59:58Z"), Pod: "shop/web-1"},
	// pg-0 and the backup job mount it; the backup job's measurement is newer.
	"db/pgdata-pg-0": {CapacityBytes: 21474836480, AvailableBytes: 1073741824, UsedBytes: 20401094656,
		HasInodes: true, Inodes: 1310720, InodesFree: 1299000, InodesUsed: 11720,
		Time: at("2026-11-29T06:59:50Z"), Pod: "db/pg-backup-29381420-x2vnq"},
	// db/wal-pg-0 has a pvcRef but no numbers yet: absent. The generic ephemeral volume's
	// file system reports no inodes.
	"batch/etl-7f9c-scratch": {CapacityBytes: 5368709120, AvailableBytes: 3221225472, UsedBytes: 2147483648,
		Time: at("2026-11-29T06:59:44Z"), Pod: "batch/etl-7f9c"},
}

func TestVolumesFromFixture(t *testing.T) {
	if diff := diffVolumes(fixtureVolumes, Volumes(decodeFixture(t))); diff != "" {
		t.Fatalf("Volumes (-want +got):\n%s", diff)
	}
}

func TestVolumesDuplicates(t *testing.T) {
	vol := func(podName, ts string, used uint64) statsv1alpha1.PodStats {
		return statsv1alpha1.PodStats{
			PodRef: statsv1alpha1.PodReference{Namespace: "ns", Name: podName},
			VolumeStats: []statsv1alpha1.VolumeStats{{
				Name:   "v",
				PVCRef: &statsv1alpha1.PVCReference{Namespace: "ns", Name: "claim"},
				FsStats: statsv1alpha1.FsStats{Time: metav1.NewTime(at(ts)), CapacityBytes: ptr.To[uint64](100),
					AvailableBytes: ptr.To(100 - used), UsedBytes: ptr.To(used)},
			}},
		}
	}
	cases := []struct {
		name    string
		pods    []statsv1alpha1.PodStats
		wantPod string
	}{
		{"newest wins when first", []statsv1alpha1.PodStats{vol("a", "2026-11-29T07:00:02Z", 10), vol("b", "2026-11-29T07:00:01Z", 90)}, "ns/a"},
		{"newest wins when last", []statsv1alpha1.PodStats{vol("a", "2026-11-29T07:00:01Z", 90), vol("b", "2026-11-29T07:00:02Z", 10)}, "ns/b"},
		{"same time: more used wins", []statsv1alpha1.PodStats{vol("a", "2026-11-29T07:00:01Z", 10), vol("b", "2026-11-29T07:00:01Z", 90)}, "ns/b"},
		{"same time, same used: first kept", []statsv1alpha1.PodStats{vol("a", "2026-11-29T07:00:01Z", 50), vol("b", "2026-11-29T07:00:01Z", 50)}, "ns/a"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Volumes(&statsv1alpha1.Summary{Pods: tc.pods})
			if len(got) != 1 || got["ns/claim"].Pod != tc.wantPod {
				t.Fatalf("got %+v, want ns/claim from %s", got, tc.wantPod)
			}
		})
	}
}

func TestVolumesSkipsIncomplete(t *testing.T) {
	full := statsv1alpha1.FsStats{CapacityBytes: ptr.To[uint64](100), AvailableBytes: ptr.To[uint64](40), UsedBytes: ptr.To[uint64](60),
		Inodes: ptr.To[uint64](10), InodesFree: ptr.To[uint64](4)}
	without := func(f func(*statsv1alpha1.FsStats)) statsv1alpha1.FsStats { s := full; f(&s); return s }
	pod := statsv1alpha1.PodStats{PodRef: statsv1alpha1.PodReference{Namespace: "ns", Name: "p"}}
	for name, fs := range map[string]statsv1alpha1.FsStats{
		"incomplete/no-capacity":   without(func(s *statsv1alpha1.FsStats) { s.CapacityBytes = nil }),
		"incomplete/zero-capacity": without(func(s *statsv1alpha1.FsStats) { s.CapacityBytes = ptr.To[uint64](0) }),
		"incomplete/no-available":  without(func(s *statsv1alpha1.FsStats) { s.AvailableBytes = nil }),
		"incomplete/no-used":       without(func(s *statsv1alpha1.FsStats) { s.UsedBytes = nil }),
		"ok/full":                  full,
	} {
		pod.VolumeStats = append(pod.VolumeStats, statsv1alpha1.VolumeStats{Name: name, FsStats: fs,
			PVCRef: &statsv1alpha1.PVCReference{Namespace: "ns", Name: name}})
	}
	pod.VolumeStats = append(pod.VolumeStats, statsv1alpha1.VolumeStats{Name: "no-claim", FsStats: full})
	got := Volumes(&statsv1alpha1.Summary{Pods: []statsv1alpha1.PodStats{pod}})
	want := map[string]VolumeStats{"ns/ok/full": {CapacityBytes: 100, AvailableBytes: 40, UsedBytes: 60,
		HasInodes: true, Inodes: 10, InodesFree: 4, InodesUsed: 6, Pod: "ns/p"}}
	if diff := diffVolumes(want, got); diff != "" {
		t.Fatalf("Volumes (-want +got):\n%s", diff)
	}
	if got := Volumes(nil); len(got) != 0 {
		t.Fatalf("Volumes(nil) = %v, want empty", got)
	}
}

// diffVolumes lists the keys whose stats differ, "" when none do.
func diffVolumes(want, got map[string]VolumeStats) string {
	keys := slices.Sorted(maps.Keys(want))
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	var b strings.Builder
	for _, k := range keys {
		w, wok := want[k]
		g, gok := got[k]
		if wok != gok || !w.Time.Equal(g.Time) || w.withoutTime() != g.withoutTime() {
			fmt.Fprintf(&b, "%s:\n  -%+v (present: %v)\n  +%+v (present: %v)\n", k, w, wok, g, gok)
		}
	}
	return b.String()
}

func (s VolumeStats) withoutTime() VolumeStats { s.Time = time.Time{}; return s }
