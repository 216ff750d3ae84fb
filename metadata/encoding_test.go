package metadata

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// allCommands holds every command type, with ordinary and extreme field
// values (invalid ones included: a log must round-trip them too).
func allCommands() []Command {
	odd := TopicConfig{Fsync: 255, FsyncInterval: math.MinInt64, RetentionAge: math.MaxInt64, RetentionBytes: math.MinInt64}
	cfg := TopicConfig{Fsync: FsyncInterval, FsyncInterval: 250 * time.Millisecond, RetentionAge: 72 * time.Hour, RetentionBytes: 10 << 30}
	return []Command{
		CreateStream{Name: "orders"},
		CreateStream{Name: ""},
		AddNode{Node: 4},
		AddNode{Node: math.MaxUint64},
		DrainNode{Node: 2},
		DrainNode{Node: 0},
		RemoveNode{Node: 3},
		Rebalance{},
		SettleReplicas{NS: 5, CreatedRevision: 2, Node: 1},
		SettleReplicas{NS: math.MaxUint64, CreatedRevision: math.MaxUint64, Node: math.MaxUint64},
		ReseedReplica{NS: 5, CreatedRevision: 2, Replica: 1<<32 | 3},
		ReseedReplica{NS: math.MaxUint64, CreatedRevision: math.MaxUint64, Replica: math.MaxUint64},
		CreateStream{Name: "a\xffb\x00\n"},
		CreateStream{Name: strings.Repeat("é", 300)},
		DeleteStream{Stream: 0},
		DeleteStream{Stream: math.MaxUint32},
		CreateTopic{Stream: 3, Name: "eu", Partitions: 12},
		CreateTopic{Stream: 3, Name: "eu", Partitions: 12, Config: cfg},
		CreateTopic{Stream: math.MaxUint32, Name: "", Partitions: math.MinInt, Config: odd},
		CreateTopic{Stream: 0, Name: "x", Partitions: math.MaxInt},
		DeleteTopic{Stream: 1, Topic: 2},
		DeleteTopic{Stream: math.MaxUint32, Topic: math.MaxUint32},
		CreatePartitions{Stream: 1, Topic: 2, Count: 3},
		CreatePartitions{Stream: 1, Topic: 2, Count: -3},
		DeletePartitions{Stream: 1, Topic: 2, Count: 1},
		DeletePartitions{Stream: 0, Topic: 0, Count: math.MinInt},
		PurgeTopic{Stream: 7, Topic: 4095},
		SetTopicConfig{Stream: 1, Topic: 1, Config: cfg},
		SetTopicConfig{Stream: 1, Topic: 1},
		SetTopicConfig{Stream: 1, Topic: 1, Config: odd},
		CreateTopic{Stream: 3, Name: "r", Partitions: 3, Config: TopicConfig{Replicas: 3}},
		CreateTopic{Stream: 3, Name: "r", Partitions: 3, Config: TopicConfig{Replicas: -7}, StreamRevision: 4},
		SetTopicConfig{Stream: 1, Topic: 1, Config: TopicConfig{Replicas: 2}, Revision: 9},
		CreateGroup{Stream: 1, Topic: 2, Name: "billing"},
		CreateGroup{Stream: 1, Topic: 2, Name: "billing", Revision: 9},
		DeleteGroup{Stream: math.MaxUint32, Topic: 0, Name: ""},
		JoinGroup{Stream: 1, Topic: 2, Group: "g", Member: "worker-1", SessionTimeout: 10 * time.Second, Now: 1_700_000_000_000_000_000},
		JoinGroup{Stream: 1, Topic: 2, Group: "g", SessionTimeout: math.MinInt64, Now: math.MinInt64, Revision: 3},
		LeaveGroup{Stream: 1, Topic: 2, Group: "g", Member: math.MaxUint64, Now: -1},
		Heartbeat{Stream: 1, Topic: 2, Group: "g", Member: 7, Now: math.MaxInt64},
		CommitGroupOffsets{Stream: 1, Topic: 2, Group: "g", Member: 1, Generation: 4, Now: 5},
		CommitGroupOffsets{Stream: 1, Topic: 2, Group: "g", Member: 1, Generation: 4, Now: 5, Revision: 2,
			Offsets: []GroupOffset{{Partition: 0, Offset: 10}, {Partition: math.MaxUint32, Offset: math.MaxUint64}, {Partition: 0, Offset: 0}}},
		ExpireMembers{Stream: 1, Topic: 2, Group: "g", Now: 5},
		ExpireMembers{Stream: 1, Topic: 2, Group: "g", GroupRevision: 7, Members: []uint64{3, 1, math.MaxUint64}, Now: -5, Revision: 2},
	}
}

