package shard

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/parkway-io/parkway/internal/replica"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

func raftEntries(from, to, term uint64) []*raftpb.Entry {
	var out []*raftpb.Entry
	for i := from; i <= to; i++ {
		out = append(out, &raftpb.Entry{Index: new(i), Term: new(term), Data: fmt.Appendf([]byte("proposal"), "e%d", i)})
	}
	return out
}

func raftSnap(index, term uint64, data string) *raftpb.Snapshot {
	return &raftpb.Snapshot{Data: []byte(data), Metadata: &raftpb.SnapshotMetadata{
		Index: new(index), Term: new(term), ConfState: &raftpb.ConfState{Voters: []uint64{1, 2, 3}}}}
}

func raftHS(term, vote, commit uint64) *raftpb.HardState {
	return &raftpb.HardState{Term: new(term), Vote: new(vote), Commit: new(commit)}
}

// raftState summarises a recovered raft log: snapshot, term and vote,
// entries, and (withCommit) the commit index, which a crash may set back
// to the last one synced.
func raftState(r replica.Recovered, withCommit bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "snap=%d/%s hs=%d/%d", r.Snapshot.GetMetadata().GetIndex(), r.Snapshot.GetData(),
		r.HardState.GetTerm(), r.HardState.GetVote())
	if withCommit {
		fmt.Fprintf(&b, "/%d", r.HardState.GetCommit())
	}
	b.WriteString(" ents=")
	for _, e := range r.Entries {
		fmt.Fprintf(&b, "%d.%d:%s ", e.GetIndex(), e.GetTerm(), e.GetData()[min(8, len(e.GetData())):])
	}
	return b.String()
}

