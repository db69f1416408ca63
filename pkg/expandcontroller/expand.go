package expandcontroller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"

	"github.com/csi-resizer/csi-resizer/pkg/csi"
	"github.com/csi-resizer/csi-resizer/pkg/expand"
	"github.com/csi-resizer/csi-resizer/pkg/status"
)

// expandController carries out an ExpandController plan: record the target, call the driver,
// record its answer.
func (c *Controller) expandController(ctx context.Context, key string, pvc *v1.PersistentVolumeClaim, pv *v1.PersistentVolume, plan expand.Plan) (time.Duration, error) {
	if waiting, err := c.waitForPods(ctx, pvc, true); err != nil || waiting {
		return 0, err
	}
	req, err := csi.NewExpandRequest(ctx, c.cfg.Client.CoreV1(), pv, c.cfg.Driver, plan.Target.Value())
	if err != nil {
		c.cfg.Recorder.Event(pvc, v1.EventTypeWarning, EventResizeFailed, err.Error())
		return 0, err
	}
	// docs/design.md §2.3 rule 3: record the target before calling the driver, guarded by
	// resourceVersion so a decision taken on a stale PVC is never written.
	written, err := c.writeStatus(ctx, key, pvc, expand.StartedStatus(pvc.Status, plan, c.cfg.Legacy, c.now()), expand.WriteStarted)
	if err != nil {
		return 0, err
	}
	c.obs.Started(key, plan)

	if err := c.leading(); err != nil {
		// A paused leader woken after losing the Lease (docs/design.md §2.1): the recorded
		// target is the new leader's to carry out, with the same call.
		return 0, err
	}
	klog.FromContext(ctx).V(2).Info("Calling ControllerExpandVolume", "volumeID", req.VolumeID, "requiredBytes", req.RequiredBytes)
	res, callErr := c.cfg.Expander.Expand(ctx, req)
	if callErr != nil {
		return c.expansionFailed(ctx, key, written, plan, callErr)
	}
	newSize := *resource.NewQuantity(res.CapacityBytes, resource.BinarySI)
	if newSize.Cmp(plan.Target) == 0 {
		newSize = plan.Target.DeepCopy() // keep the user's notation (e.g. "2Gi")
	}
	annotations := expand.ControllerExpanded(newSize, res.NodeExpansionRequired)
	maps.Copy(annotations, c.preResizeAnnotation(pv, pvc, res.NodeExpansionRequired))
	if _, err := c.cfg.Writer.PatchVolume(ctx, pv, newSize, annotations); err != nil {
		// The volume did grow: the next attempt keeps the allocated size (state is still
		// ControllerResizeInProgress with no final error) and the driver call is idempotent.
		return 0, c.unrecorded(key, written, expand.ClassNone, err)
	}
	now := c.now()
	if _, err := c.recordOutcome(ctx, key, written, expand.ExpandedWrite(res.NodeExpansionRequired), func(st v1.PersistentVolumeClaimStatus) v1.PersistentVolumeClaimStatus {
		return expand.ExpandedStatus(st, plan, newSize, res.NodeExpansionRequired, c.cfg.Legacy, now)
	}); err != nil {
		return 0, c.unrecorded(key, written, expand.ClassNone, err)
	}
	c.expanded(key, pvc, newSize, res.NodeExpansionRequired)
	return 0, nil
}

// recordExpanded writes the outcome of an expansion the driver already answered and the PV
// records (expand.RecordExpanded): a predecessor stopped between the PV write and the PVC's.
func (c *Controller) recordExpanded(ctx context.Context, key string, pvc *v1.PersistentVolumeClaim, plan expand.Plan) error {
	klog.FromContext(ctx).V(2).Info("Not calling ControllerExpandVolume: the PV records the driver's answer for this size",
		"capacity", plan.Target.String(), "nodeExpansionRequired", plan.NodeRequired)
	now := c.now()
	if _, err := c.recordOutcome(ctx, key, pvc, expand.ExpandedWrite(plan.NodeRequired), func(st v1.PersistentVolumeClaimStatus) v1.PersistentVolumeClaimStatus {
		return expand.ExpandedStatus(st, plan, plan.Target, plan.NodeRequired, c.cfg.Legacy, now)
	}); err != nil {
		return err
	}
	c.expanded(key, pvc, plan.Target, plan.NodeRequired)
	return nil
}

