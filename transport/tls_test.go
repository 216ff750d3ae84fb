package transport

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/parkway-io/parkway/clock"
)

const cluster = "test-cluster"

// TestTLSPairExchanges: two members of one cluster exchange frames both
// ways over TLS, the receiver sees the authenticated sender, and a node
// whose certificate comes from GetCertificate works the same.
func TestTLSPairExchanges(t *testing.T) {
	ca := newCA(t, "ca")
	a := listen(t, 1, ca.tlsOpts(t, cluster, 1))
	cert2 := ca.member(t, cluster, 2)
	b := listen(t, 2, TCPOptions{TLS: &TLSConfig{
		ClusterID:      cluster,
		GetCertificate: func() (*tls.Certificate, error) { return cert2, nil },
		CAs:            ca.pool,
	}})
	mesh(t, a, b)
	for i := range uint64(100) {
		mustSend(t, a, Message{To: 2, Kind: 1, Group: i, Payload: seqPayload(i)})
		mustSend(t, b, Message{To: 1, Kind: 2, Group: i, Payload: seqPayload(i)})
	}
	for i := range uint64(100) {
		if m := recv(t, b.Recv()); m.From != 1 || m.Kind != 1 || m.Group != i || seqOf(m) != i {
			t.Fatalf("b got %+v, want seq %d from 1", m, i)
		}
		if m := recv(t, a.Recv()); m.From != 2 || m.Kind != 2 || m.Group != i || seqOf(m) != i {
			t.Fatalf("a got %+v, want seq %d from 2", m, i)
		}
	}
	for _, x := range []*TCPBus{a, b} {
		if s := x.Stats(); s.RejectedHandshakes+s.DialErrors+s.ForgedFrames+s.BadFrames+s.OverBudget != 0 || s.Received != 100 {
			t.Fatalf("node %d stats %+v", x.ID(), s)
		}
	}
}

// rawTLS dials b as a TLS client presenting cert (nil: none), which trusts
// any server, writes frames, and reads the underlying connection until
// the bus closes it. The bus counts a refusal before it closes, so the
// counters are final when rawTLS returns.
func rawTLS(t *testing.T, b *TCPBus, cert *tls.Certificate, frames []byte) {
	t.Helper()
	raw, err := net.Dial("tcp", b.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.SetDeadline(time.Now().Add(guard))
	tc := tls.Client(raw, &tls.Config{
		MinVersion:         tls.VersionTLS13,
		InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if cert == nil {
				return &tls.Certificate{}, nil
			}
			return cert, nil
		},
	})
	// In TLS 1.3 the client finishes before the server has checked its
	// certificate, so the handshake and the write usually succeed even
	// when the bus refuses; either way nothing may be delivered.
	if err := tc.Handshake(); err == nil {
		tc.Write(frames)
	}
	if _, err := io.Copy(io.Discard, raw); err != nil && !isReset(err) {
		t.Fatalf("connection not closed by the bus: %v", err)
	}
}

