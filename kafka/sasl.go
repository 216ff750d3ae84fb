package kafka

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// SASL mechanisms served.
const (
	MechanismPlain       = "PLAIN"
	MechanismSCRAMSHA256 = "SCRAM-SHA-256"
	MechanismSCRAMSHA512 = "SCRAM-SHA-512"
)

// SASLConfig makes every connection authenticate (SaslHandshake v1, then
// SaslAuthenticate) before any request but ApiVersions. Serve it over TLS:
// PLAIN sends the password as is.
type SASLConfig struct {
	// Mechanisms offered (default: all three, SCRAM first).
	Mechanisms []string
	// Credentials is the host's user store.
	Credentials CredentialStore
}

// CredentialStore is the host's user store. Its methods may be called
// concurrently.
type CredentialStore interface {
	// CheckPassword reports whether password is user's (SASL/PLAIN).
	CheckPassword(ctx context.Context, user, password string) (bool, error)
	// SCRAM returns user's stored SCRAM credentials for mechanism, and
	// whether the user has any.
	SCRAM(ctx context.Context, mechanism, user string) (SCRAMCredentials, bool, error)
}

// SCRAMCredentials are what a server stores of a SCRAM password (RFC
// 5802): never the password itself.
type SCRAMCredentials struct {
	Salt       []byte
	Iterations int
	StoredKey  []byte
	ServerKey  []byte
}

// NewSCRAMCredentials derives the stored credentials of password for
// mechanism with a fresh random salt (4,096 iterations at least, as
// Kafka requires).
func NewSCRAMCredentials(mechanism, password string, iterations int) (SCRAMCredentials, error) {
	h, ok := scramHash(mechanism)
	if !ok {
		return SCRAMCredentials{}, fmt.Errorf("%w: SCRAM mechanism %q", ErrInvalidConfig, mechanism)
	}
	if iterations < 4096 {
		return SCRAMCredentials{}, fmt.Errorf("%w: %d SCRAM iterations, at least 4096", ErrInvalidConfig, iterations)
	}
	salt := make([]byte, 16)
	_, _ = rand.Read(salt)
	salted, err := pbkdf2.Key(h, password, salt, iterations, h().Size())
	if err != nil {
		return SCRAMCredentials{}, err
	}
	clientKey := hmacOf(h, salted, []byte("Client Key"))
	stored := h()
	stored.Write(clientKey)
	return SCRAMCredentials{Salt: salt, Iterations: iterations, StoredKey: stored.Sum(nil), ServerKey: hmacOf(h, salted, []byte("Server Key"))}, nil
}

// StaticCredentials is a CredentialStore over a fixed set of users: it
// keeps SCRAM credentials for both hashes and a SHA-256 digest for PLAIN,
// never the passwords.
type StaticCredentials struct {
	plain map[string][32]byte
	scram map[string]map[string]SCRAMCredentials // mechanism → user
}

// NewStaticCredentials derives a store from users' passwords.
func NewStaticCredentials(passwords map[string]string) (*StaticCredentials, error) {
	c := &StaticCredentials{plain: map[string][32]byte{}, scram: map[string]map[string]SCRAMCredentials{}}
	for _, m := range []string{MechanismSCRAMSHA256, MechanismSCRAMSHA512} {
		c.scram[m] = map[string]SCRAMCredentials{}
	}
	for user, pass := range passwords {
		c.plain[user] = sha256.Sum256([]byte(pass))
		for m := range c.scram {
			creds, err := NewSCRAMCredentials(m, pass, 4096)
			if err != nil {
				return nil, err
			}
			c.scram[m][user] = creds
		}
	}
	return c, nil
}

// CheckPassword implements CredentialStore.
func (c *StaticCredentials) CheckPassword(_ context.Context, user, password string) (bool, error) {
	want, ok := c.plain[user]
	got := sha256.Sum256([]byte(password))
	return ok && subtle.ConstantTimeCompare(want[:], got[:]) == 1, nil
}

// SCRAM implements CredentialStore.
func (c *StaticCredentials) SCRAM(_ context.Context, mechanism, user string) (SCRAMCredentials, bool, error) {
	creds, ok := c.scram[mechanism][user]
	return creds, ok, nil
}

func scramHash(mechanism string) (func() hash.Hash, bool) {
	switch mechanism {
	case MechanismSCRAMSHA256:
		return sha256.New, true
	case MechanismSCRAMSHA512:
		return sha512.New, true
	}
	return nil, false
}

