// Package kubernetes holds no code: its test pins the RBAC rules shipped in
// deploy/kubernetes, so that a permission is only ever added on purpose.
package kubernetes

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// grant is one (apiGroup, resource) pair of a role and the verbs it allows there.
type grant struct{ group, resource string }

func (g grant) String() string {
	if g.group == "" {
		return g.resource
	}
	return g.resource + "." + g.group
}

// expectedRoles is every Role and ClusterRole under deploy/kubernetes, with exactly the
// permissions it may grant. A role that is not listed here fails the test, so is a role
// with one verb more or less.
var expectedRoles = []struct {
	kind, name string
	why        string
	grants     map[grant][]string
}{
	{
		kind: "ClusterRole", name: "csi-resizer",
		why: "the csi-resizer sidecar (rbac/clusterrole.yaml)",
		grants: map[grant][]string{
			{"", "persistentvolumes"}:                     {"get", "list", "watch", "patch"},
			{"", "persistentvolumeclaims"}:                {"get", "list", "watch"},
			{"", "persistentvolumeclaims/status"}:         {"patch"},
			{"", "pods"}:                                  {"get", "list", "watch"},
			{"", "events"}:                                {"create", "patch"},
			{"storage.k8s.io", "volumeattributesclasses"}: {"list", "watch"},
		},
	},
	{
		kind: "ClusterRole", name: "csi-resizer-controller-expand-secrets",
		why: "the optional controller-expand secrets component (rbac/controller-expand-secrets)",
		grants: map[grant][]string{
			{"", "secrets"}: {"get"},
		},
	},
	{
		kind: "ClusterRole", name: "csi-resizer-node-deployment",
		why: "csi-resizer --node-deployment reads and watches its own Node (rbac/node-deployment)",
		grants: map[grant][]string{
			{"", "nodes"}: {"get", "list", "watch"},
		},
	},
	{
		kind: "Role", name: "csi-resizer-leader-election",
		why: "the sidecar's leader-election Lease (client-go LeaseLock: get, create, update)",
		grants: map[grant][]string{
			{"coordination.k8s.io", "leases"}: {"get", "create", "update"},
		},
	},
	{
		kind: "ClusterRole", name: "statefulset-resizer",
		why: "the statefulset-resizer controller (statefulset-resizer/clusterrole.yaml; informers: list and watch, no get)",
		grants: map[grant][]string{
			{"apps", "statefulsets"}:             {"get", "list", "watch", "patch", "delete", "create"},
			{"apps", "controllerrevisions"}:      {"list"},
			{"", "namespaces"}:                   {"list", "watch"},
			{"", "persistentvolumeclaims"}:       {"list", "watch", "patch"},
			{"", "pods"}:                         {"list", "watch"},
			{"storage.k8s.io", "storageclasses"}: {"list", "watch"},
			{"coordination.k8s.io", "leases"}:    {"list"},
			{"", "events"}:                       {"create", "patch"},
		},
	},
	{
		kind: "ClusterRole", name: "statefulset-resizer-webhook",
		why: "statefulset-resizer's admission webhook: the caBundle of its own configuration (statefulset-resizer/webhook/clusterrole.yaml)",
		grants: map[grant][]string{
			{"admissionregistration.k8s.io", "mutatingwebhookconfigurations"}: {"get", "patch"},
		},
	},
	{
		kind: "Role", name: "statefulset-resizer-recreate-records",
		why: "statefulset-resizer's re-create records, in its own namespace only (no cluster-wide ConfigMap right)",
		grants: map[grant][]string{
			{"", "configmaps"}: {"get", "list", "watch", "create", "update", "delete"},
		},
	},
	{
		kind: "Role", name: "statefulset-resizer-webhook-certificates",
		why: "statefulset-resizer's admission webhook: its generated certificate Secret",
		grants: map[grant][]string{
			{"", "secrets"}: {"get", "create", "update"},
		},
	},
	{
		kind: "ClusterRole", name: "volume-autoscaler",
		why: "volume-autoscaler (volume-autoscaler/clusterrole.yaml; informers: list and watch, no get; the kubelet's stats as nodes/stats, never nodes/proxy)",
		grants: map[grant][]string{
			{"", "nodes"}:                        {"list", "watch"},
			{"", "nodes/stats"}:                  {"get"},
			{"", "pods"}:                         {"list", "watch"},
			{"", "persistentvolumeclaims"}:       {"list", "watch", "patch"},
			{"storage.k8s.io", "storageclasses"}: {"list", "watch"},
			{"", "events"}:                       {"create", "patch"},
		},
	},
	{
		kind: "Role", name: "volume-autoscaler-leader-election",
		why: "volume-autoscaler's leader-election Lease (client-go LeaseLock: get, create, update)",
		grants: map[grant][]string{
			{"coordination.k8s.io", "leases"}: {"get", "create", "update"},
		},
	},
	{
		kind: "Role", name: "statefulset-resizer-leader-election",
		why: "statefulset-resizer's leader-election Lease (client-go LeaseLock: get, create, update)",
		grants: map[grant][]string{
			{"coordination.k8s.io", "leases"}: {"get", "create", "update"},
		},
	},
}

