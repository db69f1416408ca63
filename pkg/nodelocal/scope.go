package nodelocal

import (
	"maps"

	v1 "k8s.io/api/core/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Scope is a node instance's side of the controllers: its Node, from an informer that watches
// that one Node (a field selector on metadata.name), and Decide over it. The controllers use it
// in their event filters (MayBeLocal) and in sync (Handles). A nil *Scope is controller mode:
// every volume of the driver is handled.
type Scope struct {
	nodeName string
	nodes    corelisters.NodeLister
	informer cache.SharedIndexInformer
}

// NewScope is the scope of the instance on node nodeName; nodes must watch that Node.
func NewScope(nodeName string, nodes coreinformers.NodeInformer) *Scope {
	return &Scope{nodeName: nodeName, nodes: nodes.Lister(), informer: nodes.Informer()}
}

// NodeName is the instance's node, "" in controller mode.
func (s *Scope) NodeName() string {
	if s == nil {
		return ""
	}
	return s.nodeName
}

// Decide is Decide for the PV and this instance's Node as cached now.
func (s *Scope) Decide(pv *v1.PersistentVolume) (Verdict, string) {
	node, err := s.nodes.Get(s.nodeName)
	if err != nil {
		node = nil
	}
	return Decide(pv, node)
}

// MayBeLocal is the event handlers' cheap filter: it drops only a PV that is certainly another
// node's (its affinity does not match this node), silently, since every instance but one sees
// each of those. Every other verdict goes to sync, which says why it does nothing.
func (s *Scope) MayBeLocal(pv *v1.PersistentVolume) bool {
	if s == nil || pv == nil {
		return true
	}
	v, _ := s.Decide(pv)
	return v != OtherNode
}

// Includes reports, without a word, whether the PV is this instance's: always in controller
// mode. The state metrics count only these, so that the node instances' series add up.
func (s *Scope) Includes(pv *v1.PersistentVolume) bool {
	if s == nil {
		return true
	}
	v, _ := s.Decide(pv)
	return v == Local
}

// ClaimMayBeLocal is MayBeLocal for the PV of pvc, read from pvs. A PV not in the cache yet
// passes: the PV's own add event is filtered again when it comes.
func (s *Scope) ClaimMayBeLocal(pvs corelisters.PersistentVolumeLister, pvc *v1.PersistentVolumeClaim) bool {
	if s == nil {
		return true
	}
	pv, err := pvs.Get(pvc.Spec.VolumeName)
	return err != nil || s.MayBeLocal(pv)
}

// Handles is sync's check: whether this instance may act on the PV. A volume no node instance
// may act on (no affinity, an affinity several nodes may match, an invalid one) is said so at
// -v=2, as the reason nothing happens to it; another node's volume only at -v=5.
func (s *Scope) Handles(logger klog.Logger, pv *v1.PersistentVolume) bool {
	if s == nil {
		return true
	}
	v, why := s.Decide(pv)
	switch v {
	case Local:
		return true
	case OtherNode:
		logger.V(5).Info("Not this node's volume", "node", s.nodeName, "why", why)
	default:
		logger.V(2).Info("Volume left alone by --node-deployment", "node", s.nodeName, "verdict", v.String(), "why", why)
	}
	return false
}

// OnLabelsChanged calls f when the Node's labels change (volumes may have become local, or
// stopped being local). The registration's HasSynced belongs with the controller's other ones.
func (s *Scope) OnLabelsChanged(f func()) (cache.ResourceEventHandlerRegistration, error) {
	return s.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := oldObj.(*v1.Node)
			node, ok2 := newObj.(*v1.Node)
			if ok1 && ok2 && !maps.Equal(old.Labels, node.Labels) {
				f()
			}
		},
	})
}
