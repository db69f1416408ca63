package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/csi-resizer/csi-resizer/pkg/autoscale/kubeletstats"
	"github.com/csi-resizer/csi-resizer/pkg/autoscale/policy"
)

// syncKey is sync in the shared worker loop's terms: a transient error retries the key with
// backoff; everything else waits for the next event or poll round (no timer of its own: the
// poll queues every polled PVC each round).
func (c *Controller) syncKey(ctx context.Context, key string) (time.Duration, error) {
	return 0, c.sync(ctx, key)
}

// sync decides on one PVC ("namespace/name") and carries the decision out. It returns only
// transient errors.
func (c *Controller) sync(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Invalid work queue key", "key", key)
		return nil
	}
	pvc, err := c.pvcLister.PersistentVolumeClaims(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		c.forget(key, namespace, name)
		return nil
	}
	if err != nil {
		return fmt.Errorf("get PVC %s from cache: %w", key, err)
	}
	if c.fresh.Behind(key, pvc.ResourceVersion) {
		return nil // the echo of this process's own patch is on its way and queues the PVC again
	}
	ctx = klog.NewContext(ctx, klog.LoggerWithValues(klog.FromContext(ctx), "pvc", klog.KObj(pvc)))
	settings, _ := policy.Parse(c.class(pvc), pvc, c.opts.Defaults)
	state, _ := c.stats.get(key)
	in := policy.Input{PVC: pvc, Settings: settings, Stats: state.stats, Now: c.clock.Now()}
	if settings.Enabled && settings.Siblings {
		in.SiblingSize = c.siblingSize(pvc, settings)
	}
	d := policy.Decide(in)
	if d.Reason == policy.SkipNotEnabled {
		// Not autoscaled (most PVCs of a cluster): no event, no series.
		klog.FromContext(ctx).V(5).Info("Not autoscaled", "why", d.Message)
		c.forget(key, namespace, name)
		return nil
	}
	c.observe(pvc, key, settings, state, d)
	if d.Action == policy.Skip {
		c.skipped(ctx, pvc, key, d)
		return nil
	}
	return c.resize(ctx, pvc, key, d, state.stats)
}

// forget drops what is kept of a PVC that is gone or not autoscaled.
func (c *Controller) forget(key, namespace, name string) {
	c.metrics.ForgetPVC(namespace, name)
	c.told.Forget(key)
	c.told.Forget(key + statsSuffix)
	c.fresh.Forget(key)
}

// statsSuffix keys the stats-unavailable event in told, apart from the decision's events.
const statsSuffix = "\x00stats"

// observe sets the PVC's gauges and tells, once per error reason, that its kubelet could not
// be read. Without stats this round the gauges keep their last value (unknown is not "no").
func (c *Controller) observe(pvc *corev1.PersistentVolumeClaim, key string, s policy.Settings, st volumeState, d policy.Decision) {
	if d.Reason == policy.SkipAtLimit || st.stats != nil {
		c.metrics.SetAtLimit(pvc.Namespace, pvc.Name, d.Reason == policy.SkipAtLimit)
	}
	if st.stats != nil {
		c.metrics.SetAboveThreshold(pvc.Namespace, pvc.Name, policy.ThresholdCrossed(s, st.stats))
	}
	if st.err == nil {
		c.told.Forget(key + statsSuffix)
		return
	}
	if c.told.First(key+statsSuffix, string(kubeletstats.ReasonOf(st.err))) {
		c.recorder.Eventf(pvc, corev1.EventTypeWarning, EventStatsUnavailable,
			"The volume's usage is unknown, so it is not autoscaled until its kubelet can be read: %v", st.err)
	}
}

// skipEvents are the skips that are told, and how; the others (below-threshold, not-bound,
// stats-missing) are the steady states of a volume and only counted.
var skipEvents = map[policy.Reason]string{
	policy.SkipCooldown:          corev1.EventTypeNormal,
	policy.SkipResizing:          corev1.EventTypeNormal,
	policy.SkipAtLimit:           corev1.EventTypeWarning,
	policy.SkipResizeWaitExpired: corev1.EventTypeWarning,
	policy.SkipInfeasible:        corev1.EventTypeWarning,
	policy.SkipBadSettings:       corev1.EventTypeWarning,
}

