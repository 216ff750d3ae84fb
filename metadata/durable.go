package metadata

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/parkway-io/parkway/internal/wal"
	"github.com/parkway-io/parkway/vfs"
)

// DefaultSnapshotEvery is the default number of logged commands between
// two snapshots.
const DefaultSnapshotEvery = 1024

var (
	// ErrLogBroken reports a Durable that refuses commands because an
	// earlier write to its log or snapshot failed: what reached the disk
	// is unknown, and nothing may be appended behind an unknown tail.
	// Reopening (OpenDurable) recovers what is durable.
	ErrLogBroken = errors.New("parkway: metadata log broken")
	// ErrCorruptLog reports persisted metadata that OpenDurable cannot
	// load without losing acknowledged commands: a log damaged in the
	// middle, a gap between snapshot and log, a record that does not
	// decode.
	ErrCorruptLog = errors.New("parkway: corrupt metadata log")
	// ErrDurableClosed reports an Apply on a closed Durable.
	ErrDurableClosed = errors.New("parkway: metadata log closed")
)

// DurableOptions configures a Durable.
type DurableOptions struct {
	// SnapshotEvery is the number of logged commands after which Apply
	// writes a snapshot and starts a new log; 0 means
	// DefaultSnapshotEvery. Failed commands count: they are logged too.
	SnapshotEvery int
	// Syncs, when set, observes every fsync of the log in seconds.
	Syncs prometheus.Observer
}

// Durable is a Store persisted in a directory, the way a consensus log
// would persist it: every command is appended to a write-ahead log and
// fsynced before it is applied, and every SnapshotEvery commands the whole
// state is written to a snapshot and the log starts afresh.
//
// # Files
//
//	<dir>/snapshot-<revision, 20 digits>   the newest snapshot (see below)
//	<dir>/wal-<first index, 20 digits>     the log after it (package wal)
//
// A log record is a command (EncodeCommand's bytes) or a carried record:
// a command together with the first messages of a partition it creates
// (ApplyCarrying), or such messages alone, logged again after a snapshot
// because they are still pending (see Carried). Records are numbered from
// 1 in log order (their index); a snapshot file records the index of the
// last record it covers.
//
// A snapshot is taken in this order: the next log is created (synced,
// directory synced), every pending carried batch is appended to it and
// synced; then the snapshot is written with vfs.WriteFileAtomic; only then
// are older snapshots and logs removed. A crash at any point therefore
// leaves a snapshot whose logs continue it and hold every pending carried
// batch, possibly alongside files that OpenDurable skips: until the new
// snapshot is durable, the older one's logs hold the batches and chain on
// to the new log, which starts right after their last record.
//
// A snapshot file is: "PWMS", a version byte (1), the index (8 bytes,
// little endian), EncodeSnapshot's bytes, and a CRC-32C (4 bytes, little
// endian) of everything before it.
//
// # Recovery
//
// OpenDurable restores the newest snapshot that decodes and validates
// (falling back to older ones), then replays the log records after its
// index, ignoring the commands' errors: a command that failed when it was
// first applied fails identically on replay. A carried record's command
// is replayed like any other, and its batch is pending again (Carried);
// a batch found twice (logged again by a snapshot whose file a crash
// prevented) is pending once, at its first position. The log's torn
// tail, if any, is truncated (package wal). Replay uses the Config given
// to OpenDurable; partition owners are recomputed with it, as in Restore.
//
// Only Apply (ApplyLogged, ApplyCarrying) may change the store: a command
// applied directly to Store() is not logged and is lost on restart.
//
// A Durable is safe for concurrent use; Applies are serialised.
type Durable struct {
	fs    vfs.FS
	dir   string
	every uint64
	store *Store

	mu        sync.Mutex
	log       *wal.Log
	syncs     prometheus.Observer // DurableOptions.Syncs, set on each log
	applied   uint64              // index of the last log record
	snapIndex uint64              // index covered by the newest durable snapshot
	// sinceSnap counts the commands logged since the newest snapshot:
	// SnapshotEvery counts commands, not the carried batches a snapshot
	// logs again (with many pending, those would trigger a snapshot
	// after every command).
	sinceSnap uint64
	broken    error
	closed    bool
	// readOnly is set by ReadDurable: load changes nothing and records
	// what it found here.
	readOnly *DurableFiles

	// carried are the pending carried batches (see Carried), under a
	// lock of their own.
	carried carriedSet
}

