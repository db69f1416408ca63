//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/controller"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/desired"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/recreate"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/status"
	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// The ValidatingAdmissionPolicies of deploy/kubernetes/statefulset-resizer/policy and of the Helm
// chart, enforced by a real kube-apiserver: each write the policies forbid is refused, as the
// ServiceAccount it confines (impersonated), with the policy's message, and each write the
// re-create needs goes through.

// policyInstall is one install of the policies: the render to apply and the names in it.
type policyInstall struct {
	manifests                  string
	namespace                  string // the install's namespace
	controllerSA, webhookSA    string
	controller, guard, webhook string // policy names; each binding has its policy's name
	// exact: the policies name the install's ServiceAccounts exactly (Helm); else any
	// ServiceAccount whose name ends like them, in any namespace (kustomize).
	exact bool
}

// policyEnv is a cluster with one install of the policies, the fixtures and the clients.
type policyEnv struct {
	t       *testing.T
	ctx     context.Context
	cluster *framework.Cluster
	inst    policyInstall
	admin   kubernetes.Interface
	// ctl and hook are the controller's and the webhook's ServiceAccounts; alice is a user who
	// may write StatefulSets.
	ctl, hook, alice kubernetes.Interface
}

// policyClusterOptions: kube-controller-manager only for the controller that type-checks the
// policies and reports warnings in their status; no garbage collector, so an orphan-deleted
// StatefulSet stays terminating as long as the test looks at it.
var policyClusterOptions = framework.ClusterOptions{ControllerManager: true, Controllers: []string{"validatingadmissionpolicy-status-controller"}}

const (
	optedNS = "opted" // labelled csi-resizer.io/volume-claim-template-updates=enabled
	plainNS = "plain" // not labelled
)

// TestAdmissionPolicyKustomize applies the statefulset-resizer base with the policy component,
// as the README's install does, and checks the three policies.
func TestAdmissionPolicyKustomize(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cluster := framework.StartCluster(t, policyClusterOptions)
	manifests := render(t, cluster, filepath.Join(root, "deploy", "kubernetes"), manifestRender{name: "statefulset-resizer with the policy component", wrapper: `namespace: csi-resizer-system
resources:
- @DEPLOY@/statefulset-resizer
components:
- @DEPLOY@/statefulset-resizer/policy
`})
	e := startPolicyEnv(t, cluster, policyInstall{
		manifests: manifests, namespace: "csi-resizer-system",
		controllerSA: "statefulset-resizer", webhookSA: "statefulset-resizer-webhook",
		controller: "statefulset-resizer-controller", guard: "statefulset-resizer-recreate-guard", webhook: "statefulset-resizer-webhook",
	})
	e.checkAll(t)
}

// TestAdmissionPolicyHelm installs the chart's render as release "sr" in namespace
// "resizer-ops", whose policies name that release's ServiceAccounts exactly.
func TestAdmissionPolicyHelm(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	helm := helmBinary(t, root)
	cluster := framework.StartCluster(t, policyClusterOptions)
	out := helmRender(t, helm, root, "sr", "resizer-ops")
	e := startPolicyEnv(t, cluster, policyInstall{
		manifests: out, namespace: "resizer-ops",
		controllerSA: "sr-statefulset-resizer", webhookSA: "sr-statefulset-resizer-webhook",
		controller: "sr-statefulset-resizer-controller", guard: "sr-statefulset-resizer-recreate-guard", webhook: "sr-statefulset-resizer-webhook",
		exact: true,
	})
	e.checkAll(t)
}

func (e *policyEnv) checkAll(t *testing.T) {
	t.Run("controller", e.checkController)
	t.Run("controller delete", e.checkControllerDelete)
	t.Run("recreate guard", e.checkGuard)
	t.Run("webhook", e.checkWebhook)
	t.Run("identity", e.checkIdentity)
}

