package replica

import (
	"slices"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// KeepActive counts, for a leader's CheckQuorum, every follower that live
// reports alive as heard from, as a heartbeat answer would. The owner
// calls it when its failure detection is per node (node liveness) rather
// than per group: then a follower whose node is alive but whose answers
// are merely late (its shard is busy, the machine is starved) does not
// make the leader step down, which would start an election and add load
// to a node that is already behind. A leader cut off from a majority
// still steps down, one election timeout after node liveness declares
// the majority dead.
//
// Only the leader's bookkeeping of recent activity changes (and a
// follower known to lag is sent what it lacks, as on any heartbeat
// answer): no commit index, vote or read confirmation comes from it. It
// is a no-op on a member that does not lead, and fails only with
// ErrGroupFailed.
func (g *Group) KeepActive(live func(node uint64) bool) (err error) {
	if g.failed != nil {
		return g.failed
	}
	if g.rn == nil {
		return nil // a hibernating member does not lead
	}
	st := g.rn.BasicStatus()
	if st.RaftState != raft.StateLeader {
		return nil
	}
	defer g.guard(&err)
	term := st.HardState.GetTerm()
	for _, id := range g.cs.GetVoters() {
		if id == g.cfg.Node || !live(id) {
			continue
		}
		// The step can only fail for a message raft does not know.
		_ = g.rn.Step(&raftpb.Message{Type: raftpb.MsgHeartbeatResp.Enum(), From: new(id), To: new(g.cfg.Node), Term: new(term)})
	}
	return nil
}

// InSync reports, on the leader, the members in sync with it (Kafka's
// in-sync replicas): itself, and each voter that raft counts as recently
// active (heard from within the last election timeout, or kept active by
// KeepActive), that the leader replicates to normally (not probing, not
// sending a snapshot) and whose log the leader knows to reach within lag
// entries of the commit index. A follower cut off falls out once its
// activity lapses or the log moves lag entries past it, and returns once
// it answers and catches up. It is nil on a member that does not lead.
func (g *Group) InSync(lag uint64) []uint64 {
	if g.failed != nil || !g.IsLeader() {
		return nil
	}
	commit := g.rn.BasicStatus().HardState.GetCommit()
	voters := g.cs.GetVoters()
	out := []uint64{g.cfg.Node}
	g.rn.WithProgress(func(id uint64, typ raft.ProgressType, pr tracker.Progress) {
		if id == g.cfg.Node || typ != raft.ProgressTypePeer || !slices.Contains(voters, id) {
			return
		}
		if pr.RecentActive && pr.State == tracker.StateReplicate && pr.Match+lag >= commit {
			out = append(out, id)
		}
	})
	slices.Sort(out)
	return out
}
