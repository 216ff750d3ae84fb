package replica_test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/parkway-io/parkway/internal/replica"
	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// entries are enveloped as Propose does (an 8-byte proposal id before
// the payload "e<index>"), as every entry a Group writes is.
func entries(from, to, term uint64) []*raftpb.Entry {
	var out []*raftpb.Entry
	for i := from; i <= to; i++ {
		out = append(out, &raftpb.Entry{Index: new(i), Term: new(term), Data: fmt.Appendf([]byte("proposal"), "e%d", i)})
	}
	return out
}

func snapAt(index, term uint64, data string) *raftpb.Snapshot {
	return &raftpb.Snapshot{Data: []byte(data), Metadata: &raftpb.SnapshotMetadata{
		Index: new(index), Term: new(term), ConfState: &raftpb.ConfState{Voters: []uint64{1, 2, 3}}}}
}

func hardState(term, vote, commit uint64) *raftpb.HardState {
	return &raftpb.HardState{Term: new(term), Vote: new(vote), Commit: new(commit)}
}

// describe summarises what a log recovered: snapshot index, hard state
// and the entries' indexes, terms and payloads.
func describe(r replica.Recovered) string {
	s := fmt.Sprintf("snap=%d/%s hs=%d/%d/%d ents=", r.Snapshot.GetMetadata().GetIndex(), r.Snapshot.GetData(),
		r.HardState.GetTerm(), r.HardState.GetVote(), r.HardState.GetCommit())
	for _, e := range r.Entries {
		s += fmt.Sprintf("%d.%d:%s ", e.GetIndex(), e.GetTerm(), e.GetData()[min(8, len(e.GetData())):])
	}
	return s
}

