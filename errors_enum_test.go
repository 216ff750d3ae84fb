package parkway_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/parkway-io/parkway"
)

// TestErrorsAreRootSentinels: errors the tour of issue 14 met without a
// root sentinel now match one with errors.Is — too many topics, an invalid
// topic config, a batch too large for the partition (5,000 messages of
// almost 1 MiB: MaxBatchBytes refuses it first), a config whose request
// timeout cannot outlive the park age bound, and lookups of an unknown
// parent.
func TestErrorsAreRootSentinels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{Shards: 1})
		ctx := ctxFor(t)
		s := mustStream(t, n, "s")

		_, err := n.Admin().CreateTopic(ctx, s, "bad", 1, parkway.WithRetention(-time.Second, 0))
		if !errors.Is(err, parkway.ErrInvalidTopicConfig) {
			t.Errorf("negative retention: %v, want ErrInvalidTopicConfig", err)
		}

		tp := mustTopic(t, n, s, "t", 1)
		payload := make([]byte, 1<<20-64)
		batch := make([]parkway.Message, 5000)
		for i := range batch {
			batch[i].Payload = payload
		}
		if _, err := n.Produce(ctx, tp, parkway.PartitionID(0), batch...); !errors.Is(err, parkway.ErrBatchTooLarge) {
			t.Errorf("5,000 × ~1 MiB batch: %v, want ErrBatchTooLarge", err)
		}

		if err := n.Admin().DeleteStream(ctx, s); err != nil {
			t.Fatal(err)
		}
		if _, err := n.Admin().Topics(ctx, s); !errors.Is(err, parkway.ErrStreamNotFound) {
			t.Errorf("Topics of a deleted stream: %v, want ErrStreamNotFound", err)
		}
		if _, err := n.Topic(ctx, s, "t"); !errors.Is(err, parkway.ErrStreamNotFound) {
			t.Errorf("Topic of a deleted stream: %v, want ErrStreamNotFound", err)
		}
		if _, err := n.Stream(ctx, "nope"); !errors.Is(err, parkway.ErrStreamNotFound) {
			t.Errorf("Stream of an unknown name: %v, want ErrStreamNotFound", err)
		}
		if _, err := n.Produce(ctx, parkway.Topic{}, parkway.Balanced(), parkway.Message{}); !errors.Is(err, parkway.ErrInvalidArgument) {
			t.Errorf("Produce with the zero handle: %v, want ErrInvalidArgument", err)
		}
	})

	t.Run("too many topics", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := open(t, parkway.Config{Shards: 1})
			ctx := ctxFor(t)
			s := mustStream(t, n, "s")
			var err error
			for i := 0; err == nil; i++ {
				_, err = n.Admin().CreateTopic(ctx, s, "t"+strconv.Itoa(i), 1)
				if i > 5000 {
					t.Fatal("no topic limit within 5,000 topics")
				}
			}
			if !errors.Is(err, parkway.ErrTooManyTopics) {
				t.Errorf("past the last topic id: %v, want ErrTooManyTopics", err)
			}
		})
	})

	t.Run("request timeout below the park age bound", func(t *testing.T) {
		_, err := parkway.Open(parkway.Config{RequestTimeout: time.Second})
		if !errors.Is(err, parkway.ErrInvalidConfig) || !strings.Contains(err.Error(), "RequestTimeout") {
			t.Errorf("RequestTimeout 1 s with 3 passes of 1 s: %v, want ErrInvalidConfig naming RequestTimeout", err)
		}
		if err := (parkway.Config{RequestTimeout: 4 * time.Second}).Validate(); err != nil {
			t.Errorf("RequestTimeout 4 s > 3 s: %v", err)
		}
	})
}