const (
	snapshotPrefix = "snapshot-"
	walPrefix      = "wal-"
	snapshotMagic  = "PWMS"
	snapshotFileV1 = 1
)

// OpenDurable opens (creating it if needed) the persisted metadata in dir
// and loads it into a new store. See Durable.
func OpenDurable(fs vfs.FS, dir string, cfg Config, opts DurableOptions) (*Durable, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.SnapshotEvery < 0 {
		return nil, fmt.Errorf("parkway: DurableOptions.SnapshotEvery is %d, must be >= 0", opts.SnapshotEvery)
	}
	every := uint64(opts.SnapshotEvery)
	if every == 0 {
		every = DefaultSnapshotEvery
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("parkway: metadata dir: %w", err)
	}
	if err := fs.SyncDir(filepath.Dir(filepath.Clean(dir))); err != nil {
		return nil, fmt.Errorf("parkway: metadata dir: %w", err)
	}
	names, err := fs.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("parkway: metadata dir: %w", err)
	}
	var snaps, wals []uint64
	for _, name := range names {
		if n, ok := parseName(name, snapshotPrefix); ok {
			snaps = append(snaps, n)
		} else if n, ok := parseName(name, walPrefix); ok {
			wals = append(wals, n)
		} else if strings.HasPrefix(name, "."+snapshotPrefix) && strings.HasSuffix(name, ".tmp") {
			// A crashed WriteFileAtomic's leftover: never needed.
			_ = fs.Remove(filepath.Join(dir, name))
		}
	}
	d := &Durable{fs: fs, dir: dir, every: every, syncs: opts.Syncs}
	if err := d.load(cfg, snaps, wals); err != nil {
		return nil, err
	}
	return d, nil
}

// DurableFiles describes what ReadDurable found in a metadata directory.
type DurableFiles struct {
	// Snapshot is the snapshot the store was restored from ("" if none)
	// and SnapshotIndex the index of the last command it covers.
	Snapshot      string
	SnapshotIndex uint64
	// Skipped are snapshots that did not decode or validate, newest
	// first: OpenDurable falls back past them silently, so they are
	// reported here.
	Skipped []SkippedSnapshot
	// Logs are the log files replayed, in order, and Applied the index of
	// the last record replayed.
	Logs    []string
	Applied uint64
	// Carried are the carried batches the replayed logs hold, each once,
	// in log order: what Durable.Carried lists after OpenDurable.
	Carried []Carried
	// Torn are the logs with bytes after their last whole record (what
	// OpenDurable truncates as a torn write): path, offset, size.
	Torn []TornTail
}

// SkippedSnapshot is a snapshot file recovery skips, and why.
type SkippedSnapshot struct {
	Path string
	Err  error
}

// TornTail is a log's tail that recovery truncates.
type TornTail struct {
	Path         string
	Offset, Size int64
}

// ReadDurable loads the persisted metadata in dir as OpenDurable would —
// the same snapshot choice, the same replay, the same refusals — without
// changing anything: no file is created, truncated, removed or synced (a
// missing directory is an error, a torn log tail is left in place and
// reported in DurableFiles.Torn). It is how offline tools read a node's
// metadata; the store it returns is not backed by a log.
func ReadDurable(fs vfs.FS, dir string, cfg Config) (*Store, DurableFiles, error) {
	if err := cfg.Validate(); err != nil {
		return nil, DurableFiles{}, err
	}
	names, err := fs.ReadDir(dir)
	if err != nil {
		return nil, DurableFiles{}, fmt.Errorf("parkway: metadata dir: %w", err)
	}
	var snaps, wals []uint64
	for _, name := range names {
		if n, ok := parseName(name, snapshotPrefix); ok {
			snaps = append(snaps, n)
		} else if n, ok := parseName(name, walPrefix); ok {
			wals = append(wals, n)
		}
	}
	d := &Durable{fs: fs, dir: dir, readOnly: &DurableFiles{}}
	err = d.load(cfg, snaps, wals)
	return d.store, *d.readOnly, err
}