func hmacOf(h func() hash.Hash, key, msg []byte) []byte {
	m := hmac.New(h, key)
	m.Write(msg)
	return m.Sum(nil)
}

// session is one connection's authentication state.
type session struct {
	mu            sync.Mutex
	authenticated bool
	principal     string // "User:<name>", or "User:ANONYMOUS" without SASL
	mechanism     string // chosen by SaslHandshake
	scram         *scramExchange
}

var errSASL = errors.New("kafka: authentication failed")

// newSession starts a connection's state: authenticated at once when
// the server requires no SASL.
func (s *Server) newSession() *session {
	if s.cfg.SASL == nil {
		return &session{authenticated: true, principal: "User:ANONYMOUS"}
	}
	return &session{}
}

// mayServe reports whether a request of key may be served now: before
// authentication only ApiVersions and the SASL exchange are.
func (sess *session) mayServe(key int16) bool {
	switch kmsg.Key(key) {
	case kmsg.ApiVersions, kmsg.SASLHandshake, kmsg.SASLAuthenticate:
		return true
	}
	sess.mu.Lock()
	defer sess.mu.Unlock()
	return sess.authenticated
}

// saslHandshake picks the connection's mechanism.
func (s *Server) saslHandshake(r *kmsg.SASLHandshakeRequest, sess *session) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.SASLHandshakeResponse)
	mechs := s.mechanisms()
	resp.SupportedMechanisms = mechs
	sess.mu.Lock()
	defer sess.mu.Unlock()
	switch {
	case sess.authenticated:
		resp.ErrorCode = s.code(kmsg.SASLHandshake, kerr.IllegalSaslState.Code)
	case !slices.Contains(mechs, r.Mechanism): // none without Config.SASL
		resp.ErrorCode = s.code(kmsg.SASLHandshake, kerr.UnsupportedSaslMechanism.Code)
	default:
		sess.mechanism, sess.scram = r.Mechanism, nil
	}
	return resp
}

func (s *Server) mechanisms() []string {
	if s.cfg.SASL == nil {
		return nil
	}
	if len(s.cfg.SASL.Mechanisms) > 0 {
		return s.cfg.SASL.Mechanisms
	}
	return []string{MechanismSCRAMSHA512, MechanismSCRAMSHA256, MechanismPlain}
}

// saslAuthenticate steps the connection's mechanism with the client's
// bytes. A failure is answered SASL_AUTHENTICATION_FAILED and leaves the
// connection unauthenticated (its next request other than ApiVersions or a
// new handshake closes it).
func (s *Server) saslAuthenticate(ctx context.Context, r *kmsg.SASLAuthenticateRequest, sess *session) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	sess.mu.Lock()
	defer sess.mu.Unlock()
	fail := func(err error) kmsg.Response {
		resp.ErrorCode = s.code(kmsg.SASLAuthenticate, kerr.SaslAuthenticationFailed.Code)
		msg := "authentication failed"
		resp.ErrorMessage = &msg
		sess.mechanism, sess.scram = "", nil
		s.log.Debug("SASL authentication failed", "err", err)
		return resp
	}
	if sess.authenticated || sess.mechanism == "" {
		resp.ErrorCode = s.code(kmsg.SASLAuthenticate, kerr.IllegalSaslState.Code)
		return resp
	}
	creds := s.cfg.SASL.Credentials
	switch sess.mechanism {
	case MechanismPlain:
		// authzid NUL user NUL password
		parts := bytes.Split(r.SASLAuthBytes, []byte{0})
		if len(parts) != 3 {
			return fail(fmt.Errorf("%w: malformed PLAIN message", errSASL))
		}
		user, pass := string(parts[1]), string(parts[2])
		if len(parts[0]) > 0 && string(parts[0]) != user {
			return fail(fmt.Errorf("%w: authorization id differs from the user", errSASL))
		}
		ok, err := creds.CheckPassword(ctx, user, pass)
		if err != nil || !ok {
			return fail(fmt.Errorf("%w: user %q: %v", errSASL, user, err))
		}
		sess.authenticated, sess.principal = true, "User:"+user
	default:
		if sess.scram == nil {
			ex, out, err := startSCRAM(ctx, creds, sess.mechanism, r.SASLAuthBytes)
			if err != nil {
				return fail(err)
			}
			sess.scram, resp.SASLAuthBytes = ex, out
			return resp
		}
		out, err := sess.scram.finish(r.SASLAuthBytes)
		if err != nil {
			return fail(err)
		}
		sess.authenticated, sess.principal, sess.scram = true, "User:"+sess.scram.user, nil
		resp.SASLAuthBytes = out
	}
	return resp
}

