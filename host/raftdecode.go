package host

import (
	"unsafe"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/parkway-io/parkway/shard"
)

// Raft messages are the bulk of node-to-node traffic: a quorum-acked
// produce exchanges about ten of them. raftpb's proto2 messages keep every
// scalar behind its own pointer, so proto.Unmarshal allocates once per
// field present; decodeRaft instead decodes the messages peers actually
// send into one block that holds the message and its scalars, the entries
// into a second and their data into a third (or, for one small entry, into
// the second). The result is the message
// proto.Unmarshal would return (the fuzz test holds the two to proto.Equal);
// anything outside the common shape — a snapshot, a field this decoder does
// not know, an unexpected wire type or enum value, malformed bytes — is left
// to proto.Unmarshal, which also gives the error. Lengths are checked
// against the bytes left before anything is allocated for them.

// raftBox is a raft message with the storage of its scalar fields.
type raftBox struct {
	msg                                                   raftpb.Message
	typ                                                   raftpb.MessageType
	to, from, term, logTerm, index, commit, vote, rejHint uint64
	reject                                                bool
}

// inboundRaft is a received partition raft message and the shard request
// that carries it, allocated together.
type inboundRaft struct {
	req shard.Request
	box raftBox
}

// entryBox is a raft entry with the storage of its scalar fields.
type entryBox struct {
	e     raftpb.Entry
	term  uint64
	index uint64
	typ   raftpb.EntryType
}

// oneEntry holds the entries of a message that carries exactly one (a
// produce's MsgApp): the slice and the entry in one allocation.
type oneEntry struct {
	ptr [1]*raftpb.Entry
	box [1]entryBox
}

// A one-entry block with its data inline is sized to fill the allocator's
// size class it lands in, and there are three of them: raft keeps the
// block as long as it keeps the entry (an idle group keeps its last
// entries until it compacts), so a block rounded up far past its data is
// memory every idle replica pays. An entry with no data (a new leader's
// empty entry) gets the bare oneEntry. The classes are Go's 256, 320 and
// 384 bytes (runtime/sizeclasses.go).
const (
	tinyEntryData  = int(256 - unsafe.Sizeof(oneEntry{}))
	midEntryData   = int(320 - unsafe.Sizeof(oneEntry{}))
	smallEntryData = int(384 - unsafe.Sizeof(oneEntry{})) // a produce of a message or two (a 100-byte message's entry is about 180 bytes)
)

// oneTinyEntry, oneMidEntry and oneSmallEntry are oneEntry with room for
// its data: a small produce's entry, its slice and its data in one
// allocation, which lives as long as raft keeps the entry.
type (
	oneTinyEntry struct {
		oneEntry
		data [tinyEntryData]byte
	}
	oneMidEntry struct {
		oneEntry
		data [midEntryData]byte
	}
	oneSmallEntry struct {
		oneEntry
		data [smallEntryData]byte
	}
)

// link points the block's one entry slot at its entry.
func (one *oneEntry) link() []*raftpb.Entry {
	one.ptr[0] = &one.box[0].e
	return one.ptr[:]
}

// Field numbers of raftpb.Message and raftpb.Entry (raft.proto).
const (
	fMsgType       = 1
	fMsgTo         = 2
	fMsgFrom       = 3
	fMsgTerm       = 4
	fMsgLogTerm    = 5
	fMsgIndex      = 6
	fMsgEntries    = 7
	fMsgCommit     = 8
	fMsgReject     = 10
	fMsgRejectHint = 11
	fMsgContext    = 12
	fMsgVote       = 13

	fEntType  = 1
	fEntTerm  = 2
	fEntIndex = 3
	fEntData  = 4

	maxMessageType = raftpb.MsgForgetLeader
	maxEntryType   = raftpb.EntryConfChangeV2
)

// decodeRaft decodes b into box.msg (which must be zero).
func decodeRaft(box *raftBox, b []byte) error {
	var sh raftShape
	if !sh.scan(b) {
		return proto.Unmarshal(b, &box.msg)
	}
	box.fill(b, &sh)
	return nil
}

// raftShape is what a first pass over a message learns: that the fast
// path can decode it, and how much its entries need.
type raftShape struct {
	entries int // entries present
	data    int // bytes of entry data
}

// scan checks that b is a message the fast path decodes, counting its
// entries and their data. It allocates nothing.
func (sh *raftShape) scan(b []byte) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch num {
		case fMsgType, fMsgTo, fMsgFrom, fMsgTerm, fMsgLogTerm, fMsgIndex, fMsgCommit, fMsgReject, fMsgRejectHint, fMsgVote:
			if typ != protowire.VarintType {
				return false
			}
			v, n := protowire.ConsumeVarint(b)
			if n < 0 || (num == fMsgType && v > uint64(maxMessageType)) {
				return false
			}
			b = b[n:]
		case fMsgEntries, fMsgContext:
			if typ != protowire.BytesType {
				return false
			}
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			if num == fMsgEntries {
				d, ok := scanEntry(v)
				if !ok {
					return false
				}
				sh.entries++
				sh.data += d
			}
		default:
			return false
		}
	}
	return true
}