// TestDiskReplay: a later entries batch replaces the suffix it overlaps
// (a new leader overwrote uncommitted entries), the last hard state wins,
// and entries covered by a later snapshot are dropped.
func TestDiskReplay(t *testing.T) {
	fsys := vfs.NewMem()
	d, err := replica.OpenDisk(fsys, "/g/log", true)
	if err != nil {
		t.Fatal(err)
	}
	steps := []func() error{
		func() error { return d.Save(snapAt(1, 1, ""), nil, hardState(1, 0, 1)) },
		func() error { return d.Save(nil, entries(2, 6, 2), hardState(2, 1, 4)) },
		func() error { return d.Save(nil, entries(5, 7, 3), hardState(3, 2, 5)) },
		func() error { return d.Save(snapAt(3, 2, "s3"), nil, nil) },
	}
	for _, f := range steps {
		if err := f(); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d, err = replica.OpenDisk(fsys, "/g/log", true)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	got := describe(d.Recovered())
	want := "snap=3/s3 hs=3/2/5 ents=4.2:e4 5.3:e5 6.3:e6 7.3:e7 "
	if got != want {
		t.Fatalf("recovered\n %s\nwant\n %s", got, want)
	}
}

// TestDiskUnsyncedLost: without sync, a power loss may drop what Save
// wrote; with sync it survives.
func TestDiskUnsyncedLost(t *testing.T) {
	for _, sync := range []bool{false, true} {
		fsys := vfs.NewMem()
		d, err := replica.OpenDisk(fsys, "/g/log", sync)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Save(snapAt(1, 1, ""), entries(2, 3, 1), hardState(1, 0, 3)); err != nil {
			t.Fatal(err)
		}
		after := fsys.Crash()
		d2, err := replica.OpenDisk(after, "/g/log", sync)
		if err != nil {
			t.Fatal(err)
		}
		n := len(d2.Recovered().Entries)
		if sync && n != 2 || !sync && n != 0 {
			t.Fatalf("sync=%v: %d entries after power loss", sync, n)
		}
		d2.Close()
		d.Close()
	}
}

// TestDiskRewriteCrashAtEveryWritePoint fails the i-th filesystem
// operation of a compaction's rewrite, then loses power, for i = 0, 1, …
// until the rewrite succeeds untouched: every time the log reopens as
// either the old state or the new one, never a mix, never corrupt.
func TestDiskRewriteCrashAtEveryWritePoint(t *testing.T) {
	const (
		old   = "snap=1/ hs=2/1/5 ents=2.2:e2 3.2:e3 4.2:e4 5.2:e5 "
		fresh = "snap=4/s4 hs=2/1/5 ents=5.2:e5 "
	)
	for i := int64(0); ; i++ {
		mem := vfs.NewMem()
		d, err := replica.OpenDisk(mem, "/g/log", true)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Save(snapAt(1, 1, ""), entries(2, 5, 2), hardState(2, 1, 5)); err != nil {
			t.Fatal(err)
		}
		d.Close()
		inj := errorfs.OnIndex(i, syscall.EIO) // the i-th mutating operation
		fsys := errorfs.New(mem, inj)
		d, err = replica.OpenDisk(fsys, "/g/log", true)
		if err == nil {
			err = d.Rewrite(snapAt(4, 2, "s4"), hardState(2, 1, 5), entries(5, 5, 2))
		}
		if err != nil && !errors.Is(err, syscall.EIO) {
			t.Fatalf("op %d: %v", i, err)
		}
		after := mem.Crash()
		d2, rerr := replica.OpenDisk(after, "/g/log", true)
		if rerr != nil {
			t.Fatalf("op %d failed (%v): reopen: %v", i, err, rerr)
		}
		got := describe(d2.Recovered())
		d2.Close()
		if got != old && got != fresh {
			t.Fatalf("op %d failed (%v): recovered %s", i, err, got)
		}
		if err == nil && got != fresh {
			t.Fatalf("op %d: rewrite succeeded but recovered %s", i, got)
		}
		if !inj.Fired() {
			if i < 3 {
				t.Fatalf("rewrite took only %d operations", i)
			}
			return
		}
	}
}

// TestDiskSyncsWhatRaftNeeds: a synced Disk makes entries, terms and votes
// durable at once, but a hard state that only moves the commit forward
// waits for the next sync — unless SyncCommit asked for it.
func TestDiskSyncsWhatRaftNeeds(t *testing.T) {
	for _, syncCommit := range []bool{false, true} {
		mem := vfs.NewMem()
		d, err := replica.OpenDisk(mem, "/g/log", true)
		if err != nil {
			t.Fatal(err)
		}
		if syncCommit {
			d.SyncCommit()
		}
		if err := d.Save(snapAt(1, 1, ""), entries(2, 3, 2), hardState(2, 1, 1)); err != nil {
			t.Fatal(err)
		}
		if err := d.Save(nil, nil, hardState(2, 1, 3)); err != nil { // commit only
			t.Fatal(err)
		}
		got := describe(mustRecover(t, mem.Crash()))
		want := "snap=1/ hs=2/1/1 ents=2.2:e2 3.2:e3 "
		if syncCommit {
			want = "snap=1/ hs=2/1/3 ents=2.2:e2 3.2:e3 "
		}
		if got != want {
			t.Fatalf("syncCommit=%v: after power loss %s, want %s", syncCommit, got, want)
		}
		if err := d.Save(nil, nil, hardState(3, 2, 3)); err != nil { // a new term and vote
			t.Fatal(err)
		}
		if got := describe(mustRecover(t, mem.Crash())); got != "snap=1/ hs=3/2/3 ents=2.2:e2 3.2:e3 " {
			t.Fatalf("a vote was not made durable: %s", got)
		}
		d.Close()
	}
}

func mustRecover(t *testing.T, fsys vfs.FS) replica.Recovered {
	t.Helper()
	d, err := replica.OpenDisk(fsys, "/g/log", true)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	return d.Recovered()
}

// A hard state torn away after a snapshot record (Save writes the snapshot
// first) reopens with the commit index raised to the snapshot's: the
// member starts instead of handing raft a commit below its snapshot.
func TestSnapshotWithoutHardStateRestarts(t *testing.T) {
	mem := vfs.NewMem()
	d, err := replica.OpenDisk(mem, "/g/log", true)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Save(snapAt(1, 1, ""), entries(2, 3, 2), hardState(2, 1, 1)); err != nil {
		t.Fatal(err)
	}
	if err := d.Save(snapAt(9, 3, "s9"), nil, nil); err != nil { // the hard state never made it
		t.Fatal(err)
	}
	d.Close()
	d, err = replica.OpenDisk(mem, "/g/log", true)
	if err != nil {
		t.Fatal(err)
	}
	g, err := replica.New(replica.Config{Group: 1, Node: 1, Peers: []uint64{1, 2, 3}, Disk: d})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if idx, data := g.Snapshot(); idx != 9 || string(data) != "s9" || g.Applied() != 9 {
		t.Fatalf("restored snapshot %d %q, applied %d", idx, data, g.Applied())
	}
}

// A compaction whose directory sync fails after its rename leaves the new
// file as the log: what is saved after it goes into that file, so the
// log reopened (without a crash) holds it. Appending to the replaced
// file instead would lose it from the log at the path.
func TestDiskRewriteDirSyncFailureKeepsTheNewLog(t *testing.T) {
	mem := vfs.NewMem()
	// Fails the directory sync that follows a rename (creating the
	// temporary file syncs the directory too).
	var armed, renamed atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpRename && armed.Load() {
			renamed.Store(true)
		}
		if op.Kind == errorfs.OpSyncDir && renamed.CompareAndSwap(true, false) {
			return syscall.EIO
		}
		return nil
	})
	d, err := replica.OpenDisk(errorfs.New(mem, inj), "/g/log", true)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Save(snapAt(1, 1, ""), entries(2, 5, 2), hardState(2, 1, 5)); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	if err := d.Rewrite(snapAt(4, 2, "s4"), hardState(2, 1, 5), entries(5, 5, 2)); !errors.Is(err, syscall.EIO) {
		t.Fatalf("rewrite with a failing directory sync: %v, want EIO", err)
	}
	armed.Store(false)
	if err := d.Save(nil, entries(6, 6, 2), hardState(2, 1, 6)); err != nil {
		t.Fatal(err)
	}
	d.Close()
	d2, err := replica.OpenDisk(mem, "/g/log", true)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	if got, want := describe(d2.Recovered()), "snap=4/s4 hs=2/1/6 ents=5.2:e5 6.2:e6 "; got != want {
		t.Fatalf("reopened log: %s, want %s", got, want)
	}
}

