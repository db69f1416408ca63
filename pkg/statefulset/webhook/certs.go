package webhook

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"time"

	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// Keys of the certificate Secret. tls.crt and tls.key make it a usable
// kubernetes.io/tls Secret; ca.crt is the CA bundle the apiserver trusts (the
// current CA, then the previous one while it is valid, so that replicas still
// serving the previous certificate stay trusted during a renewal); ca.key signs
// the next serving certificate.
const (
	keyCABundle = "ca.crt"
	keyCAKey    = "ca.key"
	keyCert     = "tls.crt"
	keyKey      = "tls.key"
)

// generate makes a new CA and a serving certificate for hosts (DNS names and
// IP addresses), both valid from now for validity, and the Secret data holding
// them; previousBundle's certificates still valid at now are kept in the bundle.
func generate(hosts []string, now time.Time, validity time.Duration, previousBundle []byte) (map[string][]byte, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the webhook CA key: %w", err)
	}
	caTemplate := &x509.Certificate{
		Subject:               pkix.Name{CommonName: fmt.Sprintf("statefulset-resizer-webhook-ca@%d", now.Unix())},
		NotBefore:             now.Add(-time.Minute), // the apiserver's clock may be a little behind
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caCert, err := sign(caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the webhook serving key: %w", err)
	}
	template := &x509.Certificate{
		Subject:     pkix.Name{CommonName: hosts[0]},
		NotBefore:   caTemplate.NotBefore,
		NotAfter:    caTemplate.NotAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			template.IPAddresses = append(template.IPAddresses, ip)
		} else {
			template.DNSNames = append(template.DNSNames, h)
		}
	}
	serving, err := sign(template, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	return secretData(caCert, caKey, serving, key, now, previousBundle)
}

func sign(template, parent *x509.Certificate, pub *ecdsa.PublicKey, signer *ecdsa.PrivateKey) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generating a certificate serial number: %w", err)
	}
	template.SerialNumber = serial
	der, err := x509.CreateCertificate(rand.Reader, template, parent, pub, signer)
	if err != nil {
		return nil, fmt.Errorf("signing the webhook certificate %q: %w", template.Subject.CommonName, err)
	}
	return x509.ParseCertificate(der)
}

func secretData(caCert *x509.Certificate, caKey *ecdsa.PrivateKey, serving *x509.Certificate, key *ecdsa.PrivateKey, now time.Time, previousBundle []byte) (map[string][]byte, error) {
	bundle := []*x509.Certificate{caCert}
	if previous, err := cert.ParseCertsPEM(previousBundle); err == nil {
		for _, c := range previous {
			if now.Before(c.NotAfter) {
				bundle = append(bundle, c)
				break // the newest previous CA only: bundles do not grow with every renewal
			}
		}
	}
	caPEM, err := cert.EncodeCertificates(bundle...)
	if err != nil {
		return nil, err
	}
	certPEM, err := cert.EncodeCertificates(serving)
	if err != nil {
		return nil, err
	}
	caKeyPEM, err := keyutil.MarshalPrivateKeyToPEM(caKey)
	if err != nil {
		return nil, err
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{keyCABundle: caPEM, keyCAKey: caKeyPEM, keyCert: certPEM, keyKey: keyPEM}, nil
}

// renewalReason says why the certificates in data must be generated again
// ("" when they can be used): missing or unparsable, not for every one of
// hosts, not signed by the bundle's first CA, or past two thirds of their
// lifetime (so a renewal happens long before the expiry, even after a long
// outage of every replica).
func renewalReason(data map[string][]byte, hosts []string, now time.Time) string {
	if _, err := tls.X509KeyPair(data[keyCert], data[keyKey]); err != nil {
		return fmt.Sprintf("no usable serving certificate: %v", err)
	}
	certs, err := cert.ParseCertsPEM(data[keyCert])
	if err != nil {
		return fmt.Sprintf("serving certificate: %v", err)
	}
	bundle, err := cert.ParseCertsPEM(data[keyCABundle])
	if err != nil {
		return fmt.Sprintf("CA bundle: %v", err)
	}
	if _, err := keyutil.ParsePrivateKeyPEM(data[keyCAKey]); err != nil {
		return fmt.Sprintf("CA key: %v", err)
	}
	serving, ca := certs[0], bundle[0]
	if err := serving.CheckSignatureFrom(ca); err != nil {
		return "serving certificate not signed by the current CA"
	}
	for _, h := range hosts {
		if err := serving.VerifyHostname(h); err != nil {
			return fmt.Sprintf("serving certificate not valid for %s", h)
		}
	}
	for _, c := range []*x509.Certificate{serving, ca} {
		if renewAt := c.NotBefore.Add(c.NotAfter.Sub(c.NotBefore) * 2 / 3); !now.Before(renewAt) {
			return fmt.Sprintf("certificate %q is due for renewal since %s (expires %s)", c.Subject.CommonName, renewAt.UTC().Format(time.RFC3339), c.NotAfter.UTC().Format(time.RFC3339))
		}
	}
	return ""
}

// bundleEqual compares two PEM bundles byte for byte, ignoring surrounding space.
func bundleEqual(a, b []byte) bool { return bytes.Equal(bytes.TrimSpace(a), bytes.TrimSpace(b)) }
