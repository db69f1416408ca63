package webhook

import (
	"encoding/json"
	"reflect"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"

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
	return c
}

// FuzzDecideInvariants checks, for any pair of StatefulSets: a patch always
// applies; after it, the request's templates are the live ones and nothing but
// the desire annotation differs from the request's object (rule 9) or the
// annotation is removed and nothing else changes (rule 10); a rule 9 patch is
// made only when the templates differ in nothing but size and class, the
// request's classes being non-empty where they differ, and its annotation,
// applied to the live templates, gives the request's.
func FuzzDecideInvariants(f *testing.F) {
	f.Add("data", "10Gi", "", uint8(0), "data", "20Gi", "", uint8(0), "", "kubectl", true, false)
	f.Add("data", "10Gi", "", uint8(0), "data", "10Gi", "gold", uint8(0), desire20, "kubectl", true, true)
	f.Add("data", "10Gi", "", uint8(0), "data", "20Gi", "", uint8(2), "", "", false, false)
	f.Add("data", "1Gi", "a", uint8(4), "logs", "1Gi", "a", uint8(4), "[", "helm", true, true)
	f.Add("data", "10Gi", "gold", uint8(0), "data", "20Gi", "", uint8(8), "", "kubectl", false, false) // class emptied
	f.Add("data", "10Gi", "gold", uint8(0), "data", "10Gi", "", uint8(0), "", "kubectl", false, true)  // class removed
	f.Add("data", "10Gi", "", uint8(0), "data", "10Gi", "", uint8(8), "", "kubectl", false, false)     // unset -> ""
	// Found by the fuzzer: a class name that is not UTF-8 (JSON replaces it).
	f.Add("0", "0", "0", uint8(0x14), "0", "", "\xb0", uint8(0x04), "0", "0", true, true)
	f.Fuzz(func(t *testing.T, oldName, oldSize, oldClass string, oldShape uint8, reqName, reqSize, reqClass string, reqShape uint8,
		annotation, manager string, owns, twoTemplates bool) {
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
			owning(manager, old)
			owning(manager, req)
		}
		r := update(t, old, req, manager)
		// The objects as the apiserver sends them (JSON replaces invalid UTF-8, for one).
		old, req = &appsv1.StatefulSet{}, &appsv1.StatefulSet{}
		if json.Unmarshal(r.OldObject, old) != nil || json.Unmarshal(r.Object, req) != nil {
			t.Fatal("the objects do not decode")
		}
		checkInvariants(t, r, old, req, Decide(r))
	})
}

func checkInvariants(t *testing.T, r Request, old, req *appsv1.StatefulSet, d Decision) {
	t.Helper()
	if d.Patch == nil {
		return
	}
	p, err := jsonpatch.DecodePatch(d.Patch)
	if err != nil {
		t.Fatalf("patch %s does not decode: %v", d.Patch, err)
	}
	out, err := p.Apply(r.Object)
	if err != nil {
		t.Fatalf("patch %s does not apply: %v", d.Patch, err)
	}
	got := generic(t, out)
	if !reflect.DeepEqual(templatesOf(got), templatesOf(generic(t, r.OldObject))) {
		t.Fatalf("patched templates %v differ from the live ones %v", templatesOf(got), templatesOf(generic(t, r.OldObject)))
	}
	value, recorded := req.DeepCopy(), false
	if v, ok := annotationsOf(got)[desired.Annotation]; ok {
		recorded = v != old.Annotations[desired.Annotation] || !sameTemplates(old, req)
		ds, err := desired.Parse(v.(string))
		if err != nil {
			t.Fatalf("recorded annotation does not parse: %v", err)
		}
		applied, err := desired.Apply(old.Spec.VolumeClaimTemplates, ds)
		if err != nil || !apiequality.Semantic.DeepEqual(applied, req.Spec.VolumeClaimTemplates) {
			t.Fatalf("the recorded desire applied to the live templates gives %v (%v), want the request's %v", applied, err, req.Spec.VolumeClaimTemplates)
		}
		withAnnotations(value, desired.Annotation, v.(string))
	} else {
		delete(value.Annotations, desired.Annotation)
	}
	if recorded && !onlySizesAndClassesDiffer(old, req) {
		t.Fatalf("a desire was recorded although the templates differ in more than size and non-empty class: %v vs %v", old.Spec.VolumeClaimTemplates, req.Spec.VolumeClaimTemplates)
	}
	value.Spec.VolumeClaimTemplates = old.Spec.VolumeClaimTemplates
	if meta, _ := got["metadata"].(map[string]any); len(annotationsOf(got)) == 0 {
		delete(meta, "annotations") // removing the last annotation leaves {}, which the apiserver stores as none
	}
	if want := generic(t, mustJSON(t, value)); !reflect.DeepEqual(got, want) {
		t.Fatalf("the patch changed more than the templates and the annotation:\n%s\nwant\n%s", out, mustJSON(t, value))
	}
}

// onlySizesAndClassesDiffer is the rule 9 condition, checked on the API
// types: the request's templates with the live sizes, and the live classes
// where the request names a non-empty one, are the live templates (so a class
// removed or emptied is a difference).
func onlySizesAndClassesDiffer(old, req *appsv1.StatefulSet) bool {
	if len(old.Spec.VolumeClaimTemplates) != len(req.Spec.VolumeClaimTemplates) {
		return false
	}
	for i, o := range old.Spec.VolumeClaimTemplates {
		r := req.Spec.VolumeClaimTemplates[i].DeepCopy()
		if o.Spec.Resources.Requests == nil || r.Spec.Resources.Requests == nil {
			return false
		}
		r.Spec.Resources.Requests[corev1.ResourceStorage] = o.Spec.Resources.Requests[corev1.ResourceStorage]
		if c := r.Spec.VolumeAttributesClassName; c != nil && *c != "" {
			r.Spec.VolumeAttributesClassName = o.Spec.VolumeAttributesClassName
		}
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
