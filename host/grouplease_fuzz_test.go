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
	f.Add(encodeLeaseRequest(7, []MemberLease{{Stream: 1, Topic: 2, TopicRevision: 3, Group: "g", Member: 4}}))
	f.Add(encodeLeaseRequest(7, []MemberLease{{Stream: 1, Topic: 2, Group: "g", Member: 4}, {Stream: 1, Topic: 2, Group: "g", Member: 5}, {Stream: 1, Topic: 3, Group: "h", Member: 1}}))
	f.Add(encodeLeaseReply(7, LeaseResult{Index: 9}))
	f.Add(encodeLeaseReply(7, LeaseResult{Index: 9, Failed: []LeaseFailure{{Pos: 1, Err: metadata.ErrUnknownMember}, {Pos: 4, Err: metadata.ErrGroupNotFound}}}))
	f.Add(encodeLeaseReply(7, LeaseResult{Err: metadata.ErrUnknownMember}))
	f.Add(encodeLeaseReply(7, LeaseResult{Err: shard.ErrRetry}))
	f.Fuzz(func(t *testing.T, b []byte) {
		if id, l, err := decodeLeaseRequest(b); err == nil {
			if again := encodeLeaseRequest(id, l); !bytes.Equal(again, b) {
				t.Fatalf("request %x decoded to %+v, encodes as %x", b, l, again)
			}
		}
		if id, r, err := decodeLeaseReply(b); err == nil && r.Err == nil && len(r.Failed) == 0 {
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

// A message of renewals round-trips, its refusals keep their positions
// and sentinels, and Of answers each renewal: the confirmed ones nil.
func TestLeaseBatchRoundTrip(t *testing.T) {
	ls := []MemberLease{{Stream: 1, Topic: 2, TopicRevision: 3, Group: "g", Member: 4},
		{Stream: 1, Topic: 2, TopicRevision: 3, Group: "g", Member: 5}, {Stream: 9, Topic: 8, Group: "other", Member: 1}}
	id, got, err := decodeLeaseRequest(encodeLeaseRequest(11, ls))
	if err != nil || id != 11 || len(got) != len(ls) {
		t.Fatalf("request: %d, %+v, %v", id, got, err)
	}
	for i := range ls {
		if got[i] != ls[i] {
			t.Errorf("renewal %d: %+v, want %+v", i, got[i], ls[i])
		}
	}
	id, r, err := decodeLeaseReply(encodeLeaseReply(11, LeaseResult{Index: 40, Failed: []LeaseFailure{{Pos: 1, Err: metadata.ErrUnknownMember}, {Pos: 2, Err: metadata.ErrGroupNotFound}}}))
	if err != nil || id != 11 || r.Index != 40 {
		t.Fatalf("reply: %d, %+v, %v", id, r, err)
	}
	if r.Of(0) != nil || !errors.Is(r.Of(1), metadata.ErrUnknownMember) || !errors.Is(r.Of(2), metadata.ErrGroupNotFound) {
		t.Errorf("outcomes %v, %v, %v", r.Of(0), r.Of(1), r.Of(2))
	}
	all := LeaseResult{Err: shard.ErrRetry}
	if !errors.Is(all.Of(0), shard.ErrRetry) {
		t.Errorf("a failed message's renewal: %v", all.Of(0))
	}
	// A peer's count is checked before anything is allocated for it.
	huge := encodeLeaseRequest(1, ls[:1])
	huge[8], huge[9], huge[10], huge[11] = 0xff, 0xff, 0xff, 0x7f
	if _, _, err := decodeLeaseRequest(huge); err == nil {
		t.Error("a request claiming 2^31 renewals decoded")
	}
}
