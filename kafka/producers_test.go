package kafka

import "testing"

// TestProducerSequenceStaleListener: a listener whose state for a
// producer is stale — the producer's later batches for the partition went
// through another node's listener while that node led — takes the next
// sequence it sees as the start instead of refusing it as out of order.
// Refusing it made franz-go drop its producer id and resend its
// unacknowledged batches under a new one, so batches appended by a killed
// or cut-off leader, their answers lost, were appended twice (the
// nemesis test, seed 7: 114 and 89 values twice). A gap left by a batch
// that failed at this listener is still out of order, and on a single
// node (TestIdempotentSequences) every gap is.
func TestProducerSequenceStaleListener(t *testing.T) {
	p := newProducers(true)
	key := producerKey{pid: 7, part: 2}
	for seq := int32(0); seq < 10; seq += 5 {
		v, b := p.check(key, 0, seq, 5)
		if v != seqAppend {
			t.Fatalf("seq %d: verdict %d", seq, v)
		}
		p.finish(key, b, int64(seq), nil)
	}
	// Sequences 10–99 went through another listener.
	v, b := p.check(key, 0, 100, 5)
	if v != seqAppend {
		t.Fatalf("a sequence past a stale view: verdict %d, want append", v)
	}
	p.finish(key, b, 100, nil)
	if v, _ := p.check(key, 0, 105, 5); v != seqAppend {
		t.Fatalf("the next sequence after the restart: verdict %d", v)
	}
	// The same under a new epoch that began at another listener.
	if v, _ := p.check(key, 1, 40, 5); v != seqAppend {
		t.Fatalf("a new epoch's sequence 40: verdict %d, want append", v)
	}

	// A batch that fails here rewinds the sequence: the batch after it,
	// arriving before the failed one's retry, is out of order.
	q := newProducers(true)
	_, b0 := q.check(key, 0, 0, 5)
	_, b1 := q.check(key, 0, 5, 5)
	q.finish(key, b0, 0, errTransactional) // any error
	q.finish(key, b1, 0, errTransactional)
	if v, _ := q.check(key, 0, 10, 5); v != seqOutOfOrder {
		t.Fatalf("a sequence past a failed batch: verdict %d, want out of order", v)
	}
	if v, _ := q.check(key, 0, 0, 5); v != seqAppend {
		t.Fatalf("the failed batch's retry: verdict %d", v)
	}
	// A retry of a batch still remembered is a duplicate.
	if v, _ := q.check(key, 0, 0, 5); v != seqDuplicate {
		t.Fatalf("the same batch again: verdict %d, want duplicate", v)
	}
}
