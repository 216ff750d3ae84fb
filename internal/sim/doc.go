// Package sim is parkway's deterministic simulator: it runs the real
// engine — Manual shards, the router and its table, the default
// reconcilers, the file store on a fault-injecting in-memory filesystem,
// and in cluster mode the raft groups and the in-memory bus — under a
// virtual clock, each node reading its own clock (see Clocks), and takes
// every scheduling choice from one seeded RNG.
// The same seed gives the same run, byte for byte: every send, step,
// delivery, reconcile pass, answer, commit, clock move and fault is an
// event of a trace whose FNV-64a hash Run returns.
//
// # Nodes
//
// A run has one or more nodes (Config.Nodes), each a value of one node
// type (node.go) built by host.New from the configuration parkway.Open
// fills in (node.hostConfig), of one of two engine kinds: the
// single-node engine (one node: metadata.Durable on its own disk, no
// raft, no bus) or a cluster member (the metadata raft group's member,
// replicated shards, an endpoint on the in-memory bus). Only where the
// engines differ does the node's kind matter: metadata through raft or
// the durable store, raft traffic and the bus. The mechanisms a node has
// in either kind are the node's: opening the engine and taking what it
// built (node.opened), the router's view of each shard's inbox (mirror),
// one shard step (node.step) and one reconcile pass (node.pass), the
// disk's faults — a full disk, a one-shot EIO or torn write, the lies of
// lie.go — and what a crash leaves of the disk (node.crashDisk), a
// restart carrying over the node's disk, clock and the simulator's
// record of it.
//
// # One harness
//
// A run is one value of one harness type, sim, whatever its nodes: a
// single-node run is a run of one node of the single-node engine kind,
// without a network (sim.net nil); a cluster run has a network and two
// or more members. The run's state (base.go: the configuration, the RNG,
// the virtual clock, the trace, the workload's history, the oracle and
// the run's nodes, sim.nodes: the one node, or the cluster's members in
// id order; harness.go: what a cluster adds — its network, its faults'
// spells, membership changes, forwards and read barriers in flight) and
// the invariants (invariant*.go, one registry, reading sim.nodes) are one
// for one node and many, and so is the run's course (sim.run, then
// sim.drive: the steps, one scheduler step, sim.tick in sched.go —
// faults, then one action: a client acts, the clock moves, or one unit
// of ready engine work runs on one node, a single node's shards
// scheduled per unit on their watched clocks as a member's are — then
// quiescence's course sim.quiesce — faults off, settle, the checks of
// the settled run, the final reads with the final consumer-offset reads
// (sim.finalReads), a restart when a single node's read met a fenced
// partition — and its loop sim.settleLoop with each node's idle check,
// node.idle, and the listing of parked frames, sim.parked; the wait for
// a final read's answer, sim.awaitFinal; the final checks), a crash's
// draw and its answer to the requests in flight on the node
// (sim.powerLoss, sim.abandon), the clock's moves (sim.advance), the
// Result (sim.result), and the clients' mechanisms: a client's next
// action (sim.clientAct, sim.act), a data operation's start through its
// home node (sim.dataOp, sim.callData), a try's send (sim.sendTo), and
// the Node's client call's wait, end and retry in place (sim.callStep,
// sim.retry, sim.retryCall). So are the handling of an answer
// (sim.onAnswer: the checks on it, then the Node's client call deciding
// what follows, sim.follow) and the store tap (tap.go: the store every
// node opens its partitions through, slowing builds and checking what
// they open, and the tap on every partition, checking each append and
// read and the incarnation fence where a client is served).
//
// Each mechanism is one method (harness.go holds those both engine
// kinds run through), and where a single node and a cluster member
// really differ the method decides it where it lives: by the node's
// engine kind (node.replicated) or by what the run has (a network or
// not). What differs is what the engines do: a single node reopens at
// once after a crash, a cluster member stays down a while and its faults
// (network spells, a misbehaving peer, joins and removals) are rolled in
// the cluster's own order (sim.stepFaults); a single node commits
// metadata to its durable store, a member proposes it to its group; a
// cluster's quiescence drains the bus and waits for its replicas to
// converge (sim.settleRound, sim.settle). Where the two are different
// mechanisms they have names of their own: what an acknowledgement, a
// build, an append or a read must match in the oracle — one log per
// incarnation on a single node, whose unsynced tail a power loss may
// take (checkSoleAck, onAppend, onRead, verifyReopen, removedSole), one
// copy per replica of the log its group agrees on in a cluster
// (checkReplicaAck, onReplicaAppend, onReplicaRead, verifyReplicaReopen)
// — and how a partition a lie damaged is read at the end (a single
// node's offset by offset, readDamaged; a cluster's liar's copy is read
// as any other and its damage excused, damageReported). The storage tap
// reports to the harness through the tapOracle interface (tap.go), the
// narrow view the store and partition wrappers have of it.
//
// # Single-node mode
//
// Run (Config.Nodes 0 or 1) builds one node the way parkway.Open does
// (metadata.Durable and a partition.FileStore on a vfs.MemFS, orphans
// removed, a router over a Table, Config.Manual shards, one
// reconciler.Partitions per shard). Its store offers what the file store
// of a node parkway.Open starts offers, deferred builds and repairs
// included: a new journaled partition is built deferred (DESIGN
// behaviour 32), with no directory, its acknowledged records in the
// journal only until its files are created, and the oracle checks it
// there (a removal by the orphan sweep of a directory listed at another
// incarnation leaves the committed one's data, judged at its next
// build). It then, for Config.Steps scheduler
// steps, picks one action at random:
//
//   - a client acts: several concurrent clients create, delete and
//     recreate streams and topics, create partitions, produce single
//     messages and batches, poll (from an offset or a consumer's), store
//     and read consumer offsets. Data operations are issued right after
//     the commits they depend on, before any reconciler has run; a few
//     come from clients whose view lags and still target a deleted
//     partition. Requests are shard.Frames sent through the router (TrySend; a refusal is an
//     answer), and what follows an answer is the Node's client call
//     deciding (host.CallDriver, the shipped driver): "retry here" is
//     retried in place with its backoff until its deadline, the
//     namespace re-resolved first;
//   - a shard takes one Step;
//   - a shard's reconciler runs one pass (on a commit wake, on its period,
//     or spontaneously);
//   - the virtual clock advances.
//
// Faults fire with the probabilities of Config.Faults: a burst of requests
// at one shard against a small inbox (router.ErrFull), ENOSPC on the data
// disk for a while (errorfs.NewSwitchFunc), a one-shot EIO on an fsync or a
// torn write (errorfs.OnIndex, errorfs.TornWrite), the node's clock
// stepped, strobing or drifting (see Clocks), a slow partition build
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
// # Disks that lie (single node)
//
// The default single-node faults include Config.Faults.Lie (DefaultLie,
// about four lies a seed; TestSimulation, and
// TestBehaviour28SimulationLyingDisk with -sim.liex and -sim.liekinds):
// the disk also lies — succeeds with the wrong bytes — about a file of the
// data directory outside the metadata log, picked in proportion to its
// size (lie.go, built from errorfs's lying faults): while the node is down
// after a power loss, a bit flipped in the stored bytes
// (errorfs.FlipStored), the file cut short (errorfs.TruncateStored) or
// rolled back to a copy of the same incarnation's file saved at an earlier
// power loss (errorfs.SaveCopy, Copy.Restore); while it runs, one of the
// next writes of the file misdirected up to 8 KiB away and reported done
// (errorfs.MisdirectedWrite), a bad sector failing every read of a range
// with EIO (errorfs.Sectors) or a bit flipped on every read of a byte
// (errorfs.Flips), until quiescence. FaultRates.LieKinds picks kinds
// (-sim.liekinds, -sim.liex in the test). The invariant is detection, as
// one node has no other copy: an acknowledged message is read intact at
// its offset or its read fails with a typed error (a
// *partition.CorruptError, or the EIO of a bad sector) — checked at every
// reopen offset by offset, and by final reads that go on past each
// offset reported damaged; a read that succeeds with less than the log
// holds, a reused offset, a wrong payload, or damage reported where no lie
// touched the incarnation's files are violations. The incarnations a lie
// touched are left out of the linearizability check (reads stop below
// damage by design). A read below the log's end that returns nothing
// without an error is a silent loss. Each kind is shown effective by a
// broken build that ignores damage (BreakSwallowDamage,
// BreakRebuildOnDamage; TestBehaviour28LyingDiskCatchesSwallowedDamage),
// with lies of that kind alone, on the partitions' files
// (FaultRates.LiePartitionsOnly), without DiskError (whose EIO the broken
// builds swallow as well): a seed counts only if a lie of the kind fired
// in it and the same seed passes with its lies disarmed
// (FaultRates.LiesDisarmed: the same draws, the disk left intact) and
// without the broken build.
//
// What holds on one node, and what does not yet. Damage the journal
// replay meets at open (a journal record past its partition's log's end,
// a damaged consumer offset file, a damaged journal frame) fences the
// partitions it concerns and the node opens (package partition,
// replayJournals); a partition left unusable by a failed write-behind is
// fenced and rebuilt whether a read or an append meets it; a segment's
// last record whose length has one bit flipped (stored or on read) is
// damage, not a torn write; the end of the last segment cut off or
// rolled back below its synced end (the partitions manifest, the
// journal's entries and synced-end marks) is reported and fenced: a loss
// there fails the seed; so is a journal file cut short or rolled back
// below the end its own synced-end mark records (package partition,
// journal_mark.go: the partitions held are fenced at their log's end, a
// loss reported), and an incarnation file cut short, emptied or rolled
// back where the manifest or the journal proves the incarnation synced
// (its directory is kept, its build refused). Two limits remain,
// classified (known.go) and skipped by TestSimulation and the lying-disk
// test unless -sim.known: a lie on a journal file at or past the end its
// mark records (the mark's window of up to two synced writes, knownJournalDamage), and
// an incarnation file damaged when a lie also touched the manifest or
// the journal that proved it synced (knownIncarnationDamage). A
// misdirected write aimed before the start of its file is answered as a
// failed write (FaultCounts.LieWriteErrors), and explains the
// build_failed drops of the rebuild it causes (found by seed 8597;
// TestFailedMisdirectWriteExplainsBuildFailedDrops pins a seed that
// reaches it).
//
// # Disks that lie (cluster)
//
// With Config.Faults.Lie in cluster mode (the default cluster faults,
// ClusterLie; TestClusterSimulation, TestBehaviour28ClusterLyingDisk) one founder per seed, picked by the
// seed, is the liar — a minority of every group, whose other replicas
// stay honest: a partition placed on fewer than three nodes is not lied
// to, judged when a lie picks its file and again when an armed one would
// fire (a later incarnation may have two replicas) — and its disk lies with the single-node kinds and code
// (clie.go over lie.go): stored flips, truncations and rollbacks while
// it is down after a power loss (the lie brings it down), misdirected
// writes, bad sectors and flips on read while it runs, on any file of its
// data directory — segments, indexes, consumer offsets, incarnation
// files, each partition's raft log, the journal — but the metadata
// group's raft log, LOCK and IDENTITY. Every cluster invariant is checked
// as always: no acknowledged message lost or changed, no offset reused,
// every read returning what the log holds at each offset (a read below a
// copy's end that returns nothing without an error is a silent loss),
// every replica whole at quiescence. Damage may be reported — a typed
// *partition.CorruptError or a raft log refused as corrupt, to a client,
// at a reopen or in the final reads — only by the liar, for a partition a
// lie touched; anywhere else it is a violation. The liar's damaged
// replicas are repaired from their peers as the engine repairs them (the
// simulated store forwards the reconciler's SetAside and Reincarnate to
// the file store): its copy is set aside and fetched again, a damaged
// incarnation file rewritten from the metadata when the raft log's tag
// names the incarnation — and otherwise (the log damaged too, untagged,
// or another incarnation's) the replica re-seeded under a new raft id
// (seed 20382) — and every replica must be whole at quiescence. A
// damaged raft log whose sync mark, or else whose valid prefix, is
// tagged with an earlier incarnation is that incarnation's: the next
// incarnation's build discards its directory (seeds 390 and 20325; the
// mark for a log cut below its tag, seeds 273 and 64 on intermediate
// trees).
// A copy whose raft log a lie damaged — bytes flipped in the log, or the
// log cut short or rolled back, which its sync mark (package replica,
// mark.go) tells from a torn tail, or its mark damaged — lost its votes
// and acknowledged entries: it is re-seeded from its peers under a new
// raft id (metadata.ReseedReplica), as the engine does, and must be whole
// at quiescence like any other (it used to be refused by design and the
// cluster never settled; nothing excuses that now). A damaged
// incarnation file cut short that gets the liar's copy, raft state
// included, removed while it is a replica is a known limit (known.go,
// knownReplicaIncarnationDamage). A raft log cut or rolled back from a
// byte at or past the size its sync mark records loses only bytes no
// acknowledgement or vote rests on (the mark is durable before raft acts
// on a synced write, mark.go) and reads as a torn tail, excused by
// nothing; lies.raftLogHit judges each cut and rollback against the mark
// on the liar's disk at the time, and says so in the trace. (While the
// mark lagged by one synced write, such a cut made the replica forget
// entries it acknowledged or a vote: knownRaftLogWindow, seeds 326, 974,
// 2930, 4899, 20250, 20750, now gone.) A cut the mark
// reports is refused by the next build, which records the refusal on
// disk at once (shard.RefuseRaftLog: the log and its mark set aside in
// raft-refused, synced before the re-seed is reported), and every later
// build refuses the replica whatever the mark says: cluster seed 1901,
// a power loss right after the refusal and a lie rolling the mark back
// short of the cut, once built the replica under its raft id without
// entries it acknowledged, when the refusal lived in memory only. Only
// a mark rolled back short of the cut before any build refused the cut
// log still reads that way: the log and its mark rolled back together,
// which mark.go says no mark catches (knownRaftLogMarkRollback;
// lies.raftMarkHit; no seed is known to reach it).
// A cut or rolled-back raft log used to
// look torn, the replica forgetting votes and acknowledged entries (an
// open bug, knownRaftLogCut, until the mark). The replica's partition
// wrapper forwards partition.Damaged and partition.WriteFenced: hiding
// them, it kept the reconciler from repairing a copy whose build found
// damage (seed 150 stayed short of the log for good). A damaged raft log no longer fails the
// other partitions' builds of its shard: nothing excuses that.
// BreakSwallowDamage, the liar answering its clients' reads that meet
// damage with nothing, is caught by bad sectors and by flips on read,
// each alone, under the single-node rule
// (TestBehaviour28ClusterLyingDiskCatchesSwallowedDamage); the lies of the
// stored bytes and misdirected writes are found when the liar reopens a
// partition and repaired before a client reads them.
//
// # Cluster mode
//
// With Config.Nodes > 1 (DefaultClusterConfig: three nodes, five for one
// seed in four, one or two shards each) Run builds every node with
// host.New in manual mode — the
// engine parkway.Open starts, on a data directory, each on its own disk:
// the metadata store rebuilt from the metadata group's raft log, the
// orphan sweep, the file store, replicated shards and reconcilers, and the
// node's member of the metadata raft group with its deduplication,
// compaction and snapshot installation. Nodes talk over a
// transport.Network with ManualDelivery; every message a node receives
// goes through the engine's own demultiplexer (Engine.Deliver), and what
// it sends leaves through a transport wrapper that holds an action's
// messages until the action ends and releases them in group order. The
// simulator is the engine's driver — in place of Engine.Start's goroutines
// it steps the shards, runs the reconcile passes, ticks the metadata
// group — and observes it only through public seams (the store and router
// wrappers, a per-shard clock view that tells the scheduler when each
// shard's tick is due, host.Events). etcd raft draws its election
// timeouts from crypto/rand; cluster runs make those draws a function of
// the seed (rand.go).
//
// The scheduler picks, at each step, a client action, a clock move
// (mostly when nothing is ready — a CPU is fast next to a raft tick) or
// one ready piece of engine work: a node receiving bus messages, a shard
// step (a frame, or a due raft tick), a metadata tick, a reconciler pass.
// Partitions are placed: the workload creates topics with the default
// replication factor (min(3, nodes)) half the time and otherwise with
// one from 1 to the node count (metadata.TopicConfig.Replicas), so on
// every cluster size some nodes hold no replica of some partitions, and
// recreating a topic may place its new incarnation on other nodes.
// Clients talk to a node they pick (their home): partition requests go
// through its router, and the Node's client call (host.CallDriver, the
// shipped driver, told each answer and the virtual time) decides what
// follows: a "not leader" answer is followed to the hinted leader — the
// home node's engine forwards the request over the bus
// (host.Engine.StartForward, stepped by the simulator where a started
// engine's call blocks on it; cforward.go) and the leader's engine
// serves it and sends the answer back, while the forward's own driver
// (host.ForwardDriver) probes a leader slow to answer, gives a write up
// as unknown when the partition's leader moves, sends a read again on
// news of a new leader or of the node's death, and ends at the request's
// deadline; every network fault reaches the request, its answer and the
// probes (a hint naming the home itself, or a fourth hop in a row, is
// told to the driver as a forward that failed) — a node holding no
// replica of the partition answers one with a live replica as the
// hint — "retry here" brings the
// request home after the driver's pause, and an unknown outcome is
// retried with the same (producer, sequence) pair. Polls and offset reads ask
// for the leader (Request.FromLeader); one poll in five reads the home
// node's own replica (Start.Local). Metadata commands are proposed to the
// home node's metadata member (Engine.ProposeMetadata) and paced by the
// engine's metadata apply-and-retry (host.AskDriver): one not committed
// within the engine's forward timeout, or answered "retry", is proposed
// again, with the same key, after its pause; nodes are added and removed
// by the engine's own AddNode and RemoveNode steps (host.MemberChange,
// started on a member the seed picks and stepped there, cresend.go); the
// data operations that depend on
// them are issued at once, through random nodes whose metadata may not
// have applied the commit yet.
//
// Cluster faults, each with a probability per step (Config.Faults.Net
// and the disk and crash rates) and counted in Result.Faults: message
// drop, duplication, reordering and delay spells on the bus; network
// partitions into a minority and a majority, healed after a while;
// one-way partitions (transport.Network.DisconnectGroups): a node that
// can send but not hear — it keeps sending heartbeats and votes that
// arrive while nothing it is sent does — a node heard by all that reaches
// none, or two sides of which only one reaches the other; clogs
// (transport.Network.Clog): one direction of a link, or every link into
// or out of one node, holding its messages for up to a second and then
// delivering them in order; a member that misbehaves within the
// protocol, forging raft terms, flooding forwarded requests or stalling
// frames, slow links and connection floods (see A misbehaving member);
// each node's clock skewed, stepped, strobing
// or drifting (see Clocks); a
// node stopped (a paused process: cut off, doing nothing) and resumed; a
// node crash — power loss or process crash — after which it is down for
// a while and restarts on its disk, rejoining from its raft logs; ENOSPC
// spells and one-shot EIO or torn writes aimed at one partition's
// directory or at the metadata raft log (a metadata member whose log
// refuses a write is reopened from it by its engine); slow builds; a
// node that leads quiesced partition groups crashing, after which, one
// time in two, every other fault ends and no fault or new client
// operation starts for a second, for the failover check of invariant 8;
// a new node joining mid-run (cjoin.go): it starts with Cluster.Join on
// an empty disk and is added through a running member by AddNode's own
// steps (Engine.StartAddNode: the metadata group's membership change
// carrying the AddNode command, which adds it as a learner, proposed
// again under the same key until the member has applied it, then the
// wait for its promotion; a call given up at its deadline, or whose
// member died, is made again through another), receives the metadata as
// a snapshot, is promoted to voter by the metadata leader once it caught
// up, takes every fault like the founders, and serves clients once
// AddNode returned; topics
// created after it may be placed on it; a member of a cluster of four or
// more removed mid-run (cremove.go) by RemoveNode's own steps
// (Engine.StartRemoveNode, through another member: a read barrier, then)
// the DrainNode command re-places its replicas, each moved partition's
// group leader adds the new replica (snapshot, then catch-up) and removes
// the old one before settling the move, and once no replica is left on
// the node the metadata group's membership change carrying RemoveNode
// takes it out and the node is closed once the call returned — with
// every other fault going on meanwhile, the node removed included. The
// metadata workload also issues Rebalance, which moves replicas onto
// the nodes holding the fewest (onto a node that joined) and reorders
// preferred leaders. At
// quiescence every fault ends (partitions heal, stopped nodes resume,
// crashed ones restart) and the cluster runs until it has converged:
// every node's metadata equal, every metadata group member at the same
// applied index with the same voters and learners (a configuration
// change is raft's, not the store's), every replica of every committed
// partition as long as the log, running (its node up, its build not
// failed) and with its group's log applied as far as its peers' (a
// consumer offset adds no message), and every partition group led by its
// preferred leader again (leader balance hands leadership back with
// raft's leadership transfer after a failure moved it, so transfers run
// under every fault above and at quiescence).
//
// # A misbehaving member
//
// With Config.Faults.Peer (on in DefaultClusterFaults; cpeer.go) one
// member at a time, picked at random, misbehaves for 100 ms – 2 s while
// following the protocol's form: the transport authenticates it, so its
// messages reach the engines, and each is well formed. It runs the real
// engine; the simulator adds to what that engine sends (in the transport
// wrapper, or from the node's endpoint), never a path in the engine.
//
//   - Forged terms (PeerFaultRates.Terms): besides one in four of its
//     heartbeats, heartbeat and append answers, votes and pre-votes — of
//     partition groups, alone or batched, and of the metadata group — it
//     sends a copy under a forged term: an extreme one (2^62, 2^62−1,
//     2^62+1, 2^64−1), which every receiver must refuse (the bound
//     relative to its own term, replica.MaxTermStep, and the absolute
//     cap; refusals are counted, Result.Faults.TermsRefused, and a
//     raft_out_of_reach drop without a forged term is a violation of
//     invariant 4), or a jump ahead of the real term of up to 2^28, which
//     raft adopts: followers take the forger for their leader in that
//     term, leaders that hear of it step down, and every group must
//     elect again and converge at quiescence. Only the term is forged —
//     no entries, log positions or commits, and no message that claims
//     leadership with data, which the security model leaves to a
//     member's trust. A run's forged jumps add up to 2^31 at most: a
//     replica more than MaxTermStep behind its group is refused for good
//     by design, which a forger could otherwise bring about for a
//     replica that is down with two messages.
//   - Forwarded-request floods (PeerFaultRates.Flood): bursts of 4–24
//     forwarded produce requests (host.KindRequest) of 16–64 KiB for a
//     partition its metadata knows, under an incarnation that never
//     exists (so no replica appends one), to one other member at a time,
//     and probes for them (host.KindProbe). The receiver holds each until
//     its shard answered it, within its budgets (host.Cluster
//     MaxForwardedPeerBytes and MaxForwardedBytes, 192 KiB and 512 KiB in
//     the simulator), and answers the rest at once with a retriable error
//     (Result.Faults.FloodRefused). Invariant 10 holds the budget; the
//     others, that the flood takes nothing for good from the other
//     members' traffic.
//   - Stalled frames (PeerFaultRates.Stall): every node takes each
//     message off the in-memory network as one frame through the
//     transport's inbound budget (internal/inbound, the core
//     transport.TCPBus runs on its sockets): its length field, its
//     charge to the connection (one per sender), the sender's share and
//     the node's total before its payload, each 64 KiB chunk, its end,
//     and the charge given back once the engine took the message. The
//     stalling member opens frames to the other members, on connections
//     of their own, claiming 16–64 MiB (the largest frame is the TCP
//     default, 64 MiB, and the budgets its defaults: 128 MiB a
//     connection or a peer, 256 MiB in total); half stop after their
//     header, half dribble their payload and stop short of its last
//     byte. A claim over a budget is refused (its connection closed);
//     the receiver's read deadlines (250 ms a chunk, 2 s a frame in the
//     simulator, on its monotonic clock) close the others. Its frames
//     outlive its spell until their deadlines; calms and quiescence
//     close them, and no new staller starts while any is held.
//     Invariant 13 holds the bounds and the deadlines, and no other
//     member's frame may be refused meanwhile; the liveness invariants,
//     that the stalls take nothing for good.
//   - Slow links (PeerFaultRates.SlowLink, cslow.go): on in
//     DefaultClusterFaults at DefaultSlowLink (0.001 a step, about four
//     spells a run; -sim.slowlink sets another rate, 0 turns them off),
//     and TestClusterFaultsFire checks that each outcome below happens
//     within the default seeds. A spell
//     makes one direction of one link between two members slow for
//     100 ms – 2 s. TCPBus sends everything for one peer on one
//     connection, a byte stream its receiver reads frame after frame:
//     a frame whose bytes come slowly holds back every frame written
//     after it, and once the receiver's read deadline closes the
//     connection the frame and every byte behind it are gone, and the
//     sender redials. The simulator reads each node's inbox as those
//     connections, one per sender: a frame the slow link's sender sent,
//     read while nothing else is being read slowly on its connection, is
//     charged at its length field as any frame and then gets its 64 KiB
//     chunks one after another, each up to 1.25× the stall timeout after
//     the last on the receiver's clock (none while the sender is stopped
//     or the link cut), or none ever again (one frame in eight); the
//     sender's later frames wait behind it, in order. Read whole, it
//     goes to the engine and the frames behind it are read in turn (the
//     first becoming slow in its turn while the spell lasts); a read
//     deadline missed closes the connection, gives the frame's charge
//     back and loses it and the frames behind it, and the sender's next
//     frame opens a new connection. Invariant 13 judges the slow frames
//     as the stalled ones, and checks that a connection closed mid-frame
//     (slow or stalled) holds nothing once closed: a build whose close
//     keeps the frame's charge (testhooks.CloseKeepsFrame) is caught
//     (TestClusterCatchesNoChargeBackOnClose); the liveness invariants,
//     that the lost frames take nothing for good. Not modelled: the
//     frames a sender writes into the closed connection before a write
//     fails (lost in TCPBus too) and a sender's queue filling while its
//     connection is held.
//   - Connection floods (PeerFaultRates.ConnFlood, cconns.go): on in
//     DefaultClusterFaults at DefaultConnFlood (0.001 a step, about four
//     spells a run; -sim.connflood sets another rate, 0 turns them off),
//     and TestClusterFaultsFire checks that each outcome below happens
//     within the default seeds (a flood connection refused at accept,
//     one closed at its handshake deadline, a member's oldest closed
//     past MaxPeerConns, an honest redial admitted). Every node admits,
//     times and closes inbound connections by the transport's connection
//     slots
//     (internal/slots, the core transport.TCPBus runs in its accept
//     loop; here 32 connections, 12 handshaking, 3 handshaking from one
//     address, 2 per member, a 500 ms handshake timeout on the
//     receiver's monotonic clock, a fresh table per incarnation). For
//     100 ms – 2 s an outsider (one address, no valid certificate) or a
//     member floods one node with 1–3 connections now and then whose
//     handshakes never finish — a member's also with ones that finish
//     1–20 ms after their accept, redialling in a loop, each past
//     MaxPeerConns closing its oldest — and the other members redial
//     that node now and then, one handshake in flight each. Connections
//     that never finish are closed at their handshake deadline, a
//     member's when it goes down, and every connection by calms and
//     quiescence. Invariant 14 holds the bounds, the deadlines and the
//     honest redials: a build that bounds handshaking connections by
//     MaxConns alone (testhooks.NoHandshakeBound) and one whose close
//     keeps its slot (testhooks.CloseKeepsSlot) are caught on the
//     default seeds. Not modelled: an outsider from many addresses
//     (which can hold every handshake slot), a handshake's CPU, and the
//     members' regular connections outside a flood.
//
// Nor does the forger flood the shards' inboxes
// with raft bytes (Config.InboxBytes; TestInboxBytesBoundsPeerFlood and
// TestInboxBytesPeerFloodingManyPartitions in package shard): the
// workload's messages are under 50 bytes, so its raft traffic stays far
// below the inbox's byte bound (64 MiB per shard).
//
// # Clocks
//
// Each node reads its own clock (clock.go) through the engine's clock
// seam, host.Config.Clock and the shards' views of it: a monotonic clock
// that its timers run on — raft ticks, node liveness, metadata ticks,
// reconcile periods, park and poll deadlines — which the simulator
// advances with the virtual clock, and a wall offset that Now adds —
// append times, the consumer group commands' session clock. With
// Config.Faults.Clock set, every node's wall clock starts up to ±1 s off
// the virtual clock (skew), and then, per step: a jump sets one node's
// wall clock 1 ms – 10 s forward or back for good (timers armed before
// keep their due time, as a Go timer does when the wall clock is set); a
// strobe flips it between two values up to ±2 s apart every 1–20 ms for
// up to 2 s; a drift runs one node's whole clock, its timers included, at
// 0.5–2 times the virtual rate for up to 3 s. Strobes and drifts end at
// quiescence and in the calm before a failover check (jumps stay where
// they landed): liveness must come back once clocks settle. A node's
// clock outlives its crashes. The scheduler knows when each node's next
// tick is due on its own clock, and advances the virtual clock to it.
//
// # Invariants
//
// Checked on every run, online where possible (Run stops at the first
// violation and reports it with the seed and the replay command). Each
// is a value of type invariant registered with the harness
// (invariant.go), one file each (invariant_answers.go,
// invariant_drops.go, ...): its number, its name, the DESIGN behaviours
// it checks, its checks — after every scheduler action, once the run has
// settled, on the settled run — over the harness (the workload's
// history, each node's shards, drop counters and metadata, each
// incarnation's history as the clients saw it), where it is checked online as the history is
// recorded, and the broken builds whose seeds fail on it. A single-node
// run and a cluster run check through the one registry, in its order;
// a check that exists only in a cluster (7, 8, 10, 11) is a no-op on a
// run without a network (inCluster). TestInvariantsHaveBrokenBuilds lists the registry and fails when
// an invariant names no broken build that it catches nor why none does
// (invariant 6: the group state machine is package metadata's, no seam
// reaches it), or names one no catch test sets; each catch test checks
// that the registry names its broken build for every invariant it
// accepts.
//
//  0. The engine neither panics nor fails a call outside the faults
//     injected (invariant_engine.go).
//  1. Every client request is answered exactly once (a router refusal is
//     an answer; a request in flight at a crash is answered by the crash;
//     in a cluster, NotLeaderError and ErrOutcomeUnknown are answers).
//  2. No message produced against one incarnation is ever readable in
//     another: a produce is stamped with the committed created_revision
//     when a shard takes it from its inbox (the simulator mirrors every
//     inbox), and the storage tap checks every append against that stamp;
//     every read is checked against what was appended to that incarnation
//     and served only while it was committed on the serving node.
//  3. No acknowledged message is lost (across crashes too) and offsets are
//     dense: acks are checked against where the storage tap saw the
//     messages land, reopened partitions against the acks, and the final
//     read of every committed partition against the whole history. In a
//     cluster the log of an incarnation is what its replicas applied: the
//     first to reach an offset defines it, every other replica must
//     append the same message there, and at quiescence every replica —
//     read back through its own node — holds the whole log and the same
//     consumer offsets (the replicas are the nodes the partition's
//     placement names; a read through a node holding none is sent on to
//     a replica and must return the whole log too). An acknowledged
//     produce must have been able to reach a quorum of its partition's
//     replicas: some replica was linked to a majority of the replicas,
//     itself included, in both directions — it could send to each (both
//     up, neither stopped, no partition, one-way or not, and no clog in
//     that direction) and hear from each, each direction up at some
//     moment while the produce ran — a necessary condition for a raft
//     commit, checked at the acknowledgement. Every read of an offset, on
//     every replica, returns the same append time, and append times never
//     decrease along a log, whatever the clocks of the nodes that stamped
//     them did (both modes). The metadata every node holds after applying
//     an index of the metadata log is the same (a fingerprint of the
//     store).
//     A produce answered partition.ErrRolledBack (a failed group commit
//     took it back out of the log: a full disk's ErrNoSpace) was not
//     applied: the oracle drops it, and what followed it, at the answer,
//     so the rebuilt partition, or its next append, must not hold it.
//  4. At quiescence every park buffer is empty and no frame was dropped
//     for a reason that no injected fault explains: full (inbox bursts),
//     build_failed (disk faults), shutdown and disconnected (crashes) only
//     when those fired; park_expired, removed and not_owner are answers of
//     normal convergence (deletes racing requests); in a cluster raft and
//     catch-up traffic may be dropped for any reason but a routing
//     failure (raft re-sends) or a term out of reach — raft_out_of_reach,
//     and invalid_raft_message for the metadata group, only when a
//     misbehaving member forged terms (no correct run comes near the
//     bound); delivery_failed, unroutable and misrouted are always
//     violations.
//  5. Each partition incarnation's produce/poll/offset history, as the
//     clients saw it, is linearizable (porcupine) against an append-only
//     log with consumer offsets. In a cluster, produces answered
//     ErrOutcomeUnknown are operations whose effect may or may not
//     appear; a try that landed in a recreated incarnation is placed
//     there too; a leader read must see every acknowledged write; a Local
//     poll is checked as a read of a replica that may lag (linIn.stale).
//  6. Consumer groups (DESIGN behaviour 23): the workload commits group
//     commands (create, join, heartbeat, leave, commit — with stale
//     members, stale generations and backwards offsets among them, and
//     sessions lapsing on the virtual clock) through the engine's
//     metadata path; after every step, every running node's committed
//     groups are checked: each generation of a group incarnation assigns
//     its partitions the same way wherever and whenever it is observed
//     (one holder per partition per generation, across nodes, restarts
//     and snapshot installs), holders are live members, a partition moving
//     from its holder (behaviour 33's two-step move) moves to another live
//     member, and a partition incarnation's committed group offset never
//     goes backwards.
//  7. Placement (cluster mode): a replica is built only on a node whose
//     own metadata places the incarnation there (its replicas, or those
//     still leaving it); a node removes its copy of a committed
//     incarnation only once its metadata no longer names it a member
//     (a move settled); an acknowledgement needs a linked majority of one
//     of the configurations the group may have had during its moves
//     (invariant 3); at quiescence no move is under way, each committed
//     partition is owned (materialised in a shard) by exactly its
//     replicas and by no other node, and each group is led by its
//     preferred leader (its first replica), every node being up. The
//     other invariants hold unchanged for requests that reached a node
//     holding no replica and were sent on (Result.Ops.NotHeld counts
//     those answers, Result.Ops.LeaderTransfers the transfers started).
//  8. Membership and failover (cluster mode): after every action, every
//     running node's metadata names exactly the members, voters and
//     learners, of the metadata group's configuration it has applied, and
//     no node is both (the AddNode command travels inside the change that
//     adds the node as a learner, so both move at the same log index);
//     at quiescence every node addition and removal has completed and
//     every member's metadata group has as voters exactly the members,
//     and no learner: every node that ran but those removed, each joiner
//     promoted once it caught up (and, by invariant 3, the joiners hold
//     the same metadata as the founders).
//     A second after a node leading quiesced groups crashed in a calm,
//     every group it led that was quiesced on every replica — so that
//     only node liveness can tell the survivors — has a new leader among
//     the survivors wherever a majority of its replicas survive holding
//     it; so has the metadata group, if the node led it
//     (Result.Faults.Failovers counts the groups seen led by a survivor).
//     Likewise a second after a node leading quiesced groups went deaf —
//     a one-way partition: it keeps sending, hears nothing — in a calm
//     (every other fault off, no new client operation) that began up to
//     a second before so that groups quiesce (Result.Faults.DeafCalms):
//     node liveness is judged both ways, so the others hold it dead
//     though they hear it.
//  9. Consumer groups under faults (DESIGN behaviour 33; cluster mode with
//     Config.GroupMembers, TestClusterGroupMembers): members homed on the
//     nodes in turn join a group, heartbeat at a third of their session
//     timeout (a lease renewal at the metadata leader, no log entry,
//     unless the heartbeat releases partitions; the leader proposes the
//     expiry of lapsed leases, and a new leader grants every member a
//     session from its takeover), produce, poll the partitions they hold
//     (from the committed offset, then from where the last batch ended)
//     with waiting polls and hand each answer to their
//     application only through the fence a parkway.Consumer applies
//     (metadata.Store.CheckDelivery on the home node: the member's lease
//     and the home's committed assignment), checked when the poll is made
//     and again when its answer arrives, then commit. Partitions and
//     stops cut members' nodes off, and so does a fault of their own
//     (Result.Faults.MemberCuts): now and then, while a member has a poll
//     in flight, its node is cut off for longer than its session timeout;
//     their sessions lapse, their partitions move, the others commit, the
//     network heals and the polls retried in place meanwhile are
//     answered. A partition leaving a live member moves in two steps
//     (the member's revocation commits it, then acknowledges). No message below the
//     group's committed offset (the largest any node has applied for the
//     group's incarnation) may reach an application
//     (Result.Ops.MemberDelivered, MemberFenced count the outcomes), and
//     an application is handed a partition's messages only after its
//     OnAssigned named the partition and before its OnRevoked did, and a
//     revocation releases only what OnRevoked named. One default
//     cluster seed in three has three members (DefaultClusterConfig),
//     under every default fault; the member seeds
//     (TestClusterGroupMembers) run more of them, with the network
//     faults only (no disk faults, crashes, joins or removals, which
//     stall the metadata log) and five times the partitions and stops. A join
//     storm (Config.MemberPartitions, TestClusterGroupJoinStorm): many
//     members on a topic of their own all join at once, each join a
//     generation moving partitions from live members in two steps; its
//     run goes on past its steps until it settles and a member delivers
//     after it (Config.StormFor bounds that in virtual time).
//  10. Budgets against a misbehaving member (cluster mode): after every
//     action, no running node has ever held more bytes of forwarded
//     requests than its budget (host.Engine.ForwardStats' peak against
//     Cluster.MaxForwardedBytes), and at quiescence none holds any: every
//     request a flood made it hold was answered and given back.
//  11. Read barriers (cluster mode): clients look names up through a
//     node now and then, and the lookup's metadata read barrier runs on
//     that node's engine (host.Engine.StartReadBarrier, the steps
//     ReadBarrier blocks on; cbarrier.go): one that returns without an
//     error leaves the node having applied every metadata entry some
//     node had applied when it started; one given up at its deadline (no
//     leader reached) is counted (Result.Ops.BarriersFailed).
//  12. A group commits only what its members were handed (cluster mode
//     with Config.GroupMembers, the members of invariant 9): every offset
//     below the members' group's committed offset of a partition (the
//     largest any node applied, per topic and group incarnation) was
//     handed to some member's application; checked when a member's poll
//     ends and, for every partition, once the run settled. That the
//     offset never goes backwards is invariant 6's. The members make a
//     parkway.Member's own decisions (host.GroupMember: the fence, the
//     heartbeat's choice between a lease renewal and a commit of
//     nothing, where a poll starts, the commit, the generation adopted)
//     and step a parkway.Consumer's (host.ConsumerDriver: which
//     partitions they fetch after an assignment changes and where each
//     fetch starts, what a failed poll does next (retry after the fetch's
//     backoff, end the fetch, end the consumer), the batches queued for
//     the application and handed out message by message through the
//     fence, the handled positions and when to commit them under the
//     member's commit policy — drawn from the seed: after each batch,
//     on the interval's deadline, or when the application asks (now
//     and then, and in OnRevoked) —, the revocation's steps (OnRevoked,
//     the commit of its partitions' positions, the release), the
//     generation a heartbeat acknowledges); checked also when a
//     member's commit ends.
//     The consumer seeds (TestClusterGroupConsumers) put the members on
//     a topic of eight partitions of their own, so each holds several.
//  13. Inbound frames within their budget and deadlines (cluster mode,
//     with stalled frames and slow links): after every action no node's
//     inbound budget (internal/inbound) has held more than its bounds
//     per connection, per peer and in total; no stalled or slow frame is
//     still charged once its receiver's read deadlines were checked past
//     the deadline the simulator computes for it (250 ms after its last
//     whole 64 KiB chunk, 2 s after its length field); no frame of a
//     member that does not stall is refused for the budget (checked as
//     each arrives); a connection closed mid-frame holds nothing once
//     closed (checked as it closes); and at quiescence no node holds any
//     inbound bytes.
//  14. Inbound connections within their slots (cluster mode, with
//     connection floods): after every action no node's connection slots
//     (internal/slots) have held more connections than MaxConns, more
//     handshaking than MaxHandshakes, from one address than
//     MaxAddrHandshakes or of one member than MaxPeerConns; the slots
//     held are those of the connections the simulator holds open; no
//     handshake is open once its receiver's sweep passed its deadline
//     (500 ms after its accept); every honest member's redial to the
//     flooded node is admitted and authenticated before its deadline
//     (checked as it is accepted and swept); and closing every
//     connection (calms, quiescence) leaves no slot held.
//
// Panics in the engine (etcd raft's included) are reported as violations
// of invariant 0, with the seed, rather than crashing the test binary.
//
// # Known bugs
//
// A violation that is an instance of a known engine bug names it in
// Violation.Known (known.go lists them: the limits the lying disk finds
// on a single node — damage at the very end of a segment that looks like
// a torn tail, an incarnation file cut short, damage the journal replay
// meets at open refusing the whole node; those it finds in a cluster — a
// damaged replica not repaired from its peers, a damaged raft log
// blocking its shard's other partitions on that node, a damaged
// incarnation file getting a replica's directory removed, a dead
// incarnation's damaged incarnation file blocking the next incarnation's
// builds on the liar in a group that cannot elect without it
// (knownDeadIncarnationDamage), a raft log cut below its
// sync mark and the mark then rolled back to a copy short of the cut
// before a build refused the log on disk (knownRaftLogMarkRollback), a
// raft log cut below its
// incarnation tag and its sync mark (which names the tag) left
// unreadable, where the next incarnation's only replica is the liar's,
// which no build may take and no peer can re-seed
// (knownUnownedSoleLog), and the same cut, or a sync mark cut short
// beside a log that holds no tag, where it has two replicas, whose group
// cannot commit the liar's re-seed without the replica it replaces
// (knownTwoVoterReseed); and one that is not a lie: a
// partition left unusable by a failed write-behind is never rebuilt);
// the cluster and lying-disk tests skip such seeds unless -sim.known is
// set, and log them with their replay commands.
//
// # Replaying
//
// A failed run reports its seed and the command that replays it,
// `go test ./internal/sim -run TestSimulation -sim.seed=<S>` (single node)
// or `go test ./internal/sim -run TestClusterSimulation -sim.seed=<S>`;
// add -v -sim.trace to print its event trace. `-sim.seeds N` (and
// `-sim.start S`) runs N seeds instead of the test's default range.
// Cluster disk faults reach the metadata raft log unless
// `-sim.metafaults=false`. Rates scale with `-sim.clockx F` (the clock
// faults, both modes), `-sim.onewayx F` and `-sim.clogx F` (one-way
// partitions and clogs), `-sim.termsx F`, `-sim.floodx F` and
// `-sim.stallx F` (a misbehaving member's forged terms, floods and
// stalled frames), `-sim.removex F` and
// `-sim.joinx F`; 0 turns a fault off. `-sim.slowlink R` and
// `-sim.connflood R` set the rates of slow links and connection floods
// (DefaultSlowLink and DefaultConnFlood by default; 0 turns either off).
//
// # Broken builds
//
// Each fault kind has a deliberately broken build (broken.go) that the
// default seeds catch and that passes without that fault — proof that
// the fault reaches what it is meant to. Among them: BreakReplyPath, a
// transport that answers over the reverse direction of a cut or clogged
// link, caught only by one-way partitions and clogs (an acknowledgement
// without a quorum linked both ways); BreakAppendTimeOrder, a partition
// that does not keep append times non-decreasing, caught only by the
// clock faults (append times going backwards); BreakLivenessReport, node
// liveness that does not report whom a node hears, caught only by a
// leader gone deaf (its groups never failing over). Four break checks
// inside the engine that no seam reaches, so they are switches of
// package testhooks, which exist only under the build tag
// parkway_brokenbuild (brokenbuild_test.go, `go test -tags
// parkway_brokenbuild ./internal/sim -run 'ServeStaleParked|ClusterCatchesNo'`):
// testhooks.ServeStaleParked, parked frames of another incarnation
// served, caught as a message crossing incarnations (invariant 2);
// testhooks.NoTermStep, validation without the term bound relative to the
// receiver, caught by forged extreme terms (a group that adopted 2^62
// never settles); testhooks.NoForwardBudget, a node that holds every
// forwarded request, caught by a flood (invariant 10);
// testhooks.NoReadIndexWait, a metadata read barrier answered at once,
// caught when a barrier on a node behind the others returns (invariant
// 11); testhooks.NoStallTimeout, an inbound frame without its stall
// deadline, caught by stalled frames held past it (invariant 13);
// testhooks.NoHandshakeBound, handshaking connections bounded by
// MaxConns alone, and testhooks.CloseKeepsSlot, a close that keeps its
// connection slot, both caught by connection floods (invariant 14). Each
// invariant's
// file names the broken builds that catch it (see Invariants), and the
// catch tests look their broken build up by that name.
//
// # Scope
//
// Cluster lies reach one node per seed and never the metadata group's
// raft log; the default seeds of both modes run with lies, skipping the
// seeds that meet a known limit (known.go). With
// FaultRates.WrongDisk (one restart in four in the default cluster
// faults; every restart in TestBehaviour27ClusterWrongDiskRefused) a
// crashed node is first started on a copy of another member's data
// directory, which must be refused with host.ErrWrongDataDir (invariant
// 8); BreakIdentityCheck, which hides the IDENTITY file, is caught there. Topics are FsyncAlways only (the
// interval and never policies are not exercised), and purge, truncate,
// retention and topic reconfiguration are not in either workload:
// retention by age reads each node's clock, but the clock faults do not
// reach it. Cluster mode has no inbox bursts, removes
// a node only through a drain (never one whose replicas it cannot move,
// and never below three members), and its clients drive the Node's
// client call (host.CallDriver) and the forward (host.Forwarding and its
// ForwardDriver) but not their blocking owners (Engine.Call, whose
// steps the simulator carries out itself, and Engine.forward): the
// first try straight to a live replica (the engine's replicaFor: a
// simulated client reaches a replica through the shard's "not leader"
// answer) is not exercised, nor the blocking wait of ReadBarrier, AddNode
// and RemoveNode (host's runSteps and the metadata goroutine's port: the
// steps they wait on are the ones the simulator takes, through
// Engine.StartReadBarrier, StartAddNode and StartRemoveNode), Consumer or
// Member. A forwarded request's error
// answer crosses the wire as the engine encodes it: a damaged raft log's
// error (wal.ErrCorrupt, replica.ErrCorruptLog) arrives as text, so the
// lying-disk check that damage is reported only where a lie explains it
// sees such answers only from a client's own home node.
package sim