func TestCommandRoundTrip(t *testing.T) {
	types := map[string]bool{}
	for _, c := range allCommands() {
		types[reflect.TypeOf(c).Name()] = true
		b, err := EncodeCommand(c)
		if err != nil {
			t.Fatalf("EncodeCommand(%#v): %v", c, err)
		}
		got, err := DecodeCommand(b)
		if err != nil {
			t.Fatalf("DecodeCommand(EncodeCommand(%#v)): %v", c, err)
		}
		if !reflect.DeepEqual(got, c) {
			t.Errorf("round trip: %#v became %#v", c, got)
		}
		// A pointer encodes as its value.
		p := reflect.New(reflect.TypeOf(c))
		p.Elem().Set(reflect.ValueOf(c))
		pb, err := EncodeCommand(p.Interface().(Command))
		if err != nil || !bytes.Equal(pb, b) {
			t.Errorf("pointer to %#v encodes as %x, %v; value as %x", c, pb, err, b)
		}
	}
	if len(types) != 21 {
		t.Errorf("round trip covers %d command types, want all 21: %v", len(types), types)
	}
	for _, bad := range []Command{nil, (*CreateTopic)(nil), foreignCommand{}} {
		if _, err := EncodeCommand(bad); !errors.Is(err, ErrUnknownCommand) {
			t.Errorf("EncodeCommand(%#v) = %v", bad, err)
		}
	}
}

// The encoding is part of the on-disk format: pin it.
func TestCommandEncodingIsPinned(t *testing.T) {
	cases := []struct {
		cmd  Command
		want []byte
	}{
		{CreateStream{Name: "ab"}, []byte{1, 1, 2, 'a', 'b'}},
		{DeleteStream{Stream: 300}, []byte{2, 1, 0xac, 0x02}},
		{CreateTopic{Stream: 1, Name: "t", Partitions: 2}, []byte{3, 1, 1, 1, 't', 4, 0, 0, 0, 0}},
		{CreateTopic{Stream: 1, Name: "t", Partitions: -1, Config: TopicConfig{Fsync: FsyncAlways, FsyncInterval: 1, RetentionAge: -1, RetentionBytes: 64}},
			[]byte{3, 1, 1, 1, 't', 1, 1, 2, 1, 0x80, 0x01}},
		{DeleteTopic{Stream: 1, Topic: 2}, []byte{4, 1, 1, 2}},
		{CreatePartitions{Stream: 1, Topic: 2, Count: 3}, []byte{5, 1, 1, 2, 6}},
		{DeletePartitions{Stream: 1, Topic: 2, Count: 3}, []byte{6, 1, 1, 2, 6}},
		{PurgeTopic{Stream: 1, Topic: 2}, []byte{7, 1, 1, 2}},
		{SetTopicConfig{Stream: 1, Topic: 2, Config: TopicConfig{Fsync: FsyncNever}}, []byte{8, 1, 1, 2, 3, 0, 0, 0}},
		{CreateGroup{Stream: 1, Topic: 2, Name: "g"}, []byte{9, 1, 1, 2, 1, 'g'}},
		{DeleteGroup{Stream: 1, Topic: 2, Name: "g", Revision: 5}, []byte{10, 2, 1, 2, 1, 'g', 5}},
		{JoinGroup{Stream: 1, Topic: 2, Group: "g", Member: "m", SessionTimeout: 1, Now: -1}, []byte{11, 1, 1, 2, 1, 'g', 1, 'm', 2, 1}},
		{LeaveGroup{Stream: 1, Topic: 2, Group: "g", Member: 3, Now: 1}, []byte{12, 1, 1, 2, 1, 'g', 3, 2}},
		{Heartbeat{Stream: 1, Topic: 2, Group: "g", Member: 3, Now: 1}, []byte{13, 1, 1, 2, 1, 'g', 3, 2}},
		{CommitGroupOffsets{Stream: 1, Topic: 2, Group: "g", Member: 3, Generation: 4, Now: 1, Offsets: []GroupOffset{{Partition: 5, Offset: 6}}},
			[]byte{14, 1, 1, 2, 1, 'g', 3, 4, 2, 1, 5, 6}},
		{ExpireMembers{Stream: 1, Topic: 2, Group: "g", GroupRevision: 4, Members: []uint64{3}, Now: 1, Revision: 5},
			[]byte{20, 2, 1, 2, 1, 'g', 4, 2, 1, 3, 5}},
	}
	for _, c := range cases {
		if got, _ := EncodeCommand(c.cmd); !bytes.Equal(got, c.want) {
			t.Errorf("EncodeCommand(%#v) = %v, want %v", c.cmd, got, c.want)
		}
	}
}

