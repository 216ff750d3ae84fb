package host

import (
	"context"
	"fmt"

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
// and after a restart Start hands them back to their partition
// (shard.Shard.Carry), appended if the journal lost them.
func (e *Engine) ApplyMetadataCarrying(ctx context.Context, cmd metadata.Command, part uint32, msgs []partition.Message, logged func(ann []metadata.AnnouncedPartition, carried func(error))) (metadata.Result, error) {
	plain := func(ann []metadata.AnnouncedPartition) { logged(ann, nil) }
	if e.cl != nil || e.durable == nil || e.cfg.Manual || e.closed.Load() || ctx.Err() != nil || !e.carries(cmd) {
		return e.ApplyMetadataLogged(ctx, cmd, plain)
	}
	records, err := partition.EncodeBatch(nil, msgs)
	if err != nil || len(records) == 0 || len(records) > metadata.MaxCarriedBytes {
		return e.ApplyMetadataLogged(ctx, cmd, plain)
	}
	res, _, err := e.durable.ApplyCarrying(cmd, part, records, func(ann []metadata.AnnouncedPartition) {
		for _, a := range ann {
			if a.Partition == part {
				// The Durable carries the records exactly when it
				// announces part: the produce may rely on them.
				logged(ann, e.settler(a.NS, a.CreatedRevision))
				return
			}
		}
		logged(ann, nil)
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

// carryBack hands every carried batch the metadata log still holds to its
// partition's shard (shard.Shard.Carry), before the reconcilers run: a
// partition whose journal lost its first messages (they were acknowledged
// on the metadata log's fsync alone) gets them back before anything else
// is appended to it. A batch whose incarnation is gone (its topic deleted)
// is settled. One that does not decode is damage in a record whose
// checksum held: Start fails rather than serve a partition without what
// was acknowledged.
func (e *Engine) carryBack(ctx context.Context) error {
	if e.durable == nil {
		return nil
	}
	for _, c := range e.durable.Carried() {
		info, ok := e.meta.Partition(c.NS)
		if !ok || info.CreatedRevision != c.Epoch || info.Owner < 0 || info.Owner >= len(e.shards) {
			e.durable.Settle(c.NS, c.Epoch)
			continue
		}
		msgs, err := partition.DecodeBatch(c.Records)
		if err != nil {
			return fmt.Errorf("%w: the first messages of %v logged with its topic: %w", metadata.ErrCorruptLog, c.NS, err)
		}
		req := &shard.Request{Op: shard.OpProduce, NS: c.NS, Epoch: c.Epoch, Messages: msgs, Carried: e.settler(c.NS, c.Epoch)}
		if err := e.shards[info.Owner].Carry(ctx, req); err != nil {
			return fmt.Errorf("parkway: hand back the first messages of %v: %w", c.NS, err)
		}
	}
	return nil
}
