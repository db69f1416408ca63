package expandcontroller

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/csi-resizer/csi-resizer/pkg/expand"
	"github.com/csi-resizer/csi-resizer/pkg/internal/binding"
	"github.com/csi-resizer/csi-resizer/pkg/migration"
)

// The event handlers only queue keys; sync decides. Their filters are cheap and only drop
// events that cannot matter. The echo of the controller's own write is queued like any other
// update: sync decides on the fresh object, and finds nothing to repeat.

// needsWork is the cheap filter of informer events: a PVC asks for more than it has, or is in
// the middle of a resize.
func needsWork(pvc *v1.PersistentVolumeClaim) bool {
	if pvc.Spec.VolumeName == "" {
		return false
	}
	if pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage] != "" {
		return true
	}
	spec := pvc.Spec.Resources.Requests[v1.ResourceStorage]
	capacity := pvc.Status.Capacity[v1.ResourceStorage]
	return spec.Cmp(capacity) > 0
}

// preResizeCapacityToRemove reports whether the PV of pvc carries a pre-resize-capacity
// annotation whose node step is over, for sync to remove (docs/design.md §2.9): after a
// restart, or when the PV's cache caught up after the PVC's, that is the only work left.
func (c *Controller) preResizeCapacityToRemove(pvc *v1.PersistentVolumeClaim) bool {
	if !c.cfg.AnnotateFsResize || pvc.Spec.VolumeName == "" {
		return false
	}
	pv, err := c.pvLister.Get(pvc.Spec.VolumeName)
	return err == nil && expand.PreResizeCapacityDone(pvc, pv) && migration.Owns(c.cfg.Driver.Name, pvc, pv) && c.cfg.Scope.MayBeLocal(pv)
}

// hasWork: the PVC needs work, or its PV's pre-resize-capacity is left to remove.
func (c *Controller) hasWork(pvc *v1.PersistentVolumeClaim) bool {
	return needsWork(pvc) || c.preResizeCapacityToRemove(pvc)
}

// mayBeLocal drops, with --node-deployment, a PVC whose PV is certainly another node's:
// every instance but one sees each of those (docs/design.md §2.12 rule 24).
func (c *Controller) mayBeLocal(pvc *v1.PersistentVolumeClaim) bool {
	return c.cfg.Scope.ClaimMayBeLocal(c.pvLister, pvc)
}

func (c *Controller) claimAdded(obj any) {
	if pvc, ok := obj.(*v1.PersistentVolumeClaim); ok && c.hasWork(pvc) && c.mayBeLocal(pvc) {
		c.enqueue(pvc)
	}
}

// claimUpdated queues a PVC that needs work, or needed it before this update: the update that
// ends a resize (the kubelet's, after a node step) is what the observer times the end by, and
// what lets sync remove the PV's pre-resize-capacity annotation. The update in which
// kube-controller-manager hands a migrated in-tree PVC to this driver (its storage-resizer
// annotation) is one of a PVC that needs work: the request was raised before it.
func (c *Controller) claimUpdated(oldObj, newObj any) {
	old, ok1 := oldObj.(*v1.PersistentVolumeClaim)
	pvc, ok2 := newObj.(*v1.PersistentVolumeClaim)
	if ok1 && ok2 && (needsWork(old) || c.hasWork(pvc)) && c.mayBeLocal(pvc) {
		c.enqueue(pvc)
	}
}

// claimDeleted queues the key: sync finds the PVC gone and drops what is kept about it. A claim
// deleted after its node step was over, before sync removed its PV's pre-resize-capacity
// annotation (the kubelet's last status write and the delete close together), also queues its
// PV under volumeKey: once the claim is gone, no update of it will ever come back to remove the
// annotation, and the deleted claim's last state is the only record that the node step was
// over (docs/design.md §2.9). A claim deleted before its node step leaves the annotation: it
// still holds the size the file system has.
func (c *Controller) claimDeleted(obj any) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		c.queue.Add(key)
	}
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if pvc, ok := obj.(*v1.PersistentVolumeClaim); ok && c.preResizeCapacityToRemove(pvc) {
		c.queue.Add(volumeKey(pvc.Spec.VolumeName))
	}
}

