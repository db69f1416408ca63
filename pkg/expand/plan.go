// Package resize holds the KEP-1790 decision of the csi-resizer sidecar: given what is observed
// of one PVC and its PV, which size to expand to, whether a recovery to a lower size is allowed,
// and which status the PVC must carry before and after the driver call.
//
// Everything here is a pure function of its arguments: no API calls, no clocks read, no memory
// kept between calls. That is what lets a restarted resizer make the same decision as the one
// that crashed (KEP-1790 Case 4), and what makes the rules table-testable and fuzzable.
//
// A bare "rule N" in this package's comments is rule N of docs/design.md §2.3.
package expand

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Observed is everything the decision needs to know about one PVC of this driver.
type Observed struct {
	// Spec is pvc.spec.resources.requests.storage: what the user asks for now.
	Spec resource.Quantity
	// Alloc is pvc.status.allocatedResources.storage, nil when absent.
	Alloc *resource.Quantity
	// State is pvc.status.allocatedResourceStatuses.storage, "" when absent.
	State v1.ClaimResourceStatus
	// PVCap is the PV's spec.capacity.storage: what the control plane has expanded so far.
	PVCap resource.Quantity
	// PVCCap is pvc.status.capacity.storage: what the user can use.
	PVCCap resource.Quantity
	// LastError is the class of the last ControllerExpandVolume error, read back from the
	// PVC's ControllerResizeError condition (ClassNone when there is none).
	LastError ErrorClass
	// NodeOnly is true for a driver without controller EXPAND_VOLUME: its PV capacity is
	// bookkeeping that the node acts on, never a change the storage backend made.
	NodeOnly bool
	// Legacy selects the pre-KEP-1790 behaviour (RecoverVolumeExpansionFailure=false): only
	// conditions are written and allocated* is never touched or read.
	Legacy bool
	// FileSystemResizePending is the PVC's FileSystemResizePending condition being True: the
	// control-plane part is done and the kubelet has the rest. Only the legacy path reads it,
	// having no allocatedResourceStatuses to say so.
	FileSystemResizePending bool
	// Expanded is the PV's record of the driver's answer for its capacity (AnnControllerExpanded,
	// ReadControllerExpanded), nil when there is none.
	Expanded *Expanded
}

// Action is what the controller must do for a PVC.
type Action string

const (
	// Nothing: the PVC needs no work from the resizer now (done, or it is the node's turn).
	Nothing Action = "Nothing"
	// ExpandController: call ControllerExpandVolume with Plan.Target.
	ExpandController Action = "ExpandController"
	// ExpandNodeOnly: no CSI call; set the PV capacity to Plan.Target and hand over to the node.
	ExpandNodeOnly Action = "ExpandNodeOnly"
	// RedriveNode: the node failed (NodeResizeInfeasible) after the control plane had already
	// grown the volume; nothing can be undone, so put the PVC back to NodeResizePending.
	RedriveNode Action = "RedriveNode"
	// RecordExpanded: the driver already expanded the volume to Plan.Target and the PV holds its
	// answer (Observed.Expanded); no CSI call, write the outcome (Plan.NodeRequired) to the PVC.
	RecordExpanded Action = "RecordExpanded"
)

// Plan is the decision for one PVC.
type Plan struct {
	Action Action
	// Target is the size to expand to, and the value allocatedResources will hold.
	Target resource.Quantity
	// Recovery is true when Target is below the previously allocated size: the user lowered
	// the request after a failed expansion (KEP-1790 Cases 1 and 2).
	Recovery bool
	// LowerPV is true when the PV capacity must go down to Target. Only ever for node-only
	// drivers, whose PV capacity no backend acted on, and only in a KEP-1790 Case 2 recovery
	// (see mayLowerPV): otherwise a node-only target never goes below the PV capacity.
	LowerPV bool
	// NodeRequired is the driver's recorded answer that RecordExpanded writes: the node has a
	// step to do.
	NodeRequired bool
	// Why says in words which rule chose the target, for logs and events.
	Why string
}

// PlanExpansion applies docs/design.md §2.3 rules 2-4 to one observed PVC, and the "only when
// there is work" half of rule 1 (the controller checks that the PV is this driver's).
func PlanExpansion(o Observed) Plan {
	if o.Legacy {
		return planLegacy(o)
	}
	switch o.State {
	case v1.PersistentVolumeClaimNodeResizePending, v1.PersistentVolumeClaimNodeResizeInProgress:
		// The control plane part is done; the kubelet owns the PVC until it clears the state
		// or reports NodeResizeInfeasible.
		return Plan{Action: Nothing, Why: fmt.Sprintf("state %s: waiting for the node", o.State)}

	case v1.PersistentVolumeClaimNodeResizeInfeasible:
		if o.NodeOnly {
			// The node was the only place the expansion happened, and it failed for good:
			// the request may follow spec, even downwards.
			return target(o, o.Spec, "node expansion failed on a node-only driver: following spec")
		}
		// The backend already grew the volume: there is no way back, only forward.
		p := target(o, allocOr(o, o.Spec), "node expansion failed after controller expansion: retrying the node at the allocated size")
		p.Action = RedriveNode
		return p

	case v1.PersistentVolumeClaimControllerResizeInfeasible:
		return target(o, o.Spec, "previous expansion was infeasible: following spec")

	case v1.PersistentVolumeClaimControllerResizeInProgress:
		if o.LastError.IsFinal() {
			return target(o, o.Spec, fmt.Sprintf("previous expansion failed with a final error (%s): following spec", o.LastError))
		}
		// In progress, or its outcome is unknown (crash, timeout): the backend may still be
		// growing the volume to alloc, so alloc is the only safe target (Cases 3, 4, 5).
		return recorded(o, target(o, allocOr(o, o.Spec), "previous expansion may still be in progress: keeping the allocated size"))

	case "":
		if o.Spec.Cmp(o.PVCCap) <= 0 {
			return Plan{Action: Nothing, Why: "spec is not above status.capacity"}
		}
		return target(o, o.Spec, "new expansion: following spec")

	default:
		// A state this resizer does not know (a newer kubelet's?) is neither finished nor known
		// to have failed: the expansion to alloc may still be going on, so only alloc is safe.
		return target(o, allocOr(o, o.Spec), fmt.Sprintf("unknown state %q: keeping the allocated size", o.State))
	}
}

