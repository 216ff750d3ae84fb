package kafka

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// TestSASLOverTLS: with Config.SASL, franz-go authenticates with PLAIN,
// SCRAM-SHA-256 and SCRAM-SHA-512 over TLS and is served; a wrong password
// is refused; a request before authentication closes the connection.
func TestSASLOverTLS(t *testing.T) {
	cert, pool := selfSigned(t)
	creds, err := NewStaticCredentials(map[string]string{"alice": "wonderland"})
	if err != nil {
		t.Fatal(err)
	}
	f := serve(t, Config{
		TLS:  &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		SASL: &SASLConfig{Credentials: creds},
	})
	dial := kgo.DialTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	for _, c := range []struct {
		name string
		mech sasl.Mechanism
	}{
		{"PLAIN", plain.Auth{User: "alice", Pass: "wonderland"}.AsMechanism()},
		{"SCRAM-SHA-256", scram.Auth{User: "alice", Pass: "wonderland"}.AsSha256Mechanism()},
		{"SCRAM-SHA-512", scram.Auth{User: "alice", Pass: "wonderland"}.AsSha512Mechanism()},
	} {
		t.Run(c.name, func(t *testing.T) {
			topic := "sasl-" + strings.ToLower(c.name)
			cl := f.client(t, dial, kgo.SASL(c.mech), kgo.DefaultProduceTopic(topic), kgo.AllowAutoTopicCreation(),
				kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			if err := cl.ProduceSync(ctxFor(t), kgo.StringRecord("authenticated")).FirstErr(); err != nil {
				t.Fatalf("produce: %v", err)
			}
			if got := consume(t, cl, 1); string(got[0].Value) != "authenticated" {
				t.Fatalf("consumed %q", got[0].Value)
			}
		})
	}
	t.Run("wrong password", func(t *testing.T) {
		for _, mech := range []sasl.Mechanism{
			plain.Auth{User: "alice", Pass: "looking-glass"}.AsMechanism(),
			scram.Auth{User: "alice", Pass: "looking-glass"}.AsSha256Mechanism(),
			scram.Auth{User: "mallory", Pass: "x"}.AsSha512Mechanism(),
		} {
			cl := f.client(t, dial, kgo.SASL(mech), kgo.RequestRetries(0))
			ctx, cancel := context.WithTimeout(ctxFor(t), 10*time.Second)
			err := cl.Ping(ctx)
			cancel()
			if err == nil || !strings.Contains(err.Error(), "SASL_AUTHENTICATION_FAILED") {
				t.Fatalf("%s with a wrong password: %v, want SASL_AUTHENTICATION_FAILED", mech.Name(), err)
			}
		}
	})
	t.Run("request before authentication", func(t *testing.T) {
		nc, err := tls.Dial("tcp", f.addr, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
		if err != nil {
			t.Fatal(err)
		}
		r := &raw{t: t, nc: nc}
		t.Cleanup(func() { _ = nc.Close() })
		av := kmsg.NewPtrApiVersionsRequest()
		if got := r.request(av).(*kmsg.ApiVersionsResponse); got.ErrorCode != 0 { // allowed before authentication
			t.Fatalf("ApiVersions: %d", got.ErrorCode)
		}
		md := kmsg.NewPtrMetadataRequest()
		md.Version = 12
		r.write(kmsg.NewRequestFormatter().AppendRequest(nil, md, 2))
		r.expectClosed()
		f.expectClosedFor(t, "unauthenticated")
	})
}

// TestAuthorizer: the authorizer sees the SASL principal and each
// operation; a refusal is TOPIC_AUTHORIZATION_FAILED or
// GROUP_AUTHORIZATION_FAILED and nothing is done.
func TestAuthorizer(t *testing.T) {
	creds, err := NewStaticCredentials(map[string]string{"alice": "a", "bob": "b"})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	asked := map[string]bool{}
	authz := AuthorizerFunc(func(_ context.Context, principal string, op Operation, rt ResourceType, name string) bool {
		mu.Lock()
		asked[fmt.Sprintf("%s %s %s:%s", principal, op, rt, name)] = true
		mu.Unlock()
		return principal == "User:alice" || op == OpDescribe
	})
	f := serve(t, Config{SASL: &SASLConfig{Credentials: creds, Mechanisms: []string{MechanismSCRAMSHA256}}, Authorizer: authz})
	as := func(user, pass string, opts ...kgo.Opt) *kgo.Client {
		return f.client(t, append([]kgo.Opt{kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha256Mechanism()), kgo.RequestRetries(1)}, opts...)...)
	}
	alice := as("alice", "a", kgo.DefaultProduceTopic("guarded"), kgo.AllowAutoTopicCreation())
	if err := alice.ProduceSync(ctxFor(t), kgo.StringRecord("from alice")).FirstErr(); err != nil {
		t.Fatalf("alice's produce: %v", err)
	}
	bob := as("bob", "b", kgo.DefaultProduceTopic("guarded"), kgo.RecordRetries(1))
	if err := bob.ProduceSync(ctxFor(t), kgo.StringRecord("from bob")).FirstErr(); err == nil || !strings.Contains(err.Error(), "TOPIC_AUTHORIZATION_FAILED") {
		t.Fatalf("bob's produce: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	bobAdm := kadm.NewClient(bob)
	if res, err := bobAdm.CreateTopics(ctxFor(t), 1, -1, nil, "bobs"); err != nil || res["bobs"].Err == nil || !strings.Contains(res["bobs"].Err.Error(), "TOPIC_AUTHORIZATION_FAILED") {
		t.Fatalf("bob's CreateTopics: %v %v", err, res["bobs"].Err)
	}
	if res, err := bobAdm.DeleteTopics(ctxFor(t), "guarded"); err != nil || res["guarded"].Err == nil {
		t.Fatalf("bob's DeleteTopics: %v %v", err, res["guarded"].Err)
	}
	join := kmsg.NewPtrJoinGroupRequest()
	join.Group, join.SessionTimeoutMillis, join.ProtocolType = "bobs-group", 10_000, "consumer"
	join.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range"}}
	resp, err := join.RequestWith(ctxFor(t), bob)
	if err != nil || resp.ErrorCode != kerr.GroupAuthorizationFailed.Code {
		t.Fatalf("bob's JoinGroup: %v code %d, want GROUP_AUTHORIZATION_FAILED", err, resp.ErrorCode)
	}
	h, err := f.srv.topics.lookup(ctxFor(t), "guarded")
	if err != nil {
		t.Fatal(err)
	}
	if po, err := f.node.Admin().PartitionOffsets(ctxFor(t), h, 0, ""); err != nil || po.End != 1 {
		t.Fatalf("the topic holds %d records (%v), want alice's 1", po.End, err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, want := range []string{"User:alice Write Topic:guarded", "User:alice Create Topic:guarded", "User:bob Write Topic:guarded", "User:bob Read Group:bobs-group"} {
		if !asked[want] {
			t.Errorf("the authorizer was not asked %q (asked: %v)", want, asked)
		}
	}
}
