// Package features declares the sidecar's feature gates (--feature-gates), with the names and
// maturity levels of the upstream external-resizer so existing command lines keep working.
package features

import (
	"k8s.io/component-base/featuregate"
)

const (
	// RecoverVolumeExpansionFailure enables the KEP-1790 state machine on
	// status.allocatedResources / allocatedResourceStatuses. Off selects the legacy path that
	// writes conditions only.
	RecoverVolumeExpansionFailure featuregate.Feature = "RecoverVolumeExpansionFailure"
	// AnnotateFsResize records the PV capacity before a resize that needs node expansion in the
	// PV annotation volume.alpha.kubernetes.io/pre-resize-capacity.
	AnnotateFsResize featuregate.Feature = "AnnotateFsResize"
)

// AnnPreResizeCapacity is the PV annotation written when AnnotateFsResize is on.
const AnnPreResizeCapacity = "volume.alpha.kubernetes.io/pre-resize-capacity"

// Defaults are the gates' defaults; GA gates stay switchable so an operator can fall back.
var Defaults = map[featuregate.Feature]featuregate.FeatureSpec{
	RecoverVolumeExpansionFailure: {Default: true, PreRelease: featuregate.GA},
	AnnotateFsResize:              {Default: true, PreRelease: featuregate.Beta},
}

// NewGate returns a fresh mutable gate with the sidecar's features, so that tests and the binary
// never share global state.
func NewGate() featuregate.MutableFeatureGate {
	g := featuregate.NewFeatureGate()
	if err := g.Add(Defaults); err != nil {
		panic(err) // only a programming error in Defaults can get here
	}
	return g
}
