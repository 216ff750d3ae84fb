package kafka

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/parkway-io/parkway"
)

// maxFetchMessages bounds the messages one partition contributes to a
// fetch (the byte budgets bound it first, usually).
const maxFetchMessages = 10_000

// fetchPart is one partition of a fetch.
type fetchPart struct {
	handle   parkway.Topic
	part     int32
	offset   int64
	maxBytes int
	epoch    int32 // the partition's leader epoch, stamped on its batches
	resp     *kmsg.FetchResponseTopicPartition
	skip     bool // answered with an error already
}

// fetch serves a Fetch: one pass that polls every partition without
// waiting; if it found nothing (and MinBytes asks for something), waiting
// polls on every partition for MaxWaitMs, answered as soon as one has
// records. A waiting
// poll is registered at the partition's shard and woken by the append
// (parkway's waiting Poll), so an idle consumer costs no CPU. A fetch of
// a session (fetchsession.go) is served as a full fetch of the session's
// partitions, its answer cut to the partitions with news.
func (s *Server) fetch(ctx context.Context, r *kmsg.FetchRequest) kmsg.Response {
	byID := r.Version >= 13
	fail := func(code int16) kmsg.Response {
		resp := r.ResponseKind().(*kmsg.FetchResponse)
		resp.ErrorCode = s.code(kmsg.Fetch, code)
		return resp
	}
	now := time.Now()
	var (
		sess *fetchSession
		all  bool
	)
	switch {
	case r.SessionEpoch == -1: // no session, or the last fetch of one
		if r.SessionID != 0 {
			s.sessions.close(r.SessionID)
		}
		return s.fetchFull(ctx, r)
	case r.SessionEpoch == 0: // a new session (replacing the one named, if any)
		if r.SessionID != 0 {
			s.sessions.close(r.SessionID)
		}
		if sess = s.sessions.open(now); sess == nil {
			return s.fetchFull(ctx, r) // none free: no session (id 0)
		}
		all = true
	case r.SessionID == 0:
		return fail(kerr.InvalidFetchSessionEpoch.Code)
	default:
		var code int16
		if sess, code = s.sessions.take(r.SessionID, r.SessionEpoch, now); code != 0 {
			return fail(code)
		}
	}
	if !sess.update(r, byID) || !s.sessions.account(sess) {
		s.sessions.release(sess, false)
		if all {
			return s.fetchFull(ctx, r) // too many partitions: no session
		}
		return fail(kerr.FetchSessionIDNotFound.Code) // the client starts over, without one
	}
	resp := s.fetchFull(ctx, sess.request(r)).(*kmsg.FetchResponse)
	if resp.ErrorCode != 0 {
		s.sessions.release(sess, false)
		return resp
	}
	sess.incremental(resp, byID, all)
	resp.SessionID = sess.id
	s.sessions.release(sess, true)
	return resp
}

