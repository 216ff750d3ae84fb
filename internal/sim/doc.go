// Package sim is parkway's deterministic simulator: it runs the real
// engine — Manual shards, the router and its table, the default
// reconcilers, durable metadata and the file store — on an in-memory
// filesystem under a manual clock, and takes every scheduling choice from
// one seeded RNG. The same seed gives the same run, byte for byte: every
// send, step, reconcile pass, answer, commit, clock move and fault is an
// event of a trace whose FNV-64a hash Run returns.
//
// # What a run does
//
// Run builds one node the way parkway.Open does (metadata.Durable and a
// partition.FileStore on a vfs.MemFS, orphans removed, a router over a
// Table, Config.Manual shards, one reconciler.Partitions per shard) and
// then, for Config.Steps scheduler steps, picks one action at random:
//
//   - a client acts: several concurrent clients create, delete and
//     recreate streams and topics, create partitions, produce single
//     messages and batches, poll (from an offset or a consumer's), store
//     and read consumer offsets. Data operations are issued right after
//     the commits they depend on, before any reconciler has run; a few
//     come from clients whose view lags and still target a deleted
//     partition. Requests are shard.Frames sent through the router (TrySend; a refusal is an
//     answer), and "retry here" answers are retried in place with backoff
//     until a deadline, re-resolving the namespace first, as the Node does;
//   - a shard takes one Step;
//   - a shard's reconciler runs one pass (on a commit wake, on its period,
//     or spontaneously);
//   - the virtual clock advances.
//
// Faults fire with the probabilities of Config.Faults: a burst of requests
// at one shard against a small inbox (router.ErrFull), ENOSPC on the data
// disk for a while (errorfs.NewSwitchFunc), a one-shot EIO on an fsync or a
// torn write (errorfs.OnIndex, errorfs.TornWrite), a slow partition build
// (the store wrapper runs further scheduler steps inside Build, so the
// world moves on while the reconciler's pass is blocked in it, as on a
// real node), and a node crash: a power loss (MemFS.Crash: the node is
// rebuilt from the durable state; topics are FsyncAlways) or a process
// crash (the page cache survives). Then the run quiesces: no new work, no
// faults, shards stepped until idle, passes run while the clock advances
// past the park age bound (restarting the node if a partition is fenced
// after a failed fsync), and every committed partition is read back
// through the router.
//
// # Invariants
//
// Checked on every run, online where possible (Run stops at the first
// violation and reports it with the seed and the replay command):
//
//  1. Every client request is answered exactly once (a router refusal is
//     an answer; a request in flight at a crash is answered by the crash).
//  2. No message produced against one incarnation is ever readable in
//     another: a produce is stamped with the committed created_revision
//     when a shard takes it from its inbox (the simulator mirrors every
//     inbox), and the storage tap checks every append against that stamp;
//     every read is checked against what was appended to that incarnation.
//  3. No acknowledged message is lost (across crashes too) and offsets are
//     dense: acks are checked against where the storage tap saw the
//     messages land, reopened partitions against the acks, and the final
//     read of every committed partition against the whole history.
//  4. At quiescence every park buffer is empty and no frame was dropped
//     for a reason that no injected fault explains: full (inbox bursts),
//     build_failed (disk faults), shutdown and disconnected (crashes) only
//     when those fired; park_expired, removed and not_owner are answers of
//     normal convergence (deletes racing requests); any other reason —
//     delivery_failed, unroutable, misrouted — is always a violation.
//  5. Each partition incarnation's produce/poll/offset history, as the
//     clients saw it, is linearizable (porcupine) against an append-only
//     log with consumer offsets.
//
// # Replaying
//
// A failed run reports its seed and the command that replays it,
// `go test ./internal/sim -run TestSimulation -sim.seed=<S>`; add
// -v -sim.trace to print its event trace. `-sim.seeds N` (and
// `-sim.start S`) runs N seeds instead of the default range.
//
// # Scope
//
// This first version simulates one node. Multi-node faults — message
// drop, delay, duplication and reordering on the bus, network partitions —
// and replicated partitions are not simulated yet; they come with
// replication. Topics are FsyncAlways only (the interval and never
// policies are not exercised), and purge, truncate, retention and topic
// reconfiguration are not in the workload.
package sim