// helmRender is `helm template RELEASE` of the chart in namespace, without the
// MutatingWebhookConfiguration: nothing serves it here, and the policy tests bring their own.
func helmRender(t *testing.T, helm, root, release, namespace string) string {
	t.Helper()
	args := []string{"template", release, filepath.Join(root, "deploy", "helm", "statefulset-resizer"), "--namespace", namespace}
	out, err := exec.Command(helm, args...).Output()
	if err != nil {
		t.Fatalf("helm %s: %v", strings.Join(args, " "), err)
	}
	var keep []string
	for _, doc := range strings.Split(string(out), "\n---\n") {
		if !strings.Contains(doc, "\nkind: MutatingWebhookConfiguration\n") {
			keep = append(keep, doc)
		}
	}
	return strings.Join(keep, "\n---\n")
}

func startPolicyEnv(t *testing.T, cluster *framework.Cluster, inst policyInstall) *policyEnv {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	e := &policyEnv{t: t, ctx: ctx, cluster: cluster, inst: inst, admin: cluster.Client}
	kubectl(t, cluster, "create", "namespace", inst.namespace)
	kubectl(t, cluster, "create", "namespace", optedNS)
	kubectl(t, cluster, "label", "namespace", optedNS, desired.OptInLabel+"=enabled")
	kubectl(t, cluster, "create", "namespace", plainNS)
	kubectlInput(t, cluster, inst.manifests, "apply", "-f", "-")

	// The webhook's ServiceAccount may write every MutatingWebhookConfiguration and alice every
	// StatefulSet, so that what is refused below is refused by a policy, not by RBAC.
	e.grant("policy-test-webhook-configurations", "admissionregistration.k8s.io", "mutatingwebhookconfigurations",
		rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: inst.namespace, Name: inst.webhookSA})
	e.grant("policy-test-statefulsets", "apps", "statefulsets",
		rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"},
		rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: "elsewhere", Name: inst.controllerSA},
		rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: inst.namespace, Name: "prod-" + inst.controllerSA})
	e.ctl = e.serviceAccount(inst.namespace, inst.controllerSA)
	e.hook = e.serviceAccount(inst.namespace, inst.webhookSA)
	e.alice = e.impersonate("alice", "system:authenticated")
	e.createWebhookConfiguration()
	e.waitEnforced()
	return e
}

