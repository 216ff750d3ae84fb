// Package errorfs wraps a vfs.FS so tests can fail any operation: every FS
// and File call first asks an Injector whether to fail, and if so returns
// its error (wrapped in an *os.PathError carrying the path) without doing
// the operation — except a torn write (see TornWrite), which does part of
// it. Ready-made injectors fail the i-th operation (OnIndex, to enumerate
// crash points), or every matching operation while switched on (Switch,
// for "the disk is full until space returns").
//
// A disk can also lie: succeed and return or keep the wrong bytes. An
// injector makes an operation lie by returning one of the lie types
// instead of an error: *FlipOnRead (a read returns a flipped bit),
// *MisdirectedWrite (a write lands at another offset, reported as done).
// ReadErrorAt fails the reads of one byte range (a latent sector error),
// FlipsOnRead returns a flipped bit at chosen addresses on every read,
// and Chain combines injectors. Damage done to the stored bytes
// themselves, while nothing runs — a flipped bit (FlipStored), a file cut
// short (TruncateStored), a file rolled back to an earlier copy
// (SaveCopy, Copy.Restore) — goes through any vfs.FS, the operating
// system's included (lie.go).
package errorfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/parkway-io/parkway/vfs"
)

// OpKind is the kind of a filesystem operation.
type OpKind int

// The operations an Injector sees. File operations carry the path the file
// was opened with.
const (
	OpOpen OpKind = iota
	OpWrite
	OpWriteAt
	OpRead
	OpReadAt
	OpSync
	OpTruncate
	OpPreallocate
	OpRemove
	OpRemoveAll
	OpRename
	OpMkdirAll
	OpReadDir
	OpStat
	OpSyncDir
	OpClose
	// OpWriteBack is a file's vfs.WriteBack: its data handed to the
	// device, durable with the next sync of anything on the FS.
	OpWriteBack
	// OpStartWriteBack is a file's vfs.StartWriteBack: its data handed
	// to the device without waiting; OpWaitWriteBack the wait for it.
	OpStartWriteBack
	OpWaitWriteBack
)

var opNames = [...]string{
	OpOpen: "open", OpWrite: "write", OpWriteAt: "writeat", OpRead: "read", OpReadAt: "readat",
	OpSync: "sync", OpTruncate: "truncate", OpPreallocate: "fallocate", OpRemove: "remove",
	OpRemoveAll: "removeall", OpRename: "rename", OpMkdirAll: "mkdirall", OpReadDir: "readdir",
	OpStat: "stat", OpSyncDir: "syncdir", OpClose: "close", OpWriteBack: "writeback",
	OpStartWriteBack: "startwriteback", OpWaitWriteBack: "waitwriteback",
}

// String is the operation's name as used in the *os.PathError Op field.
func (k OpKind) String() string {
	if k >= 0 && int(k) < len(opNames) {
		return opNames[k]
	}
	return fmt.Sprintf("OpKind(%d)", int(k))
}

// Op is one filesystem operation about to happen.
type Op struct {
	Kind OpKind
	// Path is the file's or directory's path (for Rename, the old name;
	// for File operations, the name the file was opened with).
	Path string
	// Flag holds the os.OpenFile flags of an OpOpen, 0 otherwise.
	Flag int
	// Off and Len are the file range a read or write covers: for ReadAt
	// and WriteAt their offset, for Read and Write the file position the
	// wrapper tracks (-1 when it cannot know it: a write to a file
	// opened with O_APPEND, and everything after it), and the length of
	// the buffer. Both are 0 for other operations.
	Off int64
	Len int
}

// Mutating reports whether the operation can change what is on disk:
// writes, syncs, truncates, preallocation, removes, renames, directory
// creation and syncs, and opens that create or truncate. These are the
// write points a crash can fall between.
func (op Op) Mutating() bool {
	switch op.Kind {
	case OpWrite, OpWriteAt, OpSync, OpTruncate, OpPreallocate, OpRemove, OpRemoveAll,
		OpRename, OpMkdirAll, OpSyncDir, OpWriteBack, OpStartWriteBack:
		return true
	case OpOpen:
		return op.Flag&(os.O_CREATE|os.O_TRUNC) != 0
	}
	return false
}

// Injector decides, before each operation, whether it fails. A nil error
// lets it proceed. Injectors must be safe for concurrent use.
type Injector interface {
	MaybeError(Op) error
}