// scanEntry checks one encoded entry and returns the bytes its data
// fields hold.
func scanEntry(b []byte) (data int, ok bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, false
		}
		b = b[n:]
		switch num {
		case fEntType, fEntTerm, fEntIndex:
			if typ != protowire.VarintType {
				return 0, false
			}
			v, n := protowire.ConsumeVarint(b)
			if n < 0 || (num == fEntType && v > uint64(maxEntryType)) {
				return 0, false
			}
			b = b[n:]
		case fEntData:
			if typ != protowire.BytesType {
				return 0, false
			}
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return 0, false
			}
			data += len(v)
			b = b[n:]
		default:
			return 0, false
		}
	}
	return data, true
}

// fill decodes b, which scan accepted with shape sh. Later occurrences of
// a field replace earlier ones and entries accumulate, as in
// proto.Unmarshal; a bytes field present but empty is non-nil, as there.
func (box *raftBox) fill(b []byte, sh *raftShape) {
	m := &box.msg
	var (
		boxes []entryBox
		data  []byte // all entry data shares it, each entry's slice capped at its end
	)
	switch {
	case sh.entries == 1 && (sh.data == 0 || sh.data > smallEntryData):
		one := &oneEntry{}
		m.Entries, boxes = one.link(), one.box[:]
	case sh.entries == 1 && sh.data <= tinyEntryData:
		one := &oneTinyEntry{}
		m.Entries, boxes, data = one.link(), one.box[:], one.data[:0:sh.data]
	case sh.entries == 1 && sh.data <= midEntryData:
		one := &oneMidEntry{}
		m.Entries, boxes, data = one.link(), one.box[:], one.data[:0:sh.data]
	case sh.entries == 1 && sh.data <= smallEntryData:
		one := &oneSmallEntry{}
		m.Entries, boxes, data = one.link(), one.box[:], one.data[:0:sh.data]
	case sh.entries > 1:
		m.Entries = make([]*raftpb.Entry, sh.entries)
		boxes = make([]entryBox, sh.entries)
		for i := range boxes {
			m.Entries[i] = &boxes[i].e
		}
	}
	if data == nil {
		data = make([]byte, 0, sh.data) // a zero-sized make does not allocate
	}
	k := 0
	for len(b) > 0 {
		num, _, n := protowire.ConsumeTag(b)
		b = b[n:]
		if num == fMsgEntries || num == fMsgContext {
			v, n := protowire.ConsumeBytes(b)
			b = b[n:]
			if num == fMsgEntries {
				data = boxes[k].fill(v, data)
				k++
			} else {
				m.Context = append(make([]byte, 0, len(v)), v...)
			}
			continue
		}
		v, n := protowire.ConsumeVarint(b)
		b = b[n:]
		switch num {
		case fMsgType:
			box.typ, m.Type = raftpb.MessageType(v), &box.typ
		case fMsgTo:
			box.to, m.To = v, &box.to
		case fMsgFrom:
			box.from, m.From = v, &box.from
		case fMsgTerm:
			box.term, m.Term = v, &box.term
		case fMsgLogTerm:
			box.logTerm, m.LogTerm = v, &box.logTerm
		case fMsgIndex:
			box.index, m.Index = v, &box.index
		case fMsgCommit:
			box.commit, m.Commit = v, &box.commit
		case fMsgReject:
			box.reject, m.Reject = protowire.DecodeBool(v), &box.reject
		case fMsgRejectHint:
			box.rejHint, m.RejectHint = v, &box.rejHint
		case fMsgVote:
			box.vote, m.Vote = v, &box.vote
		}
	}
}

// fill decodes one entry, which scanEntry accepted, appending its data to
// buf (which has room for it) and returning buf.
func (eb *entryBox) fill(b, buf []byte) []byte {
	e := &eb.e
	for len(b) > 0 {
		num, _, n := protowire.ConsumeTag(b)
		b = b[n:]
		if num == fEntData {
			v, n := protowire.ConsumeBytes(b)
			b = b[n:]
			at := len(buf)
			buf = append(buf, v...)
			e.Data = buf[at:len(buf):len(buf)]
			continue
		}
		v, n := protowire.ConsumeVarint(b)
		b = b[n:]
		switch num {
		case fEntType:
			eb.typ, e.Type = raftpb.EntryType(v), &eb.typ
		case fEntTerm:
			eb.term, e.Term = v, &eb.term
		case fEntIndex:
			eb.index, e.Index = v, &eb.index
		}
	}
	return buf
}
