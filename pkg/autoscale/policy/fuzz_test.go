package policy

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fuzzStates are the values the state byte selects: absent, the API's five, and a string no
// component writes.
var fuzzStates = []v1.ClaimResourceStatus{
	"",
	v1.PersistentVolumeClaimControllerResizeInProgress,
	v1.PersistentVolumeClaimControllerResizeInfeasible,
	v1.PersistentVolumeClaimNodeResizePending,
	v1.PersistentVolumeClaimNodeResizeInProgress,
	v1.PersistentVolumeClaimNodeResizeInfeasible,
	"Garbage!",
}

var fuzzReasons = []Reason{ReasonThresholdBytes, ReasonThresholdInodes, ReasonSiblings, ReasonRecover}

func nonNeg(n int64) int64 {
	if n < 0 {
		return -(n + 1)
	}
	return n
}

// fuzzCase is one observed world: the sizes are bytes, the selectors pick settings and states.
type fuzzCase struct {
	spec, capacity                 int64
	stateSel                       byte
	bound                          bool
	fsCap, free, inodes, inodesFre int64
	hasStats                       bool
	hasRecord                      bool
	recSel                         byte
	recFrom, recTo, recFS          int64
	recAgo                         int64 // seconds before now
	sibling                        int64 // <= 0: none
	limit, minStep                 int64
	thrSel, incSel                 uint16
	cooldown                       int64 // seconds
	siblings                       bool
}

// settings are valid settings, as Parse would return them, from the fuzz values.
func (c fuzzCase) settings() Settings {
	s := Settings{Object: "ns/x", Enabled: true, Limit: 1 + nonNeg(c.limit)%(math.MaxInt64-1), LimitFrom: "annotation " + AnnLimit,
		MinIncrease: nonNeg(c.minStep), Cooldown: time.Duration(nonNeg(c.cooldown)%(1<<32)) * time.Second,
		ResizeWait: 30 * time.Minute, Siblings: c.siblings, InodesThreshold: Percent(1 + int64(c.thrSel)%9999)}
	if c.thrSel&1 == 0 {
		s.Threshold = PercentAmount(Percent(1 + int64(c.thrSel)%9999))
	} else {
		s.Threshold = BytesAmount(1 + int64(c.thrSel)<<20)
	}
	if c.incSel&1 == 0 {
		s.Increase = PercentAmount(Percent(1 + int64(c.incSel)%int64(maxIncreasePercent)))
	} else {
		s.Increase = BytesAmount(1 + int64(c.incSel)<<20)
	}
	return s
}

func (c fuzzCase) input(now time.Time) Input {
	pvc := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "x", Annotations: map[string]string{}},
		Spec:       v1.PersistentVolumeClaimSpec{Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: quantity(nonNeg(c.spec))}}},
		Status:     v1.PersistentVolumeClaimStatus{Phase: v1.ClaimPending, Capacity: v1.ResourceList{v1.ResourceStorage: quantity(nonNeg(c.capacity))}},
	}
	if c.bound {
		pvc.Status.Phase = v1.ClaimBound
	}
	if st := fuzzStates[int(c.stateSel)%len(fuzzStates)]; st != "" {
		pvc.Status.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{v1.ResourceStorage: st}
	}
	if c.hasRecord {
		r := Record{Time: now.Add(-time.Duration(c.recAgo%(1<<33)) * time.Second), From: quantity(nonNeg(c.recFrom)),
			To: quantity(1 + nonNeg(c.recTo)%(math.MaxInt64-1)), Reason: fuzzReasons[int(c.recSel)%len(fuzzReasons)], FSCapacity: nonNeg(c.recFS)}
		if c.recSel&0x80 != 0 {
			r.To = quantity(max(nonNeg(c.spec), 1)) // the record of the request the PVC has
		}
		pvc.Annotations[AnnLastResize] = FormatRecord(r)
	}
	in := Input{PVC: pvc, Settings: c.settings(), Now: now}
	if c.hasStats {
		in.Stats = &VolumeStats{CapacityBytes: c.fsCap, AvailableBytes: c.free, Inodes: c.inodes, InodesFree: c.inodesFre, Time: now}
	}
	if c.sibling > 0 {
		q := quantity(c.sibling)
		in.SiblingSize = &q
	}
	return in
}

