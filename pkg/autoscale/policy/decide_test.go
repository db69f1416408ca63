package policy

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

var t0 = time.Date(2026, 11, 29, 7, 0, 0, 0, time.UTC)

// world is one PVC's observed state, built up by the options of a test case.
type world struct {
	in  Input
	ann map[string]string
}

type opt func(*world)

// fs sets the kubelet's stats: capacity and free bytes, inodes and free inodes.
func fs(capacity, free, inodes, inodesFree int64) opt {
	return func(w *world) {
		w.in.Stats = &VolumeStats{CapacityBytes: capacity, AvailableBytes: free, UsedBytes: capacity - free,
			Inodes: inodes, InodesFree: inodesFree, InodesUsed: inodes - inodesFree, Time: w.in.Now}
	}
}

// full is a 10Gi file system with 0.9Gi (9%) free and plenty of inodes.
var full = fs(10*gi, 966367642, 1000, 900)

// roomy is a 10Gi file system with 2Gi (20%) free and plenty of inodes.
var roomy = fs(10*gi, 2*gi, 1000, 900)

func sizes(spec, capacity string) opt {
	return func(w *world) {
		w.in.PVC.Spec.Resources.Requests[v1.ResourceStorage] = resource.MustParse(spec)
		w.in.PVC.Status.Capacity[v1.ResourceStorage] = resource.MustParse(capacity)
	}
}

func state(s v1.ClaimResourceStatus) opt {
	return func(w *world) {
		w.in.PVC.Status.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{v1.ResourceStorage: s}
	}
}

func ann(kv ...string) opt {
	return func(w *world) {
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "" {
				delete(w.ann, kv[i])
				continue
			}
			w.ann[kv[i]] = kv[i+1]
		}
	}
}

// last records a resize from -> to, ago before now, with the file system capacity before it.
func last(from, to string, reason Reason, ago time.Duration, fsBefore int64) opt {
	return func(w *world) {
		w.ann[AnnLastResize] = FormatRecord(Record{Time: w.in.Now.Add(-ago), From: resource.MustParse(from), To: resource.MustParse(to), Reason: reason, FSCapacity: fsBefore})
	}
}

func sibling(size string) opt {
	return func(w *world) { q := resource.MustParse(size); w.in.SiblingSize = &q }
}

func phase(p v1.PersistentVolumeClaimPhase) opt {
	return func(w *world) { w.in.PVC.Status.Phase = p }
}

// build makes the Input: a 10Gi PVC opted in with a 100Gi limit and the default settings
// (10% thresholds and step, 1Gi minimum step, 10m cooldown, 30m resize wait), then the options.
func build(t *testing.T, opts ...opt) Input {
	t.Helper()
	w := &world{in: Input{PVC: testPVC(nil), Now: t0}, ann: map[string]string{AnnAutoscale: "true", AnnLimit: "100Gi"}}
	for _, o := range opts {
		o(w)
	}
	w.in.PVC.Annotations = w.ann
	s, ok := Parse(nil, w.in.PVC, NewDefaults())
	if !ok {
		t.Fatalf("problems: %v", s.Problems)
	}
	w.in.Settings = s
	return w.in
}

