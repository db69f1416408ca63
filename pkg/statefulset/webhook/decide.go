// Package webhook is statefulset-resizer's mutating admission webhook: it lets an
// update of a StatefulSet that changes only the storage requests,
// VolumeAttributesClass names (to another class or none, never ""), labels and
// annotations of its volumeClaimTemplates through the apiserver, which forbids
// changing the templates, by putting the live templates back into the request
// and recording the requested ones in the annotation of package desired. The
// controller then re-creates the StatefulSet with the recorded templates and
// brings the PVCs to them. The rules are docs/design.md §3.9 rules 9-12.
//
// Decide is the pure decision over one admission request; Handler serves it as
// AdmissionReview v1 over HTTPS and never denies a request (the webhook is
// registered with failurePolicy Ignore: when it is down or says nothing, the
// apiserver answers as it does without it; and, for an object with a pending
// change, with failurePolicy Fail, in entries of their own served on the same
// path: docs/design.md §3.9), but warns the client of what happened to its
// template change or to a pending one. It reads nothing from the API: the
// `statefulset-resizer webhook` process that serves it runs with a
// ServiceAccount that can write nothing but its certificate. Certificates are
// managed by CertManager (generated, kept in a Secret, CA bundle injected) or
// read from files by FileCertificate.
package webhook

import (
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/desired"
)

// Path is the URL path the webhook is served on.
const Path = "/mutate-statefulset-volume-claim-templates"

// lastApplied is kubectl's client-side apply annotation: the manifest it last applied.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// Request is what Decide needs of an admission request.
type Request struct {
	// Operation is the admission operation (CREATE, UPDATE, ...).
	Operation string
	// Group, Version, Resource and SubResource name what is written.
	Group, Version, Resource, SubResource string
	// Object is the object as it would be stored, OldObject the live one (JSON).
	Object, OldObject []byte
	// FieldManager is request.options.fieldManager (empty when the client set none).
	FieldManager string
}

// Decision is Decide's answer.
type Decision struct {
	// Patch is a JSON Patch (RFC 6902) to apply to the request's object; nil
	// when the request is left as it is.
	Patch []byte
	// Reason says why, for the log and the tests.
	Reason string
	// From and To are the live and the requested templates' sizes and classes
	// when Patch records a desire (rule 9), for the log.
	From, To string
	// Warnings are one-line messages for the client (the admission response's
	// warnings, printed by kubectl and Helm): what became of its template
	// change, or of a pending one its update keeps.
	Warnings []string
}

// ownFieldManager is the field manager of statefulset-resizer's own writes
// (the controller's name): they keep a desire without a warning, as no user
// sees them.
const ownFieldManager = "statefulset-resizer"

// object is the part of a StatefulSet Decide reads. Templates stay raw JSON so
// that the live ones go back into the request byte for byte, including fields
// this binary's API types do not know.
type object struct {
	Metadata metav1.ObjectMeta `json:"metadata"`
	Spec     struct {
		VolumeClaimTemplates []json.RawMessage `json:"volumeClaimTemplates"`
	} `json:"spec"`
}

// Decide applies docs/design.md §3.9 rules 9-12 to one admission request. It
// never fails: whatever it cannot understand is left alone (rule 11), so the
// apiserver gives its usual answer.
func Decide(r Request) Decision {
	if r.Operation != "UPDATE" || r.Group != "apps" || r.Version != "v1" || r.Resource != "statefulsets" || r.SubResource != "" {
		return Decision{Reason: "not an update of an apps/v1 StatefulSet"}
	}
	var old, req object
	if err := json.Unmarshal(r.OldObject, &old); err != nil {
		return Decision{Reason: "cannot decode the live object: " + err.Error()}
	}
	if err := json.Unmarshal(r.Object, &req); err != nil {
		return Decision{Reason: "cannot decode the request's object: " + err.Error()}
	}
	if v, ok := req.Metadata.Labels[desired.OptInLabel]; ok && v != desired.OptInValue {
		return Decision{Reason: fmt.Sprintf("opted out: label %s=%q", desired.OptInLabel, v)}
	}
	changes, err := compareTemplates(old.Spec.VolumeClaimTemplates, req.Spec.VolumeClaimTemplates)
	switch {
	case err != nil:
		return Decision{Reason: "templates differ in more than size, class, labels and annotations: " + err.Error()}
	case anyChange(changes):
		return recordDesire(&old, &req, changes)
	default:
		return clearDesire(&old, &req, r.FieldManager)
	}
}

