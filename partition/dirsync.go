package partition

import (
	"sync"

	"github.com/parkway-io/parkway/vfs"
)

// dirSyncs batches the fsyncs of the directories partitions share.
//
// A partition's layout (its directory's entry in partitions/, the topic's
// in topics/, …) must be durable before anything in it is, so its first
// Sync fsyncs every directory its build changed, up to Dir. Built one by
// one, N partitions of a topic would fsync the topic's partitions/
// directory N times, and every ancestor above it as often. But one fsync
// of a directory makes every entry created in it before the fsync began
// durable: so the store numbers the changes to shared directories, and a
// partition skips a directory whose last completed fsync began after its
// own change. Building N partitions and syncing them then costs N fsyncs
// of their own directories and one of each shared one per batch (the
// first Sync after the builds), instead of N of each.
//
// Reopened partitions changed nothing, but their entries may come from a
// process that stopped before making them durable. Those entries exist
// already when the partition is opened, so any fsync of a shared
// directory begun after the directory's last change covers them
// (markExisting): one fsync of each shared directory serves every
// reopened partition, however their builds and syncs interleave.
type dirSyncs struct {
	mu  sync.Mutex
	gen uint64 // the last generation handed out
	// dirs holds every shared directory marked: a few per topic, so it
	// stays small beside the partitions.
	dirs map[string]*dirState
}

type dirState struct {
	changed uint64 // generation of the last change
	synced  uint64 // every change up to this generation is durable
}

// existingGen is the generation of the entries that existed when the
// store opened: those of a previous process.
const existingGen = 1

func newDirSyncs() *dirSyncs { return &dirSyncs{gen: existingGen, dirs: make(map[string]*dirState)} }

// mark records that entries of dirs changed and returns the generation a
// later sync must cover.
func (d *dirSyncs) mark(dirs []string) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.gen++
	for _, dir := range dirs {
		d.state(dir).changed = d.gen
	}
	return d.gen
}

// markExisting records that existing entries of dirs may not be durable
// and returns the generation a later sync must cover: the newest change
// among dirs (sync covers each directory up to its own newest change at
// most, see sync).
func (d *dirSyncs) markExisting(dirs []string) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	gen := uint64(existingGen)
	for _, dir := range dirs {
		st := d.state(dir)
		st.changed = max(st.changed, existingGen)
		gen = max(gen, st.changed)
	}
	return gen
}

func (d *dirSyncs) state(dir string) *dirState {
	st := d.dirs[dir]
	if st == nil {
		st = &dirState{}
		d.dirs[dir] = st
	}
	return st
}

// sync makes the changes to dir up to generation gen (or up to dir's
// newest change, if older) durable: at once if an fsync that began after
// them has completed, otherwise by an fsync, which also covers every
// change made before it began.
func (d *dirSyncs) sync(fs vfs.FS, dir string, gen uint64) error {
	d.mu.Lock()
	st := d.dirs[dir]
	if st == nil || st.synced >= min(gen, st.changed) {
		d.mu.Unlock()
		return nil
	}
	upTo := st.changed
	d.mu.Unlock()
	if err := fs.SyncDir(dir); err != nil {
		return err
	}
	d.mu.Lock()
	st.synced = max(st.synced, upTo)
	d.mu.Unlock()
	return nil
}
