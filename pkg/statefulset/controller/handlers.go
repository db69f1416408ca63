package controller

import (
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/desired"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/plan"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/recreate"
)

// lastAppliedAnnotation is kubectl's copy of the applied manifest; on
// StatefulSets it is often the largest part of the object and nothing here
// reads it.
const lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

func (c *Controller) enqueueStatefulSet(obj any) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		c.queue.Add(key)
	}
}

// updateStatefulSet enqueues every update, the echo of the controller's own
// status write included: writeStatus skips a write while the cache is behind
// that write and relies on the echo to compare again. A sync of an unchanged
// StatefulSet reads caches only and writes nothing. Resyncs (same
// resourceVersion) go through too: they are the periodic safety net.
func (c *Controller) updateStatefulSet(_, newObj any) {
	c.enqueueStatefulSet(newObj)
}

// fromEvent returns the object of an informer event, unwrapping the
// tombstone of a delete the informer missed.
func fromEvent[T any](obj any) (T, bool) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	typed, ok := obj.(T)
	return typed, ok
}

// enqueueFor enqueues the StatefulSets that owners maps an event's object to.
func enqueueFor[T any](queue workqueue.TypedInterface[string], obj any, owners func(T) []string) {
	if typed, ok := fromEvent[T](obj); ok {
		for _, key := range owners(typed) {
			queue.Add(key)
		}
	}
}

func (c *Controller) podChanged(obj any) { enqueueFor(c.queue, obj, c.statefulSetsForPod) }

// updatePod reacts to what eligibility depends on: phase, revision label,
// deletion, ownership. Pod status churn (conditions, container states) is
// dropped by the transform and never reaches here as a change.
func (c *Controller) updatePod(oldObj, newObj any) {
	oldPod, ok1 := oldObj.(*corev1.Pod)
	newPod, ok2 := newObj.(*corev1.Pod)
	if ok1 && ok2 && (oldPod.ResourceVersion == newPod.ResourceVersion ||
		(oldPod.Status.Phase == newPod.Status.Phase && oldPod.DeletionTimestamp.Equal(newPod.DeletionTimestamp) &&
			equality.Semantic.DeepEqual(oldPod.Labels, newPod.Labels) &&
			equality.Semantic.DeepEqual(oldPod.OwnerReferences, newPod.OwnerReferences))) {
		return
	}
	c.podChanged(newObj)
}

// statefulSetsForPod maps a pod to its StatefulSet: by controller reference,
// or, for a pod orphaned by delete --cascade=orphan, by the <sts>-<ordinal>
// name pattern (the re-created StatefulSet adopts it by the same rule).
func (c *Controller) statefulSetsForPod(pod *corev1.Pod) []string {
	if ref := metav1.GetControllerOfNoCopy(pod); ref != nil {
		if ref.Kind != "StatefulSet" {
			return nil
		}
		return []string{pod.Namespace + "/" + ref.Name}
	}
	sets, err := c.stsLister.StatefulSets(pod.Namespace).List(labels.Everything())
	if err != nil {
		return nil
	}
	var keys []string
	for _, sts := range sets {
		if isOrdinalName(pod.Name, sts.Name+"-") {
			keys = append(keys, sts.Namespace+"/"+sts.Name)
		}
	}
	return keys
}

func (c *Controller) pvcChanged(obj any) { enqueueFor(c.queue, obj, c.statefulSetsForPVC) }

func (c *Controller) pvcDeleted(obj any) {
	if pvc, ok := fromEvent[*corev1.PersistentVolumeClaim](obj); ok {
		c.fresh.Forget(writeKey("pvc", pvc.Namespace, pvc.Name))
	}
	c.pvcChanged(obj)
}

func (c *Controller) updatePVC(oldObj, newObj any) {
	oldPVC, ok1 := oldObj.(*corev1.PersistentVolumeClaim)
	newPVC, ok2 := newObj.(*corev1.PersistentVolumeClaim)
	if ok1 && ok2 && oldPVC.ResourceVersion == newPVC.ResourceVersion {
		return // resync: the StatefulSet resync covers it
	}
	c.pvcChanged(newObj)
}

