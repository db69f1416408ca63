package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	asmetrics "github.com/csi-resizer/csi-resizer/pkg/autoscale/metrics"
	"github.com/csi-resizer/csi-resizer/pkg/autoscale/policy"
)

// resizePatch is the one write of a resize: the new request and the record that describes it
// together, guarded by the resourceVersion the decision was made on (a JSON merge patch with a
// resourceVersion is refused with a conflict when the PVC changed since).
func resizePatch(pvc *corev1.PersistentVolumeClaim, d policy.Decision) ([]byte, error) {
	return json.Marshal(map[string]any{
		"metadata": map[string]any{
			"resourceVersion": pvc.ResourceVersion,
			"annotations":     map[string]string{policy.AnnLastResize: d.Record},
		},
		"spec": map[string]any{"resources": map[string]any{"requests": map[string]string{string(corev1.ResourceStorage): d.To.String()}}},
	})
}

// resize carries out a Resize or a Recover: with --dry-run only told; otherwise one guarded
// patch, then the event. A conflict is returned (decided again on the fresh PVC); a refusal
// for a quota or another permanent refusal is told and not retried before the next round.
func (c *Controller) resize(ctx context.Context, pvc *corev1.PersistentVolumeClaim, key string, d policy.Decision, st *policy.VolumeStats) error {
	logger := klog.FromContext(ctx)
	if c.opts.DryRun {
		c.metrics.Resized(string(d.Reason), true)
		if c.told.First(key, "dry-run\x00"+d.To.String()) {
			logger.Info("Dry run: not resizing", "reason", d.Reason, "from", d.From.String(), "to", d.To.String(), "message", d.Message)
			c.recorder.Event(pvc, corev1.EventTypeNormal, EventDryRun, "Dry run, not patched: would "+describe(d, st, "grow", "lower"))
		}
		return nil
	}
	what := describe(d, st, "Grew", "Lowered")
	patch, err := resizePatch(pvc, d)
	if err != nil {
		return err
	}
	updated, err := c.client.CoreV1().PersistentVolumeClaims(pvc.Namespace).Patch(ctx, pvc.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	switch {
	case err == nil:
		c.fresh.Wrote(key, pvc.ResourceVersion, updated.ResourceVersion)
		c.metrics.Patched(asmetrics.PatchSuccess)
		c.metrics.Resized(string(d.Reason), false)
		// The wait for this resize is what follows: not told again as a "resizing" skip.
		c.told.First(key, string(policy.SkipResizing))
		logger.Info("Resized", "reason", d.Reason, "from", d.From.String(), "to", d.To.String(), "message", d.Message)
		if d.Action == policy.Recover {
			c.recorder.Event(pvc, corev1.EventTypeWarning, EventRecovered, what)
		} else {
			c.recorder.Event(pvc, corev1.EventTypeNormal, EventAutoscaled, what)
		}
		return nil
	case apierrors.IsConflict(err):
		c.metrics.Patched(asmetrics.PatchConflict)
		return fmt.Errorf("patch PVC %s: it changed since it was read; deciding again: %w", key, err)
	case isQuota(err):
		c.metrics.Patched(asmetrics.PatchRejected)
		c.metrics.Skipped(asmetrics.SkipQuota)
		if c.told.First(key, "quota\x00"+d.To.String()) {
			logger.Info("Resize refused by a quota", "to", d.To.String(), "err", err)
			c.recorder.Eventf(pvc, corev1.EventTypeWarning, EventQuota,
				"Not grown to %s: the apiserver refused it for a ResourceQuota (%v); raise the quota of namespace %s, it is tried again every round", d.To.String(), err, pvc.Namespace)
		}
		return nil
	case apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err):
		c.metrics.Patched(asmetrics.PatchRejected)
		if c.told.First(key, "rejected\x00"+d.To.String()) {
			c.recorder.Eventf(pvc, corev1.EventTypeWarning, EventProblem, "Not grown to %s: the apiserver refused the patch: %v", d.To.String(), err)
		}
		return nil
	default:
		c.metrics.Patched(asmetrics.PatchError)
		return fmt.Errorf("patch PVC %s to %s: %w", key, d.To.String(), err)
	}
}

// isQuota tells a ResourceQuota refusal ("exceeded quota") from other 403s.
func isQuota(err error) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota")
}

// describe is the event text of a resize: old and new size, why, and the usage before it.
func describe(d policy.Decision, st *policy.VolumeStats, grow, lower string) string {
	verb := grow
	if d.Action == policy.Recover {
		verb = lower
	}
	msg := fmt.Sprintf("%s the request %s -> %s (%s): %s", verb, d.From.String(), d.To.String(), d.Reason, d.Message)
	if st == nil {
		return msg + "; usage before: not read"
	}
	return msg + fmt.Sprintf("; usage before: used %d bytes, free %d of %d bytes; inodes used %d, free %d of %d",
		st.UsedBytes, st.AvailableBytes, st.CapacityBytes, st.InodesUsed, st.InodesFree, st.Inodes)
}
