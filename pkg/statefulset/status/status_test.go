package status

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestRoundTrip(t *testing.T) {
	cases := map[string]VolumeClaimTemplates{
		"no templates": {ObservedGeneration: 1, Templates: []Template{}},
		"in progress and finished": {ObservedGeneration: 3, UID: "u-1", Templates: []Template{
			{TemplateName: "vol1", ReadyReplicas: 1, FinishedReconciliationGeneration: 2},
			{TemplateName: "vol2", ReadyReplicas: 3, FinishedReconciliationGeneration: 3},
		}},
		"for a desire, re-create to come": {ObservedGeneration: 2, UID: "u", Desired: `[{"name":"data","storage":"2Gi"}]`, Recreate: true,
			Templates: []Template{{TemplateName: "data", ReadyReplicas: 3, FinishedReconciliationGeneration: 2}}},
		"re-create under way": {ObservedGeneration: 2, UID: "u", Recreate: true,
			RecreateStep: &RecreateStep{Step: StepDeleting, Since: "2026-11-29T01:02:03Z", Message: "record csi-resizer-system/x"},
			Templates:    []Template{{TemplateName: "data", ReadyReplicas: 1}}},
		"infeasible with message": {ObservedGeneration: 7, Templates: []Template{
			{TemplateName: "data", ReadyReplicas: 2, InfeasibleReplicas: 1,
				Message: `data-web-2: OutOfRange: requested "capacity" exceeds maximum`},
		}},
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			value, err := in.Encode()
			if err != nil {
				t.Fatal(err)
			}
			out, err := Parse(value)
			if err != nil {
				t.Fatalf("Parse(%s): %v", value, err)
			}
			if !reflect.DeepEqual(*out, in) {
				t.Errorf("round trip changed the document:\n in: %+v\nout: %+v", in, *out)
			}
			if !out.Equal(&in) {
				t.Errorf("Equal is false after a round trip")
			}
			again, err := out.Encode()
			if err != nil || again != value {
				t.Errorf("second encoding differs: %q vs %q (%v)", again, value, err)
			}
		})
	}
}

