package metadata

import (
	"errors"
	"fmt"
)

// Namespace packs (stream id, topic id, partition id) into one uint64: the
// key for routing, parking and storage. The packing is the reference
// server's, so shard assignments agree with it:
//
//	bits  0–19  partition id (below 1,000,000)
//	bits 20–31  topic id     (below 4,096)
//	bits 32–51  stream id    (below 2^20)
//	bit  63     reserved for the metadata group
//
// Out-of-range ids are rejected by NewNamespace, never silently masked: a
// masked id would alias another partition's namespace.
type Namespace uint64

const (
	partitionBits = 20
	topicBits     = 12
	streamBits    = 20

	topicShift  = partitionBits
	streamShift = partitionBits + topicBits

	// MaxPartitionID is the largest partition id a namespace can hold. The
	// reference server caps ids below 1,000,000 even though 20 bits could
	// hold 1,048,575; we keep its limit so both agree on what is valid.
	MaxPartitionID = 999_999
	// MaxTopicID is the largest topic id (12 bits).
	MaxTopicID = 1<<topicBits - 1
	// MaxStreamID is the largest stream id (20 bits).
	MaxStreamID = 1<<streamBits - 1

	// MetadataNamespace is the namespace of the metadata group (bit 63). No
	// partition namespace can collide with it because stream ids stop at
	// bit 51.
	MetadataNamespace Namespace = 1 << 63
)

// ErrIDOutOfRange reports a stream, topic or partition id that does not fit
// its field of a Namespace.
var ErrIDOutOfRange = errors.New("parkway: id out of range")

// NewNamespace packs the ids, or reports ErrIDOutOfRange.
func NewNamespace(stream, topic, partition uint32) (Namespace, error) {
	switch {
	case stream > MaxStreamID:
		return 0, fmt.Errorf("%w: stream id %d > %d", ErrIDOutOfRange, stream, MaxStreamID)
	case topic > MaxTopicID:
		return 0, fmt.Errorf("%w: topic id %d > %d", ErrIDOutOfRange, topic, MaxTopicID)
	case partition > MaxPartitionID:
		return 0, fmt.Errorf("%w: partition id %d > %d", ErrIDOutOfRange, partition, MaxPartitionID)
	}
	return Namespace(uint64(stream)<<streamShift | uint64(topic)<<topicShift | uint64(partition)), nil
}

// Stream returns the stream id.
func (n Namespace) Stream() uint32 { return uint32(n>>streamShift) & MaxStreamID }

// Topic returns the topic id.
func (n Namespace) Topic() uint32 { return uint32(n>>topicShift) & MaxTopicID }

// Partition returns the partition id.
func (n Namespace) Partition() uint32 { return uint32(n) & (1<<partitionBits - 1) }

// String renders the namespace as stream/topic/partition.
func (n Namespace) String() string {
	if n == MetadataNamespace {
		return "metadata"
	}
	return fmt.Sprintf("%d/%d/%d", n.Stream(), n.Topic(), n.Partition())
}
