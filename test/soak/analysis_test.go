//go:build integration

package soak

import (
	"strings"
	"testing"
	"time"

	"github.com/csi-resizer/csi-resizer/test/framework"
)

// The soak's verdicts are only as good as its reading of the evidence: these tests feed the
// analysis made-up logs, Lease versions and driver calls whose right reading is known. They run
// without a cluster (and under `make soak`, before the soak itself).

var t0 = time.Date(2026, 11, 25, 10, 0, 0, 0, time.Local)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func klogLine(ms int, msg string) string {
	return "I" + at(ms).Format("0102 15:04:05.000000") + "   42 file.go:1] " + msg
}

func TestSoakAnalysisParseRuns(t *testing.T) {
	log := strings.Join([]string{
		"=== csi-resizer start #1 at " + at(0).Format(time.RFC3339Nano) + ": /bin/csi-resizer --leader-election",
		klogLine(100, `"Attempting to acquire leader lease..." lock="ns/external-resizer-x"`),
		klogLine(200, `"Successfully acquired lease" lock="ns/external-resizer-x"`),
		klogLine(300, `"Calling ControllerExpandVolume" volumeID="12" requiredBytes=2147483648`),
		"=== csi-resizer start #2 at " + at(1000).Format(time.RFC3339Nano) + ": /bin/csi-resizer --leader-election",
		klogLine(1300, `"Calling ControllerModifyVolume" volumeID="1" class="gold"`),
	}, "\n")
	runs := parseRuns(3, log)
	if len(runs) != 2 {
		t.Fatalf("got %d runs, want 2", len(runs))
	}
	r1, r2 := runs[0], runs[1]
	if r1.Replica != 3 || r1.N != 1 || len(r1.Acquired) != 1 || !r1.Acquired[0].Equal(at(200)) {
		t.Errorf("run 1 = %+v, want replica 3 run #1 that acquired at %s", r1, at(200))
	}
	if len(r1.Calls) != 1 || r1.Calls[0].Method != "ControllerExpandVolume" || r1.Calls[0].Volume != "12" || !r1.Calls[0].Time.Equal(at(300)) {
		t.Errorf("run 1 calls = %+v, want one ControllerExpandVolume of volume 12 at %s", r1.Calls, at(300))
	}
	if r2.N != 2 || len(r2.Acquired) != 0 || len(r2.Calls) != 1 || r2.Calls[0].Volume != "1" || r2.Calls[0].Method != "ControllerModifyVolume" {
		t.Errorf("run 2 = %+v with calls %+v, want run #2 that never acquired and called ControllerModifyVolume for volume 1", r2, r2.Calls)
	}
}

func TestSoakAnalysisTenures(t *testing.T) {
	a := &run{Replica: 0, N: 1, Acquired: []time.Time{at(1005)}}
	b := &run{Replica: 1, N: 1, Acquired: []time.Time{at(9010)}}
	lease := []leaseVersion{
		{Holder: "host_a", Acquired: at(1000), Renewed: at(1000)},
		{Holder: "host_a", Acquired: at(1000), Renewed: at(4000)}, // a renewal
		{Holder: "host_b", Acquired: at(9000), Renewed: at(9000)},
	}
	ts := tenures(lease, []*run{a, b})
	if len(ts) != 2 {
		t.Fatalf("got %d tenures, want 2 (a renewal is no change): %+v", len(ts), ts)
	}
	if ts[0].Run != a || ts[1].Run != b || !ts[0].To.Equal(at(9000)) || !ts[1].To.IsZero() {
		t.Errorf("tenures = %+v, want host_a (run a) until %s, then host_b (run b)", ts, at(9000))
	}
	if h := holderAt(ts, at(500)); h != nil {
		t.Errorf("holder before any acquisition = %+v, want nobody", h)
	}
	if h := holderAt(ts, at(8999)); h == nil || h.Run != a {
		t.Errorf("holder at %s = %+v, want run a", at(8999), h)
	}
	if h := holderAt(ts, at(9500)); h == nil || h.Run != b {
		t.Errorf("holder at %s = %+v, want run b", at(9500), h)
	}
}

