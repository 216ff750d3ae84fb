// Package host is parkway's node engine: it wires one node from the public
// packages — metadata (a local store, a durable log, or a member of the
// metadata raft group), a partition store, the router, the shards and a
// reconciler per shard — and, in a cluster, the transport demultiplexer,
// the metadata group's driver and request forwarding with its wire codec.
//
// The engine is built like etcd raft's RawNode and node: New builds a
// single-threaded state machine that starts no goroutine; Start (or Run)
// is the thin driver that owns the goroutines — the shards' pumps, one
// reconciler.Run loop per shard, the metadata group's loop and the
// transport receiver — and Close stops them. A manual engine
// (Config.Manual) is stepped by its caller instead: Shards()[i].Step,
// Reconcilers()[i].Reconcile on Wake(i) or the period, TickMetadata,
// HandleMetadata, Deliver for each transport message, PumpReplies. The
// deterministic simulator (internal/sim) drives the engine that way, so
// what it checks is the code a parkway.Node runs.
//
// The calls that wait on the metadata group — ApplyMetadata in a cluster,
// ReadBarrier, AddNode, RemoveNode — are each a stepped operation started
// and then waited on, as dragonboat's SyncPropose is Propose plus a wait
// (steps.go): the operation's Step makes its requests and takes their
// answers without blocking, and the wait blocks between steps on what can
// make the next one progress. A manual engine's driver steps the same
// operations (StartReadBarrier, StartAddNode, StartRemoveNode); only the
// way to the metadata member differs, chosen when the operation starts.
//
// In a cluster, idle partition raft groups quiesce (see the shard
// package) and failure detection for them is node liveness (liveness.go):
// one heartbeat per node pair per interval, counted in metadata ticks, so
// TickMetadata drives it too. Partition raft messages for one peer are
// coalesced per shard and unit of pump work (raftbatch.go).
//
// The root package parkway is the client API on top of an engine: handles,
// retries in place, following "not leader" hints, through the client call (call.go).
package host
