package partition

import (
	"fmt"
	"os"
	"sync"

	"github.com/parkway-io/parkway/vfs"
)

// A FileStore keeps a node's partitions on disk, three files per segment,
// and a node may hold a hundred thousand partitions: far more files than
// the process may keep open. So the store holds at most
// FileConfig.MaxOpenFiles descriptors, like LevelDB's and pebble's table
// cache. Segment files are opened on first use and stay open while they
// are used; once idle they join a least-recently-used list and are closed
// when the store needs a descriptor for something else. Every descriptor
// the store opens counts (segment files, transient reads and writes of
// small files, directories listed, synced or removed), through budgetFS,
// so the budget holds whatever the store does.
//
// Two kinds of descriptor cannot be closed on demand and may take the
// store past its budget (counted in HandleStats.OverBudget; an open never
// waits, which could deadlock two shards each waiting for the other's
// descriptors):
//
//   - descriptors in use by an operation right now: a handful per
//     partition operation in flight, so at most a few per shard;
//   - a tail segment holding appends that were written but not yet
//     fsynced is pinned until the partition's next Sync (or a roll), so
//     the fsync goes through the descriptor the writes did. After a
//     failed writeback, the kernel reports the error on the descriptors
//     that were open when it happened; a descriptor opened later may never
//     see it, and an fsync through it would report success for lost data.
//     Partitions whose topic never fsyncs keep their tail pinned from
//     their first append to their Close, and partitions committed
//     through a Journal until its next checkpoint (a handle checkpoints
//     before more than an eighth of the budget of them are pinned).
//
// The journal's open file is counted too: one descriptor per store, shared
// by its Journals. So are the files other packages keep in a partition's
// directory through its Location (a replicated partition's raft log): they
// are handles of this cache too, pinned while they hold writes not yet
// fsynced (see storeFS), so a node's raft logs and partitions share one
// budget.

// MinMaxOpenFiles is the smallest FileConfig.MaxOpenFiles Validate
// accepts: with fewer, a single partition operation (a roll: the sealed
// tail, the new segment's three files, the directory) would close and
// reopen its own files.
const MinMaxOpenFiles = 4

// Bounds of the default FileConfig.MaxOpenFiles.
const (
	// DefaultMaxOpenFilesFloor is the default budget when the process's
	// descriptor limit is unknown or too low for half of it to be more.
	DefaultMaxOpenFilesFloor = 64
	// DefaultMaxOpenFilesCeiling caps the default budget when the limit
	// is very large or unlimited: past it, more open descriptors only
	// cost kernel memory for files that are rarely used.
	DefaultMaxOpenFilesCeiling = 1 << 16
)

// DefaultMaxOpenFiles is the budget a FileStore uses when
// FileConfig.MaxOpenFiles is 0: half of the process's soft RLIMIT_NOFILE
// (Go raises the soft limit to the hard one at start on Linux and macOS),
// leaving the other half to the rest of the process (sockets, the
// metadata raft log, the host's own files; partitions' raft logs kept
// through Location count in the budget), within [DefaultMaxOpenFilesFloor,
// DefaultMaxOpenFilesCeiling]. On platforms without the limit it is
// DefaultMaxOpenFilesFloor.
func DefaultMaxOpenFiles() int {
	return defaultBudget(softFileLimit())
}

func defaultBudget(soft uint64) int {
	half := soft / 2
	switch {
	case half < DefaultMaxOpenFilesFloor:
		return DefaultMaxOpenFilesFloor
	case half > DefaultMaxOpenFilesCeiling:
		return DefaultMaxOpenFilesCeiling
	}
	return int(half)
}

// HandleStats describes a FileStore's descriptor budget and what it did.
// Counters are totals since NewFileStore.
type HandleStats struct {
	// Max is the budget, FileConfig.MaxOpenFiles or its default.
	Max int
	// Open is the number of descriptors the store holds now.
	Open int
	// Idle is the number of open segment files no operation uses and no
	// pin holds, which the store closes first when it needs descriptors.
	Idle int
	// Opens counts descriptors opened (files and directories).
	Opens uint64
	// Reopens counts segment files opened again after being closed to
	// stay within the budget.
	Reopens uint64
	// Evictions counts idle segment files closed to stay within the
	// budget.
	Evictions uint64
	// OverBudget counts opens that took the store past its budget
	// because every descriptor it held was in use or pinned.
	OverBudget uint64
}

// handleCache is a FileStore's descriptor budget: the count of open
// descriptors, and the idle segment files that can be closed to make
// room, least recently used first. It is shared by every partition of the
// store, so its state is under mu; a handle itself belongs to one
// partition, whose goroutine alone acquires and releases it.
type handleCache struct {
	fs  vfs.FS // the store's filesystem, not budgetFS
	max int

	mu   sync.Mutex
	open int
	// idle is a circular list of idle handles, most recently used first
	// (idle.next); the sentinel is never a real handle.
	idle  handle
	nIdle int
	stats HandleStats
	// named are the files open through storeFS, by path, so a rename or
	// removal through it can follow them (lazyfs.go).
	named map[string][]*handle
}