// TestWireFormat pins the JSON field names, which scripts and `wait` rely on.
func TestWireFormat(t *testing.T) {
	value, err := VolumeClaimTemplates{ObservedGeneration: 4, UID: "u-1", Templates: []Template{{
		TemplateName: "data", ReadyReplicas: 2, FinishedReconciliationGeneration: 4,
		InfeasibleReplicas: 1, Message: "m",
	}}}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"observedGeneration":4,"uid":"u-1","templates":[{"templateName":"data","readyReplicas":2,` +
		`"finishedReconciliationGeneration":4,"infeasibleReplicas":1,"message":"m"}]}`
	if value != want {
		t.Errorf("got  %s\nwant %s", value, want)
	}
	// A template that never finished omits finishedReconciliationGeneration,
	// like the KEP-661 status field.
	value, _ = VolumeClaimTemplates{ObservedGeneration: 1, Templates: []Template{{TemplateName: "x"}}}.Encode()
	if strings.Contains(value, "finishedReconciliationGeneration") {
		t.Errorf("unexpected finishedReconciliationGeneration in %s", value)
	}
	// nil Templates encodes as [] so consumers can iterate.
	value, _ = VolumeClaimTemplates{ObservedGeneration: 1}.Encode()
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(value), &raw); err != nil || string(raw["templates"]) != "[]" {
		t.Errorf("templates = %s, want [] (%v)", raw["templates"], err)
	}
}

func TestParseErrors(t *testing.T) {
	for _, value := range []string{"", "{", `{"observedGeneration":"x"}`} {
		if _, err := Parse(value); err == nil {
			t.Errorf("Parse(%q) succeeded, want an error", value)
		}
	}
}

func TestFromStatefulSet(t *testing.T) {
	sts := &appsv1.StatefulSet{}
	if s, err := FromStatefulSet(sts); s != nil || err != nil {
		t.Errorf("no annotation: got %v, %v; want nil, nil", s, err)
	}
	sts.ObjectMeta = metav1.ObjectMeta{Annotations: map[string]string{Annotation: `{"observedGeneration":2,"templates":[]}`}}
	s, err := FromStatefulSet(sts)
	if err != nil || s.ObservedGeneration != 2 {
		t.Errorf("got %+v, %v", s, err)
	}
	sts.Annotations[Annotation] = "garbage"
	if _, err := FromStatefulSet(sts); err == nil || errors.Is(err, ErrOtherObject) {
		t.Errorf("garbage annotation: got %v, want a decoding error", err)
	}
}

// A document describes the object whose uid it records: one copied onto a
// re-created StatefulSet (an exported manifest re-applied), or written
// without a uid, is not this object's and is reported as such.
func TestFromStatefulSetChecksUID(t *testing.T) {
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{UID: "new", Annotations: map[string]string{}}}
	for name, tc := range map[string]struct {
		value string
		ours  bool
	}{
		"same object":       {`{"observedGeneration":1,"uid":"new","templates":[]}`, true},
		"re-created object": {`{"observedGeneration":1,"uid":"old","templates":[]}`, false},
		"no uid":            {`{"observedGeneration":1,"templates":[]}`, false},
	} {
		sts.Annotations[Annotation] = tc.value
		s, err := FromStatefulSet(sts)
		if tc.ours && (err != nil || s == nil || s.UID != "new") {
			t.Errorf("%s: got %+v, %v; want the document", name, s, err)
		}
		if !tc.ours && (s != nil || !errors.Is(err, ErrOtherObject)) {
			t.Errorf("%s: got %+v, %v; want nil and ErrOtherObject", name, s, err)
		}
	}
}

func TestEqualAndTemplate(t *testing.T) {
	a := &VolumeClaimTemplates{ObservedGeneration: 1, Templates: []Template{{TemplateName: "a", ReadyReplicas: 1}}}
	b := &VolumeClaimTemplates{ObservedGeneration: 1, Templates: []Template{{TemplateName: "a", ReadyReplicas: 2}}}
	if a.Equal(b) {
		t.Error("different readyReplicas compare equal")
	}
	if c := (&VolumeClaimTemplates{ObservedGeneration: 1, UID: "x", Templates: a.Templates}); a.Equal(c) {
		t.Error("documents of different objects compare equal")
	}
	if c := (&VolumeClaimTemplates{ObservedGeneration: 1, Desired: "[]", Templates: a.Templates}); a.Equal(c) {
		t.Error("documents for different desires compare equal")
	}
	if c := (&VolumeClaimTemplates{ObservedGeneration: 1, Recreate: true, Templates: a.Templates}); a.Equal(c) {
		t.Error("documents differing in recreate compare equal")
	}
	step := func(name, since string) *VolumeClaimTemplates {
		return &VolumeClaimTemplates{ObservedGeneration: 1, RecreateStep: &RecreateStep{Step: name, Since: since}, Templates: a.Templates}
	}
	if a.Equal(step(StepDeleting, "t1")) || step(StepDeleting, "t1").Equal(a) {
		t.Error("a document with a re-create step compares equal to one without")
	}
	if step(StepDeleting, "t1").Equal(step(StepRecreated, "t1")) || step(StepDeleting, "t1").Equal(step(StepDeleting, "t2")) {
		t.Error("documents with different re-create steps compare equal")
	}
	if !step(StepDeleting, "t1").Equal(step(StepDeleting, "t1")) {
		t.Error("documents with the same re-create step (distinct pointers) compare unequal")
	}
	var none *VolumeClaimTemplates
	if !none.Equal(nil) || none.Equal(a) || a.Equal(nil) {
		t.Error("nil handling of Equal is wrong")
	}
	if a.Template("a") == nil || a.Template("b") != nil || none.Template("a") != nil {
		t.Error("Template lookup is wrong")
	}
}
