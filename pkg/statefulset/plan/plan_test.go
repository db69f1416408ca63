package plan

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/status"
)

const (
	ordered  = appsv1.OrderedReadyPodManagement
	parallel = appsv1.ParallelPodManagement
)

var policies = []appsv1.PodManagementPolicyType{ordered, parallel}

// KEP-661 Test Plan: "E2E tests for volume expansion of PVC associated with
// statefulsets" and "A user increases the size of a PVC template with a
// single replica StatefulSet. The resize goes through. While the resize is in
// progress, the finishedReconciliationGeneration in the StatefulSet status
// for that PVC template is not increased to the generation of the
// StatefulSet."
func TestKEP661_IncreaseSingleReplica_FinishedOnlyAfterResize(t *testing.T) {
	for _, policy := range policies {
		t.Run(string(policy), func(t *testing.T) {
			w := newWorld(1, policy, "data=1Gi")
			d := w.decide(t)
			expect(t, "patches before the change", patches(d), nil)
			expectStatus(t, d, "data", 1, 0, 1)

			w.setTemplate("data", "2Gi") // generation 2
			d = w.decide(t)
			expect(t, "patches", patches(d), []string{"data-web-0:1Gi->2Gi"})
			expectStatus(t, d, "data", 0, 0, 1)

			w.apply(d)
			d = w.decide(t)
			expect(t, "patches while resizing", patches(d), nil)
			expect(t, "reasons while resizing", reasons(d, "data"), []string{ReasonResizing})
			expectStatus(t, d, "data", 0, 0, 1) // in progress: not finished for generation 2

			w.finishResize("data-web-0")
			d = w.decide(t)
			expect(t, "reasons after resize", reasons(d, "data"), []string{ReasonResized})
			expectStatus(t, d, "data", 1, 0, 2)
		})
	}
}

// KEP-661 Test Plan: "A user increases the size of a PVC template with
// multiple replicas. For both monotonic and burst roll out strategies." and
// "The readyReplicas in the StatefulSet status for that PVC template
// increases as the PVCs are resized." — monotonic (OrderedReady): one replica
// at a time, in ordinal order.
func TestKEP661_IncreaseMultipleReplicas_Monotonic(t *testing.T) {
	w := newWorld(3, ordered, "data=1Gi")
	w.decide(t)
	w.setTemplate("data", "2Gi")
	for i := int32(0); i < 3; i++ {
		d := w.decide(t)
		expect(t, "patches", patches(d), []string{PVCName("data", testSTS, i) + ":1Gi->2Gi"})
		expectStatus(t, d, "data", i, 0, 1)
		w.apply(d)

		// Replica i is resizing: replica i+1 must not be touched yet.
		d = w.decide(t)
		expect(t, "patches while replica is resizing", patches(d), nil)
		want := append(repeat(ReasonResized, int(i)), ReasonResizing)
		want = append(want, repeat(ReasonWaitingForPreviousReplica, int(2-i))...)
		expect(t, "reasons", reasons(d, "data"), want)

		w.finishResize(PVCName("data", testSTS, i))
	}
	d := w.decide(t)
	expectStatus(t, d, "data", 3, 0, 2)
	expect(t, "patches when done", patches(d), nil)
}

// KEP-661 Test Plan: "A user increases the size of a PVC template with
// multiple replicas. For both monotonic and burst roll out strategies." and
// "The readyReplicas ... increases as the PVCs are resized." — burst
// (Parallel): every replica at once.
func TestKEP661_IncreaseMultipleReplicas_Burst(t *testing.T) {
	w := newWorld(3, parallel, "data=1Gi")
	w.decide(t)
	w.setTemplate("data", "2Gi")
	d := w.decide(t)
	expect(t, "patches", patches(d), []string{"data-web-0:1Gi->2Gi", "data-web-1:1Gi->2Gi", "data-web-2:1Gi->2Gi"})
	w.apply(d)
	// Resizes finish out of order; readyReplicas follows.
	for i, name := range []string{"data-web-2", "data-web-0", "data-web-1"} {
		w.finishResize(name)
		d = w.decide(t)
		finished := int64(1)
		if i == 2 {
			finished = 2
		}
		expectStatus(t, d, "data", int32(i+1), 0, finished)
		expect(t, "patches", patches(d), nil)
	}
}

// KEP-661 Test Plan: "The resize (patching of the PVC object) begins only
// once the replica is running. (We can simulate a restart to the replica by
// changing one of its fields in its spec)". Running is enough; Ready is not
// required (a readiness probe may wait for the space).
func TestKEP661_PatchOnlyOnceReplicaIsRunning(t *testing.T) {
	w := newWorld(3, parallel, "data=1Gi")
	w.setTemplate("data", "2Gi")
	w.pods["web-0"].Status.Phase = corev1.PodPending // restarting
	w.pods["web-1"].DeletionTimestamp = &metav1.Time{}
	w.pods["web-2"].Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	d := w.decide(t)
	expect(t, "patches", patches(d), []string{"data-web-2:1Gi->2Gi"})
	expect(t, "reasons", reasons(d, "data"), []string{ReasonPodNotRunning, ReasonPodTerminating, ReasonExpanding})

	// The restarted replica comes back Running: now it is patched.
	w.apply(d)
	w.pods["web-0"].Status.Phase = corev1.PodRunning
	d = w.decide(t)
	expect(t, "patches after restart", patches(d), []string{"data-web-0:1Gi->2Gi"})

	// A missing pod (scaled-in or deleted) is never patched either.
	delete(w.pods, "web-1")
	d = w.decide(t)
	expect(t, "reasons", reasons(d, "data"), []string{ReasonExpanding, ReasonPodMissing, ReasonResizing})
}

// KEP-661 Test Plan: "Ensure statefulset controller revision works properly
// after resize." Only pods at the update revision are reconciled; resizing
// never touches the StatefulSet spec or revision (the plan only ever patches
// PVCs), so a later rollout is unaffected, and pods rolled to the new
// revision are reconciled as they arrive.
func TestKEP661_ControllerRevisionAfterResize(t *testing.T) {
	w := newWorld(2, ordered, "data=1Gi")
	w.setTemplate("data", "2Gi")
	w.sts.Status.UpdateRevision = "web-rev3" // a pod template rollout in progress
	w.pods["web-1"].Labels[appsv1.StatefulSetRevisionLabel] = "web-rev3"
	d := w.decide(t)
	expect(t, "patches", patches(d), nil)
	expect(t, "reasons", reasons(d, "data"), []string{ReasonPodNotUpdated, ReasonWaitingForPreviousReplica})

	w.pods["web-0"].Labels[appsv1.StatefulSetRevisionLabel] = "web-rev3"
	d = w.decide(t)
	expect(t, "patches after rollout", patches(d), []string{"data-web-0:1Gi->2Gi"})
	for _, p := range d.Patches() {
		if p.Namespace != testNS || !strings.HasPrefix(p.Name, "data-") {
			t.Errorf("patch outside the StatefulSet's PVCs: %+v", p)
		}
	}

	// A StatefulSet the StatefulSet controller has not observed yet has a
	// stale update revision: nothing is decided until it has.
	w.sts.Generation++
	d = w.decide(t)
	if d.Deferred != DeferredNotObserved || len(d.Patches()) != 0 {
		t.Errorf("unobserved generation: Deferred=%q patches=%v", d.Deferred, patches(d))
	}
}

