//go:build integration

package soak

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-resizer/csi-resizer/test/framework"
)

// violation is one broken invariant, about one PVC ("" for the system).
type violation struct {
	Invariant string
	PVC       string
	Detail    string
}

func (v violation) String() string {
	return fmt.Sprintf("VIOLATION %s on %s: %s", v.Invariant, or(v.PVC, "the system"), v.Detail)
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// evidence is what the checks read once the quiet period is over.
type evidence struct {
	runs     []*run
	tenures  []tenure
	calls    []attributed // every Expand/Modify call, attributed
	byVolume map[string][]attributed
}

func (s *soak) gather(t *testing.T) *evidence {
	ev := &evidence{byVolume: map[string][]attributed{}}
	for i, p := range s.resizers {
		ev.runs = append(ev.runs, parseRuns(i, p.Log())...)
	}
	ev.tenures = tenures(s.rec.leaseVersions(), ev.runs)
	var raw []framework.Call
	for _, c := range s.env.Driver.Calls(t, "") {
		if c.Method == "ControllerExpandVolume" || c.Method == "ControllerModifyVolume" ||
			strings.HasSuffix(c.Method, "/ControllerExpandVolume") || strings.HasSuffix(c.Method, "/ControllerModifyVolume") {
			c.Method = c.Method[strings.LastIndex(c.Method, "/")+1:]
			raw = append(raw, c)
		}
	}
	ev.calls = attribute(raw, ev.runs)
	for _, c := range ev.calls {
		ev.byVolume[c.VolumeID] = append(ev.byVolume[c.VolumeID], c)
	}
	return ev
}

// check runs every invariant and returns the violations.
func (s *soak) check(t *testing.T) []violation {
	s.ev = s.gather(t)
	var out []violation
	out = append(out, s.checkLease()...)
	for _, c := range s.claims {
		out = append(out, s.checkClaim(c)...)
	}
	out = append(out, s.checkConverged(t)...)
	out = append(out, s.checkQuota(t)...)
	out = append(out, s.checkStatefulSets(t)...)
	return out
}

// checkLease: every call a resizer decided to make, it decided while it held the Lease.
func (s *soak) checkLease() []violation {
	var out []violation
	for _, r := range s.ev.runs {
		for _, c := range r.Calls {
			h := holderAt(s.ev.tenures, c.Time)
			if h == nil || h.Run != r {
				holder := "nobody"
				if h != nil {
					holder = fmt.Sprintf("%s (%s)", h.Holder, runName(h.Run))
				}
				out = append(out, violation{"call-without-lease", s.claimOf(c.Volume),
					fmt.Sprintf("%s logged %s for %s at %s while the Lease was held by %s", r.id(), c.Method, c.Volume, stamp(c.Time), holder)})
			}
		}
	}
	return out
}

func runName(r *run) string {
	if r == nil {
		return "no run logged acquiring it"
	}
	return r.id()
}

func stamp(t time.Time) string { return t.Format("15:04:05.000000") }

func (s *soak) claimOf(vol string) string {
	for _, c := range s.claims {
		if c.Volume == vol {
			return c.key()
		}
	}
	return ""
}

// checkClaim: the per-PVC invariants over its whole history.
func (s *soak) checkClaim(c claimRef) []violation {
	out := checkVersions(c.key(), s.rec.claimVersions(c.key()))
	pv := s.rec.claimPVName(c.key())
	calls := s.ev.byVolume[c.Volume]
	for _, a := range calls {
		if a.Method != "ControllerExpandVolume" {
			continue
		}
		if pvCap, ok := s.rec.pvCapacityAt(pv, a.Time); ok && a.RequiredBytes < pvCap {
			out = append(out, violation{"shrink-call", c.key(), fmt.Sprintf("ControllerExpandVolume at %s asked for %d bytes, the PV had %d", stamp(a.Time), a.RequiredBytes, pvCap)})
		}
	}
	for _, m := range []string{"ControllerExpandVolume", "ControllerModifyVolume"} {
		out = append(out, s.checkInFlight(c, calls, m)...)
	}
	out = append(out, s.checkPace(c, calls)...)
	return out
}

// checkVersions checks every recorded version of one PVC: allocated never below capacity, and the
// other writer's condition never lost or set back to an older touch (a status write based on an
// older version, or one that drops conditions it does not know).
func checkVersions(key string, versions []claimVersion) []violation {
	var out []violation
	audit := 0
	for _, v := range versions {
		if v.Allocated != 0 && v.Allocated < v.Capacity {
			out = append(out, violation{"allocated-below-capacity", key, fmt.Sprintf("version %s: %s", v.RV, v.Summary)})
		}
		if v.Audit < audit {
			out = append(out, violation{"foreign-condition-lost", key, fmt.Sprintf("version %s has the other writer's condition at touch %d (0 = gone), an earlier version had touch %d", v.RV, v.Audit, audit)})
		}
		audit = max(audit, v.Audit)
	}
	return out
}

// ledAt says whether run r held the Lease at t.
func (s *soak) ledAt(r *run, t time.Time) bool {
	h := holderAt(s.ev.tenures, t)
	return h != nil && h.Run == r
}

// checkInFlight: one run never has two calls of a method for one volume in flight (its own
// view: a call ends at the answer or at --timeout). Calls of different runs may overlap only
// when the first one's run held the Lease when it called and had lost it by the time the second
// was sent (a killed or frozen leader's call still carried out by the driver): those are
// counted, not failed.
func (s *soak) checkInFlight(c claimRef, calls []attributed, method string) []violation {
	var out []violation
	var prev []attributed
	for _, a := range calls {
		if a.Method != method {
			continue
		}
		for _, p := range prev {
			if !a.Time.Before(p.callerEnd()) {
				continue
			}
			if p.Run != nil && a.Run != nil && p.Run != a.Run && s.ledAt(p.Run, p.Time) && !s.ledAt(p.Run, a.Time) {
				s.overlapsAfterTakeover++
				continue
			}
			out = append(out, violation{"concurrent-calls", c.key(), fmt.Sprintf("%s at %s (%s) while the one of %s (%s) was in flight until %s",
				method, stamp(a.Time), runName(a.Run), stamp(p.Time), runName(p.Run), stamp(p.callerEnd()))})
		}
		prev = append(prev, a)
	}
	return out
}

// checkPace: no retry storm. After a failed ControllerExpandVolume, the same run asks again
// for the same size no sooner than the retry policy allows (docs/design.md §2.3 rule 8):
// --retry-interval-max after an infeasible answer, --retry-interval-start after any other. A
// different size (the user answered) goes at once.
func (s *soak) checkPace(c claimRef, calls []attributed) []violation {
	var out []violation
	var prev *attributed
	for i := range calls {
		a := &calls[i]
		if a.Method != "ControllerExpandVolume" {
			continue
		}
		if p := prev; p != nil && p.callerCode() != "OK" && p.Run != nil && p.Run == a.Run && p.RequiredBytes == a.RequiredBytes {
			min := retryStart - 100*time.Millisecond
			if infeasibleCode(p.callerCode()) {
				min = retryMax - time.Second
			}
			if gap := a.Time.Sub(p.callerEnd()); gap < min {
				out = append(out, violation{"retry-storm", c.key(), fmt.Sprintf("%s retried %d bytes %s after a %s answer at %s, want at least %s",
					runName(a.Run), a.RequiredBytes, gap.Round(time.Millisecond), p.callerCode(), stamp(p.callerEnd()), min)})
			}
		}
		prev = a
	}
	return out
}

func infeasibleCode(name string) bool {
	return name == "INVALID_ARGUMENT" || name == "OUT_OF_RANGE" || name == "NOT_FOUND"
}

// reasonOf is the condition reason csi-resizer writes for a gRPC code name: the code's Go name.
func reasonOf(name string) string {
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if upperSnake(c) == name {
			return c.String()
		}
	}
	return name
}

