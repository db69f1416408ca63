package recreate

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

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
		removedAnnotation = removePath(fields, "f:metadata", "f:annotations", "f:"+RecordAnnotation) || removedAnnotation
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

// RestoredManagedFields returns the managedFields a re-created object gets
// back: the recorded ones (the old object's owners), and the entries of
// every write since the create by another manager or to a subresource (the
// StatefulSet controller's status), so that no one loses what they wrote.
// manager's own entry for the object itself, which the create gave every
// field, goes. ok is false when there is nothing to restore: no recorded
// entries, or the create's entry is gone (already restored).
func RestoredManagedFields(live, recorded []metav1.ManagedFieldsEntry, manager string) (out []metav1.ManagedFieldsEntry, ok bool) {
	if len(recorded) == 0 {
		return nil, false
	}
	for _, e := range live {
		if e.Manager == manager && e.Subresource == "" && e.Operation == metav1.ManagedFieldsOperationUpdate {
			ok = true
			continue
		}
		out = append(out, *e.DeepCopy())
	}
	if !ok {
		return nil, false
	}
	written := map[string]bool{}
	for _, e := range out {
		written[entryKey(e)] = true
	}
	for _, e := range recorded {
		if !written[entryKey(e)] { // a manager that wrote since keeps its newer entry
			out = append(out, *e.DeepCopy())
		}
	}
	return out, true
}

// entryKey identifies a managedFields entry as the apiserver does: one per
// manager, operation, API version and subresource.
func entryKey(e metav1.ManagedFieldsEntry) string {
	return strings.Join([]string{e.Manager, string(e.Operation), e.APIVersion, e.Subresource}, "\x00")
}