// recordDesire is rule 9: the live templates go back into the request and the
// request's sizes and classes into the annotation, with the labels and
// annotations of the templates whose labels or annotations change.
func recordDesire(old, req *object, changes []change) Decision {
	want, err := decodeTemplates(req.Spec.VolumeClaimTemplates)
	if err != nil {
		return Decision{Reason: err.Error()}
	}
	if err := validateRequested(want, changes); err != nil {
		return Decision{Reason: "not recorded: " + err.Error(), Warnings: []string{notTakenWarning(ref(old), err)}}
	}
	ds, err := desired.FromTemplates(want)
	if err != nil {
		return Decision{Reason: err.Error()}
	}
	for i, c := range changes {
		if c.metadata {
			ds[i].Metadata = desired.MetadataOf(&want[i])
		}
	}
	value, err := desired.Format(ds)
	if err != nil {
		return Decision{Reason: err.Error()}
	}
	live, _ := decodeTemplates(old.Spec.VolumeClaimTemplates) // for the log and the warning only
	replaced := ""
	if prev, ok := old.Metadata.Annotations[desired.Annotation]; ok && prev != value {
		replaced = pendingChanges(old, prev)
	}
	ops := []patchOp{{Op: "replace", Path: "/spec/volumeClaimTemplates", Value: old.Spec.VolumeClaimTemplates}}
	ops = append(ops, setAnnotation(req.Metadata.Annotations, value))
	return Decision{Patch: mustMarshal(ops), Reason: "templates differ only in size, class, labels or annotations: live templates kept, desire recorded",
		From: sizes(live), To: value, Warnings: []string{recordedWarning(ref(old), live, ds, replaced)}}
}

// validateRequested checks the labels, annotations and class names rule 9
// would record as a PVC's are checked. The apiserver checks none of them on a
// StatefulSet update (it skips the templates, which it then refuses to change
// anyway), so a value it would refuse on a PVC, recorded, would fail only
// later, when the controller re-creates the StatefulSet or patches the PVCs.
// Left to the apiserver instead, the update gets its usual error at once. The
// first error only, to keep the warning short.
func validateRequested(want []corev1.PersistentVolumeClaim, changes []change) error {
	for i, c := range changes {
		path := field.NewPath("spec", "volumeClaimTemplates").Index(i)
		if errs := desired.ValidateTemplate(&want[i], path, c.metadata, c.class); len(errs) > 0 {
			return errs[0]
		}
	}
	return nil
}

// clearDesire is rule 10: with the templates as they are live, a desire is
// removed when the request re-states the templates, and kept otherwise, with
// a warning to the client, whose update may look like it undid the change.
func clearDesire(old, req *object, fieldManager string) Decision {
	oldValue, had := old.Metadata.Annotations[desired.Annotation]
	if !had {
		return Decision{Reason: "templates unchanged, no desire recorded"}
	}
	if value, ok := req.Metadata.Annotations[desired.Annotation]; !ok || value != oldValue {
		return Decision{Reason: "templates unchanged; the request itself changes the desire annotation"}
	}
	if by := restatedBy(old, req, fieldManager); by != "" {
		ops := []patchOp{{Op: "remove", Path: "/metadata/annotations/" + escapePointer(desired.Annotation)}}
		return Decision{Patch: mustMarshal(ops), Reason: "the live templates re-stated by " + by + ": desire cleared", From: oldValue}
	}
	d := Decision{Reason: "templates unchanged and not re-stated by the request: desire kept"}
	if changes := pendingChanges(old, oldValue); changes != "" && fieldManager != ownFieldManager {
		d.Warnings = []string{keptWarning(ref(old), changes)}
	}
	return d
}