// KEP-661 Test Plan: "A user decreases the size of a PVC template. The user
// should be able to successfully submit the modified StatefulSet. There
// should be an error message (event) generated on the StatefulSet object
// stating that the patching of the PVC object has failed. ... When
// increasing the size of the PVC template back to its original size, the
// error should be resolved".
//
// Where the KEP goes on ("readyReplicas field stays at 0", "the
// StatefulSet reconciliation should stay stuck on the first replica"), this
// product follows docs/design.md §3.5 instead, which wins over the KEP: readyReplicas
// counts replicas whose PVC capacity is at least the template size. A PVC
// left above a lowered template is such a replica: it is Ready (so the
// template is finished and `wait` exits 0), OrderedReady goes on past it, and
// the request that was not lowered is reported in the status message and
// with a FailedToPatchPVC event per PVC — not as infeasible.
func TestKEP661_DecreaseTemplate_ReportedThenResolved(t *testing.T) {
	for _, policy := range policies {
		t.Run(string(policy), func(t *testing.T) {
			w := newWorld(3, policy, "data=2Gi")
			w.decide(t)
			w.setTemplate("data", "1Gi")
			d := w.decide(t)
			expect(t, "patches", patches(d), nil) // never lower a PVC we did not raise
			expect(t, "reasons", reasons(d, "data"), repeat(ReasonNotRaisedByController, 3))
			expect(t, "states", states(d, "data"), repeat(string(Ready), 3))
			expect(t, "events", events(d), []string{"FailedToPatchPVC:data-web-0", "FailedToPatchPVC:data-web-1", "FailedToPatchPVC:data-web-2"})
			expectStatus(t, d, "data", 3, 0, w.sts.Generation)
			msg := templateStatus(t, d, "data").Message
			if !strings.Contains(msg, "data-web-0: not lowering the request from 2Gi to the template's 1Gi") {
				t.Errorf("status message %q does not name the PVC and why", msg)
			}

			w.setTemplate("data", "2Gi") // back to the original size
			d = w.decide(t)
			expect(t, "events after restore", events(d), nil)
			expect(t, "reasons after restore", reasons(d, "data"), repeat(ReasonResized, 3))
			expectStatus(t, d, "data", 3, 0, w.sts.Generation)
			if msg := templateStatus(t, d, "data").Message; msg != "" {
				t.Errorf("message after restore = %q, want empty", msg)
			}
		})
	}
}

// docs/design.md §3.5 over KEP-661: a replica left above a lowered template counts
// by its capacity. Below the template (a person raised the request and the
// resizer is still on it) it is pending, and with OrderedReady the replicas
// after it wait; once the capacity reaches the template it is Ready.
func TestAboveTemplateCountsByCapacity(t *testing.T) {
	w := newWorld(2, ordered, "data=1Gi")
	w.decide(t)
	// A person raises replica 0 to 8Gi; the resizer has not started.
	w.pvcs["data-web-0"].Spec.Resources.Requests[corev1.ResourceStorage] = resourceMust("8Gi")
	w.setTemplate("data", "2Gi")
	d := w.decide(t)
	expect(t, "patches", patches(d), nil)
	expect(t, "reasons", reasons(d, "data"), []string{ReasonNotRaisedByController, ReasonWaitingForPreviousReplica})
	expect(t, "states", states(d, "data"), []string{string(Pending), string(Pending)})
	expect(t, "events", events(d), []string{"FailedToPatchPVC:data-web-0"})
	expectStatus(t, d, "data", 0, 0, 1)

	// The resizer says 8Gi is infeasible: that is a failure to report.
	w.markInfeasible("data-web-0", corev1.PersistentVolumeClaimControllerResizeInfeasible,
		corev1.PersistentVolumeClaimControllerResizeError, "OutOfRange", "pool full")
	d = w.decide(t)
	expect(t, "reasons when infeasible", reasons(d, "data"), []string{ReasonResizeInfeasible, ReasonWaitingForPreviousReplica})
	expect(t, "events when infeasible", events(d), []string{"VolumeResizeInfeasible:data-web-0"})
	expectStatus(t, d, "data", 0, 1, 1)

	// It reaches 8Gi after all: Ready, and replica 1 is patched.
	w.finishResize("data-web-0")
	d = w.decide(t)
	expect(t, "reasons when expanded", reasons(d, "data"), []string{ReasonNotRaisedByController, ReasonExpanding})
	expect(t, "patches when expanded", patches(d), []string{"data-web-1:1Gi->2Gi"})
	expectStatus(t, d, "data", 1, 0, 1)
	if msg := templateStatus(t, d, "data").Message; !strings.Contains(msg, "data-web-0: not lowering the request from 8Gi") {
		t.Errorf("message %q", msg)
	}

	// OrderedReady: a Ready replica behind an unfinished one keeps its
	// status note but gets its event only when the walk reaches it.
	w = newWorld(2, ordered, "data=2Gi")
	w.decide(t)
	w.setTemplate("data", "1Gi")
	w.pods["web-0"].Status.Phase = corev1.PodPending
	d = w.decide(t)
	expect(t, "states behind a pending replica", states(d, "data"), []string{string(Pending), string(Ready)})
	expect(t, "events behind a pending replica", events(d), nil)
	if msg := templateStatus(t, d, "data").Message; !strings.Contains(msg, "data-web-1: not lowering") {
		t.Errorf("message %q", msg)
	}
}

