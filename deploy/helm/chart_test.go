// Package helm holds no code: its tests render the Helm charts deploy/helm/statefulset-resizer and
// deploy/helm/volume-autoscaler (autoscaler_test.go) with a real helm binary (HELM, else the one
// hack/build-helm.sh has built) and check each against its kustomize base under deploy/kubernetes
// (same RBAC, same objects) and against its command's contract (flags, names, for
// statefulset-resizer the MutatingWebhookConfiguration). Without helm the tests skip with one line
// saying how to build it, except under CI=true, where they fail.
package helm

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/desired"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/webhook"
)

const (
	chart     = "statefulset-resizer"
	release   = "statefulset-resizer" // the kustomize base's names
	namespace = "csi-resizer-system"
	base      = "../kubernetes/statefulset-resizer"

	optInLabel  = "csi-resizer.io/volume-claim-template-updates"
	optInValue  = "enabled"
	webhookPath = "/mutate-statefulset-volume-claim-templates"
)

// controllerFlags are the flags of `statefulset-resizer --help`: the controller's and
// component-base's logging flags (as csi-resizer's). webhookFlags are those of `statefulset-resizer
// webhook --help`. A chart arg naming anything else would stop the binary at start.
var (
	controllerFlags = []string{
		"version", "kubeconfig", "workers", "kube-api-qps", "kube-api-burst", "resync-period",
		"leader-election", "leader-election-namespace", "leader-election-lease-duration",
		"leader-election-renew-deadline", "leader-election-retry-period", "leader-election-labels",
		"http-endpoint", "metrics-path",
		"logging-format", "v", "vmodule", "log-flush-frequency",
		"recreate", "recreate-record-namespace",
	}
	webhookFlags = []string{
		"version", "kubeconfig", "kube-api-qps", "kube-api-burst", "http-endpoint", "metrics-path",
		"logging-format", "v", "vmodule", "log-flush-frequency",
		"webhook-port", "webhook-service-name", "webhook-namespace", "webhook-secret-name",
		"webhook-configuration-name", "webhook-host", "webhook-tls-cert-file", "webhook-tls-private-key-file",
		"webhook-certificate-check-interval", "webhook-shutdown-delay",
	}
)

// The Deployments' names with the release name statefulset-resizer (the kustomize base's).
const (
	controllerDeployment = release
	webhookDeployment    = release + "-webhook"
)

var helmPath struct {
	once sync.Once
	path string
	err  error
}

// helmBinary returns $HELM, else the helm hack/build-helm.sh has built (it does not build it: a
// cold build takes minutes; `make helm-check` does).
func helmBinary(t *testing.T) string {
	t.Helper()
	helmPath.once.Do(func() {
		if p := os.Getenv("HELM"); p != "" {
			helmPath.path = p
			if _, err := os.Stat(p); err != nil {
				helmPath.err = fmt.Errorf("HELM=%s: %w", p, err)
			}
			return
		}
		out, err := exec.Command("bash", filepath.Join("..", "..", "hack", "build-helm.sh"), "--print-path").Output()
		if err != nil {
			helmPath.err = fmt.Errorf("hack/build-helm.sh --print-path: %w", err)
			return
		}
		p := strings.TrimSpace(string(out))
		if _, err := os.Stat(p); err != nil {
			helmPath.err = fmt.Errorf("helm is not built (%s missing): run `bash hack/build-helm.sh` or `make helm-check`, or set HELM=/path/to/helm", p)
			return
		}
		helmPath.path = p
	})
	if helmPath.err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v; CI=true: the chart must be checked in CI", helmPath.err)
		}
		t.Skip(helmPath.err)
	}
	return helmPath.path
}

// object is one document of a render or of the kustomize base.
type object struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	doc []byte
}

func (o object) key() string { return o.Kind + "/" + o.Metadata.Name }

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

func splitDocs(t *testing.T, where string, data []byte) []object {
	t.Helper()
	var out []object
	for _, doc := range docSeparator.Split(string(data), -1) {
		var o object
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("%s: not valid YAML: %v\n%s", where, err, doc)
		}
		if o.Kind == "" {
			continue // comments only
		}
		o.doc = []byte(doc)
		out = append(out, o)
	}
	return out
}

// renderErr runs `helm template` of the chart as release `statefulset-resizer` in csi-resizer-system.
func renderErr(t *testing.T, set ...string) ([]byte, error) {
	t.Helper()
	return renderChartErr(t, chart, release, set...)
}

