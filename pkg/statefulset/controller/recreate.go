package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/desired"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/recreate"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/status"
)

// Event reasons of the re-create, on the StatefulSet.
const (
	EventRecreating     = "Recreating"
	EventRecreated      = "Recreated"
	EventRecreateFailed = "RecreateFailed"
	// EventRecreateWaiting: a re-create is due but held back by a rollout
	// a new object would disturb (recreate.Blocked).
	EventRecreateWaiting = "RecreateWaiting"
	// EventRecreatedByOthers: another client created the StatefulSet while
	// it was absent during a re-create, with other templates than recorded;
	// its object is kept.
	EventRecreatedByOthers = "RecreatedByOthers"
	// EventRecreateDeleted: step 2, the orphan delete of the old object.
	EventRecreateDeleted = "RecreateDeleted"
	// EventRecreateReleased: step 3, the old object released as recorded.
	EventRecreateReleased = "RecreateReleased"
	// EventRecreateAbandoned: the change was withdrawn, or can no longer be
	// made, before anything was deleted; the record and the finalizer go.
	EventRecreateAbandoned = "RecreateAbandoned"
	// EventRecreateCancelled: someone else deleted the StatefulSet during
	// the re-create; it is not re-created (invariant I2).
	EventRecreateCancelled = "RecreateCancelled"
	// EventRecreateRefused: the create of the replacement would be refused
	// (a server dry run says so), so nothing is deleted (invariant I3).
	EventRecreateRefused = "RecreateRefused"
)

// maxRecreateSteps bounds the steps of one sync: Store, Delete, and, when the
// garbage collector is quick, Release, Create, Finish.
const maxRecreateSteps = 6

// recreateSteps carries out the re-create as far as it can in one sync:
// recreate.Next decides each step from the StatefulSet and the record, and
// each step's result (not the cache, which lags behind it) is the input of
// the next. sts is nil when the cache has no StatefulSet of the name.
func (c *Controller) recreateSteps(ctx context.Context, namespace, name string, sts *appsv1.StatefulSet, rec *recreate.Record, wanted bool) error {
	if sts != nil && c.fresh.Behind(writeKey("sts", namespace, name), sts.ResourceVersion) {
		return nil // the echo of our own write brings the key back
	}
	in := recreate.Input{StatefulSet: sts, Record: rec, Wanted: wanted, RecordNamespace: c.recordNamespace}
	for range maxRecreateSteps {
		step := recreate.Next(in)
		klog.FromContext(ctx).V(4).Info("Re-create step", "step", step)
		c.exportStep(namespace, name, step)
		done, err := c.recreateStep(ctx, namespace, name, step, &in)
		if done || err != nil {
			return err
		}
	}
	return nil
}

// exportStep keeps the metric of the step a re-create is in (and since when,
// as this process saw it), which StatefulSetResizerRecreateStuck reads; no
// re-create under way, or another install's, ends the series.
func (c *Controller) exportStep(namespace, name string, step recreate.Step) {
	if step == recreate.Nothing {
		c.metrics.ForgetRecreate(namespace, name)
		return
	}
	c.metrics.SetRecreateStep(namespace, name, string(step), c.clock.Now())
}

// recreateStep takes one step, updating in with what it left; done says the
// sync has nothing more to do now (a later event brings the key back).
func (c *Controller) recreateStep(ctx context.Context, namespace, name string, step recreate.Step, in *recreate.Input) (done bool, err error) {
	switch step {
	case recreate.Store:
		in.StatefulSet, in.Record, err = c.storeRecord(ctx, in.StatefulSet)
		return in.Record == nil, err
	case recreate.Delete:
		in.StatefulSet, in.Record, err = c.deleteOld(ctx, in.StatefulSet, in.Record)
		return in.StatefulSet != nil && in.StatefulSet.DeletionTimestamp == nil && in.Record != nil, err
	case recreate.Release:
		var gone bool
		in.StatefulSet, in.Record, gone, err = c.release(ctx, in.StatefulSet, in.Record)
		return !gone, err
	case recreate.Create:
		if in.StatefulSet, in.Record, err = c.createNew(ctx, namespace, name); err != nil || in.StatefulSet == nil {
			return true, err // nil: the old object is still there (its removal brings the key back), or the record went
		}
		return false, nil
	case recreate.Cancel:
		return true, c.cancel(ctx, in.StatefulSet, in.Record, "it carries the finalizer "+metav1.FinalizerDeleteDependents+" of a foreground delete")
	case recreate.Finish:
		return true, c.finishRecreate(ctx, in.StatefulSet, in.Record)
	case recreate.Abandon:
		return true, c.abandon(ctx, namespace, name, in.StatefulSet)
	}
	return true, nil // Nothing, WaitForDeletion
}

