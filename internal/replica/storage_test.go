package replica

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// TestLogStorageAgreesWithMemoryStorage drives the group's raft log and
// raft's own MemoryStorage, which it replaces, through the same random
// appends (overwriting suffixes included), hard states, snapshots
// created and applied and compactions, and holds every answer raft can
// ask for to be the same.
func TestLogStorageAgreesWithMemoryStorage(t *testing.T) {
	for seed := range uint64(200) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { checkLogStorage(t, seed) })
	}
}

func checkLogStorage(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 33))
	ours, theirs := &logStorage{}, raft.NewMemoryStorage()
	start := &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: new(uint64(1)), Term: new(uint64(1)),
		ConfState: &raftpb.ConfState{Voters: []uint64{1, 2, 3}}}}
	if rng.IntN(4) > 0 { // else both start empty, as a joiner's
		sameErr(t, "initial snapshot", ours.ApplySnapshot(proto.Clone(start).(*raftpb.Snapshot)), theirs.ApplySnapshot(start))
	}
	term := uint64(1)
	for step := range 300 {
		last, _ := theirs.LastIndex()
		first, _ := theirs.FirstIndex()
		switch op := rng.IntN(10); {
		case op < 5: // append, from anywhere in the log or just past it
			at := first + uint64(rng.IntN(int(last-first+2)))
			if rng.IntN(3) == 0 {
				term++
			}
			var ents []*raftpb.Entry
			for i := range uint64(1 + rng.IntN(4)) {
				e := &raftpb.Entry{Index: new(at + i), Term: new(term), Type: new(raftpb.EntryNormal), Data: make([]byte, rng.IntN(40))}
				ents = append(ents, e)
			}
			if at > 1 && rng.IntN(8) == 0 {
				ents = append([]*raftpb.Entry{{Index: new(at - 1), Term: new(term)}}, ents...) // starts before the log's first index
				if at-1 < first {
					ents[0].Term = new(uint64(0))
				}
			}
			sameErr(t, fmt.Sprintf("step %d append", step), ours.Append(ents), theirs.Append(ents))
		case op == 5:
			hs := &raftpb.HardState{Term: new(term), Vote: new(uint64(rng.IntN(3))), Commit: new(last)}
			sameErr(t, "hard state", ours.SetHardState(hs), theirs.SetHardState(hs))
		case op == 6 && last >= first:
			i := first + uint64(rng.IntN(int(last-first+1)))
			cs := &raftpb.ConfState{Voters: []uint64{1, 2, uint64(3 + rng.IntN(2))}}
			if rng.IntN(2) == 0 {
				cs = nil
			}
			data := []byte(fmt.Sprint(step))
			a, errA := ours.CreateSnapshot(i, cs, data)
			b, errB := theirs.CreateSnapshot(i, cs, data)
			sameErr(t, fmt.Sprintf("step %d create snapshot at %d", step, i), errA, errB)
			if errA == nil && !proto.Equal(a, b) {
				t.Fatalf("step %d: created snapshot %v, MemoryStorage %v", step, a, b)
			}
		case op == 7 && last >= first:
			i := first - 1 + uint64(rng.IntN(int(last-first+2)))
			sameErr(t, fmt.Sprintf("step %d compact at %d", step, i), ours.Compact(i), theirs.Compact(i))
		case op == 8 && rng.IntN(4) == 0:
			term++
			at := max(last, 1) + uint64(rng.IntN(3)) - 1
			snap := &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: new(at), Term: new(term),
				ConfState: &raftpb.ConfState{Voters: []uint64{1, 2, 3}}}, Data: []byte("state")}
			sameErr(t, fmt.Sprintf("step %d apply snapshot at %d", step, at), ours.ApplySnapshot(proto.Clone(snap).(*raftpb.Snapshot)), theirs.ApplySnapshot(snap))
		}
		compareLogs(t, step, ours, theirs)
	}
}

func sameErr(t *testing.T, what string, ours, theirs error) {
	t.Helper()
	if (ours == nil) != (theirs == nil) || (ours != nil && !errors.Is(ours, theirs)) {
		t.Fatalf("%s: %v, MemoryStorage %v", what, ours, theirs)
	}
}

