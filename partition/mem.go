package partition

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"sync"

	"github.com/parkway-io/parkway/metadata"
)

// MemStore is a Store that keeps partitions in memory: for tests and
// embedded caches. Data survives Close of a Partition (a later Build at the
// same epoch reopens it) but not the process.
//
// MemStore is safe for concurrent Build and Remove; the Partitions it
// returns are, like every Partition, for one goroutine at a time. Their
// reads hand out the stored messages themselves, never a copy, so the
// messages a reader holds may be read from any goroutine while the owner
// appends and truncates: a stored message is never written again (see
// memPartition.Read). Their partitions implement Keeper, which stores a
// caller's bytes without copying them.
type MemStore struct {
	mu   sync.Mutex
	logs map[metadata.Namespace]*memLog
}

// memLog is one partition's data. Only the open partition touches chunks, next and
// consumers; the store's mutex guards open, and handing the log from one
// handle to the next goes through that mutex, which orders the accesses.
type memLog struct {
	epoch uint64
	// chunks hold the messages, memChunk per chunk (the last one may be
	// partial): message i is chunks[(i-first)/memChunk][i%memChunk].
	// Fixed-size chunks instead of one growing slice mean appends never
	// copy the whole log, which for millions of pointer-holding Message
	// structs costs more than the append itself, and truncation frees
	// whole chunks.
	chunks [][]Message
	// first is the offset of chunks[0][0], a multiple of memChunk.
	first uint64
	// start is the first readable offset, in [first, next].
	start uint64
	next  uint64
	// bytes is the encoded size of the messages in [start, next).
	bytes int64
	// lastAT is the newest message's append time (math.MinInt64: none).
	lastAT    int64
	consumers map[string]uint64
	open      bool
}

// memSize is the size m would occupy in a FileStore segment.
func memSize(m *Message) int64 {
	return recordHeaderSize + int64(len(m.Key)) + int64(headersSize(m.Headers)) + int64(len(m.Payload))
}

var (
	_ Store  = (*MemStore)(nil)
	_ Store  = (*FileStore)(nil)
	_ Keeper = (*memPartition)(nil)
)

// memChunk is the number of messages per chunk (80 KiB of Message structs).
const memChunk = 1024

// memFirstChunk is the capacity a log's first chunk starts with; it grows
// by append up to memChunk. A node may hold tens of thousands of
// partitions that see a handful of messages each, and a full first chunk
// per partition cost 104 KiB each before a single message mattered
// (3.2 GB for 10,000 partitions on three replicas with one message each);
// chunks after the first are allocated full, so a busy partition pays
// the doublings once. It starts at one message (112 B), not four: an idle
// replica with one message held three empty slots it never used.
const memFirstChunk = 1

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore {
	return &MemStore{logs: make(map[metadata.Namespace]*memLog)}
}

// Build implements Store. A namespace with an open Partition is ErrInUse.
func (s *MemStore) Build(ns metadata.Namespace, epoch uint64) (Partition, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.logs[ns]
	if l != nil && l.open {
		return nil, fmt.Errorf("%w: %v", ErrInUse, ns)
	}
	if l == nil || l.epoch != epoch {
		l = &memLog{epoch: epoch, lastAT: math.MinInt64} // consumers: made by the first stored offset
		s.logs[ns] = l
	}
	l.open = true
	return &memPartition{store: s, ns: ns, log: l}, nil
}

// List implements Store: every namespace the store holds, with its epoch,
// sorted by namespace.
func (s *MemStore) List() ([]Stored, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Stored, 0, len(s.logs))
	for ns, l := range s.logs {
		out = append(out, Stored{NS: ns, Epoch: l.epoch})
	}
	slices.SortFunc(out, func(a, b Stored) int { return cmp.Compare(a.NS, b.NS) })
	return out, nil
}

// Remove implements Store. A namespace with an open Partition is ErrInUse.
func (s *MemStore) Remove(ns metadata.Namespace) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.logs[ns]; l != nil && l.open {
		return fmt.Errorf("%w: %v", ErrInUse, ns)
	}
	delete(s.logs, ns)
	return nil
}

type memPartition struct {
	store  *MemStore
	ns     metadata.Namespace
	log    *memLog
	closed bool
}

func (p *memPartition) Namespace() metadata.Namespace { return p.ns }

func (p *memPartition) Epoch() uint64 { return p.log.epoch }

func (p *memPartition) NextOffset() uint64 { return p.log.next }

func (p *memPartition) StartOffset() uint64 { return p.log.start }

func (p *memPartition) Size() int64 { return p.log.bytes }