// A Lease write that etcd stalled (its restart): the Lease says acquired at 17:02:25.5, the
// writer logs it 10 s later once the answer comes. The tenure is still that run's, and the
// next holder's acquisition is not taken for it.
func TestSoakAnalysisTenuresStalledWrite(t *testing.T) {
	a := &run{Replica: 0, N: 2, Acquired: []time.Time{at(10000)}}
	b := &run{Replica: 1, N: 2, Acquired: []time.Time{at(41000)}}
	lease := []leaseVersion{
		{Holder: "host_a", Acquired: at(100), Renewed: at(100)},
		{Holder: "host_b", Acquired: at(40990), Renewed: at(40990)},
		{Holder: "host_c", Acquired: at(50000), Renewed: at(50000)}, // no run logged it
	}
	ts := tenures(lease, []*run{a, b})
	if len(ts) != 3 || ts[0].Run != a || ts[1].Run != b || ts[2].Run != nil {
		t.Fatalf("tenures = %+v, want host_a (run a, logged 9.9 s after its write), host_b (run b), host_c (no run)", ts)
	}
}

func TestSoakAnalysisLeaseViolation(t *testing.T) {
	a := &run{Replica: 0, N: 1, Acquired: []time.Time{at(5)}}
	b := &run{Replica: 1, N: 1, Acquired: []time.Time{at(5005)}}
	a.Calls = []logCall{{Time: at(1000), Method: "ControllerExpandVolume", Volume: "7", Run: a}, // while leading
		{Time: at(6000), Method: "ControllerExpandVolume", Volume: "7", Run: a}} // deposed (frozen, thawed)
	b.Calls = []logCall{{Time: at(5500), Method: "ControllerExpandVolume", Volume: "7", Run: b}}
	s := &soak{claims: []claimRef{{NS: "ns", Name: "c", Volume: "7"}}, ev: &evidence{runs: []*run{a, b}}}
	s.ev.tenures = tenures([]leaseVersion{{Holder: "a", Acquired: at(0)}, {Holder: "b", Acquired: at(5000)}}, s.ev.runs)
	vs := s.checkLease()
	if len(vs) != 1 || !strings.Contains(vs[0].Detail, "resizer 0 run #1") || vs[0].PVC != "ns/c" {
		t.Fatalf("violations = %v, want exactly the deposed run's call at %s", vs, at(6000))
	}
}

func TestSoakAnalysisAttribute(t *testing.T) {
	a := &run{Replica: 0, N: 1}
	b := &run{Replica: 1, N: 1}
	a.Calls = []logCall{{Time: at(100), Method: "ControllerExpandVolume", Volume: "7", Run: a}} // sent only after a thaw
	b.Calls = []logCall{{Time: at(500), Method: "ControllerExpandVolume", Volume: "7", Run: b}}
	calls := []framework.Call{
		{Method: "ControllerExpandVolume", VolumeID: "7", Time: at(501)},
		{Method: "ControllerExpandVolume", VolumeID: "7", Time: at(900)},
		{Method: "ControllerExpandVolume", VolumeID: "8", Time: at(900)},
	}
	got := attribute(calls, []*run{a, b})
	if got[0].Run != b || got[1].Run != a || got[2].Run != nil {
		t.Errorf("attributed to %s, %s, %s; want resizer 1 (the latest line before it), resizer 0 (the line left), none (no line for volume 8)",
			runName(got[0].Run), runName(got[1].Run), runName(got[2].Run))
	}
}

func TestSoakAnalysisCallerView(t *testing.T) {
	slow := attributed{Call: framework.Call{Time: at(0), DurationMs: float64((callTimeout + 2*time.Second).Milliseconds()), CodeName: "OK"}}
	if !slow.callerEnd().Equal(at(0).Add(callTimeout)) || slow.callerCode() != "DEADLINE_EXCEEDED" {
		t.Errorf("a call answered after --timeout ends at %s with %s for its caller, want %s and DEADLINE_EXCEEDED", slow.callerEnd(), slow.callerCode(), at(0).Add(callTimeout))
	}
	fast := attributed{Call: framework.Call{Time: at(0), DurationMs: 3, CodeName: "OUT_OF_RANGE"}}
	if !fast.callerEnd().Equal(at(3)) || fast.callerCode() != "OUT_OF_RANGE" {
		t.Errorf("a quick call ends at %s with %s, want %s and OUT_OF_RANGE", fast.callerEnd(), fast.callerCode(), at(3))
	}
	for name, want := range map[string]string{"OUT_OF_RANGE": "OutOfRange", "INVALID_ARGUMENT": "InvalidArgument", "CANCELLED": "Canceled", "DEADLINE_EXCEEDED": "DeadlineExceeded"} {
		if got := reasonOf(name); got != want {
			t.Errorf("reasonOf(%s) = %s, want %s", name, got, want)
		}
	}
}

