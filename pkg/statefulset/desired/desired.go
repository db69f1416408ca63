// Package desired is the record of the volume claim template changes a user asked
// for but the apiserver would not store: the StatefulSet annotation
// csi-resizer.io/desired-volume-claim-templates. statefulset-resizer's admission
// webhook writes it when an update changes only the templates' storage requests,
// VolumeAttributesClass names and labels and annotations, after putting the live
// templates back into the request; the controller then re-creates the
// StatefulSet with the recorded templates (docs/design.md §3.7).
//
// The value is a JSON list with one entry per template of the request, in
// template order; "metadata" is there only when the template's labels or
// annotations change, and then holds all of them:
//
//	[{"name":"data","storage":"20Gi"},{"name":"logs","storage":"2Gi","volumeAttributesClassName":"gold",
//	  "metadata":{"labels":{"app":"db","chart":"db-1.2"},"annotations":{}}}]
package desired

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Annotation is the StatefulSet annotation holding the desired templates.
const Annotation = "csi-resizer.io/desired-volume-claim-templates"

// OptInLabel, set to OptInValue on a StatefulSet or on its Namespace, opts the
// StatefulSet in to the webhook: only then are its template size changes
// accepted and recorded.
const (
	OptInLabel = "csi-resizer.io/volume-claim-template-updates"
	OptInValue = "enabled"
)

// Template is the desired size, VolumeAttributesClass and metadata of one
// volume claim template, named by its metadata.name.
type Template struct {
	Name                      string            `json:"name"`
	Storage                   resource.Quantity `json:"storage"`
	VolumeAttributesClassName *string           `json:"volumeAttributesClassName,omitempty"`
	// Metadata is the template's labels and annotations as requested. Nil
	// (absent, as in values recorded before it existed) keeps the live ones.
	Metadata *Metadata `json:"metadata,omitempty"`
}

// Metadata is a template's labels and annotations; both maps are complete
// (a key missing from one is not on the template), empty when there are none.
type Metadata struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// Parse decodes and checks an annotation value. The error names the annotation
// and what is wrong, so that it can be shown to the user as it is.
func Parse(value string) ([]Template, error) {
	var ts []Template
	if err := json.Unmarshal([]byte(value), &ts); err != nil {
		return nil, fmt.Errorf("annotation %s is not a JSON list of {\"name\",\"storage\"[,\"volumeAttributesClassName\"]} entries: %v; remove the annotation or fix its value", Annotation, err)
	}
	if err := validate(ts); err != nil {
		return nil, fmt.Errorf("annotation %s: %v; remove the annotation or fix its value", Annotation, err)
	}
	return ts, nil
}

// Format encodes ts as an annotation value (storage as canonical quantities).
func Format(ts []Template) (string, error) {
	if err := validate(ts); err != nil {
		return "", fmt.Errorf("cannot record annotation %s: %v", Annotation, err)
	}
	if ts == nil {
		ts = []Template{}
	}
	b, err := json.Marshal(ts)
	if err != nil {
		return "", fmt.Errorf("encoding annotation %s: %w", Annotation, err)
	}
	return string(b), nil
}

// validate checks what both Parse and Format need: a name per entry, no name
// twice, a positive size.
func validate(ts []Template) error {
	seen := make(map[string]bool, len(ts))
	for i, t := range ts {
		switch {
		case t.Name == "":
			return fmt.Errorf("entry %d has no name", i)
		case seen[t.Name]:
			return fmt.Errorf("template %q appears twice", t.Name)
		case t.Storage.Sign() <= 0:
			return fmt.Errorf("template %q: storage must be a positive quantity, got %q", t.Name, t.Storage.String())
		}
		seen[t.Name] = true
	}
	return nil
}

// FromStatefulSet reads the annotation of sts; ok is false when it is absent.
// The error names the StatefulSet and the annotation.
func FromStatefulSet(sts *appsv1.StatefulSet) (ts []Template, ok bool, err error) {
	value, ok := sts.Annotations[Annotation]
	if !ok {
		return nil, false, nil
	}
	ts, err = Parse(value)
	if err != nil {
		return nil, true, fmt.Errorf("StatefulSet %s/%s: %w", sts.Namespace, sts.Name, err)
	}
	return ts, true, nil
}

// FromTemplates is the desired list that templates ask for: one entry per
// template, in order, without metadata (see MetadataOf). A template without a storage request is an error, since
// the annotation always has a size.
func FromTemplates(templates []corev1.PersistentVolumeClaim) ([]Template, error) {
	ts := make([]Template, 0, len(templates))
	for _, t := range templates {
		q, ok := t.Spec.Resources.Requests[corev1.ResourceStorage]
		if !ok {
			return nil, fmt.Errorf("volume claim template %q has no resources.requests.storage", t.Name)
		}
		d := Template{Name: t.Name, Storage: q.DeepCopy()}
		if t.Spec.VolumeAttributesClassName != nil {
			v := *t.Spec.VolumeAttributesClassName
			d.VolumeAttributesClassName = &v
		}
		ts = append(ts, d)
	}
	return ts, validate(ts)
}

