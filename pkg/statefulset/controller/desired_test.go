package controller

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/desired"
)

// withDesire gives the StatefulSet of objects the desire value, and opts it
// in to template changes (only then is a desire acted on).
func withDesire(objects []runtime.Object, value string) []runtime.Object {
	sts := objects[0].(*appsv1.StatefulSet)
	sts.Annotations = map[string]string{desired.Annotation: value}
	sts.Labels = map[string]string{desired.OptInLabel: desired.OptInValue}
	return objects
}

// The desired-templates annotation (written by the webhook) gives the sizes:
// the PVCs are patched to it though the StatefulSet's template is unchanged,
// and the status records the desire.
func TestDesiredAnnotationIsTheSize(t *testing.T) {
	const value = `[{"name":"data","storage":"2Gi"}]`
	h := newHarness(t, withDesire(cluster(2, appsv1.ParallelPodManagement, "1Gi", "1Gi"), value)...)
	if err := h.sync(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"data-web-0", "data-web-1"} {
		if got := storageOf(h.pvc(name)); got != "2Gi" {
			t.Errorf("%s: request %s, want the desired 2Gi", name, got)
		}
	}
	if st := h.status(); st == nil || st.Desired != value || st.Recreate {
		t.Errorf("status %+v, want one for the desire, without a re-create (Options.Recreate is off)", st)
	}
	if ev := h.events(); len(ev) != 0 {
		t.Errorf("events %q", ev)
	}
}

// An annotation the controller cannot use is told once, in a Warning event
// naming the annotation and the fix, and the live templates are reconciled.
func TestInvalidDesiredAnnotation(t *testing.T) {
	for name, c := range map[string]struct {
		value, fix string
		optOut     bool
	}{
		"not JSON":         {value: `{`, fix: "remove the annotation"},
		"unknown template": {value: `[{"name":"logs","storage":"2Gi"}]`, fix: "remove the annotation"},
		"not opted in":     {value: `[{"name":"data","storage":"2Gi"}]`, fix: desired.OptInLabel, optOut: true},
	} {
		t.Run(name, func(t *testing.T) {
			objects := withDesire(cluster(1, appsv1.ParallelPodManagement, "1Gi", "1Gi"), c.value)
			if c.optOut {
				objects[0].(*appsv1.StatefulSet).Labels = nil
			}
			h := newHarness(t, objects...)
			if err := h.sync(); err != nil {
				t.Fatal(err)
			}
			if got := storageOf(h.pvc("data-web-0")); got != "1Gi" {
				t.Errorf("request %s, want the live template's 1Gi", got)
			}
			ev := h.events()
			if len(ev) != 1 || !hasEvent(ev, "Warning", EventInvalidDesiredTemplates, desired.Annotation, c.fix) {
				t.Fatalf("events %q, want one %s naming the annotation and the fix", ev, EventInvalidDesiredTemplates)
			}
			if st := h.status(); st == nil || st.Templates[0].FinishedReconciliationGeneration != 1 {
				t.Errorf("status %+v, want the live templates finished", st)
			}
			h.resyncChangesNothing()
		})
	}
}

// The opt-in read from the namespace: template labels reach the PVCs of a StatefulSet whose
// namespace carries the opt-in label, and not those of one whose namespace does not.
func TestTemplateMetadataFollowsTheNamespaceOptIn(t *testing.T) {
	for _, optedIn := range []bool{true, false} {
		objects := cluster(1, appsv1.ParallelPodManagement, "1Gi", "1Gi")
		objects[0].(*appsv1.StatefulSet).Spec.VolumeClaimTemplates[0].Labels = map[string]string{"tier": "gold"}
		namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
		if optedIn {
			namespace.Labels = map[string]string{desired.OptInLabel: desired.OptInValue}
		}
		h := newHarness(t, append(objects, namespace)...)
		if err := h.sync(); err != nil {
			t.Fatal(err)
		}
		if got := h.pvc("data-web-0").Labels["tier"]; (got == "gold") != optedIn {
			t.Errorf("namespace opted in %v: PVC label tier=%q", optedIn, got)
		}
	}
}
