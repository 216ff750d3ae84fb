// Package metadata is parkway's committed metadata state machine: streams,
// their topics and the topics' partitions.
//
// A Store is what a consensus log feeds. Every mutation is a plain,
// serialisable Command value passed to Store.Apply, the single entry point;
// given the same sequence of commands, every replica reaches byte-identical
// state (ids, revisions, owners). A command that fails changes nothing.
//
// # Slab ids
//
// Stream ids and, within a stream, topic ids are slab slots: a new stream or
// topic takes the lowest free id, starting at 0, and a deleted one frees its
// id for reuse. Which id is handed out is therefore a pure function of which
// ids are occupied, so replicas agree even after restoring from a snapshot,
// and deleting and recreating a stream or topic yields a byte-identical
// Namespace. Partition ids within a topic are dense, 0..n-1: CreatePartitions
// appends after the highest id, DeletePartitions removes from the tail.
//
// # Revision and incarnation
//
// The store keeps one global revision, a uint64 starting at 0, bumped by
// every command that changes state (see Apply for the exact list). The new
// revision of the command that created a partition is that partition's
// CreatedRevision: its incarnation, or epoch. A namespace can be reused after
// a delete, but the recreated partition always has a different
// CreatedRevision, and that value alone separates it from the dead one.
// Store.CreatedRevision and Store.Partition look it up in O(1).
//
// # Placement
//
// In a cluster (Config.Nodes) each partition is placed on its topic's
// replication factor of nodes when it is created, and the choice is
// recorded in PartitionInfo.Replicas, preferred leader first: a function
// of the store's state only, so every replica records the same, and
// balanced across the nodes (see placement.go).
//
// # Notifications
//
// Store.Subscribe hands out a wake channel of capacity 1 that receives a
// value after every partition-shaping commit; a full channel coalesces. The
// subscriber (a reconciler) then diffs Store.Snapshot against what it holds:
// the wake carries no payload, it only says "look again" (level-triggered).
//
// # Persistence
//
// Commands encode with EncodeCommand (a compact, versioned binary form that
// round-trips every field value, invalid ones included) and a store's whole
// state exports as a StoreSnapshot (Store.Export, EncodeSnapshot) from which
// Restore rebuilds an indistinguishable store. Durable ties them together
// the way a consensus log would: it appends every command to a write-ahead
// log and fsyncs it before applying it, snapshots periodically, and on open
// restores the newest snapshot and replays the log after it.
//
// Store is safe for concurrent use.
package metadata
