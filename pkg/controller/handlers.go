package controller

import (
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/csi-resizer/csi-resizer/pkg/migration"
)

var labelsEverything = labels.Everything()

// needsWork is the cheap pre-filter of informer events: a PVC asks for more than it has, or is
// in the middle of a resize.
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

func (c *Controller) claimAdded(obj any) {
	defer c.handled(obj)
	pvc, ok := obj.(*v1.PersistentVolumeClaim)
	if !ok || (!needsWork(pvc) && !c.preResizeCapacityToRemove(pvc)) {
		return
	}
	c.enqueue(pvc)
}

func (c *Controller) claimUpdated(oldObj, newObj any) {
	defer c.handled(newObj)
	oldPVC, ok1 := oldObj.(*v1.PersistentVolumeClaim)
	pvc, ok2 := newObj.(*v1.PersistentVolumeClaim)
	if !ok1 || !ok2 {
		return
	}
	key, _ := cache.MetaNamespaceKeyFunc(pvc)
	if !resizeInputsChanged(oldPVC, pvc) {
		return
	}
	// The echo of the controller's own status write carries nothing new: processing it again
	// is how upstream ends up calling the driver twice for one failure.
	if oldPVC.ResourceVersion != pvc.ResourceVersion && c.isOwnWriteOrHeld(key, pvc.ResourceVersion) {
		return
	}
	// The kubelet's update that ends a node expansion leaves nothing to expand, but the
	// resizer that handed the expansion over records its end (duration, recovery) on seeing
	// it, and removes the PV's pre-resize-capacity annotation.
	if !needsWork(pvc) && !c.awaitingNode(key) && !c.preResizeCapacityToRemove(pvc) {
		return
	}
	c.queue.Add(key)
}

// resizeConditions are the PVC conditions the resizer and the kubelet write about a resize.
var resizeConditions = []v1.PersistentVolumeClaimConditionType{
	v1.PersistentVolumeClaimResizing,
	v1.PersistentVolumeClaimFileSystemResizePending,
	v1.PersistentVolumeClaimControllerResizeError,
	v1.PersistentVolumeClaimNodeResizeError,
}

// resizeInputsChanged reports whether an update changed anything the resizer decides on: the
// storage request, the binding, the storage capacity, allocated size and resize state, the
// phase, the resize conditions, and the storage-resizer annotation (kube-controller-manager
// sets it on a migrated in-tree PVC after the request was raised: that update is what hands
// the PVC to this driver). An update of other fields (labels, annotations, another
// component's condition) brings nothing new to decide on; processing it at once would also
// bypass the retry backoff of a failed expansion, so a PVC that another controller keeps
// touching would turn every touch into a driver call. The pending retry still comes. The
// periodic resync, which repeats the version, is let through.
func resizeInputsChanged(old, pvc *v1.PersistentVolumeClaim) bool {
	if old.ResourceVersion == pvc.ResourceVersion || old.UID != pvc.UID ||
		old.Spec.VolumeName != pvc.Spec.VolumeName || old.Status.Phase != pvc.Status.Phase ||
		!old.DeletionTimestamp.Equal(pvc.DeletionTimestamp) ||
		old.Annotations[migration.AnnStorageResizer] != pvc.Annotations[migration.AnnStorageResizer] {
		return true
	}
	if storageChanged(old.Spec.Resources.Requests, pvc.Spec.Resources.Requests) ||
		storageChanged(old.Status.Capacity, pvc.Status.Capacity) ||
		storageChanged(old.Status.AllocatedResources, pvc.Status.AllocatedResources) ||
		old.Status.AllocatedResourceStatuses[v1.ResourceStorage] != pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage] {
		return true
	}
	for _, t := range resizeConditions {
		a, b := findCondition(old.Status.Conditions, t), findCondition(pvc.Status.Conditions, t)
		if (a == nil) != (b == nil) || (a != nil && (a.Status != b.Status || a.Reason != b.Reason || a.Message != b.Message)) {
			return true
		}
	}
	return false
}

func storageChanged(a, b v1.ResourceList) bool {
	qa, oka := a[v1.ResourceStorage]
	qb, okb := b[v1.ResourceStorage]
	return oka != okb || qa.Cmp(qb) != 0
}

func findCondition(conds []v1.PersistentVolumeClaimCondition, t v1.PersistentVolumeClaimConditionType) *v1.PersistentVolumeClaimCondition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

func (c *Controller) claimDeleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	defer c.handled(obj)
	pvc, ok := obj.(*v1.PersistentVolumeClaim)
	if !ok {
		return
	}
	key, _ := cache.MetaNamespaceKeyFunc(pvc)
	c.forget(key)
}