// at returns the message at offset off, which must be in [first, next).
func (l *memLog) at(off uint64) *Message {
	return &l.chunks[(off-l.first)/memChunk][off%memChunk]
}

// Sync does nothing: a MemStore is not durable.
func (p *memPartition) Sync() error {
	if p.closed {
		return ErrClosed
	}
	return nil
}

// TruncateBefore implements Partition, freeing whole chunks of messages.
func (p *memPartition) TruncateBefore(offset uint64) error {
	if p.closed {
		return ErrClosed
	}
	l := p.log
	if offset > l.next {
		return fmt.Errorf("%w: truncate before %d past next offset %d", ErrOffsetOutOfRange, offset, l.next)
	}
	if offset <= l.start {
		return nil
	}
	for off := l.start; off < offset; off++ {
		l.bytes -= memSize(l.at(off))
	}
	l.start = offset
	drop := 0
	for drop < len(l.chunks) && l.first+memChunk <= offset {
		l.chunks[drop] = nil
		l.first += memChunk
		drop++
	}
	l.chunks = l.chunks[drop:]
	return nil
}

// SkipTo implements Partition.
func (p *memPartition) SkipTo(offset uint64) error {
	if p.closed {
		return ErrClosed
	}
	l := p.log
	if offset <= l.next {
		return p.TruncateBefore(offset)
	}
	// Keep the chunk arithmetic: the chunk holding offset starts at a
	// multiple of memChunk, padded up to offset.
	l.first = offset - offset%memChunk
	l.chunks = nil
	if pad := offset % memChunk; pad != 0 {
		l.chunks = [][]Message{make([]Message, pad, memChunk)}
	}
	l.start, l.next, l.bytes = offset, offset, 0
	return nil
}

// EnforceRetention implements Partition with single messages as the
// unit: it may remove every message.
func (p *memPartition) EnforceRetention(olderThanMicros, maxBytes int64) (uint64, error) {
	if p.closed {
		return 0, ErrClosed
	}
	l := p.log
	cut, size := l.start, l.bytes
	if olderThanMicros != 0 {
		for ; cut < l.next; cut++ {
			m := l.at(cut)
			if m.Timestamp >= olderThanMicros {
				break
			}
			size -= memSize(m)
		}
	}
	if maxBytes > 0 {
		for ; cut < l.next && size > maxBytes; cut++ {
			size -= memSize(l.at(cut))
		}
	}
	removed := cut - l.start
	return removed, p.TruncateBefore(cut)
}

// Append copies the batch into three allocations however many messages it
// holds: one arena for all payloads and keys, one for all header values,
// and one for all Header structs. Keys are strings and need no copy. Every slice
// handed out is capped so appending to it cannot spill into a neighbour.
func (p *memPartition) Append(msgs []Message) (uint64, error) {
	return p.append(msgs, false)
}

// AppendKept implements Keeper: the batch's slices are stored as given
// (capped, as Append's copies are), so the partition's memory per message
// is the caller's and nothing is copied but the Message structs.
func (p *memPartition) AppendKept(msgs []Message) (uint64, error) {
	return p.append(msgs, true)
}

// append is Append, keeping msgs' slices instead of copying them with
// keep (AppendKept).
func (p *memPartition) append(msgs []Message, keep bool) (uint64, error) {
	if p.closed {
		return 0, ErrClosed
	}
	if len(msgs) == 0 {
		return 0, ErrEmptyBatch
	}
	var payloadBytes, headerCount, valueBytes int
	for i := range msgs {
		if keep {
			break // nothing to copy: no arenas
		}
		payloadBytes += len(msgs[i].Payload) + len(msgs[i].Key)
		headerCount += len(msgs[i].Headers)
		for j := range msgs[i].Headers {
			valueBytes += len(msgs[i].Headers[j].Value)
		}
	}
	var payloads, values []byte
	var headers []Header
	if payloadBytes > 0 {
		payloads = make([]byte, 0, payloadBytes)
	}
	if valueBytes > 0 {
		values = make([]byte, 0, valueBytes)
	}
	if headerCount > 0 {
		headers = make([]Header, headerCount)
	}

	l := p.log
	first := l.next
	for i := range msgs {
		in := &msgs[i]
		l.lastAT = stampAppendTime(in, l.lastAT)
		out := Message{Offset: first + uint64(i), ID: in.ID, Timestamp: in.Timestamp, AppendTime: l.lastAT}
		if keep {
			out.Key, out.Payload, out.Headers = capped(in.Key), capped(in.Payload), capped(in.Headers)
			for j := range out.Headers {
				// The Header structs are handed over with their values.
				out.Headers[j].Value = capped(out.Headers[j].Value)
			}
		} else {
			copyInto(&out, in, &payloads, &values, &headers)
		}
		if l.next%memChunk == 0 {
			size := memChunk
			if len(l.chunks) == 0 {
				l.first = l.next
				size = memFirstChunk
			}
			l.chunks = append(l.chunks, make([]Message, 0, size))
		}
		last := &l.chunks[len(l.chunks)-1]
		*last = append(*last, out)
		l.bytes += memSize(in)
		l.next++
	}
	return first, nil
}