// manifest is one YAML document of a file under deploy/kubernetes.
type manifest struct {
	file string
	doc  []byte
	kind string
	name string
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// loadManifests reads every YAML document under deploy/kubernetes that is a Kubernetes object
// (kustomization files and JSON-patch lists are skipped).
func loadManifests(t *testing.T) []manifest {
	t.Helper()
	var out []manifest
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || (!strings.HasSuffix(path, ".yaml") && !strings.HasSuffix(path, ".yml")) {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, doc := range docSeparator.Split(string(data), -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			var head map[string]any
			if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
				// A JSON-patch file is a YAML list, not an object: not a role.
				var list []any
				if yaml.Unmarshal([]byte(doc), &list) == nil {
					continue
				}
				t.Errorf("%s: not valid YAML: %v", path, err)
				continue
			}
			kind, _ := head["kind"].(string)
			if kind == "Kustomization" || kind == "Component" {
				continue
			}
			if _, patch := head["$patch"]; patch {
				continue // a strategic-merge directive (node-deployment's "$patch: delete"), not an object
			}
			meta, _ := head["metadata"].(map[string]any)
			name, _ := meta["name"].(string)
			out = append(out, manifest{file: path, doc: []byte(doc), kind: kind, name: name})
		}
		return nil
	})
	if err != nil {
		t.Fatalf("reading deploy/kubernetes: %v", err)
	}
	return out
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// roles decodes every Role and ClusterRole, strictly: a misspelt field ("verb:") fails.
func roles(t *testing.T) map[string][]rbacv1.PolicyRule {
	t.Helper()
	out := map[string][]rbacv1.PolicyRule{}
	where := map[string]string{}
	for _, m := range loadManifests(t) {
		if m.kind != "Role" && m.kind != "ClusterRole" {
			continue
		}
		var role rbacv1.ClusterRole // same fields as Role, plus aggregationRule
		if err := yaml.UnmarshalStrict(m.doc, &role); err != nil {
			t.Errorf("%s: %s %q does not decode strictly as RBAC: %v", m.file, m.kind, m.name, err)
			continue
		}
		if role.AggregationRule != nil {
			t.Errorf("%s: %s %q uses an aggregationRule: its permissions would not be pinned here", m.file, m.kind, m.name)
		}
		key := m.kind + "/" + m.name
		if prev, dup := where[key]; dup {
			t.Errorf("%s %q is defined twice: in %s and in %s", m.kind, m.name, prev, m.file)
		}
		where[key] = m.file
		out[key] = role.Rules
	}
	return out
}

func TestNoWildcards(t *testing.T) {
	for key, rules := range roles(t) {
		for i, r := range rules {
			for field, values := range map[string][]string{
				"apiGroups": r.APIGroups, "resources": r.Resources, "verbs": r.Verbs,
				"resourceNames": r.ResourceNames, "nonResourceURLs": r.NonResourceURLs,
			} {
				for _, v := range values {
					if strings.Contains(v, "*") {
						t.Errorf("%s rule %d: %s contains %q; list what is used instead of a wildcard", key, i, field, v)
					}
				}
			}
			if len(r.NonResourceURLs) > 0 {
				t.Errorf("%s rule %d: nonResourceURLs %v: neither binary calls non-resource URLs", key, i, r.NonResourceURLs)
			}
			if len(r.APIGroups) == 0 || len(r.Resources) == 0 || len(r.Verbs) == 0 {
				t.Errorf("%s rule %d: apiGroups, resources and verbs must all be set: %+v", key, i, r)
			}
		}
	}
}