// load restores the newest usable snapshot and replays the log after it.
func (d *Durable) load(cfg Config, snaps, wals []uint64) error {
	slices.Sort(snaps)
	slices.Sort(wals)
	var base uint64 // index covered by the snapshot
	var skipped []error
	for _, rev := range slices.Backward(snaps) {
		path := filepath.Join(d.dir, snapshotName(rev))
		b, err := vfs.ReadFile(d.fs, path)
		if err != nil {
			return fmt.Errorf("parkway: read metadata snapshot: %w", err)
		}
		index, snap, err := decodeSnapshotFile(b)
		if err == nil && snap.Revision != rev {
			err = fmt.Errorf("%w: holds revision %d", ErrInvalidSnapshot, snap.Revision)
		}
		var s *Store
		if err == nil {
			s, err = Restore(cfg, snap)
		}
		if err != nil {
			if !errors.Is(err, ErrInvalidEncoding) && !errors.Is(err, ErrInvalidSnapshot) {
				return fmt.Errorf("parkway: restore %s: %w", path, err)
			}
			skipped = append(skipped, fmt.Errorf("%s: %w", path, err))
			if d.readOnly != nil {
				d.readOnly.Skipped = append(d.readOnly.Skipped, SkippedSnapshot{Path: path, Err: err})
			}
			continue
		}
		d.store, base = s, index
		if d.readOnly != nil {
			d.readOnly.Snapshot, d.readOnly.SnapshotIndex = path, index
		}
		break
	}

	if d.store == nil {
		s, err := NewStore(cfg)
		if err != nil {
			return err
		}
		d.store = s
	}
	corrupt := func(format string, args ...any) error {
		// %w keeps a *wal.CorruptError (the file and byte) reachable.
		err := fmt.Errorf("%w: %s: "+format, append([]any{ErrCorruptLog, d.dir}, args...)...)
		if d.readOnly != nil {
			return err // the skipped snapshots are in DurableFiles
		}
		return errors.Join(append([]error{err}, skipped...)...)
	}

	// Logs wholly covered by the snapshot (the next log starts at or
	// before base+1) are not needed; the rest must chain without gaps.
	next := base + 1    // index of the next record to replay
	var commands uint64 // replayed: they count towards the next snapshot
	for len(wals) > 1 && wals[1] <= next {
		wals = wals[1:]
	}
	if len(wals) > 0 && wals[0] > next {
		return corrupt("the log starts at index %d, the snapshot covers up to %d", wals[0], base)
	}
	for i, first := range wals {
		if first != next && i > 0 {
			return corrupt("log %s starts at index %d, want %d", walName(first), first, next)
		}
		open := wal.Open
		if d.readOnly != nil {
			open = wal.OpenReadOnly
		}
		l, err := open(d.fs, filepath.Join(d.dir, walName(first)), wal.Options{FirstIndex: first})
		if err != nil {
			if errors.Is(err, wal.ErrCorrupt) {
				return corrupt("%w", err)
			}
			return fmt.Errorf("parkway: open metadata log: %w", err)
		}
		err = l.ReplayAt(func(index uint64, off int64, data []byte) error {
			if index < next {
				return nil // covered by the snapshot
			}
			cmd, carried, err := decodeLogRecord(data)
			if err != nil {
				return corrupt("%w", &wal.CorruptError{Path: l.Path(), Offset: off, Err: fmt.Errorf("record %d: %w", index, err)})
			}
			if cmd != nil {
				d.store.Apply(cmd) //nolint:errcheck // it failed the first time too
				commands++
			}
			if carried != nil {
				d.carried.add(*carried)
			}
			next = index + 1
			return nil
		})
		if err != nil {
			l.Close()
			if errors.Is(err, wal.ErrCorrupt) {
				return corrupt("%w", err)
			}
			return err
		}
		if d.readOnly != nil {
			d.readOnly.Logs = append(d.readOnly.Logs, l.Path())
			if off, n := l.TornTail(); n > 0 {
				d.readOnly.Torn = append(d.readOnly.Torn, TornTail{Path: l.Path(), Offset: off, Size: n})
			}
			l.Close()
			continue
		}
		if i == len(wals)-1 && l.NextIndex() == next {
			d.log = l // append behind the last record
			l.ObserveSyncs(d.syncs)
		} else {
			l.Close()
		}
	}
	d.applied, d.snapIndex, d.sinceSnap = next-1, base, commands
	if d.readOnly != nil {
		d.readOnly.Applied = d.applied
		d.readOnly.Carried = d.carried.list()
		return nil
	}
	if d.log == nil {
		// No log, or the last one ends before the snapshot (it covered
		// it): start the one after the snapshot.
		l, err := wal.Create(d.fs, filepath.Join(d.dir, walName(next)), wal.Options{FirstIndex: next})
		if err != nil {
			return fmt.Errorf("parkway: create metadata log: %w", err)
		}
		d.log = l
		l.ObserveSyncs(d.syncs)
	}
	// A previous run may have created files (a log, a snapshot) and
	// failed or crashed before syncing the directory: make every entry
	// this run builds on durable before appending behind it.
	if err := d.fs.SyncDir(d.dir); err != nil {
		d.log.Close()
		return fmt.Errorf("parkway: metadata dir: %w", err)
	}
	return nil
}

