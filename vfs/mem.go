package vfs

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// MemFS is an in-memory FS with crash semantics, for tests:
//
//   - Each file has volatile content (what reads see) and durable content
//     (what survives a crash). File.Sync copies the volatile content to
//     the durable one.
//   - Each directory has a volatile entry map (what lookups see) and a
//     durable one. Creating, renaming and removing entries changes only
//     the volatile map; SyncDir of the directory copies it to the durable
//     map. A file created and synced but whose directory was never synced
//     is therefore lost in a crash, and a file removed without a SyncDir
//     comes back (with its durable content).
//   - Simplification: directories created by MkdirAll are durable at once
//     (their entry is added to the parent's volatile and durable maps), so
//     callers need not SyncDir parents for MemFS; a real disk does need
//     it, and parkway does it anyway.
//   - WriteBack (WriteBacker) records the file's content as handed to
//     the device: it becomes the file's durable content at the next Sync
//     of any file, or SyncDir, on the MemFS — the device's cache flush is
//     not per file — unless a Sync of the file itself made newer content
//     durable first.
//   - StartWriteBack (WriteBackStarter) records the content too, but it
//     is handed to the device (as by WriteBack) only at the file's next
//     WaitWriteBack or WriteBack: until then no flush makes it durable.
//
// Crash returns a new MemFS holding only the durable state. Un-synced data
// is lost whole: MemFS never keeps a random prefix of un-synced writes.
// (Torn writes are produced with errorfs.)
//
// Paths are cleaned and resolved from a single root; "/a/b", "a/b" and
// "./a/b" name the same file. MemFS is safe for concurrent use: one mutex
// guards the whole tree. Errors are *os.PathError (or *os.LinkError for
// Rename) wrapping syscall errnos, so errors.Is(err, fs.ErrNotExist) and
// friends work as with package os.
//
// Preallocate succeeds without effect: there is no disk to reserve.
//
// Lock keeps a lock table per MemFS: a second Lock of a locked file fails
// until the first is closed, or until ReleaseLocks (a process crash) or
// Crash (a power loss, whose new MemFS holds no locks) ends every lock.
type MemFS struct {
	mu   sync.Mutex
	root *memNode
	// locks are the files locked with Lock, by inode as flock's are.
	locks map[*memNode]*memLock
	// backed holds the content each file had at its last WriteBack since
	// the last flush (flushLocked): durable at the next one.
	backed map[*memNode][]byte
	// started holds the content each file had at its last
	// StartWriteBack not yet waited for: it becomes backed at the file's
	// WaitWriteBack or WriteBack, and is lost by a Sync of the file (whose
	// newer content is durable) or a crash. A conservative model: a real
	// device may complete the write, and a flush make it durable, sooner.
	started map[*memNode][]byte
}

// flushLocked is the device's cache flush that every Sync and SyncDir
// issues: what files handed to the device with WriteBack becomes
// durable.
func (m *MemFS) flushLocked() {
	for n, data := range m.backed {
		n.durable, n.shared = data, false
	}
	clear(m.backed)
}

// memNode is a file or a directory (an inode).
type memNode struct {
	dir     bool
	mode    os.FileMode
	modTime time.Time

	// Files. durable is never written in place: it is either a private
	// copy or (shared) a prefix view of data's backing array with its
	// capacity capped at its length. While shared, bytes of data below
	// len(durable) are copied away before they are modified.
	data    []byte
	durable []byte
	shared  bool

	// Directories.
	entries        map[string]*memNode
	durableEntries map[string]*memNode
}

// NewMem returns an empty MemFS holding only its root directory.
func NewMem() *MemFS {
	return &MemFS{root: newDirNode(0o755)}
}

func newDirNode(perm os.FileMode) *memNode {
	return &memNode{dir: true, mode: fs.ModeDir | perm&fs.ModePerm, modTime: time.Unix(0, 0),
		entries: map[string]*memNode{}, durableEntries: map[string]*memNode{}}
}

