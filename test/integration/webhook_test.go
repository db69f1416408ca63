//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
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

// The admission side of statefulset-resizer's webhook on the real apiserver: `statefulset-resizer
// webhook` runs as a process with the webhook's shipped ServiceAccount and RBAC, generates its
// certificates into its Secret and injects the CA bundle into the shipped
// MutatingWebhookConfiguration (registered here by URL on 127.0.0.1 instead of a Service);
// kubectl is the user. The PVC side (growth, re-create) is tested with the controller elsewhere;
// here no controller runs, so every change seen is the webhook's.

// forbiddenTemplates is the apiserver's usual answer to a volumeClaimTemplates change.
const forbiddenTemplates = "spec: Forbidden: updates to statefulset spec for fields other than"

type webhookEnv struct {
	*scenario.Env
	dir     string
	resizer *framework.Process
}

func TestWebhook(t *testing.T) {
	e := scenario.Start(t, scenario.Options{NoResizer: true})
	scenario.ApplyStatefulSetResizerRBAC(t, e.Cluster, e.Namespace)
	w := startWebhook(t, e)

	t.Run("ClientSideApply", w.testClientSideApply)
	t.Run("ServerSideApply", w.testServerSideApply)
	t.Run("Replace", w.testReplace)
	t.Run("ClassChange", w.testClassChange)
	t.Run("TemplateMetadata", w.testTemplateMetadata)
	t.Run("LaterEditKeepsDesire", w.testLaterEditKeepsDesire)
	t.Run("LaterPatchKeepsDesire", w.testLaterPatchKeepsDesire)
	t.Run("DryRunChangesNothing", w.testDryRun)
	t.Run("OtherTemplateChangeRefused", w.testOtherChange)
	t.Run("NotOptedInUntouched", w.testNotOptedIn)
	t.Run("NamespaceOptIn", w.testNamespaceOptIn)
	t.Run("RestartKeepsCertificate", w.testRestartKeepsCertificate)
	t.Run("WebhookDown", w.testWebhookDown) // last: stops the webhook, then starts it again
}

// startWebhook runs `statefulset-resizer webhook` (plus args) with the shipped configuration
// registered by URL, once the apiserver calls it (scenario.StartWebhook).
func startWebhook(t *testing.T, e *scenario.Env, args ...string) *webhookEnv {
	t.Helper()
	return &webhookEnv{Env: e, dir: t.TempDir(), resizer: e.StartWebhook(t, args...).Process}
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
// records the new one. A class emptied is left to the apiserver, which refuses it as usual; a
// class removed is taken (how Git reverts a class). Reverting the class in Git to the live one
// cancels the desire. No VolumeAttributesClass exists here: a template may name any.
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

	// The class emptied: the usual error, nothing changed.
	w.refused(t, "apply", "--server-side", "--force-conflicts", "-f", w.write(t, withClass("vac-gold", "2Gi", ptr.To(""))))
	after := w.get(t, w.Namespace, "vac-gold")
	expect(t, after, "1Gi", desire("2Gi", "silver"))
	liveClass(after, ptr.To("gold"))
	if after.ResourceVersion != before.ResourceVersion {
		t.Errorf("resourceVersion %s -> %s: a refused update changed the object", before.ResourceVersion, after.ResourceVersion)
	}

	// The class removed, with the size: taken (a revert of a class from Git), the live class kept
	// until the re-create.
	w.kubectl(t, "apply", "-f", w.write(t, withClass("vac-gold", "2Gi", nil)))
	removed := w.get(t, w.Namespace, "vac-gold")
	expect(t, removed, "1Gi", desireJSON("2Gi"))
	liveClass(removed, ptr.To("gold"))

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

// pendingEntry is the configuration's failurePolicy Fail entry for a StatefulSet opted in by its
// own label that has a pending change: the apiserver names it when it refuses an update.
const pendingEntry = "pending-volume-claim-template-change.statefulsets.csi-resizer.io"

// With the webhook down: a template change of an object without a pending change gets the
// apiserver's usual error and other updates of it go through (failurePolicy Ignore). Finding 4 of
// issue 31: an object with a pending change (recorded while the webhook was up) is where a revert
// restating the live size, as kubectl apply from Git, would be taken without the webhook and the
// annotation kept; it is refused, with a message naming the Fail entry, and nothing changes. The
// same update of the object without a pending change is accepted. With the webhook back, the
// revert cancels the pending change.
func (w *webhookEnv) testWebhookDown(t *testing.T) {
	w.kubectl(t, "apply", "-f", w.write(t, w.manifest("down", "1Gi", true)))
	w.kubectl(t, "apply", "-f", w.write(t, w.manifest("pending", "1Gi", true)))
	w.kubectl(t, "apply", "-f", w.write(t, w.manifest("pending", "3Gi", true)))
	expect(t, w.get(t, w.Namespace, "pending"), "1Gi", desireJSON("3Gi"))
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

	// The revert of Git to the live size, client-side and server-side: refused.
	revert := w.manifest("pending", "1Gi", true)
	revert.Spec.Replicas = ptr.To[int32](2) // an update whatever the webhook would do to the templates
	file := w.write(t, revert)
	pendingBefore := w.get(t, w.Namespace, "pending")
	for _, apply := range [][]string{{"apply"}, {"apply", "--server-side", "--force-conflicts"}} {
		out, err := w.Cluster.Kubectl(t, append(apply, "-f", file)...)
		if want := `failed calling webhook "` + pendingEntry + `"`; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("kubectl %s of the revert with the webhook down: %v %s; want a refusal containing %q", strings.Join(apply, " "), err, out, want)
		}
	}
	pendingAfter := w.get(t, w.Namespace, "pending")
	expect(t, pendingAfter, "1Gi", desireJSON("3Gi"))
	if pendingAfter.ResourceVersion != pendingBefore.ResourceVersion {
		t.Errorf("a refused revert changed the object: resourceVersion %s -> %s", pendingBefore.ResourceVersion, pendingAfter.ResourceVersion)
	}
	// The same update of the object without a pending change: accepted.
	same := w.manifest("down", "1Gi", true)
	same.Spec.Replicas = ptr.To[int32](2)
	w.kubectl(t, "apply", "-f", w.write(t, same))
	if s := w.get(t, w.Namespace, "down"); *s.Spec.Replicas != 2 {
		t.Errorf("down: replicas %d, want the applied 2", *s.Spec.Replicas)
	}

	// The webhook back: the same revert is taken, and cancels the pending change.
	w.resizer.Start(t)
	w.resizer.WaitHTTP(t, "/healthz", 90*time.Second)
	framework.Eventually(t, 60*time.Second, func() (bool, string) {
		out, err := w.Cluster.Kubectl(t, "apply", "-f", file)
		return err == nil, fmt.Sprintf("the revert with the webhook back: %v %s", err, out)
	})
	s := w.get(t, w.Namespace, "pending")
	expect(t, s, "1Gi", "")
	if *s.Spec.Replicas != 2 {
		t.Errorf("pending: replicas %d, want the applied 2", *s.Spec.Replicas)
	}
}

