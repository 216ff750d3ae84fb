// Package parkway is an embeddable library for sharded message streams:
// streams hold topics, topics hold partitions, and every partition is owned
// by exactly one shard — one goroutine with a bounded inbox.
//
// A host opens a Node, the data API: Produce (ProduceAsync to pipeline),
// CreateTopicAndProduce (a topic created and produced to at once, the
// barrier's own case: the produce is written while the topic's command is
// made durable and acknowledged once both are), NewConsumer (and its lower
// layers, Poll and JoinGroup), and the lookups by name a producer needs
// (Stream, Topic). Two role types sit beside it,
// as franz-go's kadm beside its client: Admin (Node.Admin) creates,
// changes, lists and describes streams, topics, partitions, consumer
// groups and stored offsets; Cluster (Node.Cluster) adds, removes and
// rebalances nodes and reports leaders and the cluster's state. The
// Node's router always finds a partition's owner (a table of rows written
// by the shards, with a murmur3 hash fallback), and a reconciler per shard
// materialises partitions after metadata commits.
//
// The central guarantee is the materialisation barrier: a request that
// reaches its owner before the partition exists there is parked and
// re-dispatched, in arrival order, once the partition lands. A parked
// request is never dropped silently, never served against a dead
// incarnation after a delete and recreate, and always answered — with a
// result or with a typed error. Errors that mean "the node is converging,
// retry here shortly" match ErrRetry and are retried in place by the Node
// until the caller's deadline; they are distinct from ErrNotLeader, which
// tells a client to go elsewhere.
//
// # Handles
//
// Admin.CreateStream and Admin.CreateTopic return handles, Stream and
// Topic: the ids plus the incarnation (the committed created revision)
// they name. Ids are reused after a delete, so every data and admin call
// takes a handle, and a call whose incarnation is gone — the topic or
// stream was deleted, even if a new one took its ids — fails with
// ErrTopicNotFound or ErrStreamNotFound wrapping ErrStaleHandle, wherever
// the request was parked or forwarded. A handle also names its origin
// (the cluster, or a single node's data directory) and its names, so a
// handle used on another node or cluster is refused the same way. Lookups
// by name (Node.Stream, Node.Topic) and the listings return handles; in a
// cluster they pass a metadata read barrier first, so what was created
// through any node is found at once.
//
// With Config.Cluster, a node is one replica of a cluster: the metadata and
// every partition are replicated with raft (go.etcd.io/raft/v3), a produce
// is acknowledged once a quorum has it, and a request to a follower is
// forwarded to the leader.
//
// # Consuming
//
// A Consumer (NewConsumer) is the one way a service consumes. It hands
// out messages through a range-over-func iterator (Messages), polling each
// partition it holds with a waiting poll, committing by policy (every
// second by default), and, in a group, following rebalances by itself;
// its node keeps its group session alive, with one renewal round for all
// of the node's members. Its offsets live in one of two stores:
//
//   - A consumer group (ConsumerConfig.Group) keeps its committed offsets
//     in the metadata, with its members and its assignment of partitions
//     (balanced and sticky, one member per partition per generation),
//     replicated with the metadata. Use it when several consumers share a
//     topic. A poll or commit for a partition the member does not hold in
//     its generation is refused (ErrNotAssigned, ErrStaleGeneration) and a
//     committed offset never goes backwards (ErrOffsetRegression).
//   - A named consumer (ConsumerConfig.Name, no group) reads every
//     partition and keeps its offsets in each partition, beside its
//     messages, replicated and durable with it. Use it for one reader per
//     name: a sink, a materialised view.
//
// Below the Consumer are its layers, for hosts that drive reads
// themselves: Member (JoinGroup) for a group, whose Poll also takes
// AtCommitted (the group's committed offset); and Node.Poll with
// AtConsumer plus Admin.StoreOffset for a named consumer.
//
// Node.Poll reads a partition from a start position: AtOffset, AtFirst
// (the oldest readable message), AtLast (the newest), AtTime (the first
// message appended at or after a time, found through a per-segment time
// index), or AtConsumer (the consumer's stored offset; with none stored,
// or one a truncation passed, a reset policy decides — the start offset
// by default, or the end, or ErrOffsetOutOfRange — so a consumer never
// wedges). It refuses AtCommitted with ErrInvalidArgument: it has no group
// to read it from. Batch.Next is always an offset that Admin.StoreOffset
// accepts; Admin.PartitionOffsets reports a partition's start and end and
// a consumer's stored offset and lag.
//
// With WaitFor a poll is a long poll: it waits at the partition's shard,
// costing no CPU (no goroutine, timer or re-poll of its own), until
// MinMessages messages (default 1) or the MaxBytes budget are available —
// woken by the produce (in a cluster, the commit) that makes them
// readable — or returns what there is at its deadline. Waits are capped
// at MaxPollWait (30 s, like Apache Iggy's server), each shard holds at
// most 10,000 waiting polls (ErrTooManyWaiters past it), and a waiting
// poll whose partition is deleted or truncated past it, or whose node
// closes, ends with an error: it is always answered exactly once.
//
// Messages keep the producer's Timestamp, their Key, and an AppendTime
// stamped by the partition's shard.
//
// Package layout, imports pointing one way:
//
//	parkway (Node) → host (engine) → reconciler → shard → router → partition → metadata
//
// Everything with a side effect — the clock, the filesystem — sits behind a
// narrow interface so tests can drive it deterministically.
package parkway
