package webhook

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/desired"
)

// fuzzTemplate builds a template from fuzz input; bits of shape pick optional parts.
func fuzzTemplate(name, size, class string, shape uint8) corev1.PersistentVolumeClaim {
	c := claim(name, "1Gi")
	if q, err := resource.ParseQuantity(size); err == nil {
		c.Spec.Resources.Requests[corev1.ResourceStorage] = q
	} else if shape&1 != 0 {
		c.Spec.Resources.Requests = nil
	}
	if class != "" || shape&8 != 0 {
		c.Spec.VolumeAttributesClassName = &class // "" with shape bit 8: an empty class, not none
	}
	if shape&2 != 0 {
		c.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
	}
	if shape&4 != 0 {
		c.Spec.StorageClassName = &name
	}
	if shape&16 != 0 {
		c.Labels = map[string]string{"app": "db"}
	}
	if shape&32 != 0 {
		c.Labels = map[string]string{"app": "db", "chart": class} // a value from the input, valid or not
	}
	if shape&64 != 0 {
		c.Annotations = map[string]string{size: "note"} // a key from the input, valid or not
	}
	if shape&128 != 0 {
		c.GenerateName = name // another metadata field
	}
	return c
}

// Bits of FuzzDecideInvariants' ownership: who owns the templates and how the request looks.
const (
	ownedByApply       = 1 << iota // the owning entry is an Apply (else an Update)
	ownedBySubresource             // the owning entry is the status subresource's
	newLastApplied                 // the request carries a new client-side apply manifest: its own object
	carriedLastApplied             // both objects carry the same client-side apply manifest
)

// FuzzDecideInvariants checks, for any pair of StatefulSets: a patch always
// applies; after it, the request's templates are the live ones (byte for byte)
// and nothing but the desire annotation differs from the request's object
// (rule 9), or the annotation is removed and nothing else changes (rule 10); a
// rule 9 patch is made only when the templates differ in nothing but size,
// class, labels and annotations, the request's classes being non-empty where
// they differ, its labels and annotations valid; its annotation, applied to the
// live templates, gives the request's, with metadata exactly for the templates
// whose labels or annotations change; a desire is cleared only by a server-side
// apply of the request's field manager or a new client-side apply manifest,
// never because of an Update entry; warnings are one line each, one for a
// recorded desire and one for a desire kept.
func FuzzDecideInvariants(f *testing.F) {
	f.Add("data", "10Gi", "", uint8(0), "data", "20Gi", "", uint8(0), "", "kubectl", true, false, uint8(ownedByApply))
	f.Add("data", "10Gi", "", uint8(0), "data", "10Gi", "gold", uint8(0), desire20, "kubectl", true, true, uint8(ownedByApply))
	f.Add("data", "10Gi", "", uint8(0), "data", "20Gi", "", uint8(2), "", "", false, false, uint8(0))
	f.Add("data", "1Gi", "a", uint8(4), "logs", "1Gi", "a", uint8(4), "[", "helm", true, true, uint8(ownedByApply))
	f.Add("data", "10Gi", "gold", uint8(0), "data", "20Gi", "", uint8(8), "", "kubectl", false, false, uint8(0)) // class emptied
	f.Add("data", "10Gi", "gold", uint8(0), "data", "10Gi", "", uint8(0), "", "kubectl", false, true, uint8(0))  // class removed
	f.Add("data", "10Gi", "", uint8(0), "data", "10Gi", "", uint8(8), "", "kubectl", false, false, uint8(0))     // unset -> ""
	// Found by the fuzzer: a class name that is not UTF-8 (JSON replaces it).
	f.Add("0", "0", "0", uint8(0x14), "0", "", "\xb0", uint8(0x04), "0", "0", true, true, uint8(0))
	// Template labels and annotations: changed, with a size, invalid, with another metadata field.
	f.Add("data", "10Gi", "", uint8(0), "data", "10Gi", "", uint8(16), "", "kubectl", false, false, uint8(0))
	f.Add("data", "10Gi", "db-1", uint8(32), "data", "20Gi", "db-2", uint8(32|64), "", "helm", true, false, uint8(ownedByApply))
	f.Add("data", "10Gi", "", uint8(16), "data", "10Gi", "bad value", uint8(32), "", "kubectl", false, false, uint8(0))
	f.Add("data", "10Gi", "", uint8(16), "data", "10Gi", "", uint8(128|16), "", "kubectl", false, false, uint8(0))
	// Finding 2 of issue 24: a later update by the manager whose Update entry owns the templates.
	f.Add("data", "10Gi", "", uint8(0), "data", "10Gi", "", uint8(0), desire20, "kubectl-edit", true, false, uint8(0))
	f.Add("data", "10Gi", "", uint8(0), "data", "10Gi", "", uint8(0), desire20, "kubectl", true, false, uint8(ownedByApply|ownedBySubresource))
	f.Add("data", "10Gi", "", uint8(0), "data", "10Gi", "", uint8(0), desire20, "kubectl-client-side-apply", false, false, uint8(newLastApplied))
	f.Add("data", "10Gi", "", uint8(0), "data", "10Gi", "", uint8(0), desire20, "kubectl-label", false, false, uint8(carriedLastApplied))
	f.Add("data", "10Gi", "", uint8(0), "data", "10Gi", "", uint8(0), desire20, ownFieldManager, true, false, uint8(0))
	f.Fuzz(func(t *testing.T, oldName, oldSize, oldClass string, oldShape uint8, reqName, reqSize, reqClass string, reqShape uint8,
		annotation, manager string, owns, twoTemplates bool, ownership uint8) {
		old := sts(fuzzTemplate(oldName, oldSize, oldClass, oldShape))
		req := sts(fuzzTemplate(reqName, reqSize, reqClass, reqShape))
		if twoTemplates {
			old.Spec.VolumeClaimTemplates = append(old.Spec.VolumeClaimTemplates, claim("extra", "1Gi"))
			req.Spec.VolumeClaimTemplates = append(req.Spec.VolumeClaimTemplates, claim("extra", "3Gi"))
		}
		if annotation != "" {
			withAnnotations(old, desired.Annotation, annotation)
			withAnnotations(req, desired.Annotation, annotation)
		}
		if owns {
			owner(manager, ownership, old)
			owner(manager, ownership, req)
		}
		lastApplyManifests(t, ownership, old, req)
		r := update(t, old, req, manager)
		// The objects as the apiserver sends them (JSON replaces invalid UTF-8, for one).
		old, req = &appsv1.StatefulSet{}, &appsv1.StatefulSet{}
		if json.Unmarshal(r.OldObject, old) != nil || json.Unmarshal(r.Object, req) != nil {
			t.Fatal("the objects do not decode")
		}
		d := Decide(r)
		checkWarningsShape(t, d)
		checkInvariants(t, r, old, req, d)
	})
}

