// Package features declares the sidecar's feature gates (--feature-gates): the upstream
// external-resizer's own gates, with its names, maturity levels and defaults, and the shared
// Kubernetes gates its binary accepts too, so that existing command lines keep working.
package features

import (
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	// Registers the shared gates (generic apiserver and component-base zpages) in
	// utilfeature.DefaultMutableFeatureGate: external-resizer's --feature-gates accepts them
	// because it links that package, so a drop-in must accept them too.
	_ "k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/discovery"
	"k8s.io/component-base/featuregate"
	metricsfeatures "k8s.io/component-base/metrics/features"
)

const (
	// RecoverVolumeExpansionFailure enables the KEP-1790 state machine on
	// status.allocatedResources / allocatedResourceStatuses. Off selects the legacy path that
	// writes conditions only.
	RecoverVolumeExpansionFailure featuregate.Feature = "RecoverVolumeExpansionFailure"
	// AnnotateFsResize records the PV capacity before a resize that needs node expansion in the
	// PV annotation volume.alpha.kubernetes.io/pre-resize-capacity.
	AnnotateFsResize featuregate.Feature = "AnnotateFsResize"
	// VolumeAttributesClass is the gate of VolumeAttributesClass modification
	// (ControllerModifyVolume). This resizer does not implement modification yet: the gate is
	// accepted, and the sidecar says so in its log.
	VolumeAttributesClass featuregate.Feature = "VolumeAttributesClass"
	// ReleaseLeaderElectionOnExit releases the leader election Lease when the process stops on
	// SIGTERM or SIGINT, after the controller's workers have finished, so that a standby takes
	// over at once instead of after --leader-election-lease-duration.
	ReleaseLeaderElectionOnExit featuregate.Feature = "ReleaseLeaderElectionOnExit"
)

// Defaults are the sidecar's own gates, as external-resizer v2.2 declares them. GA gates stay
// switchable (as upstream's), so an operator can fall back.
var Defaults = map[featuregate.Feature]featuregate.FeatureSpec{
	RecoverVolumeExpansionFailure: {Default: true, PreRelease: featuregate.GA},
	AnnotateFsResize:              {Default: true, PreRelease: featuregate.Beta},
	VolumeAttributesClass:         {Default: true, PreRelease: featuregate.GA},
	ReleaseLeaderElectionOnExit:   {Default: false, PreRelease: featuregate.Alpha},
}

// NewGate returns a fresh mutable gate with the sidecar's gates and the shared ones that
// external-resizer's binary accepts: those registered in k8s.io/apiserver's default gate (the
// generic apiserver's and component-base zpages') and component-base metrics' gates. It is a
// copy, so tests and the binary never share or change global state.
func NewGate() featuregate.MutableVersionedFeatureGate {
	g := utilfeature.DefaultMutableFeatureGate.DeepCopyAndReset()
	if err := metricsfeatures.AddFeatureGates(g); err != nil {
		panic(err) // only a programming error (a gate registered twice) can get here
	}
	if err := g.Add(Defaults); err != nil {
		panic(err)
	}
	return g
}

// Help lists the gates as --help shows them: the gates featuregate lists (it hides GA ones),
// then the sidecar's own GA gates, which can still be switched off (featuregate names GA "").
func Help(g featuregate.FeatureGate) []string {
	known := g.KnownFeatures()
	for _, f := range []featuregate.Feature{RecoverVolumeExpansionFailure, VolumeAttributesClass} {
		known = append(known, fmt.Sprintf("%s=true|false (GA - default=%t)", f, Defaults[f].Default))
	}
	return known
}

// VolumeAttributesClassServed reports whether the apiserver serves storage.k8s.io/v1
// VolumeAttributesClass (GA in Kubernetes 1.34; older clusters serve only a beta version,
// or none).
func VolumeAttributesClassServed(d discovery.DiscoveryInterface) (bool, error) {
	list, err := d.ServerResourcesForGroupVersion("storage.k8s.io/v1")
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Kind == "VolumeAttributesClass" }), nil
}