// TestRaftLogsUnderTheBudget runs six replicated partitions' raft logs,
// kept where the shard keeps them (in the partition's directory, through
// its Location), in a store whose budget of 4 descriptors is below the
// number of logs: every save finds its file closed by the others' and
// reopens it. The workload saves entries and terms (synced), commit-only
// hard states (held back), compacts one log (a rewrite renamed over it)
// and closes and reopens another. For i = 0, 1, 2, … the i-th filesystem
// operation of the workload fails (reopens included), then the power is
// lost: every log reopens, never corrupt, holding what its last
// acknowledged save made durable, or the save that failed. When nothing
// fails, the logs closed cleanly reopen identically, commit included,
// and the store never went over its budget.
func TestRaftLogsUnderTheBudget(t *testing.T) {
	const budget, logs, rounds = 4, 6, 3
	kinds := []errorfs.OpKind{errorfs.OpOpen, errorfs.OpWriteAt, errorfs.OpSync, errorfs.OpTruncate,
		errorfs.OpRename, errorfs.OpRemove, errorfs.OpSyncDir, errorfs.OpMkdirAll, errorfs.OpReadAt, errorfs.OpStat}
	for i := int64(0); ; i++ {
		mem := vfs.NewMem()
		var armed atomic.Bool
		idx := errorfs.OnIndex(i, syscall.EIO, kinds...)
		fsys := errorfs.New(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
			if !armed.Load() {
				return nil
			}
			return idx.MaybeError(op)
		}))
		store, err := partition.NewFileStore(partition.FileConfig{Dir: "/data", FS: fsys, MaxOpenFiles: budget})
		if err != nil {
			t.Fatal(err)
		}
		paths := make([]string, logs)
		disks := make([]*replica.Disk, logs)
		var locFS vfs.FS
		var parts []partition.Partition
		for k := range logs {
			ns, err := metadata.NewNamespace(1, 1, uint32(k))
			if err != nil {
				t.Fatal(err)
			}
			p, err := store.Build(ns, 1)
			if err != nil {
				t.Fatal(err)
			}
			parts = append(parts, p)
			if err := p.Sync(); err != nil { // the directory is durable first, as replicate does
				t.Fatal(err)
			}
			var dir string
			locFS, dir = p.(partition.Located).Location()
			paths[k] = filepath.Join(dir, raftLogName)
			if disks[k], err = replica.OpenDisk(locFS, paths[k], true); err != nil {
				t.Fatal(err)
			}
			if err := disks[k].Save(raftSnap(1, 1, ""), nil, raftHS(1, 0, 1)); err != nil {
				t.Fatal(err)
			}
		}
		// acked[k] is log k's state as its last acknowledged step left it
		// (commit left out: held back, it is not durable); tried[k] the
		// state a failed step was making.
		acked := make([]string, logs)
		tried := make([]string, logs)
		for k := range logs {
			acked[k] = "snap=1/ hs=1/0 ents="
		}
		final := make([]string, logs) // with the commit: for the clean reopen
		ents := make([]string, logs)
		snaps := make([]string, logs)
		for k := range logs {
			snaps[k] = "snap=1/"
		}
		armed.Store(true)
		step := func(k int, want string, f func() error) bool {
			tried[k] = want
			if err := f(); err != nil {
				if !idx.Fired() {
					t.Fatalf("op %d: log %d: %v with nothing injected", i, k, err)
				}
				return false
			}
			acked[k] = want
			return true
		}
		ok := true
	work:
		for r := range uint64(rounds) {
			for k := range logs {
				lo, hi := 2+2*r, 3+2*r
				ents[k] += fmt.Sprintf("%d.2:e%d %d.2:e%d ", lo, lo, hi, hi)
				want := snaps[k] + " hs=2/1 ents=" + ents[k]
				if ok = step(k, want, func() error { return disks[k].Save(nil, raftEntries(lo, hi, 2), raftHS(2, 1, lo-1)) }); !ok {
					break work
				}
				final[k] = fmt.Sprintf("%s hs=2/1/%d ents=%s", snaps[k], lo-1, ents[k])
			}
			for k := range logs { // commit only: held back
				want := acked[k]
				if ok = step(k, want, func() error { return disks[k].Save(nil, nil, raftHS(2, 1, 3+2*r)) }); !ok {
					break work
				}
				final[k] = fmt.Sprintf("%s hs=2/1/%d ents=%s", snaps[k], 3+2*r, ents[k])
			}
			if r != 1 {
				continue
			}
			// Log 0 is compacted behind a snapshot at 3.
			snaps[0], ents[0] = "snap=3/s3", "4.2:e4 5.2:e5 "
			want := snaps[0] + " hs=2/1 ents=" + ents[0]
			if ok = step(0, want, func() error {
				return disks[0].Rewrite(raftSnap(3, 2, "s3"), raftHS(2, 1, 5), raftEntries(4, 5, 2))
			}); !ok {
				break work
			}
			final[0] = fmt.Sprintf("%s hs=2/1/5 ents=%s", snaps[0], ents[0])
			// Log 1 is closed and opened again.
			if ok = step(1, acked[1], func() error {
				if err := disks[1].Close(); err != nil {
					return err
				}
				d, err := replica.OpenDisk(locFS, paths[1], true)
				disks[1] = d
				if err == nil && raftState(d.Recovered(), true) != final[1] {
					t.Fatalf("op %d: log 1 reopened as %s, want %s", i, raftState(d.Recovered(), true), final[1])
				}
				return err
			}); !ok {
				break work
			}
		}
		armed.Store(false)
		after := mem.Crash()
		for k := range logs {
			d, err := replica.OpenDisk(after, paths[k], true)
			if err != nil {
				t.Fatalf("op %d failed: log %d does not reopen after a power loss: %v", i, k, err)
			}
			got := raftState(d.Recovered(), false)
			_ = d.Close()
			if got != acked[k] && got != tried[k] {
				t.Fatalf("op %d failed: log %d recovered %s, want %s (or %s)", i, k, got, acked[k], tried[k])
			}
		}
		// (A failed operation that nothing reports is a best-effort
		// removal of a compaction's leftover temporary file.)
		if !idx.Fired() {
			// Nothing failed: closed cleanly, every log reopens exactly.
			st := store.HandleStats()
			if st.OverBudget != 0 || st.Reopens == 0 || st.Evictions == 0 {
				t.Fatalf("HandleStats = %+v: want reopens and evictions, nothing over the budget of %d", st, budget)
			}
			for k := range logs {
				if err := disks[k].Close(); err != nil {
					t.Fatal(err)
				}
				d, err := replica.OpenDisk(mem, paths[k], true)
				if err != nil {
					t.Fatal(err)
				}
				if got := raftState(d.Recovered(), true); got != final[k] {
					t.Fatalf("log %d reopened as %s, want %s", k, got, final[k])
				}
				_ = d.Close()
			}
			for _, p := range parts {
				_ = p.Close()
			}
			if i < 20 {
				t.Fatalf("the workload took only %d operations", i)
			}
			return
		}
		for k := range logs {
			if disks[k] != nil {
				_ = disks[k].Close()
			}
		}
		for _, p := range parts {
			_ = p.Close()
		}
	}
}
