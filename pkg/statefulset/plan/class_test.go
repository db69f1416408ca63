package plan

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// docs/design.md §3.10 rule 13: a template class is set on the PVC of an
// eligible replica in a class-only patch (the storage request and the size
// annotations untouched), with the class annotations; the replica is Ready
// once the resizer reports the volume has the class.
func TestRule13_SetTheClass(t *testing.T) {
	for _, policy := range policies {
		t.Run(string(policy), func(t *testing.T) {
			w := newWorld(1, policy, "data=1Gi")
			w.decide(t)
			w.setDesiredClass("data", "gold")
			d := w.decide(t)
			expect(t, "patches", patches(d), []string{"data-web-0:class:->gold"})
			expect(t, "reasons", reasons(d, "data"), []string{ReasonSettingClass})
			expectStatus(t, d, "data", 0, 0, 0)
			p := d.Patches()[0]
			if p.Resizes() || p.Decrease() {
				t.Errorf("class-only patch changes the request: %+v", p)
			}
			wantAnnotations(t, p.Annotations, map[string]string{AnnotationStatefulSet: testSTS, AnnotationModifiedClass: "gold", AnnotationPreModifyClass: ""})
			if len(p.RemoveAnnotations) != 0 {
				t.Errorf("removes annotations %v", p.RemoveAnnotations)
			}
			if got := p.Describe(); got != `the VolumeAttributesClass to "gold"` {
				t.Errorf("Describe() = %q", got)
			}

			w.apply(d)
			d = w.decide(t)
			expect(t, "patches once set", patches(d), nil)
			expect(t, "reasons once set", reasons(d, "data"), []string{ReasonModifying})
			expectStatus(t, d, "data", 0, 0, 0)

			w.finishModify("data-web-0")
			d = w.decide(t)
			expect(t, "reasons when modified", reasons(d, "data"), []string{ReasonResized})
			expect(t, "states when modified", states(d, "data"), []string{string(Ready)})
			expectStatus(t, d, "data", 1, 0, 1)
			expect(t, "events", events(d), nil)
		})
	}
}