// InjectorFunc adapts a function to an Injector.
type InjectorFunc func(Op) error

// MaybeError calls f.
func (f InjectorFunc) MaybeError(op Op) error { return f(op) }

// TornWrite, returned by an Injector for an OpWrite or OpWriteAt, tears
// the write: the first N bytes (at most all of them) reach the inner file,
// then the write returns N and an error wrapping the *TornWrite, which
// matches syscall.EIO (as a disk failing mid-write would). For other
// operations it is an ordinary injected error.
type TornWrite struct{ N int }

func (e *TornWrite) Error() string { return fmt.Sprintf("injected torn write after %d bytes", e.N) }

// Unwrap returns syscall.EIO.
func (e *TornWrite) Unwrap() error { return syscall.EIO }

// matcher selects operations: the listed kinds, or every mutating one.
type matcher []OpKind

func (m matcher) match(op Op) bool {
	if len(m) == 0 {
		return op.Mutating()
	}
	for _, k := range m {
		if op.Kind == k {
			return true
		}
	}
	return false
}

// Index fails one operation: the i-th (0-based) of those it matches. It
// counts every matching operation, before and after, so a clean run with
// an index that never fires tells how many write points a workload has.
type Index struct {
	i     int64
	err   error
	kinds matcher
	// after: every matching operation from the i-th on fails (FromIndex).
	after bool
	n     atomic.Int64
}

// OnIndex returns an injector failing the i-th (0-based) operation whose
// kind is one of kinds, or, with no kinds, the i-th mutating operation
// (Op.Mutating), with err. A negative i never fails (count only).
func OnIndex(i int64, err error, kinds ...OpKind) *Index {
	return &Index{i: i, err: err, kinds: matcher(kinds)}
}

// FromIndex is OnIndex failing the i-th matching operation and every
// one after it: a disk that stays broken once it breaks, where OnIndex is
// one that fails once. Crash tests run both at every write point.
func FromIndex(i int64, err error, kinds ...OpKind) *Index {
	return &Index{i: i, err: err, kinds: matcher(kinds), after: true}
}

// MaybeError implements Injector.
func (x *Index) MaybeError(op Op) error {
	if !x.kinds.match(op) {
		return nil
	}
	if k := x.n.Add(1) - 1; k == x.i || (x.after && x.i >= 0 && k > x.i) {
		return x.err
	}
	return nil
}

// Count is the number of matching operations seen so far, the failed one
// included.
func (x *Index) Count() int64 { return x.n.Load() }

// Fired reports whether the i-th operation has been reached (and failed).
func (x *Index) Fired() bool { return x.i >= 0 && x.n.Load() > x.i }

// Switch fails every matching operation with its error while it is on:
// "ENOSPC until space returns". It starts off. Safe for concurrent use.
type Switch struct {
	err   error
	match func(Op) bool
	on    atomic.Bool
}

// NewSwitch returns a Switch (off) failing operations of the given kinds,
// or with no kinds every mutating operation, with err.
func NewSwitch(err error, kinds ...OpKind) *Switch {
	return &Switch{err: err, match: matcher(kinds).match}
}

// NewSwitchFunc returns a Switch (off) failing the operations match
// selects with err: say, only opens that create files.
func NewSwitchFunc(err error, match func(Op) bool) *Switch {
	return &Switch{err: err, match: match}
}

// Set turns the switch on or off.
func (s *Switch) Set(on bool) { s.on.Store(on) }

// On reports whether the switch is on.
func (s *Switch) On() bool { return s.on.Load() }

// MaybeError implements Injector.
func (s *Switch) MaybeError(op Op) error {
	if s.on.Load() && s.match(op) {
		return s.err
	}
	return nil
}

// Log is an Injector that fails nothing and records every operation, for
// tests that want to see what a workload does.
type Log struct {
	mu  sync.Mutex
	ops []Op
}

// MaybeError implements Injector.
func (l *Log) MaybeError(op Op) error {
	l.mu.Lock()
	l.ops = append(l.ops, op)
	l.mu.Unlock()
	return nil
}

// Ops returns a copy of the operations recorded so far.
func (l *Log) Ops() []Op {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Op(nil), l.ops...)
}

