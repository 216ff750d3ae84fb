package partition

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parkway-io/parkway/internal/syncmark"
	"github.com/parkway-io/parkway/vfs"
)

// The journal: group commit across the partitions, and the shards, of a
// FileStore.
//
// Making a commit group durable partition by partition costs one fsync per
// dirty partition, and the filesystem folds concurrent fsyncs of different
// files into fewer journal commits only so far. The store's journal makes
// a group's appends durable with one write and one fdatasync of one file:
// the group's records of every partition, each entry carrying the
// namespace, the incarnation (epoch) and the first offset, go into one
// frame of the journal file. The partitions' own files are written behind
// (Append keeps up to writeBehind bytes of a journaled partition's records
// in memory and writes them a page at a time, or before a read or a sync)
// and synced lazily: at a checkpoint (when the handle holds records of too
// many partitions whose own files hold unsynced writes, each pinning its
// tail's descriptor (see handles.go), or of too many partitions in all, or
// records in a journal file that is no longer the current one), by any
// direct Sync, and at Close. Records written behind pin nothing until they
// are written, so with produces spread over thousands of partitions a
// checkpoint comes after many appends to each, and its fsyncs are shared
// among them.
//
// One journal per store, shared by its shards. Each shard commits through
// its own Journal (NewJournal): a handle that decides which of the shard's
// partitions have records to journal and encodes their entries on the
// shard's goroutine. The handles hand their entries to the store's one
// journal log (journalLog), which writes whatever every handle has queued
// as one frame and makes it durable with one fdatasync: a node whose
// shards commit at the same time pays one fdatasync for all of them, not
// one per shard. The first handle to arrive writes (the leader); handles
// arriving while it writes queue and are written together by the next
// leader, one of them, when the write in flight returns — so the group of
// the next write grows while a write is in flight. Before writing, a
// leader waits briefly for the other shards that are forming a group
// (they have appended records to journaled partitions since their last
// Commit) and, while the shards' producers overlap, for those of the
// last write (see linger), for at most a quarter of the last fdatasync's
// duration: a group that just misses a write waits for a whole one.
//
// Where it lives. Journal files are the store's, in Dir/journal/, beside
// Dir/streams/ and never under it: List, orphan removal, Build and Remove
// walk and delete partition directories only, so a delete, a recreate or
// an orphan sweep never touches a journal, and a journal never keeps a
// partition directory alive. The journal is replayed by NewFileStore,
// before the store lists or builds anything (replayJournals): every
// record whose partition directory still holds the same incarnation and
// lacks the record's offsets is appended to it, the partitions are
// synced, and the journal files are removed. So the rest of the node —
// the orphan sweep at start, the reconcilers' builds of the current
// incarnations, the descriptor budget — sees plain partition directories,
// as without a journal; records of a deleted incarnation (no directory,
// or a directory of another epoch) are skipped, and the shard count may
// change between runs. The journal file's descriptor is opened through
// the store's budget and counts in FileConfig.MaxOpenFiles: one per store.
//
// Which partitions it covers. A partition joins a handle at a Commit
// once everything it holds is durable in its own files and its layout is
// (a new partition's first Commit, and a reopened partition's, fsync it
// directly, concurrently with the group's journal write); from then on
// Append keeps a copy of the records it writes (the stash), and the next
// Commit moves the stash into the journal. A direct Sync leaves the
// journal (the partition's files hold everything); a stash past maxStash
// is dropped and the partition synced directly at its next Commit, so a
// partition that stops committing (its topic left FsyncAlways) keeps no
// growing copy.
//
// Checkpoints. A handle checkpoints — syncs the own files of its
// partitions with records in the journal, on its shard's goroutine, the
// only one that may touch them — when it holds too many such partitions
// (each pins its tail's descriptor, see handles.go), and when a file
// holding their records is no longer the current one. The log starts a
// new file when the current one reaches journalFileSize (replay reads
// about that much per file) or after a failed write, and then tells every
// handle (Due): a shard that has stopped committing checkpoints on that
// signal, so an idle shard does not keep old files alive. A file is
// removed once no handle has a partition that needs it.
//
// Failures. A failed write or fdatasync of the journal fails every
// journaled partition of the write, whichever shard's (the callers fence
// them, as after a failed fsync), and abandons the file: the next write
// goes to a new one. Before it is abandoned the file is truncated to
// where the failed write began and synced, and each failed partition
// truncates its own files back to its last commit point (takeBack), so
// what the failed commit carried is in no log (ErrRolledBack; see
// Commit). Files are removed only once every partition with
// records in them has synced its own files; a partition closed without
// that (its fsync failed) keeps them until the next open, whose replay
// restores from them what it can, and a rebuild of its incarnation in the
// same process applies them again (reapplyLost).