// flatten turns rules into grant -> sorted verbs.
func flatten(rules []rbacv1.PolicyRule) map[grant][]string {
	out := map[grant][]string{}
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				k := grant{g, res}
				for _, v := range r.Verbs {
					if !slices.Contains(out[k], v) {
						out[k] = append(out[k], v)
					}
				}
			}
		}
	}
	for k := range out {
		sort.Strings(out[k])
	}
	return out
}

func TestRolesGrantExactlyWhatIsUsed(t *testing.T) {
	got := roles(t)
	known := map[string]bool{}
	for _, want := range expectedRoles {
		key := want.kind + "/" + want.name
		known[key] = true
		t.Run(key, func(t *testing.T) {
			rules, ok := got[key]
			if !ok {
				t.Fatalf("%s %q (%s) not found under deploy/kubernetes", want.kind, want.name, want.why)
			}
			have := flatten(rules)
			var grants []grant
			for g := range want.grants {
				grants = append(grants, g)
			}
			for g := range have {
				if _, ok := want.grants[g]; !ok {
					grants = append(grants, g)
				}
			}
			sort.Slice(grants, func(i, j int) bool { return grants[i].String() < grants[j].String() })
			for _, g := range grants {
				wantVerbs := slices.Clone(want.grants[g])
				sort.Strings(wantVerbs)
				haveVerbs := have[g]
				if slices.Equal(wantVerbs, haveVerbs) {
					continue
				}
				var extra, missing []string
				for _, v := range haveVerbs {
					if !slices.Contains(wantVerbs, v) {
						extra = append(extra, v)
					}
				}
				for _, v := range wantVerbs {
					if !slices.Contains(haveVerbs, v) {
						missing = append(missing, v)
					}
				}
				switch {
				case len(wantVerbs) == 0:
					t.Errorf("%s grants %v on %s, which %s does not use", key, haveVerbs, g, want.why)
				default:
					if len(extra) > 0 {
						t.Errorf("%s grants %v on %s beyond what %s uses (%v)", key, extra, g, want.why, wantVerbs)
					}
					if len(missing) > 0 {
						t.Errorf("%s lacks %v on %s, which %s needs", key, missing, g, want.why)
					}
				}
			}
		})
	}
	for key := range got {
		if !known[key] {
			t.Errorf("%s is not in expectedRoles of rbac_test.go: add it with exactly the verbs its binary uses", key)
		}
	}
}

// The sidecar reads the requested size and writes only the status subresource: a grant to
// change a PVC (its spec) would let it fight the user and statefulset-resizer.
func TestSidecarNeverWritesPVCSpec(t *testing.T) {
	got := roles(t)
	for _, key := range []string{"ClusterRole/csi-resizer", "ClusterRole/csi-resizer-controller-expand-secrets", "Role/csi-resizer-leader-election"} {
		for g, verbs := range flatten(got[key]) {
			if g.group != "" || g.resource != "persistentvolumeclaims" {
				continue
			}
			for _, v := range verbs {
				if v == "update" || v == "patch" || v == "create" || v == "delete" || v == "deletecollection" {
					t.Errorf("%s may %s persistentvolumeclaims: the sidecar must never change a PVC's spec (status goes through persistentvolumeclaims/status)", key, v)
				}
			}
		}
	}
}

// statefulset-resizer writes only its own webhook configuration and its own Secret: a grant on
// every webhook configuration would let it intercept any request, one on every Secret read them all.
func TestWebhookGrantsNamed(t *testing.T) {
	for key, rules := range roles(t) {
		for i, r := range rules {
			for _, res := range r.Resources {
				named := len(r.ResourceNames) > 0
				switch {
				case strings.HasSuffix(res, "webhookconfigurations") && !named:
					t.Errorf("%s rule %d grants %v on every %s; name the webhook's own configuration in resourceNames", key, i, r.Verbs, res)
				case res == "secrets" && strings.HasPrefix(key, "Role/statefulset-resizer") && !named && !slices.Equal(r.Verbs, []string{"create"}):
					t.Errorf("%s rule %d grants %v on every Secret of its namespace; only create may be unnamed", key, i, r.Verbs)
				}
			}
		}
	}
}

