// Package recreate is the deciding half of statefulset-resizer's crash-safe
// re-create: once the admission webhook has recorded a change of a
// StatefulSet's volume claim templates (package desired), the StatefulSet is
// replaced by one with those templates (the apiserver refuses to change them
// in place), so that the live object says what the user applied while the
// PVCs catch up.
//
// The steps (docs/design.md §3.7 rule 8):
//  1. Store: the finalizer Finalizer is added to the old object, and the
//     object to create is written to a record ConfigMap (RecordName, label
//     RecordLabel) in statefulset-resizer's own namespace, where users who
//     can write ConfigMaps in theirs cannot forge one.
//  2. Delete: the old object is deleted with orphan propagation (pods, PVCs
//     and ControllerRevisions stay) and uid + resourceVersion preconditions,
//     after the record was checked against the latest object.
//  3. Release: once the garbage collector has orphaned the dependents, the
//     record is brought up to date with the terminating object (edits made
//     to it meanwhile are kept) and Finalizer is removed with the
//     resourceVersion as precondition: the object goes exactly as recorded.
//  4. Create: the object is created from the record; the StatefulSet
//     controller adopts the orphaned pods (same pod template, same revision).
//  5. Finish: the old field ownership (managedFields) is put back and the
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
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/desired"
)

const (
	// RecordPrefix + "<namespace>.<name>" of the StatefulSet is the name of
	// its record ConfigMap, in statefulset-resizer's own namespace (a
	// namespace name has no dot, so the first dot ends it).
	RecordPrefix = "statefulset-resizer-recreate-"
	// RecordLabel is set to "true" on every record; the controller watches
	// only ConfigMaps with it, in its own namespace.
	RecordLabel = "csi-resizer.io/recreate-record"
	// Finalizer keeps the old StatefulSet while it is replaced: it goes only
	// once the record holds the object's last version (step 3).
	Finalizer = "csi-resizer.io/recreate"
	// RecordAnnotation, on a StatefulSet carrying Finalizer, names its
	// record, "<record namespace>/<record name>": the install whose
	// re-create it is. It is written with the finalizer, so that a second
	// install (another namespace) never takes a re-create that is not its
	// own (invariant I6). The ConfigMaps themselves carry the key as a label.
	RecordAnnotation = RecordLabel

	keyStatefulSet     = "statefulset"
	keyUID             = "uid"
	keyResourceVersion = "resourceVersion"
)

// Record is a parsed record ConfigMap.
type Record struct {
	// OldUID and OldResourceVersion identify the version of the object being
	// replaced that Object was built from. The delete and the release of the
	// finalizer are guarded by the version they checked the record against
	// (UpToDate), which may be a later one that changes nothing to create.
	OldUID             types.UID
	OldResourceVersion string
	// Object is the StatefulSet to create, with the old object's
	// managedFields (put back after the create).
	Object *appsv1.StatefulSet
	// ConfigMapUID and ConfigMapResourceVersion are the record's own, the
	// preconditions of its delete and update.
	ConfigMapUID             types.UID
	ConfigMapResourceVersion string
	// Proven: this process proved, by a dry-run create, that Object will be
	// accepted, in the sync that stored it (never read from the record: a
	// record read or rewritten is proven again before the delete).
	Proven bool
}

// RecordName is the name of the record of the StatefulSet namespace/name.
func RecordName(namespace, statefulSet string) string {
	return RecordPrefix + namespace + "." + statefulSet
}