const (
	journalDir = "journal"
	journalExt = ".journal"
	// journalFileSize is the default FileConfig.JournalFileSize.
	journalFileSize = 64 << 20
	// maxStash bounds the records a partition keeps for its next Commit.
	// The journal saves a partition its own fdatasync by writing its
	// records a second time, into the shared file: worth it for the few
	// records of many partitions, not for a partition that writes this
	// much between two commits, where the second write and the copy into
	// the stash cost more than the fdatasync saved (a 64 KiB producer
	// under FsyncAlways spent 47 % of its CPU copying into a stash that
	// grew to 16 MiB, the bound before, and was then dropped).
	maxStash = 256 << 10
	// maxJournalParts caps the partitions of one handle with records in
	// the journal whose own files hold unsynced writes. Each pins its
	// tail's descriptor, so a handle allows at most an eighth of the
	// store's descriptor budget of them (several shards share the
	// budget). A member whose records are all still unwritten (written
	// behind, see writeBehind) pins nothing and counts only towards
	// maxJournalMembers.
	maxJournalParts = 4096
	// maxJournalMembers caps all the partitions with records in a journal
	// whose own files lack them. Each costs one fsync at the checkpoint,
	// so the more a journal allows, the more appends a partition's lazy
	// fsync covers when produces are spread over many partitions; the cap
	// bounds the write-behind memory (writeBehind each) and the length of
	// a checkpoint, which the journal's owner waits for.
	maxJournalMembers = 8192
	// checkpointFanout bounds the partition fsyncs a checkpoint runs at
	// once.
	checkpointFanout = 16
	// journalZeroChunk is how far ahead of its frames a journal file is
	// written with zeros (see journalLog.append), journalZeroWrite the
	// size of each write of zeros.
	journalZeroChunk = 1 << 20
	journalZeroWrite = 256 << 10
	// lingerShare is the share of the last fdatasync's duration a leader
	// waits, at most, for other shards forming a group.
	lingerShare = 4
	// soloRun is how many writes in a row, each carrying one handle whose
	// leader found no write in flight, make a leader stop lingering for
	// the handles of the last write (see linger).
	soloRun = 2
)

// journalLog is a store's journal: one sequence of files, written by the
// store's Journals (see the top of this file). Its queue and file list
// are under mu; the open file and the write buffer belong to the leader,
// the one handle with writing set, and to the last Close.
type journalLog struct {
	store    *FileStore
	serial   bool
	fileSize int64

	mu      sync.Mutex
	queue   []*journalWrite
	spare   []*journalWrite
	writing bool
	// handles are the open Journals.
	handles []*Journal
	// files are the journal's files on disk, ascending; pinLo..pinHi are
	// kept until the next open: a partition was closed with records in
	// them that its own files may lack.
	files        []uint64
	pinLo, pinHi uint64
	// cur is the current file's number (the last one created).
	cur atomic.Uint64
	// gen counts writes; arrived is signalled when a handle queues while
	// a write is in flight or a leader lingers (see linger).
	gen     uint64
	arrived chan struct{}
	timer   *time.Timer // the lingering leader's
	// solo counts the last writes in a row, up to soloRun, that carried
	// one handle and whose leader found no write in flight: the evidence
	// that the handles' producers take turns rather than overlap (see
	// linger).
	solo int

	f    vfs.File // the current file, nil between files
	seq  uint64   // its number
	size int64    // of its frames
	// zeroed is how far the file is written with zeros or frames (see
	// append).
	zeroed int64
	fresh  bool // its directory entry is not durable yet
	// unsynced: the current file holds frames written without an
	// fdatasync (staged) that no fdatasync has covered since; a frame
	// written now is uncertain (see journal_codec.go).
	unsynced bool
	// from is the file's size when the write in progress began, and
	// wrote whether it has written frame bytes since (see write).
	from  int64
	wrote bool
	buf   []byte
	zeros []byte // journalZeroWrite zeros, for zeroFill
	// lastSync is how long the last fdatasync took, in nanoseconds.
	lastSync atomic.Int64

	// The synced-end mark (journal_mark.go), under markMu: the mark
	// file's writer (open once written in this process), the synced end
	// of each journal file it records, and whether they changed since the
	// last slot was written.
	markMu    sync.Mutex
	mark      *syncmark.File[journalMarkSlot]
	ends      map[uint64]int64
	markDirty bool
	markFiles []journalEnd // scratch of writeMark
}

// journalWrite is one handle's part of a write: its entries, in chunks
// of at most maxJournalFrame bytes, and the outcome.
type journalWrite struct {
	h      *Journal
	chunks [][]byte
	// fps are the partitions the entries are of: a successful write
	// registers them with h (parts) before any other write can start a
	// new file, so no prune misses them.
	fps []*filePartition
	seq uint64 // the file the entries went to
	// staged: written for Journal.Stage, which needs no fdatasync.
	staged bool
	err    error
	// gone: err is set and the write left nothing of its frames in the
	// journal that a replay could apply (see journalLog.write).
	gone bool
	// wake tells a queued handle that a leader wrote its entries (false)
	// or that it leads the next write (true).
	wake chan bool
}

// journal returns the store's journal log, creating it on first use.
func (s *FileStore) journal() *journalLog {
	s.journalOnce.Do(func() {
		size := s.cfg.JournalFileSize
		if size == 0 {
			size = journalFileSize
		}
		s.jlog = &journalLog{store: s, serial: s.cfg.SerialSyncs, fileSize: size, arrived: make(chan struct{}, 1),
			mark: journalMarkFormat.Writer(s.fs, s.journalMarkPath(), s.jmark.seq), ends: maps.Clone(s.jmark.ends), markDirty: true}
		if s.jlog.ends == nil {
			s.jlog.ends = make(map[uint64]int64)
		}
	})
	return s.jlog
}

