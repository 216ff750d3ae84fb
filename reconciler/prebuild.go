package reconciler

import (
	"context"
	"errors"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/shard"
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
// to the shard as committed: kept here, or held by the shard provisional
// (inShard: shard.InsertProvisional).
type prebuilt struct {
	p       partition.Partition
	epoch   uint64
	inShard bool
}

// Prebuild builds, off the shard's pump and ahead of the commit, the
// partitions that announced commands will create on this shard. A pass
// that finds one committed with the announced incarnation hands the built
// partition to the shard instead of building it (adopt); one whose
// command did not commit as announced is closed and removed (discard).
//
// On one node the partition goes to the shard at once, provisional
// (shard.InsertProvisional): a produce that reaches it before the commit
// is written while the command is made durable, and answered once it
// commits, so a create and a produce issued together wait for the
// metadata log's fsync and the journal's at the same time, not one after
// the other (DESIGN behaviour 32). A partition of a cluster waits here:
// its raft group starts at the commit.
//
// A namespace is left to the passes — built after its commit as without
// announcements — when it is already committed, when this shard still
// holds an incarnation of it (its teardown comes first), or when a build
// or teardown of it is backed off. A prebuild that fails is not counted
// as a failure: the pass after the commit builds the partition and backs
// off if that fails too.
//
// A partition built with files of its own (not deferred) under
// FsyncAlways has its layout (its directories and incarnation file)
// fsynced here too, so the first acknowledgement waits for the fsync of
// its message alone. A deferred one has nothing on disk to sync.
func (r *Partitions) Prebuild(ctx context.Context) error {
	ann := r.cfg.Meta.Announced()
	if err := r.discard(ctx, ann); err != nil {
		return err
	}
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
		want := r.durabilityOf(a.Config)
		build, deferred := r.builder(want)
		if r.cfg.Shard.Replicated() {
			// A replica's files are built here whole, as before the
			// commit there is no raft group to hold its records.
			build, deferred = r.cfg.Store.Build, false
		}
		p, err := build(a.NS, a.CreatedRevision)
		if err != nil {
			r.log.Debug("prebuild failed; the partition is built after its commit", "ns", a.NS, "error", err)
			continue
		}
		pb := prebuilt{p: p, epoch: a.CreatedRevision}
		if !deferred && want.Fsync == metadata.FsyncAlways {
			// A fresh partition has no message: Sync makes its layout
			// durable and nothing else.
			if err := p.Sync(); err != nil {
				r.log.Debug("prebuild sync failed; the partition is built after its commit", "ns", a.NS, "error", err)
				if err := r.drop(ctx, a.NS, pb); err != nil {
					return err
				}
				continue
			}
		}
		if !r.cfg.Shard.Replicated() {
			err := r.cfg.Shard.InsertProvisional(ctx, p, want)
			switch {
			case errors.Is(err, shard.ErrProvisional):
				// Refused and closed by the shard: built after the
				// commit, as without an announcement.
				r.removeFiles(a.NS)
				continue
			case err != nil:
				return err
			}
			pb.inShard = true
		}
		r.prebuilt[a.NS] = pb
	}
	return nil
}

// Release implements Prebuilder. A partition the shard holds provisional
// is the shard's to close.
func (r *Partitions) Release() {
	for ns, pb := range r.prebuilt {
		if !pb.inShard {
			_ = pb.p.Close()
		}
		delete(r.prebuilt, ns)
	}
}

// discard drops the prebuilt partitions that neither the committed
// metadata nor a live announcement (ann, as Store.Announced returns it)
// has at their incarnation.
func (r *Partitions) discard(ctx context.Context, ann []metadata.AnnouncedPartition) error {
	for _, ns := range sortedKeys(r.prebuilt) {
		pb := r.prebuilt[ns]
		if rev, ok := r.cfg.Meta.CreatedRevision(ns); ok && rev == pb.epoch {
			continue // committed as announced: the next pass adopts it
		}
		if announced(ann, ns, pb.epoch) {
			continue
		}
		if err := r.drop(ctx, ns, pb); err != nil {
			return err
		}
	}
	return nil
}

// drop closes a prebuilt partition (a provisional one is torn down on the
// shard, whose held answers say the writes were not made) and, unless its
// namespace is committed (at another incarnation, whose build discards
// these files anyway), removes its files.
func (r *Partitions) drop(ctx context.Context, ns metadata.Namespace, pb prebuilt) error {
	delete(r.prebuilt, ns)
	if pb.inShard {
		if _, err := r.cfg.Shard.Tombstone(ctx, ns); err != nil {
			return err
		}
		r.removeFiles(ns)
		return r.cfg.Shard.RemoveOwned(ctx, ns)
	}
	if err := pb.p.Close(); err != nil {
		r.log.Debug("closing a discarded prebuilt partition", "ns", ns, "error", err)
	}
	r.removeFiles(ns)
	return nil
}

// removeFiles removes the files of a discarded prebuilt partition unless
// its namespace is committed.
func (r *Partitions) removeFiles(ns metadata.Namespace) {
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
// committed incarnation (a provisional one is confirmed by the
// InsertOwned that follows); a prebuilt partition of another incarnation
// is dropped.
func (r *Partitions) adopt(ctx context.Context, info metadata.PartitionInfo) (partition.Partition, bool) {
	pb, ok := r.prebuilt[info.NS]
	if !ok {
		return nil, false
	}
	if pb.epoch != info.CreatedRevision {
		if err := r.drop(ctx, info.NS, pb); err != nil {
			r.log.Debug("dropping a prebuilt partition of another incarnation", "ns", info.NS, "error", err)
		}
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