func newHandleCache(fs vfs.FS, max int) *handleCache {
	c := &handleCache{fs: fs, max: max, named: make(map[string][]*handle)}
	c.idle.prev, c.idle.next = &c.idle, &c.idle
	return c
}

// handle is one segment file (or a file opened through storeFS) that may
// be closed while nobody uses it and is reopened on the next use. Its
// fields other than flag are under the cache's mu (path changes only for
// a storeFS file that is renamed).
type handle struct {
	c    *handleCache
	path string
	flag int // for reopening: never O_CREATE, O_EXCL or O_TRUNC
	f    vfs.File
	// gone: the path no longer names this file (removed, or replaced by
	// a rename through storeFS), so it is never reopened.
	gone bool
	refs int
	// pinned keeps the file open while idle: a tail with writes not yet
	// fsynced through it.
	pinned bool
	// opened: the file was open once, so opening it again is a reopen.
	opened     bool
	prev, next *handle // in the idle list when f != nil, refs == 0, !pinned
}

func (c *handleCache) newHandle(path string, flag int) *handle {
	return &handle{c: c, path: path, flag: flag}
}

// adopt makes f, opened through budgetFS (so already counted), h's file.
// h must not have one. It stays open, idle, until the budget needs it.
func (c *handleCache) adopt(h *handle, f vfs.File) {
	c.mu.Lock()
	h.f = f.(*budgetFile).File // the slot passes to the handle
	h.opened = true
	c.makeIdle(h)
	c.evictLocked(0)
	c.mu.Unlock()
}

// reserve counts one descriptor about to be opened, first evicting idle
// handles to keep the count within the budget. The caller opens and, on
// failure, unreserves.
func (c *handleCache) reserve() {
	c.mu.Lock()
	c.evictLocked(1)
	c.open++
	c.stats.Opens++
	if c.open > c.max {
		c.stats.OverBudget++
	}
	c.mu.Unlock()
}

// unreserve gives back a descriptor counted by reserve: closed, or never
// opened.
func (c *handleCache) unreserve() {
	c.mu.Lock()
	c.open--
	c.mu.Unlock()
}

// evictLocked closes idle handles, least recently used first, until room
// more descriptors fit in the budget or none is idle. It closes them
// under the lock, so a descriptor counted as free is closed: the budget
// bounds what the process really holds, not only what the cache counts
// (closing a file is a short system call; opening stays outside the
// lock). Errors are dropped: an evicted file holds no write that was not
// fsynced through it (pinned handles are never evicted) except index
// files, which are derived data a reopen rebuilds.
func (c *handleCache) evictLocked(room int) {
	for c.open+room > c.max && c.nIdle > 0 {
		h := c.idle.prev
		c.unlinkIdle(h)
		_ = h.f.Close()
		h.f = nil
		c.open--
		c.stats.Evictions++
	}
}

// room is how many operations, each holding at most one descriptor more
// (or an idle handle of its own, acquired), can run at once now without
// taking the store past its budget: the descriptors the budget has left
// plus the idle ones their opens may close. It is at least 1, so an
// operation always proceeds (going over the budget is counted by
// reserve, as ever), and at most n. It evicts nothing: each operation's
// own open does, only if it needs to.
func (c *handleCache) room(n int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return max(1, min(n, c.max-c.open+c.nIdle))
}

func (c *handleCache) makeIdle(h *handle) {
	if h.f == nil || h.refs > 0 || h.pinned || h.next != nil {
		return
	}
	h.prev, h.next = &c.idle, c.idle.next
	c.idle.next.prev = h
	c.idle.next = h
	c.nIdle++
}

func (c *handleCache) unlinkIdle(h *handle) {
	if h.next == nil {
		return
	}
	h.prev.next, h.next.prev = h.next, h.prev
	h.prev, h.next = nil, nil
	c.nIdle--
}

// acquire returns h's file, opening it if it was closed, and keeps it
// open until release. A failed reopen is ErrReopen, wrapping the
// filesystem's error.
func (h *handle) acquire() (vfs.File, error) {
	c := h.c
	c.mu.Lock()
	if h.f != nil {
		c.unlinkIdle(h)
		h.refs++
		f := h.f
		c.mu.Unlock()
		return f, nil
	}
	reopen, path, gone := h.opened, h.path, h.gone
	c.mu.Unlock()
	if gone {
		return nil, fmt.Errorf("%w: %s: %w", ErrReopen, path, errFileGone)
	}
	c.reserve()
	f, err := c.fs.OpenFile(path, h.flag, 0)
	if err != nil {
		c.unreserve()
		if reopen {
			return nil, fmt.Errorf("%w: %s: %w", ErrReopen, path, err)
		}
		return nil, err
	}
	c.mu.Lock()
	h.f, h.opened = f, true
	h.refs++
	if reopen {
		c.stats.Reopens++
	}
	c.mu.Unlock()
	return f, nil
}