// Build returns the record, in recordNamespace, for replacing live (read in
// full from the API, not from a trimmed cache) by an object with the given
// volume claim templates: live without its identity, status, desired-templates
// annotation and deletion finalizers (Finalizer included).
func Build(live *appsv1.StatefulSet, templates []corev1.PersistentVolumeClaim, recordNamespace string) (*corev1.ConfigMap, error) {
	name := RecordName(live.Namespace, live.Name)
	if err := CheckName(live.Namespace, live.Name); err != nil {
		return nil, err
	}
	obj, err := ObjectToCreate(live, templates)
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("encoding StatefulSet %s/%s: %w", live.Namespace, live.Name, err)
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: recordNamespace, Name: name, Labels: map[string]string{RecordLabel: "true"}},
		Data: map[string]string{
			keyStatefulSet:     string(data),
			keyUID:             string(live.UID),
			keyResourceVersion: live.ResourceVersion,
		},
	}, nil
}

// CheckName reports, before anything is written, a StatefulSet whose record
// could not be stored: its name would not be a valid ConfigMap name.
func CheckName(namespace, statefulSet string) error {
	name := RecordName(namespace, statefulSet)
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return fmt.Errorf("StatefulSet %s/%s cannot be re-created: the name of its record ConfigMap %q is not valid (%s); "+
			"a shorter StatefulSet name is needed to change its volume claim templates", namespace, statefulSet, name, strings.Join(errs, "; "))
	}
	return nil
}

// RecordRef is the value of RecordAnnotation for a StatefulSet's record.
func RecordRef(recordNamespace, namespace, statefulSet string) string {
	return recordNamespace + "/" + RecordName(namespace, statefulSet)
}

// OtherInstall returns the record namespace of the install that re-creates
// sts when that is not recordNamespace's ("" when it is, or none is).
func OtherInstall(sts *appsv1.StatefulSet, recordNamespace string) string {
	ref, ok := sts.Annotations[RecordAnnotation]
	if !ok || !HasFinalizer(sts) {
		return ""
	}
	if other, _, _ := strings.Cut(ref, "/"); other != recordNamespace {
		return other
	}
	return ""
}

// ObjectToCreate is live as it is to be created: with templates, without
// what the apiserver sets and what belongs to the old object's deletion.
func ObjectToCreate(live *appsv1.StatefulSet, templates []corev1.PersistentVolumeClaim) (*appsv1.StatefulSet, error) {
	obj := live.DeepCopy()
	obj.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"}
	obj.Spec.VolumeClaimTemplates = make([]corev1.PersistentVolumeClaim, len(templates))
	for i := range templates {
		templates[i].DeepCopyInto(&obj.Spec.VolumeClaimTemplates[i])
	}
	delete(obj.Annotations, desired.Annotation)
	delete(obj.Annotations, RecordAnnotation)
	managed, err := withoutReplacedFields(obj.ManagedFields)
	if err != nil {
		return nil, fmt.Errorf("StatefulSet %s/%s: %w", live.Namespace, live.Name, err)
	}
	obj.ManagedFields = managed
	obj.UID, obj.ResourceVersion, obj.Generation, obj.SelfLink = "", "", 0, ""
	obj.CreationTimestamp = metav1.Time{}
	obj.DeletionTimestamp, obj.DeletionGracePeriodSeconds = nil, nil
	obj.Finalizers = withoutDeletionFinalizers(obj.Finalizers)
	obj.Status = appsv1.StatefulSetStatus{}
	return obj, nil
}

// UpToDate reports whether rec holds what Build would record for live and
// templates: the same object to create (managedFields compared by who owns
// what, not by when), from the same object. A newer version that makes no
// difference to the object to create (a status write, the garbage
// collector's finalizer) does not make a record stale.
func UpToDate(rec *Record, live *appsv1.StatefulSet, templates []corev1.PersistentVolumeClaim) (bool, error) {
	if rec.OldUID != live.UID {
		return false, nil
	}
	obj, err := ObjectToCreate(live, templates)
	if err != nil {
		return false, err
	}
	return apiequality.Semantic.DeepEqual(timeless(obj), timeless(rec.Object)), nil
}

// timeless is obj with its managedFields' timestamps cleared.
func timeless(obj *appsv1.StatefulSet) *appsv1.StatefulSet {
	obj = obj.DeepCopy()
	for i := range obj.ManagedFields {
		obj.ManagedFields[i].Time = nil
	}
	return obj
}

