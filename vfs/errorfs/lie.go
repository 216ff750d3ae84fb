package errorfs

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/parkway-io/parkway/vfs"
)

// Lies: faults after which the disk reports success and the data is
// wrong. A checksum, an identity or a recorded length is what can tell;
// these are what the simulator and the damage tests inject to see that
// parkway does.

// FlipOnRead, returned by an Injector for an OpRead or OpReadAt, lets the
// read happen and then XORs Mask into the byte at file offset Off if the
// read returned it, and reports success: a bit that rotted on the media,
// or one flipped between the disk and memory. For other operations it is
// an ordinary injected error. A read whose position the wrapper does not
// know (Op.Off < 0) is returned unchanged.
type FlipOnRead struct {
	Off  int64
	Mask byte
}

func (e *FlipOnRead) Error() string {
	return fmt.Sprintf("injected bit flip at byte %d (mask %#02x)", e.Off, e.Mask)
}

// apply flips e's byte in b, which was read from file offset off.
func (e *FlipOnRead) apply(b []byte, off int64) {
	if i := e.Off - off; i >= 0 && i < int64(len(b)) {
		b[i] ^= e.Mask
	}
}

// MisdirectedWrite, returned by an Injector for an OpWriteAt, writes the
// bytes Delta bytes away from where they were meant to go (at off+Delta,
// growing the file if that is past its end) and reports the write as
// done: the intended range keeps its old bytes (or the zeros of a hole)
// and whatever lay at the other one is overwritten. A target below 0, and
// every other operation (an OpWrite included: its file position would
// tell), get it as an ordinary injected error.
type MisdirectedWrite struct{ Delta int64 }

func (e *MisdirectedWrite) Error() string {
	return fmt.Sprintf("injected misdirected write (%+d bytes)", e.Delta)
}

// overlaps reports whether op reads or writes part of [off, off+n). An op
// whose position is unknown (Off < 0) is taken to overlap: the fault
// errs on the side of firing.
func overlaps(op Op, off, n int64) bool {
	if op.Off < 0 {
		return true
	}
	return op.Off < off+n && off < op.Off+int64(op.Len)
}

func isRead(k OpKind) bool { return k == OpRead || k == OpReadAt }

// Chain asks each injector in turn and returns the first non-nil answer:
// faults compose (a latent sector error, a flipped bit elsewhere, a full
// disk). Nil injectors are skipped.
func Chain(injs ...Injector) Injector {
	return InjectorFunc(func(op Op) error {
		for _, inj := range injs {
			if inj == nil {
				continue
			}
			if err := inj.MaybeError(op); err != nil {
				return err
			}
		}
		return nil
	})
}

// Sectors fails, with EIO, every read of a registered file that covers
// part of a registered byte range: a latent sector error, which the disk
// reports only when the sector is read, every time (until Clear).
// Writes are not affected: a real disk would remap the sector on
// rewrite, which the callers never do to written data. Safe for
// concurrent use.
type Sectors struct {
	mu  sync.Mutex
	bad map[string][][2]int64
}

// NewSectors returns a Sectors with no bad range.
func NewSectors() *Sectors { return &Sectors{bad: map[string][][2]int64{}} }

// ReadErrorAt returns an injector failing the reads of path that cover
// part of [off, off+n) with EIO.
func ReadErrorAt(path string, off, n int64) *Sectors {
	s := NewSectors()
	s.Add(path, off, n)
	return s
}

// Add makes the reads of path covering part of [off, off+n) fail.
func (s *Sectors) Add(path string, off, n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bad[path] = append(s.bad[path], [2]int64{off, n})
}

// Clear forgets every bad range.
func (s *Sectors) Clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.bad)
}

// MaybeError implements Injector.
func (s *Sectors) MaybeError(op Op) error {
	if !isRead(op.Kind) {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.bad[op.Path] {
		if overlaps(op, r[0], r[1]) {
			return syscall.EIO
		}
	}
	return nil
}

// Flips makes the reads of registered addresses return a flipped bit,
// every time (until Clear), while the stored bytes stay intact: the flip
// happens on the way to memory. Safe for concurrent use.
type Flips struct {
	mu    sync.Mutex
	flips map[string][]FlipOnRead
}

// NewFlips returns a Flips with no address.
func NewFlips() *Flips { return &Flips{flips: map[string][]FlipOnRead{}} }

// FlipsOnRead returns an injector whose reads of path return the byte at
// off XORed with mask (a zero mask flips bit 0).
func FlipsOnRead(path string, off int64, mask byte) *Flips {
	f := NewFlips()
	f.Add(path, off, mask)
	return f
}

// Add registers an address: reads of path return the byte at off XORed
// with mask (0 means 1).
func (f *Flips) Add(path string, off int64, mask byte) {
	if mask == 0 {
		mask = 1
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.flips[path] = append(f.flips[path], FlipOnRead{Off: off, Mask: mask})
}

// Clear forgets every address.
func (f *Flips) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.flips)
}

// MaybeError implements Injector. A read covering several registered
// addresses gets the first: one flip per read.
func (f *Flips) MaybeError(op Op) error {
	if !isRead(op.Kind) {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, x := range f.flips[op.Path] {
		if overlaps(op, x.Off, 1) {
			flip := x
			return &flip
		}
	}
	return nil
}

// FlipStored XORs mask (0 means 1) into the stored byte at off of the
// named file and syncs it: a bit that rotted on the media, found by
// whoever reads it next. It goes through fsys, so it works on a MemFS
// (whose durable copy it changes) and on the operating system's disk
// alike; call it while nothing has the file open for writing.
func FlipStored(fsys vfs.FS, name string, off int64, mask byte) error {
	if mask == 0 {
		mask = 1
	}
	f, err := fsys.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	b := []byte{0}
	if _, err = f.ReadAt(b, off); err == nil {
		b[0] ^= mask
		if _, err = f.WriteAt(b, off); err == nil {
			err = f.Sync()
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == io.EOF {
		err = fmt.Errorf("errorfs: flip at byte %d of %s: past its end", off, name)
	}
	return err
}

// TruncateStored cuts the named file to size bytes (or extends it with
// zeros) and syncs it: a file a filesystem check or a lost metadata
// update left short.
func TruncateStored(fsys vfs.FS, name string, size int64) error {
	f, err := fsys.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	if err = f.Truncate(size); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Copy is a file's content saved by SaveCopy, to roll the file back to
// later.
type Copy struct {
	Name string
	Data []byte
}

// SaveCopy reads the named file whole. Taken while the file is synced
// (say, right after a simulated power loss, when only durable bytes
// remain), it is an earlier synced copy to roll back to.
func SaveCopy(fsys vfs.FS, name string) (Copy, error) {
	b, err := vfs.ReadFile(fsys, name)
	if err != nil {
		return Copy{}, err
	}
	return Copy{Name: name, Data: b}, nil
}

// Restore rolls the file back to the saved content, in place, and syncs
// it, creating it again if it is gone (its directory entry is synced
// too): a disk, a backup restore or a snapshot of a virtual disk that
// brought back an older copy of the file.
func (c Copy) Restore(fsys vfs.FS) error {
	f, err := fsys.OpenFile(c.Name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err = f.WriteAt(c.Data, 0); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return fsys.SyncDir(filepath.Dir(c.Name))
}