// KEP-661 Test Plan: "The same scenario should be tested for having multiple
// PVC templates. ... But for the other PVC template, its
// finishedReconciliationGeneration ... is increased to the generation of the
// StatefulSet, and the readyReplicas field is updated to the number of
// replicas" — "The same test should be done for monotonic and burst roll out
// strategies." Templates are reconciled independently. The decreased template
// counts its replicas by capacity (docs/design.md §3.5, see
// TestKEP661_DecreaseTemplate_ReportedThenResolved): ready, with a note.
func TestKEP661_DecreaseOneOfMultipleTemplates(t *testing.T) {
	for _, policy := range policies {
		t.Run(string(policy), func(t *testing.T) {
			w := newWorld(2, policy, "data=2Gi", "logs=1Gi")
			w.decide(t)
			w.setTemplate("data", "1Gi") // decrease: generation 2
			w.setTemplate("logs", "3Gi") // increase: generation 3
			for i := 0; i < 4; i++ {     // enough rounds for OrderedReady
				d := w.decide(t)
				w.apply(d)
				for _, p := range d.Patches() {
					if strings.HasPrefix(p.Name, "data-") {
						t.Fatalf("decreased template's PVC patched: %+v", p)
					}
					w.finishResize(p.Name)
				}
			}
			d := w.decide(t)
			expectStatus(t, d, "logs", 2, 0, 3)
			expectStatus(t, d, "data", 2, 0, 3)
			if msg := templateStatus(t, d, "data").Message; !strings.Contains(msg, "not lowering") {
				t.Errorf("decreased template's message %q", msg)
			}
			if msg := templateStatus(t, d, "logs").Message; msg != "" {
				t.Errorf("increased template's message %q, want empty", msg)
			}
		})
	}
}

// KEP-661 Test Plan: "For monotonic, the StatefulSet reconciliation should
// stay stuck on the first replica when it encounters the patching error."
// Here the error is the apiserver rejecting the patch (e.g. quota): with
// OrderedReady nothing beyond the failing replica is planned.
func TestKEP661_PatchErrorMonotonic_StuckOnFirstReplica(t *testing.T) {
	w := newWorld(3, ordered, "data=1Gi")
	w.setTemplate("data", "2Gi")
	d := w.decide(t)
	expect(t, "patches", patches(d), []string{"data-web-0:1Gi->2Gi"})
	if !d.RejectPatch("data-web-0", `persistentvolumeclaims "data-web-0" is forbidden: exceeded quota`) {
		t.Fatal("RejectPatch found no planned patch")
	}
	expect(t, "patches after rejection", patches(d), nil)
	expect(t, "reasons", reasons(d, "data"), []string{ReasonPatchRejected, ReasonWaitingForPreviousReplica, ReasonWaitingForPreviousReplica})
	expect(t, "events", events(d), []string{"FailedToPatchPVC:data-web-0"})
	expectStatus(t, d, "data", 0, 1, 0)
	if msg := templateStatus(t, d, "data").Message; !strings.Contains(msg, "exceeded quota") {
		t.Errorf("message %q lacks the apiserver's error", msg)
	}
	if d.RejectPatch("data-web-1", "x") {
		t.Error("RejectPatch accepted a PVC without a planned patch")
	}
}

// KEP-661 Test Plan: "For burst, the StatefulSet reconciliation should
// continue to the next replica when it encounters the patching error."
func TestKEP661_PatchErrorBurst_ContinuesToNextReplica(t *testing.T) {
	w := newWorld(3, parallel, "data=1Gi")
	w.setTemplate("data", "2Gi")
	d := w.decide(t)
	d.RejectPatch("data-web-0", "invalid")
	expect(t, "patches after rejection", patches(d), []string{"data-web-1:1Gi->2Gi", "data-web-2:1Gi->2Gi"})
	expect(t, "events", events(d), []string{"FailedToPatchPVC:data-web-0"})
	expectStatus(t, d, "data", 0, 1, 0)
}

// KEP-661 Test Plan: "Test resize failure recovery after KEP 1790 has been
// implemented." The driver says OutOfRange; the failure is surfaced on the
// StatefulSet; OrderedReady stops there; the user lowers the template to a
// size above the capacity and the PVC we raised is lowered (recovery).
func TestKEP661_RecoveryFromInfeasibleExpansion(t *testing.T) {
	w := newWorld(2, ordered, "data=1Gi")
	w.setTemplate("data", "10Gi")
	d := w.decide(t)
	w.apply(d)
	w.markInfeasible("data-web-0", corev1.PersistentVolumeClaimControllerResizeInfeasible,
		corev1.PersistentVolumeClaimControllerResizeError, "OutOfRange", "requested 10Gi exceeds the pool's 8Gi")

	d = w.decide(t)
	expect(t, "patches while infeasible", patches(d), nil)
	expect(t, "reasons", reasons(d, "data"), []string{ReasonResizeInfeasible, ReasonWaitingForPreviousReplica})
	expect(t, "events", events(d), []string{"VolumeResizeInfeasible:data-web-0"})
	ev := d.Templates[0].Replicas[0].Event.Message
	if !strings.Contains(ev, "data-web-0") || !strings.Contains(ev, "OutOfRange: requested 10Gi exceeds the pool's 8Gi") {
		t.Errorf("event message %q lacks the PVC or the driver message", ev)
	}
	expectStatus(t, d, "data", 0, 1, 0)

	// Lowering to the capacity or below (a revert in Git) is not a recovery:
	// the apiserver would refuse it, so the PVC keeps requesting the refused
	// 10Gi. That is not done (docs/design.md §3.2 rule 2): the replica stays
	// infeasible, and the message names the smallest template that recovers.
	w.setTemplate("data", "1Gi")
	d = w.decide(t)
	expect(t, "patches to capacity", patches(d), nil)
	expect(t, "reasons", reasons(d, "data"), []string{ReasonCannotLowerInfeasibleRequest, ReasonResized})
	expect(t, "events", events(d), []string{"VolumeResizeInfeasible:data-web-0"})
	expectStatus(t, d, "data", 1, 1, 0)
	if msg := templateStatus(t, d, "data").Message; !strings.Contains(msg, "data-web-0: the request 10Gi that statefulset-resizer set is infeasible") ||
		!strings.Contains(msg, "e.g. to 1025Mi") {
		t.Errorf("message %q", msg)
	}

	// Lowering above the capacity recovers, keeping the original size.
	w.setTemplate("data", "5Gi")
	d = w.decide(t)
	expect(t, "recovery patch", patches(d), []string{"data-web-0:10Gi->5Gi"})
	p := d.Patches()[0]
	if !p.Decrease() || p.Annotations[AnnotationPreResizeStorage] != "1Gi" || p.Annotations[AnnotationResizedStorage] != "5Gi" {
		t.Errorf("recovery patch %+v", p)
	}
	w.apply(d)
	w.finishResize("data-web-0")
	d = w.decide(t)
	expect(t, "next replica", patches(d), []string{"data-web-1:1Gi->5Gi"})
	expectStatus(t, d, "data", 1, 0, 0)
}