// withoutDeletionFinalizers drops the finalizers that belong to the old
// object's deletion: the apiserver's for a delete, and the re-create's own.
func withoutDeletionFinalizers(fs []string) []string {
	var out []string
	for _, f := range fs {
		if f != metav1.FinalizerOrphanDependents && f != metav1.FinalizerDeleteDependents && f != Finalizer {
			out = append(out, f)
		}
	}
	return out
}

// HasFinalizer reports whether sts carries the re-create's finalizer.
func HasFinalizer(sts *appsv1.StatefulSet) bool { return slices.Contains(sts.Finalizers, Finalizer) }

// Parse reads a record ConfigMap. The error names the ConfigMap and what is
// wrong with it.
func Parse(cm *corev1.ConfigMap) (*Record, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("record ConfigMap %s/%s of statefulset-resizer's re-create: %s", cm.Namespace, cm.Name, fmt.Sprintf(format, args...))
	}
	namespace, name, ok := cutPrefix(cm.Name)
	if !ok {
		return nil, bad("name is not %s<namespace>.<name>", RecordPrefix)
	}
	var obj appsv1.StatefulSet
	if err := json.Unmarshal([]byte(cm.Data[keyStatefulSet]), &obj); err != nil {
		return nil, bad("data %q is not a StatefulSet: %v", keyStatefulSet, err)
	}
	switch {
	case obj.Name != name || obj.Namespace != namespace:
		return nil, bad("holds StatefulSet %s/%s, want %s/%s", obj.Namespace, obj.Name, namespace, name)
	case cm.Data[keyUID] == "":
		return nil, bad("data %q (the uid of the StatefulSet being replaced) is empty", keyUID)
	}
	return &Record{
		OldUID:                   types.UID(cm.Data[keyUID]),
		OldResourceVersion:       cm.Data[keyResourceVersion],
		Object:                   &obj,
		ConfigMapUID:             cm.UID,
		ConfigMapResourceVersion: cm.ResourceVersion,
	}, nil
}

// StatefulSetOf returns the namespace and name of the StatefulSet a record
// ConfigMap is for; ok is false for a ConfigMap that is not a record.
func StatefulSetOf(cm *corev1.ConfigMap) (namespace, name string, ok bool) {
	if cm.Labels[RecordLabel] != "true" {
		return "", "", false
	}
	return cutPrefix(cm.Name)
}

func cutPrefix(recordName string) (namespace, name string, ok bool) {
	rest, ok := strings.CutPrefix(recordName, RecordPrefix)
	if !ok {
		return "", "", false
	}
	namespace, name, ok = strings.Cut(rest, ".")
	return namespace, name, ok && namespace != "" && name != ""
}

// Step is what to do next for one StatefulSet.
type Step string

const (
	// Nothing: no re-create wanted or under way.
	Nothing Step = "Nothing"
	// Store: add Finalizer to the old object and write the record (step 1).
	Store Step = "Store"
	// Delete the old object with orphan propagation, once the record is
	// checked against its latest version (step 2).
	Delete Step = "Delete"
	// WaitForDeletion: the old object is being deleted and the garbage
	// collector has yet to orphan its dependents (its finalizer is there);
	// its update brings the key back.
	WaitForDeletion Step = "WaitForDeletion"
	// Release: bring the record up to date with the terminating object and
	// remove Finalizer, which removes the object (step 3).
	Release Step = "Release"
	// Create the object from the record (step 4).
	Create Step = "Create"
	// Finish: the new object exists; put back the field ownership if the
	// create took it, and delete the record (step 5).
	Finish Step = "Finish"
	// Abandon: the object carries Finalizer but no re-create is under way
	// (stopped after the finalizer was added: the change was withdrawn, or
	// someone else deleted the object): remove the finalizer.
	Abandon Step = "Abandon"
	// Cancel: someone else deleted the old object (its deletion is not the
	// orphan delete of step 2: a foreground delete, or dependents still
	// owned once only Finalizer is left); it is not re-created (invariant
	// I2): the record goes, then the finalizer.
	Cancel Step = "Cancel"
)

