package webhook

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"
)

// FileCertificate serves a certificate and key from files (cert-manager, a
// mounted Secret), read again when either file changes: a renewed certificate
// is served without a restart. When the files cannot be read or do not match,
// the certificate last loaded is kept.
type FileCertificate struct {
	CertFile, KeyFile string

	mu      sync.Mutex
	stamp   string
	current *tls.Certificate
}

// GetCertificate is for tls.Config.
func (f *FileCertificate) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	stamp, err := f.fileStamp()
	if err == nil && stamp != f.stamp {
		var pair tls.Certificate
		if pair, err = tls.LoadX509KeyPair(f.CertFile, f.KeyFile); err == nil {
			f.current, f.stamp = &pair, stamp
		}
	}
	if f.current == nil {
		return nil, fmt.Errorf("loading the webhook certificate from --webhook-tls-cert-file=%s and --webhook-tls-private-key-file=%s: %w", f.CertFile, f.KeyFile, err)
	}
	return f.current, nil
}

// Load reads the files once, for a clear error at startup.
func (f *FileCertificate) Load() error {
	_, err := f.GetCertificate(nil)
	return err
}

// fileStamp changes whenever either file does (a mounted Secret is updated by
// swapping a symlink, which changes what Stat sees).
func (f *FileCertificate) fileStamp() (string, error) {
	stamp := ""
	for _, name := range []string{f.CertFile, f.KeyFile} {
		fi, err := os.Stat(name)
		if err != nil {
			return "", err
		}
		stamp += fmt.Sprintf("%s:%d:%d;", name, fi.Size(), fi.ModTime().UnixNano())
	}
	return stamp, nil
}
