package host_test

import (
	"context"
	"testing"
	"time"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/shard"
)

// A topic created with its first messages carried in the command's record
// (ApplyMetadataCarrying) whose produce never reaches its shard (the
// host's send failed, or its frame expired parked): the partition, built
// after the commit, takes the messages from the metadata log first, so a
// produce after it lands at offset 1, and the messages are there once.
// With prebuilt partitions the commit's confirmation hands them over.
func TestCarriedMessagesReachThePartitionWithoutTheirProduce(t *testing.T) {
	for _, prebuild := range []bool{false, true} {
		name := "built after the commit"
		if prebuild {
			name = "prebuilt"
		}
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			e, err := host.New(host.Config{Shards: 2, DataDir: t.TempDir(), PrebuildPartitions: prebuild})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			if err := e.Start(); err != nil {
				t.Fatal(err)
			}
			if _, err := e.ApplyMetadata(ctx, metadata.CreateStream{Name: "s"}); err != nil {
				t.Fatal(err)
			}
			cmd := metadata.CreateTopic{Stream: 0, Name: "t", Partitions: 1, Config: metadata.TopicConfig{Fsync: metadata.FsyncAlways}}
			first := []partition.Message{{Payload: []byte("first")}}
			var (
				ns      metadata.Namespace
				owner   int
				carried bool
			)
			if _, err := e.ApplyMetadataCarrying(ctx, cmd, 0, first, func(ann []metadata.AnnouncedPartition, settle func(error)) {
				// The produce is not sent: as if the send had failed.
				ns, owner, carried = ann[0].NS, ann[0].Owner, settle != nil
			}); err != nil {
				t.Fatal(err)
			}
			if !carried {
				t.Fatal("the messages were not carried")
			}
			if err := e.ConfirmProvisional(ctx, ns, owner); err != nil {
				t.Fatal(err)
			}
			r, err := e.Call(ctx, &shard.Request{Op: shard.OpProduce, NS: ns, Messages: []partition.Message{{Payload: []byte("later")}}}, nil)
			if err != nil || r.Err != nil {
				t.Fatalf("produce after the commit: %v, %v", err, r.Err)
			}
			if r.Offset != 1 {
				t.Fatalf("the produce after the commit took offset %d, want 1 (after the carried messages)", r.Offset)
			}
			r, err = e.Call(ctx, &shard.Request{Op: shard.OpPoll, NS: ns, Count: 10}, nil)
			if err != nil || r.Err != nil {
				t.Fatalf("poll: %v, %v", err, r.Err)
			}
			var got []string
			for _, m := range r.Messages {
				got = append(got, string(m.Payload))
			}
			if len(got) != 2 || got[0] != "first" || got[1] != "later" {
				t.Fatalf("partition holds %q, want [first later]", got)
			}
		})
	}
}