// record returns the StatefulSet's record from the cache, nil when there is
// none. One that cannot be read is told and left alone: it may be the only
// copy of what a re-create was to create. A record is acted on whatever the
// opt-in says now: only statefulset-resizer (and the administrators of its
// namespace) can write one, it was written for an opted-in StatefulSet, and
// a re-create that has started is finished (invariant I1; an opt-out before
// the delete withdraws it, step 2).
func (c *Controller) record(ctx context.Context, namespace, name string, sts *appsv1.StatefulSet) (*recreate.Record, error) {
	recordName := recreate.RecordName(namespace, name)
	cm, err := c.cmLister.ConfigMaps(c.recordNamespace).Get(recordName)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get re-create record %s/%s from cache: %w", c.recordNamespace, recordName, err)
	}
	rec, err := recreate.Parse(cm)
	if err != nil {
		if c.invalidRecord.First(namespace+"/"+name, cm.ResourceVersion) {
			klog.FromContext(ctx).Info("Ignoring re-create record", "record", klog.KObj(cm), "err", err.Error())
			if sts != nil {
				c.recorder.Eventf(sts, corev1.EventTypeWarning, EventRecreateFailed, "%v; fix it, or delete it if the StatefulSet is as it should be", err)
			}
		}
		return nil, nil
	}
	return rec, nil
}

// storeRecord is step 1: read the whole object (the cache trims it), check the
// re-create is still wanted for its latest version and can be made (the
// record's name, a dry-run create of the replacement), add the finalizer,
// and write the record of that version.
func (c *Controller) storeRecord(ctx context.Context, cached *appsv1.StatefulSet) (*appsv1.StatefulSet, *recreate.Record, error) {
	live, err := c.client.AppsV1().StatefulSets(cached.Namespace).Get(ctx, cached.Name, metav1.GetOptions{})
	if err != nil {
		return cached, nil, ignoreNotFound(err, "read StatefulSet %s/%s to re-create it", cached.Namespace, cached.Name)
	}
	templates, ready := c.recreateTemplates(live)
	if live.UID != cached.UID || live.DeletionTimestamp != nil || !ready || !c.recreate || recreate.OtherInstall(live, c.recordNamespace) != "" {
		return live, nil, nil // changed since the decision: its event brings the key back
	}
	obj, err := recreate.ObjectToCreate(live, templates)
	if err == nil {
		err = recreate.CheckName(live.Namespace, live.Name)
	}
	if err != nil {
		c.refused(ctx, live, fmt.Errorf("cannot re-create the StatefulSet with the desired volume claim templates: %w", err))
		return live, nil, nil
	}
	if ok, err := c.proveCreate(ctx, live, obj); !ok {
		return live, nil, err
	}
	deleting := c.encodedStep(ctx, live, status.StepDeleting, fmt.Sprintf(
		"record %s/%s stored; the object is deleted with orphan propagation, released once the garbage collector has orphaned its pods, and created again from the record",
		c.recordNamespace, recreate.RecordName(live.Namespace, live.Name)))
	if live, err = c.setFinalizer(ctx, live, true, deleting); err != nil || live == nil {
		return cached, nil, err
	}
	cm, err := recreate.Build(live, templates, c.recordNamespace)
	if err != nil {
		return live, nil, err
	}
	created, err := c.client.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{FieldManager: Name})
	if apierrors.IsAlreadyExists(err) {
		return live, nil, nil // the cache has yet to show it; its event brings the key back
	}
	if err != nil {
		c.recorder.Eventf(live, corev1.EventTypeWarning, EventRecreateFailed, "Cannot store the re-create record ConfigMap %s/%s: %v", cm.Namespace, cm.Name, err)
		return live, nil, fmt.Errorf("create re-create record %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	c.recorder.Eventf(live, corev1.EventTypeNormal, EventRecreating,
		"Re-creating the StatefulSet with the desired volume claim templates %s (orphan delete and create, pods and PVCs are kept; record ConfigMap %s/%s)",
		describeTemplates(templates), cm.Namespace, cm.Name)
	rec, err := recreate.Parse(created)
	if rec != nil {
		rec.Proven = true // the dry run above was of this very object
	}
	return live, rec, err
}

