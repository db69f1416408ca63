package plan

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// docs/design.md §3.2 rule 2, issue 24 finding 3: a revert in Git (the
// template raised to 20Gi, which statefulset-resizer set on the PVC, then
// back to 1Gi, the volume's capacity) cannot lower the request: the
// apiserver refuses a request that is not above the capacity. Such a replica
// is never Ready while the volume has not reached the request: Failed when
// the resizer's verdict on the request is infeasible (so `wait` exits 1),
// with the smallest template size that recovers; Pending while the resize
// goes on. A request a person raised keeps the capacity rule (Ready, noted).
func TestRule2_RevertBelowCapacityOfOurRequest(t *testing.T) {
	const failedMsg = "the request 20Gi that statefulset-resizer set is infeasible (OutOfRange: pool full) and it cannot be lowered to the template's 1Gi: " +
		"a request cannot go down to or below the volume's capacity 1Gi (volumes cannot shrink); the PVC keeps requesting 20Gi (retried, counted by quota): " +
		"set the template above the capacity, e.g. to 1025Mi (the smallest whole Mi above 1Gi), to have the request lowered"
	cases := []struct {
		name string
		resizerReport
		triedOther bool   // allocatedResources is another size than the request
		capacity   string // status.capacity; "" = 1Gi
		template   string // the reverted template; "" = 1Gi
		person     bool   // the request was changed by a person after our raise
		wantState  State
		wantReason string
		wantEvent  string   // "" = none
		wantMsg    []string // in the replica's message, and in the template's status message
		wantNode   bool     // the verdict is the node's: the message says what lowering does not undo
	}{
		{name: "controller infeasible",
			resizerReport: resizerReport{corev1.PersistentVolumeClaimControllerResizeInfeasible, corev1.PersistentVolumeClaimControllerResizeError, "OutOfRange", "pool full"},
			wantState:     Failed, wantReason: ReasonCannotLowerInfeasibleRequest, wantEvent: EventVolumeResizeInfeasible, wantMsg: []string{failedMsg}},
		{name: "node infeasible", wantNode: true,
			resizerReport: resizerReport{corev1.PersistentVolumeClaimNodeResizeInfeasible, corev1.PersistentVolumeClaimNodeResizeError, "", "resize2fs: no space"},
			wantState:     Failed, wantReason: ReasonCannotLowerInfeasibleRequest, wantEvent: EventVolumeResizeInfeasible,
			wantMsg: []string{"the request 20Gi that statefulset-resizer set is infeasible (resize2fs: no space)",
				"the node could not grow the file system: fix the node step, or, with a driver that expands on the node only, set the template above the capacity, e.g. to 1025Mi",
				"a driver with controller expansion has already grown the volume to 20Gi, which no request undoes"}},
		{name: "node infeasible, condition only", wantNode: true,
			resizerReport: resizerReport{"", corev1.PersistentVolumeClaimNodeResizeError, "InvalidArgument", "bad fs"},
			wantState:     Failed, wantReason: ReasonCannotLowerInfeasibleRequest, wantEvent: EventVolumeResizeInfeasible,
			wantMsg: []string{"infeasible (InvalidArgument: bad fs)", "the node could not grow the file system"}},
		{name: "infeasible code in the condition only (resizer without KEP-1790 state)",
			resizerReport: resizerReport{"", corev1.PersistentVolumeClaimControllerResizeError, "InvalidArgument", "bad size"},
			wantState:     Failed, wantReason: ReasonCannotLowerInfeasibleRequest, wantEvent: EventVolumeResizeInfeasible,
			wantMsg: []string{"infeasible (InvalidArgument: bad size)", "a request cannot go down to or below the volume's capacity 1Gi"}},
		{name: "the smallest whole Mi above an odd capacity", capacity: "1536Mi", template: "1536Mi",
			resizerReport: resizerReport{corev1.PersistentVolumeClaimControllerResizeInfeasible, corev1.PersistentVolumeClaimControllerResizeError, "OutOfRange", "pool full"},
			wantState:     Failed, wantReason: ReasonCannotLowerInfeasibleRequest, wantEvent: EventVolumeResizeInfeasible,
			wantMsg: []string{"capacity 1536Mi", "e.g. to 1537Mi (the smallest whole Mi above 1536Mi)"}},
		{name: "infeasible verdict on another size: not tried yet", triedOther: true,
			resizerReport: resizerReport{corev1.PersistentVolumeClaimControllerResizeInfeasible, corev1.PersistentVolumeClaimControllerResizeError, "OutOfRange", "pool full"},
			wantState:     Pending, wantReason: ReasonShrinkBelowCapacity,
			wantMsg: []string{"the volume is still changing", "the resizer's last attempt, for 30Gi, was infeasible (OutOfRange: pool full), it has not tried 20Gi yet", "e.g. to 1025Mi"}},
		{name: "expansion in progress",
			resizerReport: resizerReport{state: corev1.PersistentVolumeClaimControllerResizeInProgress},
			wantState:     Pending, wantReason: ReasonShrinkBelowCapacity,
			wantMsg: []string{"the request 20Gi that statefulset-resizer set stays above the template: it cannot be lowered to the template's 1Gi",
				"the volume is still changing (the resizer is expanding it to 20Gi); should the driver refuse 20Gi, set the template above the capacity, e.g. to 1025Mi"}},
		{name: "node step pending",
			resizerReport: resizerReport{state: corev1.PersistentVolumeClaimNodeResizePending},
			wantState:     Pending, wantReason: ReasonShrinkBelowCapacity, wantMsg: []string{"the volume is still changing (the resizer is expanding it to 20Gi)"}},
		{name: "failing, retried",
			resizerReport: resizerReport{corev1.PersistentVolumeClaimControllerResizeInProgress, corev1.PersistentVolumeClaimControllerResizeError, "Internal", "backend busy"},
			wantState:     Pending, wantReason: ReasonShrinkBelowCapacity,
			wantMsg: []string{"the volume is still changing (resize to 20Gi failing, retried by csi-resizer: Internal: backend busy)"}},
		{name: "expanded to the request: ready, noted", capacity: "20Gi",
			wantState: Ready, wantReason: ReasonShrinkBelowCapacity, wantEvent: EventFailedToPatchPVC,
			wantMsg: []string{"cannot lower the request from 20Gi to 1Gi: not above the volume's capacity 20Gi"}},
		{name: "a person changed the request since: theirs, counted by capacity", person: true,
			resizerReport: resizerReport{corev1.PersistentVolumeClaimControllerResizeInfeasible, corev1.PersistentVolumeClaimControllerResizeError, "OutOfRange", "pool full"},
			wantState:     Ready, wantReason: ReasonNotRaisedByController, wantEvent: EventFailedToPatchPVC,
			wantMsg: []string{"not lowering the request from 20Gi to the template's 1Gi: it was not raised by statefulset-resizer"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(1, parallel, "data=1Gi")
			w.setTemplate("data", "20Gi")
			w.apply(w.decide(t))
			if tc.person {
				w.pvcs["data-web-0"].Annotations[AnnotationResizedStorage] = "10Gi"
			}
			if tc.cond != "" || tc.state != "" {
				w.markInfeasible("data-web-0", tc.state, tc.cond, tc.code, tc.msg)
				if tc.cond == "" {
					w.pvcs["data-web-0"].Status.Conditions = nil
				}
			}
			if tc.triedOther {
				w.pvcs["data-web-0"].Status.AllocatedResources[corev1.ResourceStorage] = resourceMust("30Gi")
			}
			if tc.capacity != "" {
				w.pvcs["data-web-0"].Status.Capacity[corev1.ResourceStorage] = resourceMust(tc.capacity)
			}
			template := "1Gi"
			if tc.template != "" {
				template = tc.template
			}
			w.setTemplate("data", template) // the revert
			d := w.decide(t)
			expect(t, "patches", patches(d), nil)
			rd := d.Templates[0].Replicas[0]
			if rd.State != tc.wantState || rd.Reason != tc.wantReason {
				t.Errorf("replica: %s/%s, want %s/%s (%s)", rd.State, rd.Reason, tc.wantState, tc.wantReason, rd.Message)
			}
			if node := strings.Contains(rd.Message, "the node could not grow"); node != tc.wantNode {
				t.Errorf("message %q: says the node failed: %v, want %v", rd.Message, node, tc.wantNode)
			}
			ts := templateStatus(t, d, "data")
			for _, want := range tc.wantMsg {
				if !strings.Contains(rd.Message, want) || !strings.Contains(ts.Message, "data-web-0: ") {
					t.Errorf("message %q (status %q) lacks %q", rd.Message, ts.Message, want)
				}
			}
			switch {
			case tc.wantEvent == "" && rd.Event != nil:
				t.Errorf("event %+v, want none: the status message says it", rd.Event)
			case tc.wantEvent != "" && (rd.Event == nil || rd.Event.Reason != tc.wantEvent ||
				!strings.HasPrefix(rd.Event.Message, "PVC data-web-0 of pod web-0: ") || !strings.Contains(rd.Event.Message, tc.wantMsg[0])):
				t.Errorf("event %+v, want %s naming the PVC and %q", rd.Event, tc.wantEvent, tc.wantMsg[0])
			}
			// `wait` exits 1 on infeasibleReplicas, 0 only on all ready.
			wantReady, wantInfeasible := int32(0), int32(0)
			switch tc.wantState {
			case Ready:
				wantReady = 1
			case Failed:
				wantInfeasible = 1
			}
			if ts.ReadyReplicas != wantReady || ts.InfeasibleReplicas != wantInfeasible {
				t.Errorf("status %+v, want ready %d, infeasible %d", ts, wantReady, wantInfeasible)
			}
		})
	}
}

