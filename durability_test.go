package parkway_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// Restart brings back every stream, topic, partition (same incarnation),
// message and consumer offset; a delete + recreate before the restart
// comes back as the new incarnation only.
func TestRestartKeepsEverything(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := vfs.NewMem()
		cfg := parkway.Config{DataDir: "/data", FS: fs, Shards: 2, MetadataSnapshotEvery: 3}
		n, err := parkway.Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		s := mustStream(t, n, "s")
		keep := mustTopic(t, n, s, "keep", 2)
		mustProduce(t, n, keep, parkway.PartitionID(0), "a", "b")
		mustProduce(t, n, keep, parkway.PartitionID(1), "c")
		if err := n.Admin().StoreOffset(ctxFor(t), keep, 0, "reader", 1); err != nil {
			t.Fatal(err)
		}
		gone := mustTopic(t, n, s, "gone", 1)
		mustProduce(t, n, gone, parkway.PartitionID(0), "dead")
		if err := n.Admin().DeleteTopic(ctxFor(t), gone); err != nil {
			t.Fatal(err)
		}
		again := mustTopic(t, n, s, "gone", 1)
		if again.ID != gone.ID || again == gone {
			t.Fatalf("recreated topic %v, want the slab id %d in a new incarnation", again, gone.ID)
		}
		mustProduce(t, n, again, parkway.PartitionID(0), "alive")
		other := mustStream(t, n, "other")
		if err := n.Admin().DeleteStream(ctxFor(t), other); err != nil {
			t.Fatal(err)
		}
		before, _ := n.Admin().Partitions(ctxFor(t), again)
		synctest.Wait()
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}

		n2 := open(t, cfg)
		if st, err := n2.Stream(ctxFor(t), "s"); err != nil || st != s {
			t.Fatalf("stream after restart: %v %v, want %v", st, err, s)
		}
		if _, err := n2.Stream(ctxFor(t), "other"); err == nil {
			t.Fatal("deleted stream came back")
		}
		expectLog(t, n2, keep, 0, "a", "b")
		expectLog(t, n2, keep, 1, "c")
		expectLog(t, n2, again, 0, "alive")
		off, ok, err := n2.Admin().ConsumerOffset(ctxFor(t), keep, 0, "reader")
		if err != nil || !ok || off != 1 {
			t.Fatalf("consumer offset after restart: %d %v %v", off, ok, err)
		}
		after, _ := n2.Admin().Partitions(ctxFor(t), again)
		if !reflect.DeepEqual(before, after) {
			t.Fatalf("partitions after restart %+v, want %+v (same incarnation)", after, before)
		}
		// Slab allocation continues where it was: the freed stream id is
		// reused first.
		if id := mustStream(t, n2, "third"); id.ID != other.ID {
			t.Fatalf("new stream got id %d, want the freed %d", id.ID, other.ID)
		}
		mustProduce(t, n2, keep, parkway.PartitionID(0), "d")
		expectLog(t, n2, keep, 0, "a", "b", "d")
	})
}

// attempt is one produce of the crash workload.
type attempt struct {
	part     uint32
	payloads []string
	acked    bool
	offset   uint64
}

// crashWorkload runs against a node until the first error a client sees:
// a real writer stops there. It returns what it attempted.
func crashWorkload(ctx context.Context, n *parkway.Node) (stream parkway.Stream, topic parkway.Topic, topicOK bool, attempts []attempt, offsetAcked bool) {
	s, err := n.Admin().CreateStream(ctx, "s")
	if err != nil {
		return parkway.Stream{}, parkway.Topic{}, false, nil, false
	}
	tp, err := n.Admin().CreateTopic(ctx, s, "t", 2)
	if err != nil {
		return s, parkway.Topic{}, false, nil, false
	}
	for k := range 8 {
		a := attempt{part: uint32(k % 2)}
		msgs := make([]parkway.Message, 3)
		for j := range msgs {
			a.payloads = append(a.payloads, fmt.Sprintf("%d-%d", k, j))
			msgs[j].Payload = []byte(a.payloads[j])
		}
		ack, err := n.Produce(ctx, tp, parkway.PartitionID(a.part), msgs...)
		a.acked, a.offset = err == nil, ack.FirstOffset
		attempts = append(attempts, a)
		if err != nil {
			return s, tp, true, attempts, false
		}
	}
	err = n.Admin().StoreOffset(ctx, tp, 0, "c", 3)
	return s, tp, true, attempts, err == nil
}

