package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// change says what differs between a live template and the request's, among
// what rule 9 takes (docs/design.md §3.9).
type change struct {
	size, class, metadata bool
}

func (c change) any() bool { return c.size || c.class || c.metadata }

// compareTemplates compares two template lists, template by template (see
// compareTemplate). The error says what differs beyond what rule 9 takes.
func compareTemplates(old, req []json.RawMessage) ([]change, error) {
	if len(old) != len(req) {
		return nil, fmt.Errorf("%d templates live, %d in the request", len(old), len(req))
	}
	changes := make([]change, len(old))
	for i := range old {
		c, err := compareTemplate(old[i], req[i])
		if err != nil {
			return nil, fmt.Errorf("template %d: %w", i, err)
		}
		changes[i] = c
	}
	return changes, nil
}

// anyChange reports whether one of changes changes something.
func anyChange(changes []change) bool {
	for _, c := range changes {
		if c.any() {
			return true
		}
	}
	return false
}

// compareTemplate compares one template: everything but the storage request,
// the class name and metadata.labels and metadata.annotations as generic JSON
// (so that a field this binary does not know still counts), the storage
// request by value, the class name by compareClass, labels and annotations as
// maps (absent and empty alike, as the apiserver stores them). Any change
// needs a storage request in both templates: the annotation always records a
// size.
func compareTemplate(oldRaw, reqRaw json.RawMessage) (change, error) {
	oldT, err := splitTemplate(oldRaw)
	if err != nil {
		return change{}, err
	}
	reqT, err := splitTemplate(reqRaw)
	if err != nil {
		return change{}, err
	}
	if !reflect.DeepEqual(oldT.rest, reqT.rest) {
		return change{}, fmt.Errorf("differs in more than resources.requests.storage, volumeAttributesClassName, labels and annotations")
	}
	var c change
	if c.class, err = compareClass(oldT.class, reqT.class); err != nil {
		return change{}, err
	}
	c.size = !(oldT.size == nil && reqT.size == nil || oldT.size != nil && reqT.size != nil && oldT.size.Cmp(*reqT.size) == 0)
	c.metadata = !sameMap(oldT.labels, reqT.labels) || !sameMap(oldT.annotations, reqT.annotations)
	switch {
	case !c.any():
		return c, nil
	case oldT.size == nil && reqT.size == nil:
		return change{}, fmt.Errorf("the template changes but has no storage request")
	case oldT.size == nil || reqT.size == nil:
		return change{}, fmt.Errorf("a storage request is added or removed")
	}
	return c, nil
}

// compareClass reports whether the request changes the class name. A class
// removed (unset) is a change like any other: the StatefulSet is re-created
// without it, and the PVCs' classes follow docs/design.md §3.10 rule 13 (a
// class this controller set is rolled back where the apiserver allows it,
// and a class that took effect stays, with a note), which is what lets Git
// revert a class the driver refused. "" is an error: a PVC made from such a
// template would be refused (an empty class name is not a class).
func compareClass(old, req *string) (bool, error) {
	if old == nil && req == nil || old != nil && req != nil && *old == *req {
		return false, nil
	}
	if req != nil && *req == "" {
		return false, fmt.Errorf("volumeAttributesClassName %s -> %s: an empty class name is not a class (leave the field out for none)", className(old), className(req))
	}
	return true, nil
}

func className(c *string) string {
	if c == nil {
		return "unset"
	}
	return fmt.Sprintf("%q", *c)
}

// sameMap compares labels or annotations, absent and empty alike.
func sameMap(a, b map[string]string) bool {
	return len(a) == 0 && len(b) == 0 || reflect.DeepEqual(a, b)
}

// template is a template split by splitTemplate.
type template struct {
	rest                map[string]any     // everything but the parts below, generic JSON
	size                *resource.Quantity // spec.resources.requests.storage, nil when absent
	class               *string            // spec.volumeAttributesClassName, nil when absent or null
	labels, annotations map[string]string  // metadata.labels and metadata.annotations, nil when absent
}

// splitTemplate decodes a template as generic JSON and takes its storage
// request, its class name, its labels and its annotations out of it.
func splitTemplate(raw json.RawMessage) (template, error) {
	var t template
	if err := decodeGeneric(raw, &t.rest); err != nil || t.rest == nil {
		return t, fmt.Errorf("not a JSON object: %v", err)
	}
	meta, _ := t.rest["metadata"].(map[string]any)
	var err error
	if t.labels, err = takeStringMap(meta, "labels"); err != nil {
		return t, err
	}
	if t.annotations, err = takeStringMap(meta, "annotations"); err != nil {
		return t, err
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

// takeStringMap takes the map of strings m[key] out of m (nil when absent or null).
func takeStringMap(m map[string]any, key string) (map[string]string, error) {
	v, ok := m[key]
	if !ok {
		return nil, nil
	}
	delete(m, key)
	if v == nil {
		return nil, nil
	}
	generic, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("metadata.%s is not a map", key)
	}
	out := make(map[string]string, len(generic))
	for k, v := range generic {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("metadata.%s[%q] is not a string", key, k)
		}
		out[k] = s
	}
	return out, nil
}

// decodeGeneric decodes JSON with numbers kept as written, so that two
// documents compare equal exactly when their JSON values are equal.
func decodeGeneric(raw []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	return d.Decode(v)
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

// statesTemplates reports whether a manifest's templates (as kubectl keeps
// them in its last-applied-configuration: without what the apiserver
// defaults, such as volumeMode or status) state the live templates: as many,
// in the same order, and every field the manifest sets has the live value
// (quantities under resources compared by value). A field the manifest leaves
// out is not stated: applying the manifest leaves it as it is.
func statesTemplates(live, manifest []json.RawMessage) bool {
	if len(live) != len(manifest) {
		return false
	}
	for i := range live {
		var l, m any
		if decodeGeneric(live[i], &l) != nil || decodeGeneric(manifest[i], &m) != nil || !covered(l, m, "") {
			return false
		}
	}
	return true
}

// covered reports whether the live JSON value has every field stated sets,
// with the same value. key is the name of the field that holds the values
// ("" for the top and list items): the fields of resources.requests and
// resources.limits are quantities, compared by value (the manifest may spell
// 1024Mi what the apiserver stores as 1Gi).
func covered(live, stated any, key string) bool {
	switch s := stated.(type) {
	case map[string]any:
		l, _ := live.(map[string]any)
		if l == nil && live != nil {
			return false
		}
		for k, v := range s {
			quantity := (key == "requests" || key == "limits") && sameQuantity(l[k], v)
			if !quantity && !covered(l[k], v, k) {
				return false
			}
		}
		return true
	case []any:
		l, _ := live.([]any)
		if len(l) != len(s) {
			return false
		}
		for i := range s {
			if !covered(l[i], s[i], "") {
				return false
			}
		}
		return true
	case nil:
		return live == nil // null states "unset"; an absent field reads as nil too
	}
	return reflect.DeepEqual(live, stated)
}

// sameQuantity reports whether a and b are quantities of the same value.
func sameQuantity(a, b any) bool {
	as, aok := a.(string)
	bs, bok := b.(string)
	if !aok || !bok {
		return false
	}
	aq, aerr := resource.ParseQuantity(as)
	bq, berr := resource.ParseQuantity(bs)
	return aerr == nil && berr == nil && aq.Cmp(bq) == 0
}
