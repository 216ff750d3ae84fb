package shard

import (
	"encoding/binary"
	"errors"
	"os"
	"testing"

	"github.com/parkway-io/parkway/internal/raftid"
	"github.com/parkway-io/parkway/internal/replica"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/vfs"

	"go.etcd.io/raft/v3/raftpb"
)

// TestRaftLogTagNamesTheReplica pins that a raft log is taken only by
// the replica id that wrote it: a re-seeded replica (a new generation of
// its node's replica, internal/raftid) must never take the log of the id
// it replaces, and a log tagged before tags named the replica is the
// node's generation 0.
func TestRaftLogTagNamesTheReplica(t *testing.T) {
	fsys := vfs.NewMem()
	open := func(name string, tag []byte) *replica.Disk {
		t.Helper()
		d, err := replica.OpenDisk(fsys, name, true)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Close() })
		if tag != nil {
			if err := d.SetTag(tag); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	const epoch, node = 7, 3
	gen0, gen1 := raftid.ID(node, 0), raftid.ID(node, 1)
	legacy := binary.LittleEndian.AppendUint64(nil, epoch)
	tagOf := func(epoch, id uint64) []byte {
		return binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, epoch), id)
	}
	refused := func(err error) bool {
		var ce *partition.CorruptError
		return errors.As(err, &ce)
	}

	// A new log is tagged with the incarnation and the replica.
	d := open("new", nil)
	if err := tagRaftLog(d, epoch, gen1); err != nil {
		t.Fatal(err)
	}
	if got, want := d.Tag(), tagOf(epoch, gen1); string(got) != string(want) {
		t.Fatalf("tag %x, want %x", got, want)
	}
	if err := tagRaftLog(d, epoch, gen1); err != nil {
		t.Fatalf("the replica that wrote the log: %v", err)
	}
	if err := tagRaftLog(d, epoch, gen0); !refused(err) {
		t.Fatalf("generation 0 taking generation 1's log: %v, want a CorruptError", err)
	}

	// A log tagged with the incarnation alone is generation 0's.
	d = open("legacy", legacy)
	if err := tagRaftLog(d, epoch, gen1); !refused(err) {
		t.Fatalf("generation 1 taking a log of generation 0 tagged by an older version: %v, want a CorruptError", err)
	}
	if err := tagRaftLog(d, epoch, gen0); err != nil {
		t.Fatalf("generation 0 taking its log tagged by an older version: %v", err)
	}
	if got, want := d.Tag(), tagOf(epoch, gen0); string(got) != string(want) {
		t.Fatalf("legacy tag not upgraded: %x, want %x", got, want)
	}

	// Another incarnation stays refused, either tag form.
	if err := tagRaftLog(open("other", tagOf(epoch+1, gen0)), epoch, gen0); !refused(err) {
		t.Fatalf("another incarnation's log: %v, want a CorruptError", err)
	}
	if err := tagRaftLog(open("other-legacy", binary.LittleEndian.AppendUint64(nil, epoch+1)), epoch, gen0); !refused(err) {
		t.Fatalf("another incarnation's legacy log: %v, want a CorruptError", err)
	}

	// RaftLogOf reports the replica a log names.
	if err := fsys.MkdirAll("dir", 0o755); err != nil {
		t.Fatal(err)
	}
	d = open("dir/"+raftLogName, tagOf(epoch, gen1))
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	l, err := RaftLogOf(fsys, "dir")
	if err != nil || !l.Tagged || l.Incarnation != epoch || l.Replica != gen1 {
		t.Fatalf("RaftLogOf = %+v, %v; want incarnation %d, replica %#x", l, err, epoch, gen1)
	}
}

// TestRaftLogOfDamagedLogNamesItsIncarnation: a raft log ReadDisk refuses
// as damaged — its sync mark cut, or a record in its middle flipped —
// still names the incarnation its valid prefix is tagged with, beside the
// damage, and never claims raft state: the build of a later incarnation
// in that directory knows it for an earlier incarnation's (cluster seeds
// 390 and 20325: a dead incarnation's damaged raft log refused every
// build of the next incarnation's replica on the node).
func TestRaftLogOfDamagedLogNamesItsIncarnation(t *testing.T) {
	const epoch = 7
	gen0 := raftid.ID(2, 0)
	tag := binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, epoch), gen0)
	for _, damage := range []string{"mark cut", "record flipped"} {
		t.Run(damage, func(t *testing.T) {
			fsys := vfs.NewMem()
			d, err := replica.OpenDisk(fsys, "dir/"+raftLogName, true)
			if err != nil {
				t.Fatal(err)
			}
			if err := d.SetTag(tag); err != nil {
				t.Fatal(err)
			}
			for i := uint64(1); i <= 20; i++ {
				if err := d.Save(nil, []*raftpb.Entry{{Term: new(uint64(1)), Index: new(i), Data: make([]byte, 100)}}, &raftpb.HardState{Term: new(uint64(1)), Vote: new(gen0), Commit: new(i)}); err != nil {
					t.Fatal(err)
				}
			}
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			switch damage {
			case "mark cut":
				f, err := fsys.OpenFile("dir/"+RaftMarkName, os.O_RDWR, 0)
				if err != nil {
					t.Fatal(err)
				}
				if err := errors.Join(f.Truncate(3), f.Close()); err != nil {
					t.Fatal(err)
				}
			case "record flipped":
				b, err := vfs.ReadFile(fsys, "dir/"+raftLogName)
				if err != nil {
					t.Fatal(err)
				}
				b[len(b)/2] ^= 0x10
				if err := vfs.WriteFileAtomic(fsys, "dir/"+raftLogName, b); err != nil {
					t.Fatal(err)
				}
			}
			l, err := RaftLogOf(fsys, "dir")
			if !errors.Is(err, partition.ErrCorrupt) {
				t.Fatalf("RaftLogOf of a damaged log: %v, want a CorruptError", err)
			}
			if !l.Tagged || l.Incarnation != epoch || l.Replica != gen0 || l.Held {
				t.Fatalf("RaftLogOf of a damaged log = %+v; want its tag (incarnation %d, replica %#x) and no raft state", l, epoch, gen0)
			}
		})
	}
}