// New wraps inner so that every operation first consults inj. Injected
// errors come back as *os.PathError{Op: kind, Path: path, Err: injected}
// (an injected *os.PathError or *os.LinkError is returned as is), so
// errors.Is(err, syscall.ENOSPC) works when the injector returns
// syscall.ENOSPC.
func New(inner vfs.FS, inj Injector) vfs.FS {
	return &errorFS{inner: inner, inj: inj}
}

type errorFS struct {
	inner vfs.FS
	inj   Injector
}

func wrap(op Op, err error) error {
	var pe *os.PathError
	var le *os.LinkError
	if errors.As(err, &pe) || errors.As(err, &le) {
		return err
	}
	return &os.PathError{Op: op.Kind.String(), Path: op.Path, Err: err}
}

func (e *errorFS) check(kind OpKind, path string) error {
	op := Op{Kind: kind, Path: path}
	if err := e.inj.MaybeError(op); err != nil {
		return wrap(op, err)
	}
	return nil
}

func (e *errorFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	op := Op{Kind: OpOpen, Path: name, Flag: flag}
	if err := e.inj.MaybeError(op); err != nil {
		return nil, wrap(op, err)
	}
	f, err := e.inner.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &errorFile{fs: e, f: f, appendOnly: flag&os.O_APPEND != 0}, nil
}

func (e *errorFS) Remove(name string) error {
	if err := e.check(OpRemove, name); err != nil {
		return err
	}
	return e.inner.Remove(name)
}

func (e *errorFS) RemoveAll(name string) error {
	if err := e.check(OpRemoveAll, name); err != nil {
		return err
	}
	return e.inner.RemoveAll(name)
}

func (e *errorFS) Rename(oldname, newname string) error {
	op := Op{Kind: OpRename, Path: oldname}
	if err := e.inj.MaybeError(op); err != nil {
		var pe *os.PathError
		var le *os.LinkError
		if errors.As(err, &pe) || errors.As(err, &le) {
			return err
		}
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: err}
	}
	return e.inner.Rename(oldname, newname)
}

func (e *errorFS) MkdirAll(dir string, perm os.FileMode) error {
	if err := e.check(OpMkdirAll, dir); err != nil {
		return err
	}
	return e.inner.MkdirAll(dir, perm)
}

func (e *errorFS) ReadDir(dir string) ([]string, error) {
	if err := e.check(OpReadDir, dir); err != nil {
		return nil, err
	}
	return e.inner.ReadDir(dir)
}

func (e *errorFS) Stat(name string) (os.FileInfo, error) {
	if err := e.check(OpStat, name); err != nil {
		return nil, err
	}
	return e.inner.Stat(name)
}

func (e *errorFS) SyncDir(dir string) error {
	if err := e.check(OpSyncDir, dir); err != nil {
		return err
	}
	return e.inner.SyncDir(dir)
}

// Lock is the inner FS's lock, never failed: the injectors model a
// disk's faults, and a lock is the kernel's.
func (e *errorFS) Lock(name string) (io.Closer, error) { return e.inner.Lock(name) }

type errorFile struct {
	fs *errorFS
	f  vfs.File
	// pos is the file position Read and Write use, as far as the wrapper
	// can follow it: a write to an O_APPEND file moves it to the end,
	// which the wrapper does not know, so lost is set from then on.
	pos        int64
	lost       bool
	appendOnly bool
}

func (f *errorFile) check(kind OpKind) error { return f.fs.check(kind, f.f.Name()) }

// at is the position of a Read or Write, -1 once it is unknown.
func (f *errorFile) at(write bool) int64 {
	if f.lost || (write && f.appendOnly) {
		return -1
	}
	return f.pos
}

// advance moves the tracked position past n bytes read or written.
func (f *errorFile) advance(write bool, n int) {
	if write && f.appendOnly {
		f.lost = true
	}
	f.pos += int64(n)
}

func (f *errorFile) Name() string { return f.f.Name() }

func (f *errorFile) Read(p []byte) (int, error) {
	off := f.at(false)
	n, err := f.read(OpRead, p, off, f.f.Read)
	f.advance(false, n)
	return n, err
}

func (f *errorFile) ReadAt(p []byte, off int64) (int, error) {
	return f.read(OpReadAt, p, off, func(b []byte) (int, error) { return f.f.ReadAt(b, off) })
}