// recorded turns an expansion to the size whose driver answer the PV already records (the
// previous resizer stopped between the PV write and the PVC's) into RecordExpanded: the call
// was made and answered, repeating it only to learn the answer again is a driver call for a
// size already done.
func recorded(o Observed, p Plan) Plan {
	e := o.Expanded
	if p.Action != ExpandController || e == nil || e.Capacity.Cmp(p.Target) != 0 || o.PVCap.Cmp(p.Target) != 0 {
		return p
	}
	return Plan{Action: RecordExpanded, Target: p.Target, NodeRequired: e.NodeExpansionRequired,
		Why: "the PV records the driver's answer for the allocated size: recording it without calling again"}
}

// planLegacy is the behaviour without RecoverVolumeExpansionFailure: always expand to spec, and
// only when spec is above the current capacity.
func planLegacy(o Observed) Plan {
	if o.Spec.Cmp(o.PVCCap) <= 0 {
		return Plan{Action: Nothing, Why: "spec is not above status.capacity"}
	}
	// Legacy mode has no allocatedResourceStatuses to say "node expansion pending"; upstream's
	// pvNeedResize reads it from the PV capacity and the PVC condition: a PV that covers spec
	// plus FileSystemResizePending means the control-plane part is done and only the kubelet
	// has work left. Expanding again would call ControllerExpandVolume, and write the status
	// and an event, on every resync until the node finishes (for a node-only driver, re-hand
	// the same PV to the node). Without the condition a PV that covers spec is a resize whose
	// PVC status was never written (crash after the PV write): like upstream, go on and let
	// the idempotent call finish it, or the PVC would stay unfinished for good.
	if o.Spec.Cmp(o.PVCap) <= 0 && o.FileSystemResizePending {
		return Plan{Action: Nothing, Why: "legacy: the PV capacity covers spec and the file system resize is pending on the node"}
	}
	// Never below the PV capacity: a controller expansion cannot be undone, and legacy has no
	// recovery to lower a node-only PV.
	if o.NodeOnly {
		return Plan{Action: ExpandNodeOnly, Target: maxQ(o.Spec, o.PVCap), Why: "legacy: node-only driver"}
	}
	return Plan{Action: ExpandController, Target: maxQ(o.Spec, o.PVCap), Why: "legacy: following spec"}
}

// target turns a wanted size into a plan, enforcing rule 4: allocatedResources never below
// status.capacity, and never a target below the PV capacity, except in a node-only Case 2
// recovery (mayLowerPV).
func target(o Observed, want resource.Quantity, why string) Plan {
	p := Plan{Action: ExpandController, Why: why}
	if o.NodeOnly {
		p.Action = ExpandNodeOnly
	}
	t := maxQ(want, o.PVCCap)
	if mayLowerPV(o) {
		p.LowerPV = t.Cmp(o.PVCap) < 0
	} else {
		t = maxQ(t, o.PVCap)
	}
	p.Target = t
	p.Recovery = o.Alloc != nil && t.Cmp(*o.Alloc) < 0
	return p
}

// mayLowerPV says whether a target below the PV capacity is allowed (rule 4, KEP-1790 Case 2).
// A controller expansion that succeeded cannot be undone, so never for a controller driver. For
// a node-only driver the PV capacity is what the kubelet expands the file system to, so it may
// go down only when the node is known not to be acting on it:
//   - NodeResizeInfeasible: the node failed for good on the recorded allocation and waits for
//     NodeResizePending (KEP Design Details, item 2). Without a recorded allocation no component
//     wrote this state and nothing says what failed, so it is not treated as Case 2.
//   - ControllerResizeInProgress with allocatedResources below the PV: only a Case 2 recovery
//     records an allocation below the PV of a node-only driver (anything else writes the PV up
//     to the allocation), so this resizer started one and stopped before lowering the PV; the
//     kubelet does not act in this state. Finishing it is what a restart must do (Case 4).
//
// Anything else is not a recovery after a node failure. In particular with no state the PV may
// have been raised by an older resizer that left FileSystemResizePending without
// allocatedResourceStatuses, and the node may be expanding to it right now; and an allocation
// equal to the PV with ControllerResizeInProgress is a crash after the PV write, i.e. a
// control-plane part that succeeded, which KEP-1790 never lets a lower request undo.
func mayLowerPV(o Observed) bool {
	if !o.NodeOnly || o.Alloc == nil {
		return false
	}
	switch o.State {
	case v1.PersistentVolumeClaimNodeResizeInfeasible:
		return true
	case v1.PersistentVolumeClaimControllerResizeInProgress:
		return o.Alloc.Cmp(o.PVCap) < 0
	}
	return false
}

func allocOr(o Observed, fallback resource.Quantity) resource.Quantity {
	if o.Alloc != nil {
		return *o.Alloc
	}
	return fallback
}

func maxQ(a, b resource.Quantity) resource.Quantity {
	if a.Cmp(b) >= 0 {
		return a.DeepCopy()
	}
	return b.DeepCopy()
}