// renderChartErr runs `helm template release chartDir` in csi-resizer-system with the --set values.
func renderChartErr(t *testing.T, chartDir, release string, set ...string) ([]byte, error) {
	t.Helper()
	args := []string{"template", release, chartDir, "--namespace", namespace}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	cmd := exec.Command(helmBinary(t), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

func render(t *testing.T, set ...string) []object {
	t.Helper()
	out, err := renderErr(t, set...)
	if err != nil {
		t.Fatal(err)
	}
	return splitDocs(t, fmt.Sprintf("helm template --set %v", set), out)
}

// baseObjects reads the objects of the kustomize base and of its webhook component (kustomize
// only adds the namespace and the part-of label to them).
func baseObjects(t *testing.T) []object {
	t.Helper()
	return kustomizeObjects(t, base, filepath.Join(base, "webhook"))
}

// kustomizeObjects reads the objects of the YAML files of dirs (the first must have some),
// leaving out kustomization.yaml and JSON patches.
func kustomizeObjects(t *testing.T, dirs ...string) []object {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dirs[0], "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no YAML in %s: %v", dirs[0], err)
	}
	for _, d := range dirs[1:] {
		more, _ := filepath.Glob(filepath.Join(d, "*.yaml"))
		files = append(files, more...)
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
		var patch []any
		if yaml.Unmarshal(data, &patch) == nil {
			continue // a JSON patch (a YAML list), not objects
		}
		out = append(out, splitDocs(t, f, data)...)
	}
	return out
}

func find(t *testing.T, objs []object, kind, name string) object {
	t.Helper()
	for _, o := range objs {
		if o.Kind == kind && o.Metadata.Name == name {
			return o
		}
	}
	var have []string
	for _, o := range objs {
		have = append(have, o.key())
	}
	t.Fatalf("no %s %q (have %v)", kind, name, have)
	return object{}
}

// checkBaseMetadata checks each object of a kustomize base against the chart's of the same kind
// and name: the base's labels, the kustomization's part-of label, the release namespace for
// namespaced kinds.
func checkBaseMetadata(t *testing.T, objs, baseObjs []object) {
	t.Helper()
	for _, b := range baseObjs {
		c := find(t, objs, b.Kind, b.Metadata.Name)
		for k, v := range b.Metadata.Labels {
			if c.Metadata.Labels[k] != v {
				t.Errorf("%s: label %s=%q, the kustomize base has %q", c.key(), k, c.Metadata.Labels[k], v)
			}
		}
		if c.Metadata.Labels["app.kubernetes.io/part-of"] != "csi-resizer" {
			t.Errorf("%s: no label app.kubernetes.io/part-of=csi-resizer (the kustomization adds it)", c.key())
		}
		clusterScoped := c.Kind == "ClusterRole" || c.Kind == "ClusterRoleBinding" || c.Kind == "MutatingWebhookConfiguration"
		if !clusterScoped && c.Metadata.Namespace != namespace {
			t.Errorf("%s: namespace %q, want the release namespace %q", c.key(), c.Metadata.Namespace, namespace)
		}
	}
}

// decodeKind decodes every rendered object of a kind.
func decodeKind[T any](t *testing.T, objs []object, kind string) []T {
	t.Helper()
	var out []T
	for _, o := range objs {
		if o.Kind == kind {
			var v T
			decode(t, o, &v)
			out = append(out, v)
		}
	}
	return out
}

func decode(t *testing.T, o object, into any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(o.doc, into); err != nil {
		t.Fatalf("%s does not decode strictly: %v\n%s", o.key(), err, o.doc)
	}
}

