// Command convergence exercises the materialisation barrier across shards.
//
//	go run ./examples/convergence
//
// It opens an in-memory node with two shards, creates eight one-partition
// topics back to back and only then produces one message to each: the
// partitions are most likely not materialised yet, so each produce parks at
// the shard that will own its partition and is served once the reconciler
// builds it. The eight namespaces (0, t, 0) straddle both shards, so the
// cross-shard path is covered.
//
// It then deletes and recreates every topic. Stream and topic ids are slab
// slots reused lowest-first, so each recreated topic gets the same ids and
// therefore a byte-identical namespace, but a new incarnation. A new message
// is produced to each and the partitions are polled from offset 0: only the
// new incarnation's message may come back.
//
// It prints what happened and exits non-zero, printing FAIL and why, if any
// of that does not hold.
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/router"
)

const (
	shards = 2
	topics = 8
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "convergence: FAIL:", err)
		os.Exit(1)
	}
}

func run() error {
	node, err := parkway.Open(parkway.Config{Shards: shards})
	if err != nil {
		return err
	}
	defer node.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	stream, err := node.Admin().CreateStream(ctx, "convergence")
	if err != nil {
		return fmt.Errorf("create stream: %w", err)
	}

	// Phase 1: create every topic first, then produce to each right away.
	ids, err := createTopics(ctx, node, stream)
	if err != nil {
		return err
	}
	owners := make([]int, topics)
	seen := make(map[int]bool)
	for i, topic := range ids {
		ns, err := metadata.NewNamespace(stream.ID, topic.ID, 0)
		if err != nil {
			return err
		}
		owners[i] = router.Assign(ns, shards)
		seen[owners[i]] = true
		payload := []byte(fmt.Sprintf("first %d", i))
		ack, err := node.Produce(ctx, topic, parkway.PartitionID(0), parkway.Message{Payload: payload})
		if err != nil {
			return fmt.Errorf("produce to %v: %w", ns, err)
		}
		if ack.FirstOffset != 0 || ack.Count != 1 {
			return fmt.Errorf("produce to %v: acked %d message(s) at offset %d, want 1 at offset 0", ns, ack.Count, ack.FirstOffset)
		}
		if err := expectOnly(ctx, node, topic, payload); err != nil {
			return fmt.Errorf("%v: %w", ns, err)
		}
		fmt.Printf("topic %-9s namespace %-6v owner shard %d  acked at offset %d\n",
			topicName(i), ns, owners[i], ack.FirstOffset)
	}
	if len(seen) != shards {
		return fmt.Errorf("namespaces landed on %d shard(s), want all %d: the cross-shard path is not covered", len(seen), shards)
	}

	// Phase 2: delete and recreate every topic, then produce a new message.
	for i, topic := range ids {
		if err := node.Admin().DeleteTopic(ctx, topic); err != nil {
			return fmt.Errorf("delete topic %s: %w", topicName(i), err)
		}
	}
	again, err := createTopics(ctx, node, stream)
	if err != nil {
		return err
	}
	stale := 0
	for i, topic := range again {
		if topic.ID != ids[i].ID || topic == ids[i] {
			return fmt.Errorf("recreated topic %s got id %d, want the reused slab id %d in a new incarnation", topicName(i), topic.ID, ids[i].ID)
		}
		ns, _ := metadata.NewNamespace(stream.ID, topic.ID, 0)
		payload := []byte(fmt.Sprintf("second %d", i))
		ack, err := node.Produce(ctx, topic, parkway.PartitionID(0), parkway.Message{Payload: payload})
		if err != nil {
			return fmt.Errorf("produce to recreated %v: %w", ns, err)
		}
		if ack.FirstOffset != 0 {
			return fmt.Errorf("produce to recreated %v: acked at offset %d, want 0 (a fresh incarnation)", ns, ack.FirstOffset)
		}
		b, err := node.Poll(ctx, topic, 0, parkway.AtOffset(0), 100)
		if err != nil {
			return fmt.Errorf("poll recreated %v: %w", ns, err)
		}
		for _, m := range b.Messages {
			if bytes.HasPrefix(m.Payload, []byte("first ")) {
				stale++
			}
		}
		if len(b.Messages) != 1 || b.Messages[0].Offset != 0 || !bytes.Equal(b.Messages[0].Payload, payload) {
			return fmt.Errorf("recreated %v served %s, want exactly %q at offset 0", ns, describe(b.Messages), payload)
		}
		fmt.Printf("topic %-9s namespace %-6v recreated, new message acked at offset %d, old incarnation not served\n",
			topicName(i), ns, ack.FirstOffset)
	}
	if stale != 0 {
		return fmt.Errorf("%d stale messages served", stale)
	}

	ownerList := make([]string, len(owners))
	for i, o := range owners {
		ownerList[i] = fmt.Sprint(o)
	}
	fmt.Printf("convergence: OK: %d topics on %d shards (owners %s), %d recreated, %d stale messages served\n",
		topics, shards, strings.Join(ownerList, " "), len(again), stale)
	return nil
}

func topicName(i int) string { return fmt.Sprintf("topic-%d", i) }

// createTopics creates every topic before anything is produced, so the
// produces that follow race the reconcilers.
func createTopics(ctx context.Context, node *parkway.Node, stream parkway.Stream) ([]parkway.Topic, error) {
	ids := make([]parkway.Topic, topics)
	for i := range ids {
		id, err := node.Admin().CreateTopic(ctx, stream, topicName(i), 1)
		if err != nil {
			return nil, fmt.Errorf("create topic %s: %w", topicName(i), err)
		}
		ids[i] = id
	}
	return ids, nil
}

// expectOnly polls a partition from offset 0 and checks it holds exactly
// one message, payload, at offset 0.
func expectOnly(ctx context.Context, node *parkway.Node, topic parkway.Topic, payload []byte) error {
	b, err := node.Poll(ctx, topic, 0, parkway.AtOffset(0), 100)
	if err != nil {
		return fmt.Errorf("poll: %w", err)
	}
	if len(b.Messages) != 1 || b.Messages[0].Offset != 0 || !bytes.Equal(b.Messages[0].Payload, payload) {
		return errors.New("poll served " + describe(b.Messages) + fmt.Sprintf(", want exactly %q at offset 0", payload))
	}
	return nil
}

func describe(msgs []parkway.Message) string {
	parts := make([]string, len(msgs))
	for i, m := range msgs {
		parts[i] = fmt.Sprintf("%q@%d", m.Payload, m.Offset)
	}
	return fmt.Sprintf("%d message(s) [%s]", len(msgs), strings.Join(parts, " "))
}
