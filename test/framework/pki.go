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
	now := time.Now()

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("ca key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "csi-resizer-test-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("ca cert: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	p.caCertPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})

	servKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("serving key: %w", err)
	}
	servTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	}
	servDER, err := x509.CreateCertificate(rand.Reader, servTmpl, caCert, &servKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("serving cert: %w", err)
	}
	servKeyDER, err := x509.MarshalECPrivateKey(servKey)
	if err != nil {
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
		p.servCert:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: servDER}),
		p.servKey:    pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: servKeyDER}),
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

// randomToken returns a random hex string for static bearer tokens.
func randomToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