// Journal is one shard's handle on its store's journal: it makes the
// appends of that shard's partitions durable together — with the other
// shards' of the store that commit at the same time — by one write and
// one fdatasync of the journal file (see NewJournal). It is used from one
// goroutine, the owner of the partitions it commits (a shard's pump):
// Commit, Checkpoint and Close are not safe for concurrent use; Due is.
type Journal struct {
	store      *FileStore
	log        *journalLog
	maxParts   int // pinned members before a checkpoint
	maxMembers int // members before a checkpoint
	serial     bool

	w    journalWrite
	ebuf []byte
	// mw and mbuf write the synced-end marks of partitions synced
	// directly (markDirect).
	mw   journalWrite
	mbuf []byte
	mfps []int // markDirect's partition indexes, kept for reuse
	// scratch of Commit
	own     []*filePartition
	entries []int
	direct  []int
	// covered: partitions with records for this Commit's entry that the
	// checkpoint prepare ran synced instead (see prepare): like direct
	// ones, their synced end gets a mark (markDirect).
	covered []int

	closed bool
	// forming: a partition of this handle appended records for the
	// journal since the handle's last Commit (read by a lingering leader).
	forming atomic.Bool
	// due signals a new journal file (capacity 1): Checkpoint.
	due chan struct{}

	// queued (the handle's write waits in the log's queue) and lastGen
	// (the last write that carried its entries) are the log's, under its
	// mu: a lingering leader waits for the handles of the last write.
	queued  bool
	lastGen uint64

	mu sync.Mutex
	// parts are the partitions with records in the journal that their
	// own files may lack; a partition's jseq is the oldest such file, and
	// oldest is at most the least of them (0: none). pinned counts those
	// whose tail holds unsynced writes (jpin).
	parts  map[*filePartition]struct{}
	oldest uint64
	pinned int
}

// NewJournal returns a handle on the store's journal, for the partitions
// of one owner (a shard). The store's handles share one journal file and
// one fdatasync per group. It creates no file until the first Commit that
// journals records. The owner closes it after closing the partitions it
// committed.
func (s *FileStore) NewJournal() *Journal {
	l := s.journal()
	j := &Journal{
		store:      s,
		log:        l,
		maxParts:   max(1, min(maxJournalParts, s.cfg.MaxOpenFiles/8)),
		maxMembers: maxJournalMembers,
		serial:     s.cfg.SerialSyncs,
		due:        make(chan struct{}, 1),
		parts:      make(map[*filePartition]struct{}),
	}
	j.w = journalWrite{h: j, wake: make(chan bool, 1)}
	j.mw = journalWrite{h: j, wake: make(chan bool, 1)}
	l.mu.Lock()
	l.handles = append(l.handles, j)
	l.mu.Unlock()
	return j
}

// ErrJournalClosed reports a Commit on a closed Journal.
var ErrJournalClosed = errors.New("parkway: journal closed")

// Commit makes everything appended to parts durable, as Sync of each
// would, and returns the errors by index. Partitions of this store that
// are in the journal have their new records written to the journal file,
// in one frame with the other handles' that commit meanwhile, made
// durable by one fdatasync; the others (a first Commit, a partition of
// another store, one that left the journal) are synced directly,
// concurrently with the journal's write. Partitions may be wrapped: a
// wrapper that implements Unwrap() Partition is looked through.
//
// Commit is how appends nobody has acknowledged yet become durable: its
// caller acknowledges them only once it returns nil. So when it fails
// for a partition of this store — the journal write or fdatasync that
// carried its entry, or its own fsync — it takes the partition's appends
// since its last successful Commit back out of the log (takeBack): the
// partition's files are truncated to where that commit left them and
// synced, and the failed journal frames are truncated off the journal
// file and synced. If all of that succeeds the error wraps
// ErrRolledBack: the appends are in no log, now or after a crash, and
// their owner answers them as not appended. Otherwise their outcome is
// unknown: they may be in the log, or come back from the journal at the
// next open. Either way the owner treats the partition as after a failed
// Sync (close it and build it again), which recovers every commit that
// succeeded.
func (j *Journal) Commit(parts []Partition) []error {
	errs := make([]error, len(parts))
	if j.closed {
		for i := range errs {
			errs[i] = ErrJournalClosed
		}
		return errs
	}
	j.prepare(parts, errs, false)
	jobs := len(j.direct)
	if len(j.w.fps) > 0 {
		jobs++
	}
	fanOut(jobs, checkpointFanout, j.serial, func(k int) {
		if k == len(j.direct) {
			j.log.commit(&j.w)
			return
		}
		i := j.direct[k]
		errs[i] = parts[i].Sync()
	})
	j.markDirect(errs)
	j.finish(errs)
	return errs
}

// markDirect writes, for each partition of this store that Commit synced
// directly (its first commit: it is not in the journal yet), a
// synced-end mark (see journal_codec.go) to the journal, in one frame
// made durable by one fdatasync, before the commit is acknowledged: the
// records that commit acknowledges are in no journal entry, and the
// partitions manifest records their end only from its next write, so
// without the mark a last segment cut short or rolled back below them
// would read as a torn tail. It costs a journal write per partition's
// first commit after a build or reopen, none after — and so does each
// partition whose records for this Commit's entry the checkpoint run by
// prepare synced instead (covered): they too are in no journal entry. The
// store is told the
// synced end first (noteSynced; Sync's setMark did too), so a manifest
// written once the journal file holding the mark is pruned records it.
//
// A commit whose mark could not be written is not acknowledged: the
// partition's error wraps errMarkUnwritten and the write's error.
// Acknowledging records whose end nothing durable records would let a
// cut of the segment lose them silently (single-node seeds 4464, 5819,
// 6073, 6678: a journal write's EIO or ENOSPC at the mark, a crash, then
// the segment cut short). The records cannot be taken back (Sync made
// them the commit point, and a failed write may have left the mark), so
// they stay, of unknown outcome, and the shard rebuilds the partition.
func (j *Journal) markDirect(errs []error) {
	buf := j.mbuf[:0]
	marked := j.mfps[:0]
	for k, i := range slices.Concat(j.direct, j.covered) {
		fp := j.own[i]
		if fp == nil || errs[i] != nil || k < len(j.direct) && fp.journal != nil || fp.next == 0 || fp.store != j.store {
			continue
		}
		fp.store.noteSynced(fp.ns, fp.epoch, min(fp.synced, fp.next))
		buf = appendJournalEntryFresh(buf, fp.ns, fp.epoch, min(fp.synced, fp.next), 0, false, nil)
		marked = append(marked, i)
	}
	j.mbuf, j.mfps = buf, marked[:0]
	if len(buf) == 0 {
		return
	}
	j.mw.chunks, j.mw.err = append(j.mw.chunks[:0], buf), nil
	j.log.commit(&j.mw)
	j.mw.chunks[0] = nil
	if err := j.mw.err; err != nil {
		for _, i := range marked {
			errs[i] = fmt.Errorf("partition %v: %w: %w", j.own[i].ns, errMarkUnwritten, err)
		}
	}
}

