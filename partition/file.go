package partition

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/vfs"
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

// minSegmentSize is the smallest SegmentSize Validate accepts:
// MinSegmentSize, lowered only by tests (export_test.go) so crash tests
// can roll segments without writing megabytes per crash point.
var minSegmentSize = MinSegmentSize

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
	// Sync makes every Append fsync before it returns, so an appended
	// batch is durable at once (one fsync per batch); an Append whose
	// fsync fails appends nothing and breaks the partition as a failed
	// Partition.Sync does. Without it (the default) appends only write,
	// and the owner calls Partition.Sync when it wants durability,
	// typically once for several batches (group commit) before
	// acknowledging them. Consumer offsets, truncations and the
	// partition's creation are always durable when they return.
	Sync bool
	// VerifyOnOpen makes Build (at the same epoch) read and verify every
	// record of every segment, so damage anywhere is found before the
	// partition is used, at the cost of reading the whole log. Without it,
	// Build verifies the active (tail) segment fully and each older
	// segment from its last sparse-index entry on; damage before that is
	// found by the Read that reaches it. Either way the damaged records
	// are never served: a read that reaches them gets a *CorruptError
	// (see Build).
	VerifyOnOpen bool
	// MaxOpenFiles is the store's descriptor budget: how many files and
	// directories it holds open at once, over all its partitions. Segment
	// files are opened on first use and the least recently used idle ones
	// are closed when the budget is reached, so a store may hold far more
	// partitions than descriptors; a partition idle since its last Sync
	// holds none that cannot be closed. Files in use by an operation and a
	// tail holding appends not yet fsynced cannot be closed and may take
	// the store past the budget (see HandleStats). 0 means
	// DefaultMaxOpenFiles() (half of the soft RLIMIT_NOFILE, within
	// [DefaultMaxOpenFilesFloor, DefaultMaxOpenFilesCeiling]); otherwise
	// at least MinMaxOpenFiles. Files opened through a partition's
	// Location (a replicated partition's raft log) are counted and kept
	// the same way: closed when idle, pinned while they hold writes not
	// yet fsynced.
	MaxOpenFiles int
	// SerialSyncs issues the fsyncs that make a new partition's layout
	// durable one after another instead of concurrently. Concurrent
	// fsyncs cost about one journal commit instead of six or seven; serial
	// ones reach the filesystem in a fixed order, which a deterministic
	// simulator or a fault-injecting filesystem that fails operation i
	// needs (a manual host.Engine sets it, as its shards sync a commit
	// group's partitions one after another).
	SerialSyncs bool
	// JournalFileSize is the size past which the store's journal (see
	// Journal) starts a new file: a reopen's replay reads about this much
	// per file left behind, and a file is removed once its records are in
	// their partitions' files. 0 means 64 MiB.
	JournalFileSize int64
	// SegmentSyncs and JournalSyncs, when set, observe the duration in
	// seconds (wall-clock time) of every fsync of a partition's tail
	// segment (Partition.Sync, an Append with Sync) and of every
	// fdatasync of the journal.
	SegmentSyncs, JournalSyncs prometheus.Observer
	// FS is the filesystem the store uses; nil means vfs.Default, the
	// operating system. Tests substitute an in-memory or fault-injecting
	// one.
	FS vfs.FS
	// OwnerIncarnation, if set, reads the incarnation that the files of
	// a partition's owner in dir name (0 if they name none): a replicated
	// partition's raft log is tagged with its incarnation. It is asked
	// about a directory that holds no incarnation file of the
	// partition's own but files that are not the partition's: a
	// partition built deferred whose owner lodged its log there (see
	// Lodger), which List reports at that incarnation and BuildDeferred
	// reopens if it is the one built, or discards if it is another. An
	// error (an unreadable log) is reported as List's Damage and as the
	// build's error, and the directory is kept — unless it comes with an
	// incarnation older than the one built (a damaged log that still
	// names its incarnation: a raft log's sync mark, or its valid
	// prefix, holds its tag): that directory is an earlier
	// incarnation's, and the build discards it as it discards an intact
	// one. Nil: such a directory is a half-built one, discarded by the
	// next build.
	OwnerIncarnation func(fsys vfs.FS, dir string) (uint64, error)
	// CommittedRevision is the newest incarnation (metadata revision) the
	// owner's metadata had committed when the store opens; 0 if unknown.
	// A journal file found damaged at open may have held the only
	// records of a partition built deferred (BuildDeferred), which has
	// no directory for the replay to find and fence: a build of an
	// incarnation at or below it that the replay did not fence is fenced
	// at its log's end as the replay fences the partitions it lists
	// (journal_replay.go). Unknown, every such build is; incarnations
	// created after the open start clean.
	CommittedRevision uint64
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
	if c.SegmentSize != 0 && (c.SegmentSize < minSegmentSize || c.SegmentSize > MaxSegmentSize) {
		errs = append(errs, fmt.Errorf("%w: SegmentSize %d outside [%d, %d] (0 for the default)",
			ErrInvalidConfig, c.SegmentSize, minSegmentSize, MaxSegmentSize))
	}
	if c.MaxOpenFiles != 0 && c.MaxOpenFiles < MinMaxOpenFiles {
		errs = append(errs, fmt.Errorf("%w: MaxOpenFiles %d below %d (0 for the default)",
			ErrInvalidConfig, c.MaxOpenFiles, MinMaxOpenFiles))
	}
	if c.JournalFileSize < 0 {
		errs = append(errs, fmt.Errorf("%w: JournalFileSize %d < 0 (0 for the default)", ErrInvalidConfig, c.JournalFileSize))
	}
	return errors.Join(errs...)
}

