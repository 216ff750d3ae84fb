package host

import (
	"context"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/reconciler"
	"github.com/parkway-io/parkway/shard"
)

// ApplyMetadataCarrying is ApplyMetadataLogged for a command creating a
// topic, with msgs, the messages of a produce to its partition part issued
// together with it (the barrier's own case). On one node with a DataDir,
// when the topic is under FsyncAlways and the encoded messages fit
// metadata.MaxCarriedBytes, the messages ride in the command's record of
// the metadata log (metadata.Durable.ApplyCarrying): one fsync makes the
// topic and its first messages durable, and the produce sent from logged
// with Request.Carried set to carried is answered without an fsync of its
// own (DESIGN behaviour 32). Otherwise carried is nil and the produce
// waits for its partition's fsync as any other.
//
// carried settles the metadata log's copy once the partition's own fsync
// covers the messages; until then the log keeps them across snapshots,
// and a partition built or confirmed for the incarnation takes them first
// if it lacks them (carriedFor). So once a command whose messages were
// carried commits, they are committed with it, at offset 0: whatever the
// produce's answer (it may never reach its shard, or expire parked), the
// caller must not produce them again, which would append them twice.
// ConfirmProvisional after the commit hands them to a provisional
// partition the produce did not reach.
func (e *Engine) ApplyMetadataCarrying(ctx context.Context, cmd metadata.Command, part uint32, msgs []partition.Message, logged func(ann []metadata.AnnouncedPartition, carried func(error))) (metadata.Result, error) {
	plain := func(ann []metadata.AnnouncedPartition) { logged(ann, nil) }
	if e.cl != nil || e.durable == nil || e.cfg.Manual || e.closed.Load() || ctx.Err() != nil || !e.carries(cmd) {
		return e.ApplyMetadataLogged(ctx, cmd, plain)
	}
	records, err := partition.EncodeBatch(nil, msgs)
	if err != nil {
		return e.ApplyMetadataLogged(ctx, cmd, plain)
	}
	// The Durable decides whether the records ride (their size, the
	// partition announced) and says so: only then may the produce rely
	// on them.
	res, _, err := e.durable.ApplyCarrying(cmd, part, records, func(ann []metadata.AnnouncedPartition, carried bool) {
		var settle func(error)
		if carried {
			for _, a := range ann {
				if a.Partition == part {
					settle = e.settler(a.NS, a.CreatedRevision)
					break
				}
			}
		}
		logged(ann, settle)
	})
	return res, err
}

// carries reports whether cmd creates a topic under FsyncAlways (resolved
// against the node's defaults as its partitions will be): the only policy
// whose first acknowledgement waits for an fsync, which carrying saves.
func (e *Engine) carries(cmd metadata.Command) bool {
	var tc metadata.TopicConfig
	switch c := cmd.(type) {
	case metadata.CreateTopic:
		tc = c.Config
	case *metadata.CreateTopic:
		if c == nil {
			return false
		}
		tc = c.Config
	default:
		return false
	}
	return reconciler.DurabilityOf(e.cfg.Defaults, tc).Fsync == metadata.FsyncAlways
}

// settler is a carried produce's Request.Carried: once an fsync of the
// partition covers the messages, the metadata log may forget them.
func (e *Engine) settler(ns metadata.Namespace, epoch uint64) func(error) {
	return func(err error) {
		if err == nil {
			e.durable.Settle(ns, epoch)
		}
	}
}

// carriedFor is the shards' Config.Carried: the carried produce the
// metadata log holds for an incarnation, which a partition built or
// confirmed for it takes first (a start after a crash that lost the
// journal's copy, a rebuild after a failed fsync, a produce that never
// reached its shard). Records that do not decode passed the log's
// checksum, so they are a fault of this build, not of the disk: logged
// as an error, and the partition is built without them.
func (e *Engine) carriedFor(ns metadata.Namespace, epoch uint64) *shard.Request {
	c, ok := e.durable.CarriedFor(ns, epoch)
	if !ok {
		return nil
	}
	msgs, err := partition.DecodeBatch(c.Records)
	if err != nil {
		e.cfg.Logger.Error("the first messages logged with a topic do not decode; the partition is built without them", "ns", ns, "epoch", epoch, "error", err)
		return nil
	}
	return &shard.Request{Op: shard.OpProduce, NS: ns, Epoch: epoch, Messages: msgs, Carried: e.settler(ns, epoch)}
}
