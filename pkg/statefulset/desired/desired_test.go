package desired

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func ptr(s string) *string { return &s }

func template(name, size string, vac *string) corev1.PersistentVolumeClaim {
	return corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "db"}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:               []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:                 corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
			VolumeAttributesClassName: vac,
		},
	}
}

func TestFormatParseRoundTrip(t *testing.T) {
	ts := []Template{
		{Name: "data", Storage: resource.MustParse("20Gi")},
		{Name: "logs", Storage: resource.MustParse("2048Mi"), VolumeAttributesClassName: ptr("gold")},
	}
	got, err := Format(ts)
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"name":"data","storage":"20Gi"},{"name":"logs","storage":"2Gi","volumeAttributesClassName":"gold"}]`
	if got != want {
		t.Fatalf("Format = %s, want %s", got, want)
	}
	back, err := Parse(got)
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != 2 || back[0].Storage.Cmp(ts[0].Storage) != 0 || back[1].Storage.Cmp(ts[1].Storage) != 0 ||
		back[0].VolumeAttributesClassName != nil || *back[1].VolumeAttributesClassName != "gold" {
		t.Fatalf("Parse(Format(x)) = %+v, want %+v", back, ts)
	}
}

func TestFormatEmpty(t *testing.T) {
	got, err := Format(nil)
	if err != nil || got != "[]" {
		t.Fatalf("Format(nil) = %q, %v; want [] and no error", got, err)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ value, want string }{
		{`{"name":"data"}`, "not a JSON list"},
		{`not json`, "not a JSON list"},
		{`[{"name":"data","storage":"lots"}]`, "not a JSON list"},
		{`[{"storage":"1Gi"}]`, "entry 0 has no name"},
		{`[{"name":"data"}]`, `template "data": storage must be a positive quantity`},
		{`[{"name":"data","storage":"0"}]`, `storage must be a positive quantity, got "0"`},
		{`[{"name":"data","storage":"-1Gi"}]`, "positive"},
		{`[{"name":"data","storage":"1Gi"},{"name":"data","storage":"2Gi"}]`, `template "data" appears twice`},
	} {
		_, err := Parse(tc.value)
		if err == nil {
			t.Errorf("Parse(%s): no error, want one containing %q", tc.value, tc.want)
			continue
		}
		for _, part := range []string{Annotation, tc.want, "remove the annotation or fix its value"} {
			if !strings.Contains(err.Error(), part) {
				t.Errorf("Parse(%s) error %q does not contain %q", tc.value, err, part)
			}
		}
	}
}

func TestFormatRejectsInvalid(t *testing.T) {
	if _, err := Format([]Template{{Name: "data"}}); err == nil || !strings.Contains(err.Error(), Annotation) {
		t.Fatalf("Format of an entry without size: err = %v, want an error naming %s", err, Annotation)
	}
}

func TestFromStatefulSet(t *testing.T) {
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}}
	if ts, ok, err := FromStatefulSet(sts); ts != nil || ok || err != nil {
		t.Fatalf("no annotation: got %v, %v, %v; want nil, false, nil", ts, ok, err)
	}
	sts.Annotations = map[string]string{Annotation: `[{"name":"data","storage":"5Gi"}]`}
	ts, ok, err := FromStatefulSet(sts)
	if err != nil || !ok || len(ts) != 1 || ts[0].Storage.String() != "5Gi" {
		t.Fatalf("valid annotation: got %+v, %v, %v", ts, ok, err)
	}
	sts.Annotations[Annotation] = `[`
	_, ok, err = FromStatefulSet(sts)
	if !ok || err == nil || !strings.Contains(err.Error(), "StatefulSet ns/web") || !strings.Contains(err.Error(), Annotation) {
		t.Fatalf("invalid annotation: ok=%v err=%v; want ok and an error naming ns/web and the annotation", ok, err)
	}
}

func TestFromTemplates(t *testing.T) {
	ts, err := FromTemplates([]corev1.PersistentVolumeClaim{template("data", "3Gi", nil), template("logs", "1Gi", ptr("gold"))})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := Format(ts)
	if want := `[{"name":"data","storage":"3Gi"},{"name":"logs","storage":"1Gi","volumeAttributesClassName":"gold"}]`; got != want {
		t.Fatalf("FromTemplates = %s, want %s", got, want)
	}
	tmpl := template("data", "3Gi", nil)
	ts[0].Metadata = MetadataOf(&tmpl)
	got, _ = Format(ts)
	if want := `[{"name":"data","storage":"3Gi","metadata":{"labels":{"app":"db"},"annotations":{}}},`; !strings.HasPrefix(got, want) {
		t.Fatalf("with MetadataOf: %s, want it to start with %s", got, want)
	}
	noSize := template("data", "1Gi", nil)
	noSize.Spec.Resources.Requests = nil
	if _, err := FromTemplates([]corev1.PersistentVolumeClaim{noSize}); err == nil || !strings.Contains(err.Error(), `"data" has no resources.requests.storage`) {
		t.Fatalf("template without size: err = %v", err)
	}
}

func TestApply(t *testing.T) {
	live := []corev1.PersistentVolumeClaim{template("data", "1Gi", nil), template("logs", "1Gi", ptr("silver")), template("tmp", "1Gi", nil)}
	orig := []corev1.PersistentVolumeClaim{live[0], live[1], live[2]}
	for i := range orig {
		orig[i] = *live[i].DeepCopy()
	}
	got, err := Apply(live, []Template{
		{Name: "logs", Storage: resource.MustParse("3Gi")}, // no class: cleared
		{Name: "data", Storage: resource.MustParse("10Gi"), VolumeAttributesClassName: ptr("gold")},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []corev1.PersistentVolumeClaim{template("data", "10Gi", ptr("gold")), template("logs", "3Gi", nil), template("tmp", "1Gi", nil)}
	if !apiequality.Semantic.DeepEqual(got, want) {
		t.Fatalf("Apply = %+v\nwant %+v", got, want)
	}
	if !apiequality.Semantic.DeepEqual(live, orig) {
		t.Fatalf("Apply changed its input: %+v", live)
	}
	// Entries without metadata (as recorded before it existed) keep the live
	// labels; entries with metadata replace them, {} removing them all.
	withMeta, err := Apply(live, []Template{
		{Name: "data", Storage: resource.MustParse("1Gi"), Metadata: &Metadata{Labels: map[string]string{"app": "db", "chart": "db-2"}, Annotations: map[string]string{"note": "x"}}},
		{Name: "logs", Storage: resource.MustParse("1Gi"), VolumeAttributesClassName: ptr("silver"), Metadata: &Metadata{Labels: map[string]string{}, Annotations: map[string]string{}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if l, a := withMeta[0].Labels, withMeta[0].Annotations; len(l) != 2 || l["chart"] != "db-2" || a["note"] != "x" {
		t.Errorf("metadata entry: labels %v annotations %v", l, a)
	}
	if withMeta[1].Labels != nil || withMeta[1].Annotations != nil {
		t.Errorf("empty metadata entry: labels %v annotations %v, want none", withMeta[1].Labels, withMeta[1].Annotations)
	}
	if withMeta[2].Labels["app"] != "db" {
		t.Errorf("template without entry lost its labels: %v", withMeta[2].Labels)
	}
	got[2].Labels["app"] = "changed"
	if live[2].Labels["app"] != "db" {
		t.Fatal("Apply's result shares a map with its input")
	}
}

func TestApplyErrors(t *testing.T) {
	live := []corev1.PersistentVolumeClaim{template("data", "1Gi", nil)}
	_, err := Apply(live, []Template{{Name: "gone", Storage: resource.MustParse("2Gi")}})
	if err == nil || !strings.Contains(err.Error(), `names volume claim template "gone"`) {
		t.Fatalf("unknown template: err = %v", err)
	}
	_, err = Apply(live, []Template{{Name: "data", Storage: resource.MustParse("2Gi")}, {Name: "data", Storage: resource.MustParse("3Gi")}})
	if err == nil || !strings.Contains(err.Error(), "appears twice") {
		t.Fatalf("duplicate entries: err = %v", err)
	}
	noRequests := template("data", "1Gi", nil)
	noRequests.Spec.Resources.Requests = nil
	got, err := Apply([]corev1.PersistentVolumeClaim{noRequests}, []Template{{Name: "data", Storage: resource.MustParse("2Gi")}})
	if err != nil || got[0].Spec.Resources.Requests.Storage().String() != "2Gi" {
		t.Fatalf("template without requests: got %+v, %v", got, err)
	}
}

func TestOptedIn(t *testing.T) {
	in := map[string]string{OptInLabel: OptInValue}
	out := map[string]string{OptInLabel: "disabled"}
	for _, c := range []struct {
		name    string
		sts, ns map[string]string
		want    bool
	}{
		{"neither", nil, nil, false},
		{"StatefulSet label", in, nil, true},
		{"namespace label", nil, in, true},
		{"StatefulSet opted out in an opted-in namespace", out, in, false},
		{"StatefulSet opted in, namespace opted out", in, out, true},
		{"namespace with another value", nil, out, false},
	} {
		if got := OptedIn(c.sts, c.ns); got != c.want {
			t.Errorf("%s: OptedIn = %v, want %v", c.name, got, c.want)
		}
	}
}