func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   []opt
		action Action
		reason Reason
		to     string
		msg    string // a part of the message; the whole message when it starts with "="
	}{
		// Thresholds.
		{"free bytes below the threshold", []opt{full}, Resize, ReasonThresholdBytes, "11Gi",
			"=free 0.9Gi of 10Gi (9%) is below the threshold 10%: grow 10Gi -> 11Gi"},
		{"free bytes above the threshold", []opt{roomy}, Skip, SkipBelowThreshold, "",
			"=free 2Gi of 10Gi (20%) is not below the threshold 10%, free inodes 900 of 1000 (90%) are not below 10%"},
		{"free bytes exactly at the threshold", []opt{fs(10*gi, gi, 1000, 900)}, Skip, SkipBelowThreshold, "", "(10%) is not below"},
		{"quantity threshold crossed", []opt{sizes("100Gi", "100Gi"), ann(AnnThreshold, "5Gi", AnnLimit, "1Ti"), fs(100*gi, 4*gi, 0, 0)}, Resize, ReasonThresholdBytes, "110Gi",
			"=free 4Gi of 100Gi (4%) is below the threshold 5Gi: grow 100Gi -> 110Gi"},
		{"quantity threshold not crossed", []opt{sizes("100Gi", "100Gi"), ann(AnnThreshold, "5Gi"), fs(100*gi, 6*gi, 0, 0)}, Skip, SkipBelowThreshold, "", "is not below the threshold 5Gi"},
		{"free inodes below the threshold", []opt{fs(10*gi, 5*gi, 1000, 50)}, Resize, ReasonThresholdInodes, "11Gi",
			"=free inodes 50 of 1000 (5%) are below the threshold 10%: grow 10Gi -> 11Gi"},
		{"pvc-autoresizer's inodes threshold", []opt{ann(TopoLVMInodesThreshold, "3%"), fs(10*gi, 5*gi, 1000, 50)}, Skip, SkipBelowThreshold, "", "are not below 3%"},
		{"no inode count (btrfs)", []opt{fs(10*gi, 5*gi, 0, 0)}, Skip, SkipBelowThreshold, "", "=free 5Gi of 10Gi (50%) is not below the threshold 10%"},
		{"bytes and inodes: bytes named", []opt{fs(10*gi, gi/2, 1000, 50)}, Resize, ReasonThresholdBytes, "11Gi", "free 0.5Gi"},
		{"no stats", nil, Skip, SkipStatsMissing, "", "no stats"},
		{"stats without a capacity", []opt{fs(0, 0, 0, 0)}, Skip, SkipStatsMissing, "", "no stats"},
		{"free above capacity is clamped", []opt{fs(10*gi, 20*gi, 0, 0)}, Skip, SkipBelowThreshold, "", "free 10Gi of 10Gi (100%)"},
		{"negative free counts as none", []opt{fs(10*gi, -1, 0, 0)}, Resize, ReasonThresholdBytes, "11Gi", "free 0Gi of 10Gi (0%)"},

		// The step.
		{"minimum step", []opt{sizes("2Gi", "2Gi"), fs(2*gi, 0, 0, 0)}, Resize, ReasonThresholdBytes, "3Gi", "grow 2Gi -> 3Gi"},
		{"step rounded up to a whole MiB", []opt{sizes("10G", "10G"), ann(AnnMinIncrease, "1Mi"), fs(10e9, 0, 0, 0)}, Resize, ReasonThresholdBytes, "10491Mi", "grow 10G -> 10491Mi"},
		{"quantity step", []opt{ann(TopoLVMIncrease, "20Gi"), full}, Resize, ReasonThresholdBytes, "30Gi", "grow 10Gi -> 30Gi"},
		{"percent step of the capacity when the driver rounded up", []opt{sizes("10Gi", "20Gi"), full}, Resize, ReasonThresholdBytes, "22Gi", "grow 10Gi -> 22Gi"},
		{"our step over pvc-autoresizer's", []opt{ann(TopoLVMIncrease, "20Gi", AnnIncrease, "50%"), full}, Resize, ReasonThresholdBytes, "15Gi", "grow 10Gi -> 15Gi"},

		// The limit.
		{"clamped to the limit", []opt{ann(AnnLimit, "10752Mi"), full}, Resize, ReasonThresholdBytes, "10752Mi",
			"grow 10Gi -> 10752Mi (clamped to the limit, annotation csi-resizer.io/autoscale-limit)"},
		{"at the limit", []opt{ann(AnnLimit, "10Gi"), full}, Skip, SkipAtLimit, "",
			"=free 0.9Gi of 10Gi (9%) is below the threshold 10%, but the volume is at its limit 10Gi (annotation csi-resizer.io/autoscale-limit)"},
		{"limit below the size: never lowered", []opt{ann(AnnLimit, "5Gi"), full}, Skip, SkipAtLimit, "", "at its limit 5Gi"},
		{"at the limit and below the threshold", []opt{ann(AnnLimit, "10Gi"), roomy}, Skip, SkipBelowThreshold, "", "not below"},
		{"pvc-autoresizer's limit", []opt{ann(AnnLimit, "", TopoLVMStorageLimit, "10Gi"), full}, Skip, SkipAtLimit, "", "at its limit 10Gi (annotation resize.topolvm.io/storage_limit)"},

		// The cooldown.
		{"in the cooldown", []opt{sizes("11Gi", "11Gi"), last("10Gi", "11Gi", ReasonThresholdBytes, 5*time.Minute, 9*gi), full}, Skip, SkipCooldown, "",
			"but the last resize was at 2026-11-29T06:55:00Z: cooldown 10m0s, next resize from 2026-11-29T07:05:00Z"},
		{"after the cooldown", []opt{sizes("11Gi", "11Gi"), last("10Gi", "11Gi", ReasonThresholdBytes, 10*time.Minute, 9*gi), full}, Resize, ReasonThresholdBytes, "12391Mi", "grow 11Gi -> 12391Mi"},
		{"no cooldown", []opt{sizes("11Gi", "11Gi"), ann(AnnCooldown, "0s"), last("10Gi", "11Gi", ReasonThresholdBytes, 0, 9*gi), full}, Resize, ReasonThresholdBytes, "12391Mi", ""},
		{"record in the future (clock skew)", []opt{sizes("11Gi", "11Gi"), last("10Gi", "11Gi", ReasonThresholdBytes, -time.Hour, 9*gi), full}, Skip, SkipCooldown, "", ""},
		{"in the cooldown and below the threshold", []opt{sizes("11Gi", "11Gi"), last("10Gi", "11Gi", ReasonThresholdBytes, time.Minute, 9*gi), roomy}, Skip, SkipBelowThreshold, "", ""},

		// One resize at a time: the API.
		{"request above the capacity", []opt{sizes("11Gi", "10Gi"), full}, Skip, SkipResizing, "", "=the resize to 11Gi is not done (capacity 10Gi): one resize at a time"},
		{"controller resize in progress", []opt{state(v1.PersistentVolumeClaimControllerResizeInProgress), sizes("11Gi", "10Gi"), full}, Skip, SkipResizing, "", "(capacity 10Gi, ControllerResizeInProgress)"},
		{"node resize pending", []opt{state(v1.PersistentVolumeClaimNodeResizePending), sizes("11Gi", "10Gi"), full}, Skip, SkipResizing, "", "NodeResizePending"},
		{"a state with the request reached", []opt{state(v1.PersistentVolumeClaimNodeResizeInProgress), full}, Skip, SkipResizing, "", "NodeResizeInProgress"},
		{"our resize not done within the wait", []opt{sizes("11Gi", "10Gi"), last("10Gi", "11Gi", ReasonThresholdBytes, 29*time.Minute, 10*gi), full}, Skip, SkipResizing, "", ""},
		{"our resize not done after the wait", []opt{sizes("11Gi", "10Gi"), last("10Gi", "11Gi", ReasonThresholdBytes, 30*time.Minute, 10*gi), full}, Skip, SkipResizeWaitExpired, "",
			"=the resize to 11Gi is not done (capacity 10Gi), not within 30m0s of the autoscaler asking for it at 2026-11-29T06:30:00Z: check the PVC's conditions and events and the resizer; remove annotation csi-resizer.io/autoscale-last-resize to let the autoscaler go on"},
		{"someone else's resize is never ours to expire", []opt{sizes("12Gi", "10Gi"), last("10Gi", "11Gi", ReasonThresholdBytes, time.Hour, 10*gi), full}, Skip, SkipResizing, "", ""},

		// One resize at a time: the file system.
		{"file system not grown yet", []opt{sizes("11Gi", "11Gi"), last("10Gi", "11Gi", ReasonThresholdBytes, 20*time.Minute, 10*gi), full}, Skip, SkipResizing, "",
			"=the kubelet reports a file system of 10Gi, as before the resize 10Gi -> 11Gi: waiting for it to grow"},
		{"file system not grown after the wait", []opt{sizes("11Gi", "11Gi"), last("10Gi", "11Gi", ReasonThresholdBytes, time.Hour, 10*gi), full}, Skip, SkipResizeWaitExpired, "",
			"as before the resize 10Gi -> 11Gi at 2026-11-29T06:00:00Z, and it has not grown within 30m0s: check that a pod mounts the volume"},
		{"file system grown", []opt{sizes("11Gi", "11Gi"), last("10Gi", "11Gi", ReasonThresholdBytes, time.Hour, 9*gi), roomy}, Skip, SkipBelowThreshold, "", ""},
		{"file system unknown after our resize", []opt{sizes("11Gi", "11Gi"), last("10Gi", "11Gi", ReasonThresholdBytes, time.Hour, 10*gi)}, Skip, SkipStatsMissing, "",
			"cannot tell whether its file system grew after the resize 10Gi -> 11Gi"},

		// Infeasible sizes.
		{"our size refused: recover", []opt{sizes("12Gi", "11Gi"), state(v1.PersistentVolumeClaimControllerResizeInfeasible), last("11Gi", "12Gi", ReasonThresholdBytes, time.Hour, 10*gi), full},
			Recover, ReasonRecover, "11265Mi",
			"=the driver refused 12Gi (ControllerResizeInfeasible): lower the request 12Gi -> 11265Mi, the smallest whole MiB above the capacity 11Gi, and hold the volume there (remove annotation csi-resizer.io/autoscale-last-resize to let it grow again)"},
		{"someone else's size refused", []opt{sizes("50Gi", "11Gi"), state(v1.PersistentVolumeClaimControllerResizeInfeasible), last("11Gi", "12Gi", ReasonThresholdBytes, time.Hour, 10*gi), full},
			Skip, SkipInfeasible, "", "a request the autoscaler did not write: left to whoever set it (lower it to a size above the capacity 11Gi to recover)"},
		{"refused without a record", []opt{sizes("12Gi", "11Gi"), state(v1.PersistentVolumeClaimControllerResizeInfeasible), full}, Skip, SkipInfeasible, "", "did not write"},
		{"recovery size refused too", []opt{sizes("11265Mi", "11Gi"), state(v1.PersistentVolumeClaimControllerResizeInfeasible), last("12Gi", "11265Mi", ReasonRecover, time.Minute, 0), full},
			Skip, SkipInfeasible, "", "the driver refused 11265Mi too, the request the autoscaler lowered to after it refused 12Gi"},
		{"no whole MiB left to lower to", []opt{sizes("11265Mi", "11Gi"), state(v1.PersistentVolumeClaimControllerResizeInfeasible), last("11Gi", "11265Mi", ReasonThresholdBytes, time.Hour, 10*gi), full},
			Skip, SkipInfeasible, "", "no whole MiB between the capacity 11Gi and it"},
		{"node infeasible", []opt{state(v1.PersistentVolumeClaimNodeResizeInfeasible), sizes("12Gi", "11Gi"), last("11Gi", "12Gi", ReasonThresholdBytes, time.Hour, 10*gi), full},
			Skip, SkipInfeasible, "", "NodeResizeInfeasible"},
		{"recovering", []opt{sizes("11265Mi", "11Gi"), state(v1.PersistentVolumeClaimControllerResizeInProgress), last("12Gi", "11265Mi", ReasonRecover, time.Minute, 0), full},
			Skip, SkipResizing, "", ""},
		{"recovered: held at its limit", []opt{sizes("11265Mi", "11265Mi"), last("12Gi", "11265Mi", ReasonRecover, time.Hour, 0), full}, Skip, SkipAtLimit, "",
			"but the volume is at its limit 11265Mi (held since the driver refused 12Gi at 2026-11-29T06:00:00Z; remove annotation csi-resizer.io/autoscale-last-resize to let it grow again)"},
		{"recovered: below the threshold", []opt{sizes("11265Mi", "11265Mi"), last("12Gi", "11265Mi", ReasonRecover, time.Hour, 0), roomy}, Skip, SkipBelowThreshold, "", ""},

		// Siblings.
		{"new replica raised to its siblings", []opt{sibling("20Gi")}, Resize, ReasonSiblings, "20Gi",
			"=a new replica: its siblings were grown to 20Gi, above its 10Gi: grow 10Gi -> 20Gi"},
		{"siblings clamped to the limit", []opt{sibling("200Gi")}, Resize, ReasonSiblings, "100Gi", "(clamped to the limit"},
		{"siblings off", []opt{ann(AnnSiblings, "false"), sibling("20Gi")}, Skip, SkipStatsMissing, "", ""},
		{"siblings not larger", []opt{sibling("10Gi"), roomy}, Skip, SkipBelowThreshold, "", ""},
		{"siblings larger than the step", []opt{sibling("20Gi"), full}, Resize, ReasonSiblings, "20Gi", ""},
		{"step larger than the siblings", []opt{sibling("10752Mi"), full}, Resize, ReasonThresholdBytes, "11Gi", ""},
		// A replica the autoscaler resized before is not new: only its own usage grows it.
		{"resized before: siblings do not count", []opt{sibling("20Gi"), sizes("11Gi", "11Gi"), last("10Gi", "11Gi", ReasonThresholdBytes, 2*time.Hour, 9*gi), fs(11*gi, 2*gi, 1000, 900)}, Skip, SkipBelowThreshold, "", ""},
		{"resized before, full: its own step", []opt{sibling("20Gi"), sizes("11Gi", "11Gi"), last("10Gi", "11Gi", ReasonThresholdBytes, 2*time.Hour, 9*gi), fs(11*gi, gi/2, 1000, 900)}, Resize, ReasonThresholdBytes, "12391Mi", ""},
		{"siblings while resizing", []opt{sibling("20Gi"), sizes("11Gi", "10Gi")}, Skip, SkipResizing, "", ""},
		{"siblings at the limit", []opt{sibling("20Gi"), ann(AnnLimit, "10Gi")}, Skip, SkipAtLimit, "", "siblings"},

		// The PVC.
		{"not bound", []opt{phase(v1.ClaimPending), sibling("20Gi")}, Skip, SkipNotBound, "", "=the PVC is Pending, not Bound: the apiserver takes a new request only on a bound claim"},
		{"not opted in", []opt{ann(AnnAutoscale, "false"), full}, Skip, SkipNotEnabled, "", "=not autoscaled: the PVC opts out (csi-resizer.io/autoscale=false)"},
		{"record edited by hand", []opt{ann(AnnLastResize, "junk"), full}, Skip, SkipBadSettings, "", "left alone: PVC ns/x: annotation csi-resizer.io/autoscale-last-resize=\"junk\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := build(t, tc.opts...)
			d := Decide(in)
			checkDecision(t, in, d)
			if d.Action != tc.action || d.Reason != tc.reason {
				t.Errorf("%s %s, want %s %s: %s", d.Action, d.Reason, tc.action, tc.reason, d.Message)
			}
			if tc.to != "" && d.To.Cmp(resource.MustParse(tc.to)) != 0 {
				t.Errorf("to %s, want %s: %s", d.To.String(), tc.to, d.Message)
			}
			if want, whole := strings.CutPrefix(tc.msg, "="); whole && d.Message != want || !whole && !strings.Contains(d.Message, tc.msg) {
				t.Errorf("message\n%s\nwant\n%s", d.Message, tc.msg)
			}
		})
	}
}