// errMarkUnwritten is the commit error of a partition synced directly
// whose synced-end mark's journal write failed (see markDirect): its
// records are in its files, so finish must not take them back.
var errMarkUnwritten = errors.New("its synced-end mark could not be written to the journal")

// Stage is Commit for FsyncInterval: it writes the new records of parts
// that are in the journal (a deferred partition attached with Attach) to
// the journal file, in one frame with the other handles' that write
// meanwhile, without an fdatasync — unless a Commit shares the write — so
// that they are in a file, and survive a process crash, before they are
// acknowledged; their fsync is the partition's own Sync, which its owner
// runs within the interval. Partitions not in the journal need nothing
// (their appends are in their own files) and are not joined to it. The
// frames are uncertain (see journal_codec.go): a power loss may lose
// them, and only them. A failed write takes the records back as a failed
// Commit does.
func (j *Journal) Stage(parts []Partition) []error {
	errs := make([]error, len(parts))
	if j.closed {
		for i := range errs {
			errs[i] = ErrJournalClosed
		}
		return errs
	}
	j.prepare(parts, errs, true)
	if len(j.w.fps) > 0 {
		j.w.staged = true
		j.log.commit(&j.w)
		j.w.staged = false
	}
	j.finish(errs)
	return errs
}

// prepare is the first part of Commit and Stage: it sorts parts into those
// to sync directly (j.direct; none when staging) and those with records to
// journal (j.entries), checkpoints first if due, and encodes the entries
// into j.w. Errors known already go into errs.
func (j *Journal) prepare(parts []Partition, errs []error, stage bool) {
	j.forming.Store(false)
	own := slices.Grow(j.own[:0], len(parts))[:len(parts)]
	entries, direct := j.entries[:0], j.direct[:0]
	for i, p := range parts {
		fp := j.unwrap(p)
		own[i] = fp
		switch {
		case fp == nil:
			direct = append(direct, i)
		case fp.closed:
			errs[i] = ErrClosed
		case fp.broken != nil:
			errs[i] = fp.broken
		case fp.journal == j && fp.stash:
			fp.staging = stage
			if fp.next > fp.jnext {
				entries = append(entries, i)
			}
		case stage:
			// Not in the journal: its appends are in its own files.
		case fp.synced == fp.next && !fp.layoutPending && fp.journal == nil:
			j.join(fp) // durable already: only later appends are journaled
		default:
			direct = append(direct, i)
		}
	}
	if len(entries) > 0 && j.checkpointDue() {
		_ = j.checkpoint() // a partition it broke fails below
		// The checkpoint synced the partitions' files: what it covered
		// needs no journal entry, and a partition it broke fails.
		kept := entries[:0]
		for _, i := range entries {
			switch fp := own[i]; {
			case fp.broken != nil:
				errs[i] = fp.broken
			case fp.next > fp.jnext:
				kept = append(kept, i)
			default:
				// Its records are in its own files only: nothing
				// durable but them says how far it was acknowledged
				// until the manifest's next write. It gets a mark as a
				// partition synced directly does (single-node seed
				// 62323: the segment cut short after a power loss read
				// as a torn tail, an acknowledged message lost).
				j.covered = append(j.covered, i)
			}
		}
		entries = kept
	}

	buf, chunks, fps := j.ebuf[:0], j.w.chunks[:0], j.w.fps[:0]
	start := 0
	for _, i := range entries {
		fp := own[i]
		if len(buf) > start && len(buf)-start+journalEntryHeader+len(fp.jpend) > maxJournalFrame {
			chunks = append(chunks, buf[start:])
			start = len(buf)
		}
		buf = appendJournalEntryFresh(buf, fp.ns, fp.epoch, fp.jnext, int(fp.next-fp.jnext), fp.deferred || fp.layoutPending, fp.jpend)
		fps = append(fps, fp)
	}
	if len(buf) > start {
		chunks = append(chunks, buf[start:])
	}
	// Chunks were cut while buf grew: point them at its final array.
	j.w.chunks, j.w.fps, j.w.err = rebaseChunks(chunks, buf), fps, nil
	j.ebuf = buf
	j.own, j.entries, j.direct = own, entries, direct
}