// expansionFailed records a failed ControllerExpandVolume (docs/design.md §2.3 rule 6) and says
// when to retry.
func (c *Controller) expansionFailed(ctx context.Context, key string, pvc *v1.PersistentVolumeClaim, plan expand.Plan, callErr error) (time.Duration, error) {
	ce := expand.ClassifyError(callErr)
	c.obs.Failed(key, ce)
	// The event goes out whether or not the PVC can record the error: it is the user's only
	// word of the failure when the write fails.
	c.cfg.Recorder.Eventf(pvc, v1.EventTypeWarning, EventResizeFailed, "expanding the volume to %s failed (%s, %s): %s", plan.Target.String(), ce.Reason, ce.Class, ce.Message)
	if c.cfg.Legacy {
		c.setLegacyFailed(key, &plan.Target)
	}
	now := c.now()
	written, err := c.recordOutcome(ctx, key, pvc, expand.WriteFailed, func(st v1.PersistentVolumeClaimStatus) v1.PersistentVolumeClaimStatus {
		return expand.FailedStatus(st, ce, c.cfg.Legacy, now)
	})
	if err != nil {
		return 0, c.unrecorded(key, pvc, ce.Class, errors.Join(fmt.Errorf("ControllerExpandVolume: %w", callErr), err))
	}
	// docs/design.md §2.3 rule 9: after FAILED_PRECONDITION, likely an offline-only driver and
	// a pod still using the volume; the pod watcher queues the PVC when the pod goes.
	// The driver's answer, just reported, tells the user of the wait already.
	if waiting, err := c.waitForPods(ctx, written, false); err != nil || waiting {
		return 0, err
	}
	// The retry runs on the PVC's clock, as the sync woken by this write's echo computes it.
	obs := expand.Observe(written, nil, c.cfg.Driver.NodeOnly(), c.cfg.Legacy)
	return max(time.Millisecond, c.retryWait(key, written, obs, expand.PlanExpansion(obs))), nil
}

// waitForPods reports whether the expansion must wait because a pod uses a volume that can
// only be expanded offline (docs/design.md §2.3 rule 9). The pod watcher tells the queue when
// the pod goes. A wait is reported once, with an event when report is set.
func (c *Controller) waitForPods(ctx context.Context, pvc *v1.PersistentVolumeClaim, report bool) (bool, error) {
	if !expand.WaitsForPods(pvc, c.cfg.HandleVolumeInUse, c.cfg.Driver.OfflineOnly) {
		return false, nil
	}
	inUse, first, err := c.pods.Wait(ctx, pvc.Namespace, pvc.Name)
	if first && report {
		klog.FromContext(ctx).V(2).Info("Volume in use by a pod and the driver needs it offline: waiting for the pod to go")
		c.cfg.Recorder.Eventf(pvc, v1.EventTypeWarning, EventResizeFailed,
			"CSI driver %s can only expand volumes that no pod uses; the expansion waits until the pods using this claim are gone", c.cfg.Driver.Name)
	}
	return inUse, err
}

// expanded sends the event of a control-plane expansion that succeeded and tells the observer.
func (c *Controller) expanded(key string, pvc *v1.PersistentVolumeClaim, newSize resource.Quantity, nodeRequired bool) {
	old := pvc.Status.Capacity[v1.ResourceStorage]
	c.setLegacyFailed(key, nil)
	recovery, took := c.obs.Expanded(key, old, newSize, nodeRequired)
	switch {
	case nodeRequired:
		c.cfg.Recorder.Eventf(pvc, v1.EventTypeNormal, EventFileSystemRequired,
			"the volume was expanded to %s in the control plane; waiting for the node to expand the file system", newSize.String())
	case recovery:
		c.cfg.Recorder.Eventf(pvc, v1.EventTypeNormal, EventResizeRecovered,
			"recovered from a failed expansion: volume expanded from %s to %s in %s", old.String(), newSize.String(), took)
	default:
		c.cfg.Recorder.Eventf(pvc, v1.EventTypeNormal, EventResizeSuccessful,
			"volume expanded from %s to %s in %s", old.String(), newSize.String(), took)
	}
}

// expandNodeOnly handles a driver without controller expansion: no CSI call, the PV capacity
// is set (lowered only in the KEP-1790 Case 2 recovery) and the node takes over.
func (c *Controller) expandNodeOnly(ctx context.Context, key string, pvc *v1.PersistentVolumeClaim, pv *v1.PersistentVolume, obs expand.Observed, plan expand.Plan) error {
	nodeRequired := expand.NodeRequired(obs, plan)
	// The PV first: the kubelet acts only once the PVC says NodeResizePending, and then it
	// must find the new capacity on the PV.
	if _, err := c.cfg.Writer.PatchVolume(ctx, pv, plan.Target, c.preResizeAnnotation(pv, pvc, nodeRequired)); err != nil {
		return err
	}
	c.obs.Started(key, plan)
	done := expand.ExpandedStatus(pvc.Status, plan, plan.Target, nodeRequired, c.cfg.Legacy, c.now())
	if _, err := c.writeStatus(ctx, key, pvc, done, expand.ExpandedWrite(nodeRequired)); err != nil {
		return err
	}
	c.expanded(key, pvc, plan.Target, nodeRequired)
	return nil
}