// permissions flattens RBAC rules into "verb group/resource[/name]" lines, sorted, so that two
// roles compare equal whatever the grouping of their rules.
func permissions(rules []rbacv1.PolicyRule) []string {
	var out []string
	for _, r := range rules {
		names := r.ResourceNames
		if len(names) == 0 {
			names = []string{""}
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, n := range names {
					for _, v := range r.Verbs {
						p := v + " " + g + "/" + res
						if n != "" {
							p += "/" + n
						}
						if !slices.Contains(out, p) {
							out = append(out, p)
						}
					}
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// roles maps "Kind/name" of every Role and ClusterRole to its permissions.
func roles(t *testing.T, objs []object) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, o := range objs {
		if o.Kind != "Role" && o.Kind != "ClusterRole" {
			continue
		}
		var r rbacv1.ClusterRole
		decode(t, o, &r)
		out[o.key()] = permissions(r.Rules)
	}
	return out
}

func diffRoles(t *testing.T, what string, got, want map[string][]string) {
	t.Helper()
	for key, w := range want {
		g, ok := got[key]
		if !ok {
			t.Errorf("%s: %s missing (the kustomize base has it: %v)", what, key, w)
			continue
		}
		for _, p := range w {
			if !slices.Contains(g, p) {
				t.Errorf("%s: %s lacks %q, which the kustomize base grants", what, key, p)
			}
		}
		for _, p := range g {
			if !slices.Contains(w, p) {
				t.Errorf("%s: %s grants %q, which the kustomize base does not", what, key, p)
			}
		}
	}
	for key, g := range got {
		if _, ok := want[key]; !ok {
			t.Errorf("%s: %s (%v) is not in the kustomize base", what, key, g)
		}
	}
}

// isWebhookPermission: what only the webhook needs (its certificate Secret, its caBundle).
func isWebhookPermission(p string) bool {
	return strings.Contains(p, " /secrets") || strings.Contains(p, "admissionregistration.k8s.io/mutatingwebhookconfigurations")
}

// The chart grants exactly the kustomize base's permissions; without the webhook, the same minus
// the webhook's; without leader election, no Lease Role.
func TestChartRBACEqualsKustomizeBase(t *testing.T) {
	helmBinary(t) // skips, or fails under CI=true, without helm
	want := roles(t, baseObjects(t))
	if len(want) < 2 {
		t.Fatalf("the kustomize base %s has %d roles, want the ClusterRole and the leader-election Role at least", base, len(want))
	}
	diffRoles(t, "default values", roles(t, render(t)), want)

	noWebhook := map[string][]string{}
	for key, ps := range want {
		var kept []string
		for _, p := range ps {
			if !isWebhookPermission(p) {
				kept = append(kept, p)
			}
		}
		if len(kept) > 0 {
			noWebhook[key] = kept
		}
	}
	diffRoles(t, "webhook.enabled=false", roles(t, render(t, "webhook.enabled=false")), noWebhook)

	noLeader := map[string][]string{}
	for key, ps := range want {
		// The leader-election Role writes the Lease; the ClusterRole's list (the one-install check) stays.
		if !slices.Contains(ps, "update coordination.k8s.io/leases") {
			noLeader[key] = ps
		}
	}
	diffRoles(t, "replicas=1,leaderElection.enabled=false", roles(t, render(t, "replicas=1", "leaderElection.enabled=false")), noLeader)
}

// Every role is bound to one of the chart's ServiceAccounts in the release namespace (the webhook's
// roles to the webhook's, the others to the controller's), and every binding refers to a
// rendered role.
func TestChartBindings(t *testing.T) {
	helmBinary(t) // skips, or fails under CI=true, without helm
	for _, c := range []struct {
		set                 []string
		controller, webhook string
		// created are the ServiceAccounts the chart renders.
		created []string
	}{
		{nil, release, release + "-webhook", []string{release, release + "-webhook"}},
		{[]string{"webhook.enabled=false"}, release, "", []string{release}},
		{[]string{"serviceAccount.create=false", "serviceAccount.name=existing"}, "existing", release + "-webhook", []string{release + "-webhook"}},
		{[]string{"webhook.serviceAccount.create=false", "webhook.serviceAccount.name=existing-webhook"}, release, "existing-webhook", []string{release}},
	} {
		t.Run(strings.Join(c.set, ","), func(t *testing.T) {
			checkBindings(t, render(t, c.set...), c.created, func(roleRef string) string {
				if strings.Contains(roleRef, "webhook") {
					return c.webhook
				}
				return c.controller
			})
		})
	}
}

// checkBindings: the chart renders the ServiceAccounts created, every binding binds a rendered
// role to the ServiceAccount saFor(its roleRef's name) in the release namespace, and every role
// is bound.
func checkBindings(t *testing.T, objs []object, created []string, saFor func(roleRef string) string) {
	t.Helper()
	var got []string
	for _, o := range objs {
		if o.Kind == "ServiceAccount" {
			got = append(got, o.Metadata.Name)
		}
	}
	if !slices.Equal(got, created) {
		t.Errorf("ServiceAccounts rendered: %v, want %v", got, created)
	}
	rs := roles(t, objs)
	bound := map[string]bool{}
	for _, o := range objs {
		if o.Kind != "RoleBinding" && o.Kind != "ClusterRoleBinding" {
			continue
		}
		var b rbacv1.RoleBinding
		decode(t, o, &b)
		ref := b.RoleRef.Kind + "/" + b.RoleRef.Name
		if _, ok := rs[ref]; !ok {
			t.Errorf("%s refers to %s, which the chart does not render", o.key(), ref)
		}
		bound[ref] = true
		want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: saFor(b.RoleRef.Name), Namespace: namespace}}
		if !reflect.DeepEqual(b.Subjects, want) {
			t.Errorf("%s subjects %+v, want %+v", o.key(), b.Subjects, want)
		}
		if o.Kind == "RoleBinding" && o.Metadata.Namespace != namespace {
			t.Errorf("%s in namespace %q, want %q", o.key(), o.Metadata.Namespace, namespace)
		}
	}
	for ref := range rs {
		if !bound[ref] {
			t.Errorf("%s is bound to nothing", ref)
		}
	}
}

// With the release name statefulset-resizer, the chart renders every object of the kustomize
// base under the same name, with its labels, and the same Deployment (pod and container
// settings, the base's args and ports among the chart's).
func TestChartMatchesKustomizeBaseObjects(t *testing.T) {
	helmBinary(t) // skips, or fails under CI=true, without helm
	objs := render(t)
	checkBaseMetadata(t, objs, baseObjects(t))

	for _, name := range []string{controllerDeployment, webhookDeployment} {
		compareDeployment(t, name, objs)
	}

	var bs, cs corev1.Service
	decode(t, find(t, baseObjects(t), "Service", "statefulset-resizer-metrics"), &bs)
	decode(t, find(t, objs, "Service", "statefulset-resizer-metrics"), &cs)
	if bs.Spec.ClusterIP != cs.Spec.ClusterIP || !reflect.DeepEqual(bs.Spec.Ports, cs.Spec.Ports) {
		t.Errorf("metrics Service spec %+v, the base has %+v", cs.Spec, bs.Spec)
	}
}

// compareDeployment checks that the chart's Deployment name has the kustomize base's pod and
// container settings, and the base's args and ports among its own.
func compareDeployment(t *testing.T, name string, objs []object) {
	t.Helper()
	var bd, cd appsv1.Deployment
	decode(t, find(t, baseObjects(t), "Deployment", name), &bd)
	decode(t, find(t, objs, "Deployment", name), &cd)
	if *cd.Spec.Replicas != *bd.Spec.Replicas || *cd.Spec.RevisionHistoryLimit != *bd.Spec.RevisionHistoryLimit {
		t.Errorf("Deployment %s replicas/revisionHistoryLimit %d/%d, the base has %d/%d", name,
			*cd.Spec.Replicas, *cd.Spec.RevisionHistoryLimit, *bd.Spec.Replicas, *bd.Spec.RevisionHistoryLimit)
	}
	bp, cp := bd.Spec.Template.Spec, cd.Spec.Template.Spec
	for field, pair := range map[string][2]any{
		"serviceAccountName":            {bp.ServiceAccountName, cp.ServiceAccountName},
		"terminationGracePeriodSeconds": {bp.TerminationGracePeriodSeconds, cp.TerminationGracePeriodSeconds},
		"pod securityContext":           {bp.SecurityContext, cp.SecurityContext},
		"number of containers":          {len(bp.Containers), len(cp.Containers)},
		"container name":                {bp.Containers[0].Name, cp.Containers[0].Name},
		"image":                         {bp.Containers[0].Image, cp.Containers[0].Image},
		"command":                       {bp.Containers[0].Command, cp.Containers[0].Command},
		"livenessProbe":                 {bp.Containers[0].LivenessProbe, cp.Containers[0].LivenessProbe},
		"readinessProbe":                {bp.Containers[0].ReadinessProbe, cp.Containers[0].ReadinessProbe},
		"resources":                     {bp.Containers[0].Resources, cp.Containers[0].Resources},
		"container securityContext":     {bp.Containers[0].SecurityContext, cp.Containers[0].SecurityContext},
		"terminationMessagePolicy":      {bp.Containers[0].TerminationMessagePolicy, cp.Containers[0].TerminationMessagePolicy},
	} {
		if !reflect.DeepEqual(pair[0], pair[1]) {
			t.Errorf("Deployment %s: %s differs from the kustomize base:\n chart: %+v\n base:  %+v", name, field, pair[1], pair[0])
		}
	}
	for _, a := range bp.Containers[0].Args {
		if !slices.Contains(cp.Containers[0].Args, a) {
			t.Errorf("Deployment %s args %v lack the kustomize base's %q", name, cp.Containers[0].Args, a)
		}
	}
	for _, p := range bp.Containers[0].Ports {
		if !slices.Contains(cp.Containers[0].Ports, p) {
			t.Errorf("Deployment %s ports %+v lack the kustomize base's %+v", name, cp.Containers[0].Ports, p)
		}
	}
	for k, v := range bd.Spec.Selector.MatchLabels {
		if cd.Spec.Selector.MatchLabels[k] != v {
			t.Errorf("Deployment %s selector %v does not include the base's %s=%s", name, cd.Spec.Selector.MatchLabels, k, v)
		}
	}
}

// deployment decodes the render's Deployment name (with the release name statefulset-resizer:
// controllerDeployment or webhookDeployment).
func deployment(t *testing.T, objs []object, name string) appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	decode(t, find(t, objs, "Deployment", name), &d)
	return d
}

