package host

import (
	"encoding/binary"
	"errors"
	"fmt"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/shard"
)

// Partition raft messages between a pair of nodes are coalesced (after
// CockroachDB's coalesced heartbeats): a shard's messages for one peer
// during one unit of pump work travel as one KindPartitionRaftBatch
// message, whatever the number of groups that produced them. A batch of
// one travels as an ordinary KindPartitionRaft message.
//
// Wire form of a batch payload (little-endian):
//
//	uint32 count           // records that follow, ≥ 1
//	count × {
//	    uint64 namespace
//	    uint64 epoch         // the partition's incarnation (behaviour 20)
//	    uint32 length
//	    [length]byte         // the raft message (protobuf)
//	}
//
// The decoder checks the count against the bytes present, and every
// length against the bytes left, before it allocates anything.

const (
	raftRecordHeader = 8 + 8 + 4
	// maxRaftBatch bounds a batch's payload: a message that would make
	// it larger is sent in the next batch, and one larger than
	// maxBatchedRaft travels alone.
	maxRaftBatch   = 1 << 20
	maxBatchedRaft = 64 << 10
)

var errRaftBatch = errors.New("parkway: malformed partition raft batch")

// raftBatcher coalesces one shard's partition raft messages per peer. It
// belongs to the shard's pump (one goroutine), like everything it is
// called from; flush runs at the end of every unit of pump work and
// before every fsync of a raft log, so batching never holds a message
// back across a disk write.
type raftBatcher struct {
	// send hands one transport message of kind for group to peer to.
	send func(to uint64, kind uint8, group uint64, payload []byte) error
	// bufs holds each peer's batch being built (its count first), peers
	// the peers with one, in the order they were started: flush sends in
	// a deterministic order.
	bufs  map[uint64]*raftBatch
	peers []uint64
	// one is where a message that travels alone is framed: the transport
	// copies what it is handed, so the buffer is reused.
	one []byte
}

type raftBatch struct {
	buf []byte
	n   uint32
	ns  metadata.Namespace // the namespace of the first record
}

func newRaftBatcher(send func(to uint64, kind uint8, group uint64, payload []byte) error) *raftBatcher {
	return &raftBatcher{send: send, bufs: make(map[uint64]*raftBatch)}
}

// add queues m, a raft message of the partition (ns, epoch), for peer to.
func (b *raftBatcher) add(to uint64, ns metadata.Namespace, epoch uint64, m *raftpb.Message) {
	size := proto.Size(m)
	if size > maxBatchedRaft {
		b.flushPeer(to) // keep the peer's messages in order
		b.sendOne(to, ns, epoch, m, size)
		return
	}
	q := b.bufs[to]
	if q == nil {
		q = &raftBatch{}
		b.bufs[to] = q
	}
	if q.n > 0 && len(q.buf)+raftRecordHeader+size > maxRaftBatch {
		b.flushPeer(to)
	}
	if q.n == 0 {
		q.buf = append(q.buf[:0], 0, 0, 0, 0)
		q.ns = ns
		b.peers = append(b.peers, to)
	}
	at := len(q.buf)
	q.buf = binary.LittleEndian.AppendUint64(q.buf, uint64(ns))
	q.buf = binary.LittleEndian.AppendUint64(q.buf, epoch)
	q.buf = binary.LittleEndian.AppendUint32(q.buf, uint32(size))
	var err error
	if q.buf, err = (proto.MarshalOptions{}).MarshalAppend(q.buf, m); err != nil || len(q.buf)-at-raftRecordHeader != size {
		q.buf = q.buf[:at] // lost, like a message the transport drops: raft re-sends
		if q.n == 0 {
			b.peers = b.peers[:len(b.peers)-1]
		}
		return
	}
	q.n++
}

// flush sends every peer's batch.
func (b *raftBatcher) flush() {
	for _, p := range b.peers {
		b.flushPeer(p)
	}
	clear(b.peers)
	b.peers = b.peers[:0]
}