// FuzzDecide checks the invariants of docs/autoscaler.md over arbitrary observed states:
//   - a request is never lowered except by Recover, which only follows a refused size the
//     autoscaler wrote, to a size above the capacity;
//   - a resize never passes the limit (nor the size a recovery holds the volume at), and always
//     grows the volume past both its request and its capacity;
//   - no resize in the cooldown, while a resize is not done (API or file system), on an
//     unbound claim;
//   - a resize only when a threshold is crossed or a sibling is larger, as its reason says;
//   - the decision right after applying a resize or a recovery, with nothing else changed, is
//     never another change (no storm, no retry loop).
func FuzzDecide(f *testing.F) {
	g := gi
	// spec, capacity, state, bound, fsCap, free, inodes, inodesFree, hasStats,
	// hasRecord, recSel, recFrom, recTo, recFS, recAgo, sibling, limit, minStep, thrSel, incSel, cooldown, siblings
	f.Add(10*g, 10*g, byte(0), true, 10*g, g/2, int64(1000), int64(900), true, false, byte(0), int64(0), int64(0), int64(0), int64(0), int64(0), 100*g, g, uint16(1000), uint16(1000), int64(600), true)
	f.Add(10*g, 10*g, byte(0), true, 10*g, 5*g, int64(1000), int64(10), true, false, byte(0), int64(0), int64(0), int64(0), int64(0), int64(0), 100*g, g, uint16(1000), uint16(1000), int64(600), true)
	f.Add(11*g, 11*g, byte(0), true, 10*g, 0*g, int64(0), int64(0), true, true, byte(0x80), 10*g, 11*g, 10*g, int64(60), int64(0), 100*g, g, uint16(1000), uint16(1000), int64(600), true)
	f.Add(12*g, 11*g, byte(2), true, 11*g, 0*g, int64(0), int64(0), true, true, byte(0x80), 11*g, 12*g, 10*g, int64(3600), int64(0), 100*g, g, uint16(1000), uint16(1000), int64(600), true)
	f.Add(10*g, 10*g, byte(0), true, 0*g, 0*g, int64(0), int64(0), false, false, byte(0), int64(0), int64(0), int64(0), int64(0), 20*g, 15*g, g, uint16(1000), uint16(1000), int64(600), true)
	f.Add(10*g, 10*g, byte(0), true, 10*g, 0*g, int64(0), int64(0), true, false, byte(0), int64(0), int64(0), int64(0), int64(0), int64(0), 10*g+1, g, uint16(1000), uint16(1001), int64(0), false)
	f.Add(int64(math.MaxInt64), int64(math.MaxInt64), byte(2), true, int64(math.MaxInt64), int64(0), int64(0), int64(0), true, true, byte(0x80), int64(0), int64(0), int64(0), int64(0), int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64), uint16(0), uint16(0), int64(0), true)
	now := time.Date(2026, 11, 29, 7, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, spec, capacity int64, stateSel byte, bound bool, fsCap, free, inodes, inodesFree int64, hasStats bool,
		hasRecord bool, recSel byte, recFrom, recTo, recFS, recAgo, sibling, limit, minStep int64, thrSel, incSel uint16, cooldown int64, siblings bool) {
		c := fuzzCase{spec, capacity, stateSel, bound, fsCap, free, inodes, inodesFree, hasStats, hasRecord, recSel, recFrom, recTo, recFS, recAgo,
			sibling, limit, minStep, thrSel, incSel, cooldown, siblings}
		in := c.input(now)
		d := Decide(in)
		checkInvariants(t, in, d)
		switch d.Action {
		case Resize:
			checkAfterResize(t, in, d)
		case Recover:
			checkAfterRecover(t, in, d)
		}
	})
}

