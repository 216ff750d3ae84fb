package shard

import (
	"sync"
	"sync/atomic"
)

// syncGroup makes a commit group's dirty partitions durable and returns
// the errors by index: through the shard's journal when it has one (one
// write and one fsync for the group, see partition.Journal), else by
// syncing each partition (syncEach).
func (cg *commitGroup) syncGroup(dirty []*owned) []error {
	j := cg.journal
	if j == nil {
		return cg.syncEach(dirty, func(o *owned) error { return o.p.Sync() })
	}
	ps := cg.groupParts[:0]
	for _, o := range dirty {
		ps = append(ps, o.p)
	}
	errs := j.Commit(ps)
	clear(ps)
	cg.groupParts = ps[:0]
	return errs
}

// stageGroup writes the records of a group's staged partitions (see
// owned.staged) to the shard's journal without an fsync
// (partition.Journal.Stage) and returns the errors by index.
func (cg *commitGroup) stageGroup(staged []*owned) []error {
	ps := cg.groupParts[:0]
	for _, o := range staged {
		ps = append(ps, o.p)
	}
	errs := cg.journal.Stage(ps)
	clear(ps)
	cg.groupParts = ps[:0]
	return errs
}

// maxSyncFanout bounds the fsyncs a shard has in flight at once. A commit
// group that covers several partitions syncs them concurrently: the
// filesystem then folds the syncs into as few journal commits as it can,
// so a group costs about one fsync whatever the number of partitions,
// instead of one fsync per partition back to back. Eight covers the
// commit groups a shard sees in practice without letting a group of
// hundreds of dirty partitions start hundreds of threads blocked in the
// kernel.
const maxSyncFanout = 8

// syncEach runs fn(o) for every o in parts and returns the errors by
// index. With more than one partition, and not in Manual mode, the calls
// run concurrently on at most maxSyncFanout goroutines — the pump and up
// to maxSyncFanout-1 helpers started here and joined before it returns —
// so they are owned by this call and no partition is touched by two
// goroutines: each partition is synced once, while the pump waits. A
// Manual shard runs them one after another in order, so a stepped run
// stays deterministic.
func (cg *commitGroup) syncEach(parts []*owned, fn func(*owned) error) []error {
	errs := make([]error, len(parts))
	if len(parts) <= 1 || cg.manual {
		for i, o := range parts {
			errs[i] = fn(o)
		}
		return errs
	}
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	work := func() {
		for {
			i := int(next.Add(1) - 1)
			if i >= len(parts) {
				return
			}
			errs[i] = fn(parts[i])
		}
	}
	for range min(len(parts), maxSyncFanout) - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
	return errs
}

// journalDue is signalled when the store's journal starts a new file, or
// nil (blocks forever) without a journal.
func (cg *commitGroup) journalDue() <-chan struct{} {
	if j := cg.journal; j != nil {
		return j.Due()
	}
	return nil
}

// journalCheckpoint syncs the files of the shard's partitions whose
// journal records are in a file the journal has moved past, so that file
// can go even if the shard commits nothing more. A partition whose fsync
// fails is broken: its next operation reports it, and its acknowledged
// records stay in the journal until it is rebuilt.
func (cg *commitGroup) journalCheckpoint() {
	if err := cg.journal.Checkpoint(); err != nil {
		cg.log.Error("journal checkpoint: fsync failed", "error", err)
	}
}