func upperSnake(c codes.Code) string {
	if c == codes.Canceled {
		return "CANCELLED"
	}
	var b strings.Builder
	for i, r := range c.String() {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String())
}

// converged says whether the PVC's last version is where the soak may leave it: its expansion
// done (capacity ≥ request, no state) or explained by the driver's last answer (an infeasible
// state whose ControllerResizeError reason is that answer's code), and its class current or
// explained (Infeasible on the refused class).
func (s *soak) converged(c claimRef, v claimVersion) (bool, string) {
	calls := s.ev.byVolume[c.Volume]
	var last *attributed
	for i := range calls {
		if calls[i].Method == "ControllerExpandVolume" {
			last = &calls[i]
		}
	}
	switch {
	case v.Capacity >= v.Request && v.State == "":
	case last != nil && last.callerCode() != "OK" && v.State != "" && v.Error == reasonOf(last.callerCode()):
	default:
		why := "no driver call"
		if last != nil {
			why = "last ControllerExpandVolume answered " + last.callerCode()
		}
		return false, fmt.Sprintf("expansion not converged: %s; %s", v.Summary, why)
	}
	switch {
	case v.Class == v.Current && v.Modify == "":
	case v.Class == badClass && strings.HasPrefix(v.Modify, string(v1.PersistentVolumeClaimModifyVolumeInfeasible)):
	default:
		return false, "modification not converged: " + v.Summary
	}
	return true, ""
}