// owner gives manager a managedFields entry owning the templates, as ownership says.
func owner(manager string, ownership uint8, s *appsv1.StatefulSet) {
	op, subresource := metav1.ManagedFieldsOperationUpdate, ""
	if ownership&ownedByApply != 0 {
		op = metav1.ManagedFieldsOperationApply
	}
	if ownership&ownedBySubresource != 0 {
		subresource = "status"
	}
	managedBy(manager, op, subresource, `{"f:spec":{"f:replicas":{},"f:volumeClaimTemplates":{}}}`, s)
}

// lastApplyManifests adds client-side apply manifests as ownership says: the request's own
// object as a new one, or the live object's as one both carry.
func lastApplyManifests(t *testing.T, ownership uint8, old, req *appsv1.StatefulSet) {
	switch {
	case ownership&newLastApplied != 0:
		withAnnotations(req, lastApplied, string(mustJSON(t, sts(req.Spec.VolumeClaimTemplates...))))
	case ownership&carriedLastApplied != 0:
		m := string(mustJSON(t, sts(old.Spec.VolumeClaimTemplates...)))
		withAnnotations(old, lastApplied, m)
		withAnnotations(req, lastApplied, m)
	}
}

// checkWarningsShape: at most one warning, one line of valid UTF-8 without control characters
// (the apiserver drops those), saying statefulset-resizer.
func checkWarningsShape(t *testing.T, d Decision) {
	t.Helper()
	if len(d.Warnings) > 1 {
		t.Fatalf("warnings %q, want one at most", d.Warnings)
	}
	for _, w := range d.Warnings {
		if !utf8.ValidString(w) || strings.IndexFunc(w, unicode.IsControl) >= 0 || !strings.HasPrefix(w, "statefulset-resizer: ") {
			t.Fatalf("warning %q: want one line of UTF-8 without control characters, from statefulset-resizer", w)
		}
	}
}

