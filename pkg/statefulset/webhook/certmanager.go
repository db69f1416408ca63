package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// CertManager keeps the webhook's generated certificates: a self-signed CA and
// a serving certificate for Hosts, in the Secret SecretNamespace/SecretName so
// that every replica and every restart serves the same ones, renewed before
// they expire, with the CA bundle injected into every webhook of the
// MutatingWebhookConfiguration ConfigurationName. Every replica runs it (not
// only the leader): whichever writes the Secret first wins, the others load
// what it wrote.
type CertManager struct {
	Client            kubernetes.Interface
	SecretNamespace   string
	SecretName        string
	ConfigurationName string
	// Hosts are the DNS names and IP addresses the serving certificate is for;
	// the first is its common name.
	Hosts []string
	// Validity of a generated certificate; renewed after two thirds of it.
	Validity time.Duration
	// Interval between checks of the Secret and of the configuration's CA
	// bundle (which a re-applied manifest may have emptied); also how long
	// the configuration must have trusted a new certificate before it
	// replaces a trusted one (serve).
	Interval time.Duration
	Clock    clock.Clock

	current atomic.Pointer[tls.Certificate]
	// pending is the Secret's certificate while it waits to replace the
	// served one, and since when the configuration trusts it (zero: not yet).
	// Only Sync uses it, from one goroutine.
	pending      []byte
	trustedSince time.Time
	// noConfiguration remembers that the configuration was missing, so that
	// it is logged once, not at every check.
	noConfiguration bool
}

// GetCertificate is for tls.Config: the serving certificate last loaded.
func (m *CertManager) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := m.current.Load(); c != nil {
		return c, nil
	}
	return nil, errors.New("the webhook certificate is not ready yet")
}

// Run checks the certificates now and then every Interval until ctx ends.
func (m *CertManager) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("secret", klog.KRef(m.SecretNamespace, m.SecretName), "mutatingWebhookConfiguration", m.ConfigurationName)
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if err := m.Sync(ctx); err != nil {
			logger.Error(err, "Webhook certificates", "retryIn", m.Interval)
		}
	}, m.Interval)
}

// Sync makes sure the Secret holds usable certificates, injects their CA
// bundle, and then serves the Secret's certificate once the configuration
// trusts it (serve): in this order, so that no replica serves a certificate
// the apiserver does not trust yet.
func (m *CertManager) Sync(ctx context.Context) error {
	data, err := m.ensureSecret(ctx)
	if err != nil {
		return err
	}
	pair, err := tls.X509KeyPair(data[keyCert], data[keyKey])
	if err != nil {
		return fmt.Errorf("loading the webhook certificate from Secret %s/%s: %w", m.SecretNamespace, m.SecretName, err)
	}
	config, err := m.injectCABundle(ctx, data[keyCABundle])
	if err != nil {
		return err
	}
	return m.serve(ctx, &pair, config)
}

// serve makes pair the certificate served, when that cannot make the
// apiserver refuse a call that it would accept now. The apiserver verifies the
// webhook's certificate against the caBundle of the configuration, which it
// reads through a watch (every apiserver of the cluster its own, each a little
// behind); a certificate served before they all have a bundle that trusts it
// is refused, and with failurePolicy Ignore the request then goes on as if
// there were no webhook (a template change is refused, nothing is recorded).
// A renewal therefore goes: the bundle with the new and the previous CA is
// injected (the Secret keeps the previous CA second), then the new
// certificate is served once the configuration has trusted it for Interval,
// while the previous certificate stays trusted on this replica and on those
// yet to load the Secret. The previous CA stays in the bundle until the next
// renewal replaces it: no replica serves with it by then, and its key is gone
// from the Secret. pair is served at once when there is no configuration
// (nothing calls the webhook), when nothing is served yet (a replica without
// a certificate fails every handshake and its readiness), or when the
// configuration does not trust the served certificate (it fails already);
// never while the configuration does not trust pair.
func (m *CertManager) serve(ctx context.Context, pair *tls.Certificate, config *admissionregistrationv1.MutatingWebhookConfiguration) error {
	current := m.current.Load()
	if current != nil && bytes.Equal(current.Certificate[0], pair.Certificate[0]) {
		m.pending, m.trustedSince = nil, time.Time{}
		return nil
	}
	now := m.Clock.Now()
	if !bytes.Equal(m.pending, pair.Certificate[0]) {
		m.pending, m.trustedSince = pair.Certificate[0], time.Time{}
	}
	reason := "no MutatingWebhookConfiguration"
	if config != nil {
		if err := trustedBy(config, pair, now); err != nil {
			m.trustedSince = time.Time{}
			return fmt.Errorf("not serving the certificate of Secret %s/%s: %w", m.SecretNamespace, m.SecretName, err)
		}
		if m.trustedSince.IsZero() {
			m.trustedSince = now
		}
		switch {
		case current == nil:
			reason = "first certificate"
		case trustedBy(config, current, now) != nil:
			reason = "the served certificate is not trusted by the caBundle"
		case now.Sub(m.trustedSince) < m.Interval:
			klog.FromContext(ctx).V(2).Info("The new webhook certificate waits for every apiserver to see its CA bundle", "servedFrom", m.trustedSince.Add(m.Interval))
			return nil
		default:
			reason = "the caBundle has trusted it for " + m.Interval.String()
		}
	}
	m.current.Store(pair)
	m.pending, m.trustedSince = nil, time.Time{}
	klog.FromContext(ctx).Info("Serving the webhook certificate", "secret", klog.KRef(m.SecretNamespace, m.SecretName), "reason", reason)
	return nil
}