// FileStore is a Store that keeps partitions on disk, one directory per
// partition:
//
//	<Dir>/streams/<s>/topics/<t>/partitions/<p>/
//	    <base offset, 20 digits>.log    records (format in codec.go)
//	    <base offset, 20 digits>.index  sparse index (format in segment.go)
//	    <base offset, 20 digits>.timeindex  time index (format in segment.go)
//	    incarnation                     the epoch, decimal, and its CRC-32C
//	    start                           the start offset, decimal (once truncated)
//	    offsets/consumers/<consumer>    one file per consumer
//	    offsets/groups/
//
// The incarnation file is written last when a partition is created, so a
// directory without a readable one is a dead or half-built incarnation and
// is discarded by Build.
//
// Durability. Appends only write; Partition.Sync fsyncs. Everything else
// that a crash must not undo is made durable before it returns: a new
// partition's files and directories (fsync of every directory created, up
// to Dir), a new segment's directory entry (so messages synced into it
// cannot lose their file), the sealed segment at a roll (fsynced before
// the next segment exists, so only the tail can ever be torn), the
// incarnation and the start offset (each written to a temporary file,
// fsynced, renamed, directory fsynced), and consumer offsets (a sync mark
// file, created that way, then a slot overwritten in place and
// fdatasynced per store; see offsets.go — StageConsumerOffset leaves the
// fdatasync to its caller, off the owner's goroutine). Index files are
// derived data: they are not fsynced, and a reopen rebuilds any that is
// missing, short or wrong.
//
// The directories above a partition's own (its topic's partitions/ and
// up) are shared: the first Syncs of partitions built in a batch fsync
// each of them once for the batch, not once per partition (dirSyncs).
//
// Descriptors. The store holds at most FileConfig.MaxOpenFiles files and
// directories open at once over all its partitions (see handles.go): a
// segment file is opened when an operation needs it and closed, least
// recently used first, when idle and the budget needs the descriptor, so
// a partition idle since its last Sync holds none that cannot be
// closed, and reopening a node opens its partitions' files one partition
// at a time rather than keeping them all. HandleStats reports the budget.
//
// FileStore is safe for concurrent Build, Remove and List. Each Partition
// is for one goroutine. Two FileStores must not share a Dir: the in-use
// check that keeps two handles off one log is per FileStore.
type FileStore struct {
	cfg FileConfig
	// fs is budgetFS over raw: every descriptor the store opens counts
	// against the budget in handles.
	fs      vfs.FS
	raw     vfs.FS
	handles *handleCache
	// located is the filesystem partitions hand out with Location:
	// storeFS over the same budget.
	located storeFS
	dirs    *dirSyncs
	// journalSeq is the last journal file number handed out (journal.go).
	journalSeq atomic.Uint64
	// jmark is what the journal's next mark starts from: the last
	// slot's sequence number and the synced ends of the journal files a
	// damaged replay kept (journal_mark.go).
	jmark journalMark
	// journalReady: the journal directory exists and its entry is durable.
	journalReady atomic.Bool
	// jlog is the store's journal, shared by its Journals (journal.go),
	// created by the first NewJournal.
	journalOnce sync.Once
	jlog        *journalLog

	// manifestMu serialises manifest writes; recorded is the partition
	// set the last one recorded (manifest.go).
	manifestMu sync.Mutex
	recorded   map[metadata.Namespace]uint64
	// endsMu guards ends: each partition's synced end, loaded from the
	// manifest at open and raised as partitions sync (syncedend.go).
	endsMu sync.Mutex
	ends   map[metadata.Namespace]syncedEnd

	// readOnly: opened by OpenReadOnlyStore (readonly.go).
	readOnly bool

	mu   sync.Mutex
	busy map[metadata.Namespace]struct{} // open, being built or being removed
	// lost are partitions closed with records in a journal that their
	// files may lack (their fsync failed): the next Build of the same
	// incarnation applies those records again (journal_replay.go).
	lost map[metadata.Namespace]lostRecords
	// held are partitions whose replay at open met damage: their Build
	// applies the records and fences what it cannot (journal_replay.go).
	held map[metadata.Namespace]heldReplay
	// journalDamage is the *CorruptError of the first journal file the
	// replay at open found damaged (nil if none): see
	// FileConfig.CommittedRevision.
	journalDamage *CorruptError
}

// timeSync runs sync, an fsync of a partition's tail segment, and
// observes its duration on FileConfig.SegmentSyncs.
func (s *FileStore) timeSync(sync func() error) error {
	o := s.cfg.SegmentSyncs
	if o == nil {
		return sync()
	}
	start := time.Now()
	err := sync()
	o.Observe(time.Since(start).Seconds())
	return err
}

// NewFileStore validates cfg, creates cfg.Dir if needed, replays the
// journals a previous process left (see Journal) into their partitions
// and returns the store. Damage the replay meets — a journal that is
// damaged (not merely torn at its end by a crash), a journal record that
// would leave a gap in its partition's log, a damaged file of the
// partition — fences the partitions it concerns, whose Builds report it
// as a *CorruptError (see replayJournals); the store opens and serves the
// others, never losing acknowledged messages silently.
func NewFileStore(cfg FileConfig) (*FileStore, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.SegmentSize == 0 {
		cfg.SegmentSize = DefaultSegmentSize
	}
	fsys := cfg.FS
	if fsys == nil {
		fsys = vfs.Default
	}
	if cfg.MaxOpenFiles == 0 {
		cfg.MaxOpenFiles = DefaultMaxOpenFiles()
	}
	if err := fsys.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	c := newHandleCache(fsys, cfg.MaxOpenFiles)
	s := &FileStore{
		cfg: cfg, fs: budgetFS{FS: fsys, c: c}, raw: fsys, handles: c, dirs: newDirSyncs(),
		busy: make(map[metadata.Namespace]struct{}), lost: make(map[metadata.Namespace]lostRecords),
	}
	s.located = storeFS{budgetFS{FS: fsys, c: c}}
	s.loadSyncedEnds()
	if err := s.replayJournals(); err != nil {
		return nil, err
	}
	return s, nil
}

