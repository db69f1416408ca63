package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"k8s.io/klog/v2"
)

// ReadyPath answers 200 on the webhook's own port. Probed over HTTPS, it
// succeeds only once a serving certificate is loaded (the TLS handshake fails
// before), so a readiness probe on it keeps a replica out of the Service until
// it can answer the apiserver: with failurePolicy Ignore, a request sent to a
// replica that cannot answer would get the apiserver's usual error.
const ReadyPath = "/readyz"

// Serve serves the webhook over HTTPS on listener, with the certificate
// getCertificate returns for each connection, until ctx ends.
func Serve(ctx context.Context, listener net.Listener, getCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)) error {
	logger := klog.FromContext(ctx)
	mux := http.NewServeMux()
	mux.Handle(Path, Handler{Logger: logger})
	mux.HandleFunc(ReadyPath, func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	srv := &http.Server{
		Handler:           mux,
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: getCertificate},
		ReadHeaderTimeout: 10 * time.Second,
		// The apiserver waits timeoutSeconds (5) for an answer; a slow client gets no more.
		ReadTimeout:  30 * time.Second,
		WriteTimeout: 30 * time.Second,
	}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	logger.Info("Serving the admission webhook", "address", listener.Addr().String(), "path", Path)
	if err := srv.ServeTLS(listener, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("admission webhook server on %s: %w", listener.Addr(), err)
	}
	return nil
}
