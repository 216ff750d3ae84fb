package metadata

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
)

// Carried is a new partition's first messages, logged with the command
// that creates the partition (Durable.ApplyCarrying): one fsync of the
// metadata log makes the command and the messages durable together, so
// the barrier's own case — a topic created and produced to at once —
// costs one fsync on the way to its acknowledgement under fsync on every
// write, not the metadata log's and then the partition journal's (DESIGN
// behaviour 32).
//
// The log holds a carried batch until its partition has it durably: the
// owner of the partition says so with Durable.Settle once an fsync of its
// own covers the messages. Until then a snapshot does not drop it (it is
// logged again at the head of the log that follows the snapshot), and
// after a restart Durable.Carried lists it, so the node appends it to its
// partition again if the partition is empty (the messages were the
// partition's first: a partition that holds anything holds them, since
// what survives of a log is a prefix of it).
type Carried struct {
	// NS and Epoch name the partition's incarnation: Epoch is the
	// revision its creating command committed (its CreatedRevision).
	NS    Namespace
	Epoch uint64
	// Records are the messages in the caller's encoding; the metadata
	// package stores them as bytes and never reads them.
	Records []byte
}

// MaxCarriedBytes bounds the records a command carries: a carried batch
// stays in memory until it is settled and is logged again by every
// snapshot until then, so ApplyCarrying refuses a larger first batch (it
// logs the command alone, and the batch takes the ordinary path: the
// partition's own write after the commit).
const MaxCarriedBytes = 64 << 10

// Log record encoding
//
// A record of a Durable's log is either a command, exactly as
// EncodeCommand writes it (its first byte is its type, 1 to
// cmdReseedReplica), or a carried record:
//
//	type     1 byte, recCarried (no command type uses it)
//	version  1 byte (1)
//	command  uvarint length, then EncodeCommand's bytes; length 0: no
//	         command (a carried batch logged again after a snapshot)
//	NS       uvarint
//	Epoch    uvarint
//	Records  uvarint length, then the bytes
//
// Decoding is strict and canonical, as DecodeCommand's: varints are
// minimal, the command decodes, and nothing follows Records, so
// encodeLogRecord(decodeLogRecord(b)) == b for every b that decodes.
const (
	recCarried   byte = 0xCA
	recCarriedV1 byte = 1
)

// encodeLogRecord encodes a log record: cmd alone when c is nil, otherwise
// a carried record holding cmd (none when nil) and c.
func encodeLogRecord(cmd Command, c *Carried) ([]byte, error) {
	if c == nil {
		return EncodeCommand(cmd)
	}
	var b []byte
	if cmd != nil {
		var err error
		if b, err = EncodeCommand(cmd); err != nil {
			return nil, err
		}
	}
	return appendCarriedRecord(nil, b, *c), nil
}

// appendCarriedRecord appends the carried record of an encoded command
// (none when empty) and c to dst.
func appendCarriedRecord(dst, cmd []byte, c Carried) []byte {
	dst = append(dst, recCarried, recCarriedV1)
	dst = binary.AppendUvarint(dst, uint64(len(cmd)))
	dst = append(dst, cmd...)
	dst = binary.AppendUvarint(dst, uint64(c.NS))
	dst = binary.AppendUvarint(dst, c.Epoch)
	dst = binary.AppendUvarint(dst, uint64(len(c.Records)))
	return append(dst, c.Records...)
}

