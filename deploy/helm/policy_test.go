package helm

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
)

const policyComponent = "../kubernetes/statefulset-resizer/policy"

// componentObjects reads the objects of the kustomize policy component.
func componentObjects(t *testing.T) []object {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(policyComponent, "*.yaml"))
	if err != nil || len(files) < 2 {
		t.Fatalf("no YAML in %s: %v", policyComponent, err)
	}
	var out []object
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, splitDocs(t, f, data)...)
	}
	return out
}

// identityConditions are the matchConditions by which each policy recognises the user it is
// about: the only expressions in which the chart (exact user names of the release) and the
// kustomize component (the end of the name, in any namespace) differ.
var identityConditions = map[string]bool{
	"statefulset-resizer-controller": true, "not-statefulset-resizer": true, "statefulset-resizer-webhook": true,
}

// withoutIdentity returns p's spec with the identity conditions' expressions blanked, and those
// expressions by condition name.
func withoutIdentity(p admissionv1.ValidatingAdmissionPolicy) (admissionv1.ValidatingAdmissionPolicySpec, map[string]string) {
	spec := *p.Spec.DeepCopy()
	ids := map[string]string{}
	for i, c := range spec.MatchConditions {
		if identityConditions[c.Name] {
			ids[c.Name] = strings.TrimSpace(c.Expression)
			spec.MatchConditions[i].Expression = ""
		}
	}
	return spec, ids
}

// With the release name statefulset-resizer, the chart's policies and bindings are the kustomize
// component's, names, labels and rules, but for the users they name: exactly this release's
// ServiceAccounts.
func TestChartAdmissionPoliciesEqualKustomizeComponent(t *testing.T) {
	helmBinary(t)
	objs := render(t)
	const (
		controller = "'system:serviceaccount:" + namespace + ":statefulset-resizer'"
		hook       = "'system:serviceaccount:" + namespace + ":statefulset-resizer-webhook'"
	)
	wantChart := map[string]string{
		"statefulset-resizer-controller": "request.userInfo.username == " + controller,
		"not-statefulset-resizer":        "request.userInfo.username != " + controller,
		"statefulset-resizer-webhook":    "request.userInfo.username == " + hook,
	}
	component := componentObjects(t)
	if len(component) != 6 {
		t.Fatalf("the policy component has %d objects, want 3 policies and 3 bindings", len(component))
	}
	for _, b := range component {
		c := find(t, objs, b.Kind, b.Metadata.Name)
		for k, v := range b.Metadata.Labels {
			if c.Metadata.Labels[k] != v {
				t.Errorf("%s: label %s=%q, the kustomize component has %q", c.key(), k, c.Metadata.Labels[k], v)
			}
		}
		if b.Kind == "ValidatingAdmissionPolicyBinding" {
			var bb, cb admissionv1.ValidatingAdmissionPolicyBinding
			decode(t, b, &bb)
			decode(t, c, &cb)
			if !reflect.DeepEqual(bb.Spec, cb.Spec) {
				t.Errorf("%s: spec differs from the kustomize component's:\n chart: %+v\n base:  %+v", c.key(), cb.Spec, bb.Spec)
			}
			continue
		}
		var bp, cp admissionv1.ValidatingAdmissionPolicy
		decode(t, b, &bp)
		decode(t, c, &cp)
		bs, bids := withoutIdentity(bp)
		cs, cids := withoutIdentity(cp)
		if !reflect.DeepEqual(bs, cs) {
			t.Errorf("%s: spec differs from the kustomize component's (identity conditions aside):\n chart: %+v\n base:  %+v", c.key(), cs, bs)
		}
		if len(cids) == 0 || len(cids) != len(bids) {
			t.Errorf("%s: identity conditions %v, the component has %v", c.key(), cids, bids)
		}
		for name, expr := range cids {
			if expr != wantChart[name] {
				t.Errorf("%s: matchCondition %s is %q, want %q", c.key(), name, expr, wantChart[name])
			}
			if !strings.Contains(bids[name], "request.userInfo.username.endsWith(") {
				t.Errorf("kustomize %s: matchCondition %s is %q, want a match on the end of the user name", b.key(), name, bids[name])
			}
		}
	}
}

// The policies follow the ServiceAccount the chart binds, and are rendered only when asked for
// (the webhook's only with the webhook).
func TestChartAdmissionPoliciesValues(t *testing.T) {
	helmBinary(t)
	count := func(objs []object) int {
		n := 0
		for _, o := range objs {
			if strings.HasPrefix(o.Kind, "ValidatingAdmissionPolicy") {
				n++
			}
		}
		return n
	}
	if n := count(render(t, "admissionPolicies.enabled=false")); n != 0 {
		t.Errorf("admissionPolicies.enabled=false renders %d policies and bindings, want none", n)
	}
	noWebhook := render(t, "webhook.enabled=false")
	if n := count(noWebhook); n != 4 {
		t.Errorf("webhook.enabled=false renders %d policies and bindings, want 4 (no webhook policy)", n)
	}
	var p admissionv1.ValidatingAdmissionPolicy
	decode(t, find(t, render(t, "serviceAccount.create=false", "serviceAccount.name=existing"), "ValidatingAdmissionPolicy", "statefulset-resizer-controller"), &p)
	want := "request.userInfo.username == 'system:serviceaccount:" + namespace + ":existing'"
	if got := strings.TrimSpace(p.Spec.MatchConditions[0].Expression); got != want {
		t.Errorf("with serviceAccount.name=existing the controller policy matches %q, want %q", got, want)
	}
	if _, err := renderErr(t, "webhook.enabled=false", "admissionPolicies.enabled=true"); err != nil {
		t.Errorf("policies without the webhook: %v", err)
	}
}