// finish is the last part of Commit, once the direct syncs (their errors
// in errs) and the journal write (j.w) are done: partitions synced
// directly join the journal, journaled ones have their stash emptied, or
// get the write's error.
func (j *Journal) finish(errs []error) {
	for _, i := range j.direct {
		if fp := j.own[i]; fp != nil && errs[i] == nil && fp.journal == nil {
			j.join(fp)
		}
	}
	for _, i := range j.entries {
		fp := j.own[i]
		if err := j.w.err; err != nil {
			errs[i] = fp.commitFailed(err, j.w.gone)
			continue
		}
		fp.jnext = fp.next // the write registered it (register)
		fp.jpend = fp.jpend[:0]
	}
	for i, fp := range j.own {
		switch {
		case fp == nil:
		case errs[i] == nil:
			fp.setMark() // committed: acknowledged from now on
		case !errors.Is(errs[i], ErrRolledBack) && !errors.Is(errs[i], ErrClosed) && !errors.Is(errs[i], errMarkUnwritten) && !isEntry(j.entries, i):
			// Its own fsync failed (here, or at the checkpoint), or it
			// was broken before: nothing of its appends is in the
			// journal.
			errs[i] = fp.commitFailed(errs[i], true)
		}
	}
	clear(j.w.chunks)
	clear(j.w.fps)
	clear(j.own)
	j.w.chunks, j.w.fps = j.w.chunks[:0], j.w.fps[:0]
	j.own, j.entries, j.direct, j.covered = j.own[:0], j.entries[:0], j.direct[:0], j.covered[:0]
	if cap(j.ebuf) <= maxRetainedBuffer {
		j.ebuf = j.ebuf[:0]
	} else {
		j.ebuf = nil
	}
}

// isEntry reports whether index i is among entries (ascending).
func isEntry(entries []int, i int) bool {
	_, ok := slices.BinarySearch(entries, i)
	return ok
}

// register records that file seq holds records of fps. The leader of
// the write calls it, before another write can start a new file.
func (j *Journal) register(fps []*filePartition, seq uint64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, fp := range fps {
		if fp.jseq == 0 {
			fp.jseq = seq
			j.parts[fp] = struct{}{}
			if fp.dirtyFile && !fp.jpin {
				j.pinned++
				fp.jpin = true
			}
		}
	}
	if len(fps) > 0 && (j.oldest == 0 || seq < j.oldest) {
		j.oldest = seq
	}
}

// rebaseChunks points chunks, cut from earlier versions of buf while it
// grew, at the same byte ranges of buf's final array.
func rebaseChunks(chunks [][]byte, buf []byte) [][]byte {
	at := 0
	for k, c := range chunks {
		chunks[k] = buf[at : at+len(c)]
		at += len(c)
	}
	return chunks
}

// Due is signalled when the journal starts a new file: the owner then
// calls Checkpoint, so partitions whose records are in an older file sync
// their own files even when the owner commits nothing more, and the old
// file can be removed.
func (j *Journal) Due() <-chan struct{} { return j.due }

// Checkpoint syncs the own files of the handle's partitions whose journal
// records are in a file that is no longer the current one, and removes
// the journal files no partition needs any more. A partition whose fsync
// fails is broken (its next operation reports it) and keeps its records
// in the journal; the error names it.
func (j *Journal) Checkpoint() error {
	if j.closed || !j.old() {
		return nil
	}
	return j.checkpoint()
}

// unwrap finds the *filePartition of this journal's store behind p.
func (j *Journal) unwrap(p Partition) *filePartition {
	for range 16 { // wrappers of wrappers, but never a cycle
		switch q := p.(type) {
		case *filePartition:
			if q.store == j.store {
				return q
			}
			return nil
		case interface{ Unwrap() Partition }:
			p = q.Unwrap()
		default:
			return nil
		}
	}
	return nil
}

// Attach makes p, a deferred partition of this journal's store
// (FileStore.BuildDeferred), journal its appends from its first on, and
// reports whether it did: its records are then held in memory and in the
// journal, and its files are created off the acknowledgement path (see
// BuildDeferred). Any other partition joins at its first Commit, as
// before. The owner calls it before the partition's first Append, when
// the partition's acknowledgements are to wait for Commit (FsyncAlways).
func (j *Journal) Attach(p Partition) bool {
	fp := j.unwrap(p)
	if j.closed || fp == nil || !fp.deferred || fp.journal != nil || fp.next != 0 || fp.store.cfg.Sync {
		return false
	}
	fp.journal, fp.stash, fp.staging = j, true, false
	fp.jnext, fp.jpend = 0, fp.jpend[:0]
	return true
}

// Stages reports whether p's appends still wait for a Stage to reach
// the page cache: p was attached (Attach) and its records are held
// behind or stashed for the journal. Once p stops stashing (a Stage
// found it staging and its next records outgrew what it holds behind),
// its appends are in its own file when Append returns, nothing attaches
// it again (Attach takes only an empty partition, join only one outside
// a journal), and a Stage would write nothing of it: its owner may
// acknowledge its appends as soon as they return.
func (j *Journal) Stages(p Partition) bool {
	fp := j.unwrap(p)
	return fp != nil && fp.journal == j && fp.stash
}

// join makes fp, whose log is durable in its own files, journal its
// later appends here.
func (j *Journal) join(fp *filePartition) {
	if fp.store.cfg.Sync {
		return // every append is fsynced: nothing to journal
	}
	fp.journal, fp.stash, fp.staging = j, true, false
	fp.jnext, fp.jpend = fp.next, fp.jpend[:0]
}

// checkpointDue reports whether the handle should checkpoint before its next
// entries: it holds too many partitions with unsynced files, or some of
// them have records in a file that is no longer the current one.
func (j *Journal) checkpointDue() bool {
	j.mu.Lock()
	n, pinned := len(j.parts), j.pinned
	j.mu.Unlock()
	return pinned >= j.maxParts || n >= j.maxMembers || j.old()
}

// unpinLocked takes fp out of the pinned count; j.mu is held.
func (j *Journal) unpinLocked(fp *filePartition) {
	if fp.jpin {
		j.pinned--
		fp.jpin = false
	}
}

// old reports whether a partition of the handle may have records in a
// journal file older than the current one (oldest may be stale low after
// a release: then a checkpoint comes early, and recomputes it).
func (j *Journal) old() bool {
	cur := j.log.cur.Load()
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.oldest != 0 && j.oldest < cur
}

