package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	ssmetrics "github.com/csi-resizer/csi-resizer/pkg/statefulset/metrics"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/plan"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/status"
)

// applyPatches makes the decision's PVC patches in order. A permanent error
// is recorded in the decision (the replica becomes Failed and gets a
// FailedToPatchPVC event) and the loop goes on: with OrderedReady the plan
// holds no patch behind a replica that is not done, and with Parallel the
// next replicas must proceed. A transient error stops the loop (KEP-661:
// return at once and retry) and is returned.
func (c *Controller) applyPatches(ctx context.Context, sts *appsv1.StatefulSet, d *plan.Decision) error {
	logger := klog.FromContext(ctx)
	for _, p := range d.Patches() {
		key := writeKey("pvc", p.Namespace, p.Name)
		if c.fresh.Behind(key, p.ResourceVersion) {
			// The decision was made on a PVC this process has patched since:
			// patching again would repeat the write (or fail on the stale
			// precondition). The patch's echo brings the StatefulSet back.
			continue
		}
		written, err := c.patchPVC(ctx, &p)
		switch {
		case err == nil:
			c.fresh.Wrote(key, p.ResourceVersion, written)
			c.metrics.PVCPatched(ssmetrics.PatchSuccess)
			logger.Info("Patched PVC", "pvc", klog.KRef(p.Namespace, p.Name), "change", p.Describe(), "decrease", p.Decrease())
		case apierrors.IsConflict(err):
			// Changed since we looked (by a person, or the resizer): decide
			// again from the new state. Not worth an event.
			c.metrics.PVCPatched(ssmetrics.PatchError)
			return fmt.Errorf("patch PVC %s/%s: changed meanwhile, re-evaluating: %w", p.Namespace, p.Name, err)
		case isPermanent(err):
			c.metrics.PVCPatched(ssmetrics.PatchRejected)
			logger.Info("PVC patch rejected", "pvc", klog.KRef(p.Namespace, p.Name), "change", p.Describe(), "err", err)
			d.RejectPatch(p.Name, err.Error())
		default:
			c.metrics.PVCPatched(ssmetrics.PatchError)
			c.recorder.Eventf(sts, corev1.EventTypeWarning, plan.EventFailedToPatchPVC,
				"PVC %s: patching %s failed, will retry: %v", p.Name, p.Describe(), err)
			return fmt.Errorf("patch PVC %s/%s (%s): %w", p.Namespace, p.Name, p.Describe(), err)
		}
	}
	return nil
}

// writeKey names an object in the freshness tracker: PVCs and StatefulSets
// share it, so the kind is part of the key.
func writeKey(kind, namespace, name string) string {
	return kind + ":" + namespace + "/" + name
}

// pvcMergePatch is the body of a PVC patch: the request and/or the
// VolumeAttributesClass (a JSON null unsets it), the annotations (ours and
// the template's) and the template's labels (null removes one; labels only
// when the patch changes some), with the observed resourceVersion as a
// precondition so that a PVC changed since we looked (for example by a
// person) is re-evaluated, not overwritten. A merge patch sets and removes
// single keys, so the PVC's other labels and annotations stay as they are
// (docs/design.md §3.11 rule 15). A field the patch does not change is not
// in the body.
func pvcMergePatch(p *plan.PVCPatch) ([]byte, error) {
	meta := map[string]any{"annotations": keyPatch(p.Annotations, p.RemoveAnnotations)}
	if len(p.Labels)+len(p.RemoveLabels) > 0 {
		meta["labels"] = keyPatch(p.Labels, p.RemoveLabels)
	}
	if p.ResourceVersion != "" {
		meta["resourceVersion"] = p.ResourceVersion
	}
	spec := map[string]any{}
	if p.Resizes() {
		spec["resources"] = map[string]any{"requests": map[string]string{string(corev1.ResourceStorage): p.To.String()}}
	}
	if p.Class != nil {
		var class any // unset: null
		if p.Class.To != "" {
			class = p.Class.To
		}
		spec["volumeAttributesClassName"] = class
	}
	return json.Marshal(map[string]any{"metadata": meta, "spec": spec})
}

// keyPatch is the merge patch of a string map: set's values, and null for
// each key of remove.
func keyPatch(set map[string]string, remove []string) map[string]any {
	out := make(map[string]any, len(set)+len(remove))
	for _, k := range remove {
		out[k] = nil
	}
	for k, v := range set {
		out[k] = v
	}
	return out
}

// patchPVC makes one PVC patch and returns the resourceVersion it wrote.
func (c *Controller) patchPVC(ctx context.Context, p *plan.PVCPatch) (string, error) {
	body, err := pvcMergePatch(p)
	if err != nil {
		return "", fmt.Errorf("build patch: %w", err)
	}
	pvc, err := c.client.CoreV1().PersistentVolumeClaims(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, body,
		metav1.PatchOptions{FieldManager: Name})
	if err != nil {
		return "", err
	}
	return pvc.ResourceVersion, nil
}

