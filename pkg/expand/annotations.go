package expand

import (
	"encoding/json"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The annotations the resizer keeps for other components, with upstream's names, values and
// timing (docs/design.md describes who reads them).
const (
	// AnnPreResizeCapacity is the PV annotation (feature gate AnnotateFsResize) holding the
	// PVC's status.capacity from before an expansion whose file system the node still has to
	// grow. kube-controller-manager's PV controller reads it when it binds a new claim to the
	// PV, so the claim's capacity is not taken from a PV the node has not caught up with.
	AnnPreResizeCapacity = "volume.alpha.kubernetes.io/pre-resize-capacity"
	// AnnNodeExpansionNotRequired is the PVC annotation that tells the kubelet the expansion
	// is complete without a node step. The kubelet reads it for ReadWriteMany volumes: without
	// it, a node that mounts the volume calls NodeExpandVolume even though the PVC's capacity
	// already reached the size.
	AnnNodeExpansionNotRequired = "volume.kubernetes.io/node-expansion-not-required"
	// AnnControllerExpanded is this resizer's own PV annotation: the driver's answer to the
	// ControllerExpandVolume call that brought the PV to its capacity, written in the same
	// patch as the capacity. A resizer that finds the PVC still ControllerResizeInProgress at
	// that size (its predecessor was killed, or lost its Lease, between the PV write and the
	// PVC's) records the outcome from it instead of calling the driver again (docs/design.md
	// §2.3 rule 3).
	AnnControllerExpanded = "csi-resizer.io/controller-expanded"
)

// Expanded is the value of AnnControllerExpanded.
type Expanded struct {
	Capacity              resource.Quantity `json:"capacity"`
	NodeExpansionRequired bool              `json:"nodeExpansionRequired"`
}

// ControllerExpanded returns the PV annotation to write together with the capacity the driver
// answered, as a change for a merge patch.
func ControllerExpanded(capacity resource.Quantity, nodeRequired bool) map[string]*string {
	b, _ := json.Marshal(Expanded{Capacity: capacity, NodeExpansionRequired: nodeRequired}) // cannot fail
	v := string(b)
	return map[string]*string{AnnControllerExpanded: &v}
}

// ReadControllerExpanded returns the PV's record of the call that brought it to its capacity;
// nil when there is none, it does not parse, or it is of another capacity (the PV was changed
// since, by hand or by another resizer): only a record of the PV's own capacity is trusted.
func ReadControllerExpanded(pv *v1.PersistentVolume) *Expanded {
	v, ok := pv.Annotations[AnnControllerExpanded]
	if !ok {
		return nil
	}
	var e Expanded
	if err := json.Unmarshal([]byte(v), &e); err != nil {
		return nil
	}
	if c := pv.Spec.Capacity[v1.ResourceStorage]; e.Capacity.Cmp(c) != 0 {
		return nil
	}
	return &e
}

// PreResizeCapacity returns the PV annotation to write together with the PV's new capacity, as
// a change for a merge patch: the PVC's status.capacity before the expansion, when the node
// has a step to do and the annotation is absent. An annotation already there is kept: it holds
// the capacity from before the first of several expansions the node has not finished yet, the
// size the file system really has. nil means no change.
func PreResizeCapacity(pv *v1.PersistentVolume, pvcCapacity resource.Quantity, nodeRequired bool) map[string]*string {
	if !nodeRequired {
		return nil
	}
	if _, ok := pv.Annotations[AnnPreResizeCapacity]; ok {
		return nil
	}
	v := pvcCapacity.String()
	return map[string]*string{AnnPreResizeCapacity: &v}
}

// PreResizeCapacityDone reports whether the PV's pre-resize-capacity annotation has served
// its purpose and is to be removed: the node step is over, status.capacity of the PVC has
// reached the PV's capacity.
func PreResizeCapacityDone(pvc *v1.PersistentVolumeClaim, pv *v1.PersistentVolume) bool {
	if _, ok := pv.Annotations[AnnPreResizeCapacity]; !ok {
		return false
	}
	pvcCap := pvc.Status.Capacity[v1.ResourceStorage]
	pvCap := pv.Spec.Capacity[v1.ResourceStorage]
	return pvcCap.Cmp(pvCap) >= 0
}

// RemovePreResizeCapacity is the change that removes the annotation.
func RemovePreResizeCapacity() map[string]*string {
	return map[string]*string{AnnPreResizeCapacity: nil}
}

// ClaimWrite is what a status write of the resizer records, for the annotations that go
// with it.
type ClaimWrite int

const (
	// WriteStarted is the write before the driver call (StartedStatus).
	WriteStarted ClaimWrite = iota
	// WriteNodePending hands the expansion to the node (ExpandedStatus with a node step,
	// RedrivenStatus).
	WriteNodePending
	// WriteFinished ends the expansion without a node step (ExpandedStatus without one).
	WriteFinished
	// WriteFailed records a failed driver call (FailedStatus).
	WriteFailed
)

// NodeExpansionNotRequired returns the change of the node-expansion-not-required annotation
// that goes in the same status write as w: set to "true" when the expansion finishes without
// a node step, removed when a new step starts or the node gets one, untouched when a failure
// is recorded. Legacy mode (RecoverVolumeExpansionFailure off) never touches it. nil means no
// change.
func NodeExpansionNotRequired(pvc *v1.PersistentVolumeClaim, w ClaimWrite, legacy bool) map[string]*string {
	if legacy {
		return nil
	}
	_, has := pvc.Annotations[AnnNodeExpansionNotRequired]
	switch {
	case w == WriteFinished && !has:
		v := "true"
		return map[string]*string{AnnNodeExpansionNotRequired: &v}
	case (w == WriteStarted || w == WriteNodePending) && has:
		return map[string]*string{AnnNodeExpansionNotRequired: nil}
	}
	return nil
}

// ExpandedWrite is the kind of write ExpandedStatus makes.
func ExpandedWrite(nodeRequired bool) ClaimWrite {
	if nodeRequired {
		return WriteNodePending
	}
	return WriteFinished
}
