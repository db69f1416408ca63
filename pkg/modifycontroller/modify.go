package modifycontroller

import (
	"context"
	"errors"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/csi-resizer/csi-resizer/pkg/csi"
	"github.com/csi-resizer/csi-resizer/pkg/expand"
	"github.com/csi-resizer/csi-resizer/pkg/internal/conditions"
	"github.com/csi-resizer/csi-resizer/pkg/modify"
	"github.com/csi-resizer/csi-resizer/pkg/status"
)

// modify carries out a Modify plan: record the target, call the driver, record its answer
// (docs/design.md §2.11 rules 12, 18 and 16).
func (c *Controller) modify(ctx context.Context, key string, pvc *v1.PersistentVolumeClaim, pv *v1.PersistentVolume, plan modify.Plan) (time.Duration, error) {
	// The request first: a missing secret must not leave the PVC InProgress for a call that
	// was never made.
	req, err := csi.NewModifyRequest(ctx, c.cfg.Client.CoreV1(), pv, pvc, plan.Class, c.cfg.ExtraModifyMetadata)
	if err != nil {
		c.cfg.Recorder.Event(pvc, v1.EventTypeWarning, EventModifyFailed, err.Error())
		return 0, err
	}
	c.obs.Begin(key, pvc)
	written, err := c.writeStatus(ctx, key, pvc, modify.StartedStatus(pvc.Status, plan.Target, c.now()))
	if err != nil {
		return 0, err
	}
	if c.cfg.Leading != nil {
		if err := c.cfg.Leading(); err != nil {
			return 0, err // rule 14: the new leader repeats this call
		}
	}
	klog.FromContext(ctx).V(2).Info("Calling ControllerModifyVolume", "volumeID", req.VolumeID, "class", plan.Target)
	if callErr := c.cfg.Modifier.Modify(ctx, req); callErr != nil {
		return c.modifyFailed(ctx, key, written, plan, callErr)
	}
	// The PV first: once the PVC says the class is current, nothing would write the PV again.
	// A failure here leaves InProgress without an answer, so the next attempt repeats the
	// idempotent call (rule 14). An in-tree PV (migrated, docs/design.md §2.8) cannot carry a
	// class: the apiserver takes volumeAttributesClassName only with spec.csi, so the PVC
	// alone records it (rule 21).
	if pv.Spec.CSI != nil {
		if _, err := c.cfg.Writer.PatchVolumeAttributesClass(ctx, pv, plan.Target); err != nil {
			return 0, c.unrecorded(key, written, expand.ClassNone, err)
		}
	}
	if _, err := c.recordOutcome(ctx, key, written, func(st v1.PersistentVolumeClaimStatus) v1.PersistentVolumeClaimStatus {
		return modify.SucceededStatus(st, plan.Target)
	}); err != nil {
		return 0, c.unrecorded(key, written, expand.ClassNone, err)
	}
	msg := "volume modified to VolumeAttributesClass " + plan.Target
	if took := c.obs.Succeeded(key); took > 0 {
		msg += " in " + took.String()
	}
	c.cfg.Recorder.Event(pvc, v1.EventTypeNormal, EventModifySuccessful, msg)
	return 0, nil
}