// volumeAdded catches PVCs that were seen before their PV reached the cache.
func (c *Controller) volumeAdded(obj any) {
	defer c.handled(obj)
	if pv, ok := obj.(*v1.PersistentVolume); ok {
		c.enqueueClaimOf(pv)
	}
}

// volumeUpdated reacts to binding only: capacity changes on the PV are the controller's own.
func (c *Controller) volumeUpdated(oldObj, newObj any) {
	defer c.handled(newObj)
	oldPV, ok1 := oldObj.(*v1.PersistentVolume)
	pv, ok2 := newObj.(*v1.PersistentVolume)
	if !ok1 || !ok2 || oldPV.Spec.ClaimRef != nil || pv.Spec.ClaimRef == nil {
		return
	}
	c.enqueueClaimOf(pv)
}

// handled tells the test hook, if any, that the handler of an event for obj has run.
func (c *Controller) handled(obj any) {
	if c.eventHandled != nil {
		c.eventHandled(obj)
	}
}

func (c *Controller) enqueueClaimOf(pv *v1.PersistentVolume) {
	if pv.Spec.ClaimRef == nil || (pv.Spec.CSI != nil && pv.Spec.CSI.Driver != c.cfg.Driver.Name) ||
		(pv.Spec.CSI == nil && !migration.IsMigratedDriver(c.cfg.Driver.Name)) {
		return
	}
	ref := pv.Spec.ClaimRef
	pvc, err := c.pvcLister.PersistentVolumeClaims(ref.Namespace).Get(ref.Name)
	if err != nil || !migration.Owns(c.cfg.Driver.Name, pvc, pv) || (!needsWork(pvc) && !c.preResizeCapacityToRemove(pvc)) {
		return
	}
	c.enqueue(pvc)
}

func (c *Controller) enqueue(pvc *v1.PersistentVolumeClaim) {
	if key, err := cache.MetaNamespaceKeyFunc(pvc); err == nil {
		c.queue.Add(key)
	}
}

// isOwnWriteOrHeld reports whether an update is the echo of the controller's own write, or
// cannot be told apart from one yet because a write is under way; such an update is held
// and queued by writeStatus when it turns out to be someone else's.
func (c *Controller) isOwnWriteOrHeld(key, resourceVersion string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.claims[key]
	if !ok {
		return false
	}
	if slices.Contains(m.ownVersions, resourceVersion) {
		return true
	}
	if m.writing {
		m.held = append(m.held, resourceVersion)
		return true
	}
	return false
}

// isStale reports whether the informer cache has not caught up with the controller's own
// writes yet: resourceVersion is an older write of this controller than its latest one, or a
// version one of its writes replaced. (resourceVersions are opaque, so "older" is known only
// for versions the controller saw itself.)
func (c *Controller) isStale(key, resourceVersion string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.claims[key]
	if !ok || len(m.ownVersions) == 0 {
		return false
	}
	if slices.Contains(m.superseded, resourceVersion) {
		return true
	}
	i := slices.Index(m.ownVersions, resourceVersion)
	return i >= 0 && i < len(m.ownVersions)-1
}

// appendBounded appends v, keeping the last maxOwnVersions entries.
func appendBounded(versions []string, v string) []string {
	versions = append(versions, v)
	if len(versions) > maxOwnVersions {
		versions = versions[len(versions)-maxOwnVersions:]
	}
	return versions
}

// memory returns a copy of what is remembered about a PVC.
func (c *Controller) memory(key string) claimMemory {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m, ok := c.claims[key]; ok {
		return *m
	}
	return claimMemory{}
}

// remember updates what is remembered about a PVC.
func (c *Controller) remember(key string, update func(*claimMemory)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.claims[key]
	if !ok {
		m = &claimMemory{}
		c.claims[key] = m
	}
	update(m)
}

// forget drops everything remembered about a deleted PVC (rule 10). An expansion under way is
// dropped without an outcome: no duration is observed and a recovery in flight counts as
// neither success nor failure. Deleting the claim is the user's decision, not a result of the
// expansion, and counting it as a failed recovery would fire CSIResizerRecoveryFailing for it.
func (c *Controller) forget(key string) {
	c.mu.Lock()
	delete(c.claims, key)
	c.mu.Unlock()
	c.slow.Remove(key)
}

// Remembered reports whether the controller holds per-PVC memory for key (tests use it to
// check rule 10).
func (c *Controller) Remembered(key string) bool {
	c.mu.Lock()
	_, ok := c.claims[key]
	c.mu.Unlock()
	return ok || c.slow.Contains(key)
}
