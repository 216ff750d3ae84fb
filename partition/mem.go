package partition

import (
	"fmt"
	"sync"

	"github.com/parkway-io/parkway/metadata"
)

// MemStore is a Store that keeps partitions in memory: for tests and
// embedded caches. Data survives Close of a Partition (a later Build at the
// same epoch reopens it) but not the process.
//
// MemStore is safe for concurrent Build and Remove; the Partitions it
// returns are, like every Partition, for one goroutine at a time.
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
	// partial): message i is chunks[i/memChunk][i%memChunk]. Fixed-size
	// chunks instead of one growing slice mean appends never copy the
	// whole log, which for millions of pointer-holding Message structs
	// costs more than the append itself.
	chunks    [][]Message
	next      uint64
	consumers map[string]uint64
	open      bool
}

// memChunk is the number of messages per chunk (80 KiB of Message structs).
const memChunk = 1024

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
		l = &memLog{epoch: epoch, consumers: make(map[string]uint64)}
		s.logs[ns] = l
	}
	l.open = true
	return &memPartition{store: s, ns: ns, log: l}, nil
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

// Append copies the batch into three allocations however many messages it
// holds: one arena for all payloads, one for all header values, and one
// for all Header structs. Keys are strings and need no copy. Every slice
// handed out is capped so appending to it cannot spill into a neighbour.
func (p *memPartition) Append(msgs []Message) (uint64, error) {
	if p.closed {
		return 0, ErrClosed
	}
	if len(msgs) == 0 {
		return 0, ErrEmptyBatch
	}
	var payloadBytes, headerCount, valueBytes int
	for i := range msgs {
		payloadBytes += len(msgs[i].Payload)
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
		out := Message{Offset: first + uint64(i), ID: in.ID, Timestamp: in.Timestamp}
		if len(in.Payload) > 0 {
			start := len(payloads)
			payloads = append(payloads, in.Payload...)
			out.Payload = payloads[start:len(payloads):len(payloads)]
		}
		if n := len(in.Headers); n > 0 {
			hs := headers[:n:n]
			headers = headers[n:]
			for j := range in.Headers {
				hs[j].Key = in.Headers[j].Key
				if v := in.Headers[j].Value; len(v) > 0 {
					start := len(values)
					values = append(values, v...)
					hs[j].Value = values[start:len(values):len(values)]
				}
			}
			out.Headers = hs
		}
		if l.next%memChunk == 0 {
			l.chunks = append(l.chunks, make([]Message, 0, memChunk))
		}
		last := &l.chunks[len(l.chunks)-1]
		*last = append(*last, out)
		l.next++
	}
	return first, nil
}

func (p *memPartition) Read(from uint64, max int) ([]Message, error) {
	if p.closed {
		return nil, ErrClosed
	}
	next := p.log.next
	if max <= 0 || from >= next {
		return nil, nil
	}
	out := make([]Message, min(uint64(max), next-from))
	for k := 0; k < len(out); {
		off := from + uint64(k)
		k += copy(out[k:], p.log.chunks[off/memChunk][off%memChunk:])
	}
	return out, nil
}

func (p *memPartition) StoreConsumerOffset(consumer string, offset uint64) error {
	if p.closed {
		return ErrClosed
	}
	if next := p.log.next; offset > next {
		return fmt.Errorf("%w: consumer offset %d past next offset %d", ErrOffsetOutOfRange, offset, next)
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