// TestBehaviour26OnlyMembersOfTheClusterDeliver (DESIGN behaviour 26,
// TLS): a process that is not a member of the cluster
// cannot deliver a frame: no certificate, a stranger's (another CA), a
// member of another cluster, an expired or not yet valid certificate, one
// with no identity, a non-canonical or ambiguous identity, and one not
// for client authentication are all refused at the handshake and counted.
func TestBehaviour26OnlyMembersOfTheClusterDeliver(t *testing.T) {
	ca := newCA(t, "ca")
	stranger := newCA(t, "stranger")
	a := listen(t, 1, ca.tlsOpts(t, cluster, 1))
	frame := appendFrame(nil, &Message{From: 2, To: 1, Payload: []byte("forged")})
	good := IdentityURI(cluster, 2)
	cases := []struct {
		name string
		cert *tls.Certificate
	}{
		{"no certificate", nil},
		{"stranger", stranger.member(t, cluster, 2)},
		{"other cluster", ca.member(t, "other-cluster", 2)},
		{"expired", ca.issue(t, certSpec{uris: []string{good},
			notBefore: time.Now().Add(-2 * time.Hour), notAfter: time.Now().Add(-time.Hour)})},
		{"not yet valid", ca.issue(t, certSpec{uris: []string{good},
			notBefore: time.Now().Add(time.Hour), notAfter: time.Now().Add(2 * time.Hour)})},
		{"no identity", ca.issue(t, certSpec{})},
		{"leading zero", ca.issue(t, certSpec{uris: []string{"parkway://" + cluster + "/node/02"}})},
		{"two identities", ca.issue(t, certSpec{uris: []string{good, IdentityURI(cluster, 3)}})},
		{"server-only usage", ca.issue(t, certSpec{uris: []string{good},
			usage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})},
	}
	for _, tc := range cases {
		before := a.Stats().RejectedHandshakes
		rawTLS(t, a, tc.cert, frame)
		if got := a.Stats().RejectedHandshakes - before; got != 1 {
			t.Fatalf("%s: RejectedHandshakes +%d, want +1", tc.name, got)
		}
	}
	if s := a.Stats(); s.Received != 0 || s.InboundConns != 0 {
		t.Fatalf("stats %+v", s)
	}
	assertEmpty(t, a.Recv())

	// A member is still served, and a certificate valid in two clusters
	// is accepted by the one it names once.
	two := ca.issue(t, certSpec{uris: []string{IdentityURI("other-cluster", 9), good}})
	rawTLS(t, a, two, append(frame, 0, 0, 0, 0)) // a bad frame ends it
	if m := recv(t, a.Recv()); m.From != 2 || string(m.Payload) != "forged" {
		t.Fatalf("member's frame: %+v", m)
	}
	if s := a.Stats(); s.RejectedHandshakes != uint64(len(cases)) || s.BadFrames != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// TestTLSForgedSender: an authenticated member sending a frame that claims
// another node's id has that frame dropped and its connection closed;
// what it sent under its own id before is delivered.
func TestTLSForgedSender(t *testing.T) {
	ca := newCA(t, "ca")
	a := listen(t, 1, ca.tlsOpts(t, cluster, 1))
	var data []byte
	data = appendFrame(data, &Message{From: 3, To: 1, Payload: []byte("own")})
	data = appendFrame(data, &Message{From: 2, To: 1, Payload: []byte("forged")})
	data = appendFrame(data, &Message{From: 3, To: 1, Payload: []byte("after")})
	rawTLS(t, a, ca.member(t, cluster, 3), data)
	if m := recv(t, a.Recv()); m.From != 3 || string(m.Payload) != "own" {
		t.Fatalf("got %+v", m)
	}
	assertEmpty(t, a.Recv())
	if s := a.Stats(); s.ForgedFrames != 1 || s.Received != 1 || s.RejectedHandshakes != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestTLSDialRefusesWrongPeer: the dialling side verifies the peer too: a
// listener at peer 2's address that presents another node's certificate,
// a stranger's, another cluster's or an expired one gets no frame; the
// dial is counted as a refused handshake and backed off.
func TestTLSDialRefusesWrongPeer(t *testing.T) {
	ca := newCA(t, "ca")
	stranger := newCA(t, "stranger")
	good := IdentityURI(cluster, 2)
	cases := []struct {
		name string
		cert *tls.Certificate
	}{
		{"another node's id", ca.member(t, cluster, 3)},
		{"stranger", stranger.member(t, cluster, 2)},
		{"other cluster", ca.member(t, "other-cluster", 2)},
		{"expired", ca.issue(t, certSpec{uris: []string{good},
			notBefore: time.Now().Add(-2 * time.Hour), notAfter: time.Now().Add(-time.Hour)})},
		{"client-only usage", ca.issue(t, certSpec{uris: []string{good},
			usage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
				MinVersion:   tls.VersionTLS13,
				Certificates: []tls.Certificate{*tc.cert},
				ClientAuth:   tls.RequestClientCert,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			got := make(chan error, 1)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					got <- err
					return
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(guard))
				// The dialler aborts the handshake, so the read fails
				// rather than returning a frame.
				var b [1]byte
				_, err = c.Read(b[:])
				got <- err
			}()

			clk := clock.NewManual(time.Unix(0, 0))
			opts := ca.tlsOpts(t, cluster, 1)
			opts.Clock = clk
			a := listen(t, 1, opts)
			if err := a.AddPeer(2, ln.Addr().String()); err != nil {
				t.Fatal(err)
			}
			mustSend(t, a, Message{To: 2, Payload: []byte("secret")})
			select {
			case err := <-got:
				if err == nil {
					t.Fatal("the impostor read data")
				}
			case <-time.After(guard):
				t.Fatal("impostor still connected")
			}
			clk.WaitPending(1) // the dial failed; backing off
			if s := a.Stats(); s.Dials != 1 || s.DialErrors != 1 || s.RejectedHandshakes != 1 {
				t.Fatalf("stats %+v", s)
			}
		})
	}
}

// TestTLSSlowlorisCut: a connection that starts a handshake and never
// finishes it is closed at HandshakeTimeout and counted, and gives its
// connection slot back.
func TestTLSSlowlorisCut(t *testing.T) {
	ca := newCA(t, "ca")
	opts := ca.tlsOpts(t, cluster, 1)
	opts.HandshakeTimeout = 50 * time.Millisecond
	a := listen(t, 1, opts)
	raw, err := net.Dial("tcp", a.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.Write([]byte{0x16, 0x03, 0x01}) // the start of a ClientHello record
	raw.SetReadDeadline(time.Now().Add(guard))
	if _, err := io.Copy(io.Discard, raw); err != nil && !isReset(err) {
		t.Fatalf("not cut: %v", err)
	}
	if s := a.Stats(); s.RejectedHandshakes != 1 || s.InboundConns != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestTLSOptions(t *testing.T) {
	ca := newCA(t, "ca")
	stranger := newCA(t, "stranger")
	listenErr := func(opts TCPOptions) error {
		b, err := ListenTCP(1, "127.0.0.1:0", nil, opts)
		if err == nil {
			b.Close()
		}
		return err
	}
	if err := listenErr(TCPOptions{}); !errors.Is(err, ErrTLSRequired) {
		t.Fatalf("zero options: %v, want ErrTLSRequired", err)
	}
	both := ca.tlsOpts(t, cluster, 1)
	both.InsecurePlaintext = true
	bad := map[string]TCPOptions{"TLS and plaintext": both}
	for name, mut := range map[string]func(*TLSConfig){
		"empty cluster id":       func(c *TLSConfig) { c.ClusterID = "" },
		"cluster id with slash":  func(c *TLSConfig) { c.ClusterID = "a/b" },
		"no CAs":                 func(c *TLSConfig) { c.CAs = nil },
		"no certificate":         func(c *TLSConfig) { c.Certificate = nil },
		"another node's cert":    func(c *TLSConfig) { c.Certificate = ca.member(t, cluster, 2) },
		"another cluster's cert": func(c *TLSConfig) { c.Certificate = ca.member(t, "other", 1) },
		"cert of another CA":     func(c *TLSConfig) { c.Certificate = stranger.member(t, cluster, 1) },
	} {
		o := ca.tlsOpts(t, cluster, 1)
		mut(o.TLS)
		bad[name] = o
	}
	bad["conn budget below frame"] = TCPOptions{InsecurePlaintext: true, MaxFrame: 1 << 20, MaxConnBytes: 1<<20 - 1}
	bad["total below conn budget"] = TCPOptions{InsecurePlaintext: true, MaxFrame: 1 << 20, MaxConnBytes: 2 << 20, MaxTotalBytes: 1 << 20}
	bad["peer share below frame"] = TCPOptions{InsecurePlaintext: true, MaxFrame: 1 << 20, MaxPeerBytes: 1<<20 - 1}
	bad["peer share above total"] = TCPOptions{InsecurePlaintext: true, MaxFrame: 1 << 20, MaxTotalBytes: 4 << 20, MaxPeerBytes: 5 << 20}
	for name, o := range bad {
		if err := listenErr(o); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%s: %v, want ErrInvalidOptions", name, err)
		}
	}
	for name, o := range map[string]TCPOptions{
		"TLS":       ca.tlsOpts(t, cluster, 1),
		"plaintext": {InsecurePlaintext: true},
		// The default conn budget is lowered to the total.
		"small total": {InsecurePlaintext: true, MaxFrame: 1 << 20, MaxTotalBytes: 1 << 20},
	} {
		if err := listenErr(o); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestIdentityURI(t *testing.T) {
	for _, tc := range []struct {
		uri string
		id  NodeID // 0: refused
	}{
		{"parkway://c/node/1", 1},
		{"parkway://c/node/18446744073709551615", ^NodeID(0)},
		{"parkway://c/node/0", 0},
		{"parkway://c/node/01", 0},
		{"parkway://c/node/+1", 0},
		{"parkway://c/node/18446744073709551616", 0},
		{"parkway://c/node/1/", 0},
		{"parkway://c/node/1?x", 0},
		{"parkway://c/node/1#x", 0},
		{"parkway://u@c/node/1", 0},
		{"parkway://c/node/%31", 0},
		{"parkway://c/nodes/1", 0},
		{"parkway://c:1/node/1", 0},
		{"parkway://C/node/1", 0},
		{"https://c/node/1", 0},
	} {
		u, err := url.Parse(tc.uri)
		if err != nil {
			t.Fatal(err)
		}
		id, err := identityOf(&x509.Certificate{URIs: []*url.URL{u}}, "c")
		if id != tc.id || (err == nil) != (tc.id != 0) {
			t.Errorf("%s: %d, %v; want %d", tc.uri, id, err, tc.id)
		}
	}
}

// FuzzIdentityURI: whatever URI a certificate carries, identityOf either
// refuses it or returns an id whose canonical URI is exactly that URI.
func FuzzIdentityURI(f *testing.F) {
	for _, s := range []string{"parkway://c/node/1", "parkway://c/node/01", "parkway://c/node/%31",
		"parkway://c/node/1?", "parkway://c//node/1", "parkway://c/node/18446744073709551616"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := url.Parse(s)
		if err != nil {
			return
		}
		id, err := identityOf(&x509.Certificate{URIs: []*url.URL{u}}, "c")
		if err != nil {
			return
		}
		if id == 0 || u.String() != IdentityURI("c", id) {
			t.Fatalf("%q accepted as node %d", s, id)
		}
	})
}