// checkpoint syncs the files of every partition of the handle with
// records in the journal, and removes the journal files no partition
// needs any more.
func (j *Journal) checkpoint() error {
	j.mu.Lock()
	members := make([]*filePartition, 0, len(j.parts))
	for fp := range j.parts {
		members = append(members, fp)
	}
	j.mu.Unlock()
	// A fixed order, so a serial run (SerialSyncs) is reproducible.
	slices.SortFunc(members, func(a, b *filePartition) int { return cmp.Compare(a.ns, b.ns) })
	// The mark, handed to the device before the members' fsyncs flush it,
	// records the journal's last synced write too (journal_mark.go). A
	// failure leaves it for the journal's next write, which fails on it.
	_ = j.log.writeMark(syncmark.WrittenBack)
	errs := make([]error, len(members))
	fanOut(len(members), checkpointFanout, j.serial, func(k int) {
		if fp := members[k]; fp.synced < fp.next || fp.layoutPending {
			// A deferred member creates its files here, and a member
			// materialised since it joined makes its layout durable.
			errs[k] = fp.sync()
		}
	})
	j.mu.Lock()
	for k, fp := range members {
		if errs[k] != nil {
			errs[k] = fmt.Errorf("partition %v: %w", fp.ns, errs[k])
			continue // broken: its owner closes it; its records stay
		}
		fp.jnext, fp.jpend = fp.next, fp.jpend[:0]
		fp.jseq = 0
		j.unpinLocked(fp)
		delete(j.parts, fp)
	}
	j.oldest = 0
	for fp := range j.parts {
		if j.oldest == 0 || fp.jseq < j.oldest {
			j.oldest = fp.jseq
		}
	}
	j.mu.Unlock()
	j.log.prune()
	return errors.Join(errs...)
}

// release records that fp's own files hold everything it journaled.
func (j *Journal) release(fp *filePartition) {
	j.mu.Lock()
	fp.jseq = 0
	j.unpinLocked(fp)
	delete(j.parts, fp)
	j.mu.Unlock()
}

// lost records that fp was closed without syncing its files: the journal
// files that may hold its records are kept until the next open, and the
// next Build of its incarnation applies them again (reapplyLost).
func (j *Journal) lost(fp *filePartition) {
	j.mu.Lock()
	j.unpinLocked(fp)
	lo := fp.jseq
	fp.jseq = 0
	delete(j.parts, fp)
	j.mu.Unlock()
	if lo == 0 {
		return
	}
	l := j.log
	l.mu.Lock()
	hi := max(l.cur.Load(), lo)
	if len(l.files) > 0 {
		hi = max(hi, l.files[len(l.files)-1])
	}
	if l.pinHi == 0 {
		l.pinLo, l.pinHi = lo, hi
	} else {
		l.pinLo, l.pinHi = min(l.pinLo, lo), max(l.pinHi, hi)
	}
	l.mu.Unlock()
	j.store.markLost(fp.ns, fp.epoch, lo, hi)
}

// Close takes the handle off the journal and removes the journal files no
// partition needs (its owner closes its partitions first: Close of a
// partition syncs it); the last handle's Close closes the journal file.
// Files that may hold records a partition lacks are kept for the next
// open's replay.
func (j *Journal) Close() error {
	if j.closed {
		return ErrJournalClosed
	}
	j.closed = true
	l := j.log
	var err error
	l.mu.Lock()
	if k := slices.Index(l.handles, j); k >= 0 {
		l.handles = slices.Delete(l.handles, k, k+1)
	}
	last := len(l.handles) == 0 && !l.writing
	if last && l.f != nil {
		err = l.f.Close()
		l.f = nil
	}
	l.mu.Unlock()
	l.prune()
	if last {
		// The ends the last fdatasyncs made durable, fdatasynced: after a
		// clean close the mark does not lag (journal_mark.go).
		if merr := l.closeMark(); err == nil {
			err = merr
		}
	}
	return err
}

// commit writes w's entries, with those of every handle queued meanwhile,
// and makes them durable; w.seq and w.err hold the outcome. The first
// handle in leads: it writes the queue; handles that arrive meanwhile
// wait, and when the write returns the first of them leads the next.
func (l *journalLog) commit(w *journalWrite) {
	l.mu.Lock()
	l.queue = append(l.queue, w)
	w.h.queued = true
	// contended: this handle queued behind a write in flight, and leads
	// the next one if it leads at all.
	contended := l.writing
	if contended {
		select {
		case l.arrived <- struct{}{}:
		default:
		}
		l.mu.Unlock()
		if lead := <-w.wake; !lead {
			return // written by another leader
		}
	} else {
		l.writing = true
		l.mu.Unlock()
	}
	l.linger(w.h, contended)
	l.mu.Lock()
	batch := l.queue
	l.queue = l.spare[:0]
	l.spare = nil
	l.gen++
	handles := 0
	for _, o := range batch {
		if o.h.lastGen != l.gen {
			handles++
		}
		o.h.queued, o.h.lastGen = false, l.gen
	}
	if handles == 1 && !contended {
		l.solo = min(l.solo+1, soloRun)
	} else {
		l.solo = 0
	}
	l.mu.Unlock()

	l.write(batch)

	for _, o := range batch {
		if o != w {
			o.wake <- false
		}
	}
	clear(batch)
	l.mu.Lock()
	l.spare = batch[:0]
	if len(l.queue) > 0 {
		l.queue[0].wake <- true // writing stays set: it leads now
	} else {
		l.writing = false
	}
	l.mu.Unlock()
}