// drainTime bounds how long the PVCs may take to settle after the quiet period: the resizer
// keeps its default --kube-api-qps (5), so the backlog the chaos left (up to 3 writes per PVC:
// status, PV, status) drains at that rate, and the kubelet may still owe a node step.
func (s *soak) drainTime() time.Duration {
	return 90*time.Second + time.Duration(len(s.claims))*3*time.Second/5
}

// checkConverged: every PVC converged, polled until the drain time is over.
func (s *soak) checkConverged(t *testing.T) []violation {
	deadline := time.Now().Add(s.drainTime())
	defer func() { s.drained = time.Since(s.quietAt) }()
	for {
		var out []violation
		for _, c := range s.claims {
			pvc, err := s.env.Client.CoreV1().PersistentVolumeClaims(c.NS).Get(s.env.Ctx, c.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("get %s: %v", c.key(), err)
			}
			if ok, why := s.converged(c, snapshotClaim(time.Now(), pvc)); !ok {
				out = append(out, violation{"not-converged", c.key(), why})
			}
		}
		if len(out) == 0 || time.Now().After(deadline) {
			return out
		}
		pause(s.env.Ctx, time.Second)
		s.ev = s.gather(t) // the calls made meanwhile
	}
}

// checkQuota: each namespace's quota counts Σ max(request, allocated) of its PVCs.
func (s *soak) checkQuota(t *testing.T) []violation {
	var out []violation
	for _, ns := range s.spaces {
		var want, got int64
		deadline := time.Now().Add(90 * time.Second)
		for {
			want = 0
			list, err := s.env.Client.CoreV1().PersistentVolumeClaims(ns).List(s.env.Ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range list.Items {
				v := snapshotClaim(time.Now(), &p)
				want += max(v.Request, v.Allocated)
			}
			q, err := s.env.Client.CoreV1().ResourceQuotas(ns).Get(s.env.Ctx, "storage", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			used := q.Status.Used[v1.ResourceRequestsStorage]
			got = used.Value()
			if got == want || time.Now().After(deadline) {
				break
			}
			pause(s.env.Ctx, time.Second)
		}
		if got != want {
			out = append(out, violation{"quota", "", fmt.Sprintf("namespace %s: quota used %d bytes, Σ max(request, allocated) = %d", ns, got, want)})
		}
	}
	return out
}

// history renders everything the soak knows about one PVC.
func (s *soak) history(key string) string {
	if key == "" {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "--- history of %s ---\nversions:\n", key)
	for _, v := range s.rec.claimVersions(key) {
		fmt.Fprintf(&b, "  %s rv=%s %s\n", stamp(v.Seen), v.RV, v.Summary)
	}
	var vol string
	for _, c := range s.claims {
		if c.key() == key {
			vol = c.Volume
		}
	}
	fmt.Fprintf(&b, "driver calls (volume %s):\n", vol)
	for _, a := range s.ev.byVolume[vol] {
		fmt.Fprintf(&b, "  %s..%s %s %s (caller saw %s) bytes=%d params=%v injected=%v by %s\n", stamp(a.Time), stamp(a.End()), a.Method, a.CodeName, a.callerCode(), a.RequiredBytes, a.MutableParameters, a.Injected, runName(a.Run))
	}
	b.WriteString("chaos events (this PVC and the system):\n")
	for _, e := range s.chaos.forPVC(key) {
		if e.Kind == "faults" && !strings.Contains(e.Detail, vol) && !strings.Contains(e.Detail, "driver-wide") {
			continue
		}
		fmt.Fprintf(&b, "  %s %s %s %s\n", stamp(e.Time), e.Kind, e.PVC, e.Detail)
	}
	b.WriteString("lease tenures:\n")
	for _, tn := range s.ev.tenures {
		fmt.Fprintf(&b, "  %s..%s %s (%s)\n", stamp(tn.From), stamp(tn.To), tn.Holder, runName(tn.Run))
	}
	return b.String()
}
