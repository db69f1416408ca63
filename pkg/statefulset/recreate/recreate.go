// Package recreate is the deciding half of statefulset-resizer's crash-safe
// re-create: once the PVCs of a StatefulSet reached the sizes of its
// desired-templates annotation, the StatefulSet is replaced by one whose
// volume claim templates have those sizes (the apiserver refuses to change
// them in place), so that the live object ends equal to what the user applied.
//
// The steps (docs/design.md, statefulset-resizer's re-create):
//  1. Store: the object to create is written to a record ConfigMap
//     (RecordName, label RecordLabel) in the StatefulSet's namespace, with the
//     old object's uid and resourceVersion.
//  2. Delete: the old object is deleted with orphan propagation (pods, PVCs
//     and ControllerRevisions stay) and uid + resourceVersion preconditions.
//  3. Create: the object is created from the record; the StatefulSet
//     controller adopts the orphaned pods (same pod template, same revision).
//  4. Finish: the old field ownership (managedFields) is put back and the
//     record deleted.
//
// Next decides the step from what exists (StatefulSet, record), nothing
// else, so that a controller restarted at any point continues where the
// previous one stopped: never two objects (the name is unique, and the old
// one is deleted only while the record holds its replacement), never none for
// longer than a restart (a record without a StatefulSet means "create").
package recreate

import (
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/desired"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/plan"
)

const (
	// RecordPrefix + the StatefulSet's name is the name of its record
	// ConfigMap, in the StatefulSet's namespace.
	RecordPrefix = "statefulset-resizer-recreate-"
	// RecordLabel is set to "true" on every record; the controller watches
	// only ConfigMaps with it.
	RecordLabel = "csi-resizer.io/recreate-record"

	keyStatefulSet     = "statefulset"
	keyUID             = "uid"
	keyResourceVersion = "resourceVersion"
)

// Record is a parsed record ConfigMap.
type Record struct {
	// OldUID and OldResourceVersion identify the object being replaced; they
	// are the preconditions of its delete.
	OldUID             types.UID
	OldResourceVersion string
	// Object is the StatefulSet to create, with the old object's
	// managedFields (put back after the create).
	Object *appsv1.StatefulSet
	// ConfigMapUID is the record's own uid, the precondition of its delete.
	ConfigMapUID types.UID
}

// RecordName is the name of the record of the named StatefulSet.
func RecordName(statefulSet string) string { return RecordPrefix + statefulSet }

// Build returns the record for replacing live (read in full from the API,
// not from a trimmed cache) by an object with the given volume claim
// templates: live without its identity, status and desired-templates
// annotation.
func Build(live *appsv1.StatefulSet, templates []corev1.PersistentVolumeClaim) (*corev1.ConfigMap, error) {
	name := RecordName(live.Name)
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return nil, fmt.Errorf("StatefulSet %s/%s: record name %q is not a valid ConfigMap name: %v", live.Namespace, live.Name, name, errs)
	}
	obj := live.DeepCopy()
	obj.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"}
	obj.Spec.VolumeClaimTemplates = make([]corev1.PersistentVolumeClaim, len(templates))
	for i := range templates {
		templates[i].DeepCopyInto(&obj.Spec.VolumeClaimTemplates[i])
	}
	delete(obj.Annotations, desired.Annotation)
	managed, err := withoutDesiredAnnotation(obj.ManagedFields)
	if err != nil {
		return nil, fmt.Errorf("StatefulSet %s/%s: %w", live.Namespace, live.Name, err)
	}
	obj.ManagedFields = managed
	obj.UID, obj.ResourceVersion, obj.Generation, obj.SelfLink = "", "", 0, ""
	obj.CreationTimestamp = metav1.Time{}
	obj.DeletionTimestamp, obj.DeletionGracePeriodSeconds = nil, nil
	obj.Finalizers = withoutDeletionFinalizers(obj.Finalizers)
	obj.Status = appsv1.StatefulSetStatus{}
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("encoding StatefulSet %s/%s: %w", live.Namespace, live.Name, err)
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: live.Namespace, Name: name, Labels: map[string]string{RecordLabel: "true"}},
		Data: map[string]string{
			keyStatefulSet:     string(data),
			keyUID:             string(live.UID),
			keyResourceVersion: live.ResourceVersion,
		},
	}, nil
}

// withoutDeletionFinalizers drops the finalizers the apiserver adds for a
// delete (the old object may be read while being deleted).
func withoutDeletionFinalizers(fs []string) []string {
	var out []string
	for _, f := range fs {
		if f != metav1.FinalizerOrphanDependents && f != metav1.FinalizerDeleteDependents {
			out = append(out, f)
		}
	}
	return out
}

