// Package kafka serves the Kafka wire protocol on a parkway Node, so that
// any Kafka client — franz-go, librdkafka (kcat, confluent-kafka-python),
// the Java client, Kafka tools — can produce to and consume from it.
//
// A Server runs inside the host's process on a *parkway.Node: construct
// it with NewServer, serve it on a net.Listener (Serve) or an address
// (ListenAndServe), and stop it with Shutdown (graceful, bounded by a
// context) or Close. The package is a leaf of the module: a host that never
// imports it does not compile it or link its dependencies (franz-go's kmsg
// for the protocol's messages, klauspost/compress and pierrec/lz4 for the
// record codecs); the core packages import none of them.
//
// # Mapping
//
// The Kafka topics of a Server are the topics of one parkway stream
// (Config.Stream, created if missing). A Kafka partition is a parkway
// partition with the same id, and Kafka offsets are parkway offsets: both
// are dense from 0 per partition. A record's key, value, headers and
// timestamp (CreateTime, milliseconds) become a Message's Key, Payload,
// Headers and Timestamp (microseconds). A topic's Kafka topic ID
// (KIP-516) is derived from its incarnation — stream id, topic id and
// created revision — so a topic deleted and recreated under the same name
// gets a new ID, and a request that names the old ID is refused with
// UNKNOWN_TOPIC_ID instead of reaching the new topic.
//
// A node that keeps its partitions in memory and is not clustered
// (Node.KeepsEncoded) keeps each produced record batch as the client
// sent it, compressed or not, as one stored unit: validated whole first
// (CRC, record count and offset deltas, every record's framing and
// timestamp, the node's size limits; each record walked in place, none
// decoded; a compressed batch inflated, within the request limit, into
// a recycled buffer), then given to the node
// (Node.ProduceAsyncEncoded), which assigns its base offset. A fetch
// hands it back as it is (Node.PollEncoded), writing only its base offset
// and leader epoch, the two header fields the CRC does not cover; a fetch
// from inside a batch gets the whole batch, as from a Kafka broker. A
// parkway Poll or Consumer decodes it when it first reads it. Retention
// ages such a batch by its newest record and sizes it by its kept bytes.
// Any other node (on disk, in a cluster) stores each record as a parkway
// message, and a fetch encodes them again.
//
// A consumer group's state — generation, protocol, leader, members and
// their assignments — and its committed offsets (each with the commit's
// metadata string, at most 4,096 bytes) are records of the
// group's partition of the internal topic __group_coordinators (see
// below), as Kafka keeps them in __consumer_offsets; offsets committed
// by earlier releases as parkway's named consumer offsets of the group id
// are still read for a partition the group log has none of. An idempotent producer's batches are deduplicated in the
// partition's replicated window (Node.ProduceAsyncIdempotent), so a retry after
// a leader change applies once. In a cluster a listener does not refuse a
// sequence it did not expect as out of order unless a batch failed at it
// (the batches in between went through another node while it led):
// refusing it would make the client resend its unacknowledged batches
// under a new producer id, which the window cannot recognise.
//
// KIP-848's consumer group protocol (ConsumerGroupHeartbeat), in which
// the coordinator assigns, is served by the same coordinator: the
// group's epoch and members — subscriptions, target, held and revoking
// partitions — are records of the same group log, one per part (the
// group's epochs; per member its subscription, target and held
// partitions), and a change writes those of the parts it changed before
// a heartbeat is answered (cglog.go); a partition moves only once its
// holder revoked it, and a member commits only what it holds
// (consumergroup.go). While it has members a group is either classic or
// consumer.
//
// DeleteGroups and OffsetDelete remove committed offsets: a group log
// record, then the named consumer offsets of earlier releases.
//
// Fetch sessions (KIP-227) are served: a session remembers the partitions
// a client fetches, so its fetches name only what changed and are answered
// only for the partitions with news. Sessions are bounded in number and
// partitions; past the bounds a fetch is served in full without one.
//
// In a cluster every node runs a listener; Config.Brokers names them all,
// so Metadata points clients at each partition's raft leader (a node
// holding no replica of a partition asks a replica). A group's
// coordinator is the listener of the raft leader of one partition, chosen
// by a hash of the group id, of the internal topic __group_coordinators
// in Config.Stream — created by the first listener that needs it with
// the node's default replication, hidden from Kafka clients — so every
// listener names the same coordinator once the cluster agrees on that
// leader (COORDINATOR_NOT_AVAILABLE until then), and the coordinator
// moves when its node dies. The partition holds its groups' log: a
// completed rebalance (written before any member gets its assignment), a
// group emptied, every commit and every removal, each written in the raft
// term in which the coordinator loaded the partition
// (Cluster.ProduceInTerm), so a coordinator that lost the partition's
// leadership cannot commit after the new one loaded it. A coordinator
// loads a partition by writing a marker in its term and replaying the log
// up to it; the members keep their ids and generation, and their
// heartbeats and commits continue there. A partition's log is compacted
// by a snapshot written in the coordinator's term and a truncation before
// it. A listener that no longer
// coordinates a group answers NOT_COORDINATOR and lets the partition go.
// Metadata lists the brokers whose nodes this node judges live, and each
// partition's in-sync replicas as its raft leader knows them
// (Cluster.InSyncReplicas, asked of the leader from any node) — read in
// the background, at most once a second per partition Metadata names,
// and answered from memory while taken in the leader epoch answered
// (isr.go). A
// partition's leader epoch
// (KIP-320) is its raft group's term: Fetch, ListOffsets and
// OffsetForLeaderEpoch fence a stale one.
//
// # Security
//
// Config.TLS serves TLS; Config.SASL requires PLAIN or SCRAM-SHA-256/512
// against the host's CredentialStore before anything but ApiVersions;
// Config.Authorizer is asked before every topic and group operation.
//
// # Hostile input
//
// Every request and response is encoded and decoded by kmsg; only the
// request and response headers (four fields), the split of a record set
// into batches and records (a length prefix each) and SCRAM's text
// messages are read here, each length checked against the bytes left
// before anything is allocated.
//
// A request's size prefix is checked against Config.MaxRequestSize
// before its body is allocated, and the bodies of all connections share
// one budget (Config.MaxInflightBytes); a compressed record batch is
// inflated into at most the request limit. A malformed request, an
// unknown API key or an unsupported version of anything but ApiVersions
// closes the connection, as a Kafka broker does; an unsupported
// ApiVersions gets UNSUPPORTED_VERSION with the versions served. The
// close is the correct answer, not a missing error code: a response's
// error code sits in its body, laid out per key and version, so an answer
// to a key or version the listener has no schema for could not be read
// by the client; only ApiVersions has a reply every client can read (its
// v0). Clients never meet it: they send only what ApiVersions announced
// (franz-go fails any other request itself, unsent). A panic while
// serving a connection closes that connection only.
package kafka
