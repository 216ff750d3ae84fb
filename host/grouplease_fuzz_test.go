package host

import (
	"bytes"
	"errors"
	"testing"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/shard"
)

// FuzzDecodeLease feeds arbitrary bytes to the lease request and reply
// decoders (a peer's KindLease and KindLeaseReply payloads): they must
// never panic, and what they accept must encode to the same bytes.
func FuzzDecodeLease(f *testing.F) {
	f.Add(encodeLeaseRequest(7, MemberLease{Stream: 1, Topic: 2, TopicRevision: 3, Group: "g", Member: 4}))
	f.Add(encodeLeaseReply(7, LeaseResult{Index: 9}))
	f.Add(encodeLeaseReply(7, LeaseResult{Err: metadata.ErrUnknownMember}))
	f.Add(encodeLeaseReply(7, LeaseResult{Err: shard.ErrRetry}))
	f.Fuzz(func(t *testing.T, b []byte) {
		if id, l, err := decodeLeaseRequest(b); err == nil {
			if again := encodeLeaseRequest(id, l); !bytes.Equal(again, b) {
				t.Fatalf("request %x decoded to %+v, encodes as %x", b, l, again)
			}
		}
		if id, r, err := decodeLeaseReply(b); err == nil && r.Err == nil {
			if again := encodeLeaseReply(id, r); !bytes.Equal(again, b) {
				t.Fatalf("reply %x decoded to %+v, encodes as %x", b, r, again)
			}
		}
	})
}

// A lease reply keeps the sentinels a member acts on across the wire.
func TestLeaseReplyKeepsSentinels(t *testing.T) {
	for _, want := range []error{shard.ErrRetry, metadata.ErrNotLeasing, metadata.ErrUnknownMember, metadata.ErrGroupNotFound,
		metadata.ErrTopicNotFound, metadata.ErrStreamNotFound} {
		id, r, err := decodeLeaseReply(encodeLeaseReply(3, LeaseResult{Err: want}))
		if err != nil || id != 3 {
			t.Fatalf("%v: %d, %v", want, id, err)
		}
		if errors.Is(want, metadata.ErrNotLeasing) {
			want = shard.ErrRetry // the member asks the leader again
		}
		if !errors.Is(r.Err, want) {
			t.Errorf("%v came back as %v", want, r.Err)
		}
	}
}
