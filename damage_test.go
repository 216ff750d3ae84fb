package parkway_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/partition"
)

// The damage tests write a log on the real filesystem under FsyncAlways
// (every message acknowledged is fsynced), close the node, damage the
// partition's files at chosen places and reopen it through parkway.Open.

const (
	damageCount   = 20_000 // messages, in batches of damageBatch
	damageBatch   = 500
	damagePayload = 100
	// damageRecord is a message's size on disk: the 60-byte record header
	// and the payload (no key, no headers).
	damageRecord = 60 + damagePayload
)

func damagePayloadOf(i int) string {
	s := fmt.Sprintf("m%06d-", i)
	return s + strings.Repeat("x", damagePayload-len(s))
}

// damagedLog is a log of damageCount acknowledged messages on disk.
type damagedLog struct {
	cfg   parkway.Config
	topic parkway.Topic
	dir   string   // the partition's directory
	bases []uint64 // its segments' base offsets, sorted
}

func (l *damagedLog) segment(i int) string {
	return filepath.Join(l.dir, fmt.Sprintf("%020d.log", l.bases[i]))
}

func (l *damagedLog) tail() string { return l.segment(len(l.bases) - 1) }

// writeDamageLog writes the log (1 MiB segments: four of them, the tail
// holding the last 500 messages) and closes the node.
func writeDamageLog(t *testing.T) *damagedLog {
	t.Helper()
	l := &damagedLog{cfg: parkway.Config{DataDir: t.TempDir(), Shards: 1, SegmentSize: 1 << 20}}
	synctest.Test(t, func(t *testing.T) {
		n, err := parkway.Open(l.cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := n.Close(); err != nil {
				t.Fatal(err)
			}
		}()
		s := mustStream(t, n, "s")
		l.topic = mustTopic(t, n, s, "t", 1)
		for i := 0; i < damageCount; i += damageBatch {
			msgs := make([]parkway.Message, damageBatch)
			for j := range msgs {
				msgs[j].Payload = []byte(damagePayloadOf(i + j))
			}
			ack, err := n.Produce(ctxFor(t), l.topic, parkway.PartitionID(0), msgs...)
			if err != nil || ack.FirstOffset != uint64(i) {
				t.Fatalf("produce %d: %+v, %v", i, ack, err)
			}
		}
		l.dir = filepath.Join(l.cfg.DataDir, "streams", strconv.Itoa(int(s.ID)), "topics", strconv.Itoa(int(l.topic.ID)), "partitions", "0")
	})
	names, err := os.ReadDir(l.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range names {
		if base, ok := strings.CutSuffix(e.Name(), ".log"); ok && len(base) == 20 {
			b, _ := strconv.ParseUint(base, 10, 64)
			l.bases = append(l.bases, b)
		}
	}
	if len(l.bases) < 4 {
		t.Fatalf("segments %v, want at least four", l.bases)
	}
	fi, err := os.Stat(l.tail())
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(damageCount-l.bases[len(l.bases)-1]) * damageRecord; fi.Size() != want {
		t.Fatalf("tail of %d bytes, want %d: the record size is not %d", fi.Size(), want, damageRecord)
	}
	return l
}

// flipConsumerOffset damages a consumer offset file: a byte of the
// record in each of its two 512-byte slots (a sync mark, see package
// partition's offsets.go), so the test need not know which slot is the
// newer: a damaged newer slot alone is damage too, a damaged older one
// loses nothing (the newer one's offset holds).
func flipConsumerOffset(t *testing.T, path string) {
	t.Helper()
	flipAt(t, path, 6)
	flipAt(t, path, 512+6)
}

func flipAt(t *testing.T, path string, pos int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := []byte{0}
	if _, err := f.ReadAt(b, pos); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x5a
	if _, err := f.WriteAt(b, pos); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

func fileLen(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// damageWant is what a reopened damaged log must show.
type damageWant struct {
	// lost is the range of offsets [lo, hi) the damage makes unreadable;
	// each read in it is a *partition.CorruptError naming path at byte
	// pos (pos < 0: any byte).
	lo, hi uint64
	path   string
	pos    int64
	// fenced: a produce is refused with the *CorruptError; otherwise it
	// is appended at damageCount, no offset reused.
	fenced bool
	// end is the partition's end offset (damageCount unless a torn tail
	// was repaired).
	end uint64
}

// checkDamage reopens l and checks w: every acknowledged message outside
// the damaged range is read at its offset, every read in the range is
// the typed error, the end offset is kept, and a produce is answered at
// once, with the typed error or at the end offset.
func checkDamage(t *testing.T, l *damagedLog, cfg parkway.Config, w damageWant) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		n := open(t, cfg)
		ctx := ctxFor(t)
		offs, err := n.Admin().PartitionOffsets(ctx, l.topic, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		if offs.End != w.end {
			t.Fatalf("end offset %d after reopening, want %d: acknowledged messages dropped", offs.End, w.end)
		}
		for from := uint64(0); from < w.end; {
			b, err := n.Poll(ctx, l.topic, 0, parkway.AtOffset(from), 1000)
			if from >= w.lo && from < w.hi {
				var ce *partition.CorruptError
				if !errors.As(err, &ce) || !errors.Is(err, parkway.ErrCorrupt) || ce.Path != w.path || (w.pos >= 0 && ce.Offset != w.pos) {
					t.Fatalf("Poll at %d, in the damaged range [%d, %d): %v, want a *partition.CorruptError for %s at byte %d", from, w.lo, w.hi, err, w.path, w.pos)
				}
				from++
				continue
			}
			if err != nil {
				t.Fatalf("Poll at %d, outside the damaged range [%d, %d): %v", from, w.lo, w.hi, err)
			}
			if len(b.Messages) == 0 {
				t.Fatalf("Poll at %d: nothing, want messages up to %d", from, w.end)
			}
			for _, m := range b.Messages {
				if m.Offset != from || string(m.Payload) != damagePayloadOf(int(from)) {
					t.Fatalf("message %q at offset %d, want %q at %d", m.Payload, m.Offset, damagePayloadOf(int(from)), from)
				}
				if from >= w.lo && from < w.hi {
					t.Fatalf("message at offset %d served from the damaged range [%d, %d)", from, w.lo, w.hi)
				}
				from++
			}
		}
		start := time.Now()
		ack, err := n.Produce(ctx, l.topic, parkway.PartitionID(0), parkway.Message{Payload: []byte("after")})
		if waited := time.Since(start); waited > 0 {
			t.Errorf("produce answered after %v: it must be answered at once, not at a deadline", waited)
		}
		if w.fenced {
			var ce *partition.CorruptError
			if !errors.As(err, &ce) || !errors.Is(err, parkway.ErrCorrupt) || errors.Is(err, parkway.ErrRetry) || ce.Path != w.path {
				t.Fatalf("produce to a partition with a damaged tail: %+v, %v; want a *partition.CorruptError for %s", ack, err, w.path)
			}
			if offs, err := n.Admin().PartitionOffsets(ctx, l.topic, 0, ""); err != nil || offs.End != w.end {
				t.Fatalf("end offset %d, %v after the refused produce, want %d", offs.End, err, w.end)
			}
			return
		}
		if err != nil || ack.FirstOffset != w.end {
			t.Fatalf("produce: %+v, %v; want it appended at %d (no offset reused)", ack, err, w.end)
		}
	})
}

// TestBehaviour28DamageIsReportedNeverTruncated (DESIGN behaviour 28, one
// node): damage in the tail segment is not mistaken for a torn write (no
// acknowledged message is dropped, no offset reused: the partition is
// fenced for writes); damage in a sealed segment, a sealed segment cut
// short or deleted, opens the partition readable around the damage and
// writable at its end; every read that reaches the damage gets a
// *partition.CorruptError with the file and byte offset; a damaged index
// is rebuilt. A genuine torn tail is still repaired silently.
func TestBehaviour28DamageIsReportedNeverTruncated(t *testing.T) {
	t.Run("tail, middle", func(t *testing.T) {
		l := writeDamageLog(t)
		tailBase := l.bases[len(l.bases)-1]
		pos := fileLen(t, l.tail()) / 2
		flipAt(t, l.tail(), pos)
		rec := uint64(pos / damageRecord)
		for _, verify := range []bool{false, true} {
			cfg := l.cfg
			cfg.VerifyOnOpen = verify
			checkDamage(t, l, cfg, damageWant{lo: tailBase + rec, hi: tailBase + rec + 1, path: l.tail(), pos: int64(rec) * damageRecord, fenced: true, end: damageCount})
		}
	})
	t.Run("tail, 200 bytes from its end", func(t *testing.T) {
		l := writeDamageLog(t)
		tailBase := l.bases[len(l.bases)-1]
		pos := fileLen(t, l.tail()) - 200
		flipAt(t, l.tail(), pos)
		rec := uint64(pos / damageRecord)
		checkDamage(t, l, l.cfg, damageWant{lo: tailBase + rec, hi: tailBase + rec + 1, path: l.tail(), pos: int64(rec) * damageRecord, fenced: true, end: damageCount})
	})
	t.Run("tail, length field", func(t *testing.T) {
		l := writeDamageLog(t)
		tailBase := l.bases[len(l.bases)-1]
		rec := uint64(fileLen(t, l.tail()) / damageRecord / 3)
		flipAt(t, l.tail(), int64(rec)*damageRecord+5)
		checkDamage(t, l, l.cfg, damageWant{lo: tailBase + rec, hi: tailBase + rec + 1, path: l.tail(), pos: int64(rec) * damageRecord, fenced: true, end: damageCount})
	})
	t.Run("tail, last record's length, one bit", func(t *testing.T) {
		// One bit of the last record's length flipped so that the record
		// runs past the end of the file: it reads as a write cut short,
		// and was truncated, the acknowledged message lost and its offset
		// handed out again. Flipped back, the record checks whole: damage.
		l := writeDamageLog(t)
		tailBase := l.bases[len(l.bases)-1]
		last := fileLen(t, l.tail()) - damageRecord
		f, err := os.OpenFile(l.tail(), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		b := []byte{0}
		if _, err := f.ReadAt(b, last+5); err != nil {
			t.Fatal(err)
		}
		b[0] ^= 0x40 // +16 KiB
		if _, err := f.WriteAt(b, last+5); err != nil {
			t.Fatal(err)
		}
		f.Close()
		rec := uint64(last / damageRecord)
		checkDamage(t, l, l.cfg, damageWant{lo: tailBase + rec, hi: tailBase + rec + 1, path: l.tail(), pos: last, fenced: true, end: damageCount})
	})
	t.Run("sealed segment", func(t *testing.T) {
		// Found by the open with VerifyOnOpen, or by the read that reaches
		// it without: only the damaged record is lost to reads.
		for _, verify := range []bool{true, false} {
			l := writeDamageLog(t)
			pos := fileLen(t, l.segment(1)) / 2
			flipAt(t, l.segment(1), pos)
			rec := uint64(pos / damageRecord)
			cfg := l.cfg
			cfg.VerifyOnOpen = verify
			checkDamage(t, l, cfg, damageWant{lo: l.bases[1] + rec, hi: l.bases[1] + rec + 1, path: l.segment(1), pos: int64(rec) * damageRecord, end: damageCount})
		}
	})
	t.Run("sealed segment, zeros over records", func(t *testing.T) {
		// A zeroed 4 KiB sector from inside record 1,000, and 200 zero
		// bytes near the segment's end (after its last index entry,
		// likely: found by the open even without VerifyOnOpen).
		for _, verify := range []bool{true, false} {
			for _, c := range []struct{ from, n int64 }{{1000*damageRecord + 30, 4096}, {-700, 200}} {
				l := writeDamageLog(t)
				f, err := os.OpenFile(l.segment(1), os.O_RDWR, 0)
				if err != nil {
					t.Fatal(err)
				}
				from := c.from
				if from < 0 {
					from += fileLen(t, l.segment(1))
				}
				if _, err := f.WriteAt(make([]byte, c.n), from); err != nil {
					t.Fatal(err)
				}
				f.Close()
				lo, hi := uint64(from/damageRecord), uint64((from+c.n-1)/damageRecord)+1
				cfg := l.cfg
				cfg.VerifyOnOpen = verify
				checkDamage(t, l, cfg, damageWant{lo: l.bases[1] + lo, hi: l.bases[1] + hi, path: l.segment(1), pos: int64(lo) * damageRecord, end: damageCount})
			}
		}
	})
	t.Run("sealed segment, index", func(t *testing.T) {
		l := writeDamageLog(t)
		index := strings.TrimSuffix(l.segment(1), ".log") + ".index"
		for _, pos := range []int64{8*40 + 4, 8*100 + 5, fileLen(t, index) - 3} {
			flipAt(t, index, pos)
		}
		checkDamage(t, l, l.cfg, damageWant{end: damageCount})
	})
	t.Run("sealed segment, truncated", func(t *testing.T) {
		l := writeDamageLog(t)
		size := fileLen(t, l.segment(1))
		cut := size/2 + 7 // inside a record
		if err := os.Truncate(l.segment(1), cut); err != nil {
			t.Fatal(err)
		}
		rec := uint64(cut / damageRecord)
		checkDamage(t, l, l.cfg, damageWant{lo: l.bases[1] + rec, hi: l.bases[2], path: l.segment(1), pos: int64(rec) * damageRecord, end: damageCount})
	})
	t.Run("sealed segment, deleted", func(t *testing.T) {
		l := writeDamageLog(t)
		if err := os.Remove(l.segment(2)); err != nil {
			t.Fatal(err)
		}
		checkDamage(t, l, l.cfg, damageWant{lo: l.bases[2], hi: l.bases[3], path: l.segment(1), pos: -1, end: damageCount})
	})
	t.Run("first segment, deleted", func(t *testing.T) {
		l := writeDamageLog(t)
		if err := os.Remove(l.segment(0)); err != nil {
			t.Fatal(err)
		}
		checkDamage(t, l, l.cfg, damageWant{lo: 0, hi: l.bases[1], path: l.segment(1), pos: 0, end: damageCount})
	})
	t.Run("last segment, deleted", func(t *testing.T) {
		// Its index, left behind, names records up to some offset: the log
		// must not hand those offsets out again.
		l := writeDamageLog(t)
		index, err := os.ReadFile(strings.TrimSuffix(l.tail(), ".log") + ".index")
		if err != nil || len(index) < 8 {
			t.Fatalf("tail index: %d bytes, %v", len(index), err)
		}
		tailBase := l.bases[len(l.bases)-1]
		end := tailBase + uint64(binary.LittleEndian.Uint32(index[len(index)-8:])) + 1
		if err := os.Remove(l.tail()); err != nil {
			t.Fatal(err)
		}
		checkDamage(t, l, l.cfg, damageWant{lo: tailBase, hi: end, path: l.tail(), pos: 0, fenced: true, end: end})
	})
	t.Run("torn tail, last record cut", func(t *testing.T) {
		// What a crash during the last (unacknowledged) write leaves: the
		// record is cut short. It is truncated away, and its offset is
		// the next one given out.
		l := writeDamageLog(t)
		if err := os.Truncate(l.tail(), fileLen(t, l.tail())-damageRecord/2); err != nil {
			t.Fatal(err)
		}
		checkDamage(t, l, l.cfg, damageWant{end: damageCount - 1})
	})
	t.Run("torn tail, garbage after the last record", func(t *testing.T) {
		l := writeDamageLog(t)
		f, err := os.OpenFile(l.tail(), os.O_RDWR|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		g := make([]byte, 3*damageRecord)
		for i := range g {
			g[i] = byte(i*31 + 7)
		}
		if _, err := f.Write(g); err != nil {
			t.Fatal(err)
		}
		f.Close()
		size := fileLen(t, l.tail())
		checkDamage(t, l, l.cfg, damageWant{end: damageCount})
		if got := fileLen(t, l.tail()); got >= size {
			t.Fatalf("tail still %d bytes: the torn bytes were not truncated", got)
		}
	})
}

// TestBehaviour28DamagedTailPurged: a purge (PurgeTopic) of a partition
// fenced for a damaged tail accepts the loss: the damaged segment is
// deleted and produces go on at the end offset, never reusing one.
func TestBehaviour28DamagedTailPurged(t *testing.T) {
	l := writeDamageLog(t)
	flipAt(t, l.tail(), fileLen(t, l.tail())/2)
	synctest.Test(t, func(t *testing.T) {
		n := open(t, l.cfg)
		ctx := ctxFor(t)
		if _, err := n.Produce(ctx, l.topic, parkway.PartitionID(0), parkway.Message{Payload: []byte("x")}); !errors.Is(err, parkway.ErrCorrupt) {
			t.Fatalf("produce before the purge: %v, want ErrCorrupt", err)
		}
		if err := n.Admin().PurgeTopic(ctx, l.topic); err != nil {
			t.Fatal(err)
		}
		ack, err := n.Produce(ctx, l.topic, parkway.PartitionID(0), parkway.Message{Payload: []byte("after")})
		if err != nil || ack.FirstOffset != damageCount {
			t.Fatalf("produce after the purge: %+v, %v; want offset %d", ack, err, damageCount)
		}
	})
	if _, err := os.Stat(l.tail()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("damaged segment after the purge: %v, want it deleted", err)
	}
}

// TestBehaviour28BuildFailureCauseReachesTheCaller: a partition whose
// build fails for damage (here its consumer offset file) answers every
// request with that damage — ErrPartitionFailed wrapping the
// *partition.CorruptError — at the reconciler's next pass, not with a
// generic retry at the caller's deadline.
func TestBehaviour28BuildFailureCauseReachesTheCaller(t *testing.T) {
	const reconcilerPeriod = time.Second
	cfg := parkway.Config{DataDir: t.TempDir(), Shards: 1, RequestTimeout: time.Minute, ReconcileInterval: reconcilerPeriod}
	var (
		topic parkway.Topic
		file  string
	)
	synctest.Test(t, func(t *testing.T) {
		n := open(t, cfg)
		s := mustStream(t, n, "s")
		topic = mustTopic(t, n, s, "t", 1)
		mustProduce(t, n, topic, parkway.PartitionID(0), "a", "b")
		if err := n.Admin().StoreOffset(ctxFor(t), topic, 0, "reader", 1); err != nil {
			t.Fatal(err)
		}
		file = filepath.Join(cfg.DataDir, "streams", strconv.Itoa(int(s.ID)), "topics", strconv.Itoa(int(topic.ID)),
			"partitions", "0", "offsets", "consumers", "reader")
	})
	flipConsumerOffset(t, file)
	synctest.Test(t, func(t *testing.T) {
		n := open(t, cfg)
		ctx := ctxFor(t)
		check := func(what string, err error, waited time.Duration) {
			t.Helper()
			var ce *partition.CorruptError
			if !errors.As(err, &ce) || ce.Path != file || !errors.Is(err, parkway.ErrCorrupt) ||
				!errors.Is(err, parkway.ErrPartitionFailed) || errors.Is(err, parkway.ErrRetry) {
				t.Fatalf("%s of a partition whose build failed for damage: %v; want ErrPartitionFailed wrapping a *partition.CorruptError for %s", what, err, file)
			}
			if waited > 2*reconcilerPeriod {
				t.Fatalf("%s answered after %v, want within a reconcile pass (%v)", what, waited, reconcilerPeriod)
			}
		}
		start := time.Now()
		_, err := n.Produce(ctx, topic, parkway.PartitionID(0), parkway.Message{Payload: []byte("c")})
		check("Produce", err, time.Since(start))
		start = time.Now()
		_, err = n.Poll(ctx, topic, 0, parkway.AtOffset(0), 10)
		check("Poll", err, time.Since(start))
	})
}
