// Package migration decides which PersistentVolumes of in-tree plugins migrated to CSI
// ("CSI migration": kubernetes.io/aws-ebs to ebs.csi.aws.com, GCE PD, Azure Disk and File,
// Cinder, vSphere, Portworx) this driver expands, and gives the controller the CSI view of
// such a volume for the ControllerExpandVolume call. The translation is k8s.io/csi-translation-lib's,
// the same library kube-controller-manager, the kubelet and the upstream external-resizer use,
// so the volume handle, fsType and secrets the driver receives are the ones it would get from
// upstream.
//
// Everything here is a pure function of its arguments.
package migration

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	csitrans "k8s.io/csi-translation-lib"
	"k8s.io/klog/v2"
)

// AnnStorageResizer is the PVC annotation in which kube-controller-manager's expand
// controller names the CSI driver that must expand a migrated in-tree volume. It is set when
// the user first raises the request of such a PVC, so the resizer sees the request before it
// sees the annotation.
const AnnStorageResizer = "volume.kubernetes.io/storage-resizer"

var translator = csitrans.New()

// IsMigratedDriver reports whether driver is the CSI replacement of an in-tree plugin, so
// that in-tree PVs can be this driver's to expand.
func IsMigratedDriver(driver string) bool {
	return translator.IsMigratedCSIDriverByName(driver)
}

// Owns reports whether the PV bound to pvc is driver's to expand: a CSI PV of the driver, or,
// for a migrated driver, an in-tree PV of the plugin the driver replaces whose PVC carries the
// storage-resizer annotation naming the driver (as upstream decides). The binding itself
// (claimRef) is checked by the caller.
//
// Upstream accepts any PV once the annotation names a migrated driver; here the in-tree source
// must also be the one that driver replaces, so a misplaced annotation never sends a GCE disk
// name to the EBS driver.
func Owns(driver string, pvc *v1.PersistentVolumeClaim, pv *v1.PersistentVolume) bool {
	if pv.Spec.CSI != nil {
		return pv.Spec.CSI.Driver == driver
	}
	if pvc.Annotations[AnnStorageResizer] != driver || !IsMigratedDriver(driver) || !translator.IsPVMigratable(pv) {
		return false
	}
	plugin, err := translator.GetInTreePluginNameFromSpec(pv, nil)
	if err != nil {
		return false
	}
	replaced, err := translator.GetInTreeNameFromCSIName(driver)
	return err == nil && plugin == replaced
}

// CSIView returns the PV as the CSI driver sees it: pv itself for a CSI PV, and for an in-tree
// PV its translation (a copy whose spec.csi holds the driver's volume handle, fsType,
// read-only flag and, where the plugin has them, secret references; access modes, volume mode
// and mount options are kept). migrated says which it was, for the "migrated" label of the
// CSI call metrics. pv is never modified: its capacity is what the controller writes back.
func CSIView(logger klog.Logger, pv *v1.PersistentVolume) (view *v1.PersistentVolume, migrated bool, err error) {
	if pv.Spec.CSI != nil {
		return pv, false, nil
	}
	translated, err := translator.TranslateInTreePVToCSI(logger, pv)
	if err != nil {
		return nil, true, fmt.Errorf("translating in-tree PV %s to CSI (its in-tree volume source is malformed; fix the PV's source): %w", pv.Name, err)
	}
	if translated.Spec.CSI == nil || translated.Spec.CSI.VolumeHandle == "" {
		return nil, true, fmt.Errorf("translating in-tree PV %s to CSI gave no volume handle (its in-tree volume source names no volume; fix the PV's source)", pv.Name)
	}
	return translated, true, nil
}

// HasInTreeSource reports whether pv has a volume source of a migratable in-tree plugin, so
// what its translation reads (labels, node affinity, the whole source) must be kept.
func HasInTreeSource(pv *v1.PersistentVolume) bool {
	return pv.Spec.CSI == nil && translator.IsPVMigratable(pv)
}
