package kafka

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

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