// deploymentArgs returns the container's args of the Deployment name, failing on any arg that
// is not a flag of its mode of statefulset-resizer (the webhook's args start with the
// subcommand).
func deploymentArgs(t *testing.T, objs []object, name string) []string {
	t.Helper()
	d := deployment(t, objs, name)
	args := d.Spec.Template.Spec.Containers[0].Args
	known, flags := controllerFlags, args
	if strings.HasSuffix(name, "-webhook") {
		if len(args) == 0 || args[0] != "webhook" {
			t.Fatalf("Deployment %s args %q do not start with the webhook subcommand", name, args)
		}
		known, flags = webhookFlags, args[1:]
	}
	for _, a := range flags {
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !slices.Contains(known, name) {
			t.Errorf("Deployment arg %q is not a flag of its mode of statefulset-resizer (known: %v)", a, known)
		}
	}
	return args
}

func TestChartDeploymentArgs(t *testing.T) {
	helmBinary(t) // skips, or fails under CI=true, without helm
	webhookArgs := []string{
		"webhook",
		"--webhook-port=9443",
		"--webhook-service-name=statefulset-resizer",
		"--webhook-secret-name=statefulset-resizer-webhook-tls",
		"--webhook-configuration-name=statefulset-resizer",
		"--webhook-shutdown-delay=10s",
		"--http-endpoint=:8080",
	}
	common := []string{"--http-endpoint=:8080", "--workers=10"}
	logs := []string{"--logging-format=text", "--v=0"}
	for _, c := range []struct {
		set              []string
		want, webhookArg []string
	}{
		{nil, slices.Concat([]string{"--leader-election"}, common, []string{"--recreate=true"}, logs), slices.Concat(webhookArgs, logs)},
		{[]string{"webhook.enabled=false"}, slices.Concat([]string{"--leader-election"}, common, []string{"--recreate=true"}, logs), nil},
		{[]string{"replicas=1", "leaderElection.enabled=false", "webhook.enabled=false", "recreate=false", "logVerbosity=4", "logFormat=json"},
			slices.Concat(common, []string{"--recreate=false", "--logging-format=json", "--v=4"}), nil},
		{[]string{"extraArgs={--resync-period=5m,--kube-api-qps=10}", "webhook.extraArgs={--kube-api-qps=3}"},
			slices.Concat([]string{"--leader-election"}, common, []string{"--recreate=true"}, logs, []string{"--resync-period=5m", "--kube-api-qps=10"}),
			slices.Concat(webhookArgs, logs, []string{"--kube-api-qps=3"})},
		{[]string{"webhook.shutdownDelaySeconds=0"}, slices.Concat([]string{"--leader-election"}, common, []string{"--recreate=true"}, logs),
			slices.Concat(webhookArgs[:5], []string{"--webhook-shutdown-delay=0s", "--http-endpoint=:8080"}, logs)},
	} {
		t.Run(strings.Join(c.set, ","), func(t *testing.T) {
			objs := render(t, c.set...)
			if got := deploymentArgs(t, objs, controllerDeployment); !slices.Equal(got, c.want) {
				t.Errorf("controller args\n got: %q\nwant: %q", got, c.want)
			}
			if c.webhookArg == nil {
				for _, o := range objs {
					if o.Kind == "Deployment" && o.Metadata.Name != controllerDeployment {
						t.Errorf("webhook.enabled=false renders %s", o.key())
					}
				}
				return
			}
			if got := deploymentArgs(t, objs, webhookDeployment); !slices.Equal(got, c.webhookArg) {
				t.Errorf("webhook args\n got: %q\nwant: %q", got, c.webhookArg)
			}
		})
	}
}

