package controller

import (
	"context"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/klog/v2"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/desired"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/recreate"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/status"
)

// This file puts the re-create's steps in the status annotation (status.
// RecreateStep), the channel `statefulset-resizer wait` and CI jobs read;
// the events say the same, best effort. Each step is written with a write
// the step makes anyway where there is one (the finalizer patches), so that
// the old object's version, which the record holds, changes no more often
// than before: Deleting goes with the finalizer, Recreated with its removal
// from the new object; HeldBack with the status the reconcile writes, and
// Refused on an object nothing was done to.

// withStep returns sts's own status document (a new one when it has none)
// with the re-create step set; the step's start time is kept when the
// document already says the same.
func (c *Controller) withStep(sts *appsv1.StatefulSet, step, message string) status.VolumeClaimTemplates {
	doc := status.VolumeClaimTemplates{ObservedGeneration: sts.Generation, UID: sts.UID,
		Desired: sts.Annotations[desired.Annotation], Templates: []status.Template{}}
	if current, _ := status.FromStatefulSet(sts); current != nil {
		doc = *current
	}
	doc.RecreateStep = c.step(doc.RecreateStep, step, message)
	return doc
}

// step is the RecreateStep for step and message, since now unless current
// already is that step.
func (c *Controller) step(current *status.RecreateStep, step, message string) *status.RecreateStep {
	if current != nil && current.Step == step && current.Message == message {
		s := *current
		return &s
	}
	return &status.RecreateStep{Step: step, Since: c.clock.Now().UTC().Format(time.RFC3339), Message: message}
}

// encodedStep is withStep encoded for a patch; "" (the annotation is left
// as it is) when it cannot be encoded, which only a broken document can
// cause: the re-create does not depend on its status.
func (c *Controller) encodedStep(ctx context.Context, sts *appsv1.StatefulSet, step, message string) string {
	doc := c.withStep(sts, step, message)
	value, err := doc.Encode()
	if err != nil {
		klog.FromContext(ctx).Error(err, "Not writing the re-create step in the status annotation", "step", step)
		return ""
	}
	return value
}

// statusStep is the step a reconciled StatefulSet's status carries: HeldBack
// while a due re-create waits for a rollout, Recreated on the object a
// re-create made (kept until the next re-create), none otherwise.
func (c *Controller) statusStep(sts *appsv1.StatefulSet, recreatePending bool) *status.RecreateStep {
	current, _ := status.FromStatefulSet(sts)
	var previous *status.RecreateStep
	if current != nil {
		previous = current.RecreateStep
	}
	if blocked := recreate.Blocked(sts); recreatePending && blocked != "" {
		return c.step(previous, status.StepHeldBack, "the re-create waits: "+blocked+" (the PVCs follow the change meanwhile)")
	}
	if previous != nil && previous.Step == status.StepRecreated {
		return previous
	}
	return nil
}