// Crash returns a new MemFS holding only m's durable state: every file
// with the content of its last Sync, reachable through the directory
// entries of each directory's last SyncDir (or MkdirAll). The new MemFS
// shares nothing mutable with m.
//
// Crash models a power loss: callers must stop using m and everything
// opened from it (it keeps working, but nothing it does reaches the new
// MemFS), and reopen from the returned one. To model a process crash
// instead (the OS page cache survives), keep using m and just abandon the
// open files.
func (m *MemFS) Crash() *MemFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[*memNode]*memNode{}
	var clone func(n *memNode) *memNode
	clone = func(n *memNode) *memNode {
		if c, ok := seen[n]; ok {
			return c
		}
		c := &memNode{dir: n.dir, mode: n.mode, modTime: n.modTime}
		seen[n] = c
		if n.dir {
			c.entries = make(map[string]*memNode, len(n.durableEntries))
			c.durableEntries = make(map[string]*memNode, len(n.durableEntries))
			for name, child := range n.durableEntries {
				cc := clone(child)
				c.entries[name], c.durableEntries[name] = cc, cc
			}
			return c
		}
		d := slices.Clone(n.durable)
		c.data, c.durable, c.shared = d, d[:len(d):len(d)], true
		return c
	}
	return &MemFS{root: clone(m.root)}
}

// Lock implements FS with m's lock table.
func (m *MemFS) Lock(name string) (io.Closer, error) {
	f, err := m.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	n := f.(*memFile).n
	_ = f.Close()
	m.mu.Lock()
	defer m.mu.Unlock()
	if n.dir {
		return nil, pathErr("lock", name, syscall.EISDIR)
	}
	if _, held := m.locks[n]; held {
		return nil, pathErr("lock", name, ErrLocked)
	}
	if m.locks == nil {
		m.locks = map[*memNode]*memLock{}
	}
	l := &memLock{fs: m, n: n}
	m.locks[n] = l
	return l, nil
}

// ReleaseLocks ends every lock held on m, as the death of the processes
// holding them would: a simulated process crash calls it before the node
// reopens on the same disk. Closing a lock it ended does nothing, even
// after someone else took the file's lock again.
func (m *MemFS) ReleaseLocks() {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.locks)
}

// memLock is a lock held in a MemFS's table.
type memLock struct {
	fs *MemFS
	n  *memNode
}

func (l *memLock) Close() error {
	l.fs.mu.Lock()
	defer l.fs.mu.Unlock()
	if l.fs.locks[l.n] == l {
		delete(l.fs.locks, l.n)
	}
	return nil
}

// split cleans name into its components below the root.
func split(name string) []string {
	name = filepath.ToSlash(filepath.Clean(name))
	name = strings.TrimLeft(name, "/")
	if name == "" || name == "." {
		return nil
	}
	return strings.Split(name, "/")
}

func pathErr(op, name string, err error) error { return &os.PathError{Op: op, Path: name, Err: err} }

// lookup resolves name through volatile entries. m.mu must be held.
func (m *MemFS) lookup(op, name string) (*memNode, error) {
	n := m.root
	for _, c := range split(name) {
		if !n.dir {
			return nil, pathErr(op, name, syscall.ENOTDIR)
		}
		next, ok := n.entries[c]
		if !ok {
			return nil, pathErr(op, name, syscall.ENOENT)
		}
		n = next
	}
	return n, nil
}

// lookupParent resolves the directory holding name and returns it with
// name's last component. The root itself has no parent (EINVAL).
func (m *MemFS) lookupParent(op, name string) (*memNode, string, error) {
	parts := split(name)
	if len(parts) == 0 {
		return nil, "", pathErr(op, name, syscall.EINVAL)
	}
	dir, err := m.lookup(op, strings.Join(parts[:len(parts)-1], "/"))
	if err != nil {
		return nil, "", err
	}
	if !dir.dir {
		return nil, "", pathErr(op, name, syscall.ENOTDIR)
	}
	return dir, parts[len(parts)-1], nil
}