// grant gives subjects every verb on group/resource, cluster-wide.
func (e *policyEnv) grant(name, group, resource string, subjects ...rbacv1.Subject) {
	e.t.Helper()
	rbac := e.admin.RbacV1()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{group}, Resources: []string{resource}, Verbs: []string{"*"}}}}
	if _, err := rbac.ClusterRoles().Create(e.ctx, role, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subjects,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}}
	if _, err := rbac.ClusterRoleBindings().Create(e.ctx, binding, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *policyEnv) impersonate(user string, groups ...string) kubernetes.Interface {
	cfg := rest.CopyConfig(e.cluster.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	return kubernetes.NewForConfigOrDie(cfg) // fails only on a malformed config, which the cluster's is not
}

// serviceAccount impersonates namespace/name with the groups its token would give it.
func (e *policyEnv) serviceAccount(namespace, name string) kubernetes.Interface {
	return e.impersonate("system:serviceaccount:"+namespace+":"+name,
		"system:serviceaccounts", "system:serviceaccounts:"+namespace, "system:authenticated")
}

// waitEnforced waits until the apiserver has compiled the three policies without type-checking
// warnings and refuses one known-forbidden dry-run write of each (a policy takes a moment to
// become effective after its creation).
func (e *policyEnv) waitEnforced() {
	e.t.Helper()
	for _, name := range []string{e.inst.controller, e.inst.guard, e.inst.webhook} {
		framework.Eventually(e.t, 30*time.Second, func() (bool, string) {
			p, err := e.admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(e.ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if p.Status.ObservedGeneration != p.Generation || p.Status.TypeChecking == nil {
				return false, fmt.Sprintf("policy %s: not type-checked yet: %+v", name, p.Status)
			}
			if w := p.Status.TypeChecking.ExpressionWarnings; len(w) > 0 {
				e.t.Fatalf("policy %s: type-checking warnings: %+v", name, w)
			}
			return true, ""
		})
	}
	e.sts(e.t, plainNS, "wait-guard", nil, recreate.Finalizer)
	dry := []string{metav1.DryRunAll}
	for _, probe := range []struct {
		policy string
		write  func() error
	}{
		{e.inst.controller, func() error {
			_, err := e.ctl.AppsV1().StatefulSets(plainNS).Create(e.ctx, newStatefulSet(plainNS, "wait", nil), metav1.CreateOptions{DryRun: dry})
			return err
		}},
		{e.inst.guard, func() error {
			return e.alice.AppsV1().StatefulSets(plainNS).Delete(e.ctx, "wait-guard", metav1.DeleteOptions{DryRun: dry})
		}},
		{e.inst.webhook, func() error {
			_, err := e.hook.AdmissionregistrationV1().MutatingWebhookConfigurations().Patch(e.ctx, "policy-test", types.MergePatchType,
				[]byte(`{"metadata":{"labels":{"probe":"x"}}}`), metav1.PatchOptions{DryRun: dry})
			return err
		}},
	} {
		framework.Eventually(e.t, 60*time.Second, func() (bool, string) {
			err := probe.write()
			return err != nil && strings.Contains(err.Error(), policyDenial(probe.policy)), fmt.Sprintf("policy %s not enforced yet: %v", probe.policy, err)
		})
	}
}

// policyDenial is how the apiserver introduces a refusal by policy (binding of the same name).
func policyDenial(policy string) string {
	return fmt.Sprintf("ValidatingAdmissionPolicy '%s' with binding '%s' denied request: ", policy, policy)
}

// expect checks the outcome of one write: refused by policy with a message containing each of
// want, or, with policy "", accepted.
func (e *policyEnv) expect(t *testing.T, what, policy string, err error, want ...string) {
	t.Helper()
	if policy == "" {
		if err != nil {
			t.Errorf("%s: refused, want accepted: %v", what, err)
		}
		return
	}
	if err == nil {
		t.Errorf("%s: accepted, want refused by the policy %s", what, policy)
		return
	}
	msg := err.Error()
	if !strings.Contains(msg, policyDenial(policy)) {
		t.Errorf("%s: refused, but not by the policy %s: %v", what, policy, err)
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("%s: the refusal does not say %q: %v", what, w, err)
		}
	}
}

// newStatefulSet is a minimal StatefulSet with one volume claim template.
func newStatefulSet(ns, name string, labels map[string]string, finalizers ...string) *appsv1.StatefulSet {
	sel := map[string]string{"app": name}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, Finalizers: finalizers},
		Spec: appsv1.StatefulSetSpec{
			ServiceName: name,
			Selector:    &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
				},
			}},
		},
	}
}

// sts creates a StatefulSet as admin.
func (e *policyEnv) sts(t testing.TB, ns, name string, labels map[string]string, finalizers ...string) *appsv1.StatefulSet {
	t.Helper()
	s, err := e.admin.AppsV1().StatefulSets(ns).Create(e.ctx, newStatefulSet(ns, name, labels, finalizers...), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create StatefulSet %s/%s: %v", ns, name, err)
	}
	return s
}

var optedIn = map[string]string{desired.OptInLabel: "enabled"}

// patch sends a merge patch (JSON patch when body starts with '[') of a StatefulSet as c.
func (e *policyEnv) patch(c kubernetes.Interface, ns, name, body string) error {
	pt := types.MergePatchType
	if strings.HasPrefix(body, "[") {
		pt = types.JSONPatchType
	}
	_, err := c.AppsV1().StatefulSets(ns).Patch(e.ctx, name, pt, []byte(body), metav1.PatchOptions{})
	return err
}

