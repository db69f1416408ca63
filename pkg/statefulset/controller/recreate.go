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
)

// Event reasons of the re-create, on the StatefulSet.
const (
	EventRecreating     = "Recreating"
	EventRecreated      = "Recreated"
	EventRecreateFailed = "RecreateFailed"
)

// maxRecreateSteps bounds the steps of one sync: Store, Delete, Create,
// Finish, and one more for a Delete that finds the new object already there.
const maxRecreateSteps = 5

// recreateSteps carries out the re-create as far as it can in one sync:
// recreate.Next decides each step from the StatefulSet and the record, and
// each step's result (not the cache, which lags behind it) is the input of
// the next. sts is nil when the cache has no StatefulSet of the name.
func (c *Controller) recreateSteps(ctx context.Context, namespace, name string, sts *appsv1.StatefulSet, wanted bool) error {
	rec, err := c.record(ctx, namespace, name, sts)
	if err != nil || (rec == nil && !wanted) {
		return err
	}
	in := recreate.Input{StatefulSet: sts, Record: rec, Wanted: wanted}
	for range maxRecreateSteps {
		step := recreate.Next(in)
		klog.FromContext(ctx).V(4).Info("Re-create step", "step", step)
		switch step {
		case recreate.Nothing, recreate.WaitForDeletion:
			return nil
		case recreate.Finish:
			return c.finishRecreate(ctx, in.StatefulSet, in.Record)
		case recreate.Store:
			if in.Record, err = c.storeRecord(ctx, in.StatefulSet); err != nil || in.Record == nil {
				return err
			}
		case recreate.Delete:
			if in.StatefulSet, in.Record, err = c.deleteOld(ctx, in.StatefulSet, in.Record); err != nil || in.Record == nil {
				// A dropped record is decided again from fresh caches,
				// brought back by its delete event.
				return err
			}
		case recreate.Create:
			if in.StatefulSet, err = c.createNew(ctx, namespace, in.Record); err != nil || in.StatefulSet == nil {
				// nil: the old object is still there; its removal brings
				// the key back.
				return err
			}
		}
	}
	return nil
}

// record returns the StatefulSet's record from the cache, nil when there is
// none. One that cannot be read is told on the StatefulSet and left alone: it
// is the only copy of what the re-create was to create.
func (c *Controller) record(ctx context.Context, namespace, name string, sts *appsv1.StatefulSet) (*recreate.Record, error) {
	cm, err := c.cmLister.ConfigMaps(namespace).Get(recreate.RecordName(name))
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get re-create record of StatefulSet %s/%s from cache: %w", namespace, name, err)
	}
	rec, err := recreate.Parse(cm)
	if err != nil {
		if sts != nil && c.invalidRecord.first(namespace+"/"+name, cm.ResourceVersion) {
			c.recorder.Eventf(sts, corev1.EventTypeWarning, EventRecreateFailed,
				"%v; fix it, or delete it if the StatefulSet is as it should be", err)
		}
		klog.FromContext(ctx).Error(err, "Not continuing the re-create")
		return nil, nil
	}
	return rec, nil
}

// storeRecord is step 1: read the whole object (the cache trims it), check it
// is the one the decision was made on, and write the record.
func (c *Controller) storeRecord(ctx context.Context, cached *appsv1.StatefulSet) (*recreate.Record, error) {
	live, err := c.client.AppsV1().StatefulSets(cached.Namespace).Get(ctx, cached.Name, metav1.GetOptions{})
	if err != nil {
		return nil, ignoreNotFound(err, "read StatefulSet %s/%s to re-create it", cached.Namespace, cached.Name)
	}
	if live.UID != cached.UID || live.ResourceVersion != cached.ResourceVersion {
		// Changed since the decision (perhaps by our own status write), or
		// another object: its event brings the key back, and the decision is
		// made again.
		return nil, nil
	}
	ds, ok, err := desired.FromStatefulSet(live)
	if !ok || err != nil {
		return nil, nil // an unusable one is told by desiredTemplates
	}
	templates, err := desired.Apply(live.Spec.VolumeClaimTemplates, ds)
	if err != nil {
		return nil, nil
	}
	cm, err := recreate.Build(live, templates)
	if err != nil {
		c.recorder.Eventf(cached, corev1.EventTypeWarning, EventRecreateFailed, "Cannot re-create the StatefulSet with the desired volume claim templates: %v", err)
		return nil, nil
	}
	created, err := c.client.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{FieldManager: Name})
	if apierrors.IsAlreadyExists(err) {
		return nil, nil // the cache has yet to show it; its event brings the key back
	}
	if err != nil {
		c.recorder.Eventf(cached, corev1.EventTypeWarning, EventRecreateFailed, "Cannot store the re-create record ConfigMap %s: %v", cm.Name, err)
		return nil, fmt.Errorf("create re-create record %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	c.recorder.Eventf(cached, corev1.EventTypeNormal, EventRecreating,
		"Volumes are at the desired sizes; re-creating the StatefulSet with them (orphan delete and create, pods are kept; record ConfigMap %s)", cm.Name)
	return recreate.Parse(created)
}

