// Package status writes the resizer's decisions to the API: the PVC status subresource, the PV
// capacity and the PV's VolumeAttributesClass, each as one merge patch that carries only what
// changed.
//
// A merge patch (RFC 7386) is used rather than a strategic one because its meaning is plain: a
// map key set or removed, a list (conditions) replaced whole. The resizer computes the whole new
// conditions list from the one it observed, and the resourceVersion guard makes sure it was
// observed last.
package status

import (
	"context"
	"encoding/json"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Writer is the boundary between the controller and the API for everything it writes about a
// volume. Tests may replace it.
type Writer interface {
	// PatchClaimStatus writes newStatus over pvc's status, and the annotation changes (a nil
	// value removes the key) in the same write. With guard, the write fails with a conflict
	// when pvc is not the latest version. It returns the PVC as written, and pvc itself (no
	// API call) when nothing changed.
	PatchClaimStatus(ctx context.Context, pvc *v1.PersistentVolumeClaim, newStatus v1.PersistentVolumeClaimStatus, annotations map[string]*string, guard bool) (*v1.PersistentVolumeClaim, error)
	// PatchVolume sets the PV's storage capacity and changes annotations (a nil value removes
	// the key), in one write; no call when nothing changes.
	PatchVolume(ctx context.Context, pv *v1.PersistentVolume, capacity resource.Quantity, annotations map[string]*string) (*v1.PersistentVolume, error)
	// PatchVolumeAttributesClass sets the PV's spec.volumeAttributesClassName after a
	// successful modification; no call when it already is class. class must not be empty: the
	// API forbids removing a PV's class.
	PatchVolumeAttributesClass(ctx context.Context, pv *v1.PersistentVolume, class string) (*v1.PersistentVolume, error)
}

// APIWriter implements Writer with a clientset.
type APIWriter struct {
	Client kubernetes.Interface
	// FieldManager names the writer in managedFields.
	FieldManager string
}

// PatchClaimStatus implements Writer.
func (w *APIWriter) PatchClaimStatus(ctx context.Context, pvc *v1.PersistentVolumeClaim, newStatus v1.PersistentVolumeClaimStatus, annotations map[string]*string, guard bool) (*v1.PersistentVolumeClaim, error) {
	patch, changed, err := ClaimStatusPatch(pvc, newStatus, annotations, guard)
	if err != nil || !changed {
		return pvc, err
	}
	out, err := w.Client.CoreV1().PersistentVolumeClaims(pvc.Namespace).Patch(ctx, pvc.Name, types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: w.FieldManager}, "status")
	if err != nil {
		return nil, fmt.Errorf("patching status of PVC %s/%s: %w", pvc.Namespace, pvc.Name, err)
	}
	return out, nil
}

// PatchVolume implements Writer.
func (w *APIWriter) PatchVolume(ctx context.Context, pv *v1.PersistentVolume, capacity resource.Quantity, annotations map[string]*string) (*v1.PersistentVolume, error) {
	patch, changed, err := VolumePatch(pv, capacity, annotations)
	if err != nil || !changed {
		return pv, err
	}
	out, err := w.Client.CoreV1().PersistentVolumes().Patch(ctx, pv.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: w.FieldManager})
	if err != nil {
		return nil, fmt.Errorf("patching capacity of PV %s: %w", pv.Name, err)
	}
	return out, nil
}

// PatchVolumeAttributesClass implements Writer.
func (w *APIWriter) PatchVolumeAttributesClass(ctx context.Context, pv *v1.PersistentVolume, class string) (*v1.PersistentVolume, error) {
	patch, changed, err := VolumeAttributesClassPatch(pv, class)
	if err != nil || !changed {
		return pv, err
	}
	out, err := w.Client.CoreV1().PersistentVolumes().Patch(ctx, pv.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: w.FieldManager})
	if err != nil {
		return nil, fmt.Errorf("patching volumeAttributesClassName of PV %s: %w", pv.Name, err)
	}
	return out, nil
}

// ClaimStatusPatch builds the merge patch from pvc.Status to newStatus over the fields the
// resizer owns (allocatedResources.storage, allocatedResourceStatuses.storage,
// capacity.storage, conditions, currentVolumeAttributesClassName, modifyVolumeStatus) and the
// annotation changes, and reports whether anything changed. Annotations travel in the status
// write: the apiserver takes metadata changes on the PVC's status subresource (only spec is
// reset there), which is how upstream writes them too, so they cost no write of their own.
func ClaimStatusPatch(pvc *v1.PersistentVolumeClaim, newStatus v1.PersistentVolumeClaimStatus, annotations map[string]*string, guard bool) ([]byte, bool, error) {
	st := statusChanges(pvc.Status, newStatus)
	ann := annotationChanges(pvc.Annotations, annotations)
	if len(st) == 0 && len(ann) == 0 {
		return nil, false, nil
	}
	patch := map[string]any{}
	if len(st) > 0 {
		patch["status"] = st
	}
	meta := map[string]any{}
	if len(ann) > 0 {
		meta["annotations"] = ann
	}
	if guard {
		meta["resourceVersion"] = pvc.ResourceVersion
	}
	if len(meta) > 0 {
		patch["metadata"] = meta
	}
	b, err := json.Marshal(patch)
	return b, true, err
}

