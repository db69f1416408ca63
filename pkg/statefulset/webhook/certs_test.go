package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/cert"
	testingclock "k8s.io/utils/clock/testing"
)

var hosts = []string{"statefulset-resizer.kube-system.svc", "127.0.0.1"}

func webhookConfig() *admissionregistrationv1.MutatingWebhookConfiguration {
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "statefulset-resizer"},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{{Name: "a.csi-resizer.io"}, {Name: "b.csi-resizer.io"}},
	}
}

func manager(client *fake.Clientset, clock *testingclock.FakeClock) *CertManager {
	return &CertManager{Client: client, SecretNamespace: "kube-system", SecretName: "tls", ConfigurationName: "statefulset-resizer",
		Hosts: hosts, Validity: 90 * 24 * time.Hour, Interval: time.Minute, Clock: clock}
}

// startedManager is a manager on a fake clientset holding the webhook
// configuration, with a fake clock, after its first sync.
func startedManager(t *testing.T) (context.Context, *fake.Clientset, *testingclock.FakeClock, *CertManager) {
	t.Helper()
	ctx := context.Background()
	client := fake.NewClientset(webhookConfig())
	clock := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	m := manager(client, clock)
	if err := m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	return ctx, client, clock, m
}

// verify checks that the served certificate chains to the bundle for every host.
func verify(t *testing.T, m *CertManager, bundle []byte, now time.Time) {
	t.Helper()
	c, err := m.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	pool, err := cert.NewPoolFromBytes(bundle)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hosts {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: h, Roots: pool, CurrentTime: now}); err != nil {
			t.Fatalf("served certificate does not verify for %s against the bundle: %v", h, err)
		}
	}
}

func TestCertManagerGeneratesSharesAndInjects(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(webhookConfig())
	clock := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	m := manager(client, clock)
	if _, err := m.GetCertificate(nil); err == nil {
		t.Fatal("a certificate before the first Sync")
	}
	if err := m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	secret, err := client.CoreV1().Secrets("kube-system").Get(ctx, "tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	config, _ := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "statefulset-resizer", metav1.GetOptions{})
	for _, w := range config.Webhooks {
		if string(w.ClientConfig.CABundle) != string(secret.Data[keyCABundle]) {
			t.Fatalf("webhook %s caBundle %q, want the Secret's", w.Name, w.ClientConfig.CABundle)
		}
	}
	verify(t, m, secret.Data[keyCABundle], clock.Now())

	// A second replica (or a restart) serves the same certificate and writes nothing.
	other := manager(client, clock)
	client.ClearActions()
	if err := other.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	for _, a := range client.Actions() {
		if a.GetVerb() != "get" {
			t.Fatalf("second replica wrote: %v", a)
		}
	}
	a, _ := m.GetCertificate(nil)
	b, _ := other.GetCertificate(nil)
	if string(a.Certificate[0]) != string(b.Certificate[0]) {
		t.Fatal("two replicas serve different certificates")
	}

	// A re-applied configuration without the bundle gets it back.
	config.Webhooks[1].ClientConfig.CABundle = nil
	if _, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, config, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := other.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	config, _ = client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "statefulset-resizer", metav1.GetOptions{})
	if string(config.Webhooks[1].ClientConfig.CABundle) != string(secret.Data[keyCABundle]) {
		t.Fatal("the emptied caBundle was not injected again")
	}
}

func TestCertManagerRenewsBeforeExpiry(t *testing.T) {
	ctx, client, clock, m := startedManager(t)
	first, _ := m.GetCertificate(nil)
	clock.Step(59 * 24 * time.Hour) // before two thirds of 90 days
	if err := m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if c, _ := m.GetCertificate(nil); string(c.Certificate[0]) != string(first.Certificate[0]) {
		t.Fatal("renewed before two thirds of the lifetime")
	}
	clock.Step(2 * 24 * time.Hour)
	if err := m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	// Served one interval after its CA was injected
	// (TestCertManagerServesRenewalOnlyOnceInjected).
	clock.Step(m.Interval)
	if err := m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	renewed, _ := m.GetCertificate(nil)
	if string(renewed.Certificate[0]) == string(first.Certificate[0]) {
		t.Fatal("not renewed after two thirds of the lifetime")
	}
	secret, _ := client.CoreV1().Secrets("kube-system").Get(ctx, "tls", metav1.GetOptions{})
	bundle, _ := cert.ParseCertsPEM(secret.Data[keyCABundle])
	if len(bundle) != 2 {
		t.Fatalf("bundle has %d CAs, want the new and the previous one", len(bundle))
	}
	// A replica still serving the previous certificate is trusted by the new bundle.
	old := &CertManager{}
	old.current.Store(first)
	verify(t, old, secret.Data[keyCABundle], clock.Now())
	verify(t, m, secret.Data[keyCABundle], clock.Now())
}

