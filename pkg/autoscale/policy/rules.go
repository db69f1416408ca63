package policy

import (
	"fmt"
	"math"
	"time"

	v1 "k8s.io/api/core/v1"
)

// decideInfeasible handles a size the resizer gave up on. Only a request the autoscaler wrote
// and the driver refused is recovered (KEP-1790), once: lowered to the smallest whole MiB above
// the capacity, the last size that was feasible (the apiserver refuses a request at or below
// the capacity), and the record's reason "recover" then holds the PVC at its limit.
func decideInfeasible(in Input, v volume, last *Record) (Decision, bool) {
	switch v.state {
	case v1.PersistentVolumeClaimNodeResizeInfeasible:
		return v.skip(SkipInfeasible, "the node could not grow the file system to %s (NodeResizeInfeasible): "+
			"the resizer hands it back to the node and a lower request would not undo what the backend grew; check the kubelet's log on the node",
			v.request()), true
	case v1.PersistentVolumeClaimControllerResizeInfeasible:
	default:
		return Decision{}, false
	}
	switch {
	case last == nil || bytesOf(last.To) != v.spec:
		return v.skip(SkipInfeasible, "the driver refused %s (ControllerResizeInfeasible), a request the autoscaler did not write: "+
			"left to whoever set it (lower it to a size above the capacity %s to recover)", v.request(), v.capacityText()), true
	case last.Reason == ReasonRecover:
		return v.skip(SkipInfeasible, "the driver refused %s too, the request the autoscaler lowered to after it refused %s: "+
			"set a request the driver accepts by hand", v.request(), last.From.String()), true
	}
	to := roundUpMiB(min(v.capacity, math.MaxInt64-1) + 1)
	if to <= v.capacity || to >= v.spec {
		return v.skip(SkipInfeasible, "the driver refused %s (ControllerResizeInfeasible) and no whole MiB between the capacity %s and it is left to lower the request to: "+
			"set a request the driver accepts by hand", v.request(), v.capacityText()), true
	}
	r := Record{Time: in.Now, From: v.specQ.DeepCopy(), To: quantity(to), Reason: ReasonRecover}
	return Decision{Action: Recover, Reason: ReasonRecover, From: v.specQ.DeepCopy(), To: quantity(to), Record: FormatRecord(r),
		Message: fmt.Sprintf("the driver refused %s (ControllerResizeInfeasible): lower the request %s -> %s, the smallest whole MiB above the capacity %s, "+
			"and hold the volume there (remove annotation %s to let it grow again)", v.request(), v.request(), qstr(to), v.capacityText(), AnnLastResize),
	}, true
}

