package scenario

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/csi-resizer/csi-resizer/test/framework"
)

// VolumeAttributesClass (KEP-3751) helpers: classes, a PVC's class, and what the resizer
// records about a modification.

// CreateClass creates the VolumeAttributesClass name of the env's driver with params (the
// mutable parameters ControllerModifyVolume receives).
func (e *Env) CreateClass(t testing.TB, name string, params map[string]string) *storagev1.VolumeAttributesClass {
	t.Helper()
	vac := &storagev1.VolumeAttributesClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		DriverName: e.Driver.Name,
		Parameters: params,
	}
	out, err := e.Client.StorageV1().VolumeAttributesClasses().Create(e.Ctx, vac, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create VolumeAttributesClass %s: %v", name, err)
	}
	return out
}

// SetClass sets the PVC's spec.volumeAttributesClassName, as `kubectl patch` would; "" unsets it
// (which the apiserver allows only while no class is current).
func (e *Env) SetClass(t testing.TB, claim, class string) {
	t.Helper()
	var value any = class
	if class == "" {
		value = nil
	}
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"volumeAttributesClassName": value}})
	if _, err := e.Client.CoreV1().PersistentVolumeClaims(e.Namespace).Patch(e.Ctx, claim, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("setting the VolumeAttributesClass of %s to %s: %v", claim, class, err)
	}
}

// NewClaimWithClass is NewClaim for a volume provisioned with VolumeAttributesClass class (which
// must exist): the PVC's status says class is current, the PV carries it and the PVC's spec asks
// for it, written in that order, so that at no moment does the PVC ask the resizer for work.
func (e *Env) NewClaimWithClass(t testing.TB, name, size, class string) (*v1.PersistentVolumeClaim, *v1.PersistentVolume) {
	t.Helper()
	return e.NewClaimWithClassAnnotated(t, name, size, class, nil)
}

// NewClaimWithClassAnnotated is NewClaimWithClass with pvAnnotations added to the PV in the
// write that gives it the class (e.g. the controller-modify secret annotations
// external-provisioner sets), before the PVC asks for the class.
func (e *Env) NewClaimWithClassAnnotated(t testing.TB, name, size, class string, pvAnnotations map[string]string) (*v1.PersistentVolumeClaim, *v1.PersistentVolume) {
	t.Helper()
	_, pv := e.NewClaim(t, name, size)
	status, _ := json.Marshal(map[string]any{"status": map[string]any{"currentVolumeAttributesClassName": class}})
	if _, err := e.Client.CoreV1().PersistentVolumeClaims(e.Namespace).Patch(e.Ctx, name, types.MergePatchType, status, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatalf("setting the current VolumeAttributesClass of %s: %v", name, err)
	}
	pvPatch := map[string]any{"spec": map[string]any{"volumeAttributesClassName": class}}
	if len(pvAnnotations) > 0 {
		pvPatch["metadata"] = map[string]any{"annotations": pvAnnotations}
	}
	spec, _ := json.Marshal(pvPatch)
	pv, err := e.Client.CoreV1().PersistentVolumes().Patch(e.Ctx, pv.Name, types.MergePatchType, spec, metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("setting the VolumeAttributesClass of PV %s: %v", pv.Name, err)
	}
	e.SetClass(t, name, class)
	return e.PVC(t, name), pv
}

// CurrentClass is status.currentVolumeAttributesClassName ("" when unset).
func CurrentClass(pvc *v1.PersistentVolumeClaim) string {
	if c := pvc.Status.CurrentVolumeAttributesClassName; c != nil {
		return *c
	}
	return ""
}

// ModifyStatus is status.modifyVolumeStatus: its status and target ("", "" when unset).
func ModifyStatus(pvc *v1.PersistentVolumeClaim) (v1.PersistentVolumeClaimModifyVolumeStatus, string) {
	if m := pvc.Status.ModifyVolumeStatus; m != nil {
		return m.Status, m.TargetVolumeAttributesClassName
	}
	return "", ""
}

// ModifiedTo reports whether the PVC's modification to class is over: the class is current,
// no modifyVolumeStatus and neither ModifyingVolume nor ModifyVolumeError is left.
func ModifiedTo(class string) func(*v1.PersistentVolumeClaim) (bool, string) {
	return func(pvc *v1.PersistentVolumeClaim) (bool, string) {
		return CurrentClass(pvc) == class && pvc.Status.ModifyVolumeStatus == nil &&
				Condition(pvc, v1.PersistentVolumeClaimVolumeModifyingVolume) == nil &&
				Condition(pvc, v1.PersistentVolumeClaimVolumeModifyVolumeError) == nil,
			"want current class " + class + ", no modifyVolumeStatus and no modify conditions"
	}
}

// InModifyStatus reports whether the PVC's modifyVolumeStatus is {status, target}.
func InModifyStatus(status v1.PersistentVolumeClaimModifyVolumeStatus, target string) func(*v1.PersistentVolumeClaim) (bool, string) {
	return func(pvc *v1.PersistentVolumeClaim) (bool, string) {
		s, tg := ModifyStatus(pvc)
		return s == status && tg == target, fmt.Sprintf("want modifyVolumeStatus %s for %s", status, target)
	}
}