// fetchFull serves a fetch of every partition it names.
func (s *Server) fetchFull(ctx context.Context, r *kmsg.FetchRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.FetchResponse)
	wait := time.Duration(max(r.MaxWaitMillis, 0)) * time.Millisecond
	wait = min(wait, parkway.MaxPollWait, s.cfg.RequestTimeout)
	ctx, cancel := context.WithTimeout(ctx, wait+s.cfg.RequestTimeout)
	defer cancel()

	byID := r.Version >= 13
	var parts []*fetchPart
	resp.Topics = make([]kmsg.FetchResponseTopic, len(r.Topics))
	for ti := range r.Topics {
		rt := &r.Topics[ti]
		st := &resp.Topics[ti]
		*st = kmsg.NewFetchResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		var (
			t    parkway.Topic
			tErr error
		)
		if byID {
			t, tErr = s.topics.lookupID(ctx, rt.TopicID)
		} else {
			t, tErr = s.topics.lookup(ctx, rt.Topic)
		}
		if tErr == nil && !s.allowed(ctx, OpRead, ResourceTopic, t.Name) {
			tErr = errTopicDenied
		}
		st.Partitions = make([]kmsg.FetchResponseTopicPartition, len(rt.Partitions))
		for pi := range rt.Partitions {
			rp := &rt.Partitions[pi]
			sp := &st.Partitions[pi]
			*sp = kmsg.NewFetchResponseTopicPartition()
			sp.Partition, sp.HighWatermark, sp.PreferredReadReplica = rp.Partition, -1, -1
			// Empty, not null: librdkafka refuses a null record set
			// ("invalid MessageSetSize -1").
			sp.RecordBatches = []byte{}
			fp := &fetchPart{handle: t, part: rp.Partition, offset: rp.FetchOffset, maxBytes: int(rp.PartitionMaxBytes), resp: sp}
			switch {
			case tErr != nil:
				sp.ErrorCode = s.fetchErrorCode(tErr, byID)
				fp.skip = true
			case rp.Partition < 0:
				sp.ErrorCode = s.code(kmsg.Fetch, kerr.UnknownTopicOrPartition.Code)
				fp.skip = true
			case rp.FetchOffset < 0:
				sp.ErrorCode = s.code(kmsg.Fetch, kerr.OffsetOutOfRange.Code)
				fp.skip = true
			default:
				// A consumer is sent to the leader as a producer is
				// (see leaderElsewhere), from Fetch v12 with its id and
				// from v16 its address (KIP-951).
				lead, epoch, elsewhere := s.leaderElsewhere(ctx, t, rp.Partition)
				fp.epoch = max(epoch, 0)
				if code := epochCode(rp.CurrentLeaderEpoch, epoch); code != 0 && !elsewhere {
					sp.ErrorCode = s.code(kmsg.Fetch, code)
					fp.skip = true
				} else if elsewhere {
					sp.ErrorCode = s.code(kmsg.Fetch, kerr.NotLeaderForPartition.Code)
					sp.CurrentLeader.LeaderID, sp.CurrentLeader.LeaderEpoch = lead, epoch
					if r.Version >= 16 && !slices.ContainsFunc(resp.Brokers, func(b kmsg.FetchResponseBroker) bool { return b.NodeID == lead }) {
						if b, ok := s.broker(lead); ok {
							rb := kmsg.NewFetchResponseBroker()
							rb.NodeID, rb.Host, rb.Port = b.id, b.host, b.port
							resp.Brokers = append(resp.Brokers, rb)
						}
					}
					fp.skip = true
				}
			}
			parts = append(parts, fp)
		}
	}

	budget := int(r.MaxBytes)
	if r.Version < 3 || budget <= 0 {
		budget = s.cfg.MaxRequestSize
	}
	budget = min(budget, s.cfg.MaxRequestSize)
	got, failed := 0, false
	for _, fp := range parts {
		if fp.skip || budget-got <= 0 && got > 0 {
			continue
		}
		n, err := s.fetchPartition(ctx, fp, min(max(fp.maxBytes, 1), max(budget-got, 1)), 0, byID)
		got += n
		failed = failed || err != nil
	}
	// Any record answers the fetch: what the first pass put in the
	// response is never polled again (that would send it twice), and a
	// MinBytes above one record is not waited for (clients default to 1).
	if got > 0 || r.MinBytes <= 0 || failed || wait <= 0 || len(parts) == 0 {
		return resp
	}

	// Nothing yet: wait on every partition at once; the first that has
	// records ends the others' waits.
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	for _, fp := range parts {
		if fp.skip || fp.resp.ErrorCode != 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if n, err := s.fetchPartition(wctx, fp, max(fp.maxBytes, 1), wait, byID); n > 0 || err != nil {
				stop()
			}
		}()
	}
	wg.Wait()
	return resp
}

// fetchPartition polls one partition into its response entry (records
// appended to what a previous pass put there) and returns the bytes it
// added. A poll ended by the other partitions' success (wctx cancelled)
// leaves the entry as it was.
func (s *Server) fetchPartition(ctx context.Context, fp *fetchPart, maxBytes int, wait time.Duration, byID bool) (int, error) {
	opts := []parkway.PollOption{parkway.MaxBytes(maxBytes)}
	if wait > 0 {
		opts = append(opts, parkway.WaitFor(wait))
	}
	b, err := s.node.PollEncoded(ctx, fp.handle, uint32(fp.part), parkway.AtOffset(uint64(fp.offset)), maxFetchMessages, opts...)
	if err != nil {
		if wait > 0 && ctx.Err() != nil {
			return 0, nil // another partition answered the fetch
		}
		if errors.Is(err, parkway.ErrTopicNotFound) {
			s.topics.forget(fp.handle, err)
		}
		fp.resp.ErrorCode = s.fetchErrorCode(err, byID)
		return 0, err
	}
	fp.resp.HighWatermark, fp.resp.LastStableOffset = int64(b.End), int64(b.End)
	if uint64(fp.offset) > b.End {
		fp.resp.ErrorCode = s.code(kmsg.Fetch, kerr.OffsetOutOfRange.Code)
		return 0, nil
	}
	if len(b.Messages) == 0 && b.Encoded == nil {
		return 0, nil
	}
	before := len(fp.resp.RecordBatches)
	dst := fp.resp.RecordBatches
	if before == 0 {
		dst = s.bufs.get()
	}
	var used, last, polled int
	if fp.resp.RecordBatches, used, last, polled, err = appendPolled(dst, &b, fp.epoch); err != nil {
		fp.resp.RecordBatches = dst
		fp.resp.ErrorCode = s.code(kmsg.Fetch, kerr.CorruptMessage.Code)
		return 0, err
	}
	// A poll may stop below the partition's end with room left in the
	// budget (an in-memory partition serves one up to the end of a run
	// of at most 1,024 messages or of one batch kept as its client sent
	// it, its stored messages without a copy): poll on,
	// without waiting, while the partition has more and the budget room,
	// up to maxFetchMessages in all. The budget counts as the poll's does
	// (keys, payloads, headers). Only the fetch's first record may pass
	// it, so a later poll's first message that does not fit is left for
	// the next fetch. A poll the budget cut short left less room than its
	// last message took (the cut stops before the message that would not
	// fit): taking that as the size of the next, the fetch does not ask
	// again for what will not fit. On disk a poll reads up to its count
	// from the files, so a fetch asks no more than it did in one poll. A
	// kept batch counts its bytes as kept, and is handed out whole or
	// left for the next fetch.
	for b.Next < b.End && polled < maxFetchMessages {
		left := maxBytes - used
		if left <= 0 || left < last {
			break
		}
		if b, err = s.node.PollEncoded(ctx, fp.handle, uint32(fp.part), parkway.AtOffset(b.Next), maxFetchMessages-polled, parkway.MaxBytes(left)); err != nil || firstBytes(&b) == 0 || firstBytes(&b) > left {
			break // what this poll met, the next fetch meets
		}
		more, n, l, p, err := appendPolled(fp.resp.RecordBatches, &b, fp.epoch)
		if err != nil {
			break // the next fetch meets it first, and answers it
		}
		fp.resp.RecordBatches, used, last, polled = more, used+n, l, polled+p
		fp.resp.HighWatermark, fp.resp.LastStableOffset = int64(b.End), int64(b.End)
	}
	return len(fp.resp.RecordBatches) - before, nil
}

