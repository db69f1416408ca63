//go:build integration

package integration

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/webhook"
	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// The cert-manager way (docs/design.md §3.9): statefulset-resizer serves the certificate files
// it is given (--webhook-tls-cert-file, --webhook-tls-private-key-file) and the configuration's
// caBundle is someone else's to fill (here the test, as cert-manager's CA injector would). On
// the real apiserver: the webhook answers with the files' certificate, makes no Secret and
// leaves the caBundle alone; a renewed certificate written over the files (as cert-manager
// renews) is served without a restart, and the apiserver keeps calling the webhook.
func TestWebhookFileCertificates(t *testing.T) {
	e := scenario.Start(t, scenario.Options{NoResizer: true})
	scenario.ApplyStatefulSetResizerRBAC(t, e.Cluster, e.Namespace)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca, err := framework.NewCA("cert-manager-test-ca")
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Issue("statefulset-resizer", []string{"127.0.0.1"}, certFile, keyFile); err != nil {
		t.Fatal(err)
	}
	port := framework.FreePort(t)
	e.StartWebhookProcesses(t, []string{fmt.Sprintf("--webhook-port=%d", port), "--webhook-namespace=" + e.Namespace,
		"--webhook-tls-cert-file=" + certFile, "--webhook-tls-private-key-file=" + keyFile})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	name := e.RegisterShippedWebhookWithCA(t, "https://"+addr+webhook.Path, ca.PEM)
	e.WaitWebhookActive(t)
	if served := servedCertificate(t, addr, ca.PEM); !bytes.Equal(served, fileCertificate(t, certFile)) {
		t.Fatalf("the webhook does not serve the certificate of %s", certFile)
	}
	grow := func(sts, size string) {
		t.Helper()
		w := &webhookEnv{Env: e, dir: dir}
		m := w.manifest(sts, "1Gi", true)
		w.kubectl(t, "apply", "-f", w.write(t, m))
		m.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[v1.ResourceStorage] = resource.MustParse(size)
		w.kubectl(t, "apply", "-f", w.write(t, m))
		expect(t, w.get(t, e.Namespace, sts), "1Gi", desireJSON(size))
	}
	grow("before-renewal", "2Gi")

	// cert-manager renews: a new key and certificate from the same CA, over the same files.
	old := fileCertificate(t, certFile)
	if err := ca.Issue("statefulset-resizer", []string{"127.0.0.1"}, certFile, keyFile); err != nil {
		t.Fatal(err)
	}
	renewed := fileCertificate(t, certFile)
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		served := servedCertificate(t, addr, ca.PEM)
		return bytes.Equal(served, renewed), fmt.Sprintf("still serving the old certificate: %v", bytes.Equal(served, old))
	})
	grow("after-renewal", "3Gi")

	if _, err := e.Client.CoreV1().Secrets(e.Namespace).Get(e.Ctx, "statefulset-resizer-webhook-tls", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Secret statefulset-resizer-webhook-tls: %v; want none with certificate files", err)
	}
	config, err := e.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(e.Ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, wh := range config.Webhooks {
		if !bytes.Equal(wh.ClientConfig.CABundle, ca.PEM) {
			t.Errorf("webhook %s: caBundle changed; with certificate files it is not statefulset-resizer's to inject", wh.Name)
		}
	}
}

// servedCertificate is the DER of the leaf certificate the server at addr presents, verified
// against caPEM.
func servedCertificate(t *testing.T, addr string, caPEM []byte) []byte {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatalf("TLS to the webhook at %s: %v", addr, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].Raw
}

// fileCertificate is the DER of the PEM certificate in file.
func fileCertificate(t *testing.T, file string) []byte {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("%s: no PEM certificate", file)
	}
	return block.Bytes
}
