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

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/recreate"
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
	in := recreate.Input{StatefulSet: sts, Record: rec, Wanted: wanted}
	for range maxRecreateSteps {
		step := recreate.Next(in)
		klog.FromContext(ctx).V(4).Info("Re-create step", "step", step)
		done, err := c.recreateStep(ctx, namespace, name, step, &in)
		if done || err != nil {
			return err
		}
	}
	return nil
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
		if in.StatefulSet, err = c.createNew(ctx, namespace, in.Record); err != nil || in.StatefulSet == nil {
			return true, err // nil: the old object is still there; its removal brings the key back
		}
		return false, nil
	case recreate.Finish:
		return true, c.finishRecreate(ctx, in.StatefulSet, in.Record)
	case recreate.Abandon:
		return true, c.abandon(ctx, namespace, name, in.StatefulSet)
	}
	return true, nil // Nothing, WaitForDeletion
}

// record returns the StatefulSet's record from the cache, nil when there is
// none. One that cannot be read, or whose object is not opted in to template
// changes, is told and left alone: it may be the only copy of what a
// re-create was to create, and it is not statefulset-resizer's to act on.
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
	if err == nil && !c.optedIn(rec.Object) {
		err = fmt.Errorf("re-create record %s/%s holds StatefulSet %s/%s, which is not opted in to volume claim template changes (label %s); "+
			"statefulset-resizer writes records only for opted-in StatefulSets: delete the record if you did not write it on purpose",
			cm.Namespace, cm.Name, namespace, name, optInHint)
	}
	if err != nil {
		if c.invalidRecord.first(namespace+"/"+name, cm.ResourceVersion) {
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
// re-create is still wanted for its latest version, add the finalizer, and
// write the record of that version.
func (c *Controller) storeRecord(ctx context.Context, cached *appsv1.StatefulSet) (*appsv1.StatefulSet, *recreate.Record, error) {
	live, err := c.client.AppsV1().StatefulSets(cached.Namespace).Get(ctx, cached.Name, metav1.GetOptions{})
	if err != nil {
		return cached, nil, ignoreNotFound(err, "read StatefulSet %s/%s to re-create it", cached.Namespace, cached.Name)
	}
	templates, ready := c.recreateTemplates(live)
	if live.UID != cached.UID || live.DeletionTimestamp != nil || !ready || !c.recreate {
		return live, nil, nil // changed since the decision: its event brings the key back
	}
	if live, err = c.setFinalizer(ctx, live, true); err != nil || live == nil {
		return cached, nil, err
	}
	cm, err := recreate.Build(live, templates, c.recordNamespace)
	if err != nil {
		c.recorder.Eventf(live, corev1.EventTypeWarning, EventRecreateFailed, "Cannot re-create the StatefulSet with the desired volume claim templates: %v", err)
		return live, nil, nil
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
	return live, rec, err
}

// deleteOld is step 2: the record is checked against the latest version of
// the object (and rewritten when the object changed since, or dropped when
// the change was withdrawn), then the object is deleted with orphan
// propagation and preconditions on that version.
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
		klog.FromContext(ctx).Info("The volume claim template change was withdrawn or cannot be made now; dropping the re-create record",
			"record", klog.KRef(c.recordNamespace, recreate.RecordName(live.Namespace, live.Name)))
		return live, nil, c.deleteRecord(ctx, live.Namespace, live.Name, rec)
	}
	if live, err = c.setFinalizer(ctx, live, true); err != nil || live == nil {
		return cached, rec, err
	}
	if rec, err = c.updateRecord(ctx, live, templates, rec); err != nil {
		return live, rec, err
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
	live.DeletionTimestamp = &metav1.Time{}
	return live, rec, nil
}

// release is step 3, for the old object once only the re-create's finalizer
// holds it: the record is brought up to date with its latest version (edits
// made after the delete are kept), and the finalizer is removed with that
// version as precondition, which removes the object exactly as recorded.
func (c *Controller) release(ctx context.Context, cached *appsv1.StatefulSet, rec *recreate.Record) (*appsv1.StatefulSet, *recreate.Record, bool, error) {
	live, err := c.client.AppsV1().StatefulSets(cached.Namespace).Get(ctx, cached.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, rec, true, nil
	case err != nil:
		return cached, rec, false, fmt.Errorf("read StatefulSet %s/%s to release it: %w", cached.Namespace, cached.Name, err)
	case live.UID != rec.OldUID || recreate.Next(recreate.Input{StatefulSet: live, Record: rec}) != recreate.Release:
		return live, rec, false, nil
	}
	templates, _ := c.recreateTemplates(live)
	if templates == nil {
		templates = live.Spec.VolumeClaimTemplates // the change was withdrawn after the delete: the object comes back as it is
	}
	if rec, err = c.updateRecord(ctx, live, templates, rec); err != nil {
		return live, rec, false, err
	}
	if _, err := c.setFinalizer(ctx, live, false); err != nil {
		return live, rec, false, err
	}
	klog.FromContext(ctx).V(2).Info("Released the old StatefulSet; the record holds its last version", "uid", rec.OldUID, "resourceVersion", rec.OldResourceVersion)
	return nil, rec, true, nil
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

// setFinalizer adds (on) or removes the re-create's finalizer, with the
// object's resourceVersion as precondition, and returns the written object
// (nil when it is gone). Removing the last finalizer of a terminating object
// removes it.
func (c *Controller) setFinalizer(ctx context.Context, sts *appsv1.StatefulSet, on bool) (*appsv1.StatefulSet, error) {
	if recreate.HasFinalizer(sts) == on {
		return sts, nil
	}
	finalizers := []string{}
	for _, f := range sts.Finalizers {
		if f != recreate.Finalizer {
			finalizers = append(finalizers, f)
		}
	}
	if on {
		finalizers = append(finalizers, recreate.Finalizer)
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": sts.ResourceVersion, "finalizers": finalizers}})
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

// abandon removes the re-create's finalizer from an object that carries it
// with no record: the change was withdrawn after the finalizer was added, or
// someone else deleted the object before a record was written. The record is
// looked up in the API first: the cache may not show one just written.
func (c *Controller) abandon(ctx context.Context, namespace, name string, sts *appsv1.StatefulSet) error {
	_, err := c.client.CoreV1().ConfigMaps(c.recordNamespace).Get(ctx, recreate.RecordName(namespace, name), metav1.GetOptions{})
	if err == nil {
		return nil // its event brings the key back
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("look up the re-create record of StatefulSet %s/%s: %w", namespace, name, err)
	}
	klog.FromContext(ctx).Info("No re-create under way: removing the re-create finalizer", "deleting", sts.DeletionTimestamp != nil)
	_, err = c.setFinalizer(ctx, sts, false)
	return err
}

// createNew is step 4. It returns nil (and no error) when an object of the
// name exists: the old one not yet gone, or one another client created.
func (c *Controller) createNew(ctx context.Context, namespace string, rec *recreate.Record) (*appsv1.StatefulSet, error) {
	obj := rec.Object.DeepCopy()
	// Sent without managedFields: the apiserver would give every field to
	// the creator anyway; Finish puts the recorded ones back.
	obj.ManagedFields = nil
	created, err := c.client.AppsV1().StatefulSets(namespace).Create(ctx, obj, metav1.CreateOptions{FieldManager: Name})
	if apierrors.IsAlreadyExists(err) {
		return nil, nil
	}
	if err != nil {
		c.recorder.Eventf(rec.Object, corev1.EventTypeWarning, EventRecreateFailed,
			"Cannot create StatefulSet %s/%s from the re-create record ConfigMap %s/%s, will retry: %v (the record holds the object to create; it can also be created from there by hand)",
			namespace, obj.Name, c.recordNamespace, recreate.RecordName(namespace, obj.Name), err)
		return nil, fmt.Errorf("create StatefulSet %s/%s from its re-create record: %w", namespace, obj.Name, err)
	}
	klog.FromContext(ctx).Info("Created StatefulSet from the re-create record", "uid", created.UID, "oldUID", rec.OldUID)
	return created, nil
}

// finishRecreate is step 5 for the object that now has the name. An object
// another client created meanwhile (say, a GitOps tool that found the name
// free) is kept as it is; only the record goes, and the user is told when its
// templates are not the recorded ones.
func (c *Controller) finishRecreate(ctx context.Context, sts *appsv1.StatefulSet, rec *recreate.Record) error {
	live, err := c.client.AppsV1().StatefulSets(sts.Namespace).Get(ctx, sts.Name, metav1.GetOptions{})
	if err != nil {
		return ignoreNotFound(err, "read re-created StatefulSet %s/%s", sts.Namespace, sts.Name)
	}
	if live.UID == rec.OldUID {
		return nil // the cache was behind; decided again on the next event
	}
	if recreate.NeedsOwnershipRestore(live.ManagedFields, rec.Object.ManagedFields, Name) {
		if err := c.restoreOwnership(ctx, live, rec); err != nil {
			return err
		}
	}
	if err := c.deleteRecord(ctx, sts.Namespace, sts.Name, rec); err != nil {
		return err
	}
	if sameTemplates(live.Spec.VolumeClaimTemplates, rec.Object.Spec.VolumeClaimTemplates) {
		c.recorder.Eventf(live, corev1.EventTypeNormal, EventRecreated,
			"Re-created with the volume claim templates %s (replaces uid %s; pods and PVCs kept and adopted)", describeTemplates(live.Spec.VolumeClaimTemplates), rec.OldUID)
		return nil
	}
	c.recorder.Eventf(live, corev1.EventTypeWarning, EventRecreatedByOthers,
		"Another client created this StatefulSet while statefulset-resizer was re-creating it (replacing uid %s); it is kept as created, with the volume claim templates %s instead of the recorded %s",
		rec.OldUID, describeTemplates(live.Spec.VolumeClaimTemplates), describeTemplates(rec.Object.Spec.VolumeClaimTemplates))
	return nil
}

// restoreOwnership puts the old object's managedFields on the new one, so
// that Helm, kubectl and server-side apply managers own what they owned
// before, with the live object's resourceVersion as precondition.
func (c *Controller) restoreOwnership(ctx context.Context, live *appsv1.StatefulSet, rec *recreate.Record) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": live.ResourceVersion,
		"managedFields":   rec.Object.ManagedFields,
	}})
	if err != nil {
		return fmt.Errorf("build managedFields patch: %w", err)
	}
	_, err = c.client.AppsV1().StatefulSets(live.Namespace).Patch(ctx, live.Name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: Name})
	if err != nil {
		return fmt.Errorf("restore the field ownership of re-created StatefulSet %s/%s: %w", live.Namespace, live.Name, err)
	}
	return nil
}

// deleteRecord removes the record, with its uid as precondition.
func (c *Controller) deleteRecord(ctx context.Context, namespace, name string, rec *recreate.Record) error {
	var pre *metav1.Preconditions
	if rec.ConfigMapUID != "" {
		pre = &metav1.Preconditions{UID: &rec.ConfigMapUID}
	}
	recordName := recreate.RecordName(namespace, name)
	err := c.client.CoreV1().ConfigMaps(c.recordNamespace).Delete(ctx, recordName, metav1.DeleteOptions{Preconditions: pre})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete re-create record %s/%s: %w", c.recordNamespace, recordName, err)
	}
	return nil
}

func ignoreNotFound(err error, format string, args ...any) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return errors.Join(fmt.Errorf(format, args...), err)
}
