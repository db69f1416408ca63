package controller

import (
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/desired"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/recreate"
)

// optInHint says how a StatefulSet opts in to template changes, for messages.
const optInHint = desired.OptInLabel + "=" + desired.OptInValue + " on the StatefulSet or its namespace"

// EventInvalidDesiredTemplates: the desired-templates annotation cannot be
// used; the live templates are reconciled instead.
const EventInvalidDesiredTemplates = "InvalidDesiredVolumeClaimTemplates"

// desiredTemplates returns the templates the PVCs are reconciled with: the
// StatefulSet's own with the changes of its desired-templates annotation, and
// the annotation's value; nil and "" when it has none. An annotation that
// cannot be used (unparsable, naming a template the StatefulSet does not
// have, on a StatefulSet not opted in) is told once per value in a Warning
// event naming the annotation and the fix, and the live templates are used.
func (c *Controller) desiredTemplates(sts *appsv1.StatefulSet, key string) ([]corev1.PersistentVolumeClaim, string) {
	ds, ok, err := desired.FromStatefulSet(sts)
	if !ok {
		c.invalidDesire.Forget(key)
		return nil, ""
	}
	value := sts.Annotations[desired.Annotation]
	var templates []corev1.PersistentVolumeClaim
	if err == nil && !c.optedIn(sts) {
		err = fmt.Errorf("StatefulSet %s/%s is not opted in to volume claim template changes (%s)", sts.Namespace, sts.Name, optInHint)
	}
	if err == nil {
		err = desired.Validate(ds)
	}
	if err == nil {
		templates, err = desired.Apply(sts.Spec.VolumeClaimTemplates, ds)
	}
	if err != nil {
		if c.invalidDesire.First(key, value) {
			c.recorder.Eventf(sts, corev1.EventTypeWarning, EventInvalidDesiredTemplates,
				"Ignoring annotation %s, reconciling the volume claim templates as they are: %v (remove the annotation, or re-apply the manifest with the sizes you want through the admission webhook)",
				desired.Annotation, err)
		}
		return nil, value
	}
	c.invalidDesire.Forget(key)
	return templates, value
}

// recreateTemplates returns the templates a re-create of sts would create it
// with (its own with the desired changes; nil when it has no usable desire)
// and whether a re-create can go on now: opted in, templates that differ,
// nothing holding it back (recreate.Blocked), not being deleted. Whether a new
// one may start (Options.Recreate) is the caller's: one under way is finished
// either way.
func (c *Controller) recreateTemplates(sts *appsv1.StatefulSet) ([]corev1.PersistentVolumeClaim, bool) {
	ds, ok, err := desired.FromStatefulSet(sts)
	if !ok || err != nil || desired.Validate(ds) != nil {
		return nil, false
	}
	templates, err := desired.Apply(sts.Spec.VolumeClaimTemplates, ds)
	if err != nil {
		return nil, false
	}
	wanted := recreate.Pending(true, sts, templates) && c.optedIn(sts) &&
		recreate.Blocked(sts) == "" && sts.DeletionTimestamp == nil
	return templates, wanted
}

// optedIn reports whether sts is opted in to volume claim template changes,
// by its own label or its namespace's (desired.OptedIn).
func (c *Controller) optedIn(sts *appsv1.StatefulSet) bool {
	var nsLabels map[string]string
	if ns, err := c.nsLister.Get(sts.Namespace); err == nil {
		nsLabels = ns.Labels
	}
	return desired.OptedIn(sts.Labels, nsLabels)
}

// describeTemplates says what templates ask for, for events: "data=2Gi,
// logs=1Gi (class gold)".
func describeTemplates(templates []corev1.PersistentVolumeClaim) string {
	parts := make([]string, 0, len(templates))
	for i := range templates {
		part := templates[i].Name + "=" + templates[i].Spec.Resources.Requests.Storage().String()
		if class := templates[i].Spec.VolumeAttributesClassName; class != nil {
			part += fmt.Sprintf(" (class %s)", *class)
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, ", ")
}

// sameTemplates compares two template lists as the apiserver stores them.
func sameTemplates(a, b []corev1.PersistentVolumeClaim) bool {
	return apiequality.Semantic.DeepEqual(a, b)
}