// proveCreate is invariant I3's proof, made before the finalizer goes on and
// again right before the delete: a server dry run of the create of obj (the
// exact object the record holds) passes validation and admission (a quota,
// a policy, the owner-reference permission check) and meets only the name
// of the object it replaces (AlreadyExists is checked last). A refusal is
// told once per desire and error (nothing is deleted; ok is false); Invalid
// waits for the next change of the StatefulSet, anything else is returned to
// be retried with backoff.
func (c *Controller) proveCreate(ctx context.Context, live, obj *appsv1.StatefulSet) (ok bool, err error) {
	probe := obj.DeepCopy()
	probe.ManagedFields = nil
	_, err = c.client.AppsV1().StatefulSets(live.Namespace).Create(ctx, probe,
		metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: Name})
	if err == nil || apierrors.IsAlreadyExists(err) {
		return true, nil
	}
	c.refused(ctx, live, fmt.Errorf("a create of the StatefulSet with the desired volume claim templates would be refused: %w", err))
	if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
		return false, nil
	}
	return false, fmt.Errorf("dry-run create of StatefulSet %s/%s before its re-create: %w", live.Namespace, live.Name, err)
}

// proveIfNeeded is proveCreate for rec's object, unless this sync stored
// rec and proved it already (one dry run per re-create, not two).
func (c *Controller) proveIfNeeded(ctx context.Context, live *appsv1.StatefulSet, rec *recreate.Record) (bool, error) {
	if rec.Proven {
		return true, nil
	}
	return c.proveCreate(ctx, live, rec.Object)
}

// refused tells, in an event once per desire and reason and in the status
// annotation, that the re-create cannot be made and that nothing was
// deleted.
func (c *Controller) refused(ctx context.Context, sts *appsv1.StatefulSet, err error) {
	key := sts.Namespace + "/" + sts.Name
	message := err.Error() + ". Nothing was deleted. Fix the cause and apply again, or apply the templates as they are to withdraw the change"
	if c.recreateRefused.First(key, sts.Annotations[desired.Annotation]+"\x00"+err.Error()) {
		c.recorder.Event(sts, corev1.EventTypeWarning, EventRecreateRefused, message)
	}
	if err := c.writeStatus(ctx, sts, c.withStep(sts, status.StepRefused, message)); err != nil {
		klog.FromContext(ctx).Error(err, "Not writing the refused re-create in the status annotation")
	}
}

// deleteOld is step 2: the record is checked against the latest version of
// the object (and rewritten when the object changed since, or dropped when
// the change was withdrawn or its create would now be refused), then the
// object is deleted with orphan propagation and preconditions on that
// version.
func (c *Controller) deleteOld(ctx context.Context, cached *appsv1.StatefulSet, rec *recreate.Record) (*appsv1.StatefulSet, *recreate.Record, error) {
	live, err := c.client.AppsV1().StatefulSets(cached.Namespace).Get(ctx, cached.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, rec, nil
	case err != nil:
		return cached, rec, fmt.Errorf("read StatefulSet %s/%s to re-create it: %w", cached.Namespace, cached.Name, err)
	case live.UID != rec.OldUID || live.DeletionTimestamp != nil:
		return live, rec, nil // Finish, or Release once orphaned
	}
	templates, ready := c.recreateTemplates(live)
	if !ready {
		return live, nil, c.withdraw(ctx, live, rec, "the volume claim template change was withdrawn, or cannot be made now")
	}
	if live, err = c.setFinalizer(ctx, live, true, ""); err != nil || live == nil {
		return cached, rec, err
	}
	if rec, err = c.updateRecord(ctx, live, templates, rec); err != nil {
		return live, rec, err
	}
	if ok, err := c.proveIfNeeded(ctx, live, rec); !ok {
		return live, nil, errors.Join(err, c.withdraw(ctx, live, rec, "the create of the replacement would be refused"))
	}
	// The preconditions are the version the record was checked against.
	orphan := metav1.DeletePropagationOrphan
	err = c.client.AppsV1().StatefulSets(live.Namespace).Delete(ctx, live.Name, metav1.DeleteOptions{
		PropagationPolicy: &orphan,
		Preconditions:     &metav1.Preconditions{UID: &live.UID, ResourceVersion: &live.ResourceVersion},
	})
	if err != nil && !apierrors.IsNotFound(err) {
		// A conflict: changed since the read; decided again from a fresh read.
		return live, rec, fmt.Errorf("delete StatefulSet %s/%s to re-create it: %w", live.Namespace, live.Name, err)
	}
	klog.FromContext(ctx).Info("Deleted StatefulSet with orphan propagation to re-create it", "uid", rec.OldUID)
	c.recorder.Eventf(live, corev1.EventTypeNormal, EventRecreateDeleted,
		"Deleted with orphan propagation (uid %s): the garbage collector orphans the pods and ControllerRevisions, then the object is released as recorded in %s/%s",
		rec.OldUID, c.recordNamespace, recreate.RecordName(live.Namespace, live.Name))
	live.DeletionTimestamp = &metav1.Time{}
	return live, rec, nil
}