// Store returns the store. Read it freely; change it only through Apply.
func (d *Durable) Store() *Store { return d.store }

// Apply logs the command, syncs the log, then applies it to the store, and
// returns what the store's Apply returned: a command is logged whether or
// not it then fails, exactly as a consensus log would hold it.
//
// If the log append or sync fails, Apply returns that error, the store is
// unchanged, and the Durable is broken: every later Apply fails with
// ErrLogBroken until it is reopened. After every SnapshotEvery logged
// commands Apply also writes a snapshot and starts a new log; if that fails,
// the command itself has still succeeded (it is durable and applied) and its
// result is returned, but the Durable is broken likewise (see Err).
//
// While the command is logged and synced, what it will create is announced
// (Store.Announce), so the partitions of a new topic can be built during
// the sync; the announcement is withdrawn when Apply returns.
//
// Commands that fail whatever the state (nil, foreign, or with a name longer
// than MaxNameLength) go straight to the store, unlogged: they change
// nothing.
func (d *Durable) Apply(cmd Command) (Result, error) {
	return d.ApplyLogged(cmd, nil)
}

// ApplyLogged is Apply, and calls logged, when it is not nil, with the
// partitions the command creates (as Store.Announce announces them) once
// the command is written to the log and before the log is synced: work
// that waits for the commit anyway can start while the sync runs. The
// barrier's own case uses it (a topic created and produced to at once,
// DESIGN behaviour 32): the produce is sent to the new partition's shard
// from logged, so its journal write and the log's sync overlap. logged
// runs under the Durable's lock and must not block; it is not called for
// a command that creates no partition, or whose write failed.
func (d *Durable) ApplyLogged(cmd Command, logged func([]AnnouncedPartition)) (Result, error) {
	var cb func([]AnnouncedPartition, bool)
	if logged != nil {
		cb = func(ann []AnnouncedPartition, _ bool) { logged(ann) }
	}
	res, _, err := d.apply(cmd, 0, nil, cb)
	return res, err
}

// ApplyCarrying is ApplyLogged, and logs records (a new partition's first
// messages, see Carried) in the same record as the command when the
// command creates partition number part: the one fsync that commits the
// command makes them durable too. The batch is Carried{NS, Epoch} of that
// partition as announced (its CreatedRevision is the epoch), and it is
// pending from the moment it is written to the log — before logged is
// called, so a Settle from the partition's owner is never lost, however
// early it comes — until Settle; if the log's sync fails it is dropped
// with the command. records are copied.
//
// The bool reports whether the records were carried, and logged is told
// the same when it is called (a produce sent from it may rely on the
// records only then). They are not carried (and ApplyCarrying is exactly
// ApplyLogged) when the command creates no partition part, when it goes
// unlogged or its write fails, and when records is empty or longer than
// MaxCarriedBytes.
func (d *Durable) ApplyCarrying(cmd Command, part uint32, records []byte, logged func(ann []AnnouncedPartition, carried bool)) (Result, bool, error) {
	return d.apply(cmd, part, records, logged)
}