// KEP-661 "Errors When Patching The PVC Object": "The storage class of the
// volume we're trying to resize doesn't allow for expansions." Known from the
// StorageClass, so reported without a doomed API call.
func TestKEP661_StorageClassWithoutExpansion(t *testing.T) {
	w := newWorld(2, parallel, "data=1Gi")
	w.pvcs["data-web-0"].Spec.StorageClassName = ptr.To(fixedSC)
	w.pvcs["data-web-1"].Spec.StorageClassName = ptr.To("not-in-cache")
	w.setTemplate("data", "2Gi")
	d := w.decide(t)
	expect(t, "patches", patches(d), []string{"data-web-1:1Gi->2Gi"}) // unknown class: the apiserver decides
	expect(t, "reasons", reasons(d, "data"), []string{ReasonExpansionNotAllowed, ReasonExpanding})
	expect(t, "events", events(d), []string{"FailedToPatchPVC:data-web-0"})
	if msg := templateStatus(t, d, "data").Message; !strings.Contains(msg, "StorageClass fixed does not allow volume expansion") {
		t.Errorf("message %q", msg)
	}
}

// KEP-661 "Errors When Patching The PVC Object": "The volume we're trying to
// resize is not bound" — and a running pod without its PVC.
func TestKEP661_PVCNotBoundOrMissing(t *testing.T) {
	w := newWorld(2, parallel, "data=1Gi")
	w.setTemplate("data", "2Gi")
	w.pvcs["data-web-0"].Status.Phase = corev1.ClaimPending
	delete(w.pvcs, "data-web-1")
	d := w.decide(t)
	expect(t, "patches", patches(d), nil)
	expect(t, "reasons", reasons(d, "data"), []string{ReasonPVCNotBound, ReasonPVCMissing})
}

// docs/design.md §3 rule 2: a PVC a person raised above the template is never
// lowered, even when lowering would be allowed by the API; once a person
// changes a request we raised, it is theirs.
func TestRule2_NeverLowerWhatAPersonRaised(t *testing.T) {
	w := newWorld(1, parallel, "data=1Gi")
	w.setTemplate("data", "4Gi")
	d := w.decide(t)
	w.apply(d)
	// A person raises it further while the expansion is still pending.
	w.pvcs["data-web-0"].Spec.Resources.Requests[corev1.ResourceStorage] = resourceMust("8Gi")
	w.setTemplate("data", "2Gi")
	d = w.decide(t)
	expect(t, "patches", patches(d), nil)
	expect(t, "reasons", reasons(d, "data"), []string{ReasonNotRaisedByController})
	expect(t, "events", events(d), []string{"FailedToPatchPVC:data-web-0"})
	expectStatus(t, d, "data", 0, 0, 0) // capacity 1Gi: resizing towards 8Gi, not infeasible

	// Raising again: the episode restarts from the person's size.
	w.setTemplate("data", "16Gi")
	d = w.decide(t)
	expect(t, "patches", patches(d), []string{"data-web-0:8Gi->16Gi"})
	if pre := d.Patches()[0].Annotations[AnnotationPreResizeStorage]; pre != "8Gi" {
		t.Errorf("pre-resize annotation %q, want 8Gi", pre)
	}
}

// Annotations on the first and on a later patch of the same episode.
func TestPatchAnnotations(t *testing.T) {
	w := newWorld(1, parallel, "data=1Gi")
	w.setTemplate("data", "2Gi")
	d := w.decide(t)
	p := d.Patches()[0]
	want := map[string]string{AnnotationStatefulSet: testSTS, AnnotationPreResizeStorage: "1Gi", AnnotationResizedStorage: "2Gi"}
	for k, v := range want {
		if p.Annotations[k] != v {
			t.Errorf("first patch annotation %s=%q, want %q", k, p.Annotations[k], v)
		}
	}
	if p.ResourceVersion != "1" || p.Decrease() {
		t.Errorf("first patch %+v", p)
	}
	w.apply(d)
	w.setTemplate("data", "3Gi")
	d = w.decide(t)
	if pre := d.Patches()[0].Annotations[AnnotationPreResizeStorage]; pre != "1Gi" {
		t.Errorf("second raise of the same episode: pre-resize %q, want 1Gi", pre)
	}
}

// docs/design.md §3: a StatefulSet deleted with --cascade=orphan and
// re-created (new UID, generation 1) with a bigger template is the same
// workload: its orphaned or re-adopted pods and existing PVCs are resized.
func TestOrphanRecreateIsTheSameWorkload(t *testing.T) {
	w := newWorld(2, ordered, "data=1Gi")
	w.decide(t)
	// Re-created object: new UID, generation 1, our annotation gone.
	w.sts.UID = "uid-2"
	w.sts.Generation, w.sts.Status.ObservedGeneration = 1, 1
	w.sts.Annotations = nil
	w.sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[corev1.ResourceStorage] = resourceMust("2Gi")
	w.pods["web-0"].OwnerReferences = nil // not adopted yet
	w.pods["web-1"].OwnerReferences[0].UID = "uid-2"
	d := w.decide(t)
	expect(t, "patches", patches(d), []string{"data-web-0:1Gi->2Gi"})

	// A pod with the right name controlled by something else is not ours.
	w.pods["web-0"].OwnerReferences = []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "other", Controller: ptr.To(true)}}
	d = w.decide(t)
	expect(t, "reasons", reasons(d, "data"), []string{ReasonPodNotOwned, ReasonWaitingForPreviousReplica})
	// Nor is one whose labels do not match the selector.
	w.pods["web-0"].OwnerReferences = nil
	w.pods["web-0"].Labels["app"] = "other"
	d = w.decide(t)
	expect(t, "reasons", reasons(d, "data"), []string{ReasonPodNotOwned, ReasonWaitingForPreviousReplica})
}

// resizerReport is what the resizer or the kubelet writes on a PVC: a KEP-1790
// state and an error condition with its code and message.
type resizerReport struct {
	state     corev1.ClaimResourceStatus
	cond      corev1.PersistentVolumeClaimConditionType
	code, msg string
}