// scramExchange is a SCRAM server between the client's first and final
// messages (RFC 5802).
type scramExchange struct {
	h           func() hash.Hash
	creds       SCRAMCredentials
	user        string
	nonce       string
	gs2         string // the client's GS2 header, echoed in its final message
	clientFirst string // client-first-message-bare
	serverFirst string
}

func startSCRAM(ctx context.Context, store CredentialStore, mechanism string, msg []byte) (*scramExchange, []byte, error) {
	h, ok := scramHash(mechanism)
	if !ok {
		return nil, nil, fmt.Errorf("%w: mechanism %q", errSASL, mechanism)
	}
	s := string(msg)
	// gs2-header: "n," or "y," (no channel binding), an optional
	// "a=authzid", and a comma.
	if !strings.HasPrefix(s, "n,") && !strings.HasPrefix(s, "y,") {
		return nil, nil, fmt.Errorf("%w: channel binding is not supported", errSASL)
	}
	i := strings.IndexByte(s[2:], ',')
	if i < 0 {
		return nil, nil, fmt.Errorf("%w: malformed client-first message", errSASL)
	}
	gs2, bare := s[:2+i+1], s[2+i+1:]
	attrs, err := scramAttrs(bare)
	if err != nil {
		return nil, nil, err
	}
	user, cnonce := attrs['n'], attrs['r']
	if user == "" || cnonce == "" {
		return nil, nil, fmt.Errorf("%w: client-first message without a user or nonce", errSASL)
	}
	user = strings.NewReplacer("=2C", ",", "=3D", "=").Replace(user)
	creds, ok, err := store.SCRAM(ctx, mechanism, user)
	if err != nil || !ok {
		return nil, nil, fmt.Errorf("%w: user %q unknown (%v)", errSASL, user, err)
	}
	var nb [18]byte
	_, _ = rand.Read(nb[:])
	nonce := cnonce + base64.RawStdEncoding.EncodeToString(nb[:])
	first := "r=" + nonce + ",s=" + base64.StdEncoding.EncodeToString(creds.Salt) + ",i=" + strconv.Itoa(creds.Iterations)
	return &scramExchange{h: h, creds: creds, user: user, nonce: nonce, gs2: gs2, clientFirst: bare, serverFirst: first}, []byte(first), nil
}

// finish checks the client's proof and returns the server's signature.
func (x *scramExchange) finish(msg []byte) ([]byte, error) {
	s := string(msg)
	i := strings.LastIndex(s, ",p=")
	if i < 0 {
		return nil, fmt.Errorf("%w: client-final message without a proof", errSASL)
	}
	withoutProof := s[:i]
	attrs, err := scramAttrs(s)
	if err != nil {
		return nil, err
	}
	if attrs['r'] != x.nonce {
		return nil, fmt.Errorf("%w: nonce mismatch", errSASL)
	}
	if cb, err := base64.StdEncoding.DecodeString(attrs['c']); err != nil || string(cb) != x.gs2 {
		return nil, fmt.Errorf("%w: channel binding mismatch", errSASL)
	}
	proof, err := base64.StdEncoding.DecodeString(attrs['p'])
	if err != nil || len(proof) != len(x.creds.StoredKey) {
		return nil, fmt.Errorf("%w: malformed proof", errSASL)
	}
	auth := []byte(x.clientFirst + "," + x.serverFirst + "," + withoutProof)
	sig := hmacOf(x.h, x.creds.StoredKey, auth)
	clientKey := make([]byte, len(proof))
	for j := range proof {
		clientKey[j] = proof[j] ^ sig[j]
	}
	stored := x.h()
	stored.Write(clientKey)
	if subtle.ConstantTimeCompare(stored.Sum(nil), x.creds.StoredKey) != 1 {
		return nil, fmt.Errorf("%w: wrong password for %q", errSASL, x.user)
	}
	return []byte("v=" + base64.StdEncoding.EncodeToString(hmacOf(x.h, x.creds.ServerKey, auth))), nil
}

// scramAttrs splits "k=v,k=v" into attributes (the value may contain
// '=').
func scramAttrs(s string) (map[byte]string, error) {
	out := map[byte]string{}
	for _, kv := range strings.Split(s, ",") {
		if len(kv) < 2 || kv[1] != '=' {
			return nil, fmt.Errorf("%w: malformed SCRAM attribute %q", errSASL, kv)
		}
		out[kv[0]] = kv[2:]
	}
	return out, nil
}