// trustedBy says why some webhook of config does not trust pair's
// certificate (nil when every one does).
func trustedBy(config *admissionregistrationv1.MutatingWebhookConfiguration, pair *tls.Certificate, now time.Time) error {
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return err
	}
	for _, w := range config.Webhooks {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(w.ClientConfig.CABundle)
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now}); err != nil {
			return fmt.Errorf("the caBundle of webhook %s of MutatingWebhookConfiguration %s does not trust it: %w", w.Name, config.Name, err)
		}
	}
	return nil
}

// ensureSecret returns the Secret's data, after creating or renewing it when
// needed. A conflict with another replica is settled by reading what it wrote.
func (m *CertManager) ensureSecret(ctx context.Context) (map[string][]byte, error) {
	secrets := m.Client.CoreV1().Secrets(m.SecretNamespace)
	logger := klog.FromContext(ctx)
	for attempt := 0; ; attempt++ {
		secret, err := secrets.Get(ctx, m.SecretName, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("reading the webhook certificate Secret %s/%s: %w", m.SecretNamespace, m.SecretName, err)
		}
		exists := err == nil
		reason := "the Secret does not exist"
		if exists {
			if reason = renewalReason(secret.Data, m.Hosts, m.Clock.Now()); reason == "" {
				return secret.Data, nil
			}
		}
		var previousBundle []byte
		if exists {
			previousBundle = secret.Data[keyCABundle]
		}
		data, err := generate(m.Hosts, m.Clock.Now(), m.Validity, previousBundle)
		if err != nil {
			return nil, err
		}
		logger.Info("Generating the webhook certificates", "secret", klog.KRef(m.SecretNamespace, m.SecretName), "reason", reason, "hosts", m.Hosts)
		err = m.writeSecret(ctx, secret, exists, data)
		if err == nil {
			return data, nil
		}
		if attempt > 0 || !(apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err)) {
			return nil, fmt.Errorf("writing the webhook certificate Secret %s/%s: %w", m.SecretNamespace, m.SecretName, err)
		}
		// Another replica wrote it meanwhile: read and check what it wrote.
	}
}

func (m *CertManager) writeSecret(ctx context.Context, old *corev1.Secret, exists bool, data map[string][]byte) error {
	secrets := m.Client.CoreV1().Secrets(m.SecretNamespace)
	if !exists {
		_, err := secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: m.SecretName, Namespace: m.SecretNamespace,
				Labels: map[string]string{"app.kubernetes.io/managed-by": "statefulset-resizer"}},
			Type: corev1.SecretTypeTLS,
			Data: data,
		}, metav1.CreateOptions{FieldManager: "statefulset-resizer"})
		return err
	}
	s := old.DeepCopy()
	s.Data = data // the resourceVersion read makes a concurrent renewal a conflict
	_, err := secrets.Update(ctx, s, metav1.UpdateOptions{FieldManager: "statefulset-resizer"})
	return err
}

// injectCABundle sets bundle as the caBundle of every webhook of the
// configuration that does not have it yet, and returns the configuration as
// it now is. A missing configuration (nil) is not an error (the webhook may be
// registered later); it is logged once.
func (m *CertManager) injectCABundle(ctx context.Context, bundle []byte) (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	logger := klog.FromContext(ctx).WithValues("mutatingWebhookConfiguration", m.ConfigurationName)
	configs := m.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	config, err := configs.Get(ctx, m.ConfigurationName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if !m.noConfiguration {
			logger.Info("No MutatingWebhookConfiguration to inject the CA bundle into yet; checking again every interval", "interval", m.Interval)
		}
		m.noConfiguration = true
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading MutatingWebhookConfiguration %s: %w", m.ConfigurationName, err)
	}
	m.noConfiguration = false
	patch := caBundlePatch(config, bundle)
	if patch == nil {
		return config, nil
	}
	if config, err = configs.Patch(ctx, m.ConfigurationName, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: "statefulset-resizer"}); err != nil {
		return nil, fmt.Errorf("injecting the CA bundle into MutatingWebhookConfiguration %s: %w", m.ConfigurationName, err)
	}
	logger.Info("Injected the webhook CA bundle")
	return config, nil
}

// caBundlePatch is a JSON patch setting bundle in every webhook whose
// caBundle differs, guarded by a test of each webhook's name (the list may
// have changed since it was read); nil when none differs.
func caBundlePatch(config *admissionregistrationv1.MutatingWebhookConfiguration, bundle []byte) []byte {
	var ops []map[string]any
	for i, w := range config.Webhooks {
		if bundleEqual(w.ClientConfig.CABundle, bundle) {
			continue
		}
		ops = append(ops,
			map[string]any{"op": "test", "path": fmt.Sprintf("/webhooks/%d/name", i), "value": w.Name},
			map[string]any{"op": "add", "path": fmt.Sprintf("/webhooks/%d/clientConfig/caBundle", i), "value": bundle})
	}
	if len(ops) == 0 {
		return nil
	}
	b, _ := json.Marshal(ops) // plain values
	return b
}
