// Package binding answers, for the resizer's controllers, which PVCs are this driver's: a PVC
// bound to a PV the driver serves, whose claimRef points back at that very PVC.
package binding

import (
	v1 "k8s.io/api/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/csi-resizer/csi-resizer/pkg/migration"
)

// VolumeOf returns the PV of a bound PVC when the PV belongs to driver (a CSI PV of the
// driver, or a migrated in-tree PV the PVC's storage-resizer annotation hands to it:
// migration.Owns, docs/design.md §2.8) and its claimRef points back at this very PVC
// (docs/design.md §2.3 rule 1). The UID must match too, as upstream requires: a claimRef
// without one (pre-bound by name, not yet confirmed by the PV controller) or with another's (a
// deleted claim of the same name) does not prove the volume is this claim's.
func VolumeOf(pvs corelisters.PersistentVolumeLister, driver string, pvc *v1.PersistentVolumeClaim) (*v1.PersistentVolume, bool) {
	if pvc.Spec.VolumeName == "" || pvc.Status.Phase != v1.ClaimBound {
		return nil, false
	}
	pv, err := pvs.Get(pvc.Spec.VolumeName)
	if err != nil || !migration.Owns(driver, pvc, pv) {
		return nil, false
	}
	ref := pv.Spec.ClaimRef
	if ref == nil || ref.Namespace != pvc.Namespace || ref.Name != pvc.Name || ref.UID != pvc.UID {
		return nil, false
	}
	return pv, true
}

// MayBeDrivers reports whether pv can be driver's, for the cheap filters of event handlers:
// a CSI PV of the driver, or an in-tree PV when the driver replaces an in-tree plugin
// (docs/design.md §2.8).
func MayBeDrivers(pv *v1.PersistentVolume, driver string) bool {
	if pv.Spec.CSI != nil {
		return pv.Spec.CSI.Driver == driver
	}
	return migration.IsMigratedDriver(driver)
}