// Leader election is namespaced: its Lease writes must not become cluster-wide. The one
// cluster-wide Lease right is statefulset-resizer's list, with which it refuses to start while
// another install (another namespace) holds a Lease of the same name.
func TestLeasesOnlyInRoles(t *testing.T) {
	for key, rules := range roles(t) {
		if !strings.HasPrefix(key, "ClusterRole/") {
			continue
		}
		for g, verbs := range flatten(rules) {
			if g.resource != "leases" {
				continue
			}
			if key != "ClusterRole/statefulset-resizer" || !slices.Equal(verbs, []string{"list"}) {
				t.Errorf("%s grants %v on %s cluster-wide; leader election needs it only in its own namespace (a Role)", key, verbs, g)
			}
		}
	}
}

// The admission webhook runs with its own ServiceAccount, which may write nothing but its
// certificate (its Secret, its configuration's caBundle), and the controller's ServiceAccount has
// neither: the token of the process that parses the apiserver's requests can do nothing else,
// and the controller's cannot redirect admission.
func TestWebhookServiceAccountOnlyItsCertificate(t *testing.T) {
	rs := roles(t)
	bound := map[string][]string{} // ServiceAccount -> "Kind/name" of its roles
	for _, m := range loadManifests(t) {
		if m.kind != "RoleBinding" && m.kind != "ClusterRoleBinding" {
			continue
		}
		var b rbacv1.RoleBinding
		if err := yaml.UnmarshalStrict(m.doc, &b); err != nil {
			t.Fatalf("%s: %v", m.file, err)
		}
		for _, s := range b.Subjects {
			bound[s.Name] = append(bound[s.Name], b.RoleRef.Kind+"/"+b.RoleRef.Name)
		}
	}
	webhookRoles := bound["statefulset-resizer-webhook"]
	if len(webhookRoles) == 0 {
		t.Fatal("no role is bound to the ServiceAccount statefulset-resizer-webhook")
	}
	for _, key := range webhookRoles {
		for g, verbs := range flatten(rs[key]) {
			if g.resource != "secrets" && g.resource != "mutatingwebhookconfigurations" {
				t.Errorf("%s (bound to statefulset-resizer-webhook) grants %v on %s; the webhook decides from the admission request alone", key, verbs, g)
			}
		}
	}
	for _, key := range bound["statefulset-resizer"] {
		for g := range flatten(rs[key]) {
			if g.resource == "secrets" || g.resource == "mutatingwebhookconfigurations" {
				t.Errorf("%s (bound to the controller's statefulset-resizer) grants %s: that is the webhook's, not the controller's", key, g)
			}
		}
	}
}

// Every binding refers to a role shipped here, and binds a ServiceAccount.
func TestBindingsReferToShippedRoles(t *testing.T) {
	rs := roles(t)
	for _, m := range loadManifests(t) {
		if m.kind != "RoleBinding" && m.kind != "ClusterRoleBinding" {
			continue
		}
		var b rbacv1.RoleBinding // same fields as ClusterRoleBinding
		if err := yaml.UnmarshalStrict(m.doc, &b); err != nil {
			t.Errorf("%s: %s %q does not decode strictly: %v", m.file, m.kind, m.name, err)
			continue
		}
		if _, ok := rs[b.RoleRef.Kind+"/"+b.RoleRef.Name]; !ok {
			t.Errorf("%s: %s %q refers to %s %q, which deploy/kubernetes does not define", m.file, m.kind, m.name, b.RoleRef.Kind, b.RoleRef.Name)
		}
		if m.kind == "ClusterRoleBinding" && b.RoleRef.Kind != "ClusterRole" {
			t.Errorf("%s: ClusterRoleBinding %q refers to a %s", m.file, m.name, b.RoleRef.Kind)
		}
		for _, s := range b.Subjects {
			if s.Kind != rbacv1.ServiceAccountKind {
				t.Errorf("%s: %s %q binds %s %q; only ServiceAccounts are bound", m.file, m.kind, m.name, s.Kind, s.Name)
			}
		}
	}
}

// loadManifests must see the roles at all: guards against a walk that silently finds nothing.
func TestManifestsFound(t *testing.T) {
	n := 0
	for _, m := range loadManifests(t) {
		if bytes.Contains(m.doc, []byte("rbac.authorization.k8s.io")) {
			n++
		}
	}
	if n < len(expectedRoles) {
		t.Fatalf("found %d RBAC documents under deploy/kubernetes, want at least %d", n, len(expectedRoles))
	}
}
