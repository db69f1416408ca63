package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/recreate"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/status"
)

// This file holds the steps of the re-create after the delete (docs/design.md
// §3.7 rule 8): release, create, finish, and the ways out (cancel, abandon).

// release is step 3, for the old object once only the re-create's finalizer
// holds it: unless someone else deleted it (cancel), the record is brought
// up to date with its latest version (edits made after the delete are kept),
// and the finalizer is removed with that version as precondition, which
// removes the object exactly as recorded.
func (c *Controller) release(ctx context.Context, cached *appsv1.StatefulSet, rec *recreate.Record) (*appsv1.StatefulSet, *recreate.Record, bool, error) {
	live, err := c.client.AppsV1().StatefulSets(cached.Namespace).Get(ctx, cached.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, rec, true, nil
	case err != nil:
		return cached, rec, false, fmt.Errorf("read StatefulSet %s/%s to release it: %w", cached.Namespace, cached.Name, err)
	case live.UID != rec.OldUID || recreate.Next(recreate.Input{StatefulSet: live, Record: rec, RecordNamespace: c.recordNamespace}) != recreate.Release:
		return live, rec, false, nil
	}
	owned, err := c.stillOwned(ctx, live)
	if err != nil {
		return live, rec, false, err
	}
	if owned != "" {
		return nil, nil, true, c.cancel(ctx, live, rec, owned)
	}
	templates, _ := c.recreateTemplates(live)
	if templates == nil {
		templates = live.Spec.VolumeClaimTemplates // the change was withdrawn after the delete: the object comes back as it is
	}
	if rec, err = c.updateRecord(ctx, live, templates, rec); err != nil {
		return live, rec, false, err
	}
	if _, err := c.setFinalizer(ctx, live, false, ""); err != nil {
		return live, rec, false, err
	}
	klog.FromContext(ctx).V(2).Info("Released the old StatefulSet; the record holds its last version", "uid", rec.OldUID, "resourceVersion", rec.OldResourceVersion)
	c.recorder.Eventf(live, corev1.EventTypeNormal, EventRecreateReleased,
		"The garbage collector orphaned the pods and ControllerRevisions; the old object (uid %s) is released as recorded, and the StatefulSet is created from the record", rec.OldUID)
	return nil, rec, true, nil
}

// stillOwned says why the old object's deletion is not the re-create's orphan
// delete ("" when it may be): once only the re-create's finalizer is left,
// the garbage collector has orphaned the dependents its graph held (it
// removes its orphan finalizer last), so when every pod and ControllerRevision
// of the selector is still owned by the object, someone else's delete
// replaced the orphan propagation (kubectl delete, helm uninstall:
// background) before the collector ran, and the collector waits for the
// object to go to delete them. One still owned beside orphaned ones is no
// proof: the StatefulSet controller may create a revision of the
// terminating object that the collector's graph did not hold yet, and taking
// that for a delete would leave a StatefulSet nobody deleted absent (I1
// outranks I2; the shipped policy refuses the delete instead). The API is
// read, not the cache: the collector's writes to the dependents precede its
// finalizer's removal, which the caller saw.
func (c *Controller) stillOwned(ctx context.Context, sts *appsv1.StatefulSet) (string, error) {
	selector, err := metav1.LabelSelectorAsSelector(sts.Spec.Selector)
	if err != nil {
		return "", nil // the apiserver refuses such an object; nothing can be owned through it
	}
	opts := metav1.ListOptions{LabelSelector: selector.String()}
	pods, err := c.client.CoreV1().Pods(sts.Namespace).List(ctx, opts)
	if err != nil {
		return "", fmt.Errorf("list the pods of StatefulSet %s/%s before releasing it: %w", sts.Namespace, sts.Name, err)
	}
	revisions, err := c.client.AppsV1().ControllerRevisions(sts.Namespace).List(ctx, opts)
	if err != nil {
		return "", fmt.Errorf("list the ControllerRevisions of StatefulSet %s/%s before releasing it: %w", sts.Namespace, sts.Name, err)
	}
	var owned []string
	for i := range pods.Items {
		if o := ownership(pods.Items[i].OwnerReferences, sts.UID); o == orphaned {
			return "", nil
		} else if o == ownedByIt {
			owned = append(owned, "pod "+pods.Items[i].Name)
		}
	}
	for i := range revisions.Items {
		if o := ownership(revisions.Items[i].OwnerReferences, sts.UID); o == orphaned {
			return "", nil
		} else if o == ownedByIt {
			owned = append(owned, "ControllerRevision "+revisions.Items[i].Name)
		}
	}
	if len(owned) == 0 {
		return "", nil
	}
	return fmt.Sprintf("none of its dependents was orphaned (%s still owned by it) once the orphan propagation was taken off", strings.Join(owned, ", ")), nil
}