// apply is ApplyCarrying; ApplyLogged passes no records.
func (d *Durable) apply(cmd Command, part uint32, records []byte, logged func([]AnnouncedPartition, bool)) (Result, bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.closed:
		return Result{}, false, ErrDurableClosed
	case d.broken != nil:
		return Result{}, false, fmt.Errorf("%w: %w", ErrLogBroken, d.broken)
	}
	c, ok := deref(cmd)
	if !ok || hasLongName(c) {
		res, err := d.store.Apply(cmd)
		return res, false, err
	}
	b, err := EncodeCommand(c)
	if err != nil {
		return Result{}, false, err
	}
	// What the command will create is announced before it is logged, so
	// the partitions can be built while the log syncs (see Announce); it
	// is withdrawn once the command is applied or has failed.
	ann, withdraw := d.store.announce(c)
	defer withdraw()
	var carried *Carried
	if len(records) > 0 && len(records) <= MaxCarriedBytes {
		// The announcement is what commits: the command is applied
		// under d.mu, right behind its own forecast.
		if i := slices.IndexFunc(ann, func(p AnnouncedPartition) bool { return p.Partition == part }); i >= 0 {
			carried = &Carried{NS: ann[i].NS, Epoch: ann[i].CreatedRevision, Records: records}
			b = appendCarriedRecord(make([]byte, 0, len(b)+len(records)+32), b, *carried)
			// The record's own tail is the copy the pending set keeps:
			// the log copies what it appends, and b is not used again.
			carried.Records = b[len(b)-len(records) : len(b) : len(b)]
		}
	}
	if _, err := d.log.Append(b); err != nil {
		d.broken = err
		return Result{}, false, fmt.Errorf("parkway: metadata log: %w", err)
	}
	if carried != nil {
		// Pending before logged hands the records on: the partition's
		// owner may make them durable, and settle, before the sync
		// below returns.
		d.carried.add(*carried)
	}
	if logged != nil && len(ann) > 0 {
		logged(ann, carried != nil)
	}
	if err := d.log.Sync(); err != nil {
		d.broken = err
		if carried != nil {
			d.carried.remove(carried.NS, carried.Epoch)
		}
		return Result{}, false, fmt.Errorf("parkway: metadata log: %w", err)
	}
	d.applied++
	d.sinceSnap++
	res, applyErr := d.store.Apply(c)
	if d.sinceSnap >= d.every {
		if err := d.snapshot(); err != nil {
			d.broken = fmt.Errorf("parkway: metadata snapshot: %w", err)
		}
	}
	return res, carried != nil, applyErr
}

// Err returns why the Durable is broken, or nil.
func (d *Durable) Err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.broken
}

// Close closes the log. The store stays readable; Apply fails with
// ErrDurableClosed. Closing twice returns ErrDurableClosed.
func (d *Durable) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrDurableClosed
	}
	d.closed = true
	return d.log.Close()
}