// Crash at every write point of a produce workload under FsyncAlways (the
// default): the i-th mutating filesystem operation fails (EIO, or a torn
// write), the machine then loses power (everything not fsynced is gone),
// and the node is reopened. Every acknowledged message must be readable at
// its acknowledged offset; a partition holds a prefix of the batches
// attempted on it, each whole, with dense offsets — nothing unacknowledged
// is half-visible.
func TestCrashAtEveryWritePoint(t *testing.T) {
	count := errorfs.OnIndex(-1, nil)
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{DataDir: "/data", FS: errorfs.New(vfs.NewMem(), count), Shards: 2})
		if _, _, ok, att, off := crashWorkload(ctxFor(t), n); !ok || len(att) != 8 || !off {
			t.Fatal("clean run failed")
		}
	})
	points := count.Count()
	if points < 20 {
		t.Fatalf("only %d write points: the workload is not exercising storage", points)
	}
	t.Logf("%d write points", points)
	faults := []error{syscall.EIO, &errorfs.TornWrite{N: 5}}
	for i := range points {
		for _, fault := range faults {
			synctest.Test(t, func(t *testing.T) {
				checkCrashAt(t, i, fault)
			})
		}
	}
}

func checkCrashAt(t *testing.T, i int64, fault error) {
	mem := vfs.NewMem()
	inj := errorfs.OnIndex(i, fault)
	cfg := parkway.Config{DataDir: "/data", FS: errorfs.New(mem, inj), Shards: 2,
		BuildBackoffMin: time.Millisecond, BuildBackoffMax: 10 * time.Millisecond, RequestTimeout: time.Second, ReconcileInterval: 250 * time.Millisecond}
	n, err := parkway.Open(cfg)
	var (
		tp       parkway.Topic
		topicOK  bool
		attempts []attempt
		offAcked bool
	)
	if err == nil {
		_, tp, topicOK, attempts, offAcked = crashWorkload(ctxFor(t), n)
	}
	crashed := mem.Crash() // power loss: only what was fsynced survives
	if n != nil {
		synctest.Wait()
		_ = n.Close() // writes to the dead filesystem; irrelevant
	}

	n2, err := parkway.Open(parkway.Config{DataDir: "/data", FS: crashed, Shards: 2})
	if err != nil {
		t.Fatalf("op %d (%v): reopen after crash: %v", i, fault, err)
	}
	defer func() {
		synctest.Wait()
		_ = n2.Close()
	}()
	if !topicOK {
		return // nothing acknowledged beyond metadata we do not check here
	}
	if _, err := n2.Stream(ctxFor(t), "s"); err != nil {
		t.Fatalf("op %d (%v): acknowledged stream lost", i, fault)
	}
	for part := range uint32(2) {
		got := readAll(t, n2, tp, part)
		var want []string // every batch attempted on part, in order
		ackedEnd := 0     // end of the last acknowledged batch
		for _, a := range attempts {
			if a.part != part {
				continue
			}
			if a.acked {
				if a.offset != uint64(len(want)) {
					t.Fatalf("op %d: batch acked at %d behind %d messages", i, a.offset, len(want))
				}
				ackedEnd = len(want) + len(a.payloads)
			}
			want = append(want, a.payloads...)
		}
		if len(got) < ackedEnd {
			t.Fatalf("op %d (%v): partition %d holds %v after the crash; acknowledged up to %d of %q",
				i, fault, part, payloads(got), ackedEnd, want)
		}
		if len(got) > len(want) || len(got)%3 != 0 {
			t.Fatalf("op %d (%v): partition %d holds %v: not whole batches of %q", i, fault, part, payloads(got), want)
		}
		for j, m := range got {
			if string(m.Payload) != want[j] {
				t.Fatalf("op %d (%v): partition %d holds %v, not a prefix of %q", i, fault, part, payloads(got), want)
			}
		}
	}
	if offAcked {
		off, ok, err := n2.Admin().ConsumerOffset(ctxFor(t), tp, 0, "c")
		if err != nil || !ok || off != 3 {
			t.Fatalf("op %d (%v): acknowledged consumer offset lost: %d %v %v", i, fault, off, ok, err)
		}
	}
}

// ENOSPC while a partition is built: the build backs off, the produce
// waiting for it is retried in place (the client sees no error as long as
// space returns within its deadline), other partitions keep working, and
// the build succeeds once space returns.
func TestENOSPCDuringBuildBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The disk is full for partition data only: the metadata commit
		// goes through, the partition build does not.
		full := errorfs.NewSwitchFunc(syscall.ENOSPC, func(op errorfs.Op) bool {
			return op.Mutating() && strings.Contains(op.Path, "/topics/1/")
		})
		n := open(t, parkway.Config{DataDir: "/data", FS: errorfs.New(vfs.NewMem(), full), Shards: 1,
			BuildBackoffMin: 100 * time.Millisecond, RequestTimeout: time.Minute})
		reg := registry(t, n)
		s := mustStream(t, n, "s")
		ok := mustTopic(t, n, s, "ok", 1)
		mustProduce(t, n, ok, parkway.PartitionID(0), "before")

		full.Set(true)
		// Under FsyncNever the partition is built when its topic is
		// created; under FsyncAlways and FsyncInterval it would be built
		// deferred, with nothing on disk until its records outgrow the
		// journal (behaviour 32), and no build to fail.
		tp := mustTopic(t, n, s, "t", 1, parkway.WithFsync(parkway.FsyncNever, time.Second))
		if tp.ID != 1 {
			t.Fatalf("topic id %d, want 1", tp.ID)
		}
		done := make(chan error, 1)
		go func() {
			_, err := n.Produce(ctxFor(t), tp, parkway.PartitionID(0), parkway.Message{Payload: []byte("waited")})
			done <- err
		}()
		time.Sleep(5 * time.Second) // virtual time: several backoff rounds
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("produce finished while the disk was full: %v", err)
		default:
		}
		if got := metricValue(t, reg, "parkway_partition_builds_failed_total"); got < 2 {
			t.Fatalf("build failures = %v, want repeated backed-off attempts", got)
		}
		mustProduce(t, n, ok, parkway.PartitionID(0), "during") // not wedged

		full.Set(false)
		if err := <-done; err != nil {
			t.Fatalf("produce after space returned: %v", err)
		}
		expectLog(t, n, tp, 0, "waited")
		expectLog(t, n, ok, 0, "before", "during")
	})
}

