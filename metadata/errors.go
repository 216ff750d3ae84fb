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
	// Count < 1, a DeletePartitions removing all the partitions there are
	// (a topic keeps one) or more, or
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

	// ErrPartitionNotFound reports a partition id a topic does not have.
	ErrPartitionNotFound = errors.New("parkway: partition not found")

	// ErrGroupExists reports a CreateGroup whose name is taken on its
	// topic.
	ErrGroupExists = errors.New("parkway: consumer group already exists")
	// ErrGroupNotFound reports a command naming a consumer group its topic
	// does not have.
	ErrGroupNotFound = errors.New("parkway: consumer group not found")
	// ErrUnknownMember reports a member that is not in its group: it left,
	// or its session lapsed. It must join again.
	ErrUnknownMember = errors.New("parkway: unknown consumer group member")
	// ErrNotAssigned reports a poll or commit for a partition the member
	// does not hold in the group's current generation. The member should
	// refresh its assignment (heartbeat).
	ErrNotAssigned = errors.New("parkway: partition not assigned to this member")
	// ErrStaleGeneration reports a poll or commit made with a generation
	// older than the one from which the member holds the partition (the
	// partition moved away and back meanwhile, and someone else may have
	// committed it), or newer than the group's. The member should refresh
	// its assignment.
	ErrStaleGeneration = errors.New("parkway: stale consumer group generation")
	// ErrRebalanceInProgress reports a poll or commit of a partition its
	// member holds but may not read yet: the partition moved to it from a
	// member still in the group that has not released it (see
	// GroupPartition.Releasing). It is retriable: poll again shortly.
	ErrRebalanceInProgress = errors.New("parkway: partition not yet released by its previous holder")
	// ErrOffsetRegression reports a group commit below the offset the
	// group already committed for the partition: a group's committed
	// offset never goes backwards.
	ErrOffsetRegression = errors.New("parkway: group offset below the committed one")
	// ErrInvalidGroupRequest reports a group command with an invalid
	// argument: a session timeout out of range, a partition named twice.
	ErrInvalidGroupRequest = errors.New("parkway: invalid consumer group request")
	// ErrTooManyGroups reports a topic with MaxGroupsPerTopic groups.
	ErrTooManyGroups = errors.New("parkway: too many consumer groups")
	// ErrTooManyMembers reports a group with MaxMembersPerGroup members.
	ErrTooManyMembers = errors.New("parkway: too many consumer group members")
)
