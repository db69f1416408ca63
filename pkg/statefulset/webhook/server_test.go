package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// servingCertificate generates a serving certificate for 127.0.0.1: the generated PEM data and
// the parsed certificate.
func servingCertificate(t *testing.T) (map[string][]byte, tls.Certificate) {
	t.Helper()
	data, err := generate([]string{"127.0.0.1"}, time.Now(), time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(data[keyCert], data[keyKey])
	if err != nil {
		t.Fatal(err)
	}
	return data, cert
}

// The readiness path answers only once a serving certificate is loaded: before, the TLS
// handshake fails, so a readiness probe keeps the replica out of the Service.
func TestServeReadyOnlyWithCertificate(t *testing.T) {
	data, cert := servingCertificate(t)
	var loaded atomic.Pointer[tls.Certificate]
	getCertificate := func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		if c := loaded.Load(); c != nil {
			return c, nil
		}
		return (&CertManager{}).GetCertificate(nil)
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, listener, getCertificate, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Error(err)
		}
	})

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(data[keyCABundle])
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	url := "https://" + listener.Addr().String() + ReadyPath
	if resp, err := client.Get(url); err == nil {
		resp.Body.Close()
		t.Fatalf("GET %s without a certificate: %s, want a failed handshake", ReadyPath, resp.Status)
	}
	loaded.Store(&cert)
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s with a certificate: %v", ReadyPath, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Fatalf("GET %s: %s %q, want 200 ok", ReadyPath, resp.Status, body)
	}
}

// Told to stop (draining), the server fails its readiness path at once and still answers
// admission requests, over fresh connections, until its context ends; then Serve returns.
func TestServeDrains(t *testing.T) {
	data, cert := servingCertificate(t)
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	draining := make(chan struct{})
	served := make(chan error, 1)
	go func() {
		served <- Serve(ctx, listener, func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &cert, nil }, draining)
	}()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(data[keyCABundle])
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	base := "https://" + listener.Addr().String()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := client.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	review := func() {
		t.Helper()
		body := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-1","operation":"CREATE",` +
			`"resource":{"group":"apps","version":"v1","resource":"statefulsets"},"object":{"apiVersion":"apps/v1","kind":"StatefulSet"}}}`
		resp, err := client.Post(base+Path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatalf("POST %s while draining: %v", Path, err)
		}
		defer resp.Body.Close()
		answer, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(answer), `"uid":"u-1"`) || !strings.Contains(string(answer), `"allowed":true`) {
			t.Fatalf("POST %s while draining: %s %s, want the AdmissionReview answered", Path, resp.Status, answer)
		}
		if !resp.Close {
			t.Errorf("POST %s while draining: the connection is kept alive, want it closed after the answer", Path)
		}
	}
	if code, _ := get(ReadyPath); code != http.StatusOK {
		t.Fatalf("GET %s before the stop: %d, want 200", ReadyPath, code)
	}
	close(draining)
	deadline := time.Now().Add(30 * time.Second)
	for code, _ := get(ReadyPath); code != http.StatusServiceUnavailable; code, _ = get(ReadyPath) {
		if time.Now().After(deadline) {
			t.Fatalf("GET %s while draining: %d, want 503", ReadyPath, code)
		}
	}
	review()
	review()
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve = %v, want nil after the drain", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return within 30s of its context's end")
	}
}