// deleteOld is step 2. A failed precondition means the object changed since
// the record was written: if it is still the old object, the record is
// dropped and the next sync decides again; if another object took its place
// meanwhile, the job is finished with that one.
func (c *Controller) deleteOld(ctx context.Context, sts *appsv1.StatefulSet, rec *recreate.Record) (*appsv1.StatefulSet, *recreate.Record, error) {
	orphan := metav1.DeletePropagationOrphan
	err := c.client.AppsV1().StatefulSets(sts.Namespace).Delete(ctx, sts.Name, metav1.DeleteOptions{
		PropagationPolicy: &orphan,
		Preconditions:     &metav1.Preconditions{UID: &rec.OldUID, ResourceVersion: &rec.OldResourceVersion},
	})
	switch {
	case err == nil || apierrors.IsNotFound(err):
		klog.FromContext(ctx).Info("Deleted StatefulSet with orphan propagation to re-create it", "uid", rec.OldUID)
		return nil, rec, nil
	case !apierrors.IsConflict(err):
		return sts, rec, fmt.Errorf("delete StatefulSet %s/%s to re-create it: %w", sts.Namespace, sts.Name, err)
	}
	now, getErr := c.client.AppsV1().StatefulSets(sts.Namespace).Get(ctx, sts.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(getErr):
		return nil, rec, nil
	case getErr != nil:
		return sts, rec, fmt.Errorf("read StatefulSet %s/%s after a failed delete precondition: %w", sts.Namespace, sts.Name, getErr)
	case now.UID != rec.OldUID:
		return now, rec, nil
	}
	klog.FromContext(ctx).Info("StatefulSet changed since the re-create record was written; dropping the record to decide again",
		"resourceVersion", now.ResourceVersion, "recorded", rec.OldResourceVersion)
	if err := c.deleteRecord(ctx, sts.Namespace, sts.Name, rec); err != nil {
		return sts, rec, err
	}
	return sts, nil, nil
}

// createNew is step 3. It returns nil (and no error) when the old object is
// still there: its delete is being finished by the garbage collector.
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
			"Cannot create StatefulSet %s/%s from the re-create record ConfigMap %s, will retry: %v (the record holds the object to create; it can also be created from there by hand)",
			namespace, obj.Name, recreate.RecordName(obj.Name), err)
		return nil, fmt.Errorf("create StatefulSet %s/%s from its re-create record: %w", namespace, obj.Name, err)
	}
	klog.FromContext(ctx).Info("Created StatefulSet from the re-create record", "uid", created.UID, "oldUID", rec.OldUID)
	return created, nil
}

// finishRecreate is steps 4 and 5 for the object that now has the name.
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
	c.recorder.Eventf(live, corev1.EventTypeNormal, EventRecreated,
		"Re-created with the desired volume claim templates (replaces uid %s; pods and PVCs kept and adopted)", rec.OldUID)
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
	err := c.client.CoreV1().ConfigMaps(namespace).Delete(ctx, recreate.RecordName(name), metav1.DeleteOptions{Preconditions: pre})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete re-create record %s/%s: %w", namespace, recreate.RecordName(name), err)
	}
	return nil
}

func ignoreNotFound(err error, format string, args ...any) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return errors.Join(fmt.Errorf(format, args...), err)
}