// Input is what Next decides from.
type Input struct {
	// StatefulSet is the object of the name, nil when there is none.
	StatefulSet *appsv1.StatefulSet
	// Record is its record, nil when there is none.
	Record *Record
	// Wanted: re-creating is enabled, the StatefulSet is opted in, its
	// desired templates differ from its own, and nothing holds the re-create
	// back (see Blocked).
	Wanted bool
	// RecordNamespace is this install's: a StatefulSet whose re-create
	// another install holds (OtherInstall) is left to it.
	RecordNamespace string
}

// Pending reports whether sts is to be re-created: re-creating is enabled and
// the templates to reconcile (templates, with the desired changes; nil when
// the StatefulSet has no usable desire) differ from the StatefulSet's own. It
// goes into the status, so that `wait` lasts until the re-created object is
// finished.
func Pending(enabled bool, sts *appsv1.StatefulSet, templates []corev1.PersistentVolumeClaim) bool {
	return enabled && templates != nil && !apiequality.Semantic.DeepEqual(sts.Spec.VolumeClaimTemplates, templates)
}

// Blocked says why a pending re-create of sts cannot start now ("" when it
// can): the StatefulSet controller has not observed the current generation,
// or a rollout is under way whose revision history a new object would lose.
// A new object starts with no status, so the StatefulSet controller takes its
// update revision as its current one: harmless for a RollingUpdate without a
// partition, which brings every pod to the update revision anyway, but a
// partitioned or OnDelete rollout would then re-create the pods below the
// partition (or any deleted pod) at the update revision.
func Blocked(sts *appsv1.StatefulSet) string {
	switch {
	case sts.Status.ObservedGeneration < sts.Generation:
		return fmt.Sprintf("the StatefulSet controller has not observed generation %d yet", sts.Generation)
	case sts.Status.CurrentRevision == sts.Status.UpdateRevision:
		return ""
	case sts.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType:
		return fmt.Sprintf("an OnDelete rollout from revision %s to %s is under way; the re-create waits until every pod is at the update revision", sts.Status.CurrentRevision, sts.Status.UpdateRevision)
	case partition(sts) > 0:
		return fmt.Sprintf("a rollout with partition %d from revision %s to %s is under way; the re-create waits until it is complete", partition(sts), sts.Status.CurrentRevision, sts.Status.UpdateRevision)
	}
	return ""
}

func partition(sts *appsv1.StatefulSet) int32 {
	if ru := sts.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
		return *ru.Partition
	}
	return 0
}

// Next is the step to take. Once a record exists, the job is finished
// whatever else changes, except while the old object is not yet deleted: the
// Delete step checks the record against it and drops the record when the
// change was withdrawn.
func Next(in Input) Step {
	sts, rec := in.StatefulSet, in.Record
	switch {
	case rec == nil && sts == nil:
		return Nothing
	case rec == nil && OtherInstall(sts, in.RecordNamespace) != "":
		return Nothing
	case rec == nil && sts.DeletionTimestamp == nil && in.Wanted:
		return Store
	case rec == nil && HasFinalizer(sts):
		return Abandon
	case rec == nil:
		return Nothing
	case sts == nil:
		return Create
	case sts.UID != rec.OldUID:
		return Finish
	case sts.DeletionTimestamp == nil:
		return Delete
	case slices.Contains(sts.Finalizers, metav1.FinalizerDeleteDependents):
		return Cancel
	case HasFinalizer(sts) && len(sts.Finalizers) == 1:
		return Release
	}
	return WaitForDeletion
}