func TestCertManagerHostsChange(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	clock := testingclock.NewFakeClock(time.Now())
	m := manager(client, clock)
	m.Hosts = hosts[:1]
	if err := m.Sync(ctx); err != nil { // no configuration yet: not an error
		t.Fatal(err)
	}
	m2 := manager(client, clock) // a new version with one more host
	if err := m2.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	secret, _ := client.CoreV1().Secrets("kube-system").Get(ctx, "tls", metav1.GetOptions{})
	verify(t, m2, secret.Data[keyCABundle], clock.Now())
}

// Two replicas creating the Secret at once: the loser serves the winner's.
func TestCertManagerCreateRace(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(webhookConfig())
	clock := testingclock.NewFakeClock(time.Now())
	winners, err := generate(hosts, clock.Now(), time.Hour*24*90, nil)
	if err != nil {
		t.Fatal(err)
	}
	raced := false
	client.PrependReactor("create", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		if raced {
			return false, nil, nil
		}
		raced = true // the other replica's Secret lands just before ours
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "tls"}, Data: winners}
		if err := client.Tracker().Add(secret); err != nil {
			t.Error(err)
		}
		return true, nil, apierrors.NewAlreadyExists(schema.GroupResource{Resource: "secrets"}, "tls")
	})
	loser := manager(client, clock)
	if err := loser.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	b, _ := loser.GetCertificate(nil)
	want, _ := tls.X509KeyPair(winners[keyCert], winners[keyKey])
	if !raced || string(want.Certificate[0]) != string(b.Certificate[0]) {
		t.Fatal("the replica that lost the race serves another certificate")
	}
}

func TestRenewalReason(t *testing.T) {
	now := time.Now()
	data, err := generate(hosts, now, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		data  map[string][]byte
		hosts []string
		at    time.Time
		want  string
	}{
		{"fresh", data, hosts, now, ""},
		{"empty", map[string][]byte{}, hosts, now, "no usable serving certificate"},
		{"another host", data, []string{"other.svc"}, now, "not valid for other.svc"},
		{"due", data, hosts, now.Add(41 * time.Minute), "due for renewal"},
		{"no CA key", map[string][]byte{keyCert: data[keyCert], keyKey: data[keyKey], keyCABundle: data[keyCABundle]}, hosts, now, "CA key"},
	} {
		if got := renewalReason(tc.data, tc.hosts, tc.at); (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: renewalReason = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestFileCertificateReload(t *testing.T) {
	dir := t.TempDir()
	f := &FileCertificate{CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key")}
	if err := f.Load(); err == nil || !strings.Contains(err.Error(), "--webhook-tls-cert-file") {
		t.Fatalf("missing files: err = %v, want one naming the flag", err)
	}
	write := func(data map[string][]byte) {
		for name, key := range map[string]string{f.CertFile: keyCert, f.KeyFile: keyKey} {
			if err := os.WriteFile(name, data[key], 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	first, _ := generate(hosts, time.Now(), time.Hour, nil)
	write(first)
	if err := f.Load(); err != nil {
		t.Fatal(err)
	}
	a, _ := f.GetCertificate(nil)
	second, _ := generate(hosts, time.Now(), time.Hour, nil)
	write(second)
	// The size is the same; make the change visible to Stat even on a coarse clock.
	later := time.Now().Add(time.Minute)
	_ = os.Chtimes(f.CertFile, later, later)
	b, err := f.GetCertificate(nil)
	if err != nil || string(a.Certificate[0]) == string(b.Certificate[0]) {
		t.Fatalf("changed files not re-read (err %v)", err)
	}
	if err := os.WriteFile(f.KeyFile, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	_ = os.Chtimes(f.KeyFile, later.Add(time.Minute), later.Add(time.Minute))
	c, err := f.GetCertificate(nil)
	if err != nil || string(c.Certificate[0]) != string(b.Certificate[0]) {
		t.Fatalf("a broken key file replaced the certificate last loaded (err %v)", err)
	}
}
