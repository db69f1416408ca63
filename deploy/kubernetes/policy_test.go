package kubernetes

import (
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// jsonFields are the JSON names of the fields of a struct type.
func jsonFields(t reflect.Type) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}

// policy decodes the ValidatingAdmissionPolicy name of the policy component, strictly.
func policy(t *testing.T, name string) admissionregistrationv1.ValidatingAdmissionPolicy {
	t.Helper()
	for _, m := range loadManifests(t) {
		if m.kind != "ValidatingAdmissionPolicy" || m.name != name {
			continue
		}
		var p admissionregistrationv1.ValidatingAdmissionPolicy
		if err := yaml.UnmarshalStrict(m.doc, &p); err != nil {
			t.Fatalf("%s: %v", m.file, err)
		}
		return p
	}
	t.Fatalf("no ValidatingAdmissionPolicy %s under deploy/kubernetes", name)
	return admissionregistrationv1.ValidatingAdmissionPolicy{}
}

// expressions is every CEL expression of p, variables and validations.
func expressions(p admissionregistrationv1.ValidatingAdmissionPolicy) string {
	var b strings.Builder
	for _, v := range p.Spec.Variables {
		b.WriteString(v.Expression + "\n")
	}
	for _, v := range p.Spec.Validations {
		b.WriteString(v.Expression + "\n")
	}
	return b.String()
}

// The webhook's ServiceAccount may change only caBundle: the policy compares every other field
// of a MutatingWebhook by name, since CEL cannot compare "all but one field". A field the API
// gains (on a k8s.io/api bump) would be unchecked, and fails here until the policy compares it.
func TestWebhookPolicyComparesEveryWebhookField(t *testing.T) {
	exprs := expressions(policy(t, "statefulset-resizer-webhook"))
	for _, f := range jsonFields(reflect.TypeOf(admissionregistrationv1.MutatingWebhook{})) {
		switch f {
		case "name": // the key the webhooks are paired by
			if !strings.Contains(exprs, "o.name == w.name") {
				t.Errorf("webhooks are not paired by name")
			}
		case "clientConfig":
			for _, c := range jsonFields(reflect.TypeOf(admissionregistrationv1.WebhookClientConfig{})) {
				if c == "caBundle" {
					continue // the one field it may change
				}
				if !strings.Contains(exprs, "o.clientConfig.?"+c+" == w.clientConfig.?"+c) {
					t.Errorf("webhooks[*].clientConfig.%s is not compared with the old object's", c)
				}
			}
		default:
			if !strings.Contains(exprs, "o.?"+f+" == w.?"+f) {
				t.Errorf("webhooks[*].%s is not compared with the old object's", f)
			}
		}
	}
}

// Every field of ObjectMeta a client can change in an update is compared by both confining
// policies; the rest the apiserver sets itself (or refuses to change).
func TestPoliciesCompareEveryWritableMetadataField(t *testing.T) {
	serverSet := []string{"name", "namespace", "selfLink", "uid", "resourceVersion", "generation",
		"creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds"}
	// managedFields: every write changes them; the controller puts the old ones back.
	allowed := map[string][]string{
		"statefulset-resizer-controller": {"managedFields"},
		"statefulset-resizer-webhook":    {"managedFields"},
	}
	for name, free := range allowed {
		exprs := expressions(policy(t, name))
		for _, f := range jsonFields(reflect.TypeOf(metav1.ObjectMeta{})) {
			if slices.Contains(serverSet, f) || slices.Contains(free, f) {
				continue
			}
			compared := regexp.MustCompile(`object\.metadata\.\?` + f + `\b`)
			if !compared.MatchString(exprs) || !strings.Contains(exprs, "oldObject.metadata.?"+f) {
				t.Errorf("%s: metadata.%s is not compared with the old object's", name, f)
			}
		}
	}
}

// Both confining policies refuse whatever they cannot evaluate, the guard of everybody's writes
// lets it through, and every validation has a static message (used when its messageExpression
// fails) and reason Forbidden.
func TestPoliciesFailurePolicyAndMessages(t *testing.T) {
	for name, want := range map[string]admissionregistrationv1.FailurePolicyType{
		"statefulset-resizer-controller":     admissionregistrationv1.Fail,
		"statefulset-resizer-webhook":        admissionregistrationv1.Fail,
		"statefulset-resizer-recreate-guard": admissionregistrationv1.Ignore,
	} {
		p := policy(t, name)
		if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != want {
			t.Errorf("%s: failurePolicy %v, want %s", name, p.Spec.FailurePolicy, want)
		}
		for i, v := range p.Spec.Validations {
			if v.Message == "" || v.MessageExpression == "" {
				t.Errorf("%s: validation %d has no message or no messageExpression", name, i)
			}
			if v.Reason == nil || *v.Reason != metav1.StatusReasonForbidden {
				t.Errorf("%s: validation %d: reason %v, want Forbidden", name, i, v.Reason)
			}
		}
	}
}