// OpenFile implements FS. It honours O_CREATE, O_EXCL, O_TRUNC, O_APPEND
// and the access mode (O_RDONLY, O_WRONLY, O_RDWR). Directories can be
// opened read-only (for Stat); reading or writing them is EISDIR.
func (m *MemFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	dir, base, err := m.lookupParent("open", name)
	if len(split(name)) == 0 { // the root
		return &memFile{fs: m, n: m.root, name: name, flag: os.O_RDONLY}, nil
	}
	if err != nil {
		return nil, err
	}
	n, ok := dir.entries[base]
	switch {
	case ok && flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0:
		return nil, pathErr("open", name, syscall.EEXIST)
	case !ok && flag&os.O_CREATE == 0:
		return nil, pathErr("open", name, syscall.ENOENT)
	case !ok:
		n = &memNode{mode: perm & fs.ModePerm, modTime: time.Unix(0, 0)}
		dir.entries[base] = n
	}
	writable := flag&(os.O_WRONLY|os.O_RDWR) != 0
	if n.dir && (writable || flag&os.O_TRUNC != 0) {
		return nil, pathErr("open", name, syscall.EISDIR)
	}
	if flag&os.O_TRUNC != 0 && writable {
		n.truncate(0)
	}
	return &memFile{fs: m, n: n, name: name, flag: flag}, nil
}

// Remove implements FS.
func (m *MemFS) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	dir, base, err := m.lookupParent("remove", name)
	if err != nil {
		return err
	}
	n, ok := dir.entries[base]
	if !ok {
		return pathErr("remove", name, syscall.ENOENT)
	}
	if n.dir && len(n.entries) > 0 {
		return pathErr("remove", name, syscall.ENOTEMPTY)
	}
	delete(dir.entries, base)
	return nil
}

// RemoveAll implements FS. Removing the root empties it.
func (m *MemFS) RemoveAll(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(split(name)) == 0 {
		clear(m.root.entries)
		return nil
	}
	dir, base, err := m.lookupParent("removeall", name)
	if err != nil {
		if isNotExistOrNotDir(err) {
			return nil
		}
		return err
	}
	delete(dir.entries, base)
	return nil
}

func isNotExistOrNotDir(err error) bool {
	pe, ok := err.(*os.PathError)
	return ok && (pe.Err == syscall.ENOENT || pe.Err == syscall.ENOTDIR)
}

// Rename implements FS. A directory may only replace an empty directory
// and a file only a file, as with rename(2).
func (m *MemFS) Rename(oldname, newname string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	linkErr := func(err error) error {
		if pe, ok := err.(*os.PathError); ok {
			err = pe.Err
		}
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: err}
	}
	odir, obase, err := m.lookupParent("rename", oldname)
	if err != nil {
		return linkErr(err)
	}
	n, ok := odir.entries[obase]
	if !ok {
		return linkErr(syscall.ENOENT)
	}
	ndir, nbase, err := m.lookupParent("rename", newname)
	if err != nil {
		return linkErr(err)
	}
	if odir == ndir && obase == nbase {
		return nil
	}
	if n.dir {
		for d := ndir; ; {
			// Moving a directory below itself.
			if d == n {
				return linkErr(syscall.EINVAL)
			}
			p := m.parentOf(d)
			if p == nil {
				break
			}
			d = p
		}
	}
	if old, ok := ndir.entries[nbase]; ok {
		switch {
		case n.dir && !old.dir:
			return linkErr(syscall.ENOTDIR)
		case !n.dir && old.dir:
			return linkErr(syscall.EISDIR)
		case old.dir && len(old.entries) > 0:
			return linkErr(syscall.ENOTEMPTY)
		}
	}
	delete(odir.entries, obase)
	ndir.entries[nbase] = n
	return nil
}

// parentOf finds d's parent by a walk from the root (only used for the
// rare directory rename).
func (m *MemFS) parentOf(d *memNode) *memNode {
	var find func(n *memNode) *memNode
	find = func(n *memNode) *memNode {
		for _, c := range n.entries {
			if c == d {
				return n
			}
			if c.dir {
				if p := find(c); p != nil {
					return p
				}
			}
		}
		return nil
	}
	if d == m.root {
		return nil
	}
	return find(m.root)
}

// MkdirAll implements FS. Directories it creates are durable at once:
// their entries are added to the parents' durable maps too.
func (m *MemFS) MkdirAll(dir string, perm os.FileMode) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.root
	parts := split(dir)
	for i, c := range parts {
		next, ok := n.entries[c]
		if !ok {
			next = newDirNode(perm)
			n.entries[c] = next
			n.durableEntries[c] = next
		} else if !next.dir {
			return pathErr("mkdir", strings.Join(parts[:i+1], "/"), syscall.ENOTDIR)
		}
		n = next
	}
	return nil
}

