// Package shard runs one shard: a pump goroutine that owns a set of
// partitions and a bounded inbox of frames addressed to them, with a
// waited lane beside it for the frames of callers that wait for their
// answers (lane.go).
//
// The pump is the only goroutine that touches the shard's partitions, its
// park buffer and its tombstones, so none of them needs a lock of its own,
// with one exception that keeps the rule: a waiting caller whose frame
// finds the pump waiting with nothing queued runs the pump's unit of work
// for it itself, holding the lock the pump holds whenever it works
// (inline.go; not in a cluster, a manual or a pinned shard). It takes
// control operations (the reconciler's InsertOwned, Tombstone, RemoveOwned,
// SetRow, Sweep, Inspect) before inbox frames, so a materialised partition
// starts serving before the next request is looked at.
//
// The materialisation barrier lives here. A frame for a namespace this
// shard does not hold yet is parked, stamped with the committed
// created_revision at park time (none if the local metadata does not know
// the namespace). When the partition lands at epoch E, its parked frames are
// served at once, in arrival order, ahead of anything still in the inbox;
// frames stamped with another epoch are rejected as stale. Parked frames are
// bounded in count and resident bytes, aged by reconciler passes, and always
// answered.
//
// # Layout
//
// A Shard is the pump and what only the pump does: control operations
// and the barrier (park buffer, fences, tombstones: shard.go, control.go,
// park.go), routing (placement.go) and serving an owned partition's
// frames locally (shard.go, coalesce.go). Three pump-owned parts hold
// state of their own, each a type with its own methods:
//
//   - raftGroups (raftgroups.go) hosts the raft groups of the replicated
//     partitions, one per partition (multi-raft): a group's creation and
//     removal, peers' messages, Ready handling, proposals and leader
//     reads (replication.go, groupcommit.go), the raft tick and
//     quiescence with node liveness (quiesce.go), who stands for
//     election (converge.go; groups.Elections schedules the elections in
//     bounded batches), leadership balance (balance.go), moves (move.go)
//     and catch-up (catchup.go). A partition's replicated state
//     is its owned.rep (replicated.go); groupHandler applies the entries
//     a group commits to the partition (replication.go).
//   - commitGroup (commitgroup.go) makes appends durable before they are
//     answered: the FsyncAlways group commit, journal stages and interval
//     syncs (durability.go, groupsync.go).
//   - waitingPolls (polls.go) holds the waiting polls (wait.go).
//
// None of the parts holds the shard: each reaches it through a narrow
// interface of what it does to it (answer, deny, fence, and a few
// checks of its own; owner.go), which the shard implements.
//
// The mechanisms every raft group needs whoever hosts it (stepping a
// peer's message and handling a Ready, leader reads, quiescence
// decisions, liveness verdicts, the compaction trigger, a move's
// configuration changes, the awake set, the election scheduler) are
// internal/groups', shared with the metadata group.
//
// # Manual mode
//
// With Config.Manual the shard runs no goroutine and is driven by hand,
// like etcd raft's RawNode: control operations issued through the exported
// methods are applied inline on the caller's goroutine, and Step does one
// unit of pump work (a control operation, else one inbox frame, else the
// waited lane's frames, else a due timer) without blocking and reports whether there was any. The pump and
// Step share every unit of work, so a manual shard behaves exactly as a
// started one; only the choice of what runs next moves to the driver. The
// deterministic simulator (internal/sim) drives every shard this way from
// one seeded RNG.
//
// # Polls
//
// A poll resolves its start position (StartKind, with the Reset policy
// for a consumer's stored offset) against the partition. One that asks to
// wait (Request.MaxWait) and is not yet satisfied is registered on its
// partition and answered by the append, group-commit fsync or raft apply
// that satisfies it, by the shard's single wait timer at its deadline, or
// with an error when the partition goes away, is truncated past it, or
// the shard closes (wait.go). A manual shard runs the wait timer as a Step
// unit like its other timers.
//
// Every client frame gets exactly one answer on its reply channel: a result
// or a typed error. Errors that wrap ErrRetry mean "retry here shortly"; the
// Node's client side retries them in place until its deadline.
package shard