// checkController: the controller's creates and updates.
func (e *policyEnv) checkController(t *testing.T) {
	p := e.inst.controller
	create := func(ns, name string, labels map[string]string, opts metav1.CreateOptions) error {
		_, err := e.ctl.AppsV1().StatefulSets(ns).Create(e.ctx, newStatefulSet(ns, name, labels), opts)
		return err
	}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	notOpted := "may create only StatefulSets opted in to volumeClaimTemplates updates"
	e.expect(t, "create not opted in", p, create(plainNS, "a", nil, metav1.CreateOptions{}), notOpted,
		"StatefulSet plain/a is not labelled csi-resizer.io/volume-claim-template-updates=enabled, nor is its namespace")
	e.expect(t, "dry-run create not opted in", p, create(plainNS, "a", nil, dry), notOpted)
	e.expect(t, "create opted out of its namespace's opt-in", p,
		create(optedNS, "opted-out", map[string]string{desired.OptInLabel: "disabled"}, metav1.CreateOptions{}), notOpted,
		"StatefulSet opted/opted-out is labelled csi-resizer.io/volume-claim-template-updates=disabled, which opts it out")
	e.expect(t, "create opted in by its label", "", create(plainNS, "labelled", optedIn, metav1.CreateOptions{}))
	e.expect(t, "create opted in by its namespace", "", create(optedNS, "by-namespace", nil, metav1.CreateOptions{}))
	e.expect(t, "dry-run create opted in", "", create(optedNS, "dry", nil, dry))

	// Updates of plain/labelled, which an admin gave the desired-templates annotation.
	e.expect(t, "admin annotates", "", e.patch(e.admin, plainNS, "labelled",
		`{"metadata":{"annotations":{"`+desired.Annotation+`":"[]","example.com/note":"x"}}}`))
	for _, c := range []struct {
		what, body, policy string
		want               []string
	}{
		{"status annotation", `{"metadata":{"annotations":{"` + status.Annotation + `":"{}"}}}`, "", nil},
		{"record annotation", `{"metadata":{"annotations":{"csi-resizer.io/recreate-record":"x"}}}`, "", nil},
		{"add the finalizer", `{"metadata":{"finalizers":["` + recreate.Finalizer + `"]}}`, "", nil},
		{"add another finalizer", `{"metadata":{"finalizers":["` + recreate.Finalizer + `","example.com/other"]}}`, p,
			[]string{"may add or remove only the finalizer csi-resizer.io/recreate of StatefulSet plain/labelled", "to [csi-resizer.io/recreate, example.com/other]"}},
		{"spec", `{"spec":{"replicas":3}}`, p, []string{"may not change the spec of StatefulSet plain/labelled"}},
		{"spec template", `[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"evil:1"}]`, p, []string{"may not change the spec"}},
		{"a label", `{"metadata":{"labels":{"example.com/x":"y"}}}`, p, []string{"may not change the labels of StatefulSet plain/labelled"}},
		{"the opt-in label", `{"metadata":{"labels":{"` + desired.OptInLabel + `":null}}}`, p, []string{"may not change the labels"}},
		{"another annotation", `{"metadata":{"annotations":{"example.com/note":"y"}}}`, p,
			[]string{"may change only its own annotations (csi-resizer.io/volume-claim-templates-status, csi-resizer.io/recreate-record)", "this update changes example.com/note"}},
		{"remove the desired templates", `{"metadata":{"annotations":{"` + desired.Annotation + `":null}}}`, p, []string{"this update changes " + desired.Annotation}},
		{"ownerReferences", `{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"x","uid":"1b4e28ba-2fa1-11d2-883f-0016d3cca427"}]}}`, p,
			[]string{"may not change the ownerReferences or generateName of StatefulSet plain/labelled"}},
		{"remove the finalizer", `[{"op":"remove","path":"/metadata/finalizers"}]`, "", nil},
	} {
		e.expect(t, "patch "+c.what, c.policy, e.patch(e.ctl, plainNS, "labelled", c.body), c.want...)
	}
	e.checkManagedFieldsRestore(t)
}

