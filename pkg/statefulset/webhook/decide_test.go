package webhook

import (
	"encoding/json"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/desired"
)

func ptr(s string) *string { return &s }

func claim(name, size string) corev1.PersistentVolumeClaim {
	return corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
		},
	}
}

// classed is claim with the VolumeAttributesClass class (nil when class is nil).
func classed(name, size string, class *string) corev1.PersistentVolumeClaim {
	c := claim(name, size)
	c.Spec.VolumeAttributesClassName = class
	return c
}

func sts(templates ...corev1.PersistentVolumeClaim) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", Labels: map[string]string{desired.OptInLabel: desired.OptInValue}},
		Spec:       appsv1.StatefulSetSpec{Replicas: new(int32), VolumeClaimTemplates: templates},
	}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func update(t testing.TB, old, req *appsv1.StatefulSet, manager string) Request {
	return Request{Operation: "UPDATE", Group: "apps", Version: "v1", Resource: "statefulsets",
		OldObject: mustJSON(t, old), Object: mustJSON(t, req), FieldManager: manager}
}

// patched applies d's patch to the request's object.
func patched(t testing.TB, r Request, d Decision) *appsv1.StatefulSet {
	t.Helper()
	doc := r.Object
	if d.Patch != nil {
		p, err := jsonpatch.DecodePatch(d.Patch)
		if err != nil {
			t.Fatalf("patch %s does not decode: %v", d.Patch, err)
		}
		if doc, err = p.Apply(r.Object); err != nil {
			t.Fatalf("patch %s does not apply: %v", d.Patch, err)
		}
	}
	var out appsv1.StatefulSet
	if err := json.Unmarshal(doc, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

func withAnnotations(s *appsv1.StatefulSet, kv ...string) *appsv1.StatefulSet {
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	for i := 0; i < len(kv); i += 2 {
		s.Annotations[kv[i]] = kv[i+1]
	}
	return s
}

func owning(manager string, s *appsv1.StatefulSet) *appsv1.StatefulSet {
	s.ManagedFields = append(s.ManagedFields, metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationApply,
		FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:replicas":{},"f:volumeClaimTemplates":{}}}`)}})
	return s
}

const (
	desire20       = `[{"name":"data","storage":"20Gi"}]`
	desireSilver   = `[{"name":"data","storage":"10Gi","volumeAttributesClassName":"silver"}]`
	desireSilver20 = `[{"name":"data","storage":"20Gi","volumeAttributesClassName":"silver"}]`
)

func TestDecide(t *testing.T) {
	gold, silver := classed("data", "10Gi", ptr("gold")), classed("data", "10Gi", ptr("silver"))
	otherMode := claim("data", "20Gi")
	otherMode.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
	noSize := claim("data", "1Gi")
	noSize.Spec.Resources.Requests = nil
	noSizeGold := *noSize.DeepCopy()
	noSizeGold.Spec.VolumeAttributesClassName = ptr("gold")
	optedOut := sts(claim("data", "20Gi"))
	optedOut.Labels[desired.OptInLabel] = "disabled"
	replicas := sts(claim("data", "20Gi"))
	replicas.Spec.Replicas = ptr32(3)
	lastApplied10 := string(mustJSON(t, sts(claim("data", "10Gi"))))
	lastApplied20 := string(mustJSON(t, sts(claim("data", "20Gi"))))
	lastAppliedGold := string(mustJSON(t, sts(gold)))
	lastAppliedSilver := string(mustJSON(t, sts(silver)))
	labelled := sts(silver)
	labelled.Labels["tier"] = "db"
	lastAppliedSilverLabelled := string(mustJSON(t, labelled))
	for _, tc := range []struct {
		name     string
		old, req *appsv1.StatefulSet
		manager  string
		mutate   func(*Request)
		// want is the object after the patch (nil: the request unchanged).
		want       *appsv1.StatefulSet
		wantReason string
	}{
		{name: "bigger size recorded, live templates kept",
			old: sts(claim("data", "10Gi")), req: sts(claim("data", "20Gi")),
			want: withAnnotations(sts(claim("data", "10Gi")), desired.Annotation, desire20), wantReason: "differ only in size"},
		{name: "other changes kept, annotations merged",
			old: sts(claim("data", "10Gi")), req: withAnnotations(replicas, "a", "b"),
			want: withAnnotations(func() *appsv1.StatefulSet { s := sts(claim("data", "10Gi")); s.Spec.Replicas = ptr32(3); return s }(), "a", "b", desired.Annotation, desire20)},
		{name: "smaller size recorded too",
			old: sts(claim("data", "10Gi")), req: sts(claim("data", "5Gi")),
			want: withAnnotations(sts(claim("data", "10Gi")), desired.Annotation, `[{"name":"data","storage":"5Gi"}]`)},
		{name: "an older desire replaced",
			old:  withAnnotations(sts(claim("data", "10Gi")), desired.Annotation, `[{"name":"data","storage":"99Gi"}]`),
			req:  withAnnotations(sts(claim("data", "20Gi")), desired.Annotation, `[{"name":"data","storage":"99Gi"}]`),
			want: withAnnotations(sts(claim("data", "10Gi")), desired.Annotation, desire20)},
		{name: "two templates, one bigger",
			old: sts(claim("data", "10Gi"), claim("logs", "1Gi")), req: sts(claim("data", "10Gi"), claim("logs", "2Gi")),
			want: withAnnotations(sts(claim("data", "10Gi"), claim("logs", "1Gi")), desired.Annotation, `[{"name":"data","storage":"10Gi"},{"name":"logs","storage":"2Gi"}]`)},
		{name: "same size in another spelling is no change",
			old: sts(claim("data", "1Gi")), req: sts(claim("data", "1024Mi")), wantReason: "no desire recorded"},
		{name: "access mode change left to the apiserver",
			old: sts(claim("data", "10Gi")), req: sts(otherMode), wantReason: "more than size"},
		{name: "template added", old: sts(claim("data", "10Gi")), req: sts(claim("data", "20Gi"), claim("logs", "1Gi")), wantReason: "1 templates live, 2 in the request"},
		{name: "class change taken, live class kept",
			old: sts(gold), req: sts(silver),
			want: withAnnotations(sts(gold), desired.Annotation, desireSilver), wantReason: "differ only in size and class"},
		{name: "class and size change taken together",
			old: sts(gold), req: sts(classed("data", "20Gi", ptr("silver"))),
			want: withAnnotations(sts(gold), desired.Annotation, desireSilver20)},
		{name: "class set where the live template has none taken",
			old: sts(claim("data", "10Gi")), req: sts(silver),
			want: withAnnotations(sts(claim("data", "10Gi")), desired.Annotation, desireSilver)},
		{name: "a class recorded for one of two templates",
			old: sts(claim("data", "10Gi"), claim("logs", "1Gi")), req: sts(claim("data", "10Gi"), classed("logs", "2Gi", ptr("gold"))),
			want: withAnnotations(sts(claim("data", "10Gi"), claim("logs", "1Gi")), desired.Annotation,
				`[{"name":"data","storage":"10Gi"},{"name":"logs","storage":"2Gi","volumeAttributesClassName":"gold"}]`)},
		{name: "an older class desire replaced by a size one, live class kept",
			old:  withAnnotations(sts(gold), desired.Annotation, desireSilver),
			req:  withAnnotations(sts(classed("data", "20Gi", ptr("gold"))), desired.Annotation, desireSilver),
			want: withAnnotations(sts(gold), desired.Annotation, `[{"name":"data","storage":"20Gi","volumeAttributesClassName":"gold"}]`)},
		{name: "class removed left to the apiserver", old: sts(gold), req: sts(claim("data", "10Gi")), wantReason: `volumeAttributesClassName "gold" -> unset`},
		{name: "class removed with a size change left to the apiserver", old: sts(gold), req: sts(claim("data", "20Gi")), wantReason: `"gold" -> unset`},
		{name: "class emptied left to the apiserver", old: sts(gold), req: sts(classed("data", "20Gi", ptr(""))), wantReason: `"gold" -> "": only a change to a named class`},
		{name: "empty class where the live template has none left to the apiserver", old: sts(claim("data", "10Gi")), req: sts(classed("data", "10Gi", ptr(""))), wantReason: `unset -> ""`},
		{name: "class change of a template without a storage request left to the apiserver",
			old: sts(noSize), req: sts(noSizeGold), wantReason: "no storage request"},
		{name: "access mode change with a class change left to the apiserver",
			old: sts(gold), req: sts(func() corev1.PersistentVolumeClaim {
				c := *silver.DeepCopy()
				c.Spec.AccessModes = otherMode.Spec.AccessModes
				return c
			}()),
			wantReason: "more than resources.requests.storage and volumeAttributesClassName"},
		{name: "template renamed", old: sts(claim("data", "10Gi")), req: sts(claim("db", "20Gi")), wantReason: "more than size"},
		{name: "templates reordered", old: sts(claim("a", "1Gi"), claim("b", "1Gi")), req: sts(claim("b", "1Gi"), claim("a", "2Gi")), wantReason: "more than size"},
		{name: "storage request removed", old: sts(claim("data", "10Gi")), req: sts(noSize), wantReason: "more than size"},
		{name: "opted out by the object's label", old: sts(claim("data", "10Gi")), req: optedOut, wantReason: "opted out"},
		{name: "create", old: sts(claim("data", "10Gi")), req: sts(claim("data", "20Gi")), mutate: func(r *Request) { r.Operation = "CREATE" }, wantReason: "not an update"},
		{name: "status subresource", old: sts(claim("data", "10Gi")), req: sts(claim("data", "20Gi")), mutate: func(r *Request) { r.SubResource = "status" }, wantReason: "not an update"},
		{name: "another resource", old: sts(claim("data", "10Gi")), req: sts(claim("data", "20Gi")), mutate: func(r *Request) { r.Resource = "deployments" }, wantReason: "not an update"},
		{name: "garbage object", old: sts(claim("data", "10Gi")), req: sts(claim("data", "20Gi")), mutate: func(r *Request) { r.Object = []byte("{") }, wantReason: "cannot decode"},
		{name: "no desire, nothing to clear", old: sts(claim("data", "10Gi")), req: replicasOnly(claim("data", "10Gi")), manager: "kubectl", wantReason: "no desire recorded"},
		{name: "desire cleared by the owner of the templates (server-side apply, Helm)",
			old:     owning("kubectl", withAnnotations(sts(claim("data", "10Gi")), desired.Annotation, desire20)),
			req:     owning("kubectl", withAnnotations(sts(claim("data", "10Gi")), desired.Annotation, desire20)),
			manager: "kubectl", want: owning("kubectl", sts(claim("data", "10Gi"))), wantReason: "field manager kubectl"},
		{name: "desire kept for a write by another manager (kubectl label, our status)",
			old:     owning("kubectl", withAnnotations(sts(claim("data", "10Gi")), desired.Annotation, desire20)),
			req:     owning("kubectl", withAnnotations(sts(claim("data", "10Gi")), desired.Annotation, desire20, "x", "y")),
			manager: "kubectl-annotate", wantReason: "desire kept"},
		{name: "desire kept when the request has no field manager",
			old:        owning("kubectl", withAnnotations(sts(claim("data", "10Gi")), desired.Annotation, desire20)),
			req:        owning("kubectl", withAnnotations(sts(claim("data", "10Gi")), desired.Annotation, desire20)),
			wantReason: "desire kept"},
		{name: "desire cleared by a client-side apply of the live templates",
			old:        withAnnotations(sts(claim("data", "10Gi")), desired.Annotation, desire20, lastApplied, lastApplied20),
			req:        withAnnotations(sts(claim("data", "10Gi")), desired.Annotation, desire20, lastApplied, lastApplied10),
			manager:    "kubectl-client-side-apply",
			want:       withAnnotations(sts(claim("data", "10Gi")), lastApplied, lastApplied10),
			wantReason: "client-side apply"},
		{name: "desire cleared by the owner of the templates re-stating the live class",
			old:     owning("helm", withAnnotations(sts(gold), desired.Annotation, desireSilver)),
			req:     owning("helm", withAnnotations(sts(gold), desired.Annotation, desireSilver)),
			manager: "helm", want: owning("helm", sts(gold)), wantReason: "field manager helm"},
		{name: "desire cleared by a client-side apply of the live class (Git reverted)",
			old:        withAnnotations(sts(gold), desired.Annotation, desireSilver, lastApplied, lastAppliedSilver),
			req:        withAnnotations(sts(gold), desired.Annotation, desireSilver, lastApplied, lastAppliedGold),
			manager:    "kubectl-client-side-apply",
			want:       withAnnotations(sts(gold), lastApplied, lastAppliedGold),
			wantReason: "client-side apply"},
		{name: "desire kept by a client-side apply whose manifest still names the new class",
			old:        withAnnotations(sts(gold), desired.Annotation, desireSilver, lastApplied, lastAppliedSilver),
			req:        withAnnotations(sts(gold), desired.Annotation, desireSilver, lastApplied, lastAppliedSilverLabelled),
			manager:    "kubectl-client-side-apply",
			wantReason: "desire kept"},
		{name: "desire kept when the last applied configuration is only carried along",
			old:        withAnnotations(sts(claim("data", "10Gi")), desired.Annotation, desire20, lastApplied, lastApplied10),
			req:        withAnnotations(sts(claim("data", "10Gi")), desired.Annotation, desire20, lastApplied, lastApplied10),
			manager:    "kubectl-label",
			wantReason: "desire kept"},
		{name: "desire kept when the request changes the annotation itself",
			old:     owning("kubectl", withAnnotations(sts(claim("data", "10Gi")), desired.Annotation, desire20)),
			req:     owning("kubectl", withAnnotations(sts(claim("data", "10Gi")), desired.Annotation, `[{"name":"data","storage":"30Gi"}]`)),
			manager: "kubectl", wantReason: "changes the desire annotation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := update(t, tc.old, tc.req, tc.manager)
			if tc.mutate != nil {
				tc.mutate(&r)
			}
			d := Decide(r)
			if !strings.Contains(d.Reason, tc.wantReason) {
				t.Errorf("reason %q, want it to contain %q", d.Reason, tc.wantReason)
			}
			if tc.want == nil {
				if d.Patch != nil {
					t.Fatalf("patch %s, want none", d.Patch)
				}
				return
			}
			if d.Patch == nil {
				t.Fatalf("no patch (%s), want one", d.Reason)
			}
			got := patched(t, r, d)
			if string(mustJSON(t, got)) != string(mustJSON(t, tc.want)) {
				t.Fatalf("patched object\n%s\nwant\n%s", mustJSON(t, got), mustJSON(t, tc.want))
			}
		})
	}
}

func ptr32(i int32) *int32 { return &i }

func replicasOnly(templates ...corev1.PersistentVolumeClaim) *appsv1.StatefulSet {
	s := sts(templates...)
	s.Spec.Replicas = ptr32(2)
	return s
}

// A template field this binary's API types do not know still counts as a
// difference, and the live templates go back byte for byte.
func TestDecideUnknownFields(t *testing.T) {
	old := `{"metadata":{"name":"web"},"spec":{"volumeClaimTemplates":[{"metadata":{"name":"data"},"spec":{"future":"a","resources":{"requests":{"storage":"1Gi"}}}}]}}`
	r := Request{Operation: "UPDATE", Group: "apps", Version: "v1", Resource: "statefulsets", OldObject: []byte(old)}
	r.Object = []byte(strings.Replace(strings.Replace(old, `"1Gi"`, `"2Gi"`, 1), `"future":"a"`, `"future":"b"`, 1))
	if d := Decide(r); d.Patch != nil {
		t.Fatalf("a difference in an unknown field was patched away: %s", d.Patch)
	}
	r.Object = []byte(strings.Replace(old, `"1Gi"`, `"2Gi"`, 1))
	d := Decide(r)
	if d.Patch == nil {
		t.Fatalf("no patch: %s", d.Reason)
	}
	p, _ := jsonpatch.DecodePatch(d.Patch)
	out, err := p.Apply(r.Object)
	if err != nil || !strings.Contains(string(out), `"future":"a"`) || !strings.Contains(string(out), `"storage":"1Gi"`) {
		t.Fatalf("patched object %s (%v): want the live template back, unknown field included", out, err)
	}
}
