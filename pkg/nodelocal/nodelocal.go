// Package nodelocal decides which volumes a csi-resizer started with --node-deployment handles:
// exactly those local to its node (docs/design.md §2.12). One such instance runs on every node,
// next to a driver whose controller service serves only that node's volumes (LVM, local disks,
// csi-driver-host-path), so each must touch only its own node's volumes, and no volume may be
// touched by two instances, which would race each other's status writes and driver calls.
//
// The decision, Decide, is a pure function of the PV and this instance's Node. It proves
// locality from the PV alone, without watching every Node of the cluster: that watch would cost
// the apiserver N instances × every Node update, quadratic in the cluster's size.
package nodelocal

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// Verdict is what Decide says about a PV.
type Verdict int

const (
	// Local: the PV's required node affinity matches this node and can match no other.
	Local Verdict = iota
	// OtherNode: the affinity does not match this node: another instance's volume, or none's.
	OtherNode
	// NoAffinity: no required node affinity: the volume is reachable from any node, so it is
	// a controller-mode resizer's, never a node instance's.
	NoAffinity
	// NotPinned: the affinity matches this node but could match others too (a zone label, an
	// In with several values, a term for another node): no instance may claim it alone.
	NotPinned
	// Invalid: the affinity cannot be parsed; the scheduler cannot place it either.
	Invalid
	// NoNode: this instance's Node is not known (not in the cache yet, or deleted).
	NoNode
)

func (v Verdict) String() string {
	return [...]string{"Local", "OtherNode", "NoAffinity", "NotPinned", "Invalid", "NoNode"}[v]
}

// HostnameLabel is the Node label the kubelet sets to the node's host name.
const HostnameLabel = "kubernetes.io/hostname"

// Decide says whether the PV is local to node, and why (for the log). Local means: the PV's
// required node affinity matches node (component-helpers' matcher, as the scheduler and kubelet
// match it), and every one of its terms is pinned to node, so that no other node can match it.
// A term is pinned when it requires, with operator In and that one value only, the field
// metadata.name = the node's name, or a label of the node whose value is the node's name
// (drivers' per-node topology keys: csi-driver-host-path's topology.hostpath.csi/node, TopoLVM's
// topology.topolvm.io/node, ...) or kubernetes.io/hostname. Names are unique, so such a term
// cannot match another node; anything else (a zone, a rack, NotIn, Exists) could.
func Decide(pv *v1.PersistentVolume, node *v1.Node) (Verdict, string) {
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil || len(pv.Spec.NodeAffinity.Required.NodeSelectorTerms) == 0 {
		return NoAffinity, "the PV has no required node affinity: any node can reach it, so it is for a resizer in controller mode"
	}
	if node == nil {
		return NoNode, "this instance's Node is not known"
	}
	required := pv.Spec.NodeAffinity.Required
	selector, err := nodeaffinity.NewNodeSelector(required)
	if err != nil {
		return Invalid, fmt.Sprintf("the PV's node affinity is invalid: %v", err)
	}
	if !selector.Match(node) {
		return OtherNode, "the PV's node affinity does not match node " + node.Name
	}
	for i := range required.NodeSelectorTerms {
		term := &required.NodeSelectorTerms[i]
		if len(term.MatchExpressions) == 0 && len(term.MatchFields) == 0 {
			continue // an empty term matches no node
		}
		if !pinned(term, node) {
			return NotPinned, fmt.Sprintf("term %d of the PV's node affinity can match nodes other than %s (it pins no node name, host name or per-node topology label to this node alone)", i, node.Name)
		}
	}
	return Local, "the PV's node affinity pins it to node " + node.Name
}

// pinned reports whether term can match node and no other node.
func pinned(term *v1.NodeSelectorTerm, node *v1.Node) bool {
	for _, r := range term.MatchFields {
		if r.Key == "metadata.name" && isOnly(r, node.Name) {
			return true
		}
	}
	for _, r := range term.MatchExpressions {
		value, ok := node.Labels[r.Key]
		if ok && isOnly(r, value) && (value == node.Name || r.Key == HostnameLabel) {
			return true
		}
	}
	return false
}

// isOnly reports whether r is "In [value]".
func isOnly(r v1.NodeSelectorRequirement, value string) bool {
	return r.Operator == v1.NodeSelectorOpIn && len(r.Values) == 1 && r.Values[0] == value
}
