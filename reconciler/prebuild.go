package reconciler

import (
	"context"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
)

// Prebuilder is a Reconciler that can build the partitions of announced
// metadata commands (metadata.Store.Announce) before they commit, so that
// a new partition's files are created while its metadata is made durable
// rather than after. RunPrebuilding calls Prebuild on every announcement
// wake and Release when it stops. Partitions implements it.
type Prebuilder interface {
	Reconciler
	// Prebuild builds the announced partitions this reconciler would
	// build once they commit. It must not run concurrently with a pass.
	Prebuild(ctx context.Context) error
	// Release closes what Prebuild built and no pass adopted. The files
	// stay: a restart's orphan sweep removes those of commands that never
	// committed, and a rebuild at the committed incarnation reopens the
	// others.
	Release()
}

// prebuilt is a partition built for an announced command, not yet handed
// to the shard.
type prebuilt struct {
	p     partition.Partition
	epoch uint64
}

// Prebuild builds, off the shard's pump and ahead of the commit, the
// partitions that announced commands will create on this shard. A pass
// that finds one committed with the announced incarnation hands the built
// partition to the shard instead of building it (adopt); one whose
// command did not commit as announced is closed and removed (discard).
//
// A namespace is left to the passes — built after its commit as without
// announcements — when it is already committed, when this shard still
// holds an incarnation of it (its teardown comes first), or when a build
// or teardown of it is backed off. A prebuild that fails is not counted
// as a failure: the pass after the commit builds the partition and backs
// off if that fails too.
//
// Under FsyncAlways the new partition's layout (its directories and
// incarnation file) is also fsynced here, so the first acknowledgement
// waits for the fsync of its message alone. Under the other policies the
// layout is synced by the partition's first Sync, as for a partition built
// after its commit.
func (r *Partitions) Prebuild(ctx context.Context) error {
	ann := r.cfg.Meta.Announced()
	r.discard(ann)
	for _, a := range ann {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !r.mine(a.PartitionInfo) {
			continue
		}
		if _, ok := r.prebuilt[a.NS]; ok {
			continue
		}
		if _, ok := r.cfg.Meta.Partition(a.NS); ok {
			continue // committed: the pass builds it (or it is an older incarnation)
		}
		if _, ok := r.held.Get(heldPartition{ns: a.NS}); ok {
			continue // an older incarnation is still held: a pass tears it down first
		}
		if r.backedOff(backoffKey{a.NS, causeAdd}) || r.backedOff(backoffKey{a.NS, causeDelete}) {
			continue
		}
		p, err := r.cfg.Store.Build(a.NS, a.CreatedRevision)
		if err != nil {
			r.log.Debug("prebuild failed; the partition is built after its commit", "ns", a.NS, "error", err)
			continue
		}
		if r.durabilityOf(a.Config).Fsync == metadata.FsyncAlways {
			// A fresh partition has no message: Sync makes its layout
			// durable and nothing else.
			if err := p.Sync(); err != nil {
				r.log.Debug("prebuild sync failed; the partition is built after its commit", "ns", a.NS, "error", err)
				r.drop(a.NS, prebuilt{p: p, epoch: a.CreatedRevision})
				continue
			}
		}
		r.prebuilt[a.NS] = prebuilt{p: p, epoch: a.CreatedRevision}
	}
	return nil
}

// Release implements Prebuilder.
func (r *Partitions) Release() {
	for ns, pb := range r.prebuilt {
		_ = pb.p.Close()
		delete(r.prebuilt, ns)
	}
}

// discard drops the prebuilt partitions that neither the committed
// metadata nor a live announcement (ann, as Store.Announced returns it)
// has at their incarnation.
func (r *Partitions) discard(ann []metadata.AnnouncedPartition) {
	for ns, pb := range r.prebuilt {
		if rev, ok := r.cfg.Meta.CreatedRevision(ns); ok && rev == pb.epoch {
			continue // committed as announced: the next pass adopts it
		}
		if announced(ann, ns, pb.epoch) {
			continue
		}
		r.drop(ns, pb)
	}
}

// drop closes a prebuilt partition and, unless its namespace is committed
// (at another incarnation, whose build discards these files anyway),
// removes its files.
func (r *Partitions) drop(ns metadata.Namespace, pb prebuilt) {
	delete(r.prebuilt, ns)
	if err := pb.p.Close(); err != nil {
		r.log.Debug("closing a discarded prebuilt partition", "ns", ns, "error", err)
	}
	if _, ok := r.cfg.Meta.Partition(ns); ok {
		return
	}
	if err := r.cfg.Store.Remove(ns); err != nil {
		// Left for the start-time orphan sweep, or the next build of ns,
		// which starts over from an empty directory.
		r.log.Warn("removing a discarded prebuilt partition", "ns", ns, "error", err)
	}
}

// adopt returns the partition prebuilt for info, if one was built for its
// committed incarnation; a prebuilt partition of another incarnation is
// dropped.
func (r *Partitions) adopt(info metadata.PartitionInfo) (partition.Partition, bool) {
	pb, ok := r.prebuilt[info.NS]
	if !ok {
		return nil, false
	}
	if pb.epoch != info.CreatedRevision {
		r.drop(info.NS, pb)
		return nil, false
	}
	delete(r.prebuilt, info.NS)
	return pb.p, true
}

// announced reports whether ann (sorted by namespace) holds ns at epoch.
func announced(ann []metadata.AnnouncedPartition, ns metadata.Namespace, epoch uint64) bool {
	for _, a := range ann {
		if a.NS == ns && a.CreatedRevision == epoch {
			return true
		}
	}
	return false
}