// statusChanges is the merge patch of the status fields the resizer owns, from old to new.
func statusChanges(old, newStatus v1.PersistentVolumeClaimStatus) map[string]any {
	st := map[string]any{}
	if q, ok := quantityChange(old.AllocatedResources, newStatus.AllocatedResources); ok {
		st["allocatedResources"] = map[string]any{string(v1.ResourceStorage): q}
	}
	if o, n := old.AllocatedResourceStatuses[v1.ResourceStorage], newStatus.AllocatedResourceStatuses[v1.ResourceStorage]; o != n {
		var v any
		if n != "" {
			v = string(n)
		}
		st["allocatedResourceStatuses"] = map[string]any{string(v1.ResourceStorage): v}
	}
	if q, ok := quantityChange(old.Capacity, newStatus.Capacity); ok {
		st["capacity"] = map[string]any{string(v1.ResourceStorage): q}
	}
	if !conditionsEqual(old.Conditions, newStatus.Conditions) {
		if len(newStatus.Conditions) == 0 {
			st["conditions"] = nil
		} else {
			st["conditions"] = newStatus.Conditions
		}
	}
	if o, n := old.CurrentVolumeAttributesClassName, newStatus.CurrentVolumeAttributesClassName; !stringPtrEqual(o, n) {
		st["currentVolumeAttributesClassName"] = stringOrNull(n)
	}
	if o, n := old.ModifyVolumeStatus, newStatus.ModifyVolumeStatus; !modifyStatusEqual(o, n) {
		if n == nil {
			st["modifyVolumeStatus"] = nil
		} else {
			// Both keys, explicitly: a merge patch keeps a key it does not name, so an
			// omitted (empty) target would leave the old one in place.
			var target any
			if n.TargetVolumeAttributesClassName != "" {
				target = n.TargetVolumeAttributesClassName
			}
			st["modifyVolumeStatus"] = map[string]any{"targetVolumeAttributesClassName": target, "status": string(n.Status)}
		}
	}
	return st
}

// VolumeAttributesClassPatch builds the merge patch setting a PV's
// spec.volumeAttributesClassName to class, and reports whether it changes. An empty class is
// an error: the apiserver refuses to remove a PV's class, and a modification always has a
// target.
func VolumeAttributesClassPatch(pv *v1.PersistentVolume, class string) ([]byte, bool, error) {
	if class == "" {
		return nil, false, fmt.Errorf("PV %s: no VolumeAttributesClass to set (a PV's class cannot be removed)", pv.Name)
	}
	if cur := pv.Spec.VolumeAttributesClassName; cur != nil && *cur == class {
		return nil, false, nil
	}
	b, err := json.Marshal(map[string]any{"spec": map[string]any{"volumeAttributesClassName": class}})
	return b, true, err
}

func stringPtrEqual(a, b *string) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

// stringOrNull is *s, or nil (JSON null: remove the key) for a nil s.
func stringOrNull(s *string) any {
	if s == nil {
		return nil
	}
	return *s
}

func modifyStatusEqual(a, b *v1.ModifyVolumeStatus) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

// annotationChanges is the merge patch of annotations for the wanted changes (nil value:
// remove) that differ from cur.
func annotationChanges(cur map[string]string, want map[string]*string) map[string]any {
	ann := map[string]any{}
	for k, v := range want {
		old, ok := cur[k]
		switch {
		case v == nil && ok:
			ann[k] = nil
		case v != nil && (!ok || old != *v):
			ann[k] = *v
		}
	}
	return ann
}

// VolumePatch builds the merge patch setting a PV's storage capacity and changing annotations
// (a nil value removes the key).
func VolumePatch(pv *v1.PersistentVolume, capacity resource.Quantity, annotations map[string]*string) ([]byte, bool, error) {
	patch := map[string]any{}
	if cur, ok := pv.Spec.Capacity[v1.ResourceStorage]; !ok || cur.Cmp(capacity) != 0 {
		patch["spec"] = map[string]any{"capacity": map[string]any{string(v1.ResourceStorage): capacity.String()}}
	}
	if ann := annotationChanges(pv.Annotations, annotations); len(ann) > 0 {
		patch["metadata"] = map[string]any{"annotations": ann}
	}
	if len(patch) == 0 {
		return nil, false, nil
	}
	b, err := json.Marshal(patch)
	return b, true, err
}

// quantityChange returns the new storage value (nil = remove) when it differs from the old one.
func quantityChange(old, new v1.ResourceList) (any, bool) {
	o, oOK := old[v1.ResourceStorage]
	n, nOK := new[v1.ResourceStorage]
	switch {
	case !oOK && !nOK:
		return nil, false
	case oOK && nOK && o.Cmp(n) == 0:
		return nil, false
	case !nOK:
		return nil, true
	default:
		return n.String(), true
	}
}

func conditionsEqual(a, b []v1.PersistentVolumeClaimCondition) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Type != y.Type || x.Status != y.Status || x.Reason != y.Reason || x.Message != y.Message ||
			!x.LastProbeTime.Equal(&y.LastProbeTime) || !x.LastTransitionTime.Equal(&y.LastTransitionTime) {
			return false
		}
	}
	return true
}
