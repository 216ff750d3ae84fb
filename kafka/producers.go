package kafka

import (
	"math"
	"math/rand/v2"
	"sync"

	"github.com/parkway-io/parkway"
)

// An idempotent producer's batches are deduplicated twice. Each batch
// carries its identity — (producer id, epoch, first sequence) — into the
// partition's replicated deduplication window (Node.ProduceAsyncIdempotent), so
// a retry of a batch whose outcome was unknown (its leader died) applies
// once, through whichever node's listener it arrives. And each listener
// checks sequences per (producer id, epoch, partition) as Kafka does: the
// last maxRecent batches are remembered, a retry of one of them is
// answered with its original offset without being sent again, an older
// epoch is INVALID_PRODUCER_EPOCH, and a gap is
// OUT_OF_ORDER_SEQUENCE_NUMBER. In a cluster only a gap left by a batch
// that failed here is (the client resends from the failed one): any
// other unexpected sequence restarts the state from it, the batches in
// between having gone through another node's listener.
// This second state is the listener's, in memory: a listener that never
// saw a producer (another node's client, a restart) takes its next
// sequence as given, and leaves duplicates to the partition's window. On
// a single node a produce's outcome is never unknown, so the listener's
// window is all there is.
//
// Why two: the partition's window maps exact (producer, sequence) pairs
// it applied to their first offsets. It keeps no producer's next
// sequence or epoch, so it cannot tell a gap (OUT_OF_ORDER_SEQUENCE_NUMBER)
// or a fenced epoch (INVALID_PRODUCER_EPOCH) from a new batch, which
// Kafka clients need; and a single node does not use it (ProducerSeq is
// applied only in a cluster), while a Kafka client there still retries a
// batch after a dropped connection. Making it one mechanism means moving
// this state into the partition as replicated per-producer state (as
// Kafka's own partitions keep it), which is a change of the partition's
// log and snapshot format.

const (
	maxRecent       = 5       // Kafka's max.in.flight for idempotent producers
	maxProducerKeys = 100_000 // (producer, partition) states kept; idle ones are dropped past it
)

type producerKey struct {
	pid   int64
	topic parkway.Topic
	part  int32
}

// seqBatch is a batch appended, or being appended, under a sequence.
type seqBatch struct {
	first, last int32
	offset      int64 // the batch's first offset, once done
	done        chan struct{}
	err         error // the outcome, once done
}

type seqState struct {
	epoch  int16
	next   int32       // the sequence expected next, counting batches in flight
	recent []*seqBatch // oldest first, at most maxRecent
	// rewound: a batch failed here and next went back to it, so the
	// producer must resend from next (a later sequence is out of
	// order). Otherwise a sequence other than next means this
	// listener's view is stale, not that one is missing.
	rewound bool
}

type producers struct {
	// cluster: the listener is one of a cluster's (Config.Brokers), so
	// it sees only the batches sent while its node led a partition.
	cluster bool
	mu      sync.Mutex
	states  map[producerKey]*seqState
}

func newProducers(cluster bool) *producers {
	return &producers{cluster: cluster, states: map[producerKey]*seqState{}}
}

// newID returns a producer id: random, so listeners of different nodes
// (and restarts) do not hand out the same one.
func (p *producers) newID() int64 { return rand.Int64N(math.MaxInt64-1) + 1 }

// seqVerdict is what check decided for a batch.
type seqVerdict int

const (
	seqAppend     seqVerdict = iota // new: append it, then call finish
	seqDuplicate                    // a retry: answer with dup's outcome
	seqOutOfOrder                   // OUT_OF_ORDER_SEQUENCE_NUMBER
	seqStaleEpoch                   // INVALID_PRODUCER_EPOCH
)

// check decides what to do with a batch of count records from producer
// (pid, epoch) starting at sequence first. On seqAppend the returned
// batch is recorded as in flight; finish must be called with its outcome.
// On seqDuplicate the returned batch is the original: wait on its done.
func (p *producers) check(key producerKey, epoch int16, first, count int32) (seqVerdict, *seqBatch) {
	last := int32((int64(first) + int64(count) - 1) % (math.MaxInt32 + 1))
	p.mu.Lock()
	defer p.mu.Unlock()
	st, ok := p.states[key]
	switch {
	case !ok:
		// No state: a new producer, or one this listener forgot (a
		// restart, eviction). Accept its sequence as the start.
		p.evict()
		st = &seqState{epoch: epoch}
		p.states[key] = st
	case epoch < st.epoch:
		return seqStaleEpoch, nil
	case epoch > st.epoch:
		if first != 0 && (st.rewound || !p.cluster) {
			return seqOutOfOrder, nil
		}
		*st = seqState{epoch: epoch}
	case first != st.next:
		for _, b := range st.recent {
			if b.first == first && b.last == last {
				return seqDuplicate, b
			}
		}
		if st.rewound || !p.cluster {
			return seqOutOfOrder, nil
		}
		// In a cluster a producer's batches for a partition go to
		// whichever node leads it: those it sent while another node
		// led went through that node's listener, and this listener's
		// state is stale. Refusing the batch as out of order would make
		// the client drop its producer id and resend its unacknowledged
		// batches under a new one, so that a batch appended whose
		// answer was lost (a leader killed or cut off) is appended
		// again: the partition's replicated window dedupes by the
		// batch's identity, which the new id changes. Take the
		// sequence as the start, as for a producer never seen; a
		// retry of a batch appended elsewhere keeps its identity and
		// the partition's window answers it with its first offset.
		*st = seqState{epoch: epoch}
	default:
		st.rewound = false
	}
	b := &seqBatch{first: first, last: last, done: make(chan struct{})}
	st.recent = append(st.recent, b)
	if len(st.recent) > maxRecent {
		st.recent = st.recent[1:]
	}
	st.next = int32((int64(last) + 1) % (math.MaxInt32 + 1))
	return seqAppend, b
}

// finish records a batch's outcome. A failed batch is forgotten and the
// expected sequence goes back to it, unless a later batch was appended
// meanwhile (then the client's retry of it is out of order, as in Kafka
// when a batch in the middle of a pipeline fails).
func (p *producers) finish(key producerKey, b *seqBatch, offset int64, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b.offset, b.err = offset, err
	close(b.done)
	if err == nil {
		return
	}
	st, ok := p.states[key]
	if !ok {
		return
	}
	i := -1
	for j, r := range st.recent {
		if r == b {
			i = j
		}
	}
	if i < 0 {
		return
	}
	for _, r := range st.recent[i+1:] {
		select {
		case <-r.done:
			if r.err == nil {
				st.recent = append(st.recent[:i], st.recent[i+1:]...)
				return
			}
		default:
		}
	}
	st.next = b.first
	st.recent = st.recent[:i]
	st.rewound = true
}

// evict drops idle states once there are maxProducerKeys (called with
// mu held): those whose batches are all done.
func (p *producers) evict() {
	if len(p.states) < maxProducerKeys {
		return
	}
	dropped := 0
	for k, st := range p.states {
		idle := true
		for _, b := range st.recent {
			select {
			case <-b.done:
			default:
				idle = false
			}
		}
		if idle {
			delete(p.states, k)
			if dropped++; dropped >= maxProducerKeys/10 {
				return
			}
		}
	}
}