// flushPeer sends peer to's batch, if it has one. The transport copies
// the payload, so the buffer is reused.
func (b *raftBatcher) flushPeer(to uint64) {
	q := b.bufs[to]
	if q == nil || q.n == 0 {
		return
	}
	if q.n == 1 {
		// One message: the ordinary form, its epoch then the message.
		rec := q.buf[4+raftRecordHeader:]
		b.one = append(append(b.one[:0], q.buf[4+8:4+16]...), rec...)
		_ = b.send(to, KindPartitionRaft, uint64(q.ns), b.one)
	} else {
		binary.LittleEndian.PutUint32(q.buf, q.n)
		_ = b.send(to, KindPartitionRaftBatch, 0, q.buf)
	}
	q.n = 0
	q.buf = q.buf[:0]
}

// sendOne sends m alone, in the ordinary form. Such a message is large
// and rare: its buffer is not kept.
func (b *raftBatcher) sendOne(to uint64, ns metadata.Namespace, epoch uint64, m *raftpb.Message, size int) {
	payload, err := appendRaft(binary.LittleEndian.AppendUint64(make([]byte, 0, 8+size), epoch), m)
	if err == nil {
		_ = b.send(to, KindPartitionRaft, uint64(ns), payload)
	}
}

// raftRecord is one message of a batch: its partition, incarnation and
// encoded raft message (a slice of the batch).
type raftRecord struct {
	ns    metadata.Namespace
	epoch uint64
	msg   []byte
}

// decodeRaftBatch splits a batch payload into its records. It refuses a
// count of zero, a count the payload cannot hold, a length past the
// payload's end and trailing bytes, each before allocating for it.
func decodeRaftBatch(b []byte) ([]raftRecord, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("%w: %d bytes, shorter than its count", errRaftBatch, len(b))
	}
	n := binary.LittleEndian.Uint32(b)
	b = b[4:]
	if n == 0 || uint64(n) > uint64(len(b))/raftRecordHeader {
		return nil, fmt.Errorf("%w: %d records in %d bytes", errRaftBatch, n, len(b))
	}
	out := make([]raftRecord, 0, n)
	for i := range n {
		if len(b) < raftRecordHeader {
			return nil, fmt.Errorf("%w: record %d truncated", errRaftBatch, i)
		}
		r := raftRecord{ns: metadata.Namespace(binary.LittleEndian.Uint64(b)), epoch: binary.LittleEndian.Uint64(b[8:])}
		size := binary.LittleEndian.Uint32(b[16:])
		b = b[raftRecordHeader:]
		if uint64(size) > uint64(len(b)) {
			return nil, fmt.Errorf("%w: record %d of %d bytes, %d left", errRaftBatch, i, size, len(b))
		}
		r.msg, b = b[:size:size], b[size:]
		out = append(out, r)
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", errRaftBatch, len(b))
	}
	return out, nil
}

// deliverRaftBatch hands each message of a batch to its partition's
// shard, in order. A batch that does not decode is refused whole; a
// message a shard's full inbox refuses is lost (raft re-sends), and the
// first such refusal is reported.
func (e *Engine) deliverRaftBatch(from uint64, payload []byte) error {
	recs, err := decodeRaftBatch(payload)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	// One allocation holds every record's request and message.
	ins := make([]inboundRaft, len(recs))
	for i, r := range recs {
		if err := decodeRaft(&ins[i].box, r.msg); err != nil {
			return fmt.Errorf("%w: partition raft batch record %d: %w", ErrMalformed, i, err)
		}
	}
	var first error
	for i, r := range recs {
		req := &ins[i].req
		*req = shard.Request{Op: shard.OpRaft, NS: r.ns, Epoch: r.epoch, Raft: &ins[i].box.msg, Peer: from}
		if _, err := e.router.Send(r.ns, shard.Frame{Req: req}); err != nil {
			e.countSendFailure(req, err)
			if first == nil {
				first = err
			}
		}
	}
	return first
}