// skipped counts a skip and tells it when its reason differs from the last one told (no event
// per round), every bad annotation as an event of its own.
func (c *Controller) skipped(ctx context.Context, pvc *corev1.PersistentVolumeClaim, key string, d policy.Decision) {
	c.metrics.Skipped(string(d.Reason))
	identity := string(d.Reason)
	for _, p := range d.Problems {
		identity += "\x00" + p.Error()
	}
	kind, tell := skipEvents[d.Reason]
	if !c.told.First(key, identity) || !tell {
		klog.FromContext(ctx).V(4).Info("Not resizing", "reason", d.Reason, "message", d.Message)
		return
	}
	klog.FromContext(ctx).Info("Not resizing", "reason", d.Reason, "message", d.Message)
	switch {
	case len(d.Problems) > 0:
		for _, p := range d.Problems {
			c.recorder.Event(pvc, corev1.EventTypeWarning, EventBadAnnotation, p.Error()+"; the PVC is left alone until it is fixed")
		}
	case kind == corev1.EventTypeWarning:
		c.recorder.Eventf(pvc, kind, EventProblem, "%s: %s", d.Reason, d.Message)
	default:
		c.recorder.Eventf(pvc, kind, EventSkipped, "%s: %s", d.Reason, d.Message)
	}
}

// siblingSize is policy.SiblingSize of the PVC's siblings: the PVCs of its pvc-autoresizer
// group (GroupBy), or else the grown PVCs of the same StatefulSet volume claim template. Nil
// when it has none, when its StatefulSet is unknown (no pod mounts it yet: the pod's add event
// queues it again), or when the autoscaler resized the PVC before (it is not a new replica:
// no lookup, so a replica of a large StatefulSet costs a group walk only until it first grows).
func (c *Controller) siblingSize(pvc *corev1.PersistentVolumeClaim, s policy.Settings) *resource.Quantity {
	if _, resized := pvc.Annotations[policy.AnnLastResize]; resized {
		return nil
	}
	var siblings []*corev1.PersistentVolumeClaim
	if s.GroupBy != "" {
		value, ok := pvc.Labels[s.GroupBy]
		if !ok {
			return nil
		}
		siblings, _ = c.pvcLister.PersistentVolumeClaims(pvc.Namespace).List(labels.SelectorFromSet(labels.Set{s.GroupBy: value}))
	} else {
		prefix := c.templatePrefix(pvc)
		if prefix == "" {
			return nil
		}
		group, _ := c.pvcIndex.ByIndex(claimPrefixIndex, pvc.Namespace+"/"+prefix)
		for _, obj := range group {
			if p, ok := obj.(*corev1.PersistentVolumeClaim); ok {
				siblings = append(siblings, p)
			}
		}
	}
	return policy.SiblingSize(pvc, siblings)
}

// templatePrefix returns "<template>-<statefulset>-" when a pod of a StatefulSet mounts the
// PVC as its volume claim template's: the StatefulSet controller names the PVC of replica N
// <template>-<statefulset>-N, its pod <statefulset>-N, and sets itself as the pod's controller.
// PVCs carry no label naming their StatefulSet, so the pod is how it is found.
func (c *Controller) templatePrefix(pvc *corev1.PersistentVolumeClaim) string {
	pods, _ := c.podIndex.ByIndex(podClaimIndex, pvc.Namespace+"/"+pvc.Name)
	for _, obj := range pods {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			continue
		}
		for _, ref := range pod.OwnerReferences {
			if ref.Controller == nil || !*ref.Controller || ref.Kind != "StatefulSet" || !strings.HasPrefix(ref.APIVersion, "apps/") {
				continue
			}
			ordinal, ok := strings.CutPrefix(pod.Name, ref.Name+"-")
			template, found := strings.CutSuffix(pvc.Name, "-"+pod.Name)
			if ok && isOrdinal(ordinal) && found && template != "" {
				return template + "-" + ref.Name + "-"
			}
		}
	}
	return ""
}

func isOrdinal(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}