// HandleStats reports the store's descriptor budget and its counters.
func (s *FileStore) HandleStats() HandleStats { return s.handles.snapshot() }

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
// store is ErrInUse.
//
// Recovery when reopening at the same epoch tells a torn write from
// damage. A crash can tear only the last write of the tail segment (each
// sealed segment was fsynced before the next one existed), so only what
// follows the last whole record with no whole record anywhere after it —
// a record cut short, garbage, zeros — is a torn write. Anything else is
// damage, reported as a *CorruptError naming the file and the byte
// position, never repaired by dropping records:
//   - The tail (active) segment is verified record by record. A torn
//     write at its end is truncated back to the last whole record. A bad
//     record (or a run of zeros) followed by a whole record is damage:
//     the file is left as it is, the damaged offsets read as the
//     *CorruptError while the records around them are served, NextOffset
//     stays past the last whole record, and Append and SkipTo are refused
//     with the error (wrapping it) so that no offset is handed out twice.
//     A purge (TruncateBefore(NextOffset)) accepts the loss: it seals and
//     deletes the damaged segment, and appends go on at NextOffset.
//     Damage that the journal's records cover, from the damaged record to
//     the end, is repaired instead: the tail is truncated there and the
//     records appended again from the journal (see repairFromJournal).
//   - In a sealed segment (verified at open everywhere with
//     FileConfig.VerifyOnOpen, after its last sparse-index entry
//     without), the damaged records are holes found the same way: reads
//     below and after them are served, reads in them get the
//     *CorruptError, and appends go on at the tail (the damage is not
//     where they go). A sealed segment cut short, or missing between two
//     segments (or below the first one, above the recorded start), makes
//     the offsets from its last whole record to the next segment a hole.
//     Damage before a sealed segment's last index entry, without
//     VerifyOnOpen, is found by the Read that reaches it, with the same
//     answers (a read from past it looks for the next whole record).
//   - Missing last segments whose index file is left (one that held
//     4 KiB of records or more) make the offsets that index names a hole
//     and fence writes, as a damaged tail does.
//   - Segments that overlap, and damage that cannot be told from a torn
//     write within bounded work, fail the Build with a *CorruptError.
//   - Index files that are missing, short or wrong are rebuilt: offset
//     indexes by the open; a sealed segment's time index whose file is
//     missing or does not match its offset index (a segment written
//     before time indexes existed) by the first OffsetForTime that needs
//     it, so opening an old log does not read all of it.
//   - Segments wholly below a recorded start offset (a truncation
//     interrupted by a crash) are deleted, and leftover temporary files
//     are removed.
//   - Consumer offsets past the recovered end (a crash lost unsynced
//     appends) are clamped to NextOffset — the end with the journal's
//     records applied (see reapplyLost), so an offset stored over
//     messages acknowledged through the journal stays where it was.
//
// A failed Build (ENOSPC while creating the first segment, say) returns
// the error and leaves nothing that keeps a later Build from succeeding:
// a half-built directory has no incarnation file and is discarded.
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
	p, err := s.build(ns, epoch, false)
	if err != nil {
		s.release(ns)
		return nil, err
	}
	return p, nil
}

// BuildDeferred is Build, except that a partition the store does not hold
// yet is not created on disk: it is returned deferred, with no directory
// and no file, and costs no system call beyond the look-up that finds
// nothing there. Its files are created when something needs them (see
// filePartition.materialize). A partition the store holds (a reopen) is
// opened as by Build.
//
// Why. A new partition's files are ten or so directory entries and, at
// its first Sync, six or seven fsyncs of its layout: on the path from a
// topic's creation to its first acknowledged message they cost more than
// the message (DESIGN behaviour 32). A deferred partition attached to a
// Journal (Journal.Attach) keeps its records in memory and in the store's
// journal, which already holds the records of every journaled partition
// until their files have them: its first message costs one journal write
// and one fdatasync shared with every shard's group, and no file of its
// own. Its files are created off the acknowledgement path: when it has
// more records than it holds behind (writeBehind), at the journal's
// checkpoint, or when a read, a consumer offset or a Close needs them. The
// journal entries written while its layout is not durable are marked
// (journalEntryFresh), so a replay after a crash recreates the partition
// from them (see replayPartition). Under FsyncInterval, whose
// acknowledgement needs the record in a file but no fsync, its owner
// stages its records (Journal.Stage: a journal write without an
// fdatasync) and its interval Sync creates and syncs its files. Not
// attached to a journal, a deferred partition creates its files at its
// first Append: it is for partitions whose acknowledgements go through a
// journal (FsyncAlways and FsyncInterval on one node).
//
// The alternative, logging the partition's creation in the metadata log
// with the command that creates it, would make the creation durable with
// the command's fsync, but the first message would still need a file to
// go to and a layout to be durable in; the journal is where every
// journaled partition's acknowledged records already live.
func (s *FileStore) BuildDeferred(ns metadata.Namespace, epoch uint64) (Partition, error) {
	if err := checkNamespace(ns); err != nil {
		return nil, err
	}
	if err := s.acquire(ns); err != nil {
		return nil, err
	}
	p, err := s.build(ns, epoch, true)
	if err != nil {
		s.release(ns)
		return nil, err
	}
	return p, nil
}

func (s *FileStore) build(ns metadata.Namespace, epoch uint64, deferred bool) (*filePartition, error) {
	p, err := s.buildOf(ns, epoch, deferred)
	if err != nil || s.readOnly {
		return p, err
	}
	// An incarnation that existed when a damaged journal was written may
	// have lost acknowledged records with the damaged file: fenced at its
	// end, never handing their offsets out again. The replay fenced those
	// it listed (applyHeld); this fences the others: one built deferred,
	// with no directory to list, its records in the journal only, and
	// one whose hold went with another incarnation's directory (the
	// orphan sweep's Remove).
	if ce := s.journalDamage; ce != nil && p.fenced == nil && (s.cfg.CommittedRevision == 0 || epoch <= s.cfg.CommittedRevision) {
		p.fenceJournalDamage(ce)
	}
	return p, nil
}