// pendingChanges describes what the desire value changes in the live
// templates; "" when it changes nothing or cannot be read (the controller
// tells about an unusable desire).
func pendingChanges(old *object, value string) string {
	ds, err := desired.Parse(value)
	if err != nil {
		return ""
	}
	live, err := decodeTemplates(old.Spec.VolumeClaimTemplates)
	if err != nil {
		return ""
	}
	return describeChanges(live, ds)
}

// restatedBy says how the request re-states the templates ("" when it does
// not): a server-side apply by its field manager whose configuration has the
// templates, or a new client-side apply configuration whose templates are the
// live ones. Nothing else: the apiserver records field ownership before it
// calls the webhook, so the manager that raised a size owns the templates in
// its Update entry from then on, whatever its later updates carry.
func restatedBy(old, req *object, fieldManager string) string {
	if fieldManager != "" && appliesTemplates(req.Metadata.ManagedFields, fieldManager) {
		return "a server-side apply by " + fieldManager
	}
	reqApplied, ok := req.Metadata.Annotations[lastApplied]
	if !ok || reqApplied == old.Metadata.Annotations[lastApplied] {
		return ""
	}
	var applied object
	if err := json.Unmarshal([]byte(reqApplied), &applied); err != nil {
		return ""
	}
	if !statesTemplates(old.Spec.VolumeClaimTemplates, applied.Spec.VolumeClaimTemplates) {
		return ""
	}
	return "a client-side apply"
}

// appliesTemplates reports whether manager's server-side apply configuration
// has spec.volumeClaimTemplates: its Apply entry of the main resource in
// managedFields owns them. The fields of an Apply entry are exactly those of
// the configuration last applied; an Update entry's are every field the
// manager ever changed, so it never counts.
func appliesTemplates(managedFields []metav1.ManagedFieldsEntry, manager string) bool {
	for _, e := range managedFields {
		if e.Manager != manager || e.Operation != metav1.ManagedFieldsOperationApply || e.Subresource != "" || e.FieldsV1 == nil {
			continue
		}
		var fields struct {
			Spec map[string]json.RawMessage `json:"f:spec"`
		}
		if json.Unmarshal(e.FieldsV1.Raw, &fields) == nil {
			if _, ok := fields.Spec["f:volumeClaimTemplates"]; ok {
				return true
			}
		}
	}
	return false
}

// ref names the StatefulSet as NAMESPACE/NAME, as statefulset-resizer wait takes it.
func ref(o *object) string {
	return o.Metadata.Namespace + "/" + o.Metadata.Name
}

// setAnnotation adds (or replaces) the desire annotation.
func setAnnotation(annotations map[string]string, value string) patchOp {
	if annotations == nil {
		return patchOp{Op: "add", Path: "/metadata/annotations", Value: map[string]string{desired.Annotation: value}}
	}
	return patchOp{Op: "add", Path: "/metadata/annotations/" + escapePointer(desired.Annotation), Value: value}
}

// sizes is the desire annotation value of templates (sizes and classes), or a
// description of why it has none, for the log.
func sizes(templates []corev1.PersistentVolumeClaim) string {
	ds, err := desired.FromTemplates(templates)
	if err != nil {
		return err.Error()
	}
	v, err := desired.Format(ds)
	if err != nil {
		return err.Error()
	}
	return v
}

type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

func mustMarshal(ops []patchOp) []byte {
	b, err := json.Marshal(ops)
	if err != nil {
		panic(fmt.Sprintf("encoding a JSON patch of plain values: %v", err)) // cannot happen
	}
	return b
}

// escapePointer escapes a JSON Pointer reference token (RFC 6901).
func escapePointer(token string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(token)
}
