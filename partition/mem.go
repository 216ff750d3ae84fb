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
// caller's bytes without copying them, and EncodedKeeper, which keeps a
// batch in its producer's encoding (a Kafka record batch) and decodes it
// only for a reader of messages.
type MemStore struct {
	mu   sync.Mutex
	logs map[metadata.Namespace]*memLog
}

// memLog is one partition's data. Only the open partition touches segs,
// next and consumers; the store's mutex guards open, and handing the log
// from one handle to the next goes through that mutex, which orders the
// accesses.
type memLog struct {
	epoch uint64
	// segs hold the messages in offset order, each a run of consecutive
	// offsets: native runs of Message structs (at most memChunk each) and
	// encoded batches kept as their producer sent them (AppendEncoded).
	// Runs of bounded size instead of one growing slice mean appends never
	// copy the whole log, which for millions of pointer-holding Message
	// structs costs more than the append itself, and truncation frees
	// whole runs. The first may begin below start (a prefix truncated
	// inside it); the last ends at next.
	segs []memSeg
	// start is the first readable offset, in [segs[0].base, next].
	start uint64
	next  uint64
	// bytes is the size of the segments holding [start, next): a native
	// message's encoded size (as a FileStore segment would hold it), an
	// encoded batch's own size (Encoded.Size) until its last message is
	// truncated.
	bytes int64
	// lastAT is the newest message's append time (math.MinInt64: none).
	lastAT int64
	// arena is the chunk lent encoded batches are copied into (carve):
	// its length is what is carved, its capacity the chunk. arenaEnd is
	// the offset after the newest batch carved from it; once truncation
	// passes that, nothing of the log is in the chunk and the log lets go
	// of it. arenaSize is the last chunk's size, which the next doubles.
	arena     []byte
	arenaEnd  uint64
	arenaSize int
	consumers map[string]uint64
	open      bool
}

// memSeg is one run of consecutive messages of a memLog.
type memSeg struct {
	base uint64
	// msgs are a native run's messages (the last run's grow in place, up
	// to memChunk), or an encoded batch's once a read decoded them (nil
	// until then).
	msgs []Message
	// enc is an encoded batch (nil: a native run), n its message count
	// and at the append time all of its messages share.
	enc Encoded
	n   int
	at  int64
}

// len is the number of messages the segment holds.
func (g *memSeg) len() int {
	if g.enc != nil {
		return g.n
	}
	return len(g.msgs)
}

// end is the offset after the segment's last message.
func (g *memSeg) end() uint64 { return g.base + uint64(g.len()) }

// lastAppendTime is the append time of the segment's newest message.
func (g *memSeg) lastAppendTime() int64 {
	if g.enc != nil {
		return g.at
	}
	return g.msgs[len(g.msgs)-1].AppendTime
}

// seg returns the index of the segment holding off, which must be in
// [start, next).
func (l *memLog) seg(off uint64) int {
	return sort.Search(len(l.segs), func(i int) bool { return l.segs[i].end() > off })
}

// memSize is the size m would occupy in a FileStore segment.
func memSize(m *Message) int64 {
	return recordHeaderSize + int64(len(m.Key)) + int64(headersSize(m.Headers)) + int64(len(m.Payload))
}

var (
	_ Store         = (*MemStore)(nil)
	_ Store         = (*FileStore)(nil)
	_ Keeper        = (*memPartition)(nil)
	_ EncodedKeeper = (*memPartition)(nil)
)

// memChunk is the most messages of a native run (112 KiB of Message
// structs).
const memChunk = 1024

// memFirstChunk is the capacity a log's first native run starts with (and
// one after an encoded batch); it grows by append up to memChunk. A node
// may hold tens of thousands of partitions that see a handful of
// messages each, and a full first run per partition cost 104 KiB each
// before a single message mattered (3.2 GB for 10,000 partitions on three
// replicas with one message each); a run after a full one is allocated
// full, so a busy partition pays the doublings once. It starts at one message (112 B), not four: an idle
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

// Sync does nothing: a MemStore is not durable.
func (p *memPartition) Sync() error {
	if p.closed {
		return ErrClosed
	}
	return nil
}