// describeClass renders the VolumeAttributesClass part of a PVC for Describe, "" when the PVC
// has none of it.
func describeClass(pvc *v1.PersistentVolumeClaim) string {
	spec := ""
	if c := pvc.Spec.VolumeAttributesClassName; c != nil {
		spec = *c
	}
	status, target := ModifyStatus(pvc)
	if spec == "" && CurrentClass(pvc) == "" && status == "" {
		return ""
	}
	return fmt.Sprintf(" class=%q current=%q modify=%s(%s)", spec, CurrentClass(pvc), status, target)
}

// LoggedModifyCall reports whether the resizer process p has logged that it is calling
// ControllerModifyVolume for volume vol and class: the InProgress status is written just before
// the call, and the driver logs a call only when it answers, so a test that must act while the
// call is in flight waits for this line.
func LoggedModifyCall(p *framework.Process, vol, class string) bool {
	return loggedCall(p, "Calling ControllerModifyVolume", "volumeID", vol, "class", class)
}

// History records every version of one object that the apiserver's watch delivers, from the
// version it started at, until the test ends: what a test that must see an intermediate state
// (or count writes) reads, where polling could miss a version.
type History[T interface {
	runtime.Object
	metav1.Object
}] struct {
	mu       sync.Mutex
	versions []T
	describe func(T) string
}

// ClaimHistory is the History of a PVC.
type ClaimHistory = History[*v1.PersistentVolumeClaim]

// WatchClaim starts recording the PVC's versions after resourceVersion rv (the PVC's current
// one when rv is "").
func (e *Env) WatchClaim(t testing.TB, name, rv string) *ClaimHistory {
	t.Helper()
	if rv == "" {
		rv = e.PVC(t, name).ResourceVersion
	}
	pvcs := e.Client.CoreV1().PersistentVolumeClaims(e.Namespace)
	return watchHistory(t, e, rv, Describe, func(rv string) (watch.Interface, error) {
		return pvcs.Watch(e.Ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: rv})
	})
}

// WatchVolume starts recording the PV's versions after resourceVersion rv (the PV's current one
// when rv is "").
func (e *Env) WatchVolume(t testing.TB, name, rv string) *History[*v1.PersistentVolume] {
	t.Helper()
	if rv == "" {
		rv = e.PV(t, name).ResourceVersion
	}
	pvs := e.Client.CoreV1().PersistentVolumes()
	describe := func(pv *v1.PersistentVolume) string {
		class := ""
		if c := pv.Spec.VolumeAttributesClassName; c != nil {
			class = *c
		}
		capacity := pv.Spec.Capacity[v1.ResourceStorage]
		return fmt.Sprintf("PV %s: capacity=%s class=%q annotations=%v", pv.Name, capacity.String(), class, pv.Annotations)
	}
	return watchHistory(t, e, rv, describe, func(rv string) (watch.Interface, error) {
		return pvs.Watch(e.Ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: rv})
	})
}

// watchHistory records what open delivers, from rv on, opening it again from the last version
// seen when the apiserver ends a watch.
func watchHistory[T interface {
	runtime.Object
	metav1.Object
}](t testing.TB, e *Env, rv string, describe func(T) string, open func(rv string) (watch.Interface, error)) *History[T] {
	h := &History[T]{describe: describe}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			w, err := open(rv)
			if err != nil {
				return // the test is over (its context is done) or the apiserver is gone
			}
			rv = h.drain(w, rv, stop)
			w.Stop()
			select {
			case <-stop:
				return
			case <-e.Ctx.Done():
				return
			case <-time.After(100 * time.Millisecond): // the watch ended early: watch again from rv
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return h
}

// drain records the versions a watch delivers until it ends or stop closes; it returns the last
// resourceVersion seen.
func (h *History[T]) drain(w watch.Interface, rv string, stop <-chan struct{}) string {
	for {
		select {
		case <-stop:
			return rv
		case ev, ok := <-w.ResultChan():
			if !ok {
				return rv
			}
			obj, isT := ev.Object.(T)
			if !isT || (ev.Type != watch.Added && ev.Type != watch.Modified) {
				continue
			}
			rv = obj.GetResourceVersion()
			h.mu.Lock()
			h.versions = append(h.versions, obj)
			h.mu.Unlock()
		}
	}
}

// Versions returns the versions recorded so far, oldest first.
func (h *History[T]) Versions() []T {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]T(nil), h.versions...)
}

// Wait polls until some recorded version satisfies cond and returns the first that does.
func (h *History[T]) Wait(t testing.TB, timeout time.Duration, what string, cond func(T) bool) T {
	t.Helper()
	var found T
	framework.Eventually(t, timeout, func() (bool, string) {
		vs := h.Versions()
		for _, v := range vs {
			if cond(v) {
				found = v
				return true, ""
			}
		}
		last := "none"
		if len(vs) > 0 {
			last = h.describe(vs[len(vs)-1])
		}
		return false, fmt.Sprintf("no version %s among %d seen; the last: %s", what, len(vs), last)
	})
	return found
}