// release ends a use begun by acquire.
func (h *handle) release() {
	c := h.c
	c.mu.Lock()
	h.refs--
	c.makeIdle(h)
	c.evictLocked(0)
	c.mu.Unlock()
}

// setPinned pins or unpins h's file (see handleCache). Pinning a closed
// handle is a no-op: only a file open while it was written needs it.
func (h *handle) setPinned(pin bool) {
	c := h.c
	c.mu.Lock()
	if pin && h.f != nil {
		h.pinned = true
		c.unlinkIdle(h)
	} else if !pin && h.pinned {
		h.pinned = false
		c.makeIdle(h)
		c.evictLocked(0)
	}
	c.mu.Unlock()
}

// close closes h's file if open and forgets it; a later use reopens it.
func (h *handle) close() error {
	c := h.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unlinkIdle(h)
	f := h.f
	h.f, h.pinned = nil, false
	if f == nil {
		return nil
	}
	err := f.Close() // before the descriptor counts as free (see evictLocked)
	c.open--
	return err
}

// syncIfOpen fsyncs h's file if it is open, and does nothing if it is
// closed (or h is nil).
func (h *handle) syncIfOpen() error {
	if h == nil {
		return nil
	}
	c := h.c
	c.mu.Lock()
	f := h.f
	if f == nil {
		c.mu.Unlock()
		return nil
	}
	c.unlinkIdle(h)
	h.refs++
	c.mu.Unlock()
	defer h.release()
	return f.Sync()
}

// The file operations segments use, each holding the file for the call.

func (h *handle) ReadAt(b []byte, off int64) (int, error) {
	f, err := h.acquire()
	if err != nil {
		return 0, err
	}
	defer h.release()
	return f.ReadAt(b, off)
}

func (h *handle) WriteAt(b []byte, off int64) (int, error) {
	f, err := h.acquire()
	if err != nil {
		return 0, err
	}
	defer h.release()
	return f.WriteAt(b, off)
}

func (h *handle) Sync() error {
	f, err := h.acquire()
	if err != nil {
		return err
	}
	defer h.release()
	return f.Sync()
}

func (h *handle) Truncate(size int64) error {
	f, err := h.acquire()
	if err != nil {
		return err
	}
	defer h.release()
	return f.Truncate(size)
}

func (h *handle) Stat() (os.FileInfo, error) {
	f, err := h.acquire()
	if err != nil {
		return nil, err
	}
	defer h.release()
	return f.Stat()
}

func (h *handle) Preallocate(off, n int64) error {
	f, err := h.acquire()
	if err != nil {
		return err
	}
	defer h.release()
	return f.Preallocate(off, n)
}

func (c *handleCache) snapshot() HandleStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Max, s.Open, s.Idle = c.max, c.open, c.nIdle
	return s
}

// budgetFS is the store's filesystem as its partitions see it: every call
// that holds a descriptor counts it in the cache, evicting idle segment
// files first when the budget is reached. A file it opens keeps its slot
// until closed (or adopted by a handle). ReadDir, SyncDir and RemoveAll
// hold one for the call (RemoveAll may hold one per directory level on
// some systems; the budget counts one).
type budgetFS struct {
	vfs.FS
	c *handleCache
}

type budgetFile struct {
	vfs.File
	c      *handleCache
	closed bool
}

func (b budgetFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	b.c.reserve()
	f, err := b.FS.OpenFile(name, flag, perm)
	if err != nil {
		b.c.unreserve()
		return nil, err
	}
	return &budgetFile{File: f, c: b.c}, nil
}

// Datasync passes vfs.Datasync through to the wrapped file.
func (f *budgetFile) Datasync() error { return vfs.Datasync(f.File) }

// WriteVectorAt passes vfs.WriteVectorAt through to the wrapped file.
func (f *budgetFile) WriteVectorAt(bufs [][]byte, off int64) (int, error) {
	return vfs.WriteVectorAt(f.File, bufs, off)
}

// WriteBack passes vfs.WriteBack through to the wrapped file.
func (f *budgetFile) WriteBack() error { return vfs.WriteBack(f.File) }

// StartWriteBack passes vfs.StartWriteBack through to the wrapped file.
func (f *budgetFile) StartWriteBack() error { return vfs.StartWriteBack(f.File) }

// WaitWriteBack passes vfs.WaitWriteBack through to the wrapped file.
func (f *budgetFile) WaitWriteBack() error { return vfs.WaitWriteBack(f.File) }

func (f *budgetFile) Close() error {
	err := f.File.Close()
	if !f.closed {
		f.closed = true
		f.c.unreserve() // after the close: a descriptor counted free is free
	}
	return err
}

func (b budgetFS) ReadDir(dir string) ([]string, error) {
	b.c.reserve()
	defer b.c.unreserve()
	return b.FS.ReadDir(dir)
}

func (b budgetFS) SyncDir(dir string) error {
	b.c.reserve()
	defer b.c.unreserve()
	return b.FS.SyncDir(dir)
}

func (b budgetFS) RemoveAll(name string) error {
	b.c.reserve()
	defer b.c.unreserve()
	return b.FS.RemoveAll(name)
}
