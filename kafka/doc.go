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
// Every request and response is encoded and decoded by kmsg; only the
// request and response headers (four fields) and the split of a record
// set into batches and records (a length prefix each) are read here, each
// length checked against the bytes left before anything is allocated.
//
// # Hostile input
//
// A request's size prefix is checked against Config.MaxRequestSize
// before its body is allocated, and the bodies of all connections share
// one budget (Config.MaxInflightBytes); a compressed record batch is
// inflated into at most the request limit. A malformed request, an
// unknown API key or an unsupported version of anything but ApiVersions
// closes the connection, as a Kafka broker does; an unsupported
// ApiVersions gets UNSUPPORTED_VERSION with the versions served. A panic
// while serving a connection closes that connection only.
package kafka