// modifyFailed records a failed call (rule 16) and says when to look again.
func (c *Controller) modifyFailed(ctx context.Context, key string, pvc *v1.PersistentVolumeClaim, plan modify.Plan, callErr error) (time.Duration, error) {
	ce := modify.ClassifyError(callErr)
	c.obs.Failed(key, ce.Reason, string(ce.Class))
	// The event goes out whether or not the PVC can record the error.
	c.cfg.Recorder.Eventf(pvc, v1.EventTypeWarning, EventModifyFailed, "modifying the volume to VolumeAttributesClass %s failed (%s, %s): %s",
		plan.Target, ce.Reason, ce.Class, ce.Message)
	now := c.now()
	written, err := c.recordOutcome(ctx, key, pvc, func(st v1.PersistentVolumeClaimStatus) v1.PersistentVolumeClaimStatus {
		return modify.FailedStatus(st, plan.Target, ce, now)
	})
	if err != nil {
		return 0, c.unrecorded(key, pvc, ce.Class, errors.Join(fmt.Errorf("ControllerModifyVolume: %w", callErr), err))
	}
	if ce.Class == expand.ClassInfeasible {
		c.obs.Infeasible(key)
	}
	// The retry runs on the PVC's clock, as the sync woken by this write's echo computes it.
	o := modify.Observe(written)
	retry := expand.Retry{Start: c.cfg.RetryIntervalStart, Max: c.cfg.RetryIntervalMax}
	return max(time.Millisecond, modify.RetryWait(written, o, modify.Decide(o, c.class, c.cfg.Driver.Name), retry, c.cfg.Clock.Now())), nil
}

// giveUp ends a modification whose class was deleted while a call for it may have been in
// effect (rule 20): once the latest call is past its deadline, the PVC records a final error
// saying so, and the next decision follows the spec. Until then it waits, so that no call for
// another class can overlap one for this class.
func (c *Controller) giveUp(ctx context.Context, key string, pvc *v1.PersistentVolumeClaim, plan modify.Plan) (time.Duration, error) {
	logger := klog.FromContext(ctx)
	if wait := modify.ClassGoneWait(pvc, c.cfg.CallTimeout, c.cfg.Clock.Now()); wait > 0 {
		logger.V(2).Info("The class of the modification under way was deleted: giving it up once its last call is past its deadline", "class", plan.Target, "wait", wait)
		return wait, nil
	}
	written, err := c.writeStatus(ctx, key, pvc, modify.ClassGoneStatus(pvc.Status, plan.Target, c.now()))
	if err != nil {
		return 0, err
	}
	c.obs.Failed(key, modify.ReasonClassDeleted, string(expand.ClassFinal))
	msg := conditions.Find(written.Status.Conditions, v1.PersistentVolumeClaimVolumeModifyVolumeError).Message
	logger.V(2).Info("Modification given up", "class", plan.Target, "why", plan.Why)
	c.cfg.Recorder.Event(pvc, v1.EventTypeWarning, EventModifyFailed, msg)
	return 0, nil
}

// markPending records that the class asked for cannot be used yet (rule 13), once: a PVC
// already Pending for the same class is left alone, and the class informer queues it when the
// class appears.
func (c *Controller) markPending(ctx context.Context, key string, pvc *v1.PersistentVolumeClaim, o modify.Observed, plan modify.Plan) error {
	return c.markUnusable(ctx, key, pvc, o, plan, v1.PersistentVolumeClaimModifyVolumePending,
		modify.PendingStatus(pvc.Status, plan.Target), "the modification waits (Pending) until it exists for driver %s, or set the class back to roll back")
}

// markOtherDriver records, once, that the class asked for is another driver's (rule 13): no
// call, Infeasible, and a Warning event that says how to get out.
func (c *Controller) markOtherDriver(ctx context.Context, key string, pvc *v1.PersistentVolumeClaim, o modify.Observed, plan modify.Plan) error {
	return c.markUnusable(ctx, key, pvc, o, plan, v1.PersistentVolumeClaimModifyVolumeInfeasible,
		modify.OtherDriverStatus(pvc.Status, plan.Target, plan.Why, c.now()), "it is not sent to the driver (Infeasible): set a class of driver %s, or set the class back to roll back")
}

