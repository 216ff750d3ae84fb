package transport

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// IdentityScheme is the URI scheme of a member's identity: a member's
// certificate carries the URI subject alternative name
//
//	parkway://<cluster-id>/node/<node-id>
//
// with node-id in decimal without leading zeros (e.g.
// "parkway://prod-eu1/node/3"). The URI, not the CommonName or a DNS name,
// is what binds a certificate to a node: a bus accepts a peer only if its
// verified certificate carries exactly one such URI for the bus's cluster.
// A certificate may carry identities in other clusters too; they are
// ignored.
const IdentityScheme = "parkway"

// IdentityURI is the URI subject alternative name a certificate must carry
// to authenticate as node id of cluster (see IdentityScheme). It is meant
// for hosts and their certificate tooling, so the name is spelled in one
// place.
func IdentityURI(cluster string, id NodeID) string {
	return IdentityScheme + "://" + cluster + "/node/" + strconv.FormatUint(uint64(id), 10)
}

// TLSConfig authenticates and encrypts a TCPBus: TLS 1.3 only, both sides
// present a certificate signed by CAs, and each side checks that the other's
// certificate names the expected node of the same cluster (see
// IdentityScheme). The bus keeps the pointer: do not modify the
// configuration (or the CAs pool) after ListenTCP; rotate certificates
// through GetCertificate.
type TLSConfig struct {
	// ClusterID names the cluster. Letters, digits, '-' and '.' only (it
	// is the host part of the identity URI), compared exactly.
	ClusterID string
	// Certificate is this node's certificate chain and private key. Its
	// leaf must carry IdentityURI(ClusterID, id) for the bus's id and be
	// usable for both server and client authentication (no extended key
	// usage, or both ServerAuth and ClientAuth); ListenTCP checks the
	// identity and that it chains to CAs. Ignored when GetCertificate is
	// set.
	Certificate *tls.Certificate
	// GetCertificate, when set, returns the certificate for each new
	// handshake (both directions), so a host can rotate certificates
	// without restarting the bus. It is not checked at ListenTCP: a wrong
	// certificate shows up as refused handshakes on the peers.
	GetCertificate func() (*tls.Certificate, error)
	// CAs holds the certificate authorities that sign members: the only
	// roots a peer's chain is verified against (the system roots never
	// are).
	CAs *x509.CertPool
}

// errHandshake marks a handshake this bus refused or that failed.
var errHandshake = errors.New("bus: handshake refused")

// validClusterID reports whether s is usable as the host part of an
// identity URI and survives URL parsing unchanged.
func validClusterID(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, r := range s {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9', r == '-', r == '.':
		default:
			return false
		}
	}
	return true
}

// identityOf returns the node id cert authenticates in cluster: the
// certificate must carry exactly one identity URI for cluster, well formed
// and with a non-zero id. It does not verify the certificate.
func identityOf(cert *x509.Certificate, cluster string) (NodeID, error) {
	var (
		id    NodeID
		found int
	)
	for _, u := range cert.URIs {
		if u.Scheme != IdentityScheme || u.Host != cluster {
			continue
		}
		found++
		n, err := nodeOfURI(u, cluster)
		if err != nil {
			return 0, fmt.Errorf("%w: identity %q: %v", errHandshake, u.String(), err)
		}
		id = n
	}
	switch found {
	case 0:
		return 0, fmt.Errorf("%w: certificate has no identity in cluster %q", errHandshake, cluster)
	case 1:
		return id, nil
	default:
		return 0, fmt.Errorf("%w: certificate has %d identities in cluster %q", errHandshake, found, cluster)
	}
}

// nodeOfURI returns the node id of an identity URI of cluster. Only the
// canonical spelling is accepted (path "/node/<id>", the id in decimal
// without leading zeros and non-zero, nothing else in the URI), so one
// identity has one spelling.
func nodeOfURI(u *url.URL, cluster string) (NodeID, error) {
	s, ok := strings.CutPrefix(u.Path, "/node/")
	if !ok {
		return 0, errors.New("path is not /node/<id>")
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("bad node id %q", s)
	}
	if u.String() != IdentityURI(cluster, NodeID(n)) {
		return 0, errors.New("not in canonical form")
	}
	return NodeID(n), nil
}

