// Package bench compares parkway with an embedded NATS JetStream server in
// one process, case by case, and measures raw limits of the machine (a
// buffered file append, with and without an fsync every 100 records, a
// channel hand-off, and one raw fsync: an append to an existing file and
// its fsync, timed one by one, which case 6 under fsync on every write
// is held to) in the same run. A limit that is a case's counterpart runs
// whenever that case is selected.
//
// It is a separate module so that the library never depends on
// nats-server; the command is
//
//	go -C bench run ./cmd/compare
//
// Every round of every case runs for each system on a data directory of
// its own, created directly under the temp dir and removed after the
// round, alternating which system goes first from round to round (so
// neither always runs on a warmer or cooler machine), for Config.Rounds
// rounds. A throughput round does at least its floor of messages and goes
// on until Config.MinRound (1 s by default) has passed, so no round is a
// few tens of milliseconds a scheduler hiccup can swing; its figures are
// per message over whatever it did. Beside msgs/s the report gives the
// process's CPU time per message (getrusage, user+system, over the timed
// section): a loaded machine lowers msgs/s but not CPU/msg. It gives the
// median and the min–max range of each metric and the ratio parkway /
// JetStream of the medians.
//
// Both systems write through the same durability setting, stated in the
// report: a set with interval fsync (JetStream's default sync_interval,
// read back from the running server, and a parkway FsyncInterval topic
// policy with that interval) and a set with fsync on every write
// (JetStream's SyncAlways, parkway's FsyncAlways).
//
// A last section runs cases 1–3 (and 2a) on three replicas: parkway as
// three nodes in one process, over loopback TCP (transport.ListenTCP per
// node, like JetStream's routes) and over its in-memory network, against
// three embedded nats-servers with routes on loopback and a stream of
// three replicas. Each side runs in memory (parkway nodes without a
// DataDir, JetStream memory storage) and on disk (a DataDir per parkway
// node, raft logs included, against JetStream file storage), both with a
// 2-minute fsync interval, and the ratios pair memory with memory and disk
// with disk. Both acknowledge once a quorum holds the message, and every
// replica is checked after every run.
//
// The waiting-consumer section (-only waiting) runs readers that wait on
// the server instead of polling in a loop: parkway's Consumer and a
// Node.Poll loop with WaitFor against JetStream's pull consumers through
// Consume and through Fetch with FetchMaxWait. Case W1 measures
// produce→consume latency (p50, p99) and CPU per message with one waiting
// reader and a producer at one message per millisecond; case W2 the
// process CPU, as a share of one core, of 1,000 readers waiting on an idle
// partition (stream) for 10 s, beside each system idle with no reader.
package bench