// compareLogs asks both logs everything raft may ask.
func compareLogs(t *testing.T, step int, ours *logStorage, theirs *raft.MemoryStorage) {
	t.Helper()
	fa, _ := ours.FirstIndex()
	fb, _ := theirs.FirstIndex()
	la, _ := ours.LastIndex()
	lb, _ := theirs.LastIndex()
	if fa != fb || la != lb {
		t.Fatalf("step %d: first/last %d/%d, MemoryStorage %d/%d", step, fa, la, fb, lb)
	}
	for i := fb - 1; i <= lb+1; i++ {
		ta, errA := ours.Term(i)
		tb, errB := theirs.Term(i)
		sameErr(t, fmt.Sprintf("step %d term(%d)", step, i), errA, errB)
		if ta != tb {
			t.Fatalf("step %d: term(%d) = %d, MemoryStorage %d", step, i, ta, tb)
		}
		for _, max := range []uint64{0, 60, 1 << 20} {
			if i > lb {
				break
			}
			a, errA := ours.Entries(i, lb+1, max)
			b, errB := theirs.Entries(i, lb+1, max)
			sameErr(t, fmt.Sprintf("step %d entries(%d, %d, %d)", step, i, lb+1, max), errA, errB)
			if len(a) != len(b) || cap(a) != len(a) {
				t.Fatalf("step %d: entries(%d, %d, %d) has %d (cap %d), MemoryStorage %d", step, i, lb+1, max, len(a), cap(a), len(b))
			}
			for k := range a {
				if !proto.Equal(a[k], b[k]) {
					t.Fatalf("step %d: entry %d is %v, MemoryStorage %v", step, k, a[k], b[k])
				}
			}
		}
	}
	hsA, csA, _ := ours.InitialState()
	hsB, csB, _ := theirs.InitialState()
	if !proto.Equal(hsA, hsB) || !proto.Equal(csA, csB) {
		t.Fatalf("step %d: initial state %v %v, MemoryStorage %v %v", step, hsA, csA, hsB, csB)
	}
	sa, _ := ours.Snapshot()
	sb, _ := theirs.Snapshot()
	if !proto.Equal(sa, sb) {
		t.Fatalf("step %d: snapshot %v, MemoryStorage %v", step, sa, sb)
	}
}

// A new group's initial snapshot costs its log nothing beyond the
// configuration the Group holds anyway (issue 33: MemoryStorage kept a
// reflective copy of the whole snapshot): the log shares the Group's
// ConfState, and raft still reads the snapshot whole.
func TestNewGroupLogSharesItsConfiguration(t *testing.T) {
	g, err := New(Config{Group: 1, Node: 1, Peers: []uint64{1, 2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	if g.storage.snapConf != g.cs {
		t.Fatal("the raft log keeps a copy of the group's configuration")
	}
	snap, _ := g.storage.Snapshot()
	if md := snap.GetMetadata(); md.GetIndex() != 1 || md.GetTerm() != 1 || len(md.GetConfState().GetVoters()) != 3 {
		t.Fatalf("initial snapshot %v", snap)
	}
	if index, data := g.Snapshot(); index != 1 || data != nil {
		t.Fatalf("Snapshot() = %d, %q", index, data)
	}
}

// The storage keeps the hard state's numbers, not the message raft hands
// it: each Ready's hard state is a protobuf message of four heap objects
// (the message and a pointer per field), which an idle replica would
// hold for every garbage collection to mark (issue 33). So a change to
// the message after it was stored does not show, and the message built
// again is the one stored, field presence included (a snapshot written
// to disk carries it as it is).
func TestStorageKeepsTheHardStatesNumbers(t *testing.T) {
	var s logStorage
	if hs, _, _ := s.InitialState(); hs != nil {
		t.Fatalf("hard state %v before any was stored, want none", hs)
	}
	m := &raftpb.HardState{Term: new(uint64(3)), Vote: new(uint64(2)), Commit: new(uint64(7))}
	if err := s.SetHardState(m); err != nil {
		t.Fatal(err)
	}
	*m.Term, *m.Commit = 9, 9 // raft's message, reused or dropped by its owner
	want := &raftpb.HardState{Term: new(uint64(3)), Vote: new(uint64(2)), Commit: new(uint64(7))}
	if hs, _, _ := s.InitialState(); !proto.Equal(hs, want) {
		t.Fatalf("hard state %v after the stored message changed, want %v", hs, want)
	}
	part := &raftpb.HardState{Term: new(uint64(4))}
	if err := s.SetHardState(part); err != nil {
		t.Fatal(err)
	}
	if hs, _, _ := s.InitialState(); !proto.Equal(hs, part) || hs.Vote != nil || hs.Commit != nil {
		t.Fatalf("hard state %v, want %v with vote and commit unset", hs, part)
	}
}
