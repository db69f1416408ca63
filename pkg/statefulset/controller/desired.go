package controller

import (
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/desired"
)

// EventInvalidDesiredTemplates: the desired-templates annotation cannot be
// used; the live templates are reconciled instead.
const EventInvalidDesiredTemplates = "InvalidDesiredVolumeClaimTemplates"

// desiredTemplates returns the templates the PVCs are reconciled with: the
// StatefulSet's own with the sizes of its desired-templates annotation, and
// the annotation's value; nil and "" when it has none. An annotation that
// cannot be used (unparsable, naming a template the StatefulSet does not
// have) is told once per value in a Warning event naming the annotation and
// the fix, and the live templates are used.
func (c *Controller) desiredTemplates(sts *appsv1.StatefulSet, key string) ([]corev1.PersistentVolumeClaim, string) {
	ds, ok, err := desired.FromStatefulSet(sts)
	if !ok {
		c.invalidDesire.forget(key)
		return nil, ""
	}
	value := sts.Annotations[desired.Annotation]
	var templates []corev1.PersistentVolumeClaim
	if err == nil {
		templates, err = desired.Apply(sts.Spec.VolumeClaimTemplates, ds)
	}
	if err != nil {
		if c.invalidDesire.first(key, value) {
			c.recorder.Eventf(sts, corev1.EventTypeWarning, EventInvalidDesiredTemplates,
				"Ignoring annotation %s, reconciling the volume claim templates as they are: %v (remove the annotation, or re-apply the manifest with the sizes you want through the admission webhook)",
				desired.Annotation, err)
		}
		return nil, value
	}
	c.invalidDesire.forget(key)
	return templates, value
}

// onceCache remembers, per StatefulSet key, the last value something was told
// for, so that an unchanged problem is told once, not on every sync. Losing it
// (restart) only means the event is recorded once more.
type onceCache struct {
	mu   sync.Mutex
	seen map[string]string
}

// first reports whether value is new for key, and remembers it.
func (o *onceCache) first(key, value string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.seen == nil {
		o.seen = map[string]string{}
	}
	if v, ok := o.seen[key]; ok && v == value {
		return false
	}
	o.seen[key] = value
	return true
}

func (o *onceCache) forget(key string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.seen, key)
}
