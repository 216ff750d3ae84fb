package partition

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/parkway-io/parkway/metadata"
)

// Segment size bounds for FileConfig.SegmentSize.
const (
	// DefaultSegmentSize is used when FileConfig.SegmentSize is 0.
	DefaultSegmentSize int64 = 1 << 30
	// MinSegmentSize keeps segments from being so small that per-segment
	// files and handles dominate.
	MinSegmentSize int64 = 1 << 20
	// MaxSegmentSize keeps every file position of a normal segment within
	// the uint32 of the sparse index.
	MaxSegmentSize int64 = 1 << 30
)

// FileConfig configures a FileStore.
type FileConfig struct {
	// Dir is the data directory; partitions live under Dir/streams/. It is
	// created if missing.
	Dir string
	// SegmentSize is the size at which the active segment is rolled: a
	// batch that would take the segment past it goes to a new segment
	// (a batch larger than a whole segment goes alone into a fresh one).
	// 0 means DefaultSegmentSize; otherwise MinSegmentSize..MaxSegmentSize.
	SegmentSize int64
	// Preallocate reserves SegmentSize bytes of disk for each new segment
	// with fallocate(FALLOC_FL_KEEP_SIZE) (Linux only; ignored elsewhere
	// and on filesystems that do not support it), trading disk space for
	// unfragmented segments and an early out-of-space error.
	Preallocate bool
	// Sync fsyncs the log after every Append, so an acknowledged batch
	// survives a power loss. Without it a crash may lose the latest
	// batches (never corrupt earlier ones: a torn tail is truncated on
	// reopen). Consumer offsets are always written durably.
	Sync bool
}

// Validate reports every problem with c, joined, each wrapping
// ErrInvalidConfig; nil if c is usable.
func (c FileConfig) Validate() error {
	var errs []error
	if c.Dir == "" {
		errs = append(errs, fmt.Errorf("%w: Dir is empty", ErrInvalidConfig))
	} else if strings.IndexByte(c.Dir, 0) >= 0 {
		errs = append(errs, fmt.Errorf("%w: Dir contains a NUL byte", ErrInvalidConfig))
	}
	if c.SegmentSize != 0 && (c.SegmentSize < MinSegmentSize || c.SegmentSize > MaxSegmentSize) {
		errs = append(errs, fmt.Errorf("%w: SegmentSize %d outside [%d, %d] (0 for the default)",
			ErrInvalidConfig, c.SegmentSize, MinSegmentSize, MaxSegmentSize))
	}
	return errors.Join(errs...)
}

// FileStore is a Store that keeps partitions on disk, one directory per
// partition:
//
//	<Dir>/streams/<s>/topics/<t>/partitions/<p>/
//	    <base offset, 20 digits>.log    records (format in codec.go)
//	    <base offset, 20 digits>.index  sparse index (format in segment.go)
//	    incarnation                     the epoch, decimal
//	    offsets/consumers/<consumer>    one file per consumer
//	    offsets/groups/
//
// The incarnation file is written last when a partition is created, so a
// directory without a readable one is a dead or half-built incarnation and
// is discarded by Build.
//
// FileStore is safe for concurrent Build and Remove. Each Partition is for
// one goroutine. Two FileStores must not share a Dir: the in-use check
// that keeps two handles off one log is per FileStore.
type FileStore struct {
	cfg FileConfig

	mu   sync.Mutex
	busy map[metadata.Namespace]struct{} // open, being built or being removed
}