type owner int

const (
	orphaned owner = iota
	ownedByIt
	ownedByOther
)

// ownership says who owns a dependent with refs: nobody, the object uid, or
// another owner.
func ownership(refs []metav1.OwnerReference, uid types.UID) owner {
	if len(refs) == 0 {
		return orphaned
	}
	for _, r := range refs {
		if r.UID == uid {
			return ownedByIt
		}
	}
	return ownedByOther
}

// cancel ends a re-create whose old object someone else deleted (invariant
// I2): the record goes first, then the finalizer, so that a crash in between
// leaves no record that would create the object again; the garbage collector
// then does what that delete asked for with the dependents.
func (c *Controller) cancel(ctx context.Context, sts *appsv1.StatefulSet, rec *recreate.Record, why string) error {
	klog.FromContext(ctx).Info("The StatefulSet was deleted by another client during its re-create; not re-creating it", "reason", why, "uid", sts.UID)
	if err := c.deleteRecord(ctx, sts.Namespace, sts.Name, rec); err != nil {
		return err
	}
	c.recorder.Eventf(sts, corev1.EventTypeNormal, EventRecreateCancelled,
		"Another client deleted this StatefulSet during its re-create (%s): it is not re-created; the record %s/%s is deleted and the object released to the garbage collector",
		why, c.recordNamespace, recreate.RecordName(sts.Namespace, sts.Name))
	_, err := c.setFinalizer(ctx, sts, false, "")
	return err
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
	_, err = c.setFinalizer(ctx, sts, false, "")
	return err
}

// createNew is step 4, from the record as the API holds it now (the cache may
// hold an older version, from before the release brought it up to date). It
// returns nil (and no error) when an object of the name exists (the old one
// not yet gone, or one another client created) or the record went.
func (c *Controller) createNew(ctx context.Context, namespace, name string) (*appsv1.StatefulSet, *recreate.Record, error) {
	recordName := recreate.RecordName(namespace, name)
	cm, err := c.client.CoreV1().ConfigMaps(c.recordNamespace).Get(ctx, recordName, metav1.GetOptions{})
	if err != nil {
		return nil, nil, ignoreNotFound(err, "read re-create record %s/%s", c.recordNamespace, recordName)
	}
	rec, err := recreate.Parse(cm)
	if err != nil {
		return nil, nil, nil // told by record(); left for a person
	}
	obj := rec.Object.DeepCopy()
	// Sent without managedFields: the apiserver would give every field to
	// the creator anyway; Finish puts the recorded ones back. The finalizer
	// keeps a delete of the new object visible until Finish has dropped the
	// record: without it, a delete before Finish would look like a crash
	// before the create, and the object would be created again (I2).
	obj.ManagedFields = nil
	obj.Finalizers = append(obj.Finalizers, recreate.Finalizer)
	if obj.Annotations == nil {
		obj.Annotations = map[string]string{}
	}
	obj.Annotations[recreate.RecordAnnotation] = recreate.RecordRef(c.recordNamespace, namespace, name)
	created, err := c.client.AppsV1().StatefulSets(namespace).Create(ctx, obj, metav1.CreateOptions{FieldManager: Name})
	if apierrors.IsAlreadyExists(err) {
		return nil, rec, nil
	}
	if err != nil {
		c.recorder.Eventf(rec.Object, corev1.EventTypeWarning, EventRecreateFailed,
			"Cannot create StatefulSet %s/%s from the re-create record ConfigMap %s/%s, will retry: %v (the record holds the object to create; it can also be created from there by hand)",
			namespace, obj.Name, c.recordNamespace, recordName, err)
		return nil, rec, fmt.Errorf("create StatefulSet %s/%s from its re-create record: %w", namespace, obj.Name, err)
	}
	klog.FromContext(ctx).Info("Created StatefulSet from the re-create record", "uid", created.UID, "oldUID", rec.OldUID)
	return created, rec, nil
}

