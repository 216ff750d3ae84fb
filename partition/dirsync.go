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
type dirSyncs struct {
	mu  sync.Mutex
	gen uint64 // the last generation handed out by mark
	// dirs holds the shared directories changed and not yet synced since;
	// a directory whose fsync covered every change is dropped, so the map
	// stays as small as the set of directories being built into.
	dirs map[string]*dirState
}

type dirState struct {
	changed uint64 // generation of the last change
	synced  uint64 // every change up to this generation is durable
}

func newDirSyncs() *dirSyncs { return &dirSyncs{dirs: make(map[string]*dirState)} }

// mark records that entries of dirs changed (or may not be durable) and
// returns the generation a later sync must cover.
func (d *dirSyncs) mark(dirs []string) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.gen++
	for _, dir := range dirs {
		st := d.dirs[dir]
		if st == nil {
			st = &dirState{}
			d.dirs[dir] = st
		}
		st.changed = d.gen
	}
	return d.gen
}

// sync makes the changes to dir up to generation gen durable: at once if
// an fsync that began after them has completed, otherwise by an fsync,
// which also covers every change made before it began.
func (d *dirSyncs) sync(fs vfs.FS, dir string, gen uint64) error {
	d.mu.Lock()
	st := d.dirs[dir]
	if st == nil || st.synced >= gen {
		// Covered; a dropped state was synced past every change.
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
	if st.synced >= st.changed && d.dirs[dir] == st {
		delete(d.dirs, dir)
	}
	d.mu.Unlock()
	return nil
}
