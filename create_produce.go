package parkway

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/shard"
)

// CreateTopicAndProduce creates a topic, as Admin.CreateTopic, and
// produces msgs to its partition part, as Produce, at once: the barrier's
// own case, a host that creates a topic because it has a message for it.
// It returns the topic once it is committed and the produce's
// acknowledgement once the messages are appended, whichever fails first
// being the error (a topic that was created is returned with a produce's
// error).
//
// On one node with a DataDir the produce is sent to the partition's shard
// as soon as the command is written to the metadata log, before its
// fsync. Under FsyncAlways, when the messages fit
// metadata.MaxCarriedBytes encoded, they are written in the command's
// record of the metadata log: that log's one fsync makes the topic and
// its first messages durable together, so the acknowledgement costs one
// fsync, and the partition's own fsync of them follows off the
// acknowledgement's path (DESIGN behaviour 32; until it has, the log
// keeps them, and a partition built for the topic — after a restart, a
// failed fsync, or a produce that never reached its shard — takes them
// from the log if it lacks them). Otherwise the messages are written to the node's
// journal while the command is made durable, and with
// Config.PrebuildPartitions (the partition is then in the shard during
// that fsync, held provisional: nothing of it is shown and no produce to
// it is acknowledged before its topic commits) the two fsyncs overlap.
// In a cluster the produce waits for the commit as a Produce after
// CreateTopic does. The promise of each half is its own call's: the
// topic is durable when it is returned, and an acknowledged produce is
// durable per the topic's fsync policy in a topic that exists.
//
// If making the command durable fails after the produce was sent (the
// metadata log's fsync fails), the error matches ErrOutcomeUnknown as
// well as its cause: the command may be in the log all the same, and a
// restart that reads it commits the topic with its messages (those the
// record carries, or those the journal holds), or it may not be. Neither half can be said to have failed; the
// caller looks the topic up (after a restart) to know.
func (n *Node) CreateTopicAndProduce(ctx context.Context, s Stream, name string, partitions int, part uint32, msgs []Message, opts ...TopicOption) (Topic, Ack, error) {
	start := n.cfg.Clock.Now()
	if err := n.begin(ctx); err != nil {
		return Topic{}, Ack{}, err
	}
	if err := n.liveStream(ctx, s); err != nil {
		return Topic{}, Ack{}, err
	}
	if partitions > 0 && int64(part) >= int64(partitions) {
		return Topic{}, Ack{}, fmt.Errorf("%w: partition %d of %d", ErrInvalidArgument, part, partitions)
	}
	batch, size, _, err := n.prepareBatch(ctx, start, PartitionID(part), msgs, nil, nil)
	if err != nil {
		return Topic{}, Ack{}, err
	}
	var cfg TopicConfig
	for _, o := range opts {
		o(&cfg)
	}
	cmd := metadata.CreateTopic{Stream: s.ID, StreamRevision: s.Revision, Name: name, Partitions: partitions, Config: cfg.engine()}
	reply := make(chan shard.Response, 1)
	sent, carrying := false, false
	var (
		ns    metadata.Namespace
		owner int
	)
	res, err := n.eng.ApplyMetadataCarrying(ctx, cmd, part, engineMessages(batch), func(ann []metadata.AnnouncedPartition, carried func(error)) {
		for _, a := range ann {
			if a.Partition != part {
				continue
			}
			// Stamped with the incarnation the command will commit: if it
			// commits another (or none), the shard never serves it there.
			// Carried: the messages ride in the command's record of the
			// metadata log, so the shard answers without a second fsync.
			req := &shard.Request{Op: shard.OpProduce, NS: a.NS, Epoch: a.CreatedRevision, Messages: engineMessages(batch), Deadline: n.callDeadline(ctx, start), Carried: carried}
			_, serr := n.eng.Router().Send(a.NS, shard.Frame{Req: req, Reply: reply})
			sent, carrying, ns, owner = serr == nil, carried != nil, a.NS, a.Owner
			return
		}
	})
	if err != nil {
		err = n.staleCommand(err, s.String())
		if sent || carrying {
			// The command was written to the metadata log, with the
			// messages in its record or sent to the partition's
			// journal; what failed came after (the log's fsync). The
			// held answer is not waited for: the partition is torn
			// down here, but the command may still be read from the
			// log at the next start, with the messages.
			return Topic{}, Ack{}, shard.OutcomeUnknown(fmt.Errorf("the topic's command was logged and its messages sent before it failed: %w", err))
		}
		return Topic{}, Ack{}, err
	}
	t := Topic{Stream: s, ID: res.Topic, Revision: res.Revision, Name: name}
	if carrying {
		ack, err := n.carriedAck(ctx, t, part, len(batch), size, start, sent, ns, owner, reply)
		return t, ack, err
	}
	if sent {
		// Committed: the partition's shard releases the held answer now,
		// not at the reconciler's next pass.
		if err := n.eng.ConfirmProvisional(ctx, ns, owner); err != nil {
			return t, Ack{}, publicError(err)
		}
		var r shard.Response
		select {
		case r = <-reply:
		case <-ctx.Done():
			return t, Ack{}, ctx.Err()
		}
		switch {
		case r.Err == nil:
			count := len(batch)
			n.countProduced(t, count, size, start)
			return t, Ack{Partition: part, FirstOffset: r.Offset, Count: count}, nil
		case !errors.Is(r.Err, shard.ErrRetry):
			return t, Ack{}, publicError(r.Err)
		}
		// "Retry here": not appended (the partition was not there yet
		// when the frame expired, or its incarnation was refused). Sent
		// again the ordinary way, with the ordinary retries.
	}
	ack, err := n.Produce(ctx, t, PartitionID(part), msgs...)
	return t, ack, err
}

// carriedAck is CreateTopicAndProduce's acknowledgement once a command
// whose record carries the messages has committed: they are committed with
// the topic, at offset 0 (the partition's first), whatever becomes of the
// produce sent with it — a partition built or confirmed without them takes
// them first (shard.Config.Carried) — so no answer of that produce is a
// reason to produce them again, which would append them twice. The
// confirmation releases the shard's held answer, or hands the messages to
// a provisional partition the produce never reached (the send failed).
func (n *Node) carriedAck(ctx context.Context, t Topic, part uint32, count, size int, start time.Time, sent bool, ns metadata.Namespace, owner int, reply <-chan shard.Response) (Ack, error) {
	if err := n.eng.ConfirmProvisional(ctx, ns, owner); err != nil {
		return Ack{}, shard.OutcomeUnknown(fmt.Errorf("the topic committed with its messages: %w", publicError(err)))
	}
	if sent {
		var r shard.Response
		select {
		case r = <-reply:
		case <-ctx.Done():
			return Ack{}, shard.OutcomeUnknown(fmt.Errorf("the topic committed with its messages: %w", ctx.Err()))
		}
		if r.Err != nil && !errors.Is(r.Err, shard.ErrRetry) {
			// Committed all the same: never an error that invites
			// producing them again.
			return Ack{}, shard.OutcomeUnknown(fmt.Errorf("the topic committed with its messages: %w", publicError(r.Err)))
		}
		// ErrRetry: not appended yet (the frame expired parked, say);
		// the partition takes them at its build.
	}
	n.countProduced(t, count, size, start)
	return Ack{Partition: part, FirstOffset: 0, Count: count}, nil
}
