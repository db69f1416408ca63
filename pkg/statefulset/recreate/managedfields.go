package recreate

import (
	"encoding/json"
	"fmt"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/desired"
)

// withoutReplacedFields returns a copy of the managedFields entries with the
// desired-templates annotation and the re-create's finalizer removed from
// every entry's fields: the re-created object has neither, and an entry
// owning a field that does not exist would make its manager look like it
// still asks for it. Entries left with no field are dropped.
func withoutReplacedFields(entries []metav1.ManagedFieldsEntry) ([]metav1.ManagedFieldsEntry, error) {
	var out []metav1.ManagedFieldsEntry
	for _, e := range entries {
		e = *e.DeepCopy()
		if e.FieldsV1 == nil {
			out = append(out, e)
			continue
		}
		var fields map[string]any
		if err := json.Unmarshal(e.FieldsV1.Raw, &fields); err != nil {
			return nil, fmt.Errorf("managedFields entry of %q: %w", e.Manager, err)
		}
		removedAnnotation := removePath(fields, "f:metadata", "f:annotations", "f:"+desired.Annotation)
		removedFinalizer := removePath(fields, "f:metadata", "f:finalizers", "v:"+strconv.Quote(Finalizer))
		if !removedAnnotation && !removedFinalizer {
			out = append(out, e)
			continue
		}
		if len(fields) == 0 {
			continue
		}
		raw, err := json.Marshal(fields)
		if err != nil {
			return nil, fmt.Errorf("managedFields entry of %q: %w", e.Manager, err)
		}
		e.FieldsV1.Raw = raw
		out = append(out, e)
	}
	return out, nil
}

// removePath deletes the last key of path from the nested maps and prunes
// the maps it leaves empty (or holding only ".", the marker of the map
// itself); it reports whether the key was there.
func removePath(m map[string]any, path ...string) bool {
	if len(path) == 1 {
		_, ok := m[path[0]]
		delete(m, path[0])
		return ok
	}
	child, ok := m[path[0]].(map[string]any)
	if !ok || !removePath(child, path[1:]...) {
		return false
	}
	if _, self := child["."]; len(child) == 0 || len(child) == 1 && self {
		delete(m, path[0])
	}
	return true
}

// NeedsOwnershipRestore reports whether the managedFields of a re-created
// object must be replaced by the recorded ones: the create made manager the
// owner of every field (the apiserver attributes a created object to its
// creator), and no one else has written it since. Once another manager has
// an entry for the object itself, its ownership moved on and is left alone.
// Entries of subresources (the StatefulSet controller's status writes) do not
// count: they say nothing about the spec and metadata.
func NeedsOwnershipRestore(live []metav1.ManagedFieldsEntry, recorded []metav1.ManagedFieldsEntry, manager string) bool {
	if len(recorded) == 0 {
		return false
	}
	for _, e := range live {
		if e.Subresource == "" && e.Manager != manager {
			return false
		}
	}
	return true
}
