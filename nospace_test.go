package parkway_test

import (
	"bytes"
	"errors"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// Disk full while producing to a materialised partition: the producer gets
// the documented ErrNoSpace (not a bare *PathError), the partition keeps
// serving reads, another topic's partition keeps taking writes, and once
// space returns the same partition takes writes again with no operator
// action.
func TestDiskFullIsErrNoSpaceAndRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// What a full disk refuses: writes and creations (a truncate
		// frees space and goes through).
		full := errorfs.NewSwitchFunc(syscall.ENOSPC, func(op errorfs.Op) bool {
			switch op.Kind {
			case errorfs.OpWrite, errorfs.OpWriteAt, errorfs.OpPreallocate, errorfs.OpMkdirAll:
				return strings.Contains(op.Path, "/topics/1/")
			}
			return false
		})
		n := open(t, parkway.Config{DataDir: "/data", FS: errorfs.New(vfs.NewMem(), full), Shards: 1})
		s := mustStream(t, n, "s")
		ok := mustTopic(t, n, s, "ok", 1)
		tp := mustTopic(t, n, s, "t", 1)
		mustProduce(t, n, tp, parkway.PartitionID(0), "before")

		full.Set(true)
		// Larger than the records a partition committed through its
		// shard's journal keeps behind its file (4 KiB): a smaller one is
		// acknowledged from the journal and written once space returns.
		_, err := n.Produce(ctxFor(t), tp, parkway.PartitionID(0), parkway.Message{Payload: bytes.Repeat([]byte("refused"), 1<<10)})
		if !errors.Is(err, parkway.ErrNoSpace) {
			t.Fatalf("produce on a full disk: %v, want ErrNoSpace", err)
		}
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("ErrNoSpace lost the filesystem's error: %v", err)
		}
		expectLog(t, n, tp, 0, "before") // reads go on
		mustProduce(t, n, ok, parkway.PartitionID(0), "elsewhere")

		full.Set(false)
		var last error
		for range 100 { // the partition may be rebuilding behind its backoff
			if _, last = n.Produce(ctxFor(t), tp, parkway.PartitionID(0), parkway.Message{Payload: []byte("after")}); last == nil {
				break
			}
			if !errors.Is(last, parkway.ErrPartitionFailed) {
				t.Fatalf("produce after space returned: %q", last.Error())
			}
			synctest.Wait()
		}
		if last != nil {
			t.Fatalf("the partition never took writes again: %v", last)
		}
	})
}

// A batch over MaxBatchBytes is refused at once with ErrBatchTooLarge (it
// could never fit a forwarded request or a raft entry), and header
// framing counts: a million empty headers are not a free message.
func TestBatchBytesAndHeaderFramingAreCounted(t *testing.T) {
	synctest.Test(t, testBatchBytes)
}

func testBatchBytes(t *testing.T) {
	n := open(t, parkway.Config{Shards: 1, MaxBatchBytes: 1 << 20})
	s := mustStream(t, n, "s")
	tp := mustTopic(t, n, s, "t", 1)
	big := bytes.Repeat([]byte{1}, 600<<10)
	_, err := n.Produce(ctxFor(t), tp, parkway.PartitionID(0), parkway.Message{Payload: big}, parkway.Message{Payload: big})
	if !errors.Is(err, parkway.ErrBatchTooLarge) {
		t.Fatalf("1.2 MiB batch with a 1 MiB budget: %v, want ErrBatchTooLarge", err)
	}
	headers := make([]parkway.Header, 200_000) // 1.6 MB of framing, no bytes of content
	_, err = n.Produce(ctxFor(t), tp, parkway.PartitionID(0), parkway.Message{Headers: headers})
	if !errors.Is(err, parkway.ErrMessageTooLarge) {
		t.Fatalf("200,000 empty headers: %v, want ErrMessageTooLarge", err)
	}
	if _, err := parkway.Open(parkway.Config{MaxBatchBytes: parkway.MaxBatchBytesLimit + 1}); !errors.Is(err, parkway.ErrInvalidConfig) {
		t.Fatalf("MaxBatchBytes over the limit: %v, want ErrInvalidConfig", err)
	}
}