// The infeasible verdict on our request is the resizer's, so an OrderedReady
// replica held back behind an unfinished one still reports it (wait must
// not pass), and its event is deduplicated by request, template and
// capacity, not by the driver's message, which may change with each retry.
func TestRevertInfeasibleHeldBackAndEventKey(t *testing.T) {
	w := newWorld(2, ordered, "data=1Gi")
	w.setTemplate("data", "20Gi")
	w.apply(w.decide(t))
	w.finishResize("data-web-0")
	w.apply(w.decide(t))
	w.markInfeasible("data-web-1", corev1.PersistentVolumeClaimControllerResizeInfeasible,
		corev1.PersistentVolumeClaimControllerResizeError, "OutOfRange", "pool full, request 1")
	w.setTemplate("data", "1Gi")
	w.pods["web-0"].Status.Phase = corev1.PodPending // the walk stops at replica 0
	d := w.decide(t)
	expect(t, "reasons", reasons(d, "data"), []string{ReasonPodNotRunning, ReasonCannotLowerInfeasibleRequest})
	expect(t, "events", events(d), []string{"VolumeResizeInfeasible:data-web-1"})
	expectStatus(t, d, "data", 0, 1, 0)
	key := d.Templates[0].Replicas[1].Event.Key

	w.pvcs["data-web-1"].Status.Conditions[0].Message = "pool full, request 2"
	if got := w.decide(t).Templates[0].Replicas[1].Event; got.Key != key || key == "" {
		t.Errorf("event key %q after another driver message, want %q", got.Key, key)
	}
}

// The smallest template size that lowers a request is the smallest whole Mi
// above the capacity, when that is below the request.
func TestRecoveryHint(t *testing.T) {
	for _, tc := range []struct{ request, capacity, want string }{
		{"20Gi", "1Gi", "e.g. to 1025Mi"},
		{"20Gi", "1536Mi", "e.g. to 1537Mi"},
		{"20Gi", "1G", "e.g. to 954Mi"}, // 1e9 bytes is 953.67Mi
		{"20Gi", "1048577", "e.g. to 2Mi"},
		{"1025Mi", "1Gi", "set the template above the capacity 1Gi and below 1025Mi"},
	} {
		request, capacity := resource.MustParse(tc.request), resource.MustParse(tc.capacity)
		if got := recoveryHint(&request, &capacity); !strings.Contains(got, tc.want) {
			t.Errorf("recoveryHint(%s, %s) = %q, want it to contain %q", tc.request, tc.capacity, got, tc.want)
		}
	}
}