// checkManagedFieldsRestore: the controller may put back the old field ownership (its
// restoreOwnership patch), here: hand its own fields to "helm".
func (e *policyEnv) checkManagedFieldsRestore(t *testing.T) {
	live, err := e.admin.AppsV1().StatefulSets(plainNS).Get(e.ctx, "labelled", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	managed := live.ManagedFields
	for i := range managed {
		managed[i].Manager = "helm"
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": live.ResourceVersion, "managedFields": managed}})
	if err != nil {
		t.Fatal(err)
	}
	e.expect(t, "patch managedFields", "", e.patch(e.ctl, plainNS, "labelled", string(body)))
	after, err := e.admin.AppsV1().StatefulSets(plainNS).Get(e.ctx, "labelled", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range after.ManagedFields {
		if m.Manager != "helm" {
			t.Errorf("after the managedFields patch: manager %q, want only helm: %+v", m.Manager, after.ManagedFields)
		}
	}
}

// checkControllerDelete: only an orphan delete of an opted-in object with the finalizer.
func (e *policyEnv) checkControllerDelete(t *testing.T) {
	p := e.inst.controller
	target := e.sts(t, optedNS, "recreated", nil, recreate.Finalizer)
	e.sts(t, plainNS, "no-finalizer", optedIn)
	e.sts(t, plainNS, "not-opted-in", nil, recreate.Finalizer)
	del := func(ns, name string, opts metav1.DeleteOptions) error {
		return e.ctl.AppsV1().StatefulSets(ns).Delete(e.ctx, name, opts)
	}
	background, orphan := metav1.DeletePropagationBackground, metav1.DeletePropagationOrphan
	onlyOrphan := "may delete StatefulSets only with propagationPolicy Orphan"
	e.expect(t, "background delete", p, del(optedNS, "recreated", metav1.DeleteOptions{PropagationPolicy: &background}),
		onlyOrphan, "the delete of StatefulSet opted/recreated asks for propagationPolicy Background")
	e.expect(t, "delete without a propagation policy", p, del(optedNS, "recreated", metav1.DeleteOptions{}),
		onlyOrphan, "asks for propagationPolicy none (the default, Background)")
	yes := true
	e.expect(t, "delete with the deprecated orphanDependents", p, del(optedNS, "recreated", metav1.DeleteOptions{OrphanDependents: &yes}), onlyOrphan,
		"none but the deprecated orphanDependents")
	e.expect(t, "orphan delete without the finalizer", p, del(plainNS, "no-finalizer", metav1.DeleteOptions{PropagationPolicy: &orphan}),
		"may delete only StatefulSets that carry the finalizer csi-resizer.io/recreate", "StatefulSet plain/no-finalizer does not")
	e.expect(t, "orphan delete not opted in", p, del(plainNS, "not-opted-in", metav1.DeleteOptions{PropagationPolicy: &orphan}),
		"may delete only StatefulSets opted in", "StatefulSet plain/not-opted-in is not labelled")
	e.expect(t, "orphan delete with preconditions", "", del(optedNS, "recreated", metav1.DeleteOptions{PropagationPolicy: &orphan,
		Preconditions: &metav1.Preconditions{UID: &target.UID, ResourceVersion: &target.ResourceVersion}}))
	// The release: the finalizer off the terminating object (the orphan finalizer stays: no
	// garbage collector runs here).
	e.expect(t, "release the terminating object", "", e.patch(e.ctl, optedNS, "recreated", `{"metadata":{"finalizers":["orphan"]}}`))
	live, err := e.admin.AppsV1().StatefulSets(optedNS).Get(e.ctx, "recreated", metav1.GetOptions{})
	if err != nil || live.DeletionTimestamp == nil || strings.Join(live.Finalizers, ",") != "orphan" {
		t.Errorf("after the orphan delete and the release: %v, deletionTimestamp %v, finalizers %v; want terminating with only the orphan finalizer",
			err, live.DeletionTimestamp, live.Finalizers)
	}
}

// checkGuard: nobody but the controller may delete or opt out a StatefulSet during its
// re-create.
func (e *policyEnv) checkGuard(t *testing.T) {
	p := e.inst.guard
	e.sts(t, optedNS, "guarded", nil, recreate.Finalizer)
	e.sts(t, plainNS, "guarded-label", optedIn, recreate.Finalizer)
	e.sts(t, plainNS, "free", optedIn)
	dry := metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}
	beingRecreated := "StatefulSet opted/guarded is being re-created by statefulset-resizer"
	e.expect(t, "a user's delete", p, e.alice.AppsV1().StatefulSets(optedNS).Delete(e.ctx, "guarded", metav1.DeleteOptions{}),
		beingRecreated, "delete it again once it is re-created")
	e.expect(t, "a user's dry-run delete", p, e.alice.AppsV1().StatefulSets(optedNS).Delete(e.ctx, "guarded", dry), beingRecreated)
	e.expect(t, "an admin's delete", p, e.admin.AppsV1().StatefulSets(optedNS).Delete(e.ctx, "guarded", dry), beingRecreated)
	nsController := e.serviceAccount("kube-system", "namespace-controller")
	e.expect(t, "the namespace controller's delete", "", nsController.AppsV1().StatefulSets(optedNS).Delete(e.ctx, "guarded", dry))

	optOut := "opt it out (label csi-resizer.io/volume-claim-template-updates) once it is re-created"
	e.expect(t, "a user removes the opt-in label", p, e.patch(e.alice, plainNS, "guarded-label", `{"metadata":{"labels":{"`+desired.OptInLabel+`":null}}}`),
		"StatefulSet plain/guarded-label is being re-created", optOut)
	e.expect(t, "a user opts out of the namespace's opt-in", p, e.patch(e.alice, optedNS, "guarded", `{"metadata":{"labels":{"`+desired.OptInLabel+`":"disabled"}}}`), optOut)
	e.expect(t, "a user's other update", "", e.patch(e.alice, optedNS, "guarded", `{"spec":{"replicas":2},"metadata":{"labels":{"team":"a"}}}`))
	e.expect(t, "a user removes the label without a re-create", "", e.patch(e.alice, plainNS, "free", `{"metadata":{"labels":{"`+desired.OptInLabel+`":null}}}`))
	e.expect(t, "a user's delete without a re-create", "", e.alice.AppsV1().StatefulSets(plainNS).Delete(e.ctx, "free", metav1.DeleteOptions{}))
	gc := e.serviceAccount("kube-system", "generic-garbage-collector")
	e.expect(t, "the garbage collector's update", "", e.patch(gc, plainNS, "guarded-label", `{"metadata":{"labels":{"`+desired.OptInLabel+`":null}}}`))
}

// createWebhookConfiguration creates the MutatingWebhookConfiguration policy-test, two webhooks
// for a resource nobody writes.
func (e *policyEnv) createWebhookConfiguration() {
	e.t.Helper()
	none, ignore := admissionregistrationv1.SideEffectClassNone, admissionregistrationv1.Ignore
	url := "https://127.0.0.1:1/mutate"
	hook := func(name string) admissionregistrationv1.MutatingWebhook {
		return admissionregistrationv1.MutatingWebhook{
			Name:         name,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{"example.com"}, APIVersions: []string{"v1"}, Resources: []string{"widgets"}}}},
			SideEffects: &none, FailurePolicy: &ignore, AdmissionReviewVersions: []string{"v1"},
		}
	}
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "policy-test"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{hook("a.example.com"), hook("b.example.com")}}
	if _, err := e.admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(e.ctx, cfg, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// checkWebhook: the webhook's ServiceAccount may only inject caBundle.
func (e *policyEnv) checkWebhook(t *testing.T) {
	p := e.inst.webhook
	configs := e.hook.AdmissionregistrationV1().MutatingWebhookConfigurations()
	patch := func(c kubernetes.Interface, body string) error {
		pt := types.MergePatchType
		if strings.HasPrefix(body, "[") {
			pt = types.JSONPatchType
		}
		_, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().Patch(e.ctx, "policy-test", pt, []byte(body), metav1.PatchOptions{})
		return err
	}
	bundle := `"` + "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==" + `"`
	onlyCABundle := "may change only webhooks[*].clientConfig.caBundle of MutatingWebhookConfiguration policy-test"
	for _, c := range []struct {
		what, body, policy string
		want               []string
	}{
		// As statefulset-resizer's injectCABundle: a test of each name, then the bundle.
		{"inject the CA bundle", `[{"op":"test","path":"/webhooks/0/name","value":"a.example.com"},{"op":"add","path":"/webhooks/0/clientConfig/caBundle","value":` + bundle + `},` +
			`{"op":"test","path":"/webhooks/1/name","value":"b.example.com"},{"op":"add","path":"/webhooks/1/clientConfig/caBundle","value":` + bundle + `}]`, "", nil},
		{"failurePolicy", `[{"op":"replace","path":"/webhooks/1/failurePolicy","value":"Fail"}]`, p, []string{onlyCABundle, "changes more of the webhooks b.example.com"}},
		{"the URL", `[{"op":"replace","path":"/webhooks/0/clientConfig/url","value":"https://evil.example/x"}]`, p, []string{"changes more of the webhooks a.example.com"}},
		{"the rules", `[{"op":"replace","path":"/webhooks/0/rules/0/resources","value":["*"]}]`, p, []string{"a.example.com"}},
		{"the selector", `[{"op":"add","path":"/webhooks/0/objectSelector","value":{"matchLabels":{"x":"y"}}}]`, p, []string{"a.example.com"}},
		{"a new webhook", `[{"op":"add","path":"/webhooks/-","value":{"name":"c.example.com","clientConfig":{"url":"https://evil.example/x"},"sideEffects":"None","admissionReviewVersions":["v1"]}}]`, p,
			[]string{"c.example.com"}},
		{"a removed webhook", `[{"op":"remove","path":"/webhooks/1"}]`, p, []string{"b.example.com"}},
		{"the order", `[{"op":"move","from":"/webhooks/1","path":"/webhooks/0"}]`, p, []string{"reorders the webhooks"}},
		{"a label", `{"metadata":{"labels":{"x":"y"}}}`, p, []string{onlyCABundle, "changes its labels, annotations"}},
	} {
		e.expect(t, "webhook patches "+c.what, c.policy, patch(e.hook, c.body), c.want...)
	}
	got, err := configs.Get(e.ctx, "policy-test", metav1.GetOptions{})
	if err != nil || len(got.Webhooks) != 2 || len(got.Webhooks[0].ClientConfig.CABundle) == 0 || len(got.Webhooks[1].ClientConfig.CABundle) == 0 {
		t.Errorf("after the injection: %v %+v, want both webhooks with the CA bundle", err, got)
	}
	dry := []string{metav1.DryRunAll}
	_, err = configs.Create(e.ctx, &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "another"}}, metav1.CreateOptions{DryRun: dry})
	e.expect(t, "webhook creates a configuration", p, err, "may only inject the CA bundle into its MutatingWebhookConfiguration, not CREATE")
	e.expect(t, "webhook deletes the configuration", p, configs.Delete(e.ctx, "policy-test", metav1.DeleteOptions{DryRun: dry}), "not DELETE MutatingWebhookConfiguration policy-test")
	e.expect(t, "admin changes the failurePolicy", "", patch(e.admin, `[{"op":"replace","path":"/webhooks/1/failurePolicy","value":"Fail"}]`))
}

