//go:build integration

package integration

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/webhook"
	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// A renewal while the webhook is served, on the real apiserver (docs/design.md §3.9): the
// renewed certificate is served only once the configuration's caBundle trusts its CA. The
// configuration trusts the CA of the running pair; statefulset-resizer may not patch it (the
// test takes the patch verb out of its ClusterRole) when the pair becomes due for renewal. It
// renews the Secret, cannot inject the new bundle, and keeps serving the old certificate, which
// the apiserver still calls; once it may patch again, it injects the new and the previous CA
// and only then serves the new certificate. Before the fix it served the new certificate at
// once, which the apiserver refused (and, with failurePolicy Ignore, let every request through
// without the webhook) until an injection that here never came.
func TestWebhookServesRenewalOnlyOnceTrusted(t *testing.T) {
	e := scenario.Start(t, scenario.Options{NoResizer: true})
	scenario.ApplyStatefulSetResizerRBAC(t, e.Cluster, e.Namespace)
	framework.BuildStatefulSetResizer(t) // before the ageing pair's clock starts
	e.ExpectRefusals("injecting the CA bundle")
	restorePatch := withoutWebhookConfigurationPatch(t, e)

	// Two thirds of the pair's life are over 30 s from now: it is renewed then.
	now := time.Now()
	old, data := ageingWebhookSecret(t, e, now.Add(-10*time.Minute), now.Add(-10*time.Minute+3*(10*time.Minute+30*time.Second)/2))
	oldLeaf := parseCerts(t, data["tls.crt"])[0].Raw

	port := framework.FreePort(t)
	p := e.StartWebhookProcesses(t, scenario.WebhookArgs(e.Namespace, port))[0]
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	configuration := e.RegisterShippedWebhookWithCA(t, fmt.Sprintf("https://%s%s", addr, webhook.Path), old.PEM)
	e.WaitWebhookActive(t)

	// served is what the webhook serves, checked against the configuration read after the
	// handshake: the configuration only gains CAs here, so a certificate served must be trusted.
	served := func() []byte {
		t.Helper()
		leaf := servedLeaf(t, addr)
		config, err := e.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(e.Ctx, configuration, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, wh := range config.Webhooks {
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(wh.ClientConfig.CABundle)
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "127.0.0.1"}); err != nil {
				t.Fatalf("the webhook serves %q, which the caBundle of webhook %s does not trust: the apiserver refuses its calls: %v", leaf.Subject.CommonName, wh.Name, err)
			}
		}
		return leaf.Raw
	}

	var renewed *v1.Secret
	framework.Eventually(t, 90*time.Second, func() (bool, string) {
		served()
		s, err := e.Client.CoreV1().Secrets(e.Namespace).Get(e.Ctx, webhookSecret, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		renewed = s
		return !bytes.Equal(s.Data["tls.crt"], data["tls.crt"]), "the ageing pair is not renewed yet"
	})
	newLeaf := parseCerts(t, renewed.Data["tls.crt"])[0].Raw
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		return p.LogContains("injecting the CA bundle"), "no refused injection logged yet"
	})
	framework.Consistently(t, 5*time.Second, func() (bool, string) {
		return bytes.Equal(served(), oldLeaf), "the renewed certificate is served although its CA could not be injected"
	})
	e.WaitWebhookActive(t)

	restorePatch()
	framework.Eventually(t, 60*time.Second, func() (bool, string) {
		got := served()
		return bytes.Equal(got, newLeaf), "the renewed certificate is not served yet"
	})
	config, err := e.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(e.Ctx, configuration, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, wh := range config.Webhooks {
		if !bytes.Equal(wh.ClientConfig.CABundle, renewed.Data["ca.crt"]) {
			t.Errorf("webhook %s: caBundle is not the renewed bundle (new and previous CA)", wh.Name)
		}
	}
	e.WaitWebhookActive(t)
}

// ageingWebhookSecret writes the webhook certificate Secret with a CA and a serving certificate
// for 127.0.0.1 and the Service names, valid from notBefore to notAfter, and returns the CA and
// the Secret's data.
func ageingWebhookSecret(t *testing.T, e *scenario.Env, notBefore, notAfter time.Time) (*framework.CA, map[string][]byte) {
	t.Helper()
	ca, err := framework.NewCAValid("ageing", notBefore, notAfter)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	svc := "statefulset-resizer." + e.Namespace + ".svc"
	if err := ca.Issue(svc, []string{svc, svc + ".cluster.local", "127.0.0.1"}, certFile, keyFile); err != nil {
		t.Fatal(err)
	}
	data := map[string][]byte{"ca.crt": ca.PEM, "tls.crt": readFile(t, certFile), "tls.key": readFile(t, keyFile)}
	if data["ca.key"], err = ca.KeyPEM(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Client.CoreV1().Secrets(e.Namespace).Create(e.Ctx, &v1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: webhookSecret}, Type: v1.SecretTypeTLS, Data: data,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ca, data
}

// withoutWebhookConfigurationPatch takes the patch verb out of every ClusterRole rule that
// grants it on MutatingWebhookConfigurations, and returns the function that puts it back.
func withoutWebhookConfigurationPatch(t *testing.T, e *scenario.Env) (restore func()) {
	t.Helper()
	roles := e.Client.RbacV1().ClusterRoles()
	list, err := roles.List(e.Ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var changed []string
	for _, role := range list.Items {
		if role.AggregationRule != nil || strings.HasPrefix(role.Name, "system:") {
			continue
		}
		if patchVerb(&role, false) {
			if _, err := roles.Update(e.Ctx, &role, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			changed = append(changed, role.Name)
		}
	}
	if len(changed) == 0 {
		t.Fatal("no ClusterRole grants patch on mutatingwebhookconfigurations")
	}
	return func() {
		t.Helper()
		for _, name := range changed {
			role, err := roles.Get(e.Ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			patchVerb(role, true)
			if _, err := roles.Update(e.Ctx, role, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// patchVerb removes (or adds back) the patch verb in the role's rules on named
// mutatingwebhookconfigurations (statefulset-resizer's own); it reports whether it changed one.
func patchVerb(role *rbacv1.ClusterRole, add bool) bool {
	changed := false
	for i, r := range role.Rules {
		if !slices.Equal(r.APIGroups, []string{"admissionregistration.k8s.io"}) || !slices.Equal(r.Resources, []string{"mutatingwebhookconfigurations"}) || len(r.ResourceNames) == 0 {
			continue
		}
		has := slices.Contains(r.Verbs, "patch")
		switch {
		case !add && has:
			role.Rules[i].Verbs = slices.DeleteFunc(slices.Clone(r.Verbs), func(v string) bool { return v == "patch" })
			changed = true
		case add && !has:
			role.Rules[i].Verbs = append(r.Verbs, "patch")
			changed = true
		}
	}
	return changed
}

// servedLeaf is the certificate the webhook at addr serves, not verified (the caller does).
func servedLeaf(t *testing.T, addr string) *x509.Certificate {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // verified by the caller
	if err != nil {
		t.Fatalf("TLS to the webhook at %s: %v", addr, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0]
}
