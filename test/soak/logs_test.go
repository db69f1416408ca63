//go:build integration

package soak

import (
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/csi-resizer/csi-resizer/test/framework"
)

// run is one start of one csi-resizer process, read from its log: when it acquired the Lease
// and which driver calls it decided to make ("Calling ControllerExpandVolume" /
// "Calling ControllerModifyVolume", logged just before the call).
type run struct {
	Replica  int
	N        int // start number of the process
	Start    time.Time
	Acquired []time.Time
	Calls    []logCall
}

func (r *run) id() string { return "resizer " + strconv.Itoa(r.Replica) + " run #" + strconv.Itoa(r.N) }

type logCall struct {
	Time   time.Time
	Method string
	Volume string
	Run    *run
}

var (
	startHeader = regexp.MustCompile(`^=== \S+ start #(\d+) at (\S+):`)
	klogHeader  = regexp.MustCompile(`^[IWEF](\d{4} \d{2}:\d{2}:\d{2}\.\d{6}) `)
	callLine    = regexp.MustCompile(`"Calling (ControllerExpandVolume|ControllerModifyVolume)".* volumeID="([^"]+)"`)
)

// parseRuns splits a resizer's log (every start appends to it) into its runs.
func parseRuns(replica int, log string) []*run {
	var runs []*run
	var cur *run
	for _, line := range strings.Split(log, "\n") {
		if m := startHeader.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[1])
			at, _ := time.Parse(time.RFC3339Nano, m[2])
			cur = &run{Replica: replica, N: n, Start: at}
			runs = append(runs, cur)
			continue
		}
		if cur == nil {
			continue
		}
		at, ok := klogTime(line)
		if !ok {
			continue
		}
		if strings.Contains(line, "Successfully acquired lease") {
			cur.Acquired = append(cur.Acquired, at)
		}
		if m := callLine.FindStringSubmatch(line); m != nil {
			cur.Calls = append(cur.Calls, logCall{Time: at, Method: m[1], Volume: m[2], Run: cur})
		}
	}
	return runs
}

func klogTime(line string) (time.Time, bool) {
	m := klogHeader.FindStringSubmatch(line)
	if m == nil {
		return time.Time{}, false
	}
	at, err := time.ParseInLocation("0102 15:04:05.000000", m[1], time.Local)
	if err != nil {
		return time.Time{}, false
	}
	now := time.Now()
	at = at.AddDate(now.Year(), 0, 0)
	if at.After(now.Add(24 * time.Hour)) { // a run across New Year
		at = at.AddDate(-1, 0, 0)
	}
	return at, true
}

// tenure is one holder's time with the Lease: from its acquireTime to the next holder's.
type tenure struct {
	Holder   string
	From, To time.Time // To zero: still held
	Run      *run      // the run that acquired it, nil if no run logged it
}

// tenures reads the Lease history into tenures and ties each holder identity to the run that
// logged "Successfully acquired lease" after the acquireTime the Lease shows (both on this
// machine's clock; the identity itself is not logged).
func tenures(lease []leaseVersion, runs []*run) []tenure {
	var out []tenure
	for _, v := range lease {
		if v.Holder == "" {
			continue
		}
		if n := len(out); n > 0 && out[n-1].Holder == v.Holder && out[n-1].From.Equal(v.Acquired) {
			continue // a renewal
		}
		if n := len(out); n > 0 {
			out[n-1].To = v.Acquired
		}
		out = append(out, tenure{Holder: v.Holder, From: v.Acquired})
	}
	for i := range out {
		out[i].Run = acquirer(out[i].From, out[i].To, runs)
	}
	return out
}

// acquireLogWindow bounds how long after the Lease's acquireTime its writer may log the
// acquisition: the write's round trip, which an etcd restart can stretch to the restart's
// length (the write is committed, the answer comes once etcd serves again).
const acquireLogWindow = time.Minute

// acquirer is the run whose "Successfully acquired lease" line follows at most closely, before
// until (the next holder's acquireTime, when there is one: a line after it answers that
// holder's write) and within acquireLogWindow.
func acquirer(at, until time.Time, runs []*run) *run {
	var best *run
	var bestGap time.Duration
	for _, r := range runs {
		for _, a := range r.Acquired {
			gap := a.Sub(at)
			if gap < -time.Millisecond || gap > acquireLogWindow || (!until.IsZero() && !a.Before(until)) {
				continue
			}
			if best == nil || gap < bestGap {
				best, bestGap = r, gap
			}
		}
	}
	return best
}

// holderAt is the tenure in force at t, or nil.
func holderAt(ts []tenure, t time.Time) *tenure {
	var cur *tenure
	for i := range ts {
		if ts[i].From.After(t) {
			break
		}
		cur = &ts[i]
	}
	return cur
}

// attributed is a driver call tied to the run that logged it.
type attributed struct {
	framework.Call
	Run *run
	Log time.Time // when the run logged it
}

// callerEnd is when the call stopped being in flight for its caller: the driver's answer, or
// the caller's --timeout, whichever came first.
func (a attributed) callerEnd() time.Time {
	end := a.End()
	if dl := a.Time.Add(callTimeout); dl.Before(end) {
		return dl
	}
	return end
}

// callerCode is the outcome the caller saw: the driver's code, or DEADLINE_EXCEEDED when the
// answer came after --timeout.
func (a attributed) callerCode() string {
	if a.End().After(a.Time.Add(callTimeout)) {
		return "DEADLINE_EXCEEDED"
	}
	return a.CodeName
}

// attribute ties each driver call to the latest unmatched "Calling ..." line for the same method
// and volume logged no later than the call reached the driver.
func attribute(calls []framework.Call, runs []*run) []attributed {
	pending := map[string][]logCall{}
	for _, r := range runs {
		for _, c := range r.Calls {
			k := c.Method + "/" + c.Volume
			pending[k] = append(pending[k], c)
		}
	}
	for _, l := range pending {
		sort.Slice(l, func(i, j int) bool { return l[i].Time.Before(l[j].Time) })
	}
	sort.SliceStable(calls, func(i, j int) bool { return calls[i].Time.Before(calls[j].Time) })
	var out []attributed
	for _, c := range calls {
		a := attributed{Call: c}
		k := c.Method + "/" + c.VolumeID
		l := pending[k]
		best := -1
		for i := range l {
			if l[i].Time.After(c.Time) {
				break
			}
			best = i
		}
		if best >= 0 {
			a.Run, a.Log = l[best].Run, l[best].Time
			pending[k] = append(l[:best], l[best+1:]...)
		}
		out = append(out, a)
	}
	return out
}