// linger holds a leader's write back while another handle is about to
// queue entries, for at most a share of the last fdatasync's duration:
// the shards' groups then share one write and one fdatasync instead of
// alternating, each write carrying one shard's group. A serial store
// (SerialSyncs) does not linger: its run must not depend on timing.
//
// Which handles are about to queue (awaited) is a prediction, made from
// what the log has seen, without a clock. A handle that has appended
// journal records since its last Commit (forming) is about to commit.
// A handle that was in the last write had its producers just answered,
// and they may be producing again — when the shards' producers overlap:
// the leader queued behind a write in flight (contended), or fewer than
// soloRun writes in a row carried one handle each with no write in
// flight. Where every write carries one handle and finds the log idle,
// the producers take turns, as one sequential client does whose
// consecutive topics land on different shards (create a topic, produce,
// create the next): the handle of the last write has nothing more to
// send, its one producer is the one now waiting, and a leader waiting
// for it would wait out its whole budget on every change of shard —
// longer still, as a process with nothing else to run sleeps a timer
// shorter than a millisecond out to one in the runtime's netpoller
// (issue 33: about 1 ms on every other create + produce). Many
// synchronous producers on two shards keep lingering: their writes
// carry both shards, or queue behind one another, and a solo write
// between shared ones (a linger that timed out) does not end it.
func (l *journalLog) linger(self *Journal, contended bool) {
	budget := time.Duration(l.lastSync.Load() / lingerShare)
	if l.serial || budget <= 0 {
		return
	}
	select {
	case <-l.arrived: // stale: from before this write
	default:
	}
	armed := false
	for l.awaited(self, contended) {
		if !armed {
			if l.timer == nil {
				l.timer = time.NewTimer(budget)
			} else {
				l.timer.Reset(budget)
			}
			armed = true
		}
		select {
		case <-l.arrived:
		case <-l.timer.C:
			return
		}
	}
	if armed {
		l.timer.Stop()
	}
}

// awaited reports whether a handle other than self is about to queue
// entries, for a leader that queued behind a write in flight
// (contended) or not (see linger).
func (l *journalLog) awaited(self *Journal, contended bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	last := l.gen > 0 && (contended || l.solo < soloRun)
	for _, h := range l.handles {
		if h != self && !h.queued && (last && h.lastGen == l.gen || h.forming.Load()) {
			return true
		}
	}
	return false
}

// write appends the entries of batch to the current file (starting a new
// one if it is full or there is none) as one frame, and makes them
// durable with one fdatasync. Entries that do not fit one frame
// (maxJournalFrame) go into several, each written and synced before the
// next, so a crash never leaves a torn frame before a whole one. On
// failure the file is abandoned: it stays on disk (it may hold
// acknowledged frames) and the next write starts a new one.
//
// A failed write takes its frames back before the file is abandoned: the
// file is truncated to where the write began and synced, so a replay
// never applies a frame whose records were answered as not appended
// (w.gone). Where that fails too, the frames may survive, and gone is
// false.
func (l *journalLog) write(batch []*journalWrite) {
	l.wrote = false
	err := l.writeFrames(batch)
	seq := l.seq
	gone := false
	if err != nil {
		gone = !l.wrote
		if l.f != nil {
			if l.wrote {
				gone = l.f.Truncate(l.from) == nil && l.f.Sync() == nil
			}
			_ = l.f.Close()
			l.f = nil
		}
		err = fmt.Errorf("parkway: journal %s: %w", journalFileName(seq), err)
	}
	if cap(l.buf) > maxRetainedBuffer {
		l.buf = nil
	}
	for _, w := range batch {
		w.seq, w.err, w.gone = seq, err, gone
		if err == nil {
			w.h.register(w.fps, seq)
		}
	}
}

// writeFrames is write without the failure handling: it starts a new file
// if needed and writes the batch's chunks as frames of at most
// maxJournalFrame bytes of entries, each made durable before the next.
func (l *journalLog) writeFrames(batch []*journalWrite) error {
	if l.f != nil && l.size >= l.fileSize {
		err := l.f.Close()
		l.f = nil
		if err != nil {
			return err
		}
	}
	if l.f == nil {
		if err := l.create(); err != nil {
			return err
		}
	}
	l.from = l.size
	// A batch of staged writes only is written without an fdatasync.
	sync := slices.ContainsFunc(batch, func(w *journalWrite) bool { return !w.staged })
	buf, start := beginJournalFrame(l.buf[:0])
	flush := func() error {
		sealJournalFrameAs(buf, start, !sync || l.unsynced)
		err := l.append(buf, sync)
		buf, start = beginJournalFrame(buf[:0])
		return err
	}
	for _, w := range batch {
		for _, c := range w.chunks {
			if len(buf) > start+journalFrameHeader && len(buf)-start-journalFrameHeader+len(c) > maxJournalFrame {
				if err := flush(); err != nil {
					l.buf = buf
					return err
				}
			}
			buf = append(buf, c...)
		}
	}
	var err error
	if len(buf) > start+journalFrameHeader {
		err = flush()
	}
	l.buf = buf[:0]
	return err
}