// docs/design.md §3.10 rule 14: where the class stands, read from the PVC
// whose spec names the template's class.
func TestRule14_WhereTheClassStands(t *testing.T) {
	cases := []struct {
		name       string
		current    string // status.currentVolumeAttributesClassName
		status     corev1.PersistentVolumeClaimModifyVolumeStatus
		target     string // modifyVolumeStatus target; "" = the spec's class
		code, msg  string // ModifyVolumeError condition, when either is set
		wantState  State
		wantReason string
		wantEvent  string
		wantInMsg  string // in the status message; "" = no message
	}{
		{name: "set and current", current: "gold", wantState: Ready, wantReason: ReasonResized},
		{name: "not started", current: "silver", wantState: Pending, wantReason: ReasonModifying},
		{name: "in progress", current: "silver", status: corev1.PersistentVolumeClaimModifyVolumeInProgress, wantState: Pending, wantReason: ReasonModifying},
		{name: "infeasible", current: "silver", status: corev1.PersistentVolumeClaimModifyVolumeInfeasible, code: "InvalidArgument", msg: "tier gold is not offered",
			wantState: Failed, wantReason: ReasonModifyInfeasible, wantEvent: EventVolumeModifyInfeasible,
			wantInMsg: `data-web-0: cannot modify the volume to VolumeAttributesClass "gold": InvalidArgument: tier gold is not offered`},
		{name: "failing, retried", current: "silver", status: corev1.PersistentVolumeClaimModifyVolumeInProgress, code: "Internal", msg: "backend busy",
			wantState: Pending, wantReason: ReasonModifyFailing, wantEvent: EventVolumeModifyFailing,
			wantInMsg: `data-web-0: modification to VolumeAttributesClass "gold" failing, retried by the resizer: Internal: backend busy`},
		{name: "class missing or another driver's", current: "silver", status: corev1.PersistentVolumeClaimModifyVolumePending,
			wantState: Pending, wantReason: ReasonModifyPending, wantInMsg: `data-web-0: VolumeAttributesClass "gold" does not exist`},
		{name: "resizer still on another class", current: "silver", status: corev1.PersistentVolumeClaimModifyVolumeInfeasible, target: "bronze", code: "InvalidArgument", msg: "no",
			wantState: Pending, wantReason: ReasonModifying},
		{name: "current but a modification recorded", current: "gold", status: corev1.PersistentVolumeClaimModifyVolumeInProgress,
			wantState: Pending, wantReason: ReasonModifying},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(1, parallel, "data=1Gi")
			w.setClass("data-web-0", tc.current)
			w.pvcs["data-web-0"].Spec.VolumeAttributesClassName = ptr.To("gold")
			if tc.status != "" {
				w.markModify("data-web-0", tc.status, tc.code, tc.msg)
				if tc.target != "" {
					w.pvcs["data-web-0"].Status.ModifyVolumeStatus.TargetVolumeAttributesClassName = tc.target
				}
			}
			w.setTemplateClass("data", "gold")
			d := w.decide(t)
			rd := d.Templates[0].Replicas[0]
			if rd.State != tc.wantState || rd.Reason != tc.wantReason || rd.Patch != nil {
				t.Errorf("%s/%s (%q) patch %v, want %s/%s and no patch", rd.State, rd.Reason, rd.Message, rd.Patch, tc.wantState, tc.wantReason)
			}
			var event string
			if rd.Event != nil {
				event = rd.Event.Reason
			}
			if event != tc.wantEvent {
				t.Errorf("event %+v, want %q", rd.Event, tc.wantEvent)
			}
			ts := templateStatus(t, d, "data")
			if (tc.wantInMsg == "") != (ts.Message == "") || !strings.Contains(ts.Message, tc.wantInMsg) {
				t.Errorf("status message %q, want it to contain %q", ts.Message, tc.wantInMsg)
			}
			if want := int32(0); tc.wantState == Failed {
				want = 1
				if ts.InfeasibleReplicas != want {
					t.Errorf("infeasibleReplicas %d, want %d", ts.InfeasibleReplicas, want)
				}
			} else if ts.InfeasibleReplicas != want {
				t.Errorf("infeasibleReplicas %d, want %d", ts.InfeasibleReplicas, want)
			}
		})
	}
}

// The VolumeModifyFailing event is keyed by class and code, not message.
func TestModifyFailingEventKey(t *testing.T) {
	key := func(class, code, msg string) string {
		w := newWorld(1, parallel, "data=1Gi")
		w.pvcs["data-web-0"].Spec.VolumeAttributesClassName = ptr.To(class)
		w.markModify("data-web-0", corev1.PersistentVolumeClaimModifyVolumeInProgress, code, msg)
		w.setTemplateClass("data", class)
		ev := w.decide(t).Templates[0].Replicas[0].Event
		if ev == nil || ev.Reason != EventVolumeModifyFailing || ev.Key == "" {
			t.Fatalf("event %+v, want %s with a key", ev, EventVolumeModifyFailing)
		}
		return ev.Key
	}
	base := key("gold", "Internal", "busy, request 1")
	if k := key("gold", "Internal", "busy, request 2"); k != base {
		t.Errorf("another driver message: key %q != %q", k, base)
	}
	if k := key("gold", "Unavailable", "busy"); k == base {
		t.Errorf("another code: same key %q", k)
	}
	if k := key("silver", "Internal", "busy, request 1"); k == base {
		t.Errorf("another class: same key %q", k)
	}
}