// ReadDir implements FS.
func (m *MemFS) ReadDir(dir string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.lookup("readdir", dir)
	if err != nil {
		return nil, err
	}
	if !n.dir {
		return nil, pathErr("readdir", dir, syscall.ENOTDIR)
	}
	names := make([]string, 0, len(n.entries))
	for name := range n.entries {
		names = append(names, name)
	}
	slices.Sort(names)
	return names, nil
}

// Stat implements FS.
func (m *MemFS) Stat(name string) (os.FileInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.lookup("stat", name)
	if err != nil {
		return nil, err
	}
	return n.info(name), nil
}

// SyncDir implements FS: dir's current entries become its durable ones.
func (m *MemFS) SyncDir(dir string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.lookup("sync", dir)
	if err != nil {
		return err
	}
	if !n.dir {
		return pathErr("sync", dir, syscall.ENOTDIR)
	}
	m.flushLocked()
	n.durableEntries = make(map[string]*memNode, len(n.entries))
	for name, c := range n.entries {
		n.durableEntries[name] = c
	}
	return nil
}

// own makes data's bytes from from on safe to modify.
func (n *memNode) own(from int64) {
	if n.shared && from < int64(len(n.durable)) {
		n.data = slices.Clone(n.data)
		n.shared = false
	}
}

func (n *memNode) truncate(size int64) {
	old := int64(len(n.data))
	if size <= old {
		n.data = n.data[:size]
		return
	}
	n.own(old) // may replace data: check its capacity after
	if size <= int64(cap(n.data)) {
		n.data = n.data[:size]
		clear(n.data[old:])
		return
	}
	grown := make([]byte, size, max(size, 2*int64(cap(n.data)), 512))
	copy(grown, n.data)
	n.data, n.shared = grown, false
}

func (n *memNode) writeAt(p []byte, off int64) {
	if end := off + int64(len(p)); end > int64(len(n.data)) {
		n.truncate(end)
	}
	n.own(off)
	copy(n.data[off:], p)
}

func (n *memNode) info(name string) os.FileInfo {
	fi := memInfo{name: filepath.Base(filepath.Clean(name)), mode: n.mode, modTime: n.modTime}
	if !n.dir {
		fi.size = int64(len(n.data))
	}
	return fi
}

type memInfo struct {
	name    string
	size    int64
	mode    os.FileMode
	modTime time.Time
}

func (fi memInfo) Name() string       { return fi.name }
func (fi memInfo) Size() int64        { return fi.size }
func (fi memInfo) Mode() os.FileMode  { return fi.mode }
func (fi memInfo) ModTime() time.Time { return fi.modTime }
func (fi memInfo) IsDir() bool        { return fi.mode.IsDir() }
func (fi memInfo) Sys() any           { return nil }

// memFile is an open MemFS file. It keeps its inode, so it works on after
// the name is removed or renamed, as on POSIX.
type memFile struct {
	fs     *MemFS
	n      *memNode
	name   string
	flag   int
	pos    int64
	closed bool
}

// check validates a read (write false) or write on f. f.fs.mu must be held.
func (f *memFile) check(op string, write bool) error {
	if f.closed {
		return pathErr(op, f.name, os.ErrClosed)
	}
	if f.n.dir {
		return pathErr(op, f.name, syscall.EISDIR)
	}
	acc := f.flag & (os.O_RDONLY | os.O_WRONLY | os.O_RDWR)
	if (write && acc == os.O_RDONLY) || (!write && acc == os.O_WRONLY) {
		return pathErr(op, f.name, syscall.EBADF)
	}
	return nil
}

func (f *memFile) Name() string { return f.name }