// verifyPeer verifies a peer's presented chain against the cluster's CAs
// for usage (ServerAuth when we dialled, ClientAuth when we accepted) and
// returns the node id it authenticates.
func verifyPeer(cfg *TLSConfig, certs []*x509.Certificate, usage x509.ExtKeyUsage) (NodeID, error) {
	if len(certs) == 0 {
		return 0, fmt.Errorf("%w: no certificate", errHandshake)
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{
		Roots:         cfg.CAs,
		Intermediates: inter,
		KeyUsages:     []x509.ExtKeyUsage{usage},
	}); err != nil {
		return 0, fmt.Errorf("%w: %v", errHandshake, err)
	}
	return identityOf(certs[0], cfg.ClusterID)
}

// checkOwnCertificate checks, at ListenTCP, that a static certificate
// authenticates as id in the cluster, for both directions, so a
// misconfigured node fails at start rather than with refused handshakes.
func checkOwnCertificate(cfg *TLSConfig, id NodeID) error {
	c := cfg.Certificate
	if c == nil || len(c.Certificate) == 0 || c.PrivateKey == nil {
		return fmt.Errorf("%w: TLS certificate or key missing", ErrInvalidOptions)
	}
	var chain []*x509.Certificate
	for i, der := range c.Certificate {
		if i == 0 && c.Leaf != nil {
			chain = append(chain, c.Leaf)
			continue
		}
		x, err := x509.ParseCertificate(der)
		if err != nil {
			return fmt.Errorf("%w: TLS certificate: %v", ErrInvalidOptions, err)
		}
		chain = append(chain, x)
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		got, err := verifyPeer(cfg, chain, usage)
		if err != nil {
			return fmt.Errorf("%w: own certificate: %v", ErrInvalidOptions, err)
		}
		if got != id {
			return fmt.Errorf("%w: own certificate is node %d, this is node %d", ErrInvalidOptions, got, id)
		}
	}
	return nil
}

// tlsConfigs builds the server-side configuration and a template for the
// client side; the client side is cloned per dial to bind the expected
// peer id.
func tlsConfigs(cfg *TLSConfig) (server, client *tls.Config) {
	getCert := func() (*tls.Certificate, error) {
		if cfg.GetCertificate != nil {
			return cfg.GetCertificate()
		}
		return cfg.Certificate, nil
	}
	server = &tls.Config{
		MinVersion: tls.VersionTLS13,
		MaxVersion: tls.VersionTLS13,
		// The chain is verified in VerifyConnection, against CAs only and
		// together with the identity, the same way on both sides.
		ClientAuth: tls.RequireAnyClientCert,
		// Nothing resumes sessions: every connection authenticates in full.
		SessionTicketsDisabled: true,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return getCert()
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, err := verifyPeer(cfg, cs.PeerCertificates, x509.ExtKeyUsageClientAuth)
			return err
		},
	}
	client = &tls.Config{
		MinVersion: tls.VersionTLS13,
		MaxVersion: tls.VersionTLS13,
		// Peers are verified by node identity, not by host name (a node's
		// address may change; its id does not): the standard host-name
		// verification is replaced by VerifyConnection, set per dial.
		InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return getCert()
		},
	}
	return server, client
}

// dialConfig returns the client configuration for dialling peer want.
func dialConfig(tmpl *tls.Config, cfg *TLSConfig, want NodeID) *tls.Config {
	c := tmpl.Clone()
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		got, err := verifyPeer(cfg, cs.PeerCertificates, x509.ExtKeyUsageServerAuth)
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("%w: dialled node %d, peer is node %d", errHandshake, want, got)
		}
		return nil
	}
	return c
}