// finishRecreate is step 5 for the object that now has the name: the old
// field ownership goes back, then the record, then the finalizer (in that
// order: a crash after the record leaves a finalizer and no record, which
// Abandon removes, never a record that would create the object again). A
// re-created object someone deleted before this step is not created again
// (cancel). An object another client created meanwhile (say, a GitOps tool
// that found the name free) is kept as it is; only the record goes, and the
// user is told when its templates are not the recorded ones.
func (c *Controller) finishRecreate(ctx context.Context, sts *appsv1.StatefulSet, rec *recreate.Record) error {
	live, err := c.client.AppsV1().StatefulSets(sts.Namespace).Get(ctx, sts.Name, metav1.GetOptions{})
	if err != nil {
		return ignoreNotFound(err, "read re-created StatefulSet %s/%s", sts.Namespace, sts.Name)
	}
	if live.UID == rec.OldUID {
		return nil // the cache was behind; decided again on the next event
	}
	if live.DeletionTimestamp != nil && recreate.HasFinalizer(live) {
		return c.cancel(ctx, live, rec, "the re-created object was deleted before the re-create finished")
	}
	if managed, ok := recreate.RestoredManagedFields(live.ManagedFields, rec.Object.ManagedFields, Name); ok {
		if live, err = c.restoreOwnership(ctx, live, managed); err != nil {
			return err
		}
	}
	if err := c.deleteRecord(ctx, sts.Namespace, sts.Name, rec); err != nil {
		return err
	}
	same := sameTemplates(live.Spec.VolumeClaimTemplates, rec.Object.Spec.VolumeClaimTemplates)
	if recreate.OtherInstall(live, c.recordNamespace) == "" {
		var recreated string
		if same {
			recreated = c.encodedStep(ctx, live, status.StepRecreated, fmt.Sprintf("re-created with the volume claim templates %s, replacing uid %s",
				describeTemplates(live.Spec.VolumeClaimTemplates), rec.OldUID))
		}
		if _, err := c.setFinalizer(ctx, live, false, recreated); err != nil {
			return err
		}
	}
	if same {
		c.recorder.Eventf(live, corev1.EventTypeNormal, EventRecreated,
			"Re-created with the volume claim templates %s (replaces uid %s; pods and PVCs kept and adopted)", describeTemplates(live.Spec.VolumeClaimTemplates), rec.OldUID)
		return nil
	}
	c.recorder.Eventf(live, corev1.EventTypeWarning, EventRecreatedByOthers,
		"Another client created this StatefulSet while statefulset-resizer was re-creating it (replacing uid %s); it is kept as created, with the volume claim templates %s instead of the recorded %s",
		rec.OldUID, describeTemplates(live.Spec.VolumeClaimTemplates), describeTemplates(rec.Object.Spec.VolumeClaimTemplates))
	return nil
}

// restoreOwnership gives the re-created object the field ownership of the old
// one (recreate.RestoredManagedFields), so that Helm, kubectl and server-side
// apply managers own what they owned before, with the live object's
// resourceVersion as precondition.
func (c *Controller) restoreOwnership(ctx context.Context, live *appsv1.StatefulSet, managed []metav1.ManagedFieldsEntry) (*appsv1.StatefulSet, error) {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": live.ResourceVersion,
		"managedFields":   managed,
	}})
	if err != nil {
		return nil, fmt.Errorf("build managedFields patch: %w", err)
	}
	written, err := c.client.AppsV1().StatefulSets(live.Namespace).Patch(ctx, live.Name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: Name})
	if err != nil {
		return nil, fmt.Errorf("restore the field ownership of re-created StatefulSet %s/%s: %w", live.Namespace, live.Name, err)
	}
	c.fresh.Wrote(writeKey("sts", live.Namespace, live.Name), live.ResourceVersion, written.ResourceVersion)
	return written, nil
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