// docs/design.md §3.10 rule 13, never fight a person: a class we set and
// someone changed since is not set back; the replica is Failed with the fix.
func TestRule13_ClassChangedByOthers(t *testing.T) {
	w := newWorld(2, ordered, "data=1Gi")
	w.setDesiredClass("data", "gold")
	w.apply(w.decide(t))
	w.finishModify("data-web-0")
	w.setClass("data-web-0", "bronze") // a person
	d := w.decide(t)
	expect(t, "patches", patches(d), nil)
	expect(t, "reasons", reasons(d, "data"), []string{ReasonClassChangedByOthers, ReasonWaitingForPreviousReplica})
	expect(t, "events", events(d), []string{"FailedToPatchPVC:data-web-0"})
	expectStatus(t, d, "data", 0, 1, 0)
	if msg := templateStatus(t, d, "data").Message; !strings.Contains(msg, `changed to "bronze"`) || !strings.Contains(msg, `set it to "gold" yourself`) {
		t.Errorf("message %q should name the class found and the fix", msg)
	}

	// A new class in the template starts a new episode from the person's class.
	w.setDesiredClass("data", "platinum")
	d = w.decide(t)
	expect(t, "patches", patches(d), []string{"data-web-0:class:bronze->platinum"})
	wantAnnotations(t, d.Patches()[0].Annotations, map[string]string{AnnotationModifiedClass: "platinum", AnnotationPreModifyClass: "bronze"})
}

// A class a person gave a PVC is left alone while the template names none.
func TestClassLeftAloneWithoutTemplateClass(t *testing.T) {
	w := newWorld(1, parallel, "data=1Gi")
	w.setClass("data-web-0", "gold")
	d := w.decide(t)
	expect(t, "patches", patches(d), nil)
	expect(t, "reasons", reasons(d, "data"), []string{ReasonResized})
	expectStatus(t, d, "data", 1, 0, 1)
}

// docs/design.md §3.10 rule 13: the class before the first change of an
// episode is kept while the PVC has the class we last wrote.
func TestRule13_PreKeptWithinTheEpisode(t *testing.T) {
	w := newWorld(1, parallel, "data=1Gi")
	w.setClass("data-web-0", "silver")
	w.setDesiredClass("data", "gold")
	d := w.decide(t)
	wantAnnotations(t, d.Patches()[0].Annotations, map[string]string{AnnotationPreModifyClass: "silver"})
	w.apply(d)
	w.markModify("data-web-0", corev1.PersistentVolumeClaimModifyVolumeInfeasible, "InvalidArgument", "no gold here")
	w.setDesiredClass("data", "bronze")
	d = w.decide(t)
	expect(t, "patches", patches(d), []string{"data-web-0:class:gold->bronze"})
	wantAnnotations(t, d.Patches()[0].Annotations, map[string]string{AnnotationModifiedClass: "bronze", AnnotationPreModifyClass: "silver"})
}

// docs/design.md §3.10 rule 13, rollback: the desire for a class is
// cancelled (the template names none again) while the class we set is on the
// PVC: it goes back to the class from before the episode, and the episode's
// annotations are removed, so the next decision leaves the class alone.
func TestRule13_RollbackToPre(t *testing.T) {
	w := newWorld(1, parallel, "data=1Gi")
	w.setClass("data-web-0", "silver")
	w.decide(t)
	w.setDesiredClass("data", "gold")
	w.apply(w.decide(t))
	w.markModify("data-web-0", corev1.PersistentVolumeClaimModifyVolumeInfeasible, "InvalidArgument", "no gold here")
	d := w.decide(t)
	expect(t, "reasons when infeasible", reasons(d, "data"), []string{ReasonModifyInfeasible})
	expect(t, "events when infeasible", events(d), []string{"VolumeModifyInfeasible:data-web-0"})
	expectStatus(t, d, "data", 0, 1, 0)

	w.setDesired("data", "") // Git reverted: the webhook dropped the desire
	d = w.decide(t)
	expect(t, "rollback", patches(d), []string{"data-web-0:class:gold->silver"})
	expect(t, "reasons", reasons(d, "data"), []string{ReasonRollingBackClass})
	p := d.Patches()[0]
	expect(t, "removed annotations", p.RemoveAnnotations, []string{AnnotationModifiedClass, AnnotationPreModifyClass})
	if _, ok := p.Annotations[AnnotationModifiedClass]; ok || p.Resizes() {
		t.Errorf("rollback patch %+v sets the class annotation or the request", p)
	}
	w.apply(d)
	for _, k := range []string{AnnotationModifiedClass, AnnotationPreModifyClass} {
		if _, ok := w.pvcs["data-web-0"].Annotations[k]; ok {
			t.Errorf("annotation %s still on the PVC after the rollback", k)
		}
	}
	w.finishModify("data-web-0") // rule 17 of §2.11: the resizer cancels
	d = w.decide(t)
	expect(t, "patches after the rollback", patches(d), nil)
	expect(t, "reasons after the rollback", reasons(d, "data"), []string{ReasonResized})
	expectStatus(t, d, "data", 1, 0, 1)

	// A person setting the class we once set is not rolled back again.
	w.setClass("data-web-0", "gold")
	expect(t, "patches for a person's class", patches(w.decide(t)), nil)
}

