package framework

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the key material of one test cluster. The apiserver gets a serving
// certificate signed by our own CA (instead of generating a self-signed one
// in --cert-dir) so clients can verify TLS with CAData and the certificate
// stays the same across RestartAPIServer.
type pki struct {
	caCertPEM  []byte
	caFile     string
	servCert   string
	servKey    string
	saPubFile  string // --service-account-key-file
	saPrivFile string // --service-account-signing-key-file, kcm --service-account-private-key-file
}

func newPKI(dir string) (*pki, error) {
	p := &pki{
		caFile:     filepath.Join(dir, "ca.crt"),
		servCert:   filepath.Join(dir, "apiserver.crt"),
		servKey:    filepath.Join(dir, "apiserver.key"),
		saPubFile:  filepath.Join(dir, "sa.pub"),
		saPrivFile: filepath.Join(dir, "sa.key"),
	}
	ca, err := NewCA("csi-resizer-test-ca")
	if err != nil {
		return nil, err
	}
	p.caCertPEM = ca.PEM
	if err := ca.Issue("kube-apiserver", []string{"127.0.0.1", "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		p.servCert, p.servKey); err != nil {
		return nil, err
	}

	// Service-account tokens are signed with RSA (the apiserver's default
	// algorithm for --service-account-signing-key-file).
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("sa key: %w", err)
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{
		p.caFile:     p.caCertPEM,
		p.saPubFile:  pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPubDER}),
		p.saPrivFile: pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(saKey)}),
	}
	for path, data := range files {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// CA is a certificate authority of a test: the apiserver's serving certificate, and those a
// test hands to a process (e.g. statefulset-resizer's webhook certificate files, as
// cert-manager would write them).
type CA struct {
	// PEM is the CA certificate, for a client's trust (a caBundle).
	PEM  []byte
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewCA makes a CA valid from an hour ago for a week.
func NewCA(name string) (*CA, error) {
	now := time.Now()
	return NewCAValid(name, now.Add(-time.Hour), now.Add(7*24*time.Hour))
}

// NewCAValid makes a CA valid from notBefore to notAfter; the certificates it issues have the
// same validity (e.g. an ageing pair, due for renewal).
func NewCAValid(name string, notBefore, notAfter time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("ca key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("ca cert: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), cert: cert, key: key}, nil
}

// KeyPEM is the CA's private key, PEM-encoded.
func (ca *CA) KeyPEM() ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(ca.key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// Issue writes a serving certificate signed by the CA for hosts (IP addresses or DNS names),
// with a fresh key and serial number, to certFile and keyFile (PEM).
func (ca *CA) Issue(commonName string, hosts []string, certFile, keyFile string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("serving key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial.Add(serial, big.NewInt(2)),
		Subject:      pkix.Name{CommonName: commonName},
		NotBefore:    ca.cert.NotBefore,
		NotAfter:     ca.cert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return fmt.Errorf("serving cert: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
}

// randomToken returns a random hex string for static bearer tokens.
func randomToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