// NewFileStore validates cfg, creates cfg.Dir if needed and returns the
// store.
func NewFileStore(cfg FileConfig) (*FileStore, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.SegmentSize == 0 {
		cfg.SegmentSize = DefaultSegmentSize
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	return &FileStore{cfg: cfg, busy: make(map[metadata.Namespace]struct{})}, nil
}

// checkNamespace rejects namespaces that do not round-trip through
// metadata.NewNamespace (MetadataNamespace, reserved bits, partition ids
// past MaxPartitionID): their directory would alias another partition's.
func checkNamespace(ns metadata.Namespace) error {
	if want, err := metadata.NewNamespace(ns.Stream(), ns.Topic(), ns.Partition()); err != nil || want != ns {
		return fmt.Errorf("%w: namespace %#x is not a partition namespace", metadata.ErrIDOutOfRange, uint64(ns))
	}
	return nil
}

func (s *FileStore) partitionDir(ns metadata.Namespace) string {
	return filepath.Join(s.cfg.Dir,
		"streams", strconv.FormatUint(uint64(ns.Stream()), 10),
		"topics", strconv.FormatUint(uint64(ns.Topic()), 10),
		"partitions", strconv.FormatUint(uint64(ns.Partition()), 10))
}

func (s *FileStore) acquire(ns metadata.Namespace) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.busy[ns]; ok {
		return fmt.Errorf("%w: %v", ErrInUse, ns)
	}
	s.busy[ns] = struct{}{}
	return nil
}

func (s *FileStore) release(ns metadata.Namespace) {
	s.mu.Lock()
	delete(s.busy, ns)
	s.mu.Unlock()
}

// Build implements Store. A namespace with an open Partition from this
// store is ErrInUse. Reopening at the same epoch verifies the tail segment
// record by record and truncates a torn or damaged tail back to the last
// whole record; damage in an older segment is a *CorruptError. Consumer
// offsets past the recovered end (a crash lost unsynced appends) are
// clamped to NextOffset.
//
// Namespaces that do not round-trip through metadata.NewNamespace, such as
// metadata.MetadataNamespace, are metadata.ErrIDOutOfRange: their
// directory would alias another partition's.
func (s *FileStore) Build(ns metadata.Namespace, epoch uint64) (Partition, error) {
	if err := checkNamespace(ns); err != nil {
		return nil, err
	}
	if err := s.acquire(ns); err != nil {
		return nil, err
	}
	p, err := s.build(ns, epoch)
	if err != nil {
		s.release(ns)
		return nil, err
	}
	return p, nil
}

func (s *FileStore) build(ns metadata.Namespace, epoch uint64) (*filePartition, error) {
	dir := s.partitionDir(ns)
	inc, err := readIncarnation(dir)
	switch {
	case err == nil && inc == epoch:
		return s.open(ns, epoch, dir, false)
	case err == nil, isNotExist(err), errors.Is(err, errBadIncarnation):
		// Another epoch, nothing, or a half-built directory: start over.
	default:
		return nil, err // unreadable: keep the data, report
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	return s.open(ns, epoch, dir, true)
}

// Remove implements Store. A namespace with an open Partition from this
// store is ErrInUse.
func (s *FileStore) Remove(ns metadata.Namespace) error {
	if err := checkNamespace(ns); err != nil {
		return err
	}
	if err := s.acquire(ns); err != nil {
		return err
	}
	defer s.release(ns)
	return os.RemoveAll(s.partitionDir(ns))
}

// open creates (fresh) or reopens the partition in dir.
func (s *FileStore) open(ns metadata.Namespace, epoch uint64, dir string, fresh bool) (_ *filePartition, err error) {
	p := &filePartition{store: s, ns: ns, epoch: epoch, dir: dir}
	defer func() {
		if err != nil {
			_ = p.closeFiles()
		}
	}()
	for _, sub := range []string{consumersDir, groupsDir} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return nil, err
		}
	}
	var bases []uint64
	if !fresh {
		if bases, err = listSegments(dir); err != nil {
			return nil, err
		}
	}
	if len(bases) == 0 {
		seg, err := p.createSegment(0)
		if err != nil {
			return nil, err
		}
		p.segs = append(p.segs, seg)
	}
	var buf []byte
	for i, base := range bases {
		if i > 0 && base != p.segs[i-1].next {
			prev := p.segs[i-1]
			return nil, corruptf(prev.logPath, prev.size,
				"segment ends at offset %d but the next segment starts at %d", prev.next, base)
		}
		seg := newSegment(dir, base)
		p.segs = append(p.segs, seg)
		if i == len(bases)-1 {
			buf, err = s.openTail(seg, buf)
		} else {
			buf, err = s.openSealed(seg, buf)
		}
		if err != nil {
			return nil, err
		}
	}
	p.next = p.tail().next
	if p.consumers, err = loadConsumerOffsets(filepath.Join(dir, consumersDir), p.next); err != nil {
		return nil, err
	}
	if fresh {
		if err := writeIncarnation(dir, epoch); err != nil {
			return nil, err
		}
		// Make the new directories themselves durable, up to Dir.
		if err := syncDir(filepath.Join(dir, "offsets")); err != nil {
			return nil, err
		}
		for d := dir; ; d = filepath.Dir(d) {
			if err := syncDir(d); err != nil {
				return nil, err
			}
			if d == filepath.Clean(s.cfg.Dir) || d == filepath.Dir(d) {
				break
			}
		}
	}
	return p, nil
}