// TestDiskHoldsCommitOnlyHardState: a synced Disk does not write a hard
// state that only moves the commit (it would not sync it): the file is
// left with no write that no fsync covers, so a log kept under a
// descriptor budget is not pinned open by it. The held hard state is
// written before the next save, by Sync and by Close, so a log closed
// cleanly and reopened reads back as if it had been written at once.
func TestDiskHoldsCommitOnlyHardState(t *testing.T) {
	mem := vfs.NewMem()
	var writes atomic.Int64
	fsys := errorfs.New(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpWriteAt {
			writes.Add(1)
		}
		return nil
	}))
	d, err := replica.OpenDisk(fsys, "/g/log", true)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Save(snapAt(1, 1, ""), entries(2, 3, 2), hardState(2, 1, 1)); err != nil {
		t.Fatal(err)
	}
	before := writes.Load()
	if err := d.Save(nil, nil, hardState(2, 1, 3)); err != nil { // commit only
		t.Fatal(err)
	}
	// Nor by a save with nothing to save (a Ready with only messages).
	if err := d.Save(nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	if n := writes.Load() - before; n != 0 {
		t.Fatalf("a commit-only hard state was written without a sync (%d writes)", n)
	}
	// The next save writes it first, then its own records.
	if err := d.Save(nil, entries(4, 4, 2), nil); err != nil {
		t.Fatal(err)
	}
	if got, want := describe(mustRecover(t, mem.Crash())), "snap=1/ hs=2/1/3 ents=2.2:e2 3.2:e3 4.2:e4 "; got != want {
		t.Fatalf("after the next save and a power loss: %s, want %s", got, want)
	}
	// Sync writes a held hard state and makes it durable.
	if err := d.Save(nil, nil, hardState(2, 1, 4)); err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	if got, want := describe(mustRecover(t, mem.Crash())), "snap=1/ hs=2/1/4 ents=2.2:e2 3.2:e3 4.2:e4 "; got != want {
		t.Fatalf("after Sync and a power loss: %s, want %s", got, want)
	}
	// Close writes it (not synced): a clean stop keeps it.
	if err := d.Save(nil, entries(5, 5, 2), nil); err != nil {
		t.Fatal(err)
	}
	if err := d.Save(nil, nil, hardState(2, 1, 5)); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := describe(mustRecover(t, mem)), "snap=1/ hs=2/1/5 ents=2.2:e2 3.2:e3 4.2:e4 5.2:e5 "; got != want {
		t.Fatalf("after Close: %s, want %s", got, want)
	}
}