// decideInFlight enforces one resize at a time: while the API shows a resize not done, and
// after the autoscaler's own resize until the file system the kubelet reports has grown. A
// resize the autoscaler wrote that is not done after ResizeWait is reported as
// resize-wait-expired, and the volume is left alone until it is done or a person removes the
// record: growing again on numbers that do not reflect the last step would be a guess.
func decideInFlight(in Input, v volume, last *Record) (Decision, bool) {
	ours := last != nil && last.Reason != ReasonRecover && bytesOf(last.To) == v.spec
	if v.state != "" || v.spec > v.capacity {
		what := fmt.Sprintf("the resize to %s is not done (capacity %s%s)", v.request(), v.capacityText(), stateText(v.state))
		if ours && waitOver(in, last) {
			return v.skip(SkipResizeWaitExpired, "%s, not within %s of the autoscaler asking for it at %s: check the PVC's conditions and events and the resizer; "+
				"remove annotation %s to let the autoscaler go on", what, in.Settings.ResizeWait, stamp(last.Time), AnnLastResize), true
		}
		return v.skip(SkipResizing, "%s: one resize at a time", what), true
	}
	if last == nil || last.Reason == ReasonRecover || grown(in.Stats, last) {
		return Decision{}, false
	}
	if !usable(in.Stats) {
		return v.skip(SkipStatsMissing, "no stats from the kubelet for the volume: cannot tell whether its file system grew after the resize %s -> %s",
			last.From.String(), last.To.String()), true
	}
	c := in.Stats.CapacityBytes
	what := fmt.Sprintf("the kubelet reports a file system of %s, as before the resize %s -> %s", human(c, c), last.From.String(), last.To.String())
	if waitOver(in, last) {
		return v.skip(SkipResizeWaitExpired, "%s at %s, and it has not grown within %s: check that a pod mounts the volume and the kubelet's log on its node; "+
			"remove annotation %s to let the autoscaler go on", what, stamp(last.Time), in.Settings.ResizeWait, AnnLastResize), true
	}
	return v.skip(SkipResizing, "%s: waiting for it to grow", what), true
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func stateText(s v1.ClaimResourceStatus) string {
	if s == "" {
		return ""
	}
	return ", " + string(s)
}

func waitOver(in Input, last *Record) bool {
	return !in.Now.Before(last.Time.Add(in.Settings.ResizeWait))
}

// usable: the kubelet reported the volume with a capacity.
func usable(st *VolumeStats) bool { return st != nil && st.CapacityBytes > 0 }

// grown: the kubelet reports a larger file system than before the recorded resize.
func grown(st *VolumeStats, last *Record) bool {
	return usable(st) && st.CapacityBytes > last.FSCapacity
}

// want is a resize a rule asks for, or, without to, why none is asked for.
type want struct {
	to     int64
	reason Reason
	why    string
}

// decideGrowth applies the thresholds and sibling sizing, then the limit and the cooldown.
func decideGrowth(in Input, v volume, last *Record) Decision {
	s := in.Settings
	base := max(v.spec, v.capacity)
	w, wanted := thresholdWant(s, in.Stats, base)
	if sw, ok := siblingWant(s, in.SiblingSize, last, base); ok && (!wanted || sw.to > w.to) {
		w, wanted = sw, true
	}
	if !wanted {
		if !usable(in.Stats) {
			return v.skip(SkipStatsMissing, "no stats from the kubelet for the volume this round")
		}
		return v.skip(SkipBelowThreshold, "%s", w.why)
	}
	limit, from := effectiveLimit(s, last)
	if base >= limit {
		return v.skip(SkipAtLimit, "%s, but the volume is at its limit %s (%s)", w.why, qstr(limit), from)
	}
	if last != nil && in.Now.Before(last.Time.Add(s.Cooldown)) {
		return v.skip(SkipCooldown, "%s, but the last resize was at %s: cooldown %s, next resize from %s", w.why,
			stamp(last.Time), s.Cooldown, stamp(last.Time.Add(s.Cooldown)))
	}
	to, clamp := w.to, ""
	if to > limit {
		to, clamp = limit, fmt.Sprintf(" (clamped to the limit, %s)", from)
	}
	var fs int64
	if usable(in.Stats) {
		fs = in.Stats.CapacityBytes
	}
	r := Record{Time: in.Now, From: v.specQ.DeepCopy(), To: quantity(to), Reason: w.reason, FSCapacity: fs}
	return Decision{Action: Resize, Reason: w.reason, From: v.specQ.DeepCopy(), To: quantity(to), Record: FormatRecord(r),
		Message: fmt.Sprintf("%s: grow %s -> %s%s", w.why, v.request(), qstr(to), clamp)}
}

// thresholdWant compares the free bytes and inodes with the thresholds. The step is
// max(Increase of the size, MinIncrease) added to the size (the larger of request and
// capacity), rounded up to a whole MiB.
func thresholdWant(s Settings, st *VolumeStats, base int64) (want, bool) {
	if !usable(st) {
		return want{}, false
	}
	c := st.CapacityBytes
	free := min(max(st.AvailableBytes, 0), c)
	step := max(s.Increase.Of(base, true), s.MinIncrease)
	to := roundUpMiB(min(base, math.MaxInt64-step) + step)
	bytesWhy := fmt.Sprintf("free %s of %s (%s)", human(free, c), human(c, c), share(free, c))
	if free < s.Threshold.Of(c, false) {
		return want{to: to, reason: ReasonThresholdBytes, why: bytesWhy + " is below the threshold " + s.Threshold.String()}, true
	}
	why := bytesWhy + " is not below the threshold " + s.Threshold.String()
	if st.Inodes <= 0 {
		// Some file systems (btrfs) report no inode count: there is no inode threshold then.
		return want{why: why}, false
	}
	ifree := min(max(st.InodesFree, 0), st.Inodes)
	inodesWhy := fmt.Sprintf("free inodes %d of %d (%s)", ifree, st.Inodes, share(ifree, st.Inodes))
	if ifree < s.InodesThreshold.of(st.Inodes, false) {
		return want{to: to, reason: ReasonThresholdInodes, why: inodesWhy + " are below the threshold " + s.InodesThreshold.String()}, true
	}
	return want{why: why + ", " + inodesWhy + " are not below " + s.InodesThreshold.String()}, false
}

// effectiveLimit is the limit, lowered to the recovered size after a recovery.
func effectiveLimit(s Settings, last *Record) (int64, string) {
	if last != nil && last.Reason == ReasonRecover && bytesOf(last.To) < s.Limit {
		return bytesOf(last.To), fmt.Sprintf("held since the driver refused %s at %s; remove annotation %s to let it grow again",
			last.From.String(), stamp(last.Time), AnnLastResize)
	}
	return s.Limit, s.LimitFrom
}

// ThresholdCrossed reports whether the volume's free bytes or free inodes are below their
// thresholds: the "above threshold" gauge of the command, from the same comparison Decide
// makes. False when st is nil or has no capacity.
func ThresholdCrossed(s Settings, st *VolumeStats) bool {
	_, crossed := thresholdWant(s, st, 0)
	return crossed
}