// Apply returns a deep copy of templates with each template's storage request,
// VolumeAttributesClass name and, when the entry has them, labels and
// annotations replaced by the desired entry of the same name (a desired entry
// without a class name clears it); templates without an entry are unchanged. An entry naming no template is an error: the templates were
// renamed or removed since the desire was recorded.
func Apply(templates []corev1.PersistentVolumeClaim, ds []Template) ([]corev1.PersistentVolumeClaim, error) {
	if err := validate(ds); err != nil {
		return nil, fmt.Errorf("annotation %s: %v", Annotation, err)
	}
	byName := make(map[string]int, len(templates))
	out := make([]corev1.PersistentVolumeClaim, len(templates))
	for i := range templates {
		templates[i].DeepCopyInto(&out[i])
		byName[templates[i].Name] = i
	}
	var errs []error
	for _, d := range ds {
		i, ok := byName[d.Name]
		if !ok {
			errs = append(errs, fmt.Errorf("annotation %s names volume claim template %q, which the StatefulSet does not have", Annotation, d.Name))
			continue
		}
		spec := &out[i].Spec
		if spec.Resources.Requests == nil {
			spec.Resources.Requests = corev1.ResourceList{}
		}
		spec.Resources.Requests[corev1.ResourceStorage] = d.Storage.DeepCopy()
		spec.VolumeAttributesClassName = nil
		if d.VolumeAttributesClassName != nil {
			v := *d.VolumeAttributesClassName
			spec.VolumeAttributesClassName = &v
		}
		if d.Metadata != nil {
			out[i].Labels, out[i].Annotations = nilIfEmpty(d.Metadata.Labels), nilIfEmpty(d.Metadata.Annotations)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// MetadataOf is the Metadata entry recording t's labels and annotations.
func MetadataOf(t *corev1.PersistentVolumeClaim) *Metadata {
	return &Metadata{Labels: copyMap(t.Labels), Annotations: copyMap(t.Annotations)}
}

// copyMap returns a copy of m, empty (not nil) when m is: the annotation's
// metadata maps are complete, so "none" is written as {}.
func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// nilIfEmpty returns a copy of m, or nil when m is empty: the apiserver stores
// a template without labels as one without the field.
func nilIfEmpty(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return copyMap(m)
}

// OptedIn reports whether a StatefulSet with stsLabels, in a namespace with
// namespaceLabels, is opted in to template changes: OptInLabel=OptInValue on
// the StatefulSet, or, when the StatefulSet does not carry the label at all,
// on its namespace (the StatefulSet's label with any other value opts out).
func OptedIn(stsLabels, namespaceLabels map[string]string) bool {
	if v, ok := stsLabels[OptInLabel]; ok {
		return v == OptInValue
	}
	return namespaceLabels[OptInLabel] == OptInValue
}

// ValidateTemplate checks what of t a recorded change may set, as the
// apiserver checks a PVC's: with metadata its labels (key by key, in order,
// so that the error names the key) and annotations, with class its
// VolumeAttributesClass name. The apiserver checks none of them on a
// StatefulSet update, so the webhook (before it records a change) and the
// controller (before it acts on the annotation, which anyone who may update
// the StatefulSet can write) both check them here.
func ValidateTemplate(t *corev1.PersistentVolumeClaim, path *field.Path, metadata, class bool) field.ErrorList {
	var errs field.ErrorList
	if metadata {
		for _, k := range slices.Sorted(maps.Keys(t.Labels)) {
			errs = append(errs, metav1validation.ValidateLabels(map[string]string{k: t.Labels[k]}, path.Child("metadata", "labels").Key(k))...)
		}
		errs = append(errs, apivalidation.ValidateAnnotations(t.Annotations, path.Child("metadata", "annotations"))...)
	}
	if class && t.Spec.VolumeAttributesClassName != nil {
		name := *t.Spec.VolumeAttributesClassName
		for _, msg := range apivalidation.NameIsDNSSubdomain(name, false) {
			errs = append(errs, field.Invalid(path.Child("spec", "volumeAttributesClassName"), name, msg))
		}
	}
	return errs
}

// Validate checks the entries of an annotation value the way the webhook
// checks a change before recording it (ValidateTemplate): the metadata of
// entries that have it, and every class name. The error names the annotation
// and the first value refused (invariant I5: nothing the annotation says is
// acted on unless it passed the webhook's checks).
func Validate(ts []Template) error {
	for i, d := range ts {
		t := corev1.PersistentVolumeClaim{}
		t.Spec.VolumeAttributesClassName = d.VolumeAttributesClassName
		if d.Metadata != nil {
			t.Labels, t.Annotations = d.Metadata.Labels, d.Metadata.Annotations
		}
		path := field.NewPath("metadata", "annotations").Key(Annotation).Index(i)
		if errs := ValidateTemplate(&t, path, d.Metadata != nil, true); len(errs) > 0 {
			return fmt.Errorf("annotation %s, template %q: %v; remove the annotation or apply the change through the webhook", Annotation, d.Name, errs[0])
		}
	}
	return nil
}
