package replica

import (
	"slices"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// LogState summarises a raft log as a Disk recovered it: what an operator
// asks of a group member's persisted state.
type LogState struct {
	Term, Vote, Commit uint64
	// SnapshotIndex and SnapshotTerm are the latest snapshot's (0: none).
	SnapshotIndex, SnapshotTerm uint64
	// FirstIndex and LastIndex bound the entries after the snapshot
	// (FirstIndex > LastIndex: none).
	FirstIndex, LastIndex uint64
	// Voters and Learners are the configuration as of the commit index:
	// the snapshot's, changed by the committed configuration entries
	// after it (as the member applies them when it restarts).
	Voters, Learners []uint64
}

// State summarises what the log held when it was opened.
func (r Recovered) State() LogState {
	var s LogState
	hs := r.HardState
	s.Term, s.Vote, s.Commit = hs.GetTerm(), hs.GetVote(), hs.GetCommit()
	md := r.Snapshot.GetMetadata()
	s.SnapshotIndex, s.SnapshotTerm = md.GetIndex(), md.GetTerm()
	s.FirstIndex, s.LastIndex = s.SnapshotIndex+1, s.SnapshotIndex
	if n := len(r.Entries); n > 0 {
		s.FirstIndex, s.LastIndex = r.Entries[0].GetIndex(), r.Entries[n-1].GetIndex()
	}
	cs := md.GetConfState()
	if cs == nil {
		cs = &raftpb.ConfState{}
	}
	for _, e := range r.Entries {
		if e.GetIndex() > s.Commit {
			break
		}
		if next := confAfter(cs, e); next != nil {
			next.Learners = cs.GetLearners()
			cs = next
		}
	}
	s.Voters, s.Learners = slices.Sorted(slices.Values(cs.GetVoters())), slices.Sorted(slices.Values(cs.GetLearners()))
	return s
}

// CommittedEntries calls fn with every committed entry after the
// snapshot that carries an owner's payload, in log order, unwrapped as
// Handle unwraps it for Handler.Apply (conf is set, with the payload the
// change's context, for a configuration change that carries one): an
// offline reader rebuilds the state machine from the snapshot and these,
// as a restarted member does. An entry too short for its envelope stops
// the walk with an error, as it fails Handle.
func (r Recovered) CommittedEntries(fn func(index, id uint64, payload []byte, conf bool) error) error {
	commit := r.HardState.GetCommit()
	for _, e := range r.Entries {
		if e.GetIndex() > commit {
			break
		}
		switch e.GetType() {
		case raftpb.EntryConfChange:
			var cc raftpb.ConfChange
			if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
				return err
			}
			if len(cc.GetContext()) > 0 {
				if err := fn(e.GetIndex(), 0, cc.GetContext(), true); err != nil {
					return err
				}
			}
		case raftpb.EntryNormal:
			id, payload, ok, err := unwrap(e)
			if err != nil {
				return err
			}
			if ok {
				if err := fn(e.GetIndex(), id, payload, false); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
