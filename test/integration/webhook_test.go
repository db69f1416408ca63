//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/desired"
	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// The admission side of statefulset-resizer's webhook on the real apiserver: statefulset-resizer
// runs as a process with the shipped RBAC, generates its certificates into its Secret and
// injects the CA bundle into the shipped MutatingWebhookConfiguration (registered here by URL on
// 127.0.0.1 instead of a Service); kubectl is the user. The PVC side (growth, re-create) is
// tested with the controller elsewhere; here no kube-controller-manager runs, so the controller
// decides nothing and every change seen is the webhook's.

// forbiddenTemplates is the apiserver's usual answer to a volumeClaimTemplates change.
const forbiddenTemplates = "spec: Forbidden: updates to statefulset spec for fields other than"

type webhookEnv struct {
	*scenario.Env
	dir     string
	resizer *framework.Process
}

func TestWebhook(t *testing.T) {
	e := scenario.Start(t, scenario.Options{NoResizer: true})
	w := startWebhook(t, e, scenario.ApplyStatefulSetResizerRBAC(t, e.Cluster, e.Namespace))

	t.Run("ClientSideApply", w.testClientSideApply)
	t.Run("ServerSideApply", w.testServerSideApply)
	t.Run("Replace", w.testReplace)
	t.Run("ClassChange", w.testClassChange)
	t.Run("DryRunChangesNothing", w.testDryRun)
	t.Run("OtherTemplateChangeRefused", w.testOtherChange)
	t.Run("NotOptedInUntouched", w.testNotOptedIn)
	t.Run("NamespaceOptIn", w.testNamespaceOptIn)
	t.Run("RestartKeepsCertificate", w.testRestartKeepsCertificate)
	t.Run("WebhookDownUsualError", w.testWebhookDown) // last: stops statefulset-resizer
}

// startWebhook runs statefulset-resizer with kubeconfig serving the webhook (plus args) and
// the shipped configuration registered by URL, once the apiserver calls it (scenario.StartWebhook).
func startWebhook(t *testing.T, e *scenario.Env, kubeconfig string, args ...string) *webhookEnv {
	t.Helper()
	return &webhookEnv{Env: e, dir: t.TempDir(), resizer: e.StartWebhook(t, kubeconfig, args...).Process}
}

// manifest is a StatefulSet as a user keeps it in Git: one template "data" of size, opted in
// by its label when optIn.
func (w *webhookEnv) manifest(name, size string, optIn bool) *appsv1.StatefulSet {
	s := w.NewStatefulSet(scenario.StatefulSetOptions{Name: name, Size: size})
	s.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"}
	if optIn {
		s.Labels = map[string]string{desired.OptInLabel: desired.OptInValue}
	}
	return s
}

