// Package webhook is statefulset-resizer's mutating admission webhook: it lets an
// update of a StatefulSet that changes only the storage requests and
// VolumeAttributesClass names (to a named class, never to none) of its
// volumeClaimTemplates through the apiserver, which forbids changing the
// templates, by putting the live templates back into the request and recording
// the requested ones in the annotation of package desired. The controller then
// brings the PVCs to the recorded sizes and classes. The rules are
// docs/design.md §3.9 rules 9-12.
//
// Decide is the pure decision over one admission request; Handler serves it as
// AdmissionReview v1 over HTTPS and never denies a request (the webhook is
// registered with failurePolicy Ignore: when it is down or says nothing, the
// apiserver answers as it does without it). Certificates are managed by
// CertManager (generated, kept in a Secret, CA bundle injected) or read from
// files by FileCertificate.
package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
}

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
	cmp, err := compareTemplates(old.Spec.VolumeClaimTemplates, req.Spec.VolumeClaimTemplates)
	switch {
	case err != nil:
		return Decision{Reason: "templates differ in more than size and class: " + err.Error()}
	case cmp == sizeOrClassDiffer:
		return recordDesire(&old, &req)
	default:
		return clearDesire(&old, &req, r.FieldManager)
	}
}

// recordDesire is rule 9: the live templates go back into the request and the
// request's sizes and classes into the annotation.
func recordDesire(old, req *object) Decision {
	want, err := decodeTemplates(req.Spec.VolumeClaimTemplates)
	if err != nil {
		return Decision{Reason: err.Error()}
	}
	ds, err := desired.FromTemplates(want)
	if err != nil {
		return Decision{Reason: err.Error()}
	}
	value, err := desired.Format(ds)
	if err != nil {
		return Decision{Reason: err.Error()}
	}
	live, _ := decodeTemplates(old.Spec.VolumeClaimTemplates) // for the log only: "[]" if it does not decode
	liveValue := sizes(live)
	ops := []patchOp{{Op: "replace", Path: "/spec/volumeClaimTemplates", Value: old.Spec.VolumeClaimTemplates}}
	ops = append(ops, setAnnotation(req.Metadata.Annotations, value))
	return Decision{Patch: mustMarshal(ops), Reason: "templates differ only in size and class: live templates kept, desire recorded", From: liveValue, To: value}
}

// clearDesire is rule 10: with the templates as they are live, a desire is
// removed when the request re-states the templates, and kept otherwise.
func clearDesire(old, req *object, fieldManager string) Decision {
	oldValue, had := old.Metadata.Annotations[desired.Annotation]
	if !had {
		return Decision{Reason: "templates unchanged, no desire recorded"}
	}
	if value, ok := req.Metadata.Annotations[desired.Annotation]; !ok || value != oldValue {
		return Decision{Reason: "templates unchanged; the request itself changes the desire annotation"}
	}
	by := restatedBy(old, req, fieldManager)
	if by == "" {
		return Decision{Reason: "templates unchanged and not re-stated by the request: desire kept"}
	}
	ops := []patchOp{{Op: "remove", Path: "/metadata/annotations/" + escapePointer(desired.Annotation)}}
	return Decision{Patch: mustMarshal(ops), Reason: "the live templates re-stated by " + by + ": desire cleared", From: oldValue}
}

// restatedBy says how the request re-states the templates ("" when it does
// not): its field manager owns spec.volumeClaimTemplates, or it carries a new
// client-side apply configuration whose templates are the live ones.
func restatedBy(old, req *object, fieldManager string) string {
	if fieldManager != "" && ownsTemplates(req.Metadata.ManagedFields, fieldManager) {
		return "field manager " + fieldManager
	}
	reqApplied, ok := req.Metadata.Annotations[lastApplied]
	if !ok || reqApplied == old.Metadata.Annotations[lastApplied] {
		return ""
	}
	var applied object
	if err := json.Unmarshal([]byte(reqApplied), &applied); err != nil {
		return ""
	}
	if cmp, err := compareTemplates(old.Spec.VolumeClaimTemplates, applied.Spec.VolumeClaimTemplates); err != nil || cmp != equal {
		return ""
	}
	return "a client-side apply"
}