// flagValue returns the value of --name=value in args.
func flagValue(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// The names the webhook is given are those of the objects the chart renders: the Service it puts
// in its certificate, the MutatingWebhookConfiguration it injects the CA into (and may patch), the
// port behind the Service; the webhook runs with its own ServiceAccount, the one the webhook roles
// are bound to.
func TestChartWebhookNamesAgree(t *testing.T) {
	helmBinary(t) // skips, or fails under CI=true, without helm
	for _, c := range []struct {
		set      []string
		fullname string
	}{
		{nil, release},
		{[]string{"fullnameOverride=sr", "webhook.port=10443", "webhook.metricsPort=9090"}, "sr"},
	} {
		t.Run(strings.Join(c.set, ","), func(t *testing.T) {
			objs := render(t, c.set...)
			args := deploymentArgs(t, objs, c.fullname+"-webhook")
			svcName := flagValue(args, "webhook-service-name")
			var svc corev1.Service
			decode(t, find(t, objs, "Service", svcName), &svc)
			mwcName := flagValue(args, "webhook-configuration-name")
			mwc := find(t, objs, "MutatingWebhookConfiguration", mwcName)
			var cfg admissionv1.MutatingWebhookConfiguration
			decode(t, mwc, &cfg)
			for _, w := range cfg.Webhooks {
				if s := w.ClientConfig.Service; s == nil || s.Name != svcName || s.Namespace != namespace {
					t.Errorf("webhook %s calls %+v, want Service %s/%s", w.Name, s, namespace, svcName)
				}
			}
			var cr rbacv1.ClusterRole
			decode(t, find(t, objs, "ClusterRole", c.fullname+"-webhook"), &cr)
			want := []string{
				"get admissionregistration.k8s.io/mutatingwebhookconfigurations/" + mwcName,
				"patch admissionregistration.k8s.io/mutatingwebhookconfigurations/" + mwcName,
			}
			if got := permissions(cr.Rules); !slices.Equal(got, want) {
				t.Errorf("ClusterRole %s grants %q, want %q", cr.Name, got, want)
			}

			d := deployment(t, objs, c.fullname+"-webhook")
			if sa := d.Spec.Template.Spec.ServiceAccountName; sa != c.fullname+"-webhook" {
				t.Errorf("the webhook runs as ServiceAccount %q, want its own %q", sa, c.fullname+"-webhook")
			}
			ports := map[string]int32{}
			for _, p := range d.Spec.Template.Spec.Containers[0].Ports {
				ports[p.Name] = p.ContainerPort
			}
			if got := fmt.Sprint(ports["webhook"]); got != flagValue(args, "webhook-port") {
				t.Errorf("container port webhook %s, --webhook-port=%s", got, flagValue(args, "webhook-port"))
			}
			if got := ":" + fmt.Sprint(ports["http-metrics"]); got != flagValue(args, "http-endpoint") {
				t.Errorf("container port http-metrics %s, --http-endpoint=%s", got, flagValue(args, "http-endpoint"))
			}
			if len(svc.Spec.Ports) != 1 || fmt.Sprint(svc.Spec.Ports[0].Port) != flagValue(args, "webhook-port") || svc.Spec.Ports[0].TargetPort.StrVal != "webhook" {
				t.Errorf("webhook Service ports %+v, want --webhook-port -> the container port named webhook", svc.Spec.Ports)
			}
			for _, w := range cfg.Webhooks {
				if s := w.ClientConfig.Service; s == nil || s.Port == nil || *s.Port != svc.Spec.Ports[0].Port {
					t.Errorf("webhook %s calls port %+v, the Service listens on %d", w.Name, s, svc.Spec.Ports[0].Port)
				}
			}
			wantEnv := []corev1.EnvVar{{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}
			if env := d.Spec.Template.Spec.Containers[0].Env; !reflect.DeepEqual(env, wantEnv) {
				t.Errorf("container env %+v, want POD_NAMESPACE from metadata.namespace (the webhook's namespace)", env)
			}
			if svc.Spec.ClusterIP == corev1.ClusterIPNone {
				t.Errorf("webhook Service is headless: the apiserver calls a webhook Service by its cluster IP")
			}
			if !reflect.DeepEqual(svc.Spec.Selector, d.Spec.Selector.MatchLabels) {
				t.Errorf("webhook Service selects %v, the webhook Deployment's pods are %v", svc.Spec.Selector, d.Spec.Selector.MatchLabels)
			}
			controller := deployment(t, objs, c.fullname)
			if args := controller.Spec.Template.Spec.Containers[0].Args; slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--webhook-") }) {
				t.Errorf("the controller's Deployment has webhook flags: %q", args)
			}
		})
	}
}

// CEL of the configuration's matchConditions: the live object has a pending change; the writer
// is the controller (a ServiceAccount of its name) or the garbage collector.
const (
	pendingChange = "oldObject != null && has(oldObject.metadata.annotations) && '" + desired.Annotation + "' in oldObject.metadata.annotations"
	exemptWriter  = "request.userInfo.username in ['system:serviceaccount:kube-system:generic-garbage-collector', 'system:kube-controller-manager'] || " +
		"(request.userInfo.username.startsWith('system:serviceaccount:') && request.userInfo.username.endsWith(':" + release + "'))"
)

// The MutatingWebhookConfiguration is the one issues 18 and 31 specify: opt-in by the
// StatefulSet's or its namespace's label, UPDATE of apps/v1 statefulsets only, no side effects, no
// caBundle (the webhook injects it); failurePolicy Ignore, except for an update of an object with
// a pending change by anyone but the controller and the garbage collector: Fail, in entries whose
// name says so. The Ignore entries' condition is the negation of the Fail entries', so that no
// request goes to two entries.
func TestChartWebhookConfiguration(t *testing.T) {
	helmBinary(t) // skips, or fails under CI=true, without helm
	objs := render(t)
	var cfg admissionv1.MutatingWebhookConfiguration
	decode(t, find(t, objs, "MutatingWebhookConfiguration", release), &cfg)
	ignore, fail := admissionv1.Ignore, admissionv1.Fail
	usual := []admissionv1.MatchCondition{{Name: "no-pending-change-or-controller-or-garbage-collector", Expression: "!(" + pendingChange + ") || " + exemptWriter}}
	pending := []admissionv1.MatchCondition{{Name: "pending-change", Expression: pendingChange},
		{Name: "not-the-controller-or-the-garbage-collector", Expression: "!(" + exemptWriter + ")"}}
	entries := []struct {
		name       string
		policy     *admissionv1.FailurePolicyType
		conditions []admissionv1.MatchCondition
	}{
		{"statefulsets.volume-claim-templates.csi-resizer.io", &ignore, usual},
		{"namespaces.volume-claim-templates.csi-resizer.io", &ignore, usual},
		{"pending-volume-claim-template-change.statefulsets.csi-resizer.io", &fail, pending},
		{"pending-volume-claim-template-change.namespaces.csi-resizer.io", &fail, pending},
	}
	if len(cfg.Webhooks) != len(entries) {
		t.Fatalf("%d webhooks, want %d (opt-in by the StatefulSet's label, by the namespace's; without and with a pending change)", len(cfg.Webhooks), len(entries))
	}
	none, never, equivalent, scope := admissionv1.SideEffectClassNone, admissionv1.NeverReinvocationPolicy, admissionv1.Equivalent, admissionv1.NamespacedScope
	for i, w := range cfg.Webhooks {
		want := admissionv1.MutatingWebhook{
			Name: entries[i].name,
			ClientConfig: admissionv1.WebhookClientConfig{Service: &admissionv1.ServiceReference{
				Namespace: namespace, Name: "statefulset-resizer", Path: ptr(webhookPath), Port: ptr(int32(9443)),
			}},
			Rules: []admissionv1.RuleWithOperations{{
				Operations: []admissionv1.OperationType{admissionv1.Update},
				Rule:       admissionv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"statefulsets"}, Scope: &scope},
			}},
			FailurePolicy:           entries[i].policy,
			MatchPolicy:             &equivalent,
			NamespaceSelector:       w.NamespaceSelector,
			ObjectSelector:          w.ObjectSelector,
			SideEffects:             &none,
			TimeoutSeconds:          ptr(int32(5)),
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      &never,
			MatchConditions:         entries[i].conditions,
		}
		if !reflect.DeepEqual(w, want) {
			got, _ := yaml.Marshal(w)
			exp, _ := yaml.Marshal(want)
			t.Errorf("webhook %d:\n%s\nwant:\n%s", i, got, exp)
		}
		if strings.Count(w.Name, ".") < 2 {
			t.Errorf("webhook name %q is not fully qualified (the apiserver wants at least three segments)", w.Name)
		}
	}

	// Which entries call the webhook, for a StatefulSet with or without the label in a namespace
	// with or without it: when either opts in, exactly one of the Ignore entries and one of the
	// Fail entries, whose conditions exclude each other; none otherwise.
	selector := func(s *metav1.LabelSelector) labels.Selector {
		if s == nil {
			return labels.Everything()
		}
		sel, err := metav1.LabelSelectorAsSelector(s)
		if err != nil {
			t.Fatalf("selector %+v: %v", s, err)
		}
		return sel
	}
	optIn := labels.Set{optInLabel: optInValue}
	for _, c := range []struct {
		sts, ns labels.Set
		want    int
	}{
		{optIn, nil, 1},
		{nil, optIn, 1},
		{optIn, optIn, 1},
		{nil, nil, 0},
		{labels.Set{optInLabel: "disabled"}, nil, 0},
		{labels.Set{optInLabel: "disabled"}, optIn, 0}, // opted out of its namespace's opt-in
		{labels.Set{"app": "db"}, labels.Set{"team": "a"}, 0},
	} {
		n := map[admissionv1.FailurePolicyType]int{}
		for _, w := range cfg.Webhooks {
			if selector(w.ObjectSelector).Matches(c.sts) && selector(w.NamespaceSelector).Matches(c.ns) {
				n[*w.FailurePolicy]++
			}
		}
		if n[ignore] != c.want || n[fail] != c.want {
			t.Errorf("StatefulSet labels %v in a namespace with labels %v: %d Ignore and %d Fail entries match, want %d of each", c.sts, c.ns, n[ignore], n[fail], c.want)
		}
	}

	// The kustomize base, once it ships the webhook, must ship the same configuration.
	for _, b := range baseObjects(t) {
		if b.Kind != "MutatingWebhookConfiguration" {
			continue
		}
		var bc admissionv1.MutatingWebhookConfiguration
		decode(t, b, &bc)
		for i := range bc.Webhooks {
			if s := bc.Webhooks[i].ClientConfig.Service; s != nil {
				s.Namespace = namespace // filled in by the user's kustomization
			}
		}
		if bc.Name != cfg.Name || !reflect.DeepEqual(bc.Webhooks, cfg.Webhooks) {
			got, _ := yaml.Marshal(cfg)
			exp, _ := yaml.Marshal(bc)
			t.Errorf("the chart's MutatingWebhookConfiguration differs from the kustomize base's:\nchart:\n%s\nbase:\n%s", got, exp)
		}
	}

	for _, o := range render(t, "webhook.enabled=false") {
		if o.Kind == "MutatingWebhookConfiguration" || o.Metadata.Labels["app.kubernetes.io/component"] == "webhook" || strings.Contains(o.Metadata.Name, "webhook") {
			t.Errorf("webhook.enabled=false renders %s", o.key())
		}
	}
}