func checkInvariants(t *testing.T, in Input, d Decision) {
	t.Helper()
	v := observe(in.PVC)
	last, _ := ParseRecord(in.PVC)
	if d.Message == "" || d.From.Cmp(v.specQ) != 0 {
		t.Fatalf("%s %s: message %q, from %s, request %s", d.Action, d.Reason, d.Message, d.From.String(), v.request())
	}
	switch d.Action {
	case Skip:
		if d.Record != "" || !d.To.IsZero() {
			t.Fatalf("skip %s with a record or a size: %+v", d.Reason, d)
		}
		return
	case Recover:
		checkRecover(t, v, last, d)
		return
	case Resize:
	default:
		t.Fatalf("action %q", d.Action)
	}
	to := bytesOf(d.To)
	if r, p := ParseRecord(&v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnLastResize: d.Record}}}); p != nil || bytesOf(r.To) != to || r.Reason != d.Reason {
		t.Fatalf("record %q does not read back as the resize to %d (%v)", d.Record, to, p)
	}
	if to <= v.spec || to <= v.capacity {
		t.Fatalf("resize to %d does not grow the request %d and the capacity %d: %s", to, v.spec, v.capacity, d.Message)
	}
	limit, _ := effectiveLimit(in.Settings, last)
	if to > in.Settings.Limit || to > limit {
		t.Fatalf("resize to %d past the limit %d (effective %d): %s", to, in.Settings.Limit, limit, d.Message)
	}
	if v.phase != v1.ClaimBound || v.state != "" || v.spec > v.capacity {
		t.Fatalf("resize while %s, state %q, request %d above capacity %d: %s", v.phase, v.state, v.spec, v.capacity, d.Message)
	}
	if last != nil && (in.Now.Before(last.Time.Add(in.Settings.Cooldown)) || last.Reason != ReasonRecover && !grown(in.Stats, last)) {
		t.Fatalf("resize in the cooldown or before the file system grew: record %+v, stats %+v: %s", last, in.Stats, d.Message)
	}
	checkResizeReason(t, in, v, d)
}

func checkResizeReason(t *testing.T, in Input, v volume, d Decision) {
	t.Helper()
	s, st := in.Settings, in.Stats
	switch d.Reason {
	case ReasonThresholdBytes:
		if !usable(st) || min(max(st.AvailableBytes, 0), st.CapacityBytes) >= s.Threshold.Of(st.CapacityBytes, false) {
			t.Fatalf("threshold-bytes without crossing it: %+v, threshold %s", st, s.Threshold)
		}
	case ReasonThresholdInodes:
		if !usable(st) || st.Inodes <= 0 || min(max(st.InodesFree, 0), st.Inodes) >= s.InodesThreshold.of(st.Inodes, false) {
			t.Fatalf("threshold-inodes without crossing it: %+v, threshold %s", st, s.InodesThreshold)
		}
	case ReasonSiblings:
		if !s.Siblings || in.SiblingSize == nil || bytesOf(d.To) > bytesOf(*in.SiblingSize) {
			t.Fatalf("siblings resize to %s, siblings on %v, largest %v", d.To.String(), s.Siblings, in.SiblingSize)
		}
		if _, ok := in.PVC.Annotations[AnnLastResize]; ok {
			t.Fatalf("siblings resize of a PVC the autoscaler resized before (not a new replica): %s", in.PVC.Annotations[AnnLastResize])
		}
	default:
		t.Fatalf("resize for %q", d.Reason)
	}
}

func checkRecover(t *testing.T, v volume, last *Record, d Decision) {
	t.Helper()
	to := bytesOf(d.To)
	if v.state != v1.PersistentVolumeClaimControllerResizeInfeasible || last == nil || last.Reason == ReasonRecover || bytesOf(last.To) != v.spec {
		t.Fatalf("recover without a refused request of the autoscaler's: state %q, record %+v, request %d", v.state, last, v.spec)
	}
	if to >= v.spec || to <= v.capacity {
		t.Fatalf("recover to %d: not between the capacity %d and the request %d", to, v.capacity, v.spec)
	}
}