// KEP-1790 states and conditions as the resizer and kubelet write them.
func TestInfeasibilityDetection(t *testing.T) {
	cases := []struct {
		name string
		resizerReport
		wantReason string
		wantDetail string
	}{
		{"controller infeasible", resizerReport{corev1.PersistentVolumeClaimControllerResizeInfeasible, corev1.PersistentVolumeClaimControllerResizeError,
			"OutOfRange", "too big"}, ReasonResizeInfeasible, "OutOfRange: too big"},
		{"node infeasible", resizerReport{corev1.PersistentVolumeClaimNodeResizeInfeasible, corev1.PersistentVolumeClaimNodeResizeError,
			"", "resize2fs failed"}, ReasonResizeInfeasible, "resize2fs failed"},
		{"infeasible code in condition only (legacy resizer)", resizerReport{"", corev1.PersistentVolumeClaimControllerResizeError,
			"InvalidArgument", "bad size"}, ReasonResizeInfeasible, "InvalidArgument: bad size"},
		{"final but not infeasible error: failing, retried", resizerReport{corev1.PersistentVolumeClaimControllerResizeInProgress,
			corev1.PersistentVolumeClaimControllerResizeError, "Internal", "boom"}, ReasonResizeFailing, "Internal: boom"},
		{"transient error: failing, retried", resizerReport{corev1.PersistentVolumeClaimControllerResizeInProgress,
			corev1.PersistentVolumeClaimControllerResizeError, "Uncertain", "timeout"}, ReasonResizeFailing, "Uncertain: timeout"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(1, parallel, "data=1Gi")
			w.setTemplate("data", "2Gi")
			w.apply(w.decide(t))
			w.markInfeasible("data-web-0", tc.state, tc.cond, tc.code, tc.msg)
			d := w.decide(t)
			rd := d.Templates[0].Replicas[0]
			if rd.Reason != tc.wantReason || !strings.Contains(rd.Message, tc.wantDetail) {
				t.Errorf("got %s %q, want %s containing %q", rd.Reason, rd.Message, tc.wantReason, tc.wantDetail)
			}
			wantEvent := map[string]string{ReasonResizeInfeasible: EventVolumeResizeInfeasible, ReasonResizeFailing: EventVolumeResizeFailing}[tc.wantReason]
			if (rd.Event == nil && wantEvent != "") || (rd.Event != nil && rd.Event.Reason != wantEvent) {
				t.Errorf("event = %+v, want reason %q", rd.Event, wantEvent)
			}
		})
	}
}

// KEP-661 Test Plan, feature disabled: "No change to existing StatefulSet
// functionality" — when templates and PVCs agree there is nothing to do, and
// a StatefulSet without templates only gets an empty status. (The other two
// bullets of that group, "Validation that doesn't allow PVC template to
// change is still intact" and "The new StatefulSet status field is not
// exposed", are the apiserver's: this controller has no feature gate, never
// changes validation, and writes an annotation, never .status — see the
// controller test TestRunOrderedReadyEndToEnd.)
func TestNoChangeWhenNothingToDo(t *testing.T) {
	w := newWorld(3, ordered, "data=1Gi", "logs=5Gi")
	d := w.decide(t)
	expect(t, "patches", patches(d), nil)
	expect(t, "events", events(d), nil)
	expectStatus(t, d, "data", 3, 0, 1)
	expectStatus(t, d, "logs", 3, 0, 1)

	w = newWorld(2, parallel)
	d = w.decide(t)
	if st := d.Status(); len(st.Templates) != 0 || st.ObservedGeneration != 1 {
		t.Errorf("status %+v", st)
	}
}

func TestReplicaCountsAndOrdinals(t *testing.T) {
	// Scaled to zero: nothing to reconcile, finished (KEP: reconciled when
	// scaled up again, which bumps the generation).
	w := newWorld(0, ordered, "data=1Gi")
	w.setTemplate("data", "2Gi")
	d := w.decide(t)
	expectStatus(t, d, "data", 0, 0, 2)

	// spec.replicas unset means 1.
	w = newWorld(1, ordered, "data=1Gi")
	w.sts.Spec.Replicas = nil
	d = w.decide(t)
	expectStatus(t, d, "data", 1, 0, 1)

	// spec.ordinals.start shifts pod and PVC names.
	w = newWorld(0, parallel, "data=1Gi")
	w.sts.Spec.Replicas = ptr.To[int32](2)
	w.sts.Spec.Ordinals = &appsv1.StatefulSetOrdinals{Start: 5}
	w.addReplica(5)
	w.addReplica(6)
	w.setTemplate("data", "2Gi")
	d = w.decide(t)
	expect(t, "patches", patches(d), []string{"data-web-5:1Gi->2Gi", "data-web-6:1Gi->2Gi"})

	// Pods beyond spec.replicas (scale-in in progress) are ignored.
	w = newWorld(3, parallel, "data=1Gi")
	w.sts.Spec.Replicas = ptr.To[int32](2)
	w.setTemplate("data", "2Gi")
	d = w.decide(t)
	expect(t, "patches", patches(d), []string{"data-web-0:1Gi->2Gi", "data-web-1:1Gi->2Gi"})
}

func TestStatusMessageIsBounded(t *testing.T) {
	w := newWorld(5, parallel, "data=1Gi")
	w.sts.Spec.VolumeClaimTemplates[0].Spec.StorageClassName = ptr.To(fixedSC)
	for _, pvc := range w.pvcs {
		pvc.Spec.StorageClassName = ptr.To(fixedSC)
	}
	w.setTemplate("data", "2Gi")
	d := w.decide(t)
	msg := templateStatus(t, d, "data").Message
	if strings.Count(msg, "does not allow volume expansion") != maxMessageEntries || !strings.HasSuffix(msg, "and 2 more") {
		t.Errorf("message %q", msg)
	}
}

func TestPreviousStatusIsOnlyTrustedForThisObject(t *testing.T) {
	w := newWorld(1, parallel, "data=1Gi")
	w.setTemplate("data", "2Gi") // generation 2
	// A document of this uid but a later generation than the object's (the
	// uid check is TestCopiedStatusOfAReplacedObjectIsIgnored).
	value, _ := status.VolumeClaimTemplates{ObservedGeneration: 9, UID: w.sts.UID, Templates: []status.Template{
		{TemplateName: "data", ReadyReplicas: 1, FinishedReconciliationGeneration: 2},
	}}.Encode()
	w.sts.Annotations = map[string]string{status.Annotation: value}
	d := w.decide(t)
	expectStatus(t, d, "data", 0, 0, 0)

	// An unparsable document is ours to rewrite.
	w.sts.Annotations[status.Annotation] = "{"
	d = w.decide(t)
	expectStatus(t, d, "data", 0, 0, 0)
}