// append writes one sealed frame at the end of the current file's data
// and, with sync, makes it durable.
//
// The file is written with zeros ahead of its data, journalZeroChunk at a
// time, so a frame overwrites blocks that are allocated, written and
// inside the file's size: its fdatasync then flushes the data alone,
// where an append that grows the file also makes the filesystem commit
// its metadata (the size, the new blocks' allocation), which costs about
// as much again. The zeros are made durable by the same fdatasync as the
// frame written over their start, and are the end of the file to the
// decoder (decodeJournal), as after a crash.
func (l *journalLog) append(frame []byte, sync bool) error {
	var err error
	if end := l.size + int64(len(frame)); end > l.zeroed {
		err = l.zeroFill(end)
	}
	if err == nil && sync {
		// The ends earlier fdatasyncs made durable, in the mark: its write
		// started, not waited for, so durable with the next fdatasync
		// (journal_mark.go).
		err = l.writeMark(syncmark.Started)
	}
	if err == nil {
		l.wrote = true // the frame may reach the file, whole or in part
		err = writeFull(l.f, frame, l.size)
	}
	if err == nil && !sync {
		l.unsynced = true
		l.size += int64(len(frame))
		return nil
	}
	if err == nil {
		// The file only grows by appends: fdatasync covers its data and
		// its size, without a journal commit for its timestamps.
		t := time.Now()
		err = vfs.Datasync(l.f)
		d := time.Since(t)
		l.lastSync.Store(int64(d))
		if o := l.store.cfg.JournalSyncs; o != nil {
			o.Observe(d.Seconds())
		}
		if err == nil {
			l.unsynced = false
		}
	}
	if err == nil && l.fresh {
		if err = l.store.fs.SyncDir(l.store.journalPath()); err == nil {
			l.fresh = false
		}
	}
	if err == nil {
		l.size += int64(len(frame))
		l.noteJournalSynced(l.seq, l.size)
	}
	return err
}

// zeroFill writes zeros from the end of the zeroed part of the current
// file past end, to the next multiple of journalZeroChunk.
func (l *journalLog) zeroFill(end int64) error {
	to := (end + journalZeroChunk - 1) / journalZeroChunk * journalZeroChunk
	if l.zeros == nil {
		l.zeros = make([]byte, journalZeroWrite)
	}
	for at := l.zeroed; at < to; {
		n := min(int64(len(l.zeros)), to-at)
		if err := writeFull(l.f, l.zeros[:n], at); err != nil {
			return err
		}
		at += n
		l.zeroed = at
	}
	return nil
}

// create starts a new journal file and tells every handle (Due).
func (l *journalLog) create() error {
	if err := l.store.ensureJournalDir(); err != nil {
		return err
	}
	seq := l.store.journalSeq.Add(1)
	f, err := l.store.fs.OpenFile(l.store.journalFile(seq), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.files = append(l.files, seq)
	l.cur.Store(seq)
	hs := l.handles
	for _, h := range hs {
		select {
		case h.due <- struct{}{}:
		default:
		}
	}
	l.mu.Unlock()
	l.f, l.seq, l.size, l.zeroed, l.fresh, l.unsynced = f, seq, 0, 0, true, false
	l.markMu.Lock()
	l.markDirty = true // the highest file number grew
	l.markMu.Unlock()
	// The manifest lists the file before anything is written into it, so
	// an offline verify can tell it was lost (manifest.go). Best effort:
	// a manifest that cannot be written costs verify its knowledge of
	// this file, not the write.
	_ = l.store.writeManifest(nil)
	return nil
}

// prune removes the journal files that hold no record a partition's own
// files may lack. A removal need not be durable: a file that comes back
// after a crash is replayed again, and replay skips what partitions hold.
func (l *journalLog) prune() {
	l.mu.Lock()
	need := uint64(0) // the oldest file still needed, 0 for none
	for _, h := range l.handles {
		h.mu.Lock()
		for fp := range h.parts {
			if need == 0 || fp.jseq < need {
				need = fp.jseq
			}
		}
		h.mu.Unlock()
	}
	cur := l.cur.Load()
	open := l.writing || len(l.handles) > 0
	var drop []uint64
	kept := l.files[:0]
	for _, seq := range l.files {
		switch {
		case open && seq == cur,
			need != 0 && seq >= need,
			l.pinHi != 0 && seq >= l.pinLo && seq <= l.pinHi:
			kept = append(kept, seq)
		default:
			drop = append(drop, seq)
		}
	}
	l.files = kept
	l.mu.Unlock()
	if len(drop) == 0 {
		return
	}
	// The manifest records the directories the partitions synced into
	// and leaves the dropped files out before they go (manifest.go); if
	// it cannot, they stay for the next prune.
	if err := l.store.recordBeforePrune(); err != nil {
		l.mu.Lock()
		l.files = append(l.files, drop...)
		slices.Sort(l.files)
		l.mu.Unlock()
		return
	}
	removed := drop[:0]
	for _, seq := range drop {
		if err := l.store.fs.Remove(l.store.journalFile(seq)); err != nil && !isNotExist(err) {
			l.mu.Lock()
			l.files = append(l.files, seq) // retried by the next prune
			slices.Sort(l.files)
			l.mu.Unlock()
			continue
		}
		removed = append(removed, seq)
	}
	l.forgetJournalFiles(removed)
}

// fanOut runs fn(0), …, fn(n-1): one after another with serial, else on
// up to width goroutines (the caller's and width-1 started here, joined
// before it returns).
func fanOut(n, width int, serial bool, fn func(int)) {
	if n <= 1 || serial {
		for k := range n {
			fn(k)
		}
		return
	}
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	work := func() {
		for {
			k := int(next.Add(1) - 1)
			if k >= n {
				return
			}
			fn(k)
		}
	}
	for range min(n, width) - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
}

// journalPath is the directory of the store's journal files.
func (s *FileStore) journalPath() string { return filepath.Join(s.cfg.Dir, journalDir) }

// journalFile is the path of journal file seq.
func (s *FileStore) journalFile(seq uint64) string {
	return filepath.Join(s.journalPath(), journalFileName(seq))
}