// checkAfterResize applies the resize and decides again with nothing else changed: first with
// the request not reached, then reached by the API but not by the file system.
func checkAfterResize(t *testing.T, in Input, d Decision) {
	t.Helper()
	next := in
	next.PVC = in.PVC.DeepCopy()
	next.PVC.Spec.Resources.Requests[v1.ResourceStorage] = d.To
	next.PVC.Annotations[AnnLastResize] = d.Record
	if d2 := Decide(next); d2.Action != Skip || d2.Reason != SkipResizing {
		t.Fatalf("right after the resize to %s: %s %s: %s", d.To.String(), d2.Action, d2.Reason, d2.Message)
	}
	next.PVC.Status.Capacity[v1.ResourceStorage] = d.To
	next.Now = in.Now.Add(time.Minute)
	if d2 := Decide(next); d2.Action != Skip {
		t.Fatalf("after the resize to %s, the file system not grown: %s %s: %s", d.To.String(), d2.Action, d2.Reason, d2.Message)
	}
}

// checkAfterRecover applies the recovery: while the driver's verdict stays, and once the volume
// is at the lowered size, there is no other change, whatever the stats say.
func checkAfterRecover(t *testing.T, in Input, d Decision) {
	t.Helper()
	next := in
	next.PVC = in.PVC.DeepCopy()
	next.PVC.Spec.Resources.Requests[v1.ResourceStorage] = d.To
	next.PVC.Annotations[AnnLastResize] = d.Record
	if d2 := Decide(next); d2.Action != Skip {
		t.Fatalf("right after the recovery to %s: %s %s: %s", d.To.String(), d2.Action, d2.Reason, d2.Message)
	}
	next.PVC.Status.AllocatedResourceStatuses = nil
	next.PVC.Status.Capacity[v1.ResourceStorage] = d.To
	next.Now = in.Now.Add(1000 * time.Hour)
	next.Stats = &VolumeStats{CapacityBytes: bytesOf(d.To), AvailableBytes: 0, Inodes: 10, InodesFree: 0}
	if d2 := Decide(next); d2.Action != Skip || d2.Reason != SkipAtLimit {
		t.Fatalf("recovered to %s, full: %s %s: %s", d.To.String(), d2.Action, d2.Reason, d2.Message)
	}
}

// FuzzParse: Parse, and Decide on its result, never panic on any annotation values, and a PVC
// is either fine or has problems that each name the PVC and the annotation.
func FuzzParse(f *testing.F) {
	f.Add("true", "10%", "5%", "10Gi", "1Gi", "100Gi", "10m", "true", "true", "20%", "10%", "20Gi", "100Gi", "app", `{"time":"2026-11-29T07:00:00Z","from":"1Gi","to":"2Gi","reason":"siblings"}`)
	f.Add("yes", "ten", "5Gi", "0", "-1", "0", "-1h", "no", "True", "x", "y", "z", "0", "!", "junk")
	f.Add("", "", "", "", "", "", "", "", "", "", "", "", "", "", "")
	f.Add("false", "99.99%", "0.01%", "1000%", "1e3", "8Ei", "0s", "false", "false", "1E", "100%", "1000.00%", "9223372036854775808", "a/b", "{}")
	f.Fuzz(func(t *testing.T, on, thr, ithr, inc, minInc, limit, cooldown, sib, theirOn, theirThr, theirIthr, theirInc, theirLimit, groupBy, rec string) {
		pvcAnn := map[string]string{AnnAutoscale: on, AnnThreshold: thr, AnnInodesThreshold: ithr, AnnIncrease: inc, AnnMinIncrease: minInc,
			AnnLimit: limit, AnnCooldown: cooldown, AnnSiblings: sib, TopoLVMGroupBy: groupBy, AnnLastResize: rec}
		// pvc-autoresizer's keys are read only where ours are absent: drop ours when empty.
		for k, v := range pvcAnn {
			if v == "" && k != AnnLastResize {
				delete(pvcAnn, k)
			}
		}
		for k, v := range map[string]string{TopoLVMEnabled: theirOn, TopoLVMThreshold: theirThr, TopoLVMInodesThreshold: theirIthr, TopoLVMIncrease: theirInc, TopoLVMStorageLimit: theirLimit} {
			pvcAnn[k] = v
		}
		yes := true
		sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "fast", Annotations: map[string]string{AnnAutoscale: on, TopoLVMEnabled: theirOn, AnnLimit: theirLimit}}, AllowVolumeExpansion: &yes}
		pvc := testPVC(pvcAnn)
		s, ok := Parse(sc, pvc, NewDefaults())
		if ok != (len(s.Problems) == 0) {
			t.Fatalf("ok=%v with problems %v", ok, s.Problems)
		}
		for _, p := range s.Problems {
			if e := p.Error(); !strings.HasPrefix(e, "PVC ns/x: ") || !strings.Contains(e, p.Annotation) || p.Fix == "" {
				t.Fatalf("problem %q", e)
			}
		}
		if ok && s.Enabled && (s.Limit <= 0 || !thresholdOK(s.Threshold) || !percentOK(s.InodesThreshold) || !increaseOK(s.Increase) || s.Cooldown < 0) {
			t.Fatalf("enabled with invalid settings %+v", s)
		}
		q := resource.MustParse("1Gi")
		d := Decide(Input{PVC: pvc, Settings: s, Stats: &VolumeStats{CapacityBytes: gi, AvailableBytes: 1}, SiblingSize: &q, Now: t0})
		checkInvariants(t, Input{PVC: pvc, Settings: s, Stats: &VolumeStats{CapacityBytes: gi, AvailableBytes: 1}, SiblingSize: &q, Now: t0}, d)
		if !ok && d.Reason != SkipBadSettings {
			t.Fatalf("bad settings decided %s %s", d.Action, d.Reason)
		}
	})
}