// copyInto sets out's key, payload and headers to copies of in's, taken
// from the batch's arenas (payloads and keys, header values, Header
// structs), each capped so appending to it cannot spill into a neighbour.
func copyInto(out, in *Message, payloads, values *[]byte, headers *[]Header) {
	if len(in.Key) > 0 {
		start := len(*payloads)
		*payloads = append(*payloads, in.Key...)
		out.Key = (*payloads)[start:len(*payloads):len(*payloads)]
	}
	if len(in.Payload) > 0 {
		start := len(*payloads)
		*payloads = append(*payloads, in.Payload...)
		out.Payload = (*payloads)[start:len(*payloads):len(*payloads)]
	}
	if n := len(in.Headers); n > 0 {
		hs := (*headers)[:n:n]
		*headers = (*headers)[n:]
		for j := range in.Headers {
			hs[j].Key = in.Headers[j].Key
			if v := in.Headers[j].Value; len(v) > 0 {
				start := len(*values)
				*values = append(*values, v...)
				hs[j].Value = (*values)[start:len(*values):len(*values)]
			}
		}
		out.Headers = hs
	}
}

// capped is s with its capacity cut to its length (nil stays nil, and an
// empty slice becomes nil, as Append's copies are): an append to a stored
// message's slice by a reader reallocates instead of writing past it.
func capped[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s[:len(s):len(s)]
}

// Read hands out the stored messages themselves, not a copy: the
// returned slice is a window on the chunk holding from, capped at its
// length so an append to it cannot reach the chunk, and it ends at that
// chunk's end (at most memChunk messages per read). A stored message is
// written once, by the Append that stores it, and never again: later
// appends fill slots past it or new chunks, and truncation only drops
// whole chunks from the log, so a reader's window stays intact (and its
// chunk alive) for as long as the reader holds it. The messages must be
// treated as read-only (Partition.Read).
func (p *memPartition) Read(from uint64, max int) ([]Message, error) {
	if p.closed {
		return nil, ErrClosed
	}
	l := p.log
	if from < l.start {
		return nil, fmt.Errorf("%w: offset %d below log start %d", ErrOffsetOutOfRange, from, l.start)
	}
	if max <= 0 || from >= l.next {
		return nil, nil
	}
	chunk := l.chunks[(from-l.first)/memChunk]
	i := int(from % memChunk)
	end := i + int(min(uint64(max), uint64(len(chunk)-i)))
	return chunk[i:end:end], nil
}

// OffsetForTime implements Partition by binary search: Append keeps
// append times non-decreasing.
func (p *memPartition) OffsetForTime(t int64) (uint64, error) {
	if p.closed {
		return 0, ErrClosed
	}
	l := p.log
	n := sort.Search(int(l.next-l.start), func(i int) bool { return l.at(l.start+uint64(i)).AppendTime >= t })
	return l.start + uint64(n), nil
}

func (p *memPartition) StoreConsumerOffset(consumer string, offset uint64) error {
	if p.closed {
		return ErrClosed
	}
	if next := p.log.next; offset > next {
		return fmt.Errorf("%w: consumer offset %d past next offset %d", ErrOffsetOutOfRange, offset, next)
	}
	if p.log.consumers == nil {
		p.log.consumers = make(map[string]uint64)
	}
	p.log.consumers[consumer] = offset
	return nil
}

func (p *memPartition) ConsumerOffset(consumer string) (uint64, bool, error) {
	if p.closed {
		return 0, false, ErrClosed
	}
	off, ok := p.log.consumers[consumer]
	return off, ok, nil
}

func (p *memPartition) DeleteConsumerOffset(consumer string) error {
	if p.closed {
		return ErrClosed
	}
	delete(p.log.consumers, consumer)
	return nil
}

func (p *memPartition) ConsumerOffsets() map[string]uint64 {
	return maps.Clone(p.log.consumers)
}

func (p *memPartition) Close() error {
	if p.closed {
		return ErrClosed
	}
	p.closed = true
	p.store.mu.Lock()
	p.log.open = false
	p.store.mu.Unlock()
	return nil
}