// checkDecision checks what holds for every decision: a message, the request as From, and for
// a resize or a recovery a record that reads back as this change.
func checkDecision(t *testing.T, in Input, d Decision) {
	t.Helper()
	spec := in.PVC.Spec.Resources.Requests[v1.ResourceStorage]
	if d.Message == "" || d.From.Cmp(spec) != 0 {
		t.Errorf("message %q, from %s (request %s)", d.Message, d.From.String(), spec.String())
	}
	if d.Action == Skip {
		if d.Record != "" || !d.To.IsZero() {
			t.Errorf("skip with record %q, to %s", d.Record, d.To.String())
		}
		return
	}
	r, p := ParseRecord(testPVC(map[string]string{AnnLastResize: d.Record}))
	if p != nil {
		t.Fatalf("record %q: %v", d.Record, p)
	}
	if !r.Time.Equal(in.Now.Truncate(time.Second)) || r.From.Cmp(spec) != 0 || r.To.Cmp(d.To) != 0 || r.Reason != d.Reason {
		t.Errorf("record %+v for %s %s -> %s", r, d.Reason, spec.String(), d.To.String())
	}
	// Only a sibling's request or the limit may be other than a whole MiB.
	if d.To.Value()%MiB != 0 && d.Reason != ReasonSiblings && d.To.Value() != in.Settings.Limit {
		t.Errorf("to %s is not a whole MiB", d.To.String())
	}
}

// TestResizeRecordsTheFileSystem: the record holds the file system capacity the kubelet
// reported, which the next round compares with.
func TestResizeRecordsTheFileSystem(t *testing.T) {
	in := build(t, fs(10*gi-100<<20, 0, 0, 0))
	d := Decide(in)
	r, p := ParseRecord(testPVC(map[string]string{AnnLastResize: d.Record}))
	if d.Action != Resize || p != nil || r.FSCapacity != 10*gi-100<<20 {
		t.Fatalf("%+v, record %+v %v", d, r, p)
	}
	// The next round, with the request written and the resize done by the API, but the
	// kubelet still reporting the old file system: wait.
	next := build(t, sizes("11Gi", "11Gi"), ann(AnnLastResize, d.Record), fs(10*gi-100<<20, 0, 0, 0))
	if d := Decide(next); d.Reason != SkipResizing {
		t.Errorf("same file system: %s %s", d.Reason, d.Message)
	}
	next = build(t, sizes("11Gi", "11Gi"), ann(AnnLastResize, d.Record), fs(11*gi-100<<20, 0, 0, 0))
	if d := Decide(next); d.Reason != SkipCooldown {
		t.Errorf("grown file system: %s %s", d.Reason, d.Message)
	}
}
