package xdstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// CA is a self-signed ECDSA certificate authority issuing certificates for
// servers and clients of TLS tests. Its methods fail the test on error.
type CA struct {
	// Set at construction, read-only.
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	PEM  []byte // the CA certificate
}

// NewCA makes a CA named name, valid from an hour ago for a day.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Pool is a certificate pool trusting the CA alone.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// ClientTLS is a TLS 1.2+ client configuration trusting the CA, verifying
// the server as serverName and presenting certs.
func (ca *CA) ClientTLS(serverName string, certs ...tls.Certificate) *tls.Config {
	return &tls.Config{RootCAs: ca.Pool(), ServerName: serverName, Certificates: certs, MinVersion: tls.VersionTLS12}
}

// Issue makes a leaf for server and client use with these SANs (strings
// with "://" are URI SANs, IPs are IP SANs, the rest DNS names) and serial
// (0: a random one); it returns the certificate and key PEM.
func (ca *CA) Issue(t testing.TB, serial int64, sans ...string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sn := big.NewInt(serial)
	if serial == 0 {
		if sn, err = rand.Int(rand.Reader, big.NewInt(1<<62)); err != nil {
			t.Fatal(err)
		}
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: "leaf"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, s := range sans {
		switch ip := net.ParseIP(s); {
		case ip != nil:
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		case strings.Contains(s, "://"):
			u, err := url.Parse(s)
			if err != nil {
				t.Fatal(err)
			}
			tmpl.URIs = append(tmpl.URIs, u)
		default:
			tmpl.DNSNames = append(tmpl.DNSNames, s)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// IssueFiles issues a leaf with a random serial and these SANs, writes it
// to dir as NAME.crt and NAME.key (replacing what is there), and returns the
// files and the key pair.
func (ca *CA) IssueFiles(t testing.TB, dir, name string, sans ...string) (certFile, keyFile string, pair tls.Certificate) {
	t.Helper()
	certPEM, keyPEM := ca.Issue(t, 0, sans...)
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	WriteFile(t, certFile, certPEM)
	WriteFile(t, keyFile, keyPEM)
	return certFile, keyFile, KeyPair(t, certPEM, keyPEM)
}

// WriteCA writes the CA certificate to dir/ca.crt and returns the file.
func (ca *CA) WriteCA(t testing.TB, dir string) string {
	t.Helper()
	f := filepath.Join(dir, "ca.crt")
	WriteFile(t, f, ca.PEM)
	return f
}

// KeyPair parses PEM into a tls.Certificate.
func KeyPair(t testing.TB, certPEM, keyPEM []byte) tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// WriteFile writes data to path (mode 0600) in place.
func WriteFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