// The orphan-recreate flow done from an exported manifest (kubectl get -o
// yaml, edit the size, delete --cascade=orphan, apply): the new object is at
// generation 1 like the old one and carries the old object's status
// annotation, "finished at generation 1". That document describes another
// object (another uid); trusted, it would report the new template finished
// before any PVC was resized. A document without a uid is not trusted either.
func TestCopiedStatusOfAReplacedObjectIsIgnored(t *testing.T) {
	for name, copied := range map[string]string{
		"old object's document": "",
		"document without uid": `{"observedGeneration":1,"templates":[{"templateName":"data","readyReplicas":2,` +
			`"finishedReconciliationGeneration":1,"infeasibleReplicas":0}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(2, parallel, "data=1Gi")
			expectStatus(t, w.decide(t), "data", 2, 0, 1)
			if copied == "" {
				copied = w.sts.Annotations[status.Annotation]
			}
			// Re-created: new uid, generation 1, the old annotation copied.
			w.sts.UID = "uid-2"
			w.sts.Generation, w.sts.Status.ObservedGeneration = 1, 1
			w.sts.Annotations = map[string]string{status.Annotation: copied}
			w.sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[corev1.ResourceStorage] = resourceMust("2Gi")
			d := w.decide(t)
			expect(t, "patches", patches(d), []string{"data-web-0:1Gi->2Gi", "data-web-1:1Gi->2Gi"})
			expectStatus(t, d, "data", 0, 0, 0)
			if st := d.Status(); st.UID != "uid-2" {
				t.Errorf("status written for uid %q, want the new object's uid-2", st.UID)
			}
			// From then on the document is the new object's own.
			w.apply(d)
			w.finishResize("data-web-0", "data-web-1")
			expectStatus(t, w.decide(t), "data", 2, 0, 1)
		})
	}
}

func TestInvalidSelectorIsDeferred(t *testing.T) {
	w := newWorld(1, parallel, "data=1Gi")
	w.sts.Spec.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Bogus"}}}
	if d := Decide(w.input()); d.Deferred != DeferredInvalidSelector {
		t.Errorf("Deferred = %q", d.Deferred)
	}
}

func TestTemplateWithoutSize(t *testing.T) {
	w := newWorld(1, parallel, "data=1Gi")
	delete(w.sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests, corev1.ResourceStorage)
	d := w.decide(t)
	expect(t, "reasons", reasons(d, "data"), []string{ReasonNoSizeInTemplate})
	expect(t, "patches", patches(d), nil)
}

// A KEP-1790 infeasible state describes the size the resizer tried (allocatedResources).
// Once the request changed — lowered by our recovery patch, or by a person — the resizer will
// try the new size, and until it has, the old verdict says nothing about it: the replica is
// pending, with no VolumeResizeInfeasible event and nothing for `wait` to fail on.
func TestInfeasibleVerdictIsForTheSizeTried(t *testing.T) {
	w := newWorld(1, parallel, "data=1Gi")
	w.setTemplate("data", "10Gi")
	w.apply(w.decide(t))
	w.markInfeasible("data-web-0", corev1.PersistentVolumeClaimControllerResizeInfeasible,
		corev1.PersistentVolumeClaimControllerResizeError, "OutOfRange", "pool full")
	d := w.decide(t)
	expect(t, "reasons while infeasible", reasons(d, "data"), []string{ReasonResizeInfeasible})

	// Recovery: our patch lowers the request; the resizer has not picked it up yet.
	w.setTemplate("data", "5Gi")
	d = w.decide(t)
	expect(t, "recovery patch", patches(d), []string{"data-web-0:10Gi->5Gi"})
	w.apply(d)
	d = w.decide(t)
	expect(t, "reasons before the resizer retried", reasons(d, "data"), []string{ReasonResizing})
	expect(t, "events before the resizer retried", events(d), nil)
	expectStatus(t, d, "data", 0, 0, 0)
	if msg := d.Templates[0].Replicas[0].Message; !strings.Contains(msg, "10Gi") || !strings.Contains(msg, "pool full") {
		t.Errorf("message %q should say the last attempt, for 10Gi, failed", msg)
	}

	// The resizer tries 5Gi and the driver refuses that too: infeasible again, for 5Gi.
	w.markInfeasible("data-web-0", corev1.PersistentVolumeClaimControllerResizeInfeasible,
		corev1.PersistentVolumeClaimControllerResizeError, "OutOfRange", "pool still full")
	d = w.decide(t)
	expect(t, "reasons when 5Gi is infeasible", reasons(d, "data"), []string{ReasonResizeInfeasible})
	expect(t, "events when 5Gi is infeasible", events(d), []string{"VolumeResizeInfeasible:data-web-0"})
}

// docs/design.md §3 rule 4: the ControllerResizeError/NodeResizeError conditions are
// surfaced on the StatefulSet, also when they are not infeasible. Such a
// replica (csi-resizer or the kubelet retries) is pending, not infeasible —
// `wait` must not give up on it — but its PVC and error are in the template's
// status message and a VolumeResizeFailing event.
func TestFailingResizeIsReportedNotInfeasible(t *testing.T) {
	cases := []struct {
		name string
		resizerReport
		triedOther  bool // allocatedResources is another size than the request
		wantReason  string
		wantMessage string // the template's status message; "" = none
	}{
		{name: "final error, state in progress",
			resizerReport: resizerReport{state: corev1.PersistentVolumeClaimControllerResizeInProgress, cond: corev1.PersistentVolumeClaimControllerResizeError, code: "Internal", msg: "backend busy"},
			wantReason:    ReasonResizeFailing, wantMessage: "data-web-1: resize to 10Gi failing, retried by csi-resizer: Internal: backend busy"},
		{name: "transient error",
			resizerReport: resizerReport{state: corev1.PersistentVolumeClaimControllerResizeInProgress, cond: corev1.PersistentVolumeClaimControllerResizeError, code: "DeadlineExceeded", msg: "timed out"},
			wantReason:    ReasonResizeFailing, wantMessage: "data-web-1: resize to 10Gi failing, retried by csi-resizer: DeadlineExceeded: timed out"},
		{name: "error without gRPC status",
			resizerReport: resizerReport{state: corev1.PersistentVolumeClaimControllerResizeInProgress, cond: corev1.PersistentVolumeClaimControllerResizeError, code: "Uncertain", msg: "connection reset"},
			wantReason:    ReasonResizeFailing, wantMessage: "data-web-1: resize to 10Gi failing, retried by csi-resizer: Uncertain: connection reset"},
		{name: "condition only (resizer without KEP-1790 state)",
			resizerReport: resizerReport{cond: corev1.PersistentVolumeClaimControllerResizeError, code: "FailedPrecondition", msg: "volume in use"},
			wantReason:    ReasonResizeFailing, wantMessage: "data-web-1: resize to 10Gi failing, retried by csi-resizer: FailedPrecondition: volume in use"},
		{name: "node error, retried by the kubelet",
			resizerReport: resizerReport{state: corev1.PersistentVolumeClaimNodeResizeInProgress, cond: corev1.PersistentVolumeClaimNodeResizeError, code: "", msg: "resize2fs: device busy"},
			wantReason:    ReasonResizeFailing, wantMessage: "data-web-1: resize to 10Gi failing, retried by the kubelet: resize2fs: device busy"},
		{name: "error from an attempt at another size: not yet about this one",
			resizerReport: resizerReport{state: corev1.PersistentVolumeClaimControllerResizeInProgress, cond: corev1.PersistentVolumeClaimControllerResizeError, code: "Internal", msg: "backend busy"}, triedOther: true,
			wantReason: ReasonResizing},
	}
	for _, tc := range cases {
		for _, policy := range policies {
			t.Run(tc.name+"/"+string(policy), func(t *testing.T) {
				w := newWorld(3, policy, "data=1Gi")
				w.setTemplate("data", "10Gi")
				for i := 0; i < 3; i++ { // enough rounds for OrderedReady
					w.apply(w.decide(t))
					w.finishResize("data-web-0")
				}
				w.markInfeasible("data-web-1", tc.state, tc.cond, tc.code, tc.msg)
				if tc.triedOther {
					w.pvcs["data-web-1"].Status.AllocatedResources[corev1.ResourceStorage] = resourceMust("20Gi")
				}
				if policy == parallel {
					w.pvcs["data-web-2"].Status.Capacity[corev1.ResourceStorage] = resourceMust("10Gi")
				}
				d := w.decide(t)
				rd := d.Templates[0].Replicas[1]
				if rd.State != Pending || rd.Reason != tc.wantReason || rd.Patch != nil {
					t.Errorf("replica 1: %s/%s patch %v, want Pending/%s and no patch", rd.State, rd.Reason, rd.Patch, tc.wantReason)
				}
				ts := templateStatus(t, d, "data")
				if ts.InfeasibleReplicas != 0 || ts.FinishedReconciliationGeneration == d.Generation {
					t.Errorf("status %+v: a retried failure counted as infeasible or finished", ts)
				}
				if ts.Message != tc.wantMessage {
					t.Errorf("message %q, want %q", ts.Message, tc.wantMessage)
				}
				if tc.wantReason == ReasonResizeFailing {
					expect(t, "events", events(d), []string{"VolumeResizeFailing:data-web-1"})
					if want := "PVC data-web-1 of pod web-1: " + strings.TrimPrefix(tc.wantMessage, "data-web-1: "); rd.Event.Message != want {
						t.Errorf("event message %q, want %q", rd.Event.Message, want)
					}
				} else {
					expect(t, "events", events(d), nil)
					if !strings.Contains(rd.Message, "the last attempt, for 20Gi, failed: Internal: backend busy") {
						t.Errorf("replica message %q should say the error was about 20Gi", rd.Message)
					}
				}
				// OrderedReady stops at the failing replica, like at any unfinished one.
				if policy == ordered {
					expect(t, "reasons", reasons(d, "data")[2:], []string{ReasonWaitingForPreviousReplica})
				}
			})
		}
	}
}

// The VolumeResizeFailing event is deduplicated by its Key (size, condition
// and code), not by its message: a driver message that changes with every
// retry (a request id) is the same problem; another code or size is not.
func TestFailingEventKey(t *testing.T) {
	key := func(size, code, msg string) string {
		w := newWorld(1, parallel, "data=1Gi")
		w.setTemplate("data", size)
		w.apply(w.decide(t))
		w.markInfeasible("data-web-0", corev1.PersistentVolumeClaimControllerResizeInProgress,
			corev1.PersistentVolumeClaimControllerResizeError, code, msg)
		ev := w.decide(t).Templates[0].Replicas[0].Event
		if ev == nil || ev.Reason != EventVolumeResizeFailing || ev.Key == "" {
			t.Fatalf("event %+v, want VolumeResizeFailing with a key", ev)
		}
		return ev.Key
	}
	base := key("10Gi", "Internal", "busy, request 1")
	if k := key("10Gi", "Internal", "busy, request 2"); k != base {
		t.Errorf("another driver message: key %q != %q", k, base)
	}
	if k := key("10Gi", "Unavailable", "busy, request 1"); k == base {
		t.Errorf("another code: same key %q", k)
	}
	if k := key("20Gi", "Internal", "busy, request 1"); k == base {
		t.Errorf("another size: same key %q", k)
	}
}

// A failing replica behind an unfinished one (OrderedReady) is still reported:
// like an infeasible verdict it is an observed fact, not an action of ours.
func TestFailingReplicaHeldBackIsStillReported(t *testing.T) {
	w := newWorld(2, ordered, "data=1Gi")
	w.setTemplate("data", "10Gi")
	w.apply(w.decide(t))
	w.finishResize("data-web-0")
	w.apply(w.decide(t))
	w.markInfeasible("data-web-1", corev1.PersistentVolumeClaimControllerResizeInProgress,
		corev1.PersistentVolumeClaimControllerResizeError, "Internal", "backend busy")
	w.pods["web-0"].Status.Phase = corev1.PodPending // replica 0 restarts: the walk stops there
	d := w.decide(t)
	expect(t, "reasons", reasons(d, "data"), []string{ReasonPodNotRunning, ReasonResizeFailing})
	expect(t, "events", events(d), []string{"VolumeResizeFailing:data-web-1"})
	expect(t, "patches", patches(d), nil)
	if msg := templateStatus(t, d, "data").Message; !strings.Contains(msg, "data-web-1: resize to 10Gi failing") {
		t.Errorf("message %q", msg)
	}
}

// The status message orders infeasible replicas first, then failing ones,
// then requests left above the template, and stays bounded with failing
// replicas in it.
func TestStatusMessageOrderAndBoundWithFailingReplicas(t *testing.T) {
	w := newWorld(5, parallel, "data=1Gi")
	w.setTemplate("data", "10Gi")
	w.apply(w.decide(t))
	// web-0 and web-1 failing (in ordinal order), web-4 infeasible.
	for _, name := range []string{"data-web-0", "data-web-1"} {
		w.markInfeasible(name, corev1.PersistentVolumeClaimControllerResizeInProgress,
			corev1.PersistentVolumeClaimControllerResizeError, "Internal", "busy")
	}
	w.markInfeasible("data-web-4", corev1.PersistentVolumeClaimControllerResizeInfeasible,
		corev1.PersistentVolumeClaimControllerResizeError, "OutOfRange", "pool full")
	// web-3 was raised by a person above the template, and is not there yet.
	w.pvcs["data-web-3"].Spec.Resources.Requests[corev1.ResourceStorage] = resourceMust("20Gi")
	w.pvcs["data-web-3"].Annotations = nil
	d := w.decide(t)
	expect(t, "reasons", reasons(d, "data"), []string{ReasonResizeFailing, ReasonResizeFailing, ReasonResizing, ReasonNotRaisedByController, ReasonResizeInfeasible})
	ts := templateStatus(t, d, "data")
	if ts.InfeasibleReplicas != 1 {
		t.Errorf("infeasibleReplicas %d, want 1 (failing replicas are not infeasible)", ts.InfeasibleReplicas)
	}
	parts := strings.Split(ts.Message, "; ")
	var heads []string
	for _, p := range parts {
		heads = append(heads, strings.SplitN(p, ":", 2)[0])
	}
	expect(t, "message entries", heads, []string{"data-web-4", "data-web-0", "data-web-1", "and 1 more"})

	// All five failing: three named, then "and 2 more".
	w = newWorld(5, parallel, "data=1Gi")
	w.setTemplate("data", "10Gi")
	w.apply(w.decide(t))
	for name := range w.pvcs {
		w.markInfeasible(name, corev1.PersistentVolumeClaimControllerResizeInProgress,
			corev1.PersistentVolumeClaimControllerResizeError, "Internal", "busy")
	}
	msg := templateStatus(t, w.decide(t), "data").Message
	if strings.Count(msg, "failing, retried by csi-resizer") != maxMessageEntries || !strings.HasSuffix(msg, "; and 2 more") {
		t.Errorf("message %q, want %d entries and \"and 2 more\"", msg, maxMessageEntries)
	}
}

// A request a person raised above the template, that the resizer keeps
// failing to reach: its status message entry (a request left above the
// template) says why the capacity does not move; its one event stays the
// FailedToPatchPVC, and it is not infeasible.
func TestAboveTemplateFailingResizeIsInMessage(t *testing.T) {
	w := newWorld(1, parallel, "data=1Gi")
	w.pvcs["data-web-0"].Spec.Resources.Requests[corev1.ResourceStorage] = resourceMust("8Gi")
	w.markInfeasible("data-web-0", corev1.PersistentVolumeClaimControllerResizeInProgress,
		corev1.PersistentVolumeClaimControllerResizeError, "Internal", "backend busy")
	w.setTemplate("data", "2Gi")
	d := w.decide(t)
	expect(t, "reasons", reasons(d, "data"), []string{ReasonNotRaisedByController})
	expect(t, "events", events(d), []string{"FailedToPatchPVC:data-web-0"})
	expectStatus(t, d, "data", 0, 0, 0)
	if msg := templateStatus(t, d, "data").Message; !strings.HasPrefix(msg, "data-web-0: not lowering the request from 8Gi") ||
		!strings.HasSuffix(msg, "; resize to 8Gi failing, retried by csi-resizer: Internal: backend busy") {
		t.Errorf("message %q", msg)
	}
}

// The desired templates (the webhook's annotation) are the sizes: the PVCs
// are raised to them though the StatefulSet's own templates and generation
// are unchanged, and the status records the desire it is for. A template
// finished at this generation for no desire is not finished for the new
// one until its replicas are (`wait` must not pass on the old status).
func TestDesiredTemplatesAreTheSizes(t *testing.T) {
	for _, policy := range policies {
		t.Run(string(policy), func(t *testing.T) {
			w := newWorld(2, policy, "data=1Gi", "logs=1Gi")
			d := w.decide(t)
			expectStatus(t, d, "data", 2, 0, 1)

			w.setDesired("data", "2Gi")
			d = w.decide(t)
			want := []string{"data-web-0:1Gi->2Gi", "data-web-1:1Gi->2Gi"}
			if policy == ordered {
				want = want[:1]
			}
			expect(t, "patches", patches(d), want)
			expectStatus(t, d, "data", 0, 0, 0)
			expectStatus(t, d, "logs", 2, 0, 1) // unchanged template, its finished generation holds
			if st := d.Status(); st.Desired != w.desired {
				t.Fatalf("status desired %q, want %q", st.Desired, w.desired)
			}
			for i := int32(0); i < 2; i++ {
				w.apply(d)
				w.finishResize(PVCName("data", testSTS, i))
				d = w.decide(t)
			}
			expect(t, "reasons", reasons(d, "data"), []string{ReasonResized, ReasonResized})
			expectStatus(t, d, "data", 2, 0, 1)
			if w.sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests.Storage().String() != "1Gi" {
				t.Fatal("Decide changed the StatefulSet's templates")
			}
		})
	}
}

// A replica created while a desire is recorded gets its PVC from the
// StatefulSet's (smaller) template; it is raised like the others.
func TestDesiredTemplatesRaiseNewReplicas(t *testing.T) {
	w := newWorld(1, ordered, "data=1Gi")
	w.decide(t)
	w.setDesired("data", "2Gi")
	d := w.decide(t)
	w.apply(d)
	w.finishResize("data-web-0")

	w.sts.Spec.Replicas = ptr.To[int32](2)
	w.sts.Generation++
	w.sts.Status.ObservedGeneration = w.sts.Generation
	w.addReplica(1) // PVC at the live template's 1Gi
	d = w.decide(t)
	expect(t, "patches", patches(d), []string{"data-web-1:1Gi->2Gi"})
	w.apply(d)
	w.finishResize("data-web-1")
	expectStatus(t, w.decide(t), "data", 2, 0, 2)
}

// Lowering an infeasible desire (the user lowers the manifest in Git)
// recovers what this controller raised: the request goes down to the new
// desire (KEP-1790, above the capacity), which then finishes. Removing the
// desire altogether (the manifest back at the live size) cannot lower the
// request to the capacity (the apiserver refuses it); the PVC keeps asking
// for the refused size, so the replica stays infeasible (docs/design.md
// §3.2 rule 2), never ready by its capacity.
func TestLoweredDesireRecovers(t *testing.T) {
	w := newWorld(1, ordered, "data=1Gi")
	w.decide(t)
	w.setDesired("data", "100Gi")
	d := w.decide(t)
	w.apply(d)
	w.markInfeasible("data-web-0", corev1.PersistentVolumeClaimControllerResizeInfeasible, corev1.PersistentVolumeClaimControllerResizeError, "OutOfRange", "too big")
	expectStatus(t, w.decide(t), "data", 0, 1, 0)

	removed := &world{sts: w.sts.DeepCopy(), pods: w.pods, pvcs: w.pvcs, scs: w.scs}
	d = removed.decide(t)
	expect(t, "patches without the desire", patches(d), nil)
	expect(t, "reasons without the desire", reasons(d, "data"), []string{ReasonCannotLowerInfeasibleRequest})
	expectStatus(t, d, "data", 0, 1, 0)

	w.setDesired("data", "2Gi")
	d = w.decide(t)
	expect(t, "patches", patches(d), []string{"data-web-0:100Gi->2Gi"})
	w.apply(d)
	w.finishResize("data-web-0")
	expectStatus(t, w.decide(t), "data", 1, 0, 1)
}
