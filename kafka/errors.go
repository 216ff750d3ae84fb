package kafka

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/parkway-io/parkway"
)

const errUnsupportedVersionCode = 35 // kerr.UnsupportedVersion

// errorCode maps a parkway error to the Kafka error code a client acts on:
// retriable codes for what a retry can fix (a partition still
// materialising, a timeout, a leader elsewhere), final ones otherwise.
func errorCode(err error) int16 {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, parkway.ErrTopicNotFound), errors.Is(err, parkway.ErrPartitionNotFound),
		errors.Is(err, parkway.ErrStreamNotFound):
		return kerr.UnknownTopicOrPartition.Code
	case errors.Is(err, parkway.ErrNotLeader):
		return kerr.NotLeaderForPartition.Code
	case errors.Is(err, parkway.ErrMessageTooLarge):
		return kerr.MessageTooLarge.Code
	case errors.Is(err, parkway.ErrBatchTooLarge):
		return kerr.RecordListTooLarge.Code
	case errors.Is(err, parkway.ErrOffsetOutOfRange):
		return kerr.OffsetOutOfRange.Code
	case errors.Is(err, parkway.ErrNoSpace), errors.Is(err, parkway.ErrPartitionFailed),
		errors.Is(err, parkway.ErrCorrupt), errors.Is(err, parkway.ErrMetadataFailed):
		return kerr.KafkaStorageError.Code
	case errors.Is(err, parkway.ErrTopicExists):
		return kerr.TopicAlreadyExists.Code
	case errors.Is(err, parkway.ErrInvalidName):
		return kerr.InvalidTopicException.Code
	case errors.Is(err, parkway.ErrInvalidPartitionCount), errors.Is(err, parkway.ErrTooManyTopics):
		return kerr.InvalidPartitions.Code
	case errors.Is(err, parkway.ErrNotEnoughNodes):
		return kerr.InvalidReplicationFactor.Code
	case errors.Is(err, parkway.ErrInvalidTopicConfig):
		return kerr.InvalidConfig.Code
	case errors.Is(err, parkway.ErrTooManyWaiters):
		return kerr.ThrottlingQuotaExceeded.Code
	case errors.Is(err, parkway.ErrClosed):
		return kerr.BrokerNotAvailable.Code
	case errors.Is(err, parkway.ErrRetry), errors.Is(err, parkway.ErrOutcomeUnknown),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return kerr.RequestTimedOut.Code
	case errors.Is(err, parkway.ErrInvalidArgument):
		return kerr.InvalidRequest.Code
	}
	return kerr.UnknownServerError.Code
}