// TruncateBefore implements Partition, freeing whole segments.
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
	drop := 0
	for i := range l.segs {
		g := &l.segs[i]
		if g.base >= offset {
			break
		}
		end := g.end()
		if g.enc != nil {
			// Counted whole until its last message goes: exactly once,
			// since start only grows.
			if end <= offset {
				l.bytes -= g.enc.Size()
			}
		} else {
			for off := max(g.base, l.start); off < min(end, offset); off++ {
				l.bytes -= memSize(&g.msgs[off-g.base])
			}
		}
		if end <= offset {
			drop++
		}
	}
	l.start = offset
	clear(l.segs[:drop])
	l.segs = l.segs[drop:]
	if offset >= l.arenaEnd {
		// The chunk's last batch is gone: the log no longer keeps it
		// alive (a reader still holding one of its batches does).
		l.arena = nil
	}
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
	l.segs, l.arena = nil, nil
	l.start, l.next, l.bytes = offset, offset, 0
	return nil
}

// EnforceRetention implements Partition with single native messages and
// whole encoded batches as the units: it may remove every message. An
// encoded batch's age is its newest message's timestamp, as a Kafka
// broker ages its batches.
func (p *memPartition) EnforceRetention(olderThanMicros, maxBytes int64) (uint64, error) {
	if p.closed {
		return 0, ErrClosed
	}
	l := p.log
	cut, size := l.start, l.bytes
	// next returns the end of the unit starting at cut, its newest
	// timestamp and its size.
	next := func() (uint64, int64, int64) {
		g := &l.segs[l.seg(cut)]
		if g.enc != nil {
			return g.end(), g.enc.MaxTimestamp(), g.enc.Size()
		}
		m := &g.msgs[cut-g.base]
		return cut + 1, m.Timestamp, memSize(m)
	}
	if olderThanMicros != 0 {
		for cut < l.next {
			end, ts, n := next()
			if ts >= olderThanMicros {
				break
			}
			cut, size = end, size-n
		}
	}
	if maxBytes > 0 {
		for cut < l.next && size > maxBytes {
			end, _, n := next()
			cut, size = end, size-n
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
		g := l.run()
		g.msgs = append(g.msgs, out)
		l.bytes += memSize(in)
		l.next++
	}
	return first, nil
}

// run returns the native run the next appended message goes to: the
// last segment while it is a native run with room, else a new one. A new
// run after a full one is allocated full (a busy partition pays no
// doublings); the log's first run, and one after an encoded batch, start
// at memFirstChunk and grow by append, so a partition holding a handful
// of messages holds a handful of slots.
func (l *memLog) run() *memSeg {
	n := len(l.segs)
	size := memFirstChunk
	if n > 0 {
		g := &l.segs[n-1]
		if g.enc == nil {
			if len(g.msgs) < memChunk {
				return g
			}
			size = memChunk
		}
	}
	l.segs = append(l.segs, memSeg{base: l.next, msgs: make([]Message, 0, size)})
	return &l.segs[n]
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
// returned slice is a window on the segment holding from, capped at its
// length so an append to it cannot reach the segment, and it ends at that
// segment's end (at most memChunk messages of a native run, or the rest
// of an encoded batch, per read). A stored message is written once, by
// the Append that stores it or the read that first decodes its encoded
// batch, before any reader can see it, and never again: later appends
// fill slots past it or new segments, and truncation only drops whole
// segments from the log, so a reader's window stays intact (and its
// segment alive) for as long as the reader holds it. The messages must be
// treated as read-only (Partition.Read).
//
// An encoded batch is decoded by the first read that reaches it, and the
// decoded messages are kept with it for later reads: a reader of
// messages pays for the decoding once, a reader of encoded batches
// (ReadEncoded) never. A batch that fails to decode is ErrCorrupt.
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
	g := &l.segs[l.seg(from)]
	if g.enc != nil && g.msgs == nil {
		msgs, err := decodeEncoded(g.enc, g.base, g.at)
		if err != nil {
			return nil, err
		}
		g.msgs = msgs
	}
	i := int(from - g.base)
	end := i + int(min(uint64(max), uint64(len(g.msgs)-i)))
	return g.msgs[i:end:end], nil
}

// decodeEncoded decodes b, stored from base with append time at: its
// messages with their offsets and append time set, and every slice
// capped (as Append's copies are).
func decodeEncoded(b Encoded, base uint64, at int64) ([]Message, error) {
	msgs, err := DecodeEncoded(b)
	if err != nil {
		return nil, fmt.Errorf("at offset %d: %w", base, err)
	}
	for i := range msgs {
		m := &msgs[i]
		m.Offset, m.AppendTime = base+uint64(i), at
		m.Key, m.Payload, m.Headers = capped(m.Key), capped(m.Payload), capped(m.Headers)
		for j := range m.Headers {
			m.Headers[j].Value = capped(m.Headers[j].Value)
		}
	}
	return msgs[:len(msgs):len(msgs)], nil
}

// AppendEncoded implements EncodedKeeper: b is kept as it is, one
// segment however many messages it holds, with one append time for all
// of them (at, kept non-decreasing along the log as Append keeps its
// messages'; 0 is b's newest timestamp). A Lent batch's bytes are copied
// into the partition's chunks first (carve).
func (p *memPartition) AppendEncoded(b Encoded, at int64) (uint64, error) {
	if p.closed {
		return 0, ErrClosed
	}
	n := b.Len()
	if n <= 0 {
		return 0, ErrEmptyBatch
	}
	l := p.log
	if lb, ok := b.(Lent); ok {
		lb.Own(l.carve(lb.Bytes()))
		l.arenaEnd = l.next + uint64(n)
	}
	if at == 0 {
		at = b.MaxTimestamp()
	}
	l.lastAT = max(at, l.lastAT)
	first := l.next
	l.segs = append(l.segs, memSeg{base: first, enc: b, n: n, at: l.lastAT})
	l.bytes += b.Size()
	l.next += uint64(n)
	return first, nil
}

// Lent batches are copied into chunks of their partition's own, carved
// in order and let go of in order: a chunk lives while any batch carved
// from it is kept (or held by a reader), and truncation drops batches
// oldest first, so retention frees a chunk once its newest batch goes.
// Against an allocation per batch this saves the allocation and the
// clearing of its rounded-up tail, and lets a busy partition's chunks be
// backed by huge pages (newChunk): memory the process never touched
// costs a page fault per page at its first write, which on a node
// keeping everything it is sent was most of what copying a batch cost.
//
// A chunk's unused tail is not counted in the partition's Size, which
// counts the batches it holds (retention by bytes counts data, as a
// Kafka broker counts its segments' bytes): it is at most the current
// chunk's, up to memArenaMax, untouched until carved (but for a huge
// page, resident whole from its first write, and a chunk the runtime
// clears because it reuses the memory), plus what each earlier chunk
// had left when the next batch did not fit, less than memArenaOwn each
// (a larger batch gets memory of its own). A chunk of 4 MiB or more is
// cut from an allocation 2 MiB larger, at a huge-page boundary
// (newChunk): the 2 MiB it leaves around the chunk are never written, so
// they are address space the runtime counts in its heap, not memory.
const (
	// memArenaMax is the largest chunk. Chunks start at the first
	// batch's size and double, so a partition sent a few small batches
	// holds at most about as much again as it keeps, and only a busy
	// one holds chunks this large.
	memArenaMax = 8 << 20
	// memArenaOwn is the smallest batch copied into memory of its own
	// rather than a chunk.
	memArenaOwn = memArenaMax / 8
)

// carve returns a copy of b in the log's current chunk, capped so an
// append to it cannot reach the next batch, starting a chunk when b does
// not fit.
func (l *memLog) carve(b []byte) []byte {
	n := len(b)
	if n >= memArenaOwn {
		return slices.Clip(slices.Clone(b))
	}
	if cap(l.arena)-len(l.arena) < n {
		l.arenaSize = max(n, min(2*l.arenaSize, memArenaMax))
		l.arena = newChunk(l.arenaSize)
	}
	start := len(l.arena)
	l.arena = append(l.arena, b...)
	return l.arena[start:len(l.arena):len(l.arena)]
}

// ReadEncoded implements EncodedKeeper.
func (p *memPartition) ReadEncoded(from uint64) (Encoded, uint64, error) {
	if p.closed {
		return nil, 0, ErrClosed
	}
	l := p.log
	if from < l.start {
		return nil, 0, fmt.Errorf("%w: offset %d below log start %d", ErrOffsetOutOfRange, from, l.start)
	}
	if from >= l.next {
		return nil, 0, nil
	}
	g := &l.segs[l.seg(from)]
	if g.enc == nil {
		return nil, 0, nil
	}
	return g.enc, g.base, nil
}

// OffsetForTime implements Partition by binary search, over the segments
// and then within one: appends keep append times non-decreasing.
func (p *memPartition) OffsetForTime(t int64) (uint64, error) {
	if p.closed {
		return 0, ErrClosed
	}
	l := p.log
	i := sort.Search(len(l.segs), func(i int) bool { return l.segs[i].lastAppendTime() >= t })
	if i == len(l.segs) {
		return l.next, nil
	}
	g := &l.segs[i]
	off := g.base
	if g.enc == nil {
		off += uint64(sort.Search(len(g.msgs), func(j int) bool { return g.msgs[j].AppendTime >= t }))
	}
	return max(off, l.start), nil
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