func ptr[T any](v T) *T { return &v }

// Bad values fail the render with a message naming the value and the fix.
func TestChartRefusesBadValues(t *testing.T) {
	helmBinary(t) // skips, or fails under CI=true, without helm
	for _, c := range []struct {
		set  []string
		want string
	}{
		{[]string{"leaderElection.enabled=false"}, "replicas=2 needs leaderElection.enabled=true"},
		{[]string{"serviceAccount.create=false"}, "serviceAccount.name is required when serviceAccount.create=false"},
		{[]string{"recreate=false"}, "recreate=false needs webhook.enabled=false"},
		{[]string{"logFormat=xml"}, "logFormat=xml: want text or json"},
		{[]string{"webhook.shutdownDelaySeconds=-1"}, "webhook.shutdownDelaySeconds=-1: want a whole number of seconds"},
		{[]string{"webhook.shutdownDelaySeconds=1.5"}, "webhook.shutdownDelaySeconds=1.5: want a whole number of seconds"},
		{[]string{"webhook.serviceAccount.create=false"}, "webhook.serviceAccount.name is required when webhook.serviceAccount.create=false"},
		{[]string{"webhook.serviceAccount.name=statefulset-resizer"}, "the webhook's ServiceAccount statefulset-resizer is the controller's"},
	} {
		_, err := renderErr(t, c.set...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--set %v: error %v, want one containing %q", c.set, err, c.want)
		}
	}
}