// A disk-full spell that also refuses the truncate rolling a failed
// append back leaves the partition unusable: it is fenced, rebuilt from
// disk behind the build backoff, and takes writes again once space
// returns (without the fence it refused every write forever). The
// produce's outcome is unknown, not ErrNoSpace: its write may have
// reached the file, and nothing took it back.
func TestUnusablePartitionIsRebuiltAfterDiskFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		full := errorfs.NewSwitchFunc(syscall.ENOSPC, func(op errorfs.Op) bool {
			return op.Mutating() && strings.Contains(op.Path, "/topics/0/")
		})
		n := open(t, parkway.Config{DataDir: "/data", FS: errorfs.New(vfs.NewMem(), full), Shards: 1})
		s := mustStream(t, n, "s")
		tp := mustTopic(t, n, s, "t", 1)
		mustProduce(t, n, tp, parkway.PartitionID(0), "before")
		// A consumer offset needs the partition's files: a new partition
		// of an FsyncAlways topic has none until then (behaviour 32), and
		// a disk full while it creates them refuses the append cleanly.
		if err := n.Admin().StoreOffset(ctxFor(t), tp, 0, "c", 1); err != nil {
			t.Fatal(err)
		}
		full.Set(true)
		// Larger than what a journaled partition keeps behind its file
		// (see TestDiskFullIsErrNoSpaceAndRecovers).
		if _, err := n.Produce(ctxFor(t), tp, parkway.PartitionID(0), parkway.Message{Payload: bytes.Repeat([]byte("x"), 8<<10)}); !errors.Is(err, parkway.ErrOutcomeUnknown) || errors.Is(err, parkway.ErrNoSpace) {
			t.Fatalf("produce on a full disk whose rollback failed: %v, want ErrOutcomeUnknown (not ErrNoSpace)", err)
		}
		full.Set(false)
		var err error
		for range 10 {
			if _, err = n.Produce(ctxFor(t), tp, parkway.PartitionID(0), parkway.Message{Payload: []byte("after")}); err == nil {
				break
			}
			time.Sleep(time.Second) // virtual: the rebuild waits out its backoff
		}
		if err != nil {
			t.Fatalf("the partition never took writes again: %v", err)
		}
		expectLog(t, n, tp, 0, "before", "after")
	})
}

// A produce answered ErrNoSpace is not in the log: not after the
// partition recovers in place, not after a reopen (the error's doc: it
// was not appended, so a producer may send it again). The journal that FsyncAlways groups commit
// through is refused its writes while the partition's own file is not
// (a segment whose pages exist already, as on a full tmpfs): the group's
// records reached the file, and before the fix the rebuild after the
// fence kept them, so a producer that retried wrote them twice.
func TestNoSpaceProduceIsNotInTheLog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		full := errorfs.NewSwitchFunc(syscall.ENOSPC, func(op errorfs.Op) bool {
			switch op.Kind {
			case errorfs.OpWrite, errorfs.OpWriteAt, errorfs.OpPreallocate, errorfs.OpOpen, errorfs.OpMkdirAll:
				return strings.Contains(op.Path, "/journal/")
			}
			return false
		})
		mem := vfs.NewMem()
		cfg := parkway.Config{DataDir: "/data", FS: errorfs.New(mem, full), Shards: 1}
		n, err := parkway.Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			synctest.Wait()
			_ = n.Close() // closed below, unless the test failed before
		})
		s := mustStream(t, n, "s")
		tp := mustTopic(t, n, s, "t", 1)
		mustProduce(t, n, tp, parkway.PartitionID(0), "before")
		mustProduce(t, n, tp, parkway.PartitionID(0), "journaled") // the partition joined the journal

		full.Set(true)
		refused := append([]byte("refused"), bytes.Repeat([]byte{'.'}, 8<<10)...)
		_, err = n.Produce(ctxFor(t), tp, parkway.PartitionID(0), parkway.Message{Payload: refused})
		if !errors.Is(err, parkway.ErrNoSpace) || errors.Is(err, parkway.ErrOutcomeUnknown) {
			t.Fatalf("produce whose group commit was refused: %v, want ErrNoSpace", err)
		}
		full.Set(false)
		var last error
		for range 100 { // the partition may be rebuilding behind its backoff
			if _, last = n.Produce(ctxFor(t), tp, parkway.PartitionID(0), parkway.Message{Payload: []byte("after")}); last == nil {
				break
			}
			if !errors.Is(last, parkway.ErrPartitionFailed) {
				t.Fatalf("produce after space returned: %v", last)
			}
			time.Sleep(100 * time.Millisecond) // virtual: the rebuild's backoff
		}
		if last != nil {
			t.Fatalf("the partition never took writes again: %v", last)
		}
		expectLog(t, n, tp, 0, "before", "journaled", "after")
		synctest.Wait()
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
		n2 := open(t, parkway.Config{DataDir: "/data", FS: mem, Shards: 1})
		expectLog(t, n2, tp, 0, "before", "journaled", "after")
	})
}