// kubectlOut runs the real kubectl with env added to its environment (EDITOR for kubectl edit)
// and returns its stdout and stderr: kubectl prints the apiserver's warnings, the webhook's
// among them, on stderr as "Warning: ...".
func (w *webhookEnv) kubectlOut(t *testing.T, env []string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command(framework.Bin(t, "kubectl"), append([]string{"--kubeconfig=" + w.Cluster.Kubeconfig}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// warned runs kubectl (kubectlOut), which must succeed and print a warning containing want.
func (w *webhookEnv) warned(t *testing.T, want string, env []string, args ...string) {
	t.Helper()
	out, errOut, err := w.kubectlOut(t, env, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
	}
	if !strings.Contains(errOut, "Warning: "+want) {
		t.Errorf("kubectl %s printed\n%s\nwant a warning containing %q", strings.Join(args, " "), errOut, want)
	}
}

// editor writes a kubectl editor: a script that runs sed with expr on the file kubectl edit
// hands it, and returns the EDITOR setting for it.
func (w *webhookEnv) editor(t *testing.T, expr string) []string {
	t.Helper()
	f, err := os.CreateTemp(w.dir, "editor-*.sh")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := fmt.Fprintf(f, "#!/bin/sh\nexec sed -i -e '%s' \"$1\"\n", expr); err != nil {
		t.Fatal(err)
	}
	if err := f.Chmod(0o755); err != nil {
		t.Fatal(err)
	}
	return []string{"EDITOR=" + f.Name(), "KUBE_EDITOR=" + f.Name()}
}

// recordedWarning and keptWarning are the beginnings of the webhook's warnings for name when
// it records a desire (rule 9) and when an update keeps one (rule 10).
func (w *webhookEnv) recordedWarning(name string) string {
	return "statefulset-resizer: volume claim templates of " + w.Namespace + "/" + name + " change"
}

func (w *webhookEnv) keptWarning(name string) string {
	return "statefulset-resizer: this update keeps the pending volume claim template change of " + w.Namespace + "/" + name
}

func desireWithMetadata(size string, labels, annotations map[string]string) string {
	if labels == nil {
		labels = map[string]string{}
	}
	if annotations == nil {
		annotations = map[string]string{}
	}
	b, err := json.Marshal([]desired.Template{{Name: scenario.TemplateName, Storage: resource.MustParse(size),
		Metadata: &desired.Metadata{Labels: labels, Annotations: annotations}}})
	if err != nil {
		panic(err)
	}
	return string(b)
}

// liveMetadata checks the live template's labels and annotations (the apiserver must keep them).
func liveMetadata(t *testing.T, s *appsv1.StatefulSet, labels, annotations map[string]string) {
	t.Helper()
	got := s.Spec.VolumeClaimTemplates[0].ObjectMeta
	if fmt.Sprint(got.Labels) != fmt.Sprint(labels) || fmt.Sprint(got.Annotations) != fmt.Sprint(annotations) {
		t.Errorf("%s: live template labels %v annotations %v, want %v %v (the apiserver must keep them)", s.Name, got.Labels, got.Annotations, labels, annotations)
	}
}

// Template labels and annotations (a chart's helm.sh/chart label, say) change like the size:
// alone or together with a bigger size, by client-side and server-side kubectl apply, the
// update is accepted with the live templates kept, the desire records the template's labels and
// annotations, and kubectl prints the webhook's warning. Git back to the live templates cancels
// the desire. Another template metadata field (the name, generateName) and a label that is not
// a valid label get the apiserver's usual error.
func (w *webhookEnv) testTemplateMetadata(t *testing.T) {
	v1Labels := map[string]string{"app": "db", "helm.sh/chart": "db-1.0.0"}
	v2Labels := map[string]string{"app": "db", "helm.sh/chart": "db-1.1.0"}
	noted := map[string]string{"backup.example.com/policy": "daily"}
	for _, apply := range [][]string{{"apply"}, {"apply", "--server-side"}} {
		name, force := "meta-csa", apply
		if len(apply) == 2 {
			name, force = "meta-ssa", append(apply[:2:2], "--force-conflicts")
		}
		t.Run(name, func(t *testing.T) {
			m := w.manifest(name, "1Gi", true)
			m.Spec.VolumeClaimTemplates[0].Labels = v1Labels
			w.kubectl(t, append(apply, "-f", w.write(t, m))...)

			m.Spec.VolumeClaimTemplates[0].Labels = v2Labels
			w.warned(t, w.recordedWarning(name), nil, append(apply, "-f", w.write(t, m))...)
			s := w.get(t, w.Namespace, name)
			expect(t, s, "1Gi", desireWithMetadata("1Gi", v2Labels, nil))
			liveMetadata(t, s, v1Labels, nil)

			m.Spec.VolumeClaimTemplates[0].Annotations = noted
			m.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[v1.ResourceStorage] = resource.MustParse("2Gi")
			w.warned(t, w.recordedWarning(name), nil, append(apply, "-f", w.write(t, m))...)
			s = w.get(t, w.Namespace, name)
			expect(t, s, "1Gi", desireWithMetadata("2Gi", v2Labels, noted))
			liveMetadata(t, s, v1Labels, nil)

			// Another metadata field of the template, with or without a label change: the usual error.
			renamed := m.DeepCopy()
			renamed.Spec.VolumeClaimTemplates[0].Name = "db"
			w.refused(t, append(force, "-f", w.write(t, renamed))...)
			generated := m.DeepCopy()
			generated.Spec.VolumeClaimTemplates[0].GenerateName = "data-"
			w.refused(t, append(force, "-f", w.write(t, generated))...)
			// A label the apiserver would refuse on a PVC is not recorded: the usual error, and a
			// warning that says why the webhook did not take the change.
			invalid := m.DeepCopy()
			invalid.Spec.VolumeClaimTemplates[0].Labels = map[string]string{"app": "db", "helm.sh/chart": "db 1.1.0"}
			out, err := w.Cluster.Kubectl(t, append(force, "-f", w.write(t, invalid))...)
			notTaken := "Warning: statefulset-resizer: the volume claim template change of " + w.Namespace + "/" + name +
				` is not taken: spec.volumeClaimTemplates[0].metadata.labels[helm.sh/chart]: Invalid value: "db 1.1.0"`
			if err == nil || !strings.Contains(err.Error(), forbiddenTemplates) || !strings.Contains(err.Error(), notTaken) {
				t.Errorf("an invalid template label: %v %s; want the usual %q and the webhook's warning %q", err, out, forbiddenTemplates, notTaken)
			}
			expect(t, w.get(t, w.Namespace, name), "1Gi", desireWithMetadata("2Gi", v2Labels, noted))

			// Git back to the live templates: the desire is cancelled.
			w.kubectl(t, append(apply, "-f", w.write(t, w.metadataManifest(name, "1Gi", v1Labels)))...)
			s = w.get(t, w.Namespace, name)
			expect(t, s, "1Gi", "")
			liveMetadata(t, s, v1Labels, nil)
		})
	}
}

func (w *webhookEnv) metadataManifest(name, size string, labels map[string]string) *appsv1.StatefulSet {
	m := w.manifest(name, size, true)
	m.Spec.VolumeClaimTemplates[0].Labels = labels
	return m
}

// Finding 2 of issue 24 at the webhook: the apiserver records field ownership before it calls
// the webhook, so the kubectl edit that raised the size owns spec.volumeClaimTemplates although
// the webhook put the live templates back. A second kubectl edit that changes only
// revisionHistoryLimit must keep the pending change (it used to clear it, silently), and
// kubectl prints the webhook's warning saying so. Applying the live templates cancels it.
func (w *webhookEnv) testLaterEditKeepsDesire(t *testing.T) {
	w.kubectl(t, "create", "-f", w.write(t, w.manifest("edits", "1Gi", true)))
	ref := "statefulset/edits"
	w.warned(t, w.recordedWarning("edits"), w.editor(t, "s/storage: 1Gi/storage: 2Gi/"), "-n", w.Namespace, "edit", ref)
	s := w.get(t, w.Namespace, "edits")
	expect(t, s, "1Gi", desireJSON("2Gi"))
	ownsTemplates(t, s, "kubectl-edit")

	w.warned(t, w.keptWarning("edits"), w.editor(t, "s/revisionHistoryLimit: 10/revisionHistoryLimit: 5/"), "-n", w.Namespace, "edit", ref)
	s = w.get(t, w.Namespace, "edits")
	expect(t, s, "1Gi", desireJSON("2Gi"))
	if got := ptr.Deref(s.Spec.RevisionHistoryLimit, -1); got != 5 {
		t.Errorf("revisionHistoryLimit %d, want the edited 5", got)
	}

	// What does cancel it: a client-side apply of a manifest with the live templates.
	w.kubectl(t, "apply", "-f", w.write(t, w.manifest("edits", "1Gi", true)))
	expect(t, w.get(t, w.Namespace, "edits"), "1Gi", "")
}

// The same with kubectl patch, as scripts do: a JSON patch raises the size, then a merge patch
// by the same field manager (kubectl-patch) changes only revisionHistoryLimit. A server-side
// apply of the live templates cancels it.
func (w *webhookEnv) testLaterPatchKeepsDesire(t *testing.T) {
	w.kubectl(t, "create", "-f", w.write(t, w.manifest("patches", "1Gi", true)))
	ref := "statefulset/patches"
	w.warned(t, w.recordedWarning("patches"), nil, "-n", w.Namespace, "patch", ref, "--type=json",
		"-p", `[{"op":"replace","path":"/spec/volumeClaimTemplates/0/spec/resources/requests/storage","value":"3Gi"}]`)
	s := w.get(t, w.Namespace, "patches")
	expect(t, s, "1Gi", desireJSON("3Gi"))
	ownsTemplates(t, s, "kubectl-patch")

	w.warned(t, w.keptWarning("patches"), nil, "-n", w.Namespace, "patch", ref, "--type=merge", "-p", `{"spec":{"revisionHistoryLimit":4}}`)
	s = w.get(t, w.Namespace, "patches")
	expect(t, s, "1Gi", desireJSON("3Gi"))
	if got := ptr.Deref(s.Spec.RevisionHistoryLimit, -1); got != 4 {
		t.Errorf("revisionHistoryLimit %d, want the patched 4", got)
	}

	// What does cancel it: a server-side apply of the live templates (--force-conflicts:
	// kubectl-patch owns the templates, and a manifest lacks the fields the apiserver defaults).
	w.kubectl(t, "apply", "--server-side", "--force-conflicts", "-f", w.write(t, w.manifest("patches", "1Gi", true)))
	expect(t, w.get(t, w.Namespace, "patches"), "1Gi", "")
}

// ownsTemplates checks the premise of finding 2 on the real apiserver: manager's Update entry
// owns spec.volumeClaimTemplates, although the webhook put the live templates back.
func ownsTemplates(t *testing.T, s *appsv1.StatefulSet, manager string) {
	t.Helper()
	for _, e := range s.ManagedFields {
		if e.Manager == manager && e.Operation == metav1.ManagedFieldsOperationUpdate && e.FieldsV1 != nil &&
			strings.Contains(string(e.FieldsV1.Raw), `"f:volumeClaimTemplates"`) {
			return
		}
	}
	t.Errorf("%s: no Update entry of %s owning f:spec.f:volumeClaimTemplates in %v", s.Name, manager, s.ManagedFields)
}