func (s *FileStore) buildOf(ns metadata.Namespace, epoch uint64, deferred bool) (*filePartition, error) {
	dir := s.partitionDir(ns)
	inc, err := readIncarnation(s.fs, dir)
	switch {
	case err == nil && inc == epoch:
		p, err := s.open(ns, epoch, dir, false)
		if err != nil {
			return nil, err
		}
		if s.readOnly {
			p.checkSyncedEnd()
			p.clampConsumers() // as the node reads them
			return p, nil
		}
		if p, err = s.reapplyLost(p); err != nil {
			_ = p.closeFiles()
			return nil, err
		}
		if p, err = s.applyHeld(p); err != nil {
			_ = p.closeFiles()
			return nil, err
		}
		p.checkSyncedEnd() // what the journal held is applied: the log is whole, or damaged
		// Only now is the log as long as it was acknowledged: clamped
		// before the journal's records were applied, a consumer offset
		// stored over messages acknowledged through the journal would
		// go back.
		p.clampConsumers()
		return p, nil
	case s.readOnly:
		return nil, s.notStored(ns, epoch, inc, err)
	case err == nil, isNotExist(err), errors.Is(err, errBadIncarnation):
		// Another epoch, nothing, or a half-built directory: start over —
		// unless this incarnation was synced there (incarnationLost).
		if lerr := s.incarnationLost(ns, epoch, dir, inc, err); lerr != nil {
			return nil, lerr
		}
	default:
		return nil, err // unreadable: keep the data, report
	}
	// A deferred partition closed with records in the journal only (its
	// files could not be created or synced) comes back from the journal.
	lost := s.hasLost(ns, epoch)
	if !lost && (isNotExist(err) || errors.Is(err, errBadIncarnation)) {
		_, serr := s.fs.Stat(dir)
		if deferred && isNotExist(serr) && isNotExist(err) {
			return s.deferredPartition(ns, epoch, dir), nil
		}
		// A directory with no incarnation of its own yet, holding files
		// of the partition's owner that name this incarnation (a
		// deferred replicated partition's raft log, see Lodge): they
		// are kept, and the partition starts over without its own
		// files, which a materialisation cut short may have left. Built
		// by Build, it gets them at once.
		if serr == nil {
			p, ok, err := s.lodgedPartition(ns, epoch, dir)
			if err == nil && ok && !deferred {
				if err = p.materialize(); err != nil {
					_ = p.closeFiles()
				}
			}
			if err != nil || ok {
				return p, err
			}
		}
	}
	if err := s.dropSynced(ns); err != nil { // the log starts over
		return nil, err
	}
	if err := s.fs.RemoveAll(dir); err != nil {
		return nil, err
	}
	if !lost {
		s.forgetLost(ns)
	}
	p, err := s.open(ns, epoch, dir, true)
	if err == nil && lost {
		if p, err = s.reapplyLost(p); err != nil {
			_ = p.closeFiles()
		}
	}
	if err != nil {
		// Best effort: a later Build discards a half-built directory anyway.
		_ = s.fs.RemoveAll(dir)
		return nil, err
	}
	return p, nil
}

// Remove implements Store. A namespace with an open Partition from this
// store is ErrInUse. The removal is made durable (the parent directory is
// fsynced) before Remove returns.
func (s *FileStore) Remove(ns metadata.Namespace) error {
	if err := checkNamespace(ns); err != nil {
		return err
	}
	if err := s.acquire(ns); err != nil {
		return err
	}
	defer s.release(ns)
	dir := s.partitionDir(ns)
	if err := s.fs.RemoveAll(dir); err != nil {
		return err
	}
	s.forgetLost(ns)
	// The next manifest forgets the synced end. (Written now, it would
	// cost a manifest write per partition of a deleted topic; a removal
	// a crash interrupts half way, on a filesystem that keeps part of
	// it, may then be listed as a damaged incarnation file until the
	// orphan sweep, or the next Build of a newer incarnation, removes
	// it.)
	s.forgetSynced(ns)
	s.mu.Lock()
	delete(s.held, ns)
	s.mu.Unlock()
	if err := s.fs.SyncDir(filepath.Dir(dir)); err != nil && !isNotExist(err) {
		return err
	}
	return nil
}

// List implements Store by walking Dir/streams/*/topics/*/partitions/*.
// Entries whose names are not canonical decimal ids in range are not
// parkway's and are skipped. A partition directory whose incarnation file
// is missing or torn (half-built) is listed with Epoch 0, one whose file
// is damaged with Epoch 0 and the *CorruptError in Damage. It is meant for a
// node's start, before partitions are built: run concurrently with Build
// or Remove it may or may not see their effect.
func (s *FileStore) List() ([]Stored, error) {
	var out []Stored
	root := filepath.Join(s.cfg.Dir, "streams")
	streams, err := s.readDirIDs(root)
	if err != nil {
		return nil, err
	}
	for _, st := range streams {
		tdir := filepath.Join(root, strconv.FormatUint(uint64(st), 10), "topics")
		topics, err := s.readDirIDs(tdir)
		if err != nil {
			return nil, err
		}
		for _, tp := range topics {
			pdir := filepath.Join(tdir, strconv.FormatUint(uint64(tp), 10), "partitions")
			parts, err := s.readDirIDs(pdir)
			if err != nil {
				return nil, err
			}
			for _, pt := range parts {
				ns, err := metadata.NewNamespace(st, tp, pt)
				if err != nil {
					continue
				}
				dir := filepath.Join(pdir, strconv.FormatUint(uint64(pt), 10))
				if fi, err := s.fs.Stat(dir); err != nil || !fi.IsDir() {
					if err != nil && !isNotExist(err) {
						return nil, err
					}
					continue
				}
				epoch, err := readIncarnation(s.fs, dir)
				var damage error
				var ce *CorruptError
				switch {
				case errors.As(err, &ce):
					damage = err
				case err != nil && !isNotExist(err) && !errors.Is(err, errBadIncarnation):
					return nil, err
				case err != nil:
					// A replica built deferred is at the incarnation
					// its owner's files name.
					if inc, ok, oerr := s.ownerIncarnation(dir); oerr != nil {
						damage = oerr
					} else if ok {
						epoch, err = inc, nil
					}
				}
				if damage == nil {
					// Missing, torn or older than an incarnation synced
					// there: damaged, not dead (incarnationLost).
					if e := s.syncedIncarnation(ns); e.end > 0 && (err != nil || epoch < e.epoch) {
						if damage = s.incarnationLost(ns, e.epoch, dir, epoch, err); damage != nil {
							epoch = 0
						}
					}
				}
				out = append(out, Stored{NS: ns, Epoch: epoch, Damage: damage})
			}
		}
	}
	slices.SortFunc(out, func(a, b Stored) int { return cmp.Compare(a.NS, b.NS) })
	return out, nil
}