// Rollback to no class: the class is unset (the apiserver allows it while
// no class is current, as after an infeasible modification). When a class is
// current the apiserver would refuse: no patch, a note and an event, and the
// replica counts as Ready (the template asks for no class).
func TestRule13_RollbackToUnset(t *testing.T) {
	w := newWorld(2, parallel, "data=1Gi")
	w.setDesiredClass("data", "gold")
	w.apply(w.decide(t))
	w.markModify("data-web-0", corev1.PersistentVolumeClaimModifyVolumeInfeasible, "InvalidArgument", "no gold here")
	w.finishModify("data-web-1")
	w.setDesired("data", "")
	d := w.decide(t)
	expect(t, "patches", patches(d), []string{"data-web-0:class:gold->"})
	expect(t, "reasons", reasons(d, "data"), []string{ReasonRollingBackClass, ReasonClassCannotBeUnset})
	expect(t, "states", states(d, "data"), []string{string(Pending), string(Ready)})
	expect(t, "events", events(d), []string{"FailedToPatchPVC:data-web-1"})
	if got := d.Patches()[0].Describe(); got != `the VolumeAttributesClass from "gold" back to unset` {
		t.Errorf("Describe() = %q", got)
	}
	if msg := templateStatus(t, d, "data").Message; !strings.Contains(msg, `data-web-1: not unsetting the VolumeAttributesClass "gold"`) {
		t.Errorf("message %q should note the class that stays", msg)
	}
	w.apply(d)
	if c := w.pvcs["data-web-0"].Spec.VolumeAttributesClassName; c != nil {
		t.Errorf("class %q after the rollback, want unset", *c)
	}
}

// Size and class in one merge patch, with both sets of annotations; the
// replica is Ready only when both are done.
func TestSizeAndClassInOnePatch(t *testing.T) {
	w := newWorld(1, parallel, "data=1Gi")
	w.setDesired("data", "2Gi")
	w.templates[0].Spec.VolumeAttributesClassName = ptr.To("gold")
	d := w.decide(t)
	expect(t, "patches", patches(d), []string{"data-web-0:1Gi->2Gi class:->gold"})
	p := d.Patches()[0]
	wantAnnotations(t, p.Annotations, map[string]string{AnnotationStatefulSet: testSTS, AnnotationPreResizeStorage: "1Gi",
		AnnotationResizedStorage: "2Gi", AnnotationModifiedClass: "gold", AnnotationPreModifyClass: ""})
	if got := p.Describe(); got != `the request to 2Gi and the VolumeAttributesClass to "gold"` {
		t.Errorf("Describe() = %q", got)
	}
	if msg := d.Templates[0].Replicas[0].Message; !strings.Contains(msg, "patching the request") || !strings.Contains(msg, "setting the VolumeAttributesClass") {
		t.Errorf("message %q should say both", msg)
	}
	w.apply(d)
	w.finishResize("data-web-0")
	d = w.decide(t)
	expect(t, "reasons with the size done", reasons(d, "data"), []string{ReasonModifying})
	expectStatus(t, d, "data", 0, 0, 0)
	w.finishModify("data-web-0")
	expectStatus(t, w.decide(t), "data", 1, 0, 1)

	// A rejected combined patch names both changes.
	w = newWorld(1, parallel, "data=1Gi")
	w.setDesired("data", "2Gi")
	w.templates[0].Spec.VolumeAttributesClassName = ptr.To("gold")
	d = w.decide(t)
	d.RejectPatch("data-web-0", "forbidden: exceeded quota")
	if msg := d.Templates[0].Replicas[0].Message; msg != `patching the request to 2Gi and the VolumeAttributesClass to "gold" failed: forbidden: exceeded quota` {
		t.Errorf("rejected message %q", msg)
	}
}

