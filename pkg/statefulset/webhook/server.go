package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
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
// getCertificate returns for each connection, until ctx ends; then it shuts
// the server down, letting requests under way finish (at most 5 s).
//
// Once draining is closed (the process was told to stop; ctx ends later),
// ReadyPath answers 503 while the webhook itself is still served: the failing
// readiness probe takes the replica out of the Service's endpoints, and the
// apiserver's calls that still reach it meanwhile (endpoints and proxies take
// a few seconds to follow) are answered instead of refused. Keep-alives are
// turned off too, so that a client holding a connection to this replica opens
// a new one, through the Service, for its next request.
func Serve(ctx context.Context, listener net.Listener, getCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error), draining <-chan struct{}) error {
	logger := klog.FromContext(ctx)
	var stopping atomic.Bool
	mux := http.NewServeMux()
	mux.Handle(Path, Handler{Logger: logger})
	mux.HandleFunc(ReadyPath, func(w http.ResponseWriter, _ *http.Request) {
		if stopping.Load() {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	srv := &http.Server{
		Handler:           mux,
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: getCertificate},
		ReadHeaderTimeout: 10 * time.Second,
		// The apiserver waits timeoutSeconds (5) for an answer; a slow client gets no more.
		ReadTimeout:  30 * time.Second,
		WriteTimeout: 30 * time.Second,
	}
	go func() {
		select {
		case <-draining:
			stopping.Store(true)
			srv.SetKeepAlivesEnabled(false)
			logger.Info("Draining the admission webhook: not ready any more, still answering")
		case <-ctx.Done():
		}
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