// readDirIDs returns the canonical decimal names in dir as ids; a missing
// dir (or a file in its place) has none.
func (s *FileStore) readDirIDs(dir string) ([]uint32, error) {
	names, err := s.fs.ReadDir(dir)
	if isNotExist(err) || errors.Is(err, syscall.ENOTDIR) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []uint32
	for _, n := range names {
		id, err := strconv.ParseUint(n, 10, 32)
		if err == nil && strconv.FormatUint(id, 10) == n {
			ids = append(ids, uint32(id))
		}
	}
	return ids, nil
}

// open creates (fresh) or reopens the partition in dir.
func (s *FileStore) open(ns metadata.Namespace, epoch uint64, dir string, fresh bool) (_ *filePartition, err error) {
	p := &filePartition{store: s, fs: s.fs, ns: ns, epoch: epoch, dir: dir}
	defer func() {
		if err != nil {
			_ = p.closeFiles()
		}
	}()
	if fresh {
		// The directories whose entries this build changes: the new ones
		// and the deepest one that existed. syncLayout makes them durable.
		p.layout = s.ancestors(dir, true)
	} else {
		// An existing directory may come from a build whose layout never
		// became durable (its first Sync failed, or it was never synced
		// before the process stopped): the first Sync makes sure, once,
		// for every directory up to Dir.
		p.layout = s.ancestors(dir, false)
	}
	p.layoutPending = !s.readOnly
	for _, sub := range []string{consumersDir, groupsDir} {
		if s.readOnly {
			break // a missing one reads as empty
		}
		if err := s.fs.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return nil, err
		}
	}
	var bases, indexOnly []uint64
	var start uint64
	if !fresh {
		if bases, indexOnly, err = p.listSegments(); err != nil {
			return nil, err
		}
		if start, err = readStart(s.fs, dir); err != nil {
			return nil, err
		}
		// Finish a truncation a crash interrupted: segments wholly below
		// start (the next one starts at or below it) are deleted. Best
		// effort: they are unreadable anyway, and this is retried.
		for len(bases) > 1 && bases[1] <= start {
			_ = removeSegmentFiles(s.fs, newSegment(dir, bases[0]))
			bases = bases[1:]
		}
	}
	if len(bases) == 0 && !s.readOnly { // read-only: an empty log at start, below
		seg, err := p.createSegment(start)
		if err != nil {
			return nil, err
		}
		p.segs = append(p.segs, seg)
	}
	var buf []byte
	for i, base := range bases {
		if i > 0 {
			// A sealed segment that ends before the next one starts was
			// damaged, truncated, or is followed by a missing segment:
			// the offsets in between are a hole, reported by the reads
			// that reach it (the segment's own damage, or the gap).
			prev := p.segs[i-1]
			if base < prev.next {
				return nil, corruptf(prev.logPath, prev.size,
					"segment ends at offset %d but the next segment starts at %d, before it", prev.next, base)
			}
			if base > prev.next {
				err := prev.endDamage
				if err == nil {
					err = corruptf(prev.logPath, prev.size,
						"segment ends at offset %d but the next segment starts at %d: the segment is short or segments are missing", prev.next, base)
				}
				if prev.damaged == nil {
					prev.damaged = err
				}
				p.holes = append(p.holes, hole{from: prev.next, to: base, err: err})
				prev.next = base
			}
		}
		seg := newSegment(dir, base)
		p.segs = append(p.segs, seg)
		if i == len(bases)-1 {
			var holes []hole
			if s.readOnly {
				buf, holes, err = s.readTail(seg, buf)
			} else {
				buf, holes, err = s.openTail(seg, buf)
			}
			if len(holes) > 0 {
				p.holes = append(p.holes, holes...)
				p.fenced = fmt.Errorf("partition %v: writes refused: its last segment is damaged, and the log's end with it: %w", ns, holes[0].err)
			}
		} else {
			var holes []hole
			buf, holes, err = s.openSealed(seg, buf)
			p.holes = append(p.holes, holes...)
		}
		if err != nil {
			return nil, err
		}
	}
	if len(p.segs) == 0 { // read-only, no segment: an empty log at start
		p.segs = append(p.segs, newSegment(dir, start))
	}
	front := len(bases) > 0 && start < bases[0]
	if front {
		// Every segment below the first one left was deleted by a
		// truncation, which records its start first: segments that are
		// missing above the recorded start were lost.
		first := p.segs[0]
		ce := corruptf(first.logPath, 0, "the log starts at offset %d but its first segment at %d: segments are missing", start, first.base)
		p.holes = append([]hole{{from: start, to: first.base, err: ce}}, p.holes...)
	}
	tail := p.tail()
	p.next = tail.next
	p.lastAT = math.MinInt64
	for _, seg := range p.segs {
		p.lastAT = max(p.lastAT, seg.maxAT)
	}
	// What the tail holds may not be durable yet (a process crash keeps
	// unsynced writes in the page cache); sealed segments are.
	p.synced = tail.base
	if tail.synced {
		p.synced = p.next
	}
	if start > p.next {
		// The log ends below a durably recorded start: possible only if an
		// fsync lied. Offsets are never reused, so the log restarts empty
		// at start.
		seg := newSegment(dir, start) // read-only: no file
		if !s.readOnly {
			if seg, err = p.createSegment(start); err != nil {
				return nil, err
			}
		}
		p.segs = append(p.segs, seg)
		p.next, p.synced = start, start
	}
	if err := p.findDeletedTail(indexOnly); err != nil {
		return nil, err
	}
	p.start = max(start, p.segs[0].base)
	if front {
		p.start = start // the missing front is read as the damage it is
	}
	p.setMark() // what a reopen finds is the log
	if !s.readOnly {
		if err := p.dropSegments(); err != nil {
			return nil, err
		}
	}
	if p.consumers, p.consumerSeqs, err = loadConsumerOffsets(s.fs, filepath.Join(dir, consumersDir)); err != nil {
		if !s.readOnly || !isNotExist(err) {
			return nil, err
		}
		p.consumers = map[string]uint64{}
	}
	p.markLayout(fresh)
	if fresh {
		// Nothing is synced here: a build costs no fsync. The layout —
		// the incarnation file, the new directories — is made durable by
		// the partition's first Sync (syncLayout), before any message
		// could be acknowledged as durable. A crash before that leaves at
		// most a half-built directory, which the next Build starts over.
		if err := writeIncarnation(s.fs, dir, epoch); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// findDeletedTail looks for the index file of a segment whose log is
// gone, above the last segment left: the last segments were deleted (a
// truncation deletes segments only below the start, and never the last
// one). Opening the log without them would hand their offsets out again.
// An index with entries names records up to some offset: the offsets
// from the log's end to just past it become a hole, and the partition is
// fenced for writes (its true end is unknown). A last segment holding
// less than an index interval (4 KiB) of records leaves an empty index,
// which tells nothing: such a deletion is not detected.
func (p *filePartition) findDeletedTail(indexOnly []uint64) error {
	tail := p.tail()
	var end uint64
	var path string
	for _, base := range indexOnly {
		if base <= tail.base {
			continue // a segment below the start, its deletion interrupted
		}
		seg := newSegment(p.dir, base)
		es, _, err := loadIndex(p.fs, seg.indexPath())
		if err != nil {
			return err
		}
		if len(es) == 0 || base > math.MaxUint64-uint64(es[len(es)-1].rel)-1 {
			continue
		}
		if e := base + uint64(es[len(es)-1].rel) + 1; e > end && e > p.next {
			end, path = e, seg.logPath
		}
	}
	if end == 0 {
		return nil
	}
	ce := corruptf(path, 0, "segment file missing: its index names records up to offset %d, the log ends at %d", end-1, p.next)
	p.holes = append(p.holes, hole{from: p.next, to: end, err: ce})
	p.fenced = fmt.Errorf("partition %v: writes refused: its last segments are missing, and the log's end with them: %w", p.ns, ce)
	p.next = end
	return nil
}

// markLayout completes p.layout once the partition's directories exist:
// offsets/ gained consumers/ and groups/; those two are empty, so the
// entry in their parent is all there is to make durable. The directories
// above the partition's own are shared with other partitions: their
// fsyncs are batched (see dirSyncs), so the change is numbered now that
// it is made.
func (p *filePartition) markLayout(fresh bool) {
	p.layout = append(p.layout, filepath.Join(p.dir, "offsets"))
	var shared []string
	for _, d := range p.layout {
		if !within(d, p.dir) {
			shared = append(shared, d)
		}
	}
	if fresh {
		p.layoutGen = p.store.dirs.mark(shared)
	} else {
		p.layoutGen = p.store.dirs.markExisting(shared)
	}
}

// deferredPartition returns the new, empty partition ns at epoch without
// creating anything on disk (see BuildDeferred).
func (s *FileStore) deferredPartition(ns metadata.Namespace, epoch uint64, dir string) *filePartition {
	seg := newSegment(dir, 0)
	seg.maxTSKnown = true
	p := &filePartition{
		store: s, fs: s.fs, ns: ns, epoch: epoch, dir: dir, segs: []*segment{seg},
		lastAT: math.MinInt64, consumers: make(map[string]uint64), deferred: true,
	}
	p.setMark()
	return p
}

// lodgedPartition returns the new, empty partition ns at epoch in dir,
// deferred and lodged, if dir holds files that are not the partition's
// own (its owner's, see Lodge), after removing those that are; ok is
// false if dir holds none of its owner's.
func (s *FileStore) lodgedPartition(ns metadata.Namespace, epoch uint64, dir string) (*filePartition, bool, error) {
	inc, ok, err := s.ownerIncarnation(dir)
	if err != nil && inc != 0 && inc < epoch {
		// Damaged, but an earlier incarnation's: nothing of this one's
		// (cluster seeds 390 and 20325: a dead incarnation's raft log
		// damaged, every build of the next one refused on it, and its
		// group of two voters never elected).
		return nil, false, nil
	}
	if err != nil || !ok || (inc != 0 && inc != epoch) {
		return nil, false, err // none, or another incarnation's: discarded
	}
	if err := removeOwnFiles(s.fs, dir); err != nil {
		return nil, false, err
	}
	p := s.deferredPartition(ns, epoch, dir)
	p.lodged = true
	// Like a reopened partition's: the entries exist, and may come from
	// a process that stopped before making them durable.
	p.setLayout(s.ancestors(dir, false), false)
	return p, true, nil
}

// ownerIncarnation reads the incarnation named by the owner's files in
// dir, a directory with no incarnation file (FileConfig.OwnerIncarnation):
// ok is false if the store has no owner to ask, or dir holds only the
// partition's own files (a half-built directory).
func (s *FileStore) ownerIncarnation(dir string) (inc uint64, ok bool, err error) {
	if s.cfg.OwnerIncarnation == nil {
		return 0, false, nil
	}
	names, err := s.fs.ReadDir(dir)
	if err != nil {
		return 0, false, err
	}
	if !slices.ContainsFunc(names, func(n string) bool { return !ownFile(n) }) {
		return 0, false, nil
	}
	// Through the budget: the owner's reader holds its files open at
	// once (a raft log and its sync mark), and a node restarting with
	// many replicas still deferred asks about each of them; read through
	// the raw filesystem, each read took the store that many descriptors
	// past a budget its idle handles could have made room in.
	inc, err = s.cfg.OwnerIncarnation(s.fs, dir)
	return inc, err == nil, err // inc may name a damaged owner's incarnation
}

// ownFile reports whether name, an entry of a partition's directory, is
// one of the partition's own files (or a temporary file of one): the
// segments' logs and indexes, the offsets directory, the incarnation and
// start records.
func ownFile(name string) bool {
	base := strings.TrimSuffix(strings.TrimPrefix(name, "."), ".tmp")
	switch base {
	case incarnationFile, startFile, "offsets":
		return true
	}
	for _, ext := range []string{indexExt, timeIndexExt} {
		if digits, ok := strings.CutSuffix(name, ext); ok {
			name = digits + logExt
		}
	}
	_, ok := parseSegmentName(name)
	return ok
}

// removeOwnFiles removes the partition's own files from dir (ownFile),
// leaving its owner's.
func removeOwnFiles(fsys vfs.FS, dir string) error {
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, n := range names {
		if ownFile(n) {
			if err := fsys.RemoveAll(filepath.Join(dir, n)); err != nil {
				return err
			}
		}
	}
	return nil
}

// materialize creates the files of a deferred partition (BuildDeferred)
// as a fresh Build would: its directories, the files of its one segment
// and the incarnation file, none of them synced — its layout is pending,
// made durable by its next Sync, as a fresh Build's. The records it holds
// stay behind (wpend) for flushWrites to write. A failure leaves it
// deferred, and the next attempt starts the directory over.
func (p *filePartition) materialize() (err error) {
	if !p.deferred {
		return nil
	}
	if p.broken != nil {
		return p.broken
	}
	s, tail := p.store, p.tail()
	if p.tried {
		if p.lodged {
			err = removeOwnFiles(s.fs, p.dir) // the owner's files stay
		} else {
			err = s.fs.RemoveAll(p.dir)
		}
		if err != nil {
			return err
		}
	}
	p.tried = true
	layout, pending := p.layout, p.layoutPending
	if p.lodged {
		// The directory exists (Lodge, or found at the build holding
		// its owner's files): the new entries are in it, and the
		// directories above it are pending still if the lodging did
		// not sync them.
		if !pending {
			p.layout = nil
		}
		if !slices.Contains(p.layout, p.dir) {
			p.layout = append(slices.Clone(p.layout), p.dir)
		}
	} else {
		p.layout = s.ancestors(p.dir, true)
		if pending {
			// Directories a failed Lodge made exist now, not durable.
			p.layout = unionDirs(layout, p.layout)
		}
	}
	p.layoutPending = true // createSegment leaves the directory's fsync to the layout's
	defer func() {
		if err != nil {
			_ = tail.close()
			p.layout, p.layoutPending = layout, pending
		}
	}()
	for _, sub := range []string{consumersDir, groupsDir} {
		if err := s.fs.MkdirAll(filepath.Join(p.dir, sub), 0o755); err != nil {
			return err
		}
	}
	seg, err := p.createSegment(tail.base)
	if err != nil {
		return err
	}
	tail.log, tail.idx, tail.tidx = seg.log, seg.idx, seg.tidx
	if err := writeIncarnation(s.fs, p.dir, p.epoch); err != nil {
		return err
	}
	p.markLayout(true)
	p.deferred, p.tried = false, false
	return nil
}

// unionDirs returns the directories of a and then those of b that a
// lacks.
func unionDirs(a, b []string) []string {
	out := slices.Clone(a)
	for _, d := range b {
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// within reports whether path is dir or below it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// ancestors lists dir and its ancestors up to Dir, deepest first; with
// stopAtExisting it stops at the first one that exists: after
// MkdirAll(dir), those are the directories whose entries changed.
func (s *FileStore) ancestors(dir string, stopAtExisting bool) []string {
	var out []string
	root := filepath.Clean(s.cfg.Dir)
	for d := dir; ; d = filepath.Dir(d) {
		out = append(out, d)
		if d == root || d == filepath.Dir(d) {
			return out
		}
		if stopAtExisting {
			if _, err := s.fs.Stat(d); err == nil {
				return out
			}
		}
	}
}

// openSealed opens a segment that is no longer written. Unless
// VerifyOnOpen is set, its index is trusted if plausible and if its last
// entry points at the record it names; the scan then only covers the
// records after that entry. An index that fails the checks, is missing or
// is short is rebuilt by a full scan and rewritten. Damage in a sealed
// segment cannot be a torn append, so it is reported, not truncated.
func (s *FileStore) openSealed(seg *segment, buf []byte) ([]byte, []hole, error) {
	seg.log = s.handles.newHandle(seg.logPath, os.O_RDONLY)
	fi, err := seg.log.Stat()
	if err != nil {
		return buf, nil, err
	}
	size := fi.Size()
	es, exact, err := loadIndex(s.fs, seg.indexPath())
	if err != nil {
		return buf, nil, err
	}
	var end int64
	var next uint64
	rewrite, scanned := !exact, false
	if len(es) > 0 && !s.cfg.VerifyOnOpen {
		rewrite = true // unless the checks below pass
		times, timesOK, terr := loadTimeIndex(s.fs, seg.timeIndexPath(), es)
		if terr != nil {
			return buf, nil, terr
		}
		if plausibleIndex(es, size) {
			// A time index that does not match the offset index entry
			// for entry (missing: the segment predates time indexes;
			// torn) is rebuilt when a search first needs it, not here:
			// opening a large log written before time indexes existed
			// must not read all of it.
			if !timesOK {
				times = make([]int64, len(es)) // placeholders, never written
			}
			last := es[len(es)-1]
			seg.index, seg.times, seg.lastIndexed = es, times, int64(last.pos)
			end, next, buf, err = seg.scan(int64(last.pos), seg.base+uint64(last.rel), size, buf, true)
			switch {
			case err == nil && end < size:
				// Zeros before the file's end: scan it all, for records
				// after them (damage) or none (a segment cut short).
			case err == nil && timesOK && seg.scanFirstAT != times[len(times)-1]:
				// The time index's last entry names the wrong time:
				// rebuild both.
			case err == nil:
				rewrite, scanned = !exact, true
				seg.timesUnknown = !timesOK
			case !errors.Is(err, ErrCorrupt):
				return buf, nil, err
			}
		}
	}
	if !scanned { // no usable index, or VerifyOnOpen: scan it all
		seg.index, seg.times, seg.lastIndexed = nil, nil, 0
		var holes []hole
		var stop *CorruptError
		end, next, holes, stop, buf, err = seg.scanHoles(size, buf)
		if err != nil {
			return buf, nil, err
		}
		if len(holes) > 0 || stop != nil {
			// Damage a crash cannot cause (the segment was fsynced before
			// the next one existed): the records around it are served,
			// the damaged offsets are holes, and so are those from the
			// last whole record to the next segment (the caller's). The
			// files are left as they are.
			seg.damaged, seg.endDamage = stop, stop
			seg.size, seg.next = end, next
			if len(holes) > 0 {
				seg.damaged = holes[0].err
				seg.size = size // records after the holes are read
			}
			seg.synced = true
			return buf, holes, nil
		}
		seg.maxTSKnown = true
		rewrite = rewrite || !slices.Equal(seg.index, es)
		if !rewrite {
			current, err := seg.timeIndexCurrent(s.fs)
			if err != nil {
				return buf, nil, err
			}
			rewrite = !current
		}
	}
	seg.size, seg.next = end, next
	seg.synced = true
	if s.readOnly {
		return buf, nil, nil // the index in memory serves reads; the file stays as found
	}
	if rewrite || len(seg.index) != len(es) {
		return buf, nil, seg.writeIndexFile(s.fs, nil)
	}
	seg.idxPersisted = len(seg.index)
	return buf, nil, nil
}

// openTail opens the segment appends go to. Every record is verified.
// What follows the last whole record is a torn final write if no record
// can be found anywhere after it (resync): it is truncated back to the
// last whole record (and fsynced), and so is a zero-filled tail
// (re-reserving the preallocation). A bad record (or a run of zeros)
// followed by a valid record is damage, not a torn write: the records
// after it were written, and may have been acknowledged, after it. The
// file is then left as it is, the damaged offsets are returned as holes
// (the records after each hole are read on, and the tail ends after the
// last whole record, so no offset is ever handed out twice), and the
// caller fences the partition for writes. The index is rebuilt from the
// scan and rewritten if the file differs (not for a damaged tail, whose
// files recovery does not touch).
func (s *FileStore) openTail(seg *segment, buf []byte) ([]byte, []hole, error) {
	seg.log = s.handles.newHandle(seg.logPath, os.O_RDWR)
	f := seg.log
	fi, err := f.Stat()
	if err != nil {
		return buf, nil, err
	}
	size := fi.Size()
	// Nothing whole after the last bad record: it is truncated below only
	// if it is an incomplete final write; if it was written whole, its
	// offset is a hole like any damage (the log's end is past it).
	end, next, holes, buf, err := seg.scanTail(size, buf)
	if err != nil {
		return buf, nil, err
	}
	seg.size, seg.next, seg.maxTSKnown = end, next, true
	if len(holes) > 0 {
		seg.damaged = holes[0].err
		return buf, holes, nil
	}
	if end < size {
		if err := f.Truncate(end); err != nil {
			return buf, nil, err
		}
		if s.cfg.Preallocate {
			if err := preallocate(f, s.cfg.SegmentSize); err != nil {
				return buf, nil, err
			}
		}
		if err := f.Sync(); err != nil {
			return buf, nil, err
		}
		seg.synced = true
	}
	want := appendIndexEntries(nil, seg.index)
	have, err := vfs.ReadFile(s.fs, seg.indexPath())
	if err != nil && !isNotExist(err) {
		return buf, nil, err
	}
	if err != nil || string(have) != string(want) {
		return buf, nil, seg.writeIndexFile(s.fs, s.handles)
	}
	if current, err := seg.timeIndexCurrent(s.fs); err != nil || !current {
		if err != nil {
			return buf, nil, err
		}
		return buf, nil, seg.writeIndexFile(s.fs, s.handles)
	}
	// Opened when the next index entry is written, not now: an idle
	// partition holds no descriptor.
	seg.idx = s.handles.newHandle(seg.indexPath(), os.O_RDWR)
	seg.tidx = s.handles.newHandle(seg.timeIndexPath(), os.O_RDWR)
	seg.idxPersisted = len(seg.index)
	return buf, nil, nil
}

// preallocate reserves size bytes for f, treating a filesystem that cannot
// (errors.ErrUnsupported) as success: preallocation is an optimisation.
// Any other error (ENOSPC) is returned.
func preallocate(f interface{ Preallocate(off, n int64) error }, size int64) error {
	if err := f.Preallocate(0, size); err != nil && !vfs.IsUnsupported(err) {
		return err
	}
	return nil
}

const (
	consumersDir = "offsets/consumers"
	groupsDir    = "offsets/groups"
)