func checkInvariants(t *testing.T, r Request, old, req *appsv1.StatefulSet, d Decision) {
	t.Helper()
	if d.Patch == nil {
		checkUnpatched(t, r, old, req, d)
		return
	}
	out := applyPatch(t, r, d)
	got := generic(t, out)
	if !reflect.DeepEqual(templatesOf(got), templatesOf(generic(t, r.OldObject))) {
		t.Fatalf("patched templates %v differ from the live ones %v", templatesOf(got), templatesOf(generic(t, r.OldObject)))
	}
	value := req.DeepCopy()
	if v, ok := annotationsOf(got)[desired.Annotation]; ok {
		checkRecorded(t, r, old, req, d, v.(string))
		withAnnotations(value, desired.Annotation, v.(string))
	} else {
		checkCleared(t, r, old, req, d)
		delete(value.Annotations, desired.Annotation)
	}
	value.Spec.VolumeClaimTemplates = old.Spec.VolumeClaimTemplates
	if meta, _ := got["metadata"].(map[string]any); len(annotationsOf(got)) == 0 {
		delete(meta, "annotations") // removing the last annotation leaves {}, which the apiserver stores as none
	}
	if want := generic(t, mustJSON(t, value)); !reflect.DeepEqual(got, want) {
		t.Fatalf("the patch changed more than the templates and the annotation:\n%s\nwant\n%s", out, mustJSON(t, value))
	}
}

// applyPatch applies d's patch to the request's object; a patch that puts templates back puts
// the live ones, byte for byte.
func applyPatch(t *testing.T, r Request, d Decision) []byte {
	t.Helper()
	p, err := jsonpatch.DecodePatch(d.Patch)
	if err != nil {
		t.Fatalf("patch %s does not decode: %v", d.Patch, err)
	}
	out, err := p.Apply(r.Object)
	if err != nil {
		t.Fatalf("patch %s does not apply: %v", d.Patch, err)
	}
	var ops []struct {
		Path  string          `json:"path"`
		Value json.RawMessage `json:"value"`
	}
	var live struct {
		Spec struct {
			VolumeClaimTemplates json.RawMessage `json:"volumeClaimTemplates"`
		} `json:"spec"`
	}
	if json.Unmarshal(d.Patch, &ops) != nil || json.Unmarshal(r.OldObject, &live) != nil {
		t.Fatalf("patch %s or live object do not decode", d.Patch)
	}
	for _, op := range ops {
		if op.Path == "/spec/volumeClaimTemplates" && !bytes.Equal(op.Value, live.Spec.VolumeClaimTemplates) {
			t.Fatalf("patch puts back templates %s, want the live ones byte for byte: %s", op.Value, live.Spec.VolumeClaimTemplates)
		}
	}
	return out
}

// checkRecorded checks a patch that leaves the desire annotation v: a rule 9 record, unless it
// is the live object's, carried with the same templates.
func checkRecorded(t *testing.T, r Request, old, req *appsv1.StatefulSet, d Decision, v string) {
	t.Helper()
	if v == old.Annotations[desired.Annotation] && sameTemplates(old, req) {
		return
	}
	ds, err := desired.Parse(v)
	if err != nil {
		t.Fatalf("recorded annotation does not parse: %v", err)
	}
	applied, err := desired.Apply(old.Spec.VolumeClaimTemplates, ds)
	if err != nil || !apiequality.Semantic.DeepEqual(applied, req.Spec.VolumeClaimTemplates) {
		t.Fatalf("the recorded desire applied to the live templates gives %v (%v), want the request's %v", applied, err, req.Spec.VolumeClaimTemplates)
	}
	if !onlyRule9Differences(old, req) {
		t.Fatalf("a desire was recorded although the templates differ in more than size, class (named or none), labels and annotations: %v vs %v", old.Spec.VolumeClaimTemplates, req.Spec.VolumeClaimTemplates)
	}
	for i, e := range ds {
		o, q := old.Spec.VolumeClaimTemplates[i], req.Spec.VolumeClaimTemplates[i]
		changed := !sameMap(o.Labels, q.Labels) || !sameMap(o.Annotations, q.Annotations)
		if (e.Metadata != nil) != changed {
			t.Fatalf("template %q: metadata recorded %v, want it exactly when the labels or annotations change (%v)", e.Name, e.Metadata, changed)
		}
		if e.Metadata != nil {
			errs := metav1validation.ValidateLabels(e.Metadata.Labels, field.NewPath("labels"))
			if errs = append(errs, apivalidation.ValidateAnnotations(e.Metadata.Annotations, field.NewPath("annotations"))...); len(errs) > 0 {
				t.Fatalf("template %q: invalid metadata recorded: %v", e.Name, errs)
			}
		}
	}
	if len(d.Warnings) != 1 || !strings.HasPrefix(d.Warnings[0], "statefulset-resizer: volume claim templates of ns/web change") {
		t.Fatalf("warnings %q, want one telling the desire recorded", d.Warnings)
	}
}