// volumeKeyPrefix marks the queue keys of PVs (claimDeleted) among those of PVCs
// ("namespace/name"): a PV's name holds no ':'.
const volumeKeyPrefix = "pv:"

func volumeKey(name string) string { return volumeKeyPrefix + name }

// volumeAdded catches PVCs that were seen before their PV reached the cache.
func (c *Controller) volumeAdded(obj any) {
	if pv, ok := obj.(*v1.PersistentVolume); ok {
		c.enqueueClaimOf(pv, c.hasWork)
	}
}

// volumeUpdated reacts to binding, and to a PV whose pre-resize-capacity is due for removal
// (the node step may have ended before this PV reached the cache): other changes on the PV
// are the controller's own, and queue nothing.
func (c *Controller) volumeUpdated(oldObj, newObj any) {
	old, ok1 := oldObj.(*v1.PersistentVolume)
	pv, ok2 := newObj.(*v1.PersistentVolume)
	switch {
	case !ok1 || !ok2:
	case old.Spec.ClaimRef == nil && pv.Spec.ClaimRef != nil:
		c.enqueueClaimOf(pv, c.hasWork)
	case pv.Annotations[expand.AnnPreResizeCapacity] != "":
		c.enqueueClaimOf(pv, c.preResizeCapacityToRemove)
	}
}

// enqueueClaimOf queues the PVC bound to pv when pv can be this driver's (a CSI PV of the
// driver, or an in-tree PV when the driver replaces an in-tree plugin: docs/design.md §2.8) and
// want says the PVC has work.
func (c *Controller) enqueueClaimOf(pv *v1.PersistentVolume, want func(*v1.PersistentVolumeClaim) bool) {
	ref := pv.Spec.ClaimRef
	if ref == nil || !binding.MayBeDrivers(pv, c.cfg.Driver.Name) || !c.cfg.Scope.MayBeLocal(pv) {
		return
	}
	pvc, err := c.pvcLister.PersistentVolumeClaims(ref.Namespace).Get(ref.Name)
	if err == nil && want(pvc) {
		c.enqueue(pvc)
	}
}

// requeueAll queues every PVC with work when the Node's labels change (--node-deployment):
// volumes may have become this node's. Node labels change rarely; a scan of the cache is cheap.
func (c *Controller) requeueAll() {
	pvcs, err := c.pvcLister.List(labels.Everything())
	if err != nil {
		return
	}
	for _, pvc := range pvcs {
		if c.hasWork(pvc) && c.mayBeLocal(pvc) {
			c.enqueue(pvc)
		}
	}
}

func (c *Controller) enqueue(pvc *v1.PersistentVolumeClaim) {
	if key, err := cache.MetaNamespaceKeyFunc(pvc); err == nil {
		c.queue.Add(key)
	}
}

// legacyFailed is the target of the last failed attempt in legacy mode, where the PVC has no
// allocatedResources to say which request failed: a different request is the user's answer to
// the failure and goes at once, without the retry wait (docs/design.md §2.3 rule 8). It is all
// the controller keeps about a PVC that neither the API nor the work queue can hold; a restart
// that loses it makes a new request wait at most one retry interval.
func (c *Controller) legacyFailed(key string) *resource.Quantity {
	c.mu.Lock()
	defer c.mu.Unlock()
	if q, ok := c.failed[key]; ok {
		return &q
	}
	return nil
}

// setLegacyFailed records (or, with nil, forgets) the failed target of legacy mode.
func (c *Controller) setLegacyFailed(key string, q *resource.Quantity) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if q == nil {
		delete(c.failed, key)
		return
	}
	c.failed[key] = q.DeepCopy()
}

// forget drops everything kept about a deleted PVC (docs/design.md §2.3 rule 10), the
// observer's bookkeeping included: an expansion under way ends without an outcome, since
// deleting the claim is the user's decision, not a result of the expansion.
func (c *Controller) forget(key string) {
	c.setLegacyFailed(key, nil)
	c.fresh.Forget(key)
	c.obs.Forget(key)
}