// withdraw drops the record of a re-create that has not deleted anything;
// the finalizer goes at the next step (Abandon), after the record: a crash in
// between leaves a finalizer and no record, never a record that would create
// a second object.
func (c *Controller) withdraw(ctx context.Context, live *appsv1.StatefulSet, rec *recreate.Record, why string) error {
	klog.FromContext(ctx).Info("Withdrawing the re-create; dropping its record", "reason", why,
		"record", klog.KRef(c.recordNamespace, recreate.RecordName(live.Namespace, live.Name)))
	if err := c.deleteRecord(ctx, live.Namespace, live.Name, rec); err != nil {
		return err
	}
	c.recorder.Eventf(live, corev1.EventTypeNormal, EventRecreateAbandoned, "Re-create withdrawn before anything was deleted: %s", why)
	return nil
}

// updateRecord rewrites rec when it does not hold what Build makes of live
// and templates, with the record's own resourceVersion as precondition.
func (c *Controller) updateRecord(ctx context.Context, live *appsv1.StatefulSet, templates []corev1.PersistentVolumeClaim, rec *recreate.Record) (*recreate.Record, error) {
	upToDate, err := recreate.UpToDate(rec, live, templates)
	if err != nil || upToDate {
		return rec, err
	}
	cm, err := recreate.Build(live, templates, c.recordNamespace)
	if err != nil {
		return rec, err
	}
	cm.UID, cm.ResourceVersion = rec.ConfigMapUID, rec.ConfigMapResourceVersion
	updated, err := c.client.CoreV1().ConfigMaps(cm.Namespace).Update(ctx, cm, metav1.UpdateOptions{FieldManager: Name})
	if err != nil {
		return rec, fmt.Errorf("update re-create record %s/%s with StatefulSet version %s: %w", cm.Namespace, cm.Name, live.ResourceVersion, err)
	}
	klog.FromContext(ctx).Info("Updated the re-create record: the StatefulSet changed since it was written",
		"record", klog.KObj(updated), "resourceVersion", live.ResourceVersion, "recorded", rec.OldResourceVersion)
	return recreate.Parse(updated)
}

// setFinalizer adds (on) or removes the re-create's finalizer, and with it
// the annotation naming this install's record (invariant I6), with the
// object's resourceVersion as precondition, and returns the written object
// (nil when it is gone). Removing the last finalizer of a terminating object
// removes it. A non-empty statusValue is written as the status annotation in
// the same patch (the re-create's step).
func (c *Controller) setFinalizer(ctx context.Context, sts *appsv1.StatefulSet, on bool, statusValue string) (*appsv1.StatefulSet, error) {
	if recreate.HasFinalizer(sts) == on {
		return sts, nil
	}
	finalizers := []string{}
	for _, f := range sts.Finalizers {
		if f != recreate.Finalizer {
			finalizers = append(finalizers, f)
		}
	}
	var ref any // null removes the annotation
	if on {
		finalizers = append(finalizers, recreate.Finalizer)
		ref = recreate.RecordRef(c.recordNamespace, sts.Namespace, sts.Name)
	}
	annotations := map[string]any{recreate.RecordAnnotation: ref}
	if statusValue != "" {
		annotations[status.Annotation] = statusValue
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": sts.ResourceVersion, "finalizers": finalizers,
		"annotations": annotations}})
	if err != nil {
		return nil, fmt.Errorf("build finalizer patch: %w", err)
	}
	written, err := c.client.AppsV1().StatefulSets(sts.Namespace).Patch(ctx, sts.Name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: Name})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("set finalizer %s=%v on StatefulSet %s/%s: %w", recreate.Finalizer, on, sts.Namespace, sts.Name, err)
	}
	c.fresh.Wrote(writeKey("sts", sts.Namespace, sts.Name), sts.ResourceVersion, written.ResourceVersion)
	return written, nil
}