func TestSoakAnalysisInFlightAndPace(t *testing.T) {
	a := &run{Replica: 0, N: 1}
	b := &run{Replica: 1, N: 1}
	c := claimRef{NS: "ns", Name: "c", Volume: "7"}
	call := func(r *run, ms, durMs int, code string, bytes int64) attributed {
		return attributed{Call: framework.Call{Method: "ControllerExpandVolume", VolumeID: "7", Time: at(ms), DurationMs: float64(durMs), CodeName: code, RequiredBytes: bytes}, Run: r}
	}
	s := &soak{ev: &evidence{tenures: []tenure{{Holder: "a", From: at(0), To: at(10000), Run: a}, {Holder: "b", From: at(10000), Run: b}}}}
	for _, tc := range []struct {
		name  string
		calls []attributed
		want  string // the invariant broken, "" for none
	}{
		{"sequential", []attributed{call(a, 0, 10, "UNAVAILABLE", gi), call(a, 2000, 10, "OK", gi)}, ""},
		{"same run, overlapping", []attributed{call(a, 0, 3000, "OK", gi), call(a, 1000, 10, "OK", gi)}, "concurrent-calls"},
		{"after the caller's timeout", []attributed{call(a, 0, 7000, "OK", gi), call(a, 6500, 10, "OK", gi)}, ""},
		{"new leader while the old one's call runs", []attributed{call(a, 9000, 7000, "OK", gi), call(b, 11000, 10, "OK", gi)}, ""},
		{"other run while the first still leads", []attributed{call(b, 1000, 3000, "OK", gi), call(a, 2000, 10, "OK", gi)}, "concurrent-calls"},
		{"infeasible retried too soon", []attributed{call(a, 0, 1, "OUT_OF_RANGE", 50*gi), call(a, 3000, 1, "OUT_OF_RANGE", 50*gi)}, "retry-storm"},
		{"infeasible retried at the slow rate", []attributed{call(a, 0, 1, "OUT_OF_RANGE", 50*gi), call(a, int(retryMax/time.Millisecond), 1, "OUT_OF_RANGE", 50*gi)}, ""},
		{"infeasible, then the user's new size at once", []attributed{call(a, 0, 1, "OUT_OF_RANGE", 50*gi), call(a, 300, 1, "OK", 2*gi)}, ""},
		{"transient retried at once", []attributed{call(a, 0, 1, "UNAVAILABLE", gi), call(a, 200, 1, "OK", gi)}, "retry-storm"},
	} {
		var got []violation
		got = append(got, s.checkInFlight(c, tc.calls, "ControllerExpandVolume")...)
		got = append(got, s.checkPace(c, tc.calls)...)
		switch {
		case tc.want == "" && len(got) > 0:
			t.Errorf("%s: violations %v, want none", tc.name, got)
		case tc.want != "" && (len(got) != 1 || got[0].Invariant != tc.want):
			t.Errorf("%s: violations %v, want one %s", tc.name, got, tc.want)
		}
	}
}

func TestSoakAnalysisVersions(t *testing.T) {
	ok := []claimVersion{{RV: "1"}, {RV: "2", Audit: 2, Capacity: 1, Allocated: 2}, {RV: "3", Audit: 2}, {RV: "4", Audit: 6}}
	if vs := checkVersions("ns/c", ok); len(vs) != 0 {
		t.Errorf("violations %v on versions that keep the condition and allocated >= capacity", vs)
	}
	bad := []claimVersion{{RV: "1", Audit: 4}, {RV: "2", Audit: 2}, {RV: "3"}, {RV: "4", Audit: 4, Capacity: 3, Allocated: 2}}
	vs := checkVersions("ns/c", bad)
	var got []string
	for _, v := range vs {
		got = append(got, v.Invariant)
	}
	if strings.Join(got, ",") != "foreign-condition-lost,foreign-condition-lost,allocated-below-capacity" {
		t.Errorf("violations %v, want the condition set back, then dropped, then allocated below capacity", vs)
	}
}