// TestDiskTag: a tag set on a log is read back after a reopen and after a
// Rewrite (compaction replaces the file), and ReadDisk sees it too; a log
// never tagged has none, and a tag out of bounds is refused.
func TestDiskTag(t *testing.T) {
	fsys := vfs.NewMem()
	d, err := replica.OpenDisk(fsys, "/g/log", true)
	if err != nil {
		t.Fatal(err)
	}
	if d.Tag() != nil {
		t.Fatalf("new log tagged %x", d.Tag())
	}
	if err := d.SetTag(nil); err == nil {
		t.Fatal("an empty tag was taken")
	}
	if err := d.SetTag(make([]byte, replica.MaxTag+1)); err == nil {
		t.Fatal("a tag over MaxTag was taken")
	}
	if err := d.SetTag([]byte("inc-7")); err != nil {
		t.Fatal(err)
	}
	if err := d.Save(snapAt(1, 1, ""), entries(2, 4, 1), hardState(1, 2, 3)); err != nil {
		t.Fatal(err)
	}
	reopen := func(what string) {
		t.Helper()
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		if d, err = replica.OpenDisk(fsys, "/g/log", true); err != nil {
			t.Fatal(err)
		}
		if string(d.Tag()) != "inc-7" {
			t.Fatalf("tag %q after %s, want inc-7", d.Tag(), what)
		}
	}
	reopen("a reopen")
	if err := d.Rewrite(snapAt(3, 1, "s3"), hardState(1, 2, 3), entries(4, 4, 1)); err != nil {
		t.Fatal(err)
	}
	if string(d.Tag()) != "inc-7" {
		t.Fatalf("tag %q after a Rewrite, want inc-7", d.Tag())
	}
	reopen("a Rewrite and a reopen")
	if got, want := describe(d.Recovered()), "snap=3/s3 hs=1/2/3 ents=4.1:e4 "; got != want {
		t.Fatalf("recovered %s, want %s", got, want)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := replica.ReadDisk(fsys, "/g/log")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if string(r.Tag()) != "inc-7" || r.Recovered().Empty() {
		t.Fatalf("ReadDisk: tag %q, empty %v", r.Tag(), r.Recovered().Empty())
	}
}

// In a steady stream of single-entry writes, each member writes its raft
// log once per entry, counted through the vfs seam, under both policies:
// a follower's Ready (the new entry and a hard state moving only the
// commit) is one write, and a leader's Ready that commits (a hard state
// moving only the commit, nothing else) is none, its hard state held and
// written with the next entry. Before, each was a write of its own: two
// writes per entry on every member, and one of them on the leader between
// the commit and the acknowledgement (issue 33: R1's tail). The log holds
// every entry and, once closed, the last commit.
func TestDiskSteadyStreamWritesOncePerEntry(t *testing.T) {
	for _, sync := range []bool{false, true} {
		mem := vfs.NewMem()
		var writes, syncs int
		count := errorfs.InjectorFunc(func(op errorfs.Op) error {
			if op.Path == "/g/raft.log" {
				switch op.Kind {
				case errorfs.OpWriteAt, errorfs.OpWrite:
					writes++
				case errorfs.OpSync:
					syncs++
				}
			}
			return nil
		})
		d, err := replica.OpenDisk(errorfs.New(mem, count), "/g/raft.log", sync)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Save(nil, entries(1, 1, 1), hardState(1, 1, 0)); err != nil {
			t.Fatal(err)
		}
		writes, syncs = 0, 0
		const n = 50
		for i := uint64(2); i < 2+n; i++ {
			// The follower's side: the entry, with the commit of the one before.
			if err := d.Save(nil, entries(i, i, 1), hardState(1, 1, i-1)); err != nil {
				t.Fatal(err)
			}
			// The leader's side: the commit of the entry, alone.
			if err := d.Save(nil, nil, hardState(1, 1, i)); err != nil {
				t.Fatal(err)
			}
		}
		if writes != n {
			t.Fatalf("sync %v: %d writes of the raft log for %d entries, want %d", sync, writes, n, n)
		}
		if want := map[bool]int{false: 0, true: n}[sync]; syncs != want {
			t.Fatalf("sync %v: %d fsyncs for %d entries, want %d", sync, syncs, n, want)
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		d2, err := replica.OpenDisk(mem, "/g/raft.log", sync)
		if err != nil {
			t.Fatal(err)
		}
		r := d2.Recovered()
		d2.Close()
		if len(r.Entries) != n+1 || r.HardState.GetCommit() != n+1 {
			t.Fatalf("sync %v: reopened with %d entries and commit %d, want %d and %d", sync, len(r.Entries), r.HardState.GetCommit(), n+1, n+1)
		}
	}
}