// checkCleared checks a patch that removes the desire annotation: only a re-statement of the
// live templates, by a server-side apply of the request's manager or a new client-side apply
// manifest, ever does; an Update entry owning the templates never counts.
func checkCleared(t *testing.T, r Request, old, req *appsv1.StatefulSet, d Decision) {
	t.Helper()
	if !sameTemplates(old, req) {
		t.Fatalf("a desire was cleared by a request that changes the templates")
	}
	applied := false
	for _, e := range req.ManagedFields {
		applied = applied || e.Manager == r.FieldManager && r.FieldManager != "" && e.Operation == metav1.ManagedFieldsOperationApply && e.Subresource == ""
	}
	newManifest := req.Annotations[lastApplied] != "" && req.Annotations[lastApplied] != old.Annotations[lastApplied]
	if !applied && !newManifest {
		t.Fatalf("a desire was cleared by %q with managedFields %v and no new client-side apply manifest: neither re-states the templates", r.FieldManager, req.ManagedFields)
	}
	if len(d.Warnings) != 0 {
		t.Fatalf("warnings %q for a desire cleared", d.Warnings)
	}
}

// checkUnpatched checks a request left as it is: a desire carried with the live templates by
// a user's update is told, with what it changes.
func checkUnpatched(t *testing.T, r Request, old, req *appsv1.StatefulSet, d Decision) {
	t.Helper()
	v, had := old.Annotations[desired.Annotation]
	ds, err := desired.Parse(v)
	carried := had && req.Annotations[desired.Annotation] == v && sameTemplates(old, req) && err == nil
	if !carried || r.FieldManager == ownFieldManager {
		return
	}
	if _, err := desired.Apply(old.Spec.VolumeClaimTemplates, ds); err != nil {
		return
	}
	if changes := describeChanges(old.Spec.VolumeClaimTemplates, ds); changes != "" &&
		(len(d.Warnings) != 1 || !strings.Contains(d.Warnings[0], "this update keeps the pending volume claim template change of ns/web ("+changes+")")) {
		t.Fatalf("desire %s kept without the warning naming %q: %q", v, changes, d.Warnings)
	}
}

// onlyRule9Differences is the rule 9 condition, checked on the API types: the
// request's templates with the live sizes, labels and annotations, and the
// live classes where the request names a non-empty one or none, are the live
// templates (so a class emptied is a difference).
func onlyRule9Differences(old, req *appsv1.StatefulSet) bool {
	if len(old.Spec.VolumeClaimTemplates) != len(req.Spec.VolumeClaimTemplates) {
		return false
	}
	for i, o := range old.Spec.VolumeClaimTemplates {
		r := req.Spec.VolumeClaimTemplates[i].DeepCopy()
		if o.Spec.Resources.Requests == nil || r.Spec.Resources.Requests == nil {
			return false
		}
		r.Spec.Resources.Requests[corev1.ResourceStorage] = o.Spec.Resources.Requests[corev1.ResourceStorage]
		if c := r.Spec.VolumeAttributesClassName; c == nil || *c != "" {
			r.Spec.VolumeAttributesClassName = o.Spec.VolumeAttributesClassName
		}
		r.Labels, r.Annotations = o.Labels, o.Annotations
		if !apiequality.Semantic.DeepEqual(*r, o) {
			return false
		}
	}
	return true
}

func sameTemplates(old, req *appsv1.StatefulSet) bool {
	return apiequality.Semantic.DeepEqual(old.Spec.VolumeClaimTemplates, req.Spec.VolumeClaimTemplates)
}

func generic(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func templatesOf(m map[string]any) any {
	spec, _ := m["spec"].(map[string]any)
	return spec["volumeClaimTemplates"]
}

func annotationsOf(m map[string]any) map[string]any {
	meta, _ := m["metadata"].(map[string]any)
	a, _ := meta["annotations"].(map[string]any)
	return a
}
