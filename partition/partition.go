// Package partition stores the messages of one partition: an append-only
// log with dense offsets, and the consumer offsets stored beside it.
//
// A Partition never knows who routes to it. It is owned by exactly one
// shard and used only from that shard's pump goroutine, so implementations
// need no locks and must not be shared between goroutines.
//
// Two stores are provided: MemStore keeps everything in memory (tests,
// embedded caches), FileStore keeps segments on disk in the reference
// server's layout:
//
//	<dir>/streams/<s>/topics/<t>/partitions/<p>/<base offset, 20 digits>.log
//	                                           /<base offset, 20 digits>.index
//	                                           /incarnation (the epoch)
//	                                           /offsets/consumers/<name>
//	                                           /offsets/groups/
//
// Build and Remove of a namespace whose Partition is still open are
// ErrInUse in both stores: Close the partition first.
package partition

import (
	"errors"

	"github.com/parkway-io/parkway/metadata"
)

// Header is one user header of a message.
type Header struct {
	Key   string
	Value []byte
}

// Message is one record of a partition log.
type Message struct {
	// Offset is assigned by Append; the value passed in is ignored.
	Offset uint64
	// ID is a 128-bit message id chosen by the producer (zero is allowed).
	ID [16]byte
	// Timestamp is microseconds since the Unix epoch, set by the producer
	// side before Append (the partition never reads a clock).
	Timestamp int64
	// Headers are optional user headers.
	Headers []Header
	// Payload is the message body. Append copies it; slices returned by
	// Read must be treated as read-only.
	Payload []byte
}

// Partition is one partition's log. Implementations are not safe for
// concurrent use: the owning shard's pump is the only caller.
type Partition interface {
	// Namespace is the partition's namespace.
	Namespace() metadata.Namespace
	// Epoch is the incarnation (committed created_revision) this partition
	// was built for.
	Epoch() uint64
	// Append assigns consecutive offsets starting at NextOffset to msgs and
	// appends them whole or not at all. It returns the first assigned offset.
	// An empty batch is ErrEmptyBatch.
	Append(msgs []Message) (first uint64, err error)
	// Read returns up to max messages starting at offset from (fewer at the
	// end of the log; none, with no error, at or past NextOffset). An offset
	// below the log's start is ErrOffsetOutOfRange.
	Read(from uint64, max int) ([]Message, error)
	// NextOffset is the offset the next appended message will get.
	NextOffset() uint64
	// StoreConsumerOffset records a consumer's offset (durably for
	// FileStore). Storing an offset past NextOffset is ErrOffsetOutOfRange.
	StoreConsumerOffset(consumer string, offset uint64) error
	// ConsumerOffset returns the consumer's stored offset.
	ConsumerOffset(consumer string) (offset uint64, ok bool, err error)
	// Close releases files. The partition's data stays in its store.
	Close() error
}

// Store builds and removes partitions. Build and Remove do I/O and are
// called by the reconciler, off the shard pump.
type Store interface {
	// Build creates the partition for (ns, epoch): its directory, its first
	// segment (preallocated when configured) and its offsets directories. If
	// the store already holds ns at the same epoch (a clean reopen), Build
	// opens it with its messages and consumer offsets; if it holds ns at
	// another epoch, that dead incarnation's data is discarded first.
	Build(ns metadata.Namespace, epoch uint64) (Partition, error)
	// Remove deletes everything the store holds for ns. Removing a
	// namespace the store does not hold is not an error.
	Remove(ns metadata.Namespace) error
}

var (
	// ErrEmptyBatch reports an Append with no messages.
	ErrEmptyBatch = errors.New("parkway: empty batch")
	// ErrOffsetOutOfRange reports an offset outside the log.
	ErrOffsetOutOfRange = errors.New("parkway: offset out of range")
	// ErrCorrupt reports data that fails its checksum or cannot be decoded.
	// It is wrapped in a *CorruptError carrying the path and offset.
	ErrCorrupt = errors.New("parkway: corrupt data")
	// ErrClosed reports use of a closed partition.
	ErrClosed = errors.New("parkway: partition closed")
)
