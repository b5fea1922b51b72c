package server_test

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
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/server"
)

// TestTLS serves HTTPS with a certificate from the config and checks that
// a client trusting it gets through, and a plain-HTTP client does not.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	certPEM, keyPEM, pool := selfSigned(t)
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, certPEM, 0o600)
	os.WriteFile(keyFile, keyPEM, 0o600)
	ts := start(t, "", func(c *server.Config) { c.TLS = server.TLSConfig{Cert: certFile, Key: keyFile} })
	url := strings.Replace(ts.URL, "http://", "https://", 1)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	res, err := c.Get(url + "/healthz")
	if err != nil {
		t.Fatalf("HTTPS: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK || res.TLS == nil {
		t.Errorf("HTTPS /healthz: %d, TLS %v", res.StatusCode, res.TLS != nil)
	}
	if res, err := client.Get(ts.URL + "/healthz"); err == nil {
		res.Body.Close()
		if res.StatusCode == http.StatusOK {
			t.Error("plain HTTP is served on the TLS port")
		}
	}
}

func selfSigned(t *testing.T) (certPEM, keyPEM []byte, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "moat test"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), pool
}

// TestProfilesPerOrg: an organization named in profiles: gets its own
// profile; the others get the default.
func TestProfilesPerOrg(t *testing.T) {
	ts := start(t, "", func(c *server.Config) { c.Profiles = map[string]string{"lab": "dev"} })
	mf := []byte("name: fetcher\nversion: 1.0.0\nactions: [{name: greet}]\ncapabilities: {kv: true, http: [https://api.example.com:443]}\n")
	wasm := helloWasm(t)
	if r := ts.upload(t, ts.key(t, "acme", "ann", "admin"), wasm, mf); r.status != http.StatusForbidden || !strings.Contains(string(r.body), "profile minimal") {
		t.Errorf("acme (minimal): %d %s", r.status, r.body)
	}
	if r := ts.upload(t, ts.key(t, "lab", "lee", "admin"), wasm, mf); r.status != http.StatusCreated {
		t.Errorf("lab (dev): %d %s", r.status, r.body)
	}
}
