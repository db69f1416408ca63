package modify

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-resizer/csi-resizer/pkg/expand"
)

var (
	fuzzNames    = []string{"", "gold", "silver", "bronze", "platinum", "other"}
	fuzzStatuses = []v1.PersistentVolumeClaimModifyVolumeStatus{"", pending, inProgress, infeasible}
	fuzzCodes    = []codes.Code{codes.OK, codes.InvalidArgument, codes.Internal, codes.Unavailable, codes.DeadlineExceeded, codes.NotFound}
)

// FuzzDecideInvariants drives random sequences of user edits, driver answers and resizer
// restarts through Decide and the status steps, as the controller would, and checks the two
// invariants of docs/design.md §2.11 on every step:
//   - no call for a target while a call for another target may still be in effect (the last
//     call for it had no final answer);
//   - currentVolumeAttributesClassName only ever names a class the driver confirmed.
func FuzzDecideInvariants(f *testing.F) {
	f.Add([]byte{1, 0, 2, 1, 3, 2, 0, 4})
	f.Add([]byte{2, 3, 1, 2, 0, 1, 5, 5, 1})
	f.Fuzz(func(t *testing.T, steps []byte) {
		classes := lookup("gold", "silver", "bronze")
		deleted := map[string]bool{}
		present := func(name string) *storagev1.VolumeAttributesClass {
			if deleted[name] {
				return nil
			}
			return classes(name)
		}
		now := metav1.NewTime(time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC))
		pvc := &v1.PersistentVolumeClaim{}
		if len(steps) > 0 && steps[0]%2 == 1 {
			// Bound with a class: the PV controller sets it current.
			silver := "silver"
			pvc.Spec.VolumeAttributesClassName, pvc.Status.CurrentVolumeAttributesClassName = &silver, &silver
		}
		confirmed := map[string]bool{"silver": true, "": true}
		inFlight := "" // the target of a call that may still be in effect
		for i := 1; i+1 < len(steps); i += 2 {
			if steps[i]%3 == 0 {
				// The user edits the spec, or (odd values) deletes a class or creates it again.
				name := fuzzNames[int(steps[i+1])%len(fuzzNames)]
				if steps[i+1]%2 == 1 {
					deleted[name] = !deleted[name]
					continue
				}
				pvc.Spec.VolumeAttributesClassName = &name
				continue
			}
			o := Observe(pvc)
			p := Decide(o, present, driver)
			if o.InFlight() && p.Action != Nothing && (p.Action != Modify || p.Target != o.Target) {
				t.Fatalf("step %d: %s %q while %q may be in effect (%+v)", i, p.Action, p.Target, o.Target, o)
			}
			switch p.Action {
			case GiveUp:
				if !o.InFlight() || p.Target != o.Target || present(p.Target) != nil {
					t.Fatalf("step %d: give up %q (%+v) while its class exists or nothing is in flight", i, p.Target, o)
				}
				// The controller records this only once the call's deadline is past
				// (ClassGoneWait): no call for the target can still be running.
				pvc.Status = ClassGoneStatus(pvc.Status, p.Target, now)
				inFlight = ""
			case MarkPending:
				pvc.Status = PendingStatus(pvc.Status, p.Target)
			case Cancel:
				if o.Status != pending && o.Status != infeasible {
					t.Fatalf("step %d: cancel of a %q modification", i, o.Status)
				}
				pvc.Status = CancelledStatus(pvc.Status)
			case Modify:
				if inFlight != "" && inFlight != p.Target {
					t.Fatalf("step %d: call for %q while the call for %q may be in effect", i, p.Target, inFlight)
				}
				if p.Class == nil || p.Class.DriverName != driver {
					t.Fatalf("step %d: call with class %+v", i, p.Class)
				}
				pvc.Status = StartedStatus(pvc.Status, p.Target, now)
				inFlight = p.Target
				if steps[i]%3 == 2 {
					continue // the resizer stops during the call: no answer recorded
				}
				code := fuzzCodes[int(steps[i+1])%len(fuzzCodes)]
				if code == codes.OK {
					pvc.Status = SucceededStatus(pvc.Status, p.Target)
					confirmed[p.Target] = true
					inFlight = ""
					break
				}
				ce := ClassifyError(status.Error(code, "fuzz"))
				pvc.Status = FailedStatus(pvc.Status, p.Target, ce, now)
				if ce.Class.IsFinal() {
					inFlight = ""
				}
			}
			if c := pvc.Status.CurrentVolumeAttributesClassName; c != nil && !confirmed[*c] {
				t.Fatalf("step %d: current class %q was never confirmed by the driver", i, *c)
			}
			if o2 := Observe(pvc); o2.LastError != expand.ClassNone && o2.Status == "" {
				t.Fatalf("step %d: an error condition without a modification: %+v", i, pvc.Status)
			}
		}
	})
}
