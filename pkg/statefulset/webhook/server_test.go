package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// The readiness path answers only once a serving certificate is loaded: before, the TLS
// handshake fails, so a readiness probe keeps the replica out of the Service.
func TestServeReadyOnlyWithCertificate(t *testing.T) {
	data, err := generate([]string{"127.0.0.1"}, time.Now(), time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(data[keyCert], data[keyKey])
	if err != nil {
		t.Fatal(err)
	}
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
	go func() { served <- Serve(ctx, listener, getCertificate) }()
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