// snapshot writes a snapshot at d.applied, starts the log after it and
// removes the files it supersedes. d.mu must be held.
//
// The order keeps every pending carried batch in the log: (1) the new log
// is created (synced, its directory entry synced) and every batch pending
// now is appended to it, as a carried record without a command, and
// synced; (2) the snapshot is written; (3) the Durable switches to the new
// log and the older files are removed. A crash between (1) and (2) leaves
// the old snapshot and logs, which hold every pending batch, and the new
// log, which starts right after the old one's last record, so the logs
// still chain; once the snapshot exists the new log holds them.
func (d *Durable) snapshot() error {
	snap := d.store.Export()
	index := d.applied
	b, err := encodeSnapshotFile(index, snap)
	if err != nil {
		return err
	}
	next := index + 1
	l, err := wal.Create(d.fs, filepath.Join(d.dir, walName(next)), wal.Options{FirstIndex: next})
	if err != nil {
		return err
	}
	var recs [][]byte
	for _, c := range d.carried.list() {
		if info, ok := d.store.Partition(c.NS); !ok || info.CreatedRevision != c.Epoch {
			// Its incarnation is gone (its topic deleted, or its
			// command failed): there is no partition to give the
			// messages back to, and nothing to carry further.
			d.carried.remove(c.NS, c.Epoch)
			continue
		}
		recs = append(recs, appendCarriedRecord(nil, nil, c))
	}
	if len(recs) > 0 {
		if _, err := l.AppendBatch(recs...); err != nil {
			l.Close()
			return err
		}
		if err := l.Sync(); err != nil {
			l.Close()
			return err
		}
	}
	name := snapshotName(snap.Revision)
	if err := vfs.WriteFileAtomic(d.fs, filepath.Join(d.dir, name), b); err != nil {
		l.Close()
		return err
	}
	old := d.log
	// The batches logged again took the new log's first indexes; they
	// are not commands, so they do not count towards the next snapshot.
	d.log, d.snapIndex, d.applied, d.sinceSnap = l, index, l.NextIndex()-1, 0
	l.ObserveSyncs(d.syncs)
	_ = old.Close()
	// Clean up, best effort: leftovers are skipped on open and removed
	// after the next snapshot.
	names, err := d.fs.ReadDir(d.dir)
	if err != nil {
		return nil
	}
	removed := false
	for _, n := range names {
		_, isSnap := parseName(n, snapshotPrefix)
		_, isWAL := parseName(n, walPrefix)
		if (isSnap && n != name) || (isWAL && n != walName(next)) {
			if d.fs.Remove(filepath.Join(d.dir, n)) == nil {
				removed = true
			}
		}
	}
	if removed {
		_ = d.fs.SyncDir(d.dir)
	}
	return nil
}

func hasLongName(c Command) bool {
	switch c := c.(type) {
	case CreateStream:
		return len(c.Name) > MaxNameLength
	case CreateTopic:
		return len(c.Name) > MaxNameLength
	}
	return false
}

func snapshotName(rev uint64) string { return fmt.Sprintf("%s%020d", snapshotPrefix, rev) }
func walName(first uint64) string    { return fmt.Sprintf("%s%020d", walPrefix, first) }

// parseName parses prefix followed by exactly 20 decimal digits.
func parseName(name, prefix string) (uint64, bool) {
	digits, ok := strings.CutPrefix(name, prefix)
	if !ok || len(digits) != 20 {
		return 0, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	return n, err == nil
}

func encodeSnapshotFile(index uint64, snap StoreSnapshot) ([]byte, error) {
	body, err := EncodeSnapshot(snap)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, len(snapshotMagic)+1+8+len(body)+4)
	b = append(b, snapshotMagic...)
	b = append(b, snapshotFileV1)
	b = binary.LittleEndian.AppendUint64(b, index)
	b = append(b, body...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli)), nil
}

func decodeSnapshotFile(b []byte) (uint64, StoreSnapshot, error) {
	const header = len(snapshotMagic) + 1 + 8
	bad := func(off int, reason string) error {
		return &DecodeError{What: "snapshot file", Offset: off, Reason: reason}
	}
	if len(b) < header+4 {
		return 0, StoreSnapshot{}, bad(len(b), "too short")
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return 0, StoreSnapshot{}, bad(len(body), "checksum mismatch")
	}
	if string(b[:len(snapshotMagic)]) != snapshotMagic {
		return 0, StoreSnapshot{}, bad(0, "bad magic")
	}
	if v := b[len(snapshotMagic)]; v != snapshotFileV1 {
		return 0, StoreSnapshot{}, bad(len(snapshotMagic), "unknown version "+strconv.Itoa(int(v)))
	}
	index := binary.LittleEndian.Uint64(b[len(snapshotMagic)+1:])
	snap, err := DecodeSnapshot(body[header:])
	if err != nil {
		return 0, StoreSnapshot{}, err
	}
	return index, snap, nil
}
