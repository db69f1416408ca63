package webhook

import (
	"encoding/json"
	"errors"
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

// The beginnings of the warnings for ns/web: a desire recorded (rule 9), a desire kept (rule 10).
const (
	recorded = "statefulset-resizer: volume claim templates of ns/web change "
	kept     = "statefulset-resizer: this update keeps the pending volume claim template change of ns/web "
)

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
	runDecideCases(t, []decideCase{
		{name: "bigger size recorded, live templates kept",
			old: sts(claim("data", "10Gi")), req: sts(claim("data", "20Gi")),
			want: withAnnotations(sts(claim("data", "10Gi")), desired.Annotation, desire20), wantReason: "differ only in size", wantWarning: recorded + "(data: 10Gi -> 20Gi)"},
		{name: "other changes kept, annotations merged",
			old: sts(claim("data", "10Gi")), req: withAnnotations(replicas, "a", "b"),
			want: withAnnotations(func() *appsv1.StatefulSet { s := sts(claim("data", "10Gi")); s.Spec.Replicas = ptr32(3); return s }(), "a", "b", desired.Annotation, desire20), wantWarning: recorded},
		{name: "smaller size recorded too",
			old: sts(claim("data", "10Gi")), req: sts(claim("data", "5Gi")),
			want: withAnnotations(sts(claim("data", "10Gi")), desired.Annotation, `[{"name":"data","storage":"5Gi"}]`), wantWarning: recorded + "(data: 10Gi -> 5Gi)"},
		{name: "an older desire replaced",
			old:         withAnnotations(sts(claim("data", "10Gi")), desired.Annotation, `[{"name":"data","storage":"99Gi"}]`),
			req:         withAnnotations(sts(claim("data", "20Gi")), desired.Annotation, `[{"name":"data","storage":"99Gi"}]`),
			want:        withAnnotations(sts(claim("data", "10Gi")), desired.Annotation, desire20),
			wantWarning: recorded + "(data: 10Gi -> 20Gi), replacing the pending change (data: 10Gi -> 99Gi): "},
		{name: "two templates, one bigger",
			old: sts(claim("data", "10Gi"), claim("logs", "1Gi")), req: sts(claim("data", "10Gi"), claim("logs", "2Gi")),
			want: withAnnotations(sts(claim("data", "10Gi"), claim("logs", "1Gi")), desired.Annotation, `[{"name":"data","storage":"10Gi"},{"name":"logs","storage":"2Gi"}]`), wantWarning: recorded + "(logs: 1Gi -> 2Gi)"},
		{name: "same size in another spelling is no change",
			old: sts(claim("data", "1Gi")), req: sts(claim("data", "1024Mi")), wantReason: "no desire recorded"},
		{name: "access mode change left to the apiserver",
			old: sts(claim("data", "10Gi")), req: sts(otherMode), wantReason: "more than size"},
		{name: "template added", old: sts(claim("data", "10Gi")), req: sts(claim("data", "20Gi"), claim("logs", "1Gi")), wantReason: "1 templates live, 2 in the request"},
		{name: "class change taken, live class kept",
			old: sts(gold), req: sts(silver),
			want: withAnnotations(sts(gold), desired.Annotation, desireSilver), wantReason: "differ only in size, class, labels or annotations", wantWarning: recorded + `(data: class "gold" -> "silver")`},
		{name: "class and size change taken together",
			old: sts(gold), req: sts(classed("data", "20Gi", ptr("silver"))),
			want: withAnnotations(sts(gold), desired.Annotation, desireSilver20), wantWarning: recorded + `(data: 10Gi -> 20Gi, class "gold" -> "silver")`},
		{name: "class set where the live template has none taken",
			old: sts(claim("data", "10Gi")), req: sts(silver),
			want: withAnnotations(sts(claim("data", "10Gi")), desired.Annotation, desireSilver), wantWarning: recorded + `(data: class unset -> "silver")`},
		{name: "a class recorded for one of two templates",
			old: sts(claim("data", "10Gi"), claim("logs", "1Gi")), req: sts(claim("data", "10Gi"), classed("logs", "2Gi", ptr("gold"))),
			want: withAnnotations(sts(claim("data", "10Gi"), claim("logs", "1Gi")), desired.Annotation,
				`[{"name":"data","storage":"10Gi"},{"name":"logs","storage":"2Gi","volumeAttributesClassName":"gold"}]`), wantWarning: recorded + `(logs: 1Gi -> 2Gi, class unset -> "gold")`},
		{name: "an older class desire replaced by a size one, live class kept",
			old:         withAnnotations(sts(gold), desired.Annotation, desireSilver),
			req:         withAnnotations(sts(classed("data", "20Gi", ptr("gold"))), desired.Annotation, desireSilver),
			want:        withAnnotations(sts(gold), desired.Annotation, `[{"name":"data","storage":"20Gi","volumeAttributesClassName":"gold"}]`),
			wantWarning: recorded + `(data: 10Gi -> 20Gi), replacing the pending change (data: class "gold" -> "silver")`},
		{name: "class removed taken (a revert of a class)", old: sts(gold), req: sts(claim("data", "10Gi")),
			want: withAnnotations(sts(gold), desired.Annotation, `[{"name":"data","storage":"10Gi"}]`), wantWarning: recorded + `(data: class "gold" -> unset)`},
		{name: "class removed with a size change taken", old: sts(gold), req: sts(claim("data", "20Gi")),
			want: withAnnotations(sts(gold), desired.Annotation, `[{"name":"data","storage":"20Gi"}]`), wantWarning: recorded + `(data: 10Gi -> 20Gi, class "gold" -> unset)`},
		{name: "class emptied left to the apiserver", old: sts(gold), req: sts(classed("data", "20Gi", ptr(""))), wantReason: `"gold" -> "": an empty class name is not a class`},
		{name: "empty class where the live template has none left to the apiserver", old: sts(claim("data", "10Gi")), req: sts(classed("data", "10Gi", ptr(""))), wantReason: `unset -> ""`},
		{name: "class change of a template without a storage request left to the apiserver",
			old: sts(noSize), req: sts(noSizeGold), wantReason: "no storage request"},
		{name: "access mode change with a class change left to the apiserver",
			old: sts(gold), req: sts(func() corev1.PersistentVolumeClaim {
				c := *silver.DeepCopy()
				c.Spec.AccessModes = otherMode.Spec.AccessModes
				return c
			}()),
			wantReason: "more than resources.requests.storage, volumeAttributesClassName, labels and annotations"},
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
			manager: "kubectl", want: owning("kubectl", sts(claim("data", "10Gi"))), wantReason: "a server-side apply by kubectl"},
		{name: "desire kept for a write by another manager (kubectl label, our status)",
			old:     owning("kubectl", withAnnotations(sts(claim("data", "10Gi")), desired.Annotation, desire20)),
			req:     owning("kubectl", withAnnotations(sts(claim("data", "10Gi")), desired.Annotation, desire20, "x", "y")),
			manager: "kubectl-annotate", wantReason: "desire kept", wantWarning: kept + "(data: 10Gi -> 20Gi)"},
		{name: "desire kept when the request has no field manager",
			old:        owning("kubectl", withAnnotations(sts(claim("data", "10Gi")), desired.Annotation, desire20)),
			req:        owning("kubectl", withAnnotations(sts(claim("data", "10Gi")), desired.Annotation, desire20)),
			wantReason: "desire kept", wantWarning: kept},
		{name: "desire cleared by a client-side apply of the live templates",
			old:        withAnnotations(sts(claim("data", "10Gi")), desired.Annotation, desire20, lastApplied, lastApplied20),
			req:        withAnnotations(sts(claim("data", "10Gi")), desired.Annotation, desire20, lastApplied, lastApplied10),
			manager:    "kubectl-client-side-apply",
			want:       withAnnotations(sts(claim("data", "10Gi")), lastApplied, lastApplied10),
			wantReason: "client-side apply"},
		{name: "desire cleared by the owner of the templates re-stating the live class",
			old:     owning("helm", withAnnotations(sts(gold), desired.Annotation, desireSilver)),
			req:     owning("helm", withAnnotations(sts(gold), desired.Annotation, desireSilver)),
			manager: "helm", want: owning("helm", sts(gold)), wantReason: "a server-side apply by helm"},
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
			wantReason: "desire kept", wantWarning: kept + `(data: class "gold" -> "silver")`},
		{name: "desire kept when the last applied configuration is only carried along",
			old:        withAnnotations(sts(claim("data", "10Gi")), desired.Annotation, desire20, lastApplied, lastApplied10),
			req:        withAnnotations(sts(claim("data", "10Gi")), desired.Annotation, desire20, lastApplied, lastApplied10),
			manager:    "kubectl-label",
			wantReason: "desire kept", wantWarning: kept},
		{name: "desire kept when the request changes the annotation itself",
			old:     owning("kubectl", withAnnotations(sts(claim("data", "10Gi")), desired.Annotation, desire20)),
			req:     owning("kubectl", withAnnotations(sts(claim("data", "10Gi")), desired.Annotation, `[{"name":"data","storage":"30Gi"}]`)),
			manager: "kubectl", wantReason: "changes the desire annotation"},
	})
}