// statefulSetsForPVC maps a PVC to its StatefulSet by our annotation (set on
// the first patch), else by the <template>-<sts>-<ordinal> name pattern
// matched against the templates of the namespace's StatefulSets.
func (c *Controller) statefulSetsForPVC(pvc *corev1.PersistentVolumeClaim) []string {
	if name := pvc.Annotations[plan.AnnotationStatefulSet]; name != "" {
		return []string{pvc.Namespace + "/" + name}
	}
	sets, err := c.stsLister.StatefulSets(pvc.Namespace).List(labels.Everything())
	if err != nil {
		return nil
	}
	var keys []string
	for _, sts := range sets {
		for i := range sts.Spec.VolumeClaimTemplates {
			if isOrdinalName(pvc.Name, sts.Spec.VolumeClaimTemplates[i].Name+"-"+sts.Name+"-") {
				keys = append(keys, sts.Namespace+"/"+sts.Name)
				break
			}
		}
	}
	return keys
}

// isOrdinalName reports whether name is prefix followed by a decimal ordinal.
func isOrdinalName(name, prefix string) bool {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok || rest == "" || (len(rest) > 1 && rest[0] == '0') {
		return false
	}
	_, err := strconv.ParseUint(rest, 10, 31)
	return err == nil
}

// recordChanged enqueues the StatefulSet of a re-create record.
func (c *Controller) recordChanged(obj any) {
	enqueueFor(c.queue, obj, func(cm *corev1.ConfigMap) []string {
		if namespace, name, ok := recreate.StatefulSetOf(cm); ok {
			return []string{namespace + "/" + name}
		}
		return nil
	})
}

// updateNamespace enqueues the namespace's StatefulSets when its opt-in label
// changed: a desire recorded for them may now be acted on, or no longer.
func (c *Controller) updateNamespace(oldObj, newObj any) {
	oldNS, ok1 := oldObj.(*corev1.Namespace)
	newNS, ok2 := newObj.(*corev1.Namespace)
	if !ok1 || !ok2 || oldNS.Labels[desired.OptInLabel] == newNS.Labels[desired.OptInLabel] {
		return
	}
	sets, err := c.stsLister.StatefulSets(newNS.Name).List(labels.Everything())
	if err != nil {
		return
	}
	for _, sts := range sets {
		c.queue.Add(sts.Namespace + "/" + sts.Name)
	}
}

func (c *Controller) storageClassChanged(any) {
	// StorageClasses change rarely; re-evaluating every StatefulSet is the
	// simple way to pick up an allowVolumeExpansion change.
	sets, err := c.stsLister.List(labels.Everything())
	if err != nil {
		return
	}
	for _, sts := range sets {
		c.queue.Add(sts.Namespace + "/" + sts.Name)
	}
}

func (c *Controller) updateStorageClass(oldObj, newObj any) {
	oldSC, ok1 := oldObj.(*storagev1.StorageClass)
	newSC, ok2 := newObj.(*storagev1.StorageClass)
	if ok1 && ok2 && equality.Semantic.DeepEqual(oldSC.AllowVolumeExpansion, newSC.AllowVolumeExpansion) {
		return
	}
	c.storageClassChanged(newObj)
}

// Informer transforms: keep in the caches only what the controller reads.
// A cluster-wide Pod informer is the largest cache by far, so pods are
// reduced to identity, labels, owners, deletion and phase.

// stripManagedFields drops what nothing here reads from any object:
// managedFields and kubectl's copy of the applied manifest. It is the whole
// transform of PVCs and StorageClasses.
func stripManagedFields(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
		if annotations := m.GetAnnotations(); annotations != nil {
			delete(annotations, lastAppliedAnnotation)
		}
	}
	return obj, nil
}

func transformStatefulSet(obj any) (any, error) {
	if sts, ok := obj.(*appsv1.StatefulSet); ok {
		// The pod template is not read (the revision label on pods says
		// whether a pod is current); its spec is the bulk of a StatefulSet.
		sts.Spec.Template.Spec = corev1.PodSpec{}
	}
	return stripManagedFields(obj)
}

// transformNamespace keeps a namespace's name and labels: the opt-in is all
// that is read of it.
func transformNamespace(obj any) (any, error) {
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return obj, nil
	}
	return &corev1.Namespace{TypeMeta: ns.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Name: ns.Name, UID: ns.UID, ResourceVersion: ns.ResourceVersion, Labels: ns.Labels}}, nil
}

func transformPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	return &corev1.Pod{
		TypeMeta: pod.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Namespace:         pod.Namespace,
			Name:              pod.Name,
			UID:               pod.UID,
			ResourceVersion:   pod.ResourceVersion,
			Generation:        pod.Generation,
			Labels:            pod.Labels,
			OwnerReferences:   pod.OwnerReferences,
			DeletionTimestamp: pod.DeletionTimestamp,
		},
		Status: corev1.PodStatus{Phase: pod.Status.Phase},
	}, nil
}