func (f *memFile) Read(p []byte) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("read", false); err != nil {
		return 0, err
	}
	if f.pos >= int64(len(f.n.data)) {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	n := copy(p, f.n.data[f.pos:])
	f.pos += int64(n)
	return n, nil
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("read", false); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, pathErr("read", f.name, syscall.EINVAL)
	}
	if off >= int64(len(f.n.data)) {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	n := copy(p, f.n.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) Write(p []byte) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("write", true); err != nil {
		return 0, err
	}
	if f.flag&os.O_APPEND != 0 {
		f.pos = int64(len(f.n.data))
	}
	f.n.writeAt(p, f.pos)
	f.pos += int64(len(p))
	return len(p), nil
}

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("write", true); err != nil {
		return 0, err
	}
	if f.flag&os.O_APPEND != 0 {
		return 0, pathErr("write", f.name, syscall.EINVAL) // as os.File does
	}
	if off < 0 {
		return 0, pathErr("write", f.name, syscall.EINVAL)
	}
	f.n.writeAt(p, off)
	return len(p), nil
}

func (f *memFile) Stat() (os.FileInfo, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return nil, pathErr("stat", f.name, os.ErrClosed)
	}
	return f.n.info(f.name), nil
}

// Sync makes the file's current content its durable content. Syncing a
// directory handle is allowed and does nothing (use SyncDir).
func (f *memFile) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return pathErr("sync", f.name, os.ErrClosed)
	}
	f.fs.flushLocked()
	if f.n.dir {
		return nil
	}
	delete(f.fs.started, f.n)
	f.n.durable = f.n.data[:len(f.n.data):len(f.n.data)]
	f.n.shared = true
	return nil
}

// WriteBack implements WriteBacker: the file's current content becomes
// durable at the next Sync or SyncDir of anything on the MemFS (see
// MemFS). A directory handle's does nothing.
func (f *memFile) WriteBack() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return pathErr("sync_file_range", f.name, os.ErrClosed)
	}
	if f.n.dir {
		return nil
	}
	delete(f.fs.started, f.n)
	f.fs.handed(f.n, slices.Clone(f.n.data))
	return nil
}

// handed records data as n's content handed to the device: durable at the
// next Sync or SyncDir of anything on the MemFS. The caller holds m.mu.
func (m *MemFS) handed(n *memNode, data []byte) {
	if m.backed == nil {
		m.backed = map[*memNode][]byte{}
	}
	m.backed[n] = data
}

// CompleteWriteBacks completes every write StartWriteBack started and
// nothing waited for yet, as a device may at any time: their content is
// durable at the next Sync or SyncDir of anything on the MemFS. It is the
// other end of the model (see MemFS), for tests of what must hold however
// early a started write lands.
func (m *MemFS) CompleteWriteBacks() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for n, data := range m.started {
		m.handed(n, data)
	}
	clear(m.started)
}

// StartWriteBack implements WriteBackStarter: the file's current content
// is handed to the device at its next WaitWriteBack or WriteBack (see
// MemFS). A directory handle's does nothing.
func (f *memFile) StartWriteBack() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return pathErr("sync_file_range", f.name, os.ErrClosed)
	}
	if f.n.dir {
		return nil
	}
	if f.fs.started == nil {
		f.fs.started = map[*memNode][]byte{}
	}
	f.fs.started[f.n] = slices.Clone(f.n.data)
	return nil
}

// WaitWriteBack implements WriteBackStarter: the content the last
// StartWriteBack recorded is durable at the next Sync or SyncDir of
// anything on the MemFS.
func (f *memFile) WaitWriteBack() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return pathErr("sync_file_range", f.name, os.ErrClosed)
	}
	data, ok := f.fs.started[f.n]
	if !ok {
		return nil
	}
	delete(f.fs.started, f.n)
	f.fs.handed(f.n, data)
	return nil
}

func (f *memFile) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("truncate", true); err != nil {
		return err
	}
	if size < 0 {
		return pathErr("truncate", f.name, syscall.EINVAL)
	}
	f.n.truncate(size)
	return nil
}

// Preallocate succeeds without effect (after the same checks as a write).
func (f *memFile) Preallocate(off, n int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("fallocate", true); err != nil {
		return err
	}
	if off < 0 || n <= 0 {
		return pathErr("fallocate", f.name, syscall.EINVAL)
	}
	return nil
}

func (f *memFile) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return pathErr("close", f.name, os.ErrClosed)
	}
	f.closed = true
	return nil
}