// decideCase is one request for Decide and what it must answer.
type decideCase struct {
	name     string
	old, req *appsv1.StatefulSet
	manager  string
	mutate   func(*Request)
	// want is the object after the patch (nil: the request unchanged).
	want       *appsv1.StatefulSet
	wantReason string
	// wantWarning is what the one warning must contain ("": no warning).
	wantWarning string
}

func runDecideCases(t *testing.T, cases []decideCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := update(t, tc.old, tc.req, tc.manager)
			if tc.mutate != nil {
				tc.mutate(&r)
			}
			d := Decide(r)
			if !strings.Contains(d.Reason, tc.wantReason) {
				t.Errorf("reason %q, want it to contain %q", d.Reason, tc.wantReason)
			}
			checkWarning(t, d.Warnings, tc.wantWarning)
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

func checkWarning(t *testing.T, got []string, want string) {
	t.Helper()
	switch {
	case want == "" && len(got) > 0:
		t.Errorf("warnings %q, want none", got)
	case want != "" && (len(got) != 1 || !strings.Contains(got[0], want)):
		t.Errorf("warnings %q, want one containing %q", got, want)
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

func labelled(c corev1.PersistentVolumeClaim, labels map[string]string) corev1.PersistentVolumeClaim {
	c = *c.DeepCopy()
	c.Labels = labels
	return c
}

func annotated(c corev1.PersistentVolumeClaim, annotations map[string]string) corev1.PersistentVolumeClaim {
	c = *c.DeepCopy()
	c.Annotations = annotations
	return c
}

// injectTemplateJSON replaces the first occurrence of old in the request's object by new: for
// JSON the API types would not write.
func injectTemplateJSON(old, new string) func(*Request) {
	return func(r *Request) { r.Object = []byte(strings.Replace(string(r.Object), old, new, 1)) }
}

// Rule 9 with template labels and annotations (issue 24 item 5): taken alone or with a size or
// class change; the desire entry has the request's complete labels and annotations only for a
// template whose labels or annotations change; anything a PVC could not have is left to the
// apiserver, with a warning that says why.
func TestDecideTemplateMetadata(t *testing.T) {
	chart1 := map[string]string{"app": "db", "helm.sh/chart": "db-1"}
	chart2 := map[string]string{"app": "db", "helm.sh/chart": "db-2"}
	const meta2 = `"metadata":{"labels":{"app":"db","helm.sh/chart":"db-2"},"annotations":{}}`
	live := sts(labelled(claim("data", "10Gi"), chart1))
	generateName := labelled(claim("data", "10Gi"), chart2)
	generateName.GenerateName = "data-"
	finalizer := labelled(claim("data", "10Gi"), chart1)
	finalizer.Finalizers = []string{"example.com/keep"}
	runDecideCases(t, []decideCase{
		{name: "a label changed alone",
			old: live, req: sts(labelled(claim("data", "10Gi"), chart2)),
			want:       withAnnotations(sts(labelled(claim("data", "10Gi"), chart1)), desired.Annotation, `[{"name":"data","storage":"10Gi",`+meta2+`}]`),
			wantReason: "differ only in size, class, labels or annotations", wantWarning: recorded + "(data: labels/annotations)"},
		{name: "a label and the size changed together",
			old: live, req: sts(labelled(claim("data", "20Gi"), chart2)),
			want:        withAnnotations(sts(labelled(claim("data", "10Gi"), chart1)), desired.Annotation, `[{"name":"data","storage":"20Gi",`+meta2+`}]`),
			wantWarning: recorded + "(data: 10Gi -> 20Gi, labels/annotations)"},
		{name: "a label, the size and the class changed together",
			old: live, req: sts(labelled(classed("data", "20Gi", ptr("gold")), chart2)),
			want: withAnnotations(sts(labelled(claim("data", "10Gi"), chart1)), desired.Annotation,
				`[{"name":"data","storage":"20Gi","volumeAttributesClassName":"gold",`+meta2+`}]`),
			wantWarning: recorded + `(data: 10Gi -> 20Gi, class unset -> "gold", labels/annotations)`},
		{name: "an annotation added to a template without any",
			old: sts(claim("data", "10Gi")), req: sts(annotated(claim("data", "10Gi"), map[string]string{"backup": "daily"})),
			want: withAnnotations(sts(claim("data", "10Gi")), desired.Annotation,
				`[{"name":"data","storage":"10Gi","metadata":{"labels":{},"annotations":{"backup":"daily"}}}]`),
			wantWarning: recorded},
		{name: "every label removed",
			old: live, req: sts(claim("data", "10Gi")),
			want: withAnnotations(sts(labelled(claim("data", "10Gi"), chart1)), desired.Annotation,
				`[{"name":"data","storage":"10Gi","metadata":{"labels":{},"annotations":{}}}]`),
			wantWarning: recorded},
		{name: "empty labels are none",
			old: sts(claim("data", "10Gi")), req: sts(claim("data", "10Gi")), mutate: injectTemplateJSON(`"name":"data"`, `"name":"data","labels":{},"annotations":null`),
			wantReason: "no desire recorded"},
		{name: "metadata recorded only for the template whose labels change",
			old: sts(claim("data", "10Gi"), labelled(claim("logs", "1Gi"), map[string]string{"a": "1"})),
			req: sts(claim("data", "20Gi"), labelled(claim("logs", "1Gi"), map[string]string{"a": "2"})),
			want: withAnnotations(sts(claim("data", "10Gi"), labelled(claim("logs", "1Gi"), map[string]string{"a": "1"})), desired.Annotation,
				`[{"name":"data","storage":"20Gi"},{"name":"logs","storage":"1Gi","metadata":{"labels":{"a":"2"},"annotations":{}}}]`),
			wantWarning: recorded + "(data: 10Gi -> 20Gi; logs: labels/annotations)"},
		{name: "an older metadata desire replaced: the request's metadata is the live one again",
			old:         withAnnotations(sts(labelled(claim("data", "10Gi"), chart1)), desired.Annotation, `[{"name":"data","storage":"10Gi",`+meta2+`}]`),
			req:         withAnnotations(sts(labelled(claim("data", "20Gi"), chart1)), desired.Annotation, `[{"name":"data","storage":"10Gi",`+meta2+`}]`),
			want:        withAnnotations(sts(labelled(claim("data", "10Gi"), chart1)), desired.Annotation, desire20),
			wantWarning: recorded + "(data: 10Gi -> 20Gi), replacing the pending change (data: labels/annotations)"},
		{name: "a label edit while a size change is pending replaces it, and the warning says so",
			old:         withAnnotations(sts(labelled(claim("data", "10Gi"), chart1)), desired.Annotation, desire20),
			req:         withAnnotations(sts(labelled(claim("data", "10Gi"), chart2)), desired.Annotation, desire20),
			manager:     "kubectl-edit",
			want:        withAnnotations(sts(labelled(claim("data", "10Gi"), chart1)), desired.Annotation, `[{"name":"data","storage":"10Gi",`+meta2+`}]`),
			wantWarning: recorded + "(data: labels/annotations), replacing the pending change (data: 10Gi -> 20Gi)"},
		{name: "an invalid label value not taken",
			old: live, req: sts(labelled(claim("data", "20Gi"), map[string]string{"app": "db", "helm.sh/chart": "db 2"})),
			wantReason:  "not recorded",
			wantWarning: `statefulset-resizer: the volume claim template change of ns/web is not taken: spec.volumeClaimTemplates[0].metadata.labels[helm.sh/chart]: Invalid value: "db 2"`},
		{name: "an invalid label key not taken",
			old: live, req: sts(labelled(claim("data", "10Gi"), map[string]string{"app": "db", "bad key": "x"})),
			wantReason: "not recorded", wantWarning: `metadata.labels[bad key]: Invalid value: "bad key"`},
		{name: "an invalid annotation key not taken",
			old: live, req: sts(annotated(labelled(claim("data", "10Gi"), chart1), map[string]string{"-bad": "x"})),
			wantReason: "not recorded", wantWarning: `spec.volumeClaimTemplates[0].metadata.annotations: Invalid value: "-bad"`},
		{name: "an invalid class name not taken",
			old: sts(claim("data", "10Gi")), req: sts(classed("data", "10Gi", ptr("Gold_1"))),
			wantReason: "not recorded", wantWarning: `spec.volumeClaimTemplates[0].spec.volumeAttributesClassName: Invalid value: "Gold_1"`},
		{name: "a label change of a template without a storage request left to the apiserver",
			old: sts(func() corev1.PersistentVolumeClaim {
				c := claim("data", "1Gi")
				c.Spec.Resources.Requests = nil
				return c
			}()),
			req: sts(func() corev1.PersistentVolumeClaim {
				c := labelled(claim("data", "1Gi"), chart2)
				c.Spec.Resources.Requests = nil
				return c
			}()),
			wantReason: "has no storage request"},
		{name: "generateName changed with a label left to the apiserver", old: live, req: sts(generateName), wantReason: "more than"},
		{name: "a template finalizer left to the apiserver", old: live, req: sts(finalizer), wantReason: "more than"},
		{name: "a template renamed with its labels changed left to the apiserver",
			old: live, req: sts(labelled(claim("db", "10Gi"), chart2)), wantReason: "more than"},
		{name: "a label that is not a string left to the apiserver",
			old: live, req: sts(labelled(claim("data", "10Gi"), chart1)), mutate: injectTemplateJSON(`"app":"db"`, `"app":1`),
			wantReason: `metadata.labels["app"] is not a string`},
	})
}

// managedBy adds a managedFields entry of manager with op (and subresource) owning fields.
func managedBy(manager string, op metav1.ManagedFieldsOperationType, subresource, fields string, s *appsv1.StatefulSet) *appsv1.StatefulSet {
	s.ManagedFields = append(s.ManagedFields, metav1.ManagedFieldsEntry{Manager: manager, Operation: op, Subresource: subresource,
		FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}})
	return s
}

// Rule 10: a desire is cleared only by a request that re-states the templates, a server-side
// apply whose configuration has them or a client-side apply whose manifest states the live
// ones; any other update keeps it, and the client is told.
func TestDecideRestatement(t *testing.T) {
	const templates = `{"f:spec":{"f:revisionHistoryLimit":{},"f:volumeClaimTemplates":{}}}`
	pending := func(s *appsv1.StatefulSet, kv ...string) *appsv1.StatefulSet {
		return withAnnotations(s, append([]string{desired.Annotation, desire20}, kv...)...)
	}
	// The live template as the apiserver stores it: defaulted fields a manifest does not have.
	stored := claim("data", "10Gi")
	stored.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"}
	stored.Spec.VolumeMode = ptrMode(corev1.PersistentVolumeFilesystem)
	stored.Status.Phase = corev1.ClaimPending
	manifest := func(templates ...corev1.PersistentVolumeClaim) string { return string(mustJSON(t, sts(templates...))) }
	applied := func(m string) *appsv1.StatefulSet { return pending(sts(stored), lastApplied, m) }
	four := []corev1.PersistentVolumeClaim{claim("a", "1Gi"), claim("b", "1Gi"), claim("c", "1Gi"), claim("d", "1Gi")}
	runDecideCases(t, []decideCase{
		{name: "kept for a later update by the manager that raised the size (its Update entry owns the templates)",
			old:     managedBy("kubectl-edit", metav1.ManagedFieldsOperationUpdate, "", templates, pending(sts(claim("data", "10Gi")))),
			req:     managedBy("kubectl-edit", metav1.ManagedFieldsOperationUpdate, "", templates, pending(replicasOnly(claim("data", "10Gi")))),
			manager: "kubectl-edit", wantReason: "desire kept",
			wantWarning: kept + "(data: 10Gi -> 20Gi); to undo it, apply the templates you want after the re-create (`statefulset-resizer wait ns/web` tells when)"},
		{name: "cleared by a server-side apply whose configuration has the templates",
			old:     managedBy("argocd", metav1.ManagedFieldsOperationApply, "", templates, pending(sts(claim("data", "10Gi")))),
			req:     managedBy("argocd", metav1.ManagedFieldsOperationApply, "", templates, pending(sts(claim("data", "10Gi")))),
			manager: "argocd", want: managedBy("argocd", metav1.ManagedFieldsOperationApply, "", templates, sts(claim("data", "10Gi"))),
			wantReason: "a server-side apply by argocd"},
		{name: "kept for a server-side apply whose configuration has no templates",
			old:     managedBy("kubectl", metav1.ManagedFieldsOperationApply, "", `{"f:spec":{"f:replicas":{}}}`, pending(sts(claim("data", "10Gi")))),
			req:     managedBy("kubectl", metav1.ManagedFieldsOperationApply, "", `{"f:spec":{"f:replicas":{}}}`, pending(sts(claim("data", "10Gi")))),
			manager: "kubectl", wantReason: "desire kept", wantWarning: kept},
		{name: "kept when another manager's apply has the templates",
			old:     managedBy("helm", metav1.ManagedFieldsOperationApply, "", templates, pending(sts(claim("data", "10Gi")))),
			req:     managedBy("helm", metav1.ManagedFieldsOperationApply, "", templates, pending(sts(claim("data", "10Gi")))),
			manager: "kubectl-rollout", wantReason: "desire kept", wantWarning: kept},
		{name: "kept when the apply entry is a subresource's",
			old:     managedBy("kubectl", metav1.ManagedFieldsOperationApply, "status", templates, pending(sts(claim("data", "10Gi")))),
			req:     managedBy("kubectl", metav1.ManagedFieldsOperationApply, "status", templates, pending(sts(claim("data", "10Gi")))),
			manager: "kubectl", wantReason: "desire kept", wantWarning: kept},
		{name: "kept without a warning for statefulset-resizer's own write",
			old:     managedBy(ownFieldManager, metav1.ManagedFieldsOperationUpdate, "", templates, pending(sts(claim("data", "10Gi")))),
			req:     managedBy(ownFieldManager, metav1.ManagedFieldsOperationUpdate, "", templates, pending(sts(claim("data", "10Gi")), "x", "y")),
			manager: ownFieldManager, wantReason: "desire kept"},
		{name: "cleared by a client-side apply of a manifest without the fields the apiserver defaults",
			old: pending(sts(stored), lastApplied, manifest(claim("data", "20Gi"))), req: applied(manifest(claim("data", "10Gi"))),
			manager: "kubectl-client-side-apply", want: withAnnotations(sts(stored), lastApplied, manifest(claim("data", "10Gi"))),
			wantReason: "client-side apply"},
		{name: "cleared by a client-side apply of the live size spelt otherwise",
			old: pending(sts(stored), lastApplied, manifest(claim("data", "20Gi"))), req: applied(manifest(claim("data", "10240Mi"))),
			manager: "kubectl-client-side-apply", want: withAnnotations(sts(stored), lastApplied, manifest(claim("data", "10240Mi"))),
			wantReason: "client-side apply"},
		{name: "kept by a client-side apply whose manifest states other template labels",
			old: pending(sts(stored)), req: applied(manifest(labelled(claim("data", "10Gi"), map[string]string{"a": "b"}))),
			manager: "kubectl-client-side-apply", wantReason: "desire kept", wantWarning: kept},
		{name: "kept by a client-side apply whose manifest states another access mode",
			old: pending(sts(stored)), req: applied(manifest(func() corev1.PersistentVolumeClaim {
				c := claim("data", "10Gi")
				c.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
				return c
			}())),
			manager: "kubectl-client-side-apply", wantReason: "desire kept", wantWarning: kept},
		{name: "kept by a client-side apply whose manifest has no templates",
			old: pending(sts(stored)), req: applied(manifest()),
			manager: "kubectl-client-side-apply", wantReason: "desire kept", wantWarning: kept},
		{name: "the kept warning names the class and the metadata",
			old: withAnnotations(sts(claim("data", "10Gi")), desired.Annotation,
				`[{"name":"data","storage":"20Gi","volumeAttributesClassName":"gold","metadata":{"labels":{"a":"b"},"annotations":{}}}]`),
			req: withAnnotations(replicasOnly(claim("data", "10Gi")), desired.Annotation,
				`[{"name":"data","storage":"20Gi","volumeAttributesClassName":"gold","metadata":{"labels":{"a":"b"},"annotations":{}}}]`),
			manager: "kubectl-edit", wantWarning: kept + `(data: 10Gi -> 20Gi, class unset -> "gold", labels/annotations)`},
		{name: "the kept warning names three templates at most",
			old: withAnnotations(sts(four...), desired.Annotation,
				`[{"name":"a","storage":"2Gi"},{"name":"b","storage":"2Gi"},{"name":"c","storage":"2Gi"},{"name":"d","storage":"2Gi"}]`),
			req: withAnnotations(replicasOnly(four...), desired.Annotation,
				`[{"name":"a","storage":"2Gi"},{"name":"b","storage":"2Gi"},{"name":"c","storage":"2Gi"},{"name":"d","storage":"2Gi"}]`),
			manager: "kubectl-edit", wantWarning: kept + "(a: 1Gi -> 2Gi; b: 1Gi -> 2Gi; c: 1Gi -> 2Gi; and 1 more)"},
		{name: "no warning for a kept desire that changes nothing",
			old:     withAnnotations(sts(claim("data", "10Gi")), desired.Annotation, `[{"name":"data","storage":"10Gi"}]`),
			req:     withAnnotations(replicasOnly(claim("data", "10Gi")), desired.Annotation, `[{"name":"data","storage":"10Gi"}]`),
			manager: "kubectl-edit", wantReason: "desire kept"},
		{name: "no warning for a kept desire that cannot be read (the controller tells)",
			old:     withAnnotations(sts(claim("data", "10Gi")), desired.Annotation, `[`),
			req:     withAnnotations(replicasOnly(claim("data", "10Gi")), desired.Annotation, `[`),
			manager: "kubectl-edit", wantReason: "desire kept"},
	})
}

func ptrMode(m corev1.PersistentVolumeMode) *corev1.PersistentVolumeMode { return &m }

// A warning is one line (the apiserver drops one with a control character), and a usual one
// fits the 256 characters the apiserver cuts warnings to when a response has many.
func TestWarningsOneShortLine(t *testing.T) {
	live := []corev1.PersistentVolumeClaim{classed("data", "10Gi", ptr("gold"))}
	ds := []desired.Template{{Name: "data", Storage: resource.MustParse("20Gi"), VolumeAttributesClassName: ptr("silver")}}
	for _, w := range []string{
		recordedWarning("default/web", live, ds, ""),
		keptWarning("default/web", describeChanges(live, ds)),
	} {
		if n := len([]rune(w)); n > 256 {
			t.Errorf("warning %q has %d characters, want at most 256", w, n)
		}
	}
	if w := notTakenWarning("default/web", errors.New("line one\nline two\x00\xff")); w != "statefulset-resizer: the volume claim template change of default/web is not taken: line one line two ?" {
		t.Errorf("warning %q: want control characters and invalid UTF-8 replaced", w)
	}
}