// redriveNode puts a PVC whose node expansion failed back in the node's hands.
func (c *Controller) redriveNode(ctx context.Context, key string, pvc *v1.PersistentVolumeClaim, plan expand.Plan) error {
	if _, err := c.writeStatus(ctx, key, pvc, expand.RedrivenStatus(pvc.Status, plan, c.now()), expand.WriteNodePending); err != nil {
		return err
	}
	c.obs.HandedToNode(key, pvc.Status.Capacity[v1.ResourceStorage], plan.Target)
	c.cfg.Recorder.Eventf(pvc, v1.EventTypeWarning, EventFileSystemRequired,
		"the node failed to expand the volume, which already has %s in the control plane; asking the node to retry", plan.Target.String())
	return nil
}

// recordOutcome writes the status that records the driver's answer (status.WriteOutcome), a
// write of kind w. The cache may still hold a version the PVC read again replaces, this
// process's own pre-call write: deciding on it would call the driver again, so it is recorded
// as replaced.
func (c *Controller) recordOutcome(ctx context.Context, key string, pvc *v1.PersistentVolumeClaim, w expand.ClaimWrite, outcome func(v1.PersistentVolumeClaimStatus) v1.PersistentVolumeClaimStatus) (*v1.PersistentVolumeClaim, error) {
	return status.WriteOutcome(ctx, c.cfg.Client, pvc, outcome,
		func(p *v1.PersistentVolumeClaim, st v1.PersistentVolumeClaimStatus) (*v1.PersistentVolumeClaim, error) {
			return c.writeStatus(ctx, key, p, st, w)
		},
		func(old, latest *v1.PersistentVolumeClaim) {
			c.fresh.Wrote(key, old.ResourceVersion, latest.ResourceVersion)
		})
}

// writeStatus patches the PVC status, guarded by resourceVersion, with the change of the
// node-expansion-not-required annotation that goes with a write of kind w in the same patch
// (docs/design.md §2.9), records the write for the freshness check and tells the observer of
// the state transition. The annotation is decided on pvc, so a write after a conflict's
// re-read decides it on what the PVC holds then.
func (c *Controller) writeStatus(ctx context.Context, key string, pvc *v1.PersistentVolumeClaim, st v1.PersistentVolumeClaimStatus, w expand.ClaimWrite) (*v1.PersistentVolumeClaim, error) {
	out, err := c.cfg.Writer.PatchClaimStatus(ctx, pvc, st, expand.NodeExpansionNotRequired(pvc, w, c.cfg.Legacy), true)
	if err != nil {
		return nil, err
	}
	c.fresh.Wrote(key, pvc.ResourceVersion, out.ResourceVersion)
	c.obs.Transition(pvc.Status, out.Status)
	return out, nil
}

// leading is Config.Leading, nil when there is no leader election.
func (c *Controller) leading() error {
	if c.cfg.Leading == nil {
		return nil
	}
	return c.cfg.Leading()
}

// holdExpansion names this controller's holds in the freshness tracker it shares with the
// modification controller.
const holdExpansion = "expansion"

// unrecorded holds the PVC when the answer of a driver call (of class answer) could not be
// written (err), so that a sync queued meanwhile (by the echo of the pre-call write, or another
// writer's status change) does not repeat the call at once: the retry waits as long as it would
// have, had the answer been recorded (--retry-interval-max after an infeasible answer,
// --retry-interval-start otherwise), unless the user changes the requested size
// (docs/design.md §2.3 rule 8). It returns err.
func (c *Controller) unrecorded(key string, decidedOn *v1.PersistentVolumeClaim, answer expand.ErrorClass, err error) error {
	retry := expand.Retry{Start: c.cfg.RetryIntervalStart, Max: c.cfg.RetryIntervalMax}
	c.fresh.Hold(holdExpansion, key, requestedSize(decidedOn), c.cfg.Clock.Now().Add(retry.AfterUnrecorded(answer)))
	return err
}

// requestedSize is the user's intent the expansion acts on, as a hold compares it.
func requestedSize(pvc *v1.PersistentVolumeClaim) string {
	return pvc.Spec.Resources.Requests.Storage().String()
}