func TestDecodeCommandRejectsGarbage(t *testing.T) {
	long := append([]byte{1, 1}, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01)
	cases := []struct {
		name   string
		b      []byte
		offset int
	}{
		{"empty", nil, 0},
		{"type only", []byte{1}, 1},
		{"type zero", []byte{0, 1}, 0},
		{"unknown type", []byte{cmdReseedReplica + 1, 1}, 0},
		{"unknown version", []byte{1, 2, 0}, 1},
		{"version zero", []byte{2, 0, 0}, 1},
		{"missing field", []byte{2, 1}, 2},
		{"truncated varint", []byte{2, 1, 0x80}, 2},
		{"varint overflow", long, 2},
		{"non-minimal varint", []byte{2, 1, 0x80, 0x00}, 2},
		{"id over 32 bits", []byte{2, 1, 0x80, 0x80, 0x80, 0x80, 0x10}, 2},
		{"string overruns", []byte{1, 1, 5, 'a', 'b'}, 2},
		{"trailing byte", []byte{2, 1, 0, 0}, 3},
		{"truncated config", []byte{8, 1, 1, 2, 3, 0, 0}, 7},
		{"missing config", []byte{8, 1, 1, 2}, 4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cmd, err := DecodeCommand(c.b)
			var de *DecodeError
			if !errors.As(err, &de) || !errors.Is(err, ErrInvalidEncoding) || cmd != nil {
				t.Fatalf("DecodeCommand(%v) = %#v, %v; want a *DecodeError", c.b, cmd, err)
			}
			if de.Offset != c.offset || de.What != "command" {
				t.Errorf("error %+v, want offset %d", de, c.offset)
			}
			if !strings.HasPrefix(err.Error(), "parkway: ") {
				t.Errorf("error %q lacks the parkway: prefix", err)
			}
		})
	}
}

// FuzzDecodeCommand: decoding never panics, rejects with a *DecodeError,
// and accepts only canonical encodings (re-encoding gives the input back);
// applying whatever decodes never panics either.
func FuzzDecodeCommand(f *testing.F) {
	for _, c := range allCommands() {
		b, _ := EncodeCommand(c)
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff})
	f.Add([]byte{2, 1, 0x80, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeCommand(b)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) || !errors.Is(err, ErrInvalidEncoding) || c != nil {
				t.Fatalf("DecodeCommand(%x) = %#v, %v", b, c, err)
			}
			if de.Offset < 0 || de.Offset > len(b) {
				t.Fatalf("offset %d out of %d bytes", de.Offset, len(b))
			}
			return
		}
		again, err := EncodeCommand(c)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("DecodeCommand(%x) = %#v, which encodes as %x, %v", b, c, again, err)
		}
		if cp, ok := c.(CreatePartitions); ok && cp.Count > 1000 {
			return // valid and slow (up to a million partitions), not interesting
		}
		s := newTestStore(t)
		mustApply(t, s, CreateStream{Name: "s"})
		mustApply(t, s, CreateTopic{Stream: 0, Name: "t", Partitions: 2})
		s.Apply(c) //nolint:errcheck // only must not panic
		checkInvariants(t, s)
		// And on a cluster's store with a move under way, where the
		// membership commands do something.
		cs := clusterStore(t, 1, 2, 3, 4)
		mustApply(t, cs, CreateTopic{Stream: 0, Name: "t", Partitions: 6, Config: TopicConfig{Replicas: 2}})
		mustApply(t, cs, DrainNode{Node: 4})
		cs.Apply(c) //nolint:errcheck // only must not panic
		checkMoveInvariants(t, cs)
	})
}