func (w *webhookEnv) write(t *testing.T, s *appsv1.StatefulSet) string {
	t.Helper()
	b, err := yaml.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp(w.dir, s.Name+"-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

func (w *webhookEnv) kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := w.Cluster.Kubectl(t, args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return out
}

// refused runs kubectl, which must fail with the apiserver's usual answer to a template change.
func (w *webhookEnv) refused(t *testing.T, args ...string) {
	t.Helper()
	out, err := w.Cluster.Kubectl(t, args...)
	if err == nil || !strings.Contains(err.Error(), forbiddenTemplates) {
		t.Fatalf("kubectl %s: %v %s; want the apiserver's usual %q", strings.Join(args, " "), err, out, forbiddenTemplates)
	}
}

func (w *webhookEnv) get(t *testing.T, ns, name string) *appsv1.StatefulSet {
	t.Helper()
	s, err := w.Client.AppsV1().StatefulSets(ns).Get(w.Ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// expect checks the live template size and the desire annotation ("" for none).
func expect(t *testing.T, s *appsv1.StatefulSet, liveSize, desire string) {
	t.Helper()
	got := s.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[v1.ResourceStorage]
	if got.Cmp(resource.MustParse(liveSize)) != 0 {
		t.Errorf("%s: live template size %s, want %s (the apiserver must keep it)", s.Name, got.String(), liveSize)
	}
	value, ok := s.Annotations[desired.Annotation]
	switch {
	case desire == "" && ok:
		t.Errorf("%s: annotation %s = %s, want none", s.Name, desired.Annotation, value)
	case desire != "" && value != desire:
		t.Errorf("%s: annotation %s = %q, want %q", s.Name, desired.Annotation, value, desire)
	}
}

func desireJSON(size string) string {
	return fmt.Sprintf(`[{"name":"%s","storage":"%s"}]`, scenario.TemplateName, size)
}

func (w *webhookEnv) testClientSideApply(t *testing.T) {
	m := w.manifest("csa", "1Gi", true)
	w.kubectl(t, "apply", "-f", w.write(t, m))
	m.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[v1.ResourceStorage] = resource.MustParse("3Gi")
	m.Spec.Replicas = ptr.To[int32](2) // the rest of the update goes through
	w.kubectl(t, "apply", "-f", w.write(t, m))
	s := w.get(t, w.Namespace, "csa")
	expect(t, s, "1Gi", desireJSON("3Gi"))
	if *s.Spec.Replicas != 2 {
		t.Errorf("replicas %d, want the applied 2", *s.Spec.Replicas)
	}

	// Another manager's write (a label, an annotation) keeps the desire.
	w.kubectl(t, "-n", w.Namespace, "annotate", "statefulset/csa", "team=storage")
	w.kubectl(t, "-n", w.Namespace, "label", "statefulset/csa", "tier=db")
	expect(t, w.get(t, w.Namespace, "csa"), "1Gi", desireJSON("3Gi"))

	// Lowering the template in Git back to the live size cancels the desire (rule 8).
	m.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[v1.ResourceStorage] = resource.MustParse("1Gi")
	w.kubectl(t, "apply", "-f", w.write(t, m))
	expect(t, w.get(t, w.Namespace, "csa"), "1Gi", "")
}

func (w *webhookEnv) testServerSideApply(t *testing.T) {
	m := w.manifest("ssa", "1Gi", true)
	w.kubectl(t, "apply", "--server-side", "-f", w.write(t, m))
	m.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[v1.ResourceStorage] = resource.MustParse("5Gi")
	w.kubectl(t, "apply", "--server-side", "-f", w.write(t, m))
	expect(t, w.get(t, w.Namespace, "ssa"), "1Gi", desireJSON("5Gi"))

	w.kubectl(t, "-n", w.Namespace, "annotate", "statefulset/ssa", "team=storage")
	w.kubectl(t, "-n", w.Namespace, "label", "statefulset/ssa", "tier=db")
	expect(t, w.get(t, w.Namespace, "ssa"), "1Gi", desireJSON("5Gi"))

	// The same manifest with another replica count: no conflict, field managers are sane.
	m.Spec.Replicas = ptr.To[int32](3)
	w.kubectl(t, "apply", "--server-side", "-f", w.write(t, m))
	s := w.get(t, w.Namespace, "ssa")
	expect(t, s, "1Gi", desireJSON("5Gi"))
	if *s.Spec.Replicas != 3 {
		t.Errorf("replicas %d, want 3", *s.Spec.Replicas)
	}

	m.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[v1.ResourceStorage] = resource.MustParse("1Gi")
	w.kubectl(t, "apply", "--server-side", "-f", w.write(t, m))
	expect(t, w.get(t, w.Namespace, "ssa"), "1Gi", "")
}

func (w *webhookEnv) testReplace(t *testing.T) {
	w.kubectl(t, "apply", "-f", w.write(t, w.manifest("replace", "1Gi", true)))
	live := w.get(t, w.Namespace, "replace")
	live.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"}
	live.ManagedFields = nil
	live.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[v1.ResourceStorage] = resource.MustParse("4Gi")
	w.kubectl(t, "replace", "-f", w.write(t, live))
	expect(t, w.get(t, w.Namespace, "replace"), "1Gi", desireJSON("4Gi"))
}

// A VolumeAttributesClass change of a template to a named class (with or without a size
// change) is taken like a size change: the live template keeps its class and the annotation
// records the new one. A class removed is left to the apiserver, which refuses it as usual:
// statefulset-resizer cannot take a class away from a volume. Reverting the class in Git to the
// live one cancels the desire. No VolumeAttributesClass exists here: a template may name any.
func (w *webhookEnv) testClassChange(t *testing.T) {
	desire := func(size, class string) string {
		return fmt.Sprintf(`[{"name":"%s","storage":"%s","volumeAttributesClassName":"%s"}]`, scenario.TemplateName, size, class)
	}
	withClass := func(name, size string, class *string) *appsv1.StatefulSet {
		m := w.manifest(name, size, true)
		m.Spec.VolumeClaimTemplates[0].Spec.VolumeAttributesClassName = class
		return m
	}
	liveClass := func(s *appsv1.StatefulSet, want *string) {
		t.Helper()
		if got := s.Spec.VolumeClaimTemplates[0].Spec.VolumeAttributesClassName; !ptr.Equal(got, want) {
			t.Errorf("%s: live template class %v, want %v (the apiserver must keep it)", s.Name, ptr.Deref(got, "<unset>"), ptr.Deref(want, "<unset>"))
		}
	}

	// A class where the live template has none, by server-side apply.
	w.kubectl(t, "apply", "--server-side", "-f", w.write(t, w.manifest("vac", "1Gi", true)))
	w.kubectl(t, "apply", "--server-side", "-f", w.write(t, withClass("vac", "1Gi", ptr.To("gold"))))
	s := w.get(t, w.Namespace, "vac")
	expect(t, s, "1Gi", desire("1Gi", "gold"))
	liveClass(s, nil)

	// Another class together with a bigger size, by client-side apply.
	w.kubectl(t, "apply", "-f", w.write(t, withClass("vac-gold", "1Gi", ptr.To("gold"))))
	w.kubectl(t, "apply", "-f", w.write(t, withClass("vac-gold", "2Gi", ptr.To("silver"))))
	before := w.get(t, w.Namespace, "vac-gold")
	expect(t, before, "1Gi", desire("2Gi", "silver"))
	liveClass(before, ptr.To("gold"))

	// The class removed, or emptied, with or without the size: the usual error, nothing changed.
	w.refused(t, "apply", "-f", w.write(t, withClass("vac-gold", "2Gi", nil)))
	w.refused(t, "apply", "-f", w.write(t, withClass("vac-gold", "1Gi", nil)))
	w.refused(t, "apply", "--server-side", "--force-conflicts", "-f", w.write(t, withClass("vac-gold", "2Gi", ptr.To(""))))
	after := w.get(t, w.Namespace, "vac-gold")
	expect(t, after, "1Gi", desire("2Gi", "silver"))
	liveClass(after, ptr.To("gold"))
	if after.ResourceVersion != before.ResourceVersion {
		t.Errorf("resourceVersion %s -> %s: a refused update changed the object", before.ResourceVersion, after.ResourceVersion)
	}

	// Git reverted to the live class and size: the desire is cancelled.
	w.kubectl(t, "apply", "-f", w.write(t, withClass("vac-gold", "1Gi", ptr.To("gold"))))
	s = w.get(t, w.Namespace, "vac-gold")
	expect(t, s, "1Gi", "")
	liveClass(s, ptr.To("gold"))
}

func (w *webhookEnv) testDryRun(t *testing.T) {
	w.kubectl(t, "apply", "-f", w.write(t, w.manifest("dryrun", "1Gi", true)))
	before := w.get(t, w.Namespace, "dryrun")
	big := w.write(t, w.manifest("dryrun", "6Gi", true))
	out := w.kubectl(t, "apply", "--dry-run=server", "-o", "json", "-f", big)
	var answered appsv1.StatefulSet
	if err := json.Unmarshal([]byte(out), &answered); err != nil {
		t.Fatalf("dry-run output: %v\n%s", err, out)
	}
	// The answer says what a real apply would do.
	expect(t, &answered, "1Gi", desireJSON("6Gi"))
	// --force-conflicts: the object was made by client-side apply.
	w.kubectl(t, "apply", "--server-side", "--force-conflicts", "--dry-run=server", "-f", big)
	after := w.get(t, w.Namespace, "dryrun")
	expect(t, after, "1Gi", "")
	if after.ResourceVersion != before.ResourceVersion {
		t.Errorf("resourceVersion %s -> %s: a dry run changed the object", before.ResourceVersion, after.ResourceVersion)
	}
}

func (w *webhookEnv) testOtherChange(t *testing.T) {
	w.kubectl(t, "apply", "-f", w.write(t, w.manifest("other", "1Gi", true)))
	before := w.get(t, w.Namespace, "other")
	m := w.manifest("other", "2Gi", true)
	m.Spec.VolumeClaimTemplates[0].Spec.AccessModes = []v1.PersistentVolumeAccessMode{v1.ReadWriteMany}
	w.refused(t, "apply", "-f", w.write(t, m))
	m = w.manifest("other", "2Gi", true)
	m.Spec.VolumeClaimTemplates = append(m.Spec.VolumeClaimTemplates, *m.Spec.VolumeClaimTemplates[0].DeepCopy())
	m.Spec.VolumeClaimTemplates[1].Name = "logs"
	w.refused(t, "apply", "--server-side", "--force-conflicts", "-f", w.write(t, m))
	after := w.get(t, w.Namespace, "other")
	expect(t, after, "1Gi", "")
	if after.ResourceVersion != before.ResourceVersion {
		t.Errorf("a refused update changed the object")
	}
}

func (w *webhookEnv) testNotOptedIn(t *testing.T) {
	w.kubectl(t, "apply", "-f", w.write(t, w.manifest("plain", "1Gi", false)))
	before := w.get(t, w.Namespace, "plain")
	w.refused(t, "apply", "-f", w.write(t, w.manifest("plain", "2Gi", false)))
	w.kubectl(t, "-n", w.Namespace, "label", "statefulset/plain", "tier=db") // allowed, and untouched
	after := w.get(t, w.Namespace, "plain")
	expect(t, after, "1Gi", "")
	for k := range after.Annotations {
		if strings.HasPrefix(k, "csi-resizer.io/") {
			t.Errorf("a StatefulSet that did not opt in got annotation %s", k)
		}
	}
	if after.Generation != before.Generation {
		t.Errorf("generation %d -> %d", before.Generation, after.Generation)
	}
}

func (w *webhookEnv) testNamespaceOptIn(t *testing.T) {
	ns := framework.CreateNamespace(t, w.Ctx, w.Client, "optin")
	w.kubectl(t, "label", "namespace", ns, desired.OptInLabel+"="+desired.OptInValue)
	for _, name := range []string{"bynamespace", "optedout"} {
		m := w.manifest(name, "1Gi", false)
		m.Namespace = ns
		if name == "optedout" {
			m.Labels = map[string]string{desired.OptInLabel: "disabled"}
		}
		w.kubectl(t, "apply", "-f", w.write(t, m))
		m.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[v1.ResourceStorage] = resource.MustParse("7Gi")
		if name == "optedout" {
			w.refused(t, "apply", "-f", w.write(t, m))
			expect(t, w.get(t, ns, name), "1Gi", "")
			continue
		}
		w.kubectl(t, "apply", "-f", w.write(t, m))
		expect(t, w.get(t, ns, name), "1Gi", desireJSON("7Gi"))
	}
}

// A restarted statefulset-resizer serves the certificate of its Secret: no new one, no new
// bundle (so replicas and restarts never disagree), and the webhook answers again.
func (w *webhookEnv) testRestartKeepsCertificate(t *testing.T) {
	secret, err := w.Client.CoreV1().Secrets(w.Namespace).Get(w.Ctx, "statefulset-resizer-webhook-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the generated certificate Secret: %v", err)
	}
	for _, key := range []string{"ca.crt", "tls.crt", "tls.key"} {
		if len(secret.Data[key]) == 0 {
			t.Fatalf("Secret %s has no %s", secret.Name, key)
		}
	}
	w.resizer.Restart(t)
	w.resizer.WaitHTTP(t, "/healthz", 90*time.Second)
	m := w.manifest("restarted", "1Gi", true)
	w.kubectl(t, "apply", "-f", w.write(t, m))
	m.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[v1.ResourceStorage] = resource.MustParse("8Gi")
	big := w.write(t, m)
	framework.Eventually(t, 60*time.Second, func() (bool, string) {
		out, err := w.Cluster.Kubectl(t, "apply", "-f", big)
		return err == nil, fmt.Sprintf("%v %s", err, out)
	})
	expect(t, w.get(t, w.Namespace, "restarted"), "1Gi", desireJSON("8Gi"))
	after, err := w.Client.CoreV1().Secrets(w.Namespace).Get(w.Ctx, secret.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != secret.ResourceVersion {
		t.Errorf("the restart rewrote the certificate Secret")
	}
	config, err := w.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(w.Ctx, "statefulset-resizer", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, wh := range config.Webhooks {
		if string(wh.ClientConfig.CABundle) != string(secret.Data["ca.crt"]) {
			t.Errorf("webhook %s: caBundle is not the Secret's ca.crt", wh.Name)
		}
	}
}

func (w *webhookEnv) testWebhookDown(t *testing.T) {
	w.kubectl(t, "apply", "-f", w.write(t, w.manifest("down", "1Gi", true)))
	if err := w.resizer.Stop(); err != nil {
		t.Fatal(err)
	}
	before := w.get(t, w.Namespace, "down")
	w.refused(t, "apply", "-f", w.write(t, w.manifest("down", "2Gi", true)))
	w.refused(t, "apply", "--server-side", "--force-conflicts", "-f", w.write(t, w.manifest("down", "2Gi", true)))
	after := w.get(t, w.Namespace, "down")
	expect(t, after, "1Gi", "")
	if after.ResourceVersion != before.ResourceVersion {
		t.Errorf("an update refused while the webhook was down changed the object")
	}
	// Other updates still go through (failurePolicy Ignore).
	w.kubectl(t, "-n", w.Namespace, "label", "statefulset/down", "tier=db")
}