// ownsTemplates reports whether manager owns spec.volumeClaimTemplates of the
// main resource in managedFields.
func ownsTemplates(managedFields []metav1.ManagedFieldsEntry, manager string) bool {
	for _, e := range managedFields {
		if e.Manager != manager || e.Subresource != "" || e.FieldsV1 == nil {
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

type comparison int

const (
	equal comparison = iota
	sizeOrClassDiffer
)

// compareTemplates compares two templates lists: equal, differing only in the
// storage requests and class names (rule 9, see compareTemplate), or an error
// saying what else differs.
func compareTemplates(old, req []json.RawMessage) (comparison, error) {
	if len(old) != len(req) {
		return 0, fmt.Errorf("%d templates live, %d in the request", len(old), len(req))
	}
	result := equal
	for i := range old {
		c, err := compareTemplate(old[i], req[i])
		if err != nil {
			return 0, fmt.Errorf("template %d: %w", i, err)
		}
		if c == sizeOrClassDiffer {
			result = sizeOrClassDiffer
		}
	}
	return result, nil
}

// compareTemplate compares one template: everything but the storage request
// and the class name as generic JSON (so that a field this binary does not
// know still counts), the storage request by value, the class name by
// compareClass. A change of either needs a storage request in both templates:
// the annotation always records a size.
func compareTemplate(oldRaw, reqRaw json.RawMessage) (comparison, error) {
	oldT, err := splitTemplate(oldRaw)
	if err != nil {
		return 0, err
	}
	reqT, err := splitTemplate(reqRaw)
	if err != nil {
		return 0, err
	}
	if !reflect.DeepEqual(oldT.rest, reqT.rest) {
		return 0, fmt.Errorf("differs in more than resources.requests.storage and volumeAttributesClassName")
	}
	classChanged, err := compareClass(oldT.class, reqT.class)
	if err != nil {
		return 0, err
	}
	sizeChanged := !(oldT.size == nil && reqT.size == nil || oldT.size != nil && reqT.size != nil && oldT.size.Cmp(*reqT.size) == 0)
	switch {
	case !sizeChanged && !classChanged:
		return equal, nil
	case oldT.size == nil && reqT.size == nil:
		return 0, fmt.Errorf("the class changes but the template has no storage request")
	case oldT.size == nil || reqT.size == nil:
		return 0, fmt.Errorf("a storage request is added or removed")
	}
	return sizeOrClassDiffer, nil
}

// compareClass reports whether the request changes the class name; a change
// to no class (unset or "") is an error. statefulset-resizer can set a class
// on a volume but not take one away: the PVC's class can be unset only while
// the volume has not been modified to it yet, so a recorded removal would end
// in a re-created StatefulSet whose templates say "no class" over volumes that
// keep one (docs/design.md §3.9 rule 9).
func compareClass(old, req *string) (bool, error) {
	if old == nil && req == nil || old != nil && req != nil && *old == *req {
		return false, nil
	}
	if req == nil || *req == "" {
		return false, fmt.Errorf("volumeAttributesClassName %s -> %s: only a change to a named class is taken", className(old), className(req))
	}
	return true, nil
}

func className(c *string) string {
	if c == nil {
		return "unset"
	}
	return fmt.Sprintf("%q", *c)
}

// template is a template split by splitTemplate.
type template struct {
	rest  map[string]any     // everything but the two below, generic JSON
	size  *resource.Quantity // spec.resources.requests.storage, nil when absent
	class *string            // spec.volumeAttributesClassName, nil when absent or null
}

// splitTemplate decodes a template as generic JSON and takes its storage
// request and its class name out of it.
func splitTemplate(raw json.RawMessage) (template, error) {
	var t template
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&t.rest); err != nil || t.rest == nil {
		return t, fmt.Errorf("not a JSON object: %v", err)
	}
	spec, _ := t.rest["spec"].(map[string]any)
	if c, ok := spec["volumeAttributesClassName"]; ok {
		switch c := c.(type) {
		case nil:
		case string:
			t.class = &c
		default:
			return t, fmt.Errorf("volumeAttributesClassName %v is not a string", c)
		}
		delete(spec, "volumeAttributesClassName")
	}
	resources, _ := spec["resources"].(map[string]any)
	requests, _ := resources["requests"].(map[string]any)
	if s, ok := requests["storage"]; ok {
		str, isString := s.(string)
		q, perr := resource.ParseQuantity(str)
		if !isString || perr != nil {
			return t, fmt.Errorf("storage request %v is not a quantity", s)
		}
		t.size = &q
		delete(requests, "storage")
	}
	return t, nil
}

// decodeTemplates decodes raw templates into the API type.
func decodeTemplates(raw []json.RawMessage) ([]corev1.PersistentVolumeClaim, error) {
	out := make([]corev1.PersistentVolumeClaim, len(raw))
	for i, r := range raw {
		if err := json.Unmarshal(r, &out[i]); err != nil {
			return nil, fmt.Errorf("template %d: %v", i, err)
		}
	}
	return out, nil
}