// FsyncInterval's contract: an acknowledged produce is durable within the
// interval. Produce, let the interval pass (virtual time), lose power,
// reopen: the message is there. FsyncNever makes no such promise, and
// the same power loss right after the ack takes the message with it (the
// in-memory filesystem drops everything not fsynced).
func TestFsyncIntervalLossWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := vfs.NewMem()
		n, err := parkway.Open(parkway.Config{DataDir: "/data", FS: mem, Shards: 1})
		if err != nil {
			t.Fatal(err)
		}
		s := mustStream(t, n, "s")
		iv, err := n.Admin().CreateTopic(ctxFor(t), s, "interval", 1, parkway.WithFsync(parkway.FsyncInterval, 100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		never, err := n.Admin().CreateTopic(ctxFor(t), s, "never", 1, parkway.WithFsync(parkway.FsyncNever, 0))
		if err != nil {
			t.Fatal(err)
		}
		// Materialise both (and sync their creation) before the test proper.
		mustProduce(t, n, iv, parkway.PartitionID(0), "warm")
		mustProduce(t, n, never, parkway.PartitionID(0), "warm")
		time.Sleep(time.Second)
		synctest.Wait()

		mustProduce(t, n, iv, parkway.PartitionID(0), "within-window")
		time.Sleep(200 * time.Millisecond) // virtual: past the interval
		synctest.Wait()
		mustProduce(t, n, never, parkway.PartitionID(0), "never-synced")
		crashed := mem.Crash()
		_ = n.Close()

		n2 := open(t, parkway.Config{DataDir: "/data", FS: crashed, Shards: 1})
		expectLog(t, n2, iv, 0, "warm", "within-window")
		for _, m := range readAll(t, n2, never, 0) {
			if string(m.Payload) == "never-synced" {
				t.Fatal("an un-synced FsyncNever message survived a power loss in MemFS: the crash model is not dropping data")
			}
		}
	})
}

// A failed fsync fences the partition (nothing past the last durable point
// is served or acknowledged); the reconciler then evicts it and rebuilds it
// from disk behind the build backoff, and it serves again once the disk
// recovers — no restart needed.
func TestFailedFsyncFencesThenRebuilds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The partitions' files and the journal that FsyncAlways groups
		// are committed through.
		broken := errorfs.NewSwitchFunc(syscall.EIO, func(op errorfs.Op) bool {
			return op.Kind == errorfs.OpSync && (strings.Contains(op.Path, "/partitions/") || strings.Contains(op.Path, "/journal/"))
		})
		n := open(t, parkway.Config{DataDir: "/data", FS: errorfs.New(vfs.NewMem(), broken), Shards: 1,
			RequestTimeout: time.Second, ReconcileInterval: 250 * time.Millisecond})
		s := mustStream(t, n, "s")
		tp := mustTopic(t, n, s, "t", 1)
		mustProduce(t, n, tp, parkway.PartitionID(0), "durable")

		broken.Set(true)
		// The journal's fsync fails, and so does the one that would make
		// taking the frame back durable: the record may come back.
		if _, err := n.Produce(ctxFor(t), tp, parkway.PartitionID(0), parkway.Message{Payload: []byte("lost-ack")}); !errors.Is(err, syscall.EIO) || !errors.Is(err, parkway.ErrOutcomeUnknown) {
			t.Fatalf("produce whose fsync failed: %v, want ErrOutcomeUnknown with the EIO", err)
		}
		if _, err := n.Poll(ctxFor(t), tp, 0, parkway.AtOffset(0), 10); err == nil {
			t.Fatal("a fenced partition served a read")
		}
		broken.Set(false)
		time.Sleep(5 * time.Second) // virtual: reconcile passes and the build backoff
		synctest.Wait()
		mustProduce(t, n, tp, parkway.PartitionID(0), "after")
		got := payloads(readAll(t, n, tp, 0))
		if len(got) < 2 || got[0] != "durable@0" || got[len(got)-1] != fmt.Sprintf("after@%d", len(got)-1) {
			t.Fatalf("after the rebuild the partition holds %v", got)
		}
	})
}
