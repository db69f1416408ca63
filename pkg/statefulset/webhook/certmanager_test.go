package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/cert"
	testingclock "k8s.io/utils/clock/testing"
)

// servedTrusted says whether every webhook of the stored configuration trusts
// the certificate m serves ("" when it does, or when nothing is served: a
// replica without a certificate fails its handshakes and its readiness, so the
// apiserver's calls go elsewhere).
func servedTrusted(client *fake.Clientset, m *CertManager, now time.Time) string {
	served := m.current.Load()
	if served == nil {
		return ""
	}
	obj, err := client.Tracker().Get(schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingwebhookconfigurations"}, "", "statefulset-resizer")
	if err != nil {
		return fmt.Sprintf("reading the configuration: %v", err)
	}
	leaf, err := x509.ParseCertificate(served.Certificate[0])
	if err != nil {
		return err.Error()
	}
	for _, w := range obj.(*admissionregistrationv1.MutatingWebhookConfiguration).Webhooks {
		pool, err := cert.NewPoolFromBytes(w.ClientConfig.CABundle)
		if err != nil {
			return fmt.Sprintf("webhook %s: caBundle: %v", w.Name, err)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now}); err != nil {
			return fmt.Sprintf("webhook %s: the served certificate %q is not trusted by its caBundle: %v", w.Name, leaf.Subject.CommonName, err)
		}
	}
	return ""
}

// watchTrust checks, at every write to the configuration (before it is
// applied) and whenever check is called, that the replicas serve only
// certificates the configuration trusts: the apiserver refuses, and with
// failurePolicy Ignore ignores, calls to a certificate it does not trust.
func watchTrust(t *testing.T, client *fake.Clientset, clock *testingclock.FakeClock, replicas ...*CertManager) (check func(when string)) {
	t.Helper()
	check = func(when string) {
		t.Helper()
		for i, m := range replicas {
			if msg := servedTrusted(client, m, clock.Now()); msg != "" {
				t.Errorf("%s, replica %d: %s", when, i, msg)
			}
		}
	}
	client.PrependReactor("*", "mutatingwebhookconfigurations", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetVerb() != "get" {
			check("before the " + a.GetVerb() + " of the configuration")
		}
		return false, nil, nil
	})
	return check
}

func leafOf(t *testing.T, c *tls.Certificate) string {
	t.Helper()
	if c == nil {
		t.Fatal("no certificate served")
	}
	return string(c.Certificate[0])
}

func secretLeaf(t *testing.T, client *fake.Clientset) string {
	t.Helper()
	secret, err := client.CoreV1().Secrets("kube-system").Get(context.Background(), "tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(secret.Data[keyCert], secret.Data[keyKey])
	if err != nil {
		t.Fatal(err)
	}
	return leafOf(t, &pair)
}

// A renewal (new CA and serving certificate) is injected first and served
// only once the configuration has trusted the new CA for Interval: never is a
// certificate served that the configuration does not trust.
func TestCertManagerServesRenewalOnlyOnceInjected(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(webhookConfig())
	clock := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	m := manager(client, clock)
	check := watchTrust(t, client, clock, m)
	if err := m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	check("after the first sync")
	first := leafOf(t, m.current.Load())

	clock.Step(61 * 24 * time.Hour) // past two thirds of 90 days
	if err := m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	check("after the renewal")
	renewed := secretLeaf(t, client)
	if renewed == first {
		t.Fatal("not renewed")
	}
	if leafOf(t, m.current.Load()) != first {
		t.Fatal("the renewed certificate is served in the sync that injected its CA: an apiserver that has not seen the new caBundle yet refuses it")
	}
	clock.Step(m.Interval)
	if err := m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	check("after the next sync")
	if leafOf(t, m.current.Load()) != renewed {
		t.Fatal("the renewed certificate is not served one interval after its CA was injected")
	}
}

// The injection fails (the apiserver is unavailable, RBAC): the previous
// certificate is kept, still trusted, until the injection succeeds.
func TestCertManagerKeepsTrustedCertificateWhileInjectionFails(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(webhookConfig())
	clock := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	m := manager(client, clock)
	check := watchTrust(t, client, clock, m)
	if err := m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	first := leafOf(t, m.current.Load())
	failing := true
	client.PrependReactor("patch", "mutatingwebhookconfigurations", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failing {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "admissionregistration.k8s.io", Resource: "mutatingwebhookconfigurations"}, "statefulset-resizer", errors.New("no patch right"))
		}
		return false, nil, nil
	})
	clock.Step(61 * 24 * time.Hour)
	for i := 0; i < 3; i++ {
		if err := m.Sync(ctx); err == nil {
			t.Fatal("a failed injection is not an error")
		}
		check(fmt.Sprintf("after failed injection %d", i+1))
		if leafOf(t, m.current.Load()) != first {
			t.Fatal("a certificate whose CA could not be injected replaced the trusted one")
		}
		clock.Step(m.Interval)
	}
	failing = false
	for i := 0; i < 2; i++ {
		if err := m.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		check("once the injection works")
		clock.Step(m.Interval)
	}
	if leafOf(t, m.current.Load()) != secretLeaf(t, client) {
		t.Fatal("the renewed certificate is not served once its CA is injected")
	}
}

// Another replica renewed the Secret and stopped before injecting: a replica
// that loads it injects the bundle before serving it. A replica that starts
// meanwhile (nothing served) serves it once the configuration trusts it.
func TestCertManagerReplicaLoadsRenewalNotInjected(t *testing.T) {
	ctx, client, clock, m := startedManager(t)
	first := leafOf(t, m.current.Load())
	clock.Step(61 * 24 * time.Hour)
	// The other replica's renewal, written and never injected.
	secrets := client.CoreV1().Secrets("kube-system")
	secret, err := secrets.Get(ctx, "tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if secret.Data, err = generate(hosts, clock.Now(), 90*24*time.Hour, secret.Data[keyCABundle]); err != nil {
		t.Fatal(err)
	}
	if _, err := secrets.Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	starting := manager(client, clock)
	check := watchTrust(t, client, clock, m, starting)
	if err := m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	check("after the sync that injected the renewal")
	if leafOf(t, m.current.Load()) != first {
		t.Fatal("the renewal is served in the sync that injected its CA")
	}
	if err := starting.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	check("after the first sync of a starting replica")
	if leafOf(t, starting.current.Load()) != secretLeaf(t, client) {
		t.Fatal("a starting replica does not serve the trusted renewal at once")
	}
	clock.Step(m.Interval)
	if err := m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	check("one interval later")
	if leafOf(t, m.current.Load()) != secretLeaf(t, client) {
		t.Fatal("the renewal is not served one interval after its CA was injected")
	}
}

// A configuration whose caBundle does not trust what a replica serves (a
// re-apply with another bundle, the Secret deleted and generated anew): the
// certificate the bundle is injected for is served at once, there is nothing
// to keep.
func TestCertManagerReplacesUntrustedCertificateAtOnce(t *testing.T) {
	ctx, client, clock, m := startedManager(t)
	first := leafOf(t, m.current.Load())
	if err := client.CoreV1().Secrets("kube-system").Delete(ctx, "tls", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	other, err := generate(hosts, clock.Now(), time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	configs := client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	config, err := configs.Get(ctx, "statefulset-resizer", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range config.Webhooks {
		config.Webhooks[i].ClientConfig.CABundle = other[keyCABundle]
	}
	if _, err := configs.Update(ctx, config, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if msg := servedTrusted(client, m, clock.Now()); msg != "" || leafOf(t, m.current.Load()) == first {
		t.Fatalf("the untrusted certificate is kept: %s", msg)
	}
}