// A class-only patch of a PVC this controller raised leaves the size
// annotations alone: the request is still ours to lower for a recovery.
func TestClassOnlyPatchLeavesSizeAnnotations(t *testing.T) {
	w := newWorld(1, parallel, "data=1Gi")
	w.setTemplate("data", "2Gi")
	w.apply(w.decide(t))
	w.finishResize("data-web-0")
	w.setTemplateClass("data", "gold")
	d := w.decide(t)
	expect(t, "patches", patches(d), []string{"data-web-0:class:->gold"})
	for _, k := range []string{AnnotationPreResizeStorage, AnnotationResizedStorage} {
		if _, ok := d.Patches()[0].Annotations[k]; ok {
			t.Errorf("class-only patch sets %s", k)
		}
	}
	w.apply(d)
	pvc := w.pvcs["data-web-0"]
	request := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	if request.String() != "2Gi" || !raisedByController(pvc, &request) {
		t.Errorf("request %s, annotations %v: the class patch changed the size bookkeeping", &request, pvc.Annotations)
	}
}

// docs/design.md §3.3 rule 3 applies to the class: OrderedReady holds the
// later replicas back until the class of the earlier one is done, and a
// failure reported by the resizer behind it is still shown.
func TestOrderedReadyHoldsBackOnClass(t *testing.T) {
	w := newWorld(3, ordered, "data=1Gi")
	w.setDesiredClass("data", "gold")
	d := w.decide(t)
	expect(t, "patches", patches(d), []string{"data-web-0:class:->gold"})
	expect(t, "reasons", reasons(d, "data"), []string{ReasonSettingClass, ReasonWaitingForPreviousReplica, ReasonWaitingForPreviousReplica})
	w.apply(d)
	d = w.decide(t)
	expect(t, "patches while modifying", patches(d), nil)
	expect(t, "reasons while modifying", reasons(d, "data"), []string{ReasonModifying, ReasonWaitingForPreviousReplica, ReasonWaitingForPreviousReplica})

	w.finishModify("data-web-0")
	d = w.decide(t)
	expect(t, "patches after replica 0", patches(d), []string{"data-web-1:class:->gold"})

	// Replica 2 was given the class before (by a Parallel pass, say) and the
	// driver refused it: the verdict is shown though the walk stops at 1.
	w.pvcs["data-web-2"].Spec.VolumeAttributesClassName = ptr.To("gold")
	w.markModify("data-web-2", corev1.PersistentVolumeClaimModifyVolumeInfeasible, "InvalidArgument", "no gold here")
	d = w.decide(t)
	expect(t, "reasons", reasons(d, "data"), []string{ReasonResized, ReasonSettingClass, ReasonModifyInfeasible})
	expect(t, "events", events(d), []string{"VolumeModifyInfeasible:data-web-2"})
}

func wantAnnotations(t *testing.T, got, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("annotation %s = %q (present %v), want %q", k, g, ok, v)
		}
	}
}
