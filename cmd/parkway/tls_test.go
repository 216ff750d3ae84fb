//go:build unix

package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/parkway-io/parkway/transport"
)

// writePKI writes a CA (ca.pem) and, for each id, a member certificate
// naming parkway://<cluster>/node/<id> (n<id>.pem) and its key
// (n<id>.key) into dir.
func writePKI(t *testing.T, dir, cluster string, ids []int) {
	t.Helper()
	write := func(name, typ string, der []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	write("ca.pem", "CERTIFICATE", caDER)
	for _, id := range ids {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		u, _ := url.Parse(transport.IdentityURI(cluster, transport.NodeID(id)))
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(int64(id + 1)), Subject: pkix.Name{CommonName: u.String()},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), URIs: []*url.URL{u},
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
		if err != nil {
			t.Fatal(err)
		}
		write(fmt.Sprintf("n%d.pem", id), "CERTIFICATE", der)
		kder, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		write(fmt.Sprintf("n%d.key", id), "PRIVATE KEY", kder)
	}
}

// TestServeClusterTLS runs three members over mutually authenticated
// TLS from PEM files, the TLS settings given through the environment.
func TestServeClusterTLS(t *testing.T) {
	pki := t.TempDir()
	writePKI(t, pki, "prod", []int{1, 2, 3})
	addrs := freeAddrs(t, 3)
	peers := fmt.Sprintf("1=%s,2=%s,3=%s", addrs[0], addrs[1], addrs[2])
	var servers []*server
	for i := range 3 {
		id := i + 1
		env := []string{"PARKWAY_PEERS=" + peers, "PARKWAY_CLUSTER_ID=prod",
			"PARKWAY_TLS_CA=" + filepath.Join(pki, "ca.pem"),
			fmt.Sprintf("PARKWAY_TLS_CERT=%s", filepath.Join(pki, fmt.Sprintf("n%d.pem", id))),
			fmt.Sprintf("PARKWAY_TLS_KEY=%s", filepath.Join(pki, fmt.Sprintf("n%d.key", id)))}
		servers = append(servers, startServe(t, env, "--data-dir", t.TempDir(), "--node-id", fmt.Sprint(id),
			"--listen", addrs[i], "--shards", "1"))
	}
	for _, s := range servers {
		s.waitReady()
	}
	for i, s := range servers {
		if code := s.stop(); code != 0 {
			t.Fatalf("member %d: exit %d after SIGTERM:\n%s", i+1, code, s.log())
		}
	}
	// A certificate that does not name the node is refused at start.
	r := runBin(t, "serve", "--http", "", "--node-id", "1", "--listen", addrs[0], "--peers", peers, "--cluster-id", "prod",
		"--tls-ca", filepath.Join(pki, "ca.pem"), "--tls-cert", filepath.Join(pki, "n2.pem"), "--tls-key", filepath.Join(pki, "n2.key"))
	if r.code != exitProblems {
		t.Fatalf("serve with another node's certificate: want exit 1\n%v", r)
	}
}
