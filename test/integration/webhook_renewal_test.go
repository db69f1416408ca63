//go:build integration

package integration

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/webhook"
	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

const webhookSecret = "statefulset-resizer-webhook-tls"

// The generated certificates' renewal on the real apiserver (docs/design.md §3.9): the Secret
// holds a pair past two thirds of its life, as a replica of last year left it. A starting
// statefulset-resizer renews it: a new CA and serving certificate in the Secret, the previous
// CA kept second in the bundle (a replica still serving the old certificate stays trusted), the
// new bundle injected, and the apiserver calls the webhook with the new certificate.
func TestWebhookRenewsAgeingCertificate(t *testing.T) {
	e := scenario.Start(t, scenario.Options{NoResizer: true})
	scenario.ApplyStatefulSetResizerRBAC(t, e.Cluster, e.Namespace)
	now := time.Now()
	old, data := ageingWebhookSecret(t, e, now.Add(-300*24*time.Hour), now.Add(65*24*time.Hour))
	svc := "statefulset-resizer." + e.Namespace + ".svc"

	w := e.StartWebhook(t) // waits for the injection and for the apiserver to call it
	secret, err := e.Client.CoreV1().Secrets(e.Namespace).Get(e.Ctx, webhookSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(secret.Data["tls.crt"], data["tls.crt"]) || bytes.Equal(secret.Data["ca.key"], data["ca.key"]) {
		t.Fatalf("the ageing certificate was not renewed")
	}
	bundle := parseCerts(t, secret.Data["ca.crt"])
	if len(bundle) != 2 || !bytes.Equal(bundle[1].Raw, parseCerts(t, old.PEM)[0].Raw) {
		t.Fatalf("renewed bundle has %d certificates; want the new CA then the previous one", len(bundle))
	}
	addr := w.URL[len("https://") : len(w.URL)-len(webhook.Path)]
	if served := servedCertificate(t, addr, secret.Data["ca.crt"]); !bytes.Equal(served, parseCerts(t, secret.Data["tls.crt"])[0].Raw) {
		t.Errorf("the webhook does not serve the renewed certificate")
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(secret.Data["ca.crt"])
	if _, err := parseCerts(t, data["tls.crt"])[0].Verify(x509.VerifyOptions{Roots: pool, DNSName: svc}); err != nil {
		t.Errorf("the previous serving certificate is not trusted by the new bundle: %v", err)
	}
	config, err := e.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(e.Ctx, w.Configuration, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, wh := range config.Webhooks {
		if !bytes.Equal(wh.ClientConfig.CABundle, secret.Data["ca.crt"]) {
			t.Errorf("webhook %s: caBundle is not the renewed bundle", wh.Name)
		}
	}
}

// Two replicas started together, with no Secret yet (docs/design.md §3.9: every replica serves
// the same certificate): both serve the one Secret's certificate, and the apiserver trusts it.
// Whether both tried to create the Secret depends on timing (in runs so far one found the
// other's): the create race itself, where the loser reads the winner's Secret, is tested with
// the fake clientset (TestCertManagerCreateRace).
func TestWebhookReplicasShareCertificate(t *testing.T) {
	e := scenario.Start(t, scenario.Options{NoResizer: true})
	scenario.ApplyStatefulSetResizerRBAC(t, e.Cluster, e.Namespace)
	ports := []int{framework.FreePort(t), framework.FreePort(t)}
	var argLists [][]string
	for _, port := range ports {
		argLists = append(argLists, scenario.WebhookArgs(e.Namespace, port))
	}
	e.StartWebhookProcesses(t, argLists...)
	e.RegisterShippedWebhook(t, fmt.Sprintf("https://127.0.0.1:%d%s", ports[0], webhook.Path))
	e.WaitWebhookActive(t)
	secret, err := e.Client.CoreV1().Secrets(e.Namespace).Get(e.Ctx, webhookSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := parseCerts(t, secret.Data["tls.crt"])[0].Raw
	for _, port := range ports {
		framework.Eventually(t, 30*time.Second, func() (bool, string) {
			served := servedCertificate(t, fmt.Sprintf("127.0.0.1:%d", port), secret.Data["ca.crt"])
			return bytes.Equal(served, want), fmt.Sprintf("replica on port %d serves another certificate than the Secret's", port)
		})
	}
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// parseCerts parses a PEM bundle.
func parseCerts(t *testing.T, data []byte) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for block, rest := pem.Decode(data); block != nil; block, rest = pem.Decode(rest) {
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		t.Fatalf("no PEM certificate in %q", data)
	}
	return out
}