// checkIdentity: which users the policies take for statefulset-resizer. A ServiceAccount of the
// controller's name in another namespace is confined too by the kustomize component (it cannot
// know the install's namespace), not by the Helm chart's exact names; other users, the admin
// included, are not confined.
func (e *policyEnv) checkIdentity(t *testing.T) {
	other := e.serviceAccount("elsewhere", e.inst.controllerSA)
	_, err := other.AppsV1().StatefulSets(plainNS).Create(e.ctx, newStatefulSet(plainNS, "elsewhere", nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if e.inst.exact {
		e.expect(t, "same name, other namespace (Helm)", "", err)
	} else {
		e.expect(t, "same name, other namespace (kustomize)", e.inst.controller, err, "may create only StatefulSets opted in")
		// A kustomization with namePrefix: prod- renames the ServiceAccount; still confined.
		prefixed := e.serviceAccount(e.inst.namespace, "prod-"+e.inst.controllerSA)
		_, err = prefixed.AppsV1().StatefulSets(plainNS).Create(e.ctx, newStatefulSet(plainNS, "prefixed", nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		e.expect(t, "a namePrefix (kustomize)", e.inst.controller, err, "may create only StatefulSets opted in")
	}
	_, err = e.alice.AppsV1().StatefulSets(plainNS).Create(e.ctx, newStatefulSet(plainNS, "alices", nil), metav1.CreateOptions{})
	e.expect(t, "a user creates a StatefulSet not opted in", "", err)
	e.expect(t, "the admin changes its spec", "", e.patch(e.admin, plainNS, "alices", `{"spec":{"replicas":4}}`))
}

// TestAdmissionPolicyRealRecreate runs the real statefulset-resizer (its ServiceAccount's token,
// the shipped RBAC) under the policy component through a whole re-create of a StatefulSet
// applied server-side: the finalizer, the orphan delete with preconditions, the release, the
// create and the managedFields restore all pass the policies (a refusal in its log fails the
// test), and the field managers own what they owned (the next apply needs no force).
func TestAdmissionPolicyRealRecreate(t *testing.T) {
	s := startSTSEnv(t)
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	kubectlInput(t, s.Cluster, render(t, s.Cluster, filepath.Join(root, "deploy", "kubernetes"), manifestRender{name: "the policy component", wrapper: `components:
- @DEPLOY@/statefulset-resizer/policy
`}), "apply", "-f", "-")
	ctl := (&policyEnv{cluster: s.Cluster}).serviceAccount(s.Namespace, "statefulset-resizer")
	framework.Eventually(t, 60*time.Second, func() (bool, string) {
		_, err := ctl.AppsV1().StatefulSets(s.Namespace).Create(s.Ctx, newStatefulSet(s.Namespace, "probe", nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), policyDenial("statefulset-resizer-controller")), fmt.Sprintf("the controller policy is not enforced yet: %v", err)
	})

	s.StartStatefulSetResizer(t, s.ssrKubeconfig)
	s.EnsureNode(t)
	sts := s.NewStatefulSet(scenario.StatefulSetOptions{Name: "db", Replicas: 1, Policy: appsv1.ParallelPodManagement, Size: "1Gi"})
	s.PrecreateVolumes(t, sts)
	apply := func() {
		t.Helper()
		if out, err := s.Cluster.KubectlWithInput(t, manifest(t, sts), "apply", "--server-side", "-f", "-"); err != nil {
			t.Fatalf("apply --server-side: %v\n%s", err, out)
		}
	}
	apply()
	s.RunPod(t, "db", 0)
	old, _ := s.WaitTemplateStatus(t, "db", stsTimeout, scenario.Finished)
	s.setDesire(t, "db", desire(t, "2Gi"), nil)
	s.waitDone(t, scenario.ClaimName("db", 0), "2Gi")
	s.waitRecreated(t, "db", old.UID, "2Gi")
	s.WaitStatefulSetEvent(t, "db", controller.EventRecreated, stsTimeout, string(old.UID))

	scenario.WithSize("2Gi")(sts)
	sts.Spec.Replicas = ptr.To[int32](0)
	apply() // without --force-conflicts: the field ownership was given back
	if err := s.Client.AppsV1().StatefulSets(s.Namespace).Delete(s.Ctx, "db", metav1.DeleteOptions{}); err != nil {
		t.Errorf("delete of the re-created StatefulSet (no re-create under way): %v", err)
	}
}