// decodeLogRecord decodes a log record: its command (nil for a carried
// record without one) and its carried batch (nil for a plain command).
// Anything else is rejected with a *DecodeError; it never panics. The
// batch's Records are a copy: they outlive b.
func decodeLogRecord(b []byte) (Command, *Carried, error) {
	if len(b) == 0 || b[0] != recCarried {
		cmd, err := DecodeCommand(b)
		return cmd, nil, err
	}
	d := decoder{b: b, what: "log record"}
	d.byte()
	if v := d.byte(); d.err == nil && v != recCarriedV1 {
		d.failAt(1, "unknown version "+strconv.Itoa(int(v)))
	}
	var cmd Command
	at := d.off
	if n := d.uvarint(); d.err == nil && n > 0 {
		if n > uint64(len(b)-d.off) {
			d.failAt(at, fmt.Sprintf("command of %d bytes overruns the input", n))
			return nil, nil, d.err
		}
		start := d.off
		c, err := DecodeCommand(b[start : start+int(n)])
		if err != nil {
			// Offsets name the record's bytes, not the command's.
			var de *DecodeError
			if errors.As(err, &de) {
				err = &DecodeError{What: de.What, Offset: start + de.Offset, Reason: de.Reason}
			}
			return nil, nil, err
		}
		cmd = c
		d.off += int(n)
	}
	c := Carried{NS: Namespace(d.uvarint()), Epoch: d.uvarint()}
	at = d.off
	if n := d.uvarint(); d.err == nil {
		if n > uint64(len(b)-d.off) {
			// Checked before anything is sized from it: a hostile
			// length allocates nothing.
			d.failAt(at, fmt.Sprintf("records of %d bytes overrun the input", n))
		} else if n > MaxCarriedBytes {
			// No Durable writes more (ApplyCarrying refuses it), so no
			// log holds more: a budget, not only the input's length.
			d.failAt(at, fmt.Sprintf("records of %d bytes exceed MaxCarriedBytes", n))
		} else if n > 0 {
			// A copy: b is a slice of the buffer the whole log file was
			// read into, which a pending batch must not keep alive.
			c.Records = bytes.Clone(b[d.off : d.off+int(n)])
			d.off += int(n)
		}
	}
	if err := d.finish(); err != nil {
		return nil, nil, err
	}
	return cmd, &c, nil
}

// carriedKey names a carried batch: its partition's incarnation.
type carriedKey struct {
	ns    Namespace
	epoch uint64
}

// carriedSet is a Durable's pending carried batches, in log order.
type carriedSet struct {
	// mu guards the set alone: Settle comes from the partitions' owners,
	// which must never wait behind a log fsync (the Durable's own lock
	// is held across them).
	mu  sync.Mutex
	seq uint64 // log order: the position of the next batch added
	m   map[carriedKey]carriedEntry
}

type carriedEntry struct {
	seq uint64
	c   Carried
}

// add makes c pending unless a batch of its incarnation already is: the
// first position in the log stands (a batch logged again after a
// snapshot, found twice by a replay that crosses the snapshot).
func (s *carriedSet) add(c Carried) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := carriedKey{c.NS, c.Epoch}
	if _, ok := s.m[k]; ok {
		return
	}
	if s.m == nil {
		s.m = make(map[carriedKey]carriedEntry)
	}
	s.m[k] = carriedEntry{seq: s.seq, c: c}
	s.seq++
}

// remove drops the batch of an incarnation, if pending.
func (s *carriedSet) remove(ns Namespace, epoch uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, carriedKey{ns, epoch})
}

// get returns the pending batch of an incarnation.
func (s *carriedSet) get(ns Namespace, epoch uint64) (Carried, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[carriedKey{ns, epoch}]
	return e.c, ok
}

// list returns the pending batches in log order.
func (s *carriedSet) list() []Carried {
	s.mu.Lock()
	entries := make([]carriedEntry, 0, len(s.m))
	for _, e := range s.m {
		entries = append(entries, e)
	}
	s.mu.Unlock()
	if len(entries) == 0 {
		return nil
	}
	slices.SortFunc(entries, func(a, b carriedEntry) int { return cmp.Compare(a.seq, b.seq) })
	out := make([]Carried, len(entries))
	for i, e := range entries {
		out[i] = e.c
	}
	return out
}

// Carried returns the pending carried batches, in log order: those logged
// (ApplyCarrying) and not settled since, and, after a restart, every batch
// the log holds — settling is not logged, so a reopened Durable lists
// every carried batch still in its log, settled or not, until a snapshot
// taken after the settle drops it. The caller appends a listed batch to
// its partition only if the partition is still empty, and settles it
// either way once the partition has it durably (or is gone).
//
// The slice is the caller's; the Records are shared: never modify them.
// Carried does not wait for the Durable's lock.
func (d *Durable) Carried() []Carried { return d.carried.list() }

// Settle says that the partition incarnation (ns, epoch) holds its carried
// batch durably: the next snapshot does not log it again. Settling a batch
// that is not pending does nothing. Settle does not wait for the Durable's
// lock, so it is safe from any goroutine, during an Apply's log fsync
// included.
func (d *Durable) Settle(ns Namespace, epoch uint64) { d.carried.remove(ns, epoch) }

// CarriedFor returns the pending batch of one incarnation, if there is
// one: what a partition built for it must hold first. It takes only the
// pending set's own lock, never one held across a log fsync, so a
// partition's owner may call it on its hot goroutine.
func (d *Durable) CarriedFor(ns Namespace, epoch uint64) (Carried, bool) {
	return d.carried.get(ns, epoch)
}