// read runs a Read or ReadAt (do) of p at off (-1: unknown) unless the
// injector fails it; a *FlipOnRead lets it run and flips the bytes it
// names in what it returns.
func (f *errorFile) read(kind OpKind, p []byte, off int64, do func([]byte) (int, error)) (int, error) {
	op := Op{Kind: kind, Path: f.f.Name(), Off: off, Len: len(p)}
	err := f.fs.inj.MaybeError(op)
	if err == nil {
		return do(p)
	}
	var flip *FlipOnRead
	if !errors.As(err, &flip) {
		return 0, wrap(op, err)
	}
	n, rerr := do(p)
	if off >= 0 {
		flip.apply(p[:n], off)
	}
	return n, rerr
}

// write runs a Write or WriteAt (do) of p at off (-1: unknown) unless
// the injector fails it; a *TornWrite lets the first N bytes through
// first, and a *MisdirectedWrite makes a WriteAt write them Delta bytes
// away and report success.
func (f *errorFile) write(kind OpKind, p []byte, off int64, do func([]byte) (int, error)) (int, error) {
	op := Op{Kind: kind, Path: f.f.Name(), Off: off, Len: len(p)}
	err := f.fs.inj.MaybeError(op)
	if err == nil {
		return do(p)
	}
	var mis *MisdirectedWrite
	if errors.As(err, &mis) && kind == OpWriteAt && off+mis.Delta >= 0 {
		if _, werr := f.f.WriteAt(p, off+mis.Delta); werr != nil {
			return 0, werr
		}
		return len(p), nil
	}
	var torn *TornWrite
	if !errors.As(err, &torn) {
		return 0, wrap(op, err)
	}
	n := min(max(torn.N, 0), len(p))
	if n > 0 {
		var werr error
		if n, werr = do(p[:n]); werr != nil {
			return n, werr
		}
	}
	return n, wrap(op, err)
}

// Write writes at the file position. It is never misdirected (a
// *MisdirectedWrite is an ordinary error for it): the position it
// moves would tell the caller where the bytes went.
func (f *errorFile) Write(p []byte) (int, error) {
	off := f.at(true)
	n, err := f.write(OpWrite, p, off, f.f.Write)
	f.advance(true, n)
	return n, err
}

func (f *errorFile) WriteAt(p []byte, off int64) (int, error) {
	return f.write(OpWriteAt, p, off, func(b []byte) (int, error) { return f.f.WriteAt(b, off) })
}

func (f *errorFile) Stat() (os.FileInfo, error) {
	if err := f.check(OpStat); err != nil {
		return nil, err
	}
	return f.f.Stat()
}

func (f *errorFile) Sync() error {
	if err := f.check(OpSync); err != nil {
		return err
	}
	return f.f.Sync()
}

// Datasync is an OpSync to the injector, then vfs.Datasync of the inner
// file.
func (f *errorFile) Datasync() error {
	if err := f.check(OpSync); err != nil {
		return err
	}
	return vfs.Datasync(f.f)
}

// WriteBack is an OpWriteBack to the injector, then vfs.WriteBack of the
// inner file.
func (f *errorFile) WriteBack() error {
	if err := f.check(OpWriteBack); err != nil {
		return err
	}
	return vfs.WriteBack(f.f)
}

// StartWriteBack is an OpStartWriteBack to the injector, then
// vfs.StartWriteBack of the inner file.
func (f *errorFile) StartWriteBack() error {
	if err := f.check(OpStartWriteBack); err != nil {
		return err
	}
	return vfs.StartWriteBack(f.f)
}

// WaitWriteBack is an OpWaitWriteBack to the injector, then
// vfs.WaitWriteBack of the inner file.
func (f *errorFile) WaitWriteBack() error {
	if err := f.check(OpWaitWriteBack); err != nil {
		return err
	}
	return vfs.WaitWriteBack(f.f)
}

func (f *errorFile) Truncate(size int64) error {
	if err := f.check(OpTruncate); err != nil {
		return err
	}
	return f.f.Truncate(size)
}

func (f *errorFile) Preallocate(off, n int64) error {
	if err := f.check(OpPreallocate); err != nil {
		return err
	}
	return f.f.Preallocate(off, n)
}

// Close closes the inner file even when the injector fails it (a failed
// close(2) still releases the descriptor) and returns the injected error.
func (f *errorFile) Close() error {
	ierr := f.check(OpClose)
	err := f.f.Close()
	if ierr != nil {
		return ierr
	}
	return err
}