// isPermanent tells the errors a retry cannot fix until something else
// changes (KEP-661 "Errors When Patching The PVC Object": validation,
// admission such as a StorageClass without allowVolumeExpansion or a quota,
// RBAC). Everything else (timeouts, throttling, conflicts, connection
// errors, a PVC not in the apiserver yet) is transient.
func isPermanent(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) ||
		apierrors.IsMethodNotSupported(err) || apierrors.IsRequestEntityTooLargeError(err) ||
		apierrors.IsUnsupportedMediaType(err)
}

// writeStatus patches the status annotation when it says something new.
func (c *Controller) writeStatus(ctx context.Context, sts *appsv1.StatefulSet, desired status.VolumeClaimTemplates) error {
	current, _ := status.FromStatefulSet(sts) // unparsable: ours to overwrite
	if current.Equal(&desired) {
		return nil
	}
	key := writeKey("sts", sts.Namespace, sts.Name)
	if c.fresh.Behind(key, sts.ResourceVersion) {
		// The cache does not show this process's last status write yet: the
		// difference may be that write. Its echo brings the key back, and
		// the status is compared again then.
		return nil
	}
	value, err := desired.Encode()
	if err != nil {
		return err
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{status.Annotation: value}}})
	if err != nil {
		return fmt.Errorf("build status patch: %w", err)
	}
	updated, err := c.client.AppsV1().StatefulSets(sts.Namespace).Patch(ctx, sts.Name, types.MergePatchType, body,
		metav1.PatchOptions{FieldManager: Name})
	if apierrors.IsNotFound(err) {
		return nil // deleted meanwhile; the delete event cleans up
	}
	if err != nil {
		return fmt.Errorf("write status annotation on StatefulSet %s/%s: %w", sts.Namespace, sts.Name, err)
	}
	c.fresh.Wrote(key, sts.ResourceVersion, updated.ResourceVersion)
	klog.FromContext(ctx).V(2).Info("Updated volume claim templates status", "status", value)
	return nil
}

// recordEvents records the decision's events, each once while it holds: a
// stuck replica is re-evaluated on every change of its StatefulSet, and an
// event per evaluation would compete with real work for the API QPS.
//
// "While it holds" spans the resizer's retries. csi-resizer clears a final
// error (e.g. Internal, or an infeasible one) from the PVC when it starts the
// next attempt and sets it again when that fails, so between the two the
// replica is merely pending. Forgetting the event then would record it again
// on every retry; so a replica that is pending with nothing to patch and no
// event keeps its remembered one. It is forgotten when the replica is ready,
// gets a patch (a new resize), or reports another problem.
func (c *Controller) recordEvents(sts *appsv1.StatefulSet, key string, d *plan.Decision) {
	current := map[string]string{}
	keep := map[string]bool{}
	for _, td := range d.Templates {
		for _, rd := range td.Replicas {
			switch {
			case rd.Event != nil:
				current[rd.PVCName] = eventIdentity(rd.Event)
			case rd.State == plan.Pending && rd.Patch == nil:
				keep[rd.PVCName] = true
			}
		}
	}
	fresh := map[string]bool{}
	for _, pvc := range c.events.update(key, current, keep) {
		fresh[pvc] = true
	}
	for _, td := range d.Templates { // in template and ordinal order
		for _, rd := range td.Replicas {
			if rd.Event != nil && fresh[rd.PVCName] {
				c.recorder.Event(sts, corev1.EventTypeWarning, rd.Event.Reason, rd.Event.Message)
			}
		}
	}
}

// eventIdentity is what makes two events on a PVC the same problem.
func eventIdentity(ev *plan.Event) string {
	if ev.Key != "" {
		return ev.Reason + "\x00key\x00" + ev.Key
	}
	return ev.Reason + "\x00" + ev.Message
}

// eventCache remembers, per StatefulSet key, the event last recorded for each
// PVC. Losing it (restart) only means the event is recorded once more.
type eventCache struct {
	mu   sync.Mutex
	seen map[string]map[string]string
}

func newEventCache() *eventCache { return &eventCache{seen: map[string]map[string]string{}} }

// update stores current as the events that hold for key and returns the
// PVCs whose event is new or changed. PVCs absent from current are forgotten,
// so a problem that comes back is reported again, except those in keep, whose
// remembered event (if any) is kept: their problem has not gone away yet.
func (e *eventCache) update(key string, current map[string]string, keep map[string]bool) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var fresh []string
	next := make(map[string]string, len(current))
	for pvc, ev := range current {
		if e.seen[key][pvc] != ev {
			fresh = append(fresh, pvc)
		}
		next[pvc] = ev
	}
	for pvc, ev := range e.seen[key] {
		if _, ok := next[pvc]; !ok && keep[pvc] {
			next[pvc] = ev
		}
	}
	if len(next) == 0 {
		delete(e.seen, key)
	} else {
		e.seen[key] = next
	}
	return fresh
}

func (e *eventCache) forget(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.seen, key)
}
