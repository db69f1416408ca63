package sidecar

import (
	"github.com/go-logr/logr"
	"k8s.io/client-go/discovery"
	"k8s.io/component-base/featuregate"
	"k8s.io/klog/v2"

	"github.com/csi-resizer/csi-resizer/pkg/csi"
	"github.com/csi-resizer/csi-resizer/pkg/features"
)

// checkVolumeAttributesClass decides, and says in one log line, whether VolumeAttributesClass
// modification runs (docs/design.md §2.11): the gate is on, and the driver advertises
// MODIFY_VOLUME. As in external-resizer, a gate left at its default is switched off when the
// apiserver does not serve storage.k8s.io/v1 VolumeAttributesClass.
func checkVolumeAttributesClass(logger klog.Logger, d discovery.DiscoveryInterface, gate featuregate.MutableVersionedFeatureGate, driver csi.Driver) bool {
	if !gate.Enabled(features.VolumeAttributesClass) {
		return false
	}
	var served bool
	var err error
	explicit := gate.ExplicitlySet(features.VolumeAttributesClass)
	if !explicit {
		served, err = features.VolumeAttributesClassServed(d)
	}
	on, msg := volumeAttributesClassDecision(explicit, served, err, driver)
	if !explicit && err == nil && !served {
		// The decision's line says why: override without featuregate's own warning line.
		if g, ok := gate.(featuregate.MutableFeatureGateWithLogger); ok {
			_ = g.OverrideDefaultWithLogger(logr.Discard(), features.VolumeAttributesClass, false)
		}
	}
	if err != nil {
		logger.Info(msg, "discoveryError", err.Error())
		return on
	}
	logger.Info(msg)
	return on
}

// volumeAttributesClassDecision decides, for a VolumeAttributesClass gate that is on, whether
// modification runs and what to say: explicit is whether --feature-gates set the gate, served
// and err what discovery said of storage.k8s.io/v1 VolumeAttributesClass (not asked when
// explicit). A failed check keeps the gate on, as in external-resizer.
func volumeAttributesClassDecision(explicit, served bool, err error, driver csi.Driver) (on bool, msg string) {
	switch {
	case !explicit && err == nil && !served:
		return false, "VolumeAttributesClass feature gate switched off: the apiserver does not serve storage.k8s.io/v1 VolumeAttributesClass"
	case !driver.ControllerModify:
		return false, "VolumeAttributesClass modification off: CSI driver " + driver.Name + " does not advertise the MODIFY_VOLUME controller capability"
	}
	return true, "VolumeAttributesClass modification on: changes of a PVC's volumeAttributesClassName call ControllerModifyVolume of " + driver.Name
}