// Parse reads a record ConfigMap. The error names the ConfigMap and what is
// wrong with it.
func Parse(cm *corev1.ConfigMap) (*Record, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("record ConfigMap %s/%s of statefulset-resizer's re-create: %s", cm.Namespace, cm.Name, fmt.Sprintf(format, args...))
	}
	name, ok := cutPrefix(cm.Name)
	if !ok {
		return nil, bad("name does not start with %s", RecordPrefix)
	}
	var obj appsv1.StatefulSet
	if err := json.Unmarshal([]byte(cm.Data[keyStatefulSet]), &obj); err != nil {
		return nil, bad("data %q is not a StatefulSet: %v", keyStatefulSet, err)
	}
	switch {
	case obj.Name != name || obj.Namespace != cm.Namespace:
		return nil, bad("holds StatefulSet %s/%s, want %s/%s", obj.Namespace, obj.Name, cm.Namespace, name)
	case cm.Data[keyUID] == "":
		return nil, bad("data %q (the uid of the StatefulSet being replaced) is empty", keyUID)
	}
	return &Record{
		OldUID:             types.UID(cm.Data[keyUID]),
		OldResourceVersion: cm.Data[keyResourceVersion],
		Object:             &obj,
		ConfigMapUID:       cm.UID,
	}, nil
}

// StatefulSetName returns the name of the StatefulSet a record ConfigMap is
// for; ok is false for a ConfigMap that is not a record.
func StatefulSetName(cm *corev1.ConfigMap) (string, bool) {
	if cm.Labels[RecordLabel] != "true" {
		return "", false
	}
	return cutPrefix(cm.Name)
}

func cutPrefix(name string) (string, bool) {
	if len(name) <= len(RecordPrefix) || name[:len(RecordPrefix)] != RecordPrefix {
		return "", false
	}
	return name[len(RecordPrefix):], true
}

// Step is what to do next for one StatefulSet.
type Step string

const (
	// Nothing: no re-create wanted or under way.
	Nothing Step = "Nothing"
	// Store the record (step 1).
	Store Step = "Store"
	// Delete the old object with orphan propagation (step 2).
	Delete Step = "Delete"
	// WaitForDeletion: the old object is being deleted (the garbage
	// collector orphans its dependents first); its removal brings the key
	// back.
	WaitForDeletion Step = "WaitForDeletion"
	// Create the object from the record (step 3).
	Create Step = "Create"
	// Finish: the new object exists; put back the field ownership if the
	// create took it, and delete the record (steps 4 and 5).
	Finish Step = "Finish"
)

// Input is what Next decides from.
type Input struct {
	// StatefulSet is the object of the name, nil when there is none.
	StatefulSet *appsv1.StatefulSet
	// Record is its record, nil when there is none.
	Record *Record
	// Wanted: re-creating is enabled, the StatefulSet's desired templates
	// differ from its own, and every replica of every template is ready at
	// the desired sizes (see Wanted).
	Wanted bool
}

// Pending reports whether sts will be re-created once its replicas are ready:
// re-creating is enabled and the templates to reconcile (templates, with the
// desired sizes; nil when the StatefulSet has no usable desire) differ from
// the StatefulSet's own. It goes into the status, so that `wait` lasts until
// the re-created object is finished.
func Pending(enabled bool, sts *appsv1.StatefulSet, templates []corev1.PersistentVolumeClaim) bool {
	return enabled && templates != nil && !apiequality.Semantic.DeepEqual(sts.Spec.VolumeClaimTemplates, templates)
}

// Wanted reports whether the re-create should start now: it is Pending and
// the decision (made with those templates) has every replica of every
// template Ready, which the plan says only of pods running at the update
// revision with volumes at the desired sizes.
func Wanted(pending bool, d *plan.Decision) bool {
	if !pending || d == nil || d.Deferred != "" {
		return false
	}
	for i := range d.Templates {
		if d.Templates[i].Count().Ready != d.DesiredReplicas {
			return false
		}
	}
	return true
}

// Next is the step to take. Once a record exists, the job is finished
// whatever else changes: a record is only written when the job is wanted,
// and a delete whose preconditions fail drops it (the doing's part).
func Next(in Input) Step {
	sts, rec := in.StatefulSet, in.Record
	switch {
	case rec == nil && sts != nil && sts.DeletionTimestamp == nil && in.Wanted:
		return Store
	case rec == nil:
		return Nothing
	case sts == nil:
		return Create
	case sts.UID != rec.OldUID:
		return Finish
	case sts.DeletionTimestamp != nil:
		return WaitForDeletion
	}
	return Delete
}