// markUnusable writes st, which records plan.Target as state with no call, and a Warning event
// of plan.Why and advice (a format of the driver's name), unless the PVC already records
// plan.Target as state.
func (c *Controller) markUnusable(ctx context.Context, key string, pvc *v1.PersistentVolumeClaim, o modify.Observed, plan modify.Plan,
	state v1.PersistentVolumeClaimModifyVolumeStatus, st v1.PersistentVolumeClaimStatus, advice string) error {
	if o.Status == state && o.Target == plan.Target {
		return nil
	}
	c.obs.Begin(key, pvc)
	if _, err := c.writeStatus(ctx, key, pvc, st); err != nil {
		return err
	}
	klog.FromContext(ctx).V(2).Info("Modification not possible", "state", state, "class", plan.Target, "why", plan.Why)
	c.cfg.Recorder.Eventf(pvc, v1.EventTypeWarning, EventModifyFailed, "%s; "+advice, plan.Why, c.cfg.Driver.Name)
	return nil
}

// cancel ends a Pending or Infeasible modification the user rolled back (rule 17): no call.
func (c *Controller) cancel(ctx context.Context, key string, pvc *v1.PersistentVolumeClaim, o modify.Observed) error {
	if _, err := c.writeStatus(ctx, key, pvc, modify.CancelledStatus(pvc.Status)); err != nil {
		return err
	}
	c.obs.Cancelled(key)
	back := o.Current
	if back == "" {
		back = "no class"
	}
	c.cfg.Recorder.Eventf(pvc, v1.EventTypeNormal, EventModifyCancelled, "the modification to VolumeAttributesClass %s (%s) was cancelled: the claim was set back to %s, which the volume has",
		o.Target, o.Status, back)
	return nil
}

// recordOutcome writes the status that records the driver's answer (status.WriteOutcome: a
// conflict re-reads the PVC and applies outcome to it, never a second call).
func (c *Controller) recordOutcome(ctx context.Context, key string, pvc *v1.PersistentVolumeClaim, outcome func(v1.PersistentVolumeClaimStatus) v1.PersistentVolumeClaimStatus) (*v1.PersistentVolumeClaim, error) {
	return status.WriteOutcome(ctx, c.cfg.Client, pvc, outcome,
		func(p *v1.PersistentVolumeClaim, st v1.PersistentVolumeClaimStatus) (*v1.PersistentVolumeClaim, error) {
			return c.writeStatus(ctx, key, p, st)
		},
		func(old, latest *v1.PersistentVolumeClaim) {
			c.cfg.Fresh.Wrote(key, old.ResourceVersion, latest.ResourceVersion)
		})
}

// writeStatus patches the PVC status, guarded by resourceVersion, and records the write for
// the freshness check.
func (c *Controller) writeStatus(ctx context.Context, key string, pvc *v1.PersistentVolumeClaim, st v1.PersistentVolumeClaimStatus) (*v1.PersistentVolumeClaim, error) {
	out, err := c.cfg.Writer.PatchClaimStatus(ctx, pvc, st, nil, true)
	if err != nil {
		return nil, err
	}
	c.cfg.Fresh.Wrote(key, pvc.ResourceVersion, out.ResourceVersion)
	return out, nil
}

// holdModification names this controller's holds in the freshness tracker it shares with the
// expansion controller.
const holdModification = "modification"

// unrecorded holds the PVC when the answer of the call (of class answer) could not be written, as
// the expansion controller does: the retry waits as long as it would have, had the answer been
// recorded (rule 16), unless the user changes the requested class (docs/design.md §2.3 rule 8).
func (c *Controller) unrecorded(key string, decidedOn *v1.PersistentVolumeClaim, answer expand.ErrorClass, err error) error {
	retry := expand.Retry{Start: c.cfg.RetryIntervalStart, Max: c.cfg.RetryIntervalMax}
	c.cfg.Fresh.Hold(holdModification, key, requestedClass(decidedOn), c.cfg.Clock.Now().Add(retry.AfterUnrecorded(answer)))
	return err
}

// requestedClass is the user's intent the modification acts on, as a hold compares it.
func requestedClass(pvc *v1.PersistentVolumeClaim) string {
	if pvc.Spec.VolumeAttributesClassName == nil {
		return ""
	}
	return "class:" + *pvc.Spec.VolumeAttributesClassName
}