// openSealed opens a segment that is no longer written. Its index is
// trusted if plausible and if its last entry points at the record it
// names; the scan then only covers the records after that entry. An index
// that fails the checks, is missing or is short is rebuilt by the scan and
// rewritten. Damage in a sealed segment cannot be a torn append, so it is
// reported, not truncated.
func (s *FileStore) openSealed(seg *segment, buf []byte) ([]byte, error) {
	f, err := os.Open(seg.logPath)
	if err != nil {
		return buf, err
	}
	seg.log = f
	fi, err := f.Stat()
	if err != nil {
		return buf, err
	}
	size := fi.Size()
	es, exact, err := loadIndex(seg.indexPath())
	if err != nil {
		return buf, err
	}
	var end int64
	var next uint64
	rewrite, scanned := !exact, false
	if len(es) > 0 {
		rewrite = true // unless the checks below pass
		if plausibleIndex(es, size) {
			last := es[len(es)-1]
			seg.index, seg.lastIndexed = es, int64(last.pos)
			end, next, buf, err = seg.scan(int64(last.pos), seg.base+uint64(last.rel), size, buf)
			switch {
			case err == nil:
				rewrite, scanned = !exact, true
			case !errors.Is(err, ErrCorrupt):
				return buf, err
			}
		}
	}
	if !scanned { // no usable index: scan it all
		seg.index, seg.lastIndexed = nil, 0
		if end, next, buf, err = seg.scan(0, seg.base, size, buf); err != nil {
			return buf, err
		}
	}
	seg.size, seg.next = end, next
	if rewrite || len(seg.index) != len(es) {
		return buf, seg.writeIndexFile(false)
	}
	seg.idxPersisted = len(seg.index)
	return buf, nil
}

// openTail opens the segment appends go to. Every record is verified; a
// torn or damaged tail is truncated back to the last whole record, and so
// is a zero-filled tail (re-reserving the preallocation). The index is
// rebuilt from the scan and rewritten if the file differs.
func (s *FileStore) openTail(seg *segment, buf []byte) ([]byte, error) {
	f, err := os.OpenFile(seg.logPath, os.O_RDWR, 0)
	if err != nil {
		return buf, err
	}
	seg.log = f
	fi, err := f.Stat()
	if err != nil {
		return buf, err
	}
	end, next, buf, err := seg.scan(0, seg.base, fi.Size(), buf)
	if err != nil && !errors.Is(err, ErrCorrupt) {
		return buf, err
	}
	seg.size, seg.next = end, next
	if end < fi.Size() {
		if err := f.Truncate(end); err != nil {
			return buf, err
		}
		if s.cfg.Preallocate {
			if err := preallocate(f, s.cfg.SegmentSize); err != nil {
				return buf, err
			}
		}
		if err := f.Sync(); err != nil {
			return buf, err
		}
	}
	want := appendIndexEntries(nil, seg.index)
	have, err := os.ReadFile(seg.indexPath())
	if err != nil && !isNotExist(err) {
		return buf, err
	}
	if err != nil || string(have) != string(want) {
		return buf, seg.writeIndexFile(true)
	}
	if seg.idx, err = os.OpenFile(seg.indexPath(), os.O_RDWR, 0); err != nil {
		return buf, err
	}
	seg.idxPersisted = len(seg.index)
	return buf, nil
}

const (
	consumersDir = "offsets/consumers"
	groupsDir    = "offsets/groups"
)