// The webhook's readiness probe is on its HTTPS port; the controller has none (compareDeployment
// checks both against the kustomize base).
func TestChartWebhookReadinessProbe(t *testing.T) {
	helmBinary(t) // skips, or fails under CI=true, without helm
	objs := render(t)
	probe := deployment(t, objs, webhookDeployment).Spec.Template.Spec.Containers[0].ReadinessProbe
	if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Scheme != corev1.URISchemeHTTPS || probe.HTTPGet.Path != webhook.ReadyPath || probe.HTTPGet.Port.StrVal != "webhook" {
		t.Errorf("the webhook's readinessProbe %+v, want HTTPS %s on the port named webhook", probe, webhook.ReadyPath)
	}
	for _, set := range [][]string{nil, {"webhook.enabled=false"}} {
		if got := deployment(t, render(t, set...), controllerDeployment).Spec.Template.Spec.Containers[0].ReadinessProbe; got != nil {
			t.Errorf("--set %v: the controller has readinessProbe %+v, want none (the webhook is not served there)", set, got)
		}
	}
}

// The pods' terminationGracePeriodSeconds covers a clean stop: the controller's is 30 s whatever
// the webhook (the workers' 10 s, the Lease release within the renew deadline's 10 s, 10 s of
// margin); the webhook's is its drain (--webhook-shutdown-delay) plus 20 s (requests under way,
// 5 s at most, and margin), 30 s with the kustomize component's 10 s drain.
func TestChartTerminationGracePeriod(t *testing.T) {
	helmBinary(t) // skips, or fails under CI=true, without helm
	for _, c := range []struct {
		set                 []string
		controller, webhook int64
		delay               string
	}{
		{nil, 30, 30, "10s"},
		{[]string{"webhook.enabled=false"}, 30, 0, ""},
		{[]string{"webhook.shutdownDelaySeconds=25"}, 30, 45, "25s"},
	} {
		objs := render(t, c.set...)
		if got := deployment(t, objs, controllerDeployment).Spec.Template.Spec.TerminationGracePeriodSeconds; got == nil || *got != c.controller {
			t.Errorf("--set %v: the controller's terminationGracePeriodSeconds %v, want %d", c.set, got, c.controller)
		}
		if c.webhook == 0 {
			continue
		}
		if got := deployment(t, objs, webhookDeployment).Spec.Template.Spec.TerminationGracePeriodSeconds; got == nil || *got != c.webhook {
			t.Errorf("--set %v: the webhook's terminationGracePeriodSeconds %v, want %d", c.set, got, c.webhook)
		}
		if got := flagValue(deploymentArgs(t, objs, webhookDeployment), "webhook-shutdown-delay"); got != c.delay {
			t.Errorf("--set %v: --webhook-shutdown-delay=%q, want %q", c.set, got, c.delay)
		}
	}
}