// TestInvariantsOnRealisticStates checks FuzzDecide's invariants on states built from sizes
// that meet (a request at the capacity, a record of the current request, a file system just
// below its volume), which random int64s seldom produce, and that every reason is reached so
// no rule goes unchecked. The seed is fixed: the same states every run.
func TestInvariantsOnRealisticStates(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	pick := func(xs ...int64) int64 { return xs[r.IntN(len(xs))] }
	g := gi
	now := time.Date(2026, 11, 29, 7, 0, 0, 0, time.UTC)
	seen := map[Reason]int{}
	for range 20000 {
		c := fuzzCase{spec: pick(10*g, 11*g, 12*g), capacity: pick(10*g, 11*g, 12*g), stateSel: byte(r.IntN(len(fuzzStates))), bound: r.IntN(5) > 0,
			fsCap: pick(0, 9*g, 10*g, 11*g), free: pick(0, g/2, 2*g, 5*g), inodes: pick(0, 1000), inodesFre: pick(10, 500), hasStats: r.IntN(4) > 0,
			hasRecord: r.IntN(2) == 0, recSel: byte(r.IntN(256)), recFrom: pick(10*g, 11*g), recTo: pick(11*g, 12*g), recFS: pick(0, 9*g, 10*g),
			recAgo: pick(-60, 60, 700, 3600), sibling: pick(0, 0, 20*g), limit: pick(10*g, 15*g, 100*g), minStep: pick(0, g),
			thrSel: uint16(r.IntN(3000)), incSel: uint16(r.IntN(3000)), cooldown: pick(0, 600), siblings: r.IntN(2) == 0}
		in := c.input(now)
		d := Decide(in)
		checkInvariants(t, in, d)
		switch d.Action {
		case Resize:
			checkAfterResize(t, in, d)
		case Recover:
			checkAfterRecover(t, in, d)
		}
		seen[d.Reason]++
	}
	for _, want := range []Reason{ReasonThresholdBytes, ReasonThresholdInodes, ReasonSiblings, ReasonRecover, SkipNotBound, SkipBelowThreshold,
		SkipCooldown, SkipAtLimit, SkipResizing, SkipResizeWaitExpired, SkipInfeasible, SkipStatsMissing} {
		if seen[want] == 0 {
			t.Errorf("no state reached %s: %v", want, seen)
		}
	}
}
