package metadata

import "errors"

// Sentinel errors returned by Store.Apply. They are wrapped with context (the
// offending name or id); test for them with errors.Is.
var (
	// ErrInvalidName reports a stream or topic name that is empty, longer
	// than MaxNameLength bytes, not valid UTF-8, or contains a control
	// character.
	ErrInvalidName = errors.New("parkway: invalid name")
	// ErrStreamExists reports a CreateStream whose name is taken. Stream
	// names are unique per node, case-sensitive.
	ErrStreamExists = errors.New("parkway: stream already exists")
	// ErrTopicExists reports a CreateTopic whose name is taken in its
	// stream. Topic names are unique per stream, case-sensitive.
	ErrTopicExists = errors.New("parkway: topic already exists")
	// ErrStreamNotFound reports a command naming a stream id that is not
	// in use.
	ErrStreamNotFound = errors.New("parkway: stream not found")
	// ErrTopicNotFound reports a command naming a topic id that is not in
	// use in its stream.
	ErrTopicNotFound = errors.New("parkway: topic not found")
	// ErrInvalidPartitionCount reports a CreateTopic with Partitions outside
	// 1..MaxPartitionsPerTopic, a CreatePartitions or DeletePartitions with
	// Count < 1, a DeletePartitions removing more partitions than exist, or
	// a CreatePartitions growing a topic past MaxPartitionID.
	ErrInvalidPartitionCount = errors.New("parkway: invalid partition count")
	// ErrTooManyStreams reports that every stream id up to MaxStreamID is
	// in use.
	ErrTooManyStreams = errors.New("parkway: too many streams")
	// ErrTooManyTopics reports that every topic id up to MaxTopicID is in
	// use in the stream.
	ErrTooManyTopics = errors.New("parkway: too many topics")
	// ErrUnknownCommand reports a nil command, or one that is not one of
	// this package's command types.
	ErrUnknownCommand = errors.New("parkway: unknown command")
	// ErrInvalidTopicConfig reports a TopicConfig with an unknown fsync
	// policy or a negative duration or size.
	ErrInvalidTopicConfig = errors.New("parkway: invalid topic config")
	// ErrStaleRevision reports a command whose Revision (or
	// StreamRevision) names an incarnation of the stream or topic that is
	// gone: the id now belongs to another. It is always wrapped together
	// with ErrStreamNotFound or ErrTopicNotFound.
	ErrStaleRevision = errors.New("parkway: stale revision")
)
