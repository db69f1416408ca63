package modifycontroller

import (
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/csi-resizer/csi-resizer/pkg/internal/binding"
	"github.com/csi-resizer/csi-resizer/pkg/modify"
)

// The event handlers only queue keys; sync decides. Their filters are cheap and drop only
// events that cannot matter: a PVC that neither asks for another class nor has a modification
// under way (modify.Observed.Wants).

func wants(pvc *v1.PersistentVolumeClaim) bool {
	return pvc.Spec.VolumeName != "" && modify.Observe(pvc).Wants()
}

// mayBeLocal drops, with --node-deployment, a PVC whose PV is certainly another node's:
// every instance but one sees each of those (docs/design.md §2.12 rule 24).
func (c *Controller) mayBeLocal(pvc *v1.PersistentVolumeClaim) bool {
	return c.cfg.Scope.ClaimMayBeLocal(c.pvLister, pvc)
}

func (c *Controller) claimAdded(obj any) {
	if pvc, ok := obj.(*v1.PersistentVolumeClaim); ok && wants(pvc) && c.mayBeLocal(pvc) {
		c.enqueue(pvc)
	}
}

// claimUpdated queues a PVC that wants work after the update; one that wanted it before and
// no longer does needs nothing (its modification ended in this very update).
func (c *Controller) claimUpdated(_, newObj any) {
	if pvc, ok := newObj.(*v1.PersistentVolumeClaim); ok && wants(pvc) && c.mayBeLocal(pvc) {
		c.enqueue(pvc)
	}
}

// claimDeleted queues the key: sync finds the PVC gone and drops what is kept about it.
func (c *Controller) claimDeleted(obj any) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		c.queue.Add(key)
	}
}

// volumeAdded catches PVCs seen before their PV reached the cache.
func (c *Controller) volumeAdded(obj any) {
	if pv, ok := obj.(*v1.PersistentVolume); ok {
		c.enqueueClaimOf(pv)
	}
}

// volumeUpdated reacts to binding; other PV changes are this controller's own.
func (c *Controller) volumeUpdated(oldObj, newObj any) {
	old, ok1 := oldObj.(*v1.PersistentVolume)
	pv, ok2 := newObj.(*v1.PersistentVolume)
	if ok1 && ok2 && old.Spec.ClaimRef == nil && pv.Spec.ClaimRef != nil {
		c.enqueueClaimOf(pv)
	}
}

func (c *Controller) enqueueClaimOf(pv *v1.PersistentVolume) {
	ref := pv.Spec.ClaimRef
	if ref == nil || !binding.MayBeDrivers(pv, c.cfg.Driver.Name) || !c.cfg.Scope.MayBeLocal(pv) {
		return
	}
	if pvc, err := c.pvcLister.PersistentVolumeClaims(ref.Namespace).Get(ref.Name); err == nil && wants(pvc) {
		c.enqueue(pvc)
	}
}

// classAdded queues the PVCs waiting for a class that now exists (Pending, or a modification
// under way whose class had gone). Classes are few and immutable, so a scan of the cache on
// creation is cheap; updates and deletions change nothing a PVC waits for.
func (c *Controller) classAdded(obj any) {
	vac, ok := obj.(*storagev1.VolumeAttributesClass)
	if !ok || vac.DriverName != c.cfg.Driver.Name {
		return
	}
	c.requeue(func(o modify.Observed) bool { return o.Spec == vac.Name || o.Target == vac.Name })
}

// classDeleted queues the PVCs whose modification in flight targets the deleted class, so that
// it is given up (rule 20) without waiting for a resync. Its protection finalizer normally keeps a
// class in use from going; this is for when it did not.
func (c *Controller) classDeleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	vac, ok := obj.(*storagev1.VolumeAttributesClass)
	if !ok || vac.DriverName != c.cfg.Driver.Name {
		return
	}
	c.requeue(func(o modify.Observed) bool { return o.Target == vac.Name })
}

// requeue queues the PVCs that want work and for which pick holds: a scan of the cache, made
// only on rare events (a class created, the Node's labels changed).
func (c *Controller) requeue(pick func(modify.Observed) bool) {
	pvcs, err := c.pvcLister.List(labels.Everything())
	if err != nil {
		return
	}
	for _, pvc := range pvcs {
		if wants(pvc) && pick(modify.Observe(pvc)) && c.mayBeLocal(pvc) {
			c.enqueue(pvc)
		}
	}
}

func (c *Controller) enqueue(pvc *v1.PersistentVolumeClaim) {
	if key, err := cache.MetaNamespaceKeyFunc(pvc); err == nil {
		c.queue.Add(key)
	}
}