// appendPolled appends a poll's records to dst: a batch kept as its
// client sent it as it is (appendKept), messages as one batch. It
// returns the bytes they count against the fetch's budget (bytesOf each
// message; a kept batch's size), what its last unit counted (a message,
// or the kept batch) and how many records it holds.
func appendPolled(dst []byte, b *parkway.Batch, epoch int32) (out []byte, used, last, records int, err error) {
	if b.Encoded != nil {
		if k, ok := b.Encoded.(*keptBatch); ok {
			return appendKept(dst, k, b.EncodedBase, epoch), len(k.raw), len(k.raw), k.n, nil
		}
		// Another producer's encoding: its messages, encoded afresh.
		msgs, err := b.Encoded.Decode()
		if err != nil {
			return dst, 0, 0, 0, err
		}
		for i := range msgs {
			msgs[i].Offset = b.EncodedBase + uint64(i)
		}
		b.Messages, b.Encoded = msgs, nil
	}
	for i := range b.Messages {
		last = bytesOf(&b.Messages[i])
		used += last
	}
	return appendBatch(dst, b.Messages, epoch), used, last, len(b.Messages), nil
}

// firstBytes is what the first unit of a poll's answer counts against a
// fetch's budget (0: none).
func firstBytes(b *parkway.Batch) int {
	switch {
	case b.Encoded != nil:
		if k, ok := b.Encoded.(*keptBatch); ok {
			return len(k.raw)
		}
		_, total := b.Encoded.MessageSizes()
		return max(total, 1)
	case len(b.Messages) > 0:
		return max(bytesOf(&b.Messages[0]), 1)
	}
	return 0
}

// bytesOf is what a message's key, payload and headers hold: at most
// what a poll's byte budget counts for it.
func bytesOf(m *parkway.Message) int {
	n := len(m.Key) + len(m.Payload)
	for _, h := range m.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

func (s *Server) fetchErrorCode(err error, byID bool) int16 {
	if byID && errors.Is(err, parkway.ErrTopicNotFound) {
		return s.code(kmsg.Fetch, kerr.UnknownTopicID.Code)
	}
	return s.topicErrorCode(kmsg.Fetch, err)
}

// minPooled is the smallest buffer bufPool keeps: below it, allocating
// afresh costs little.
const minPooled = 64 << 10

// bufPool recycles the megabyte buffers a fetch fills: each partition's
// record batches, and the frame the response is encoded into. A fresh
// buffer is zeroed and, on a large heap, faulted in page by page before
// it is written: catching up a topic, making them took more of the
// broker's CPU than encoding the records (44 % of the samples, in
// memclr). A sync.Pool gives them back to the collector when the
// fetches stop.
type bufPool struct{ p sync.Pool }

// get returns an empty buffer, with the capacity of a recycled one if
// there is one.
func (b *bufPool) get() []byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return (*v)[:0]
	}
	return nil
}

// put recycles buf, which nothing may use afterwards.
func (b *bufPool) put(buf []byte) {
	if cap(buf) < minPooled {
		return
	}
	buf = buf[:0]
	b.p.Put(&buf)
}

// recycleFetch recycles resp's record batches once resp is encoded,
// and leaves none in it.
func (b *bufPool) recycleFetch(resp *kmsg.FetchResponse) {
	for i := range resp.Topics {
		for j := range resp.Topics[i].Partitions {
			p := &resp.Topics[i].Partitions[j]
			b.put(p.RecordBatches)
			p.RecordBatches = nil
		}
	}
}
