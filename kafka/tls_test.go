package kafka

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// selfSigned returns a server certificate for 127.0.0.1 and a pool that
// trusts it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "parkway kafka test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

// TestTLS: with Config.TLS the listener speaks TLS; franz-go produces and
// consumes over it, and a plaintext client gets nothing.
func TestTLS(t *testing.T) {
	cert, pool := selfSigned(t)
	f := serve(t, Config{TLS: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}})
	dial := kgo.DialTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	prod := f.client(t, dial, kgo.DefaultProduceTopic("secure"), kgo.AllowAutoTopicCreation())
	if err := prod.ProduceSync(ctxFor(t), kgo.StringRecord("over tls")).FirstErr(); err != nil {
		t.Fatalf("produce over TLS: %v", err)
	}
	cons := f.client(t, dial, kgo.ConsumeTopics("secure"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if got := consume(t, cons, 1); string(got[0].Value) != "over tls" {
		t.Fatalf("consumed %q", got[0].Value)
	}
	plain := dialRaw(t, f.addr)
	plain.write(frame([]byte{0, 18, 0, 0, 0, 0, 0, 1, 0xff, 0xff})) // an ApiVersions v0 in the clear
	plain.expectClosed()
	f.expectClosedFor(t, "tls")
}
