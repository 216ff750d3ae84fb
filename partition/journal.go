package partition

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/parkway-io/parkway/vfs"
)

// The journal: group commit across the partitions of a FileStore.
//
// Making a commit group durable partition by partition costs one fsync per
// dirty partition, and the filesystem folds concurrent fsyncs of different
// files into fewer journal commits only so far. A Journal makes the
// group's appends durable with one write and one fsync of one file: the
// group's records of every partition, each entry carrying the namespace,
// the incarnation (epoch) and the first offset, go into one frame of the
// journal file. The partitions' own files are written behind (Append keeps
// up to writeBehind bytes of a journaled partition's records in memory and
// writes them a page at a time, or before a read or a sync) and
// synced lazily: at a checkpoint (when the journal file reaches
// journalFileSize, when it holds records of too many partitions whose
// own files hold unsynced writes, each pinning its tail's descriptor (see
// handles.go), or of too many partitions in all), by any direct Sync, and
// at Close. Records written behind pin nothing until they are written, so
// with produces spread over thousands of partitions a checkpoint comes
// after many appends to each, and its fsyncs are shared among them.
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
// change between runs. A journal file's descriptor is opened through the
// store's budget and counts in FileConfig.MaxOpenFiles, one per Journal.
//
// Which partitions it covers. A partition joins a journal at a Commit
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
// Failures. A failed write or fsync of the journal fails the group's
// journaled partitions (the caller fences them, as after a failed fsync)
// and abandons the file: the next group goes to a new one. Files are
// removed only once every partition with records in them has synced its
// own files; a partition closed without that (its fsync failed) keeps
// them until the next open, whose replay restores from them what it can.

const (
	journalDir = "journal"
	journalExt = ".journal"
	// journalFileSize is the size past which a journal file is
	// checkpointed: replay reads at most about this much per journal.
	journalFileSize = 64 << 20
	// maxStash bounds the records a partition keeps for its next Commit.
	maxStash = 16 << 20
	// maxJournalParts caps the partitions with records in a journal whose
	// own files hold unsynced writes. Each pins its tail's descriptor, so
	// a journal allows at most an eighth of the store's descriptor budget
	// of them (several shards share the budget). A member whose records
	// are all still unwritten (written behind, see writeBehind) pins
	// nothing and counts only towards maxJournalMembers.
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
)

// Journal makes the appends of several partitions of one FileStore
// durable together, with one write and one fsync of a journal file (see
// NewJournal). It is used from one goroutine, the owner of the
// partitions it commits (a shard's pump): Commit and Close are not safe
// for concurrent use.
type Journal struct {
	store      *FileStore
	maxParts   int // pinned members before a checkpoint
	maxMembers int // members before a checkpoint
	serial     bool

	f     vfs.File // the current file, nil between files
	seq   uint64   // the current file's sequence number
	size  int64
	fresh bool // the current file's directory entry is not durable yet
	buf   []byte
	// scratch of Commit
	own     []*filePartition
	entries []int
	direct  []int

	closed bool

	mu sync.Mutex
	// files are the journal's files on disk, ascending.
	files []uint64
	// parts are the partitions with records in the journal that their
	// own files may lack; a partition's jseq is the oldest such file.
	// pinned counts those whose tail holds unsynced writes (jpin).
	parts  map[*filePartition]struct{}
	pinned int
	// pinLo..pinHi are files kept until the next open: a partition was
	// closed with records in them that its own files may lack.
	pinLo, pinHi uint64
}

// NewJournal returns a journal for partitions of s. It creates no file
// until the first Commit that journals records. The owner closes it after
// closing the partitions it committed.
func (s *FileStore) NewJournal() *Journal {
	return &Journal{
		store:      s,
		maxParts:   max(1, min(maxJournalParts, s.cfg.MaxOpenFiles/8)),
		maxMembers: maxJournalMembers,
		serial:     s.cfg.SerialSyncs,
		parts:      make(map[*filePartition]struct{}),
	}
}

// ErrJournalClosed reports a Commit on a closed Journal.
var ErrJournalClosed = errors.New("parkway: journal closed")

// Commit makes everything appended to parts durable, as Sync of each
// would, and returns the errors by index. Partitions of this store that
// are in the journal have their new records written to the journal file
// in one frame, made durable by one fsync; the others (a first Commit, a
// partition of another store, one that left the journal) are synced
// directly, concurrently with the journal's write. A partition whose
// entry a failed journal write or fsync carried gets that error: its
// records are in its log but were never acknowledged as durable, and its
// owner must treat it as after a failed Sync (close it and build it
// again). Partitions may be wrapped: a wrapper that implements
// Unwrap() Partition is looked through.
func (j *Journal) Commit(parts []Partition) []error {
	errs := make([]error, len(parts))
	if j.closed {
		for i := range errs {
			errs[i] = ErrJournalClosed
		}
		return errs
	}
	own := slices.Grow(j.own[:0], len(parts))[:len(parts)]
	entries, direct := j.entries[:0], j.direct[:0]
	defer func() {
		clear(own)
		j.own, j.entries, j.direct = own[:0], entries[:0], direct[:0]
	}()
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
			if fp.next > fp.jnext {
				entries = append(entries, i)
			}
		case fp.synced == fp.next && !fp.layoutPending && fp.journal == nil:
			j.join(fp) // durable already: only later appends are journaled
		default:
			direct = append(direct, i)
		}
	}
	if len(entries) > 0 && j.due() {
		j.checkpoint()
		// The checkpoint synced the partitions' files: what it covered
		// needs no journal entry, and a partition it broke fails.
		kept := entries[:0]
		for _, i := range entries {
			switch fp := own[i]; {
			case fp.broken != nil:
				errs[i] = fp.broken
			case fp.next > fp.jnext:
				kept = append(kept, i)
			}
		}
		entries = kept
	}

	buf := j.buf[:0]
	if len(entries) > 0 {
		var start int
		buf, start = beginJournalFrame(buf)
		for _, i := range entries {
			fp := own[i]
			if len(buf)-start+journalEntryHeader+len(fp.jpend) > maxJournalFrame {
				sealJournalFrame(buf, start)
				buf, start = beginJournalFrame(buf)
			}
			buf = appendJournalEntry(buf, fp.ns, fp.epoch, fp.jnext, int(fp.next-fp.jnext), fp.jpend)
		}
		sealJournalFrame(buf, start)
	}
	var jerr error
	jobs := len(direct)
	if len(entries) > 0 {
		jobs++
	}
	run := func(k int) {
		if k == len(direct) {
			jerr = j.write(buf)
			return
		}
		i := direct[k]
		errs[i] = parts[i].Sync()
	}
	fanOut(jobs, checkpointFanout, j.serial, run)
	if cap(buf) <= maxRetainedBuffer {
		j.buf = buf[:0]
	} else {
		j.buf = nil
	}

	for _, i := range direct {
		if fp := own[i]; fp != nil && errs[i] == nil && fp.journal == nil {
			j.join(fp)
		}
	}
	for _, i := range entries {
		fp := own[i]
		if jerr != nil {
			errs[i] = jerr
			continue
		}
		fp.jnext = fp.next
		fp.jpend = fp.jpend[:0]
		if fp.jseq == 0 {
			j.mu.Lock()
			fp.jseq = j.seq
			j.parts[fp] = struct{}{}
			if fp.dirtyFile && !fp.jpin {
				j.pinned++
				fp.jpin = true
			}
			j.mu.Unlock()
		}
	}
	return errs
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

// join makes fp, whose log is durable in its own files, journal its
// later appends here.
func (j *Journal) join(fp *filePartition) {
	if fp.store.cfg.Sync {
		return // every append is fsynced: nothing to journal
	}
	fp.journal, fp.stash = j, true
	fp.jnext, fp.jpend = fp.next, fp.jpend[:0]
}

// due reports whether the current file should be checkpointed before
// the next frame.
func (j *Journal) due() bool {
	if j.f == nil {
		return false
	}
	j.mu.Lock()
	n, pinned := len(j.parts), j.pinned
	j.mu.Unlock()
	return j.size >= journalFileSize || pinned >= j.maxParts || n >= j.maxMembers
}

// unpinLocked takes fp out of the pinned count; j.mu is held.
func (j *Journal) unpinLocked(fp *filePartition) {
	if fp.jpin {
		j.pinned--
		fp.jpin = false
	}
}

// write appends frame to the current file (creating one if needed) and
// makes it durable. On failure the file is abandoned: it stays on disk
// (it may hold acknowledged frames) and the next write starts a new one.
func (j *Journal) write(frame []byte) error {
	if j.f == nil {
		if err := j.create(); err != nil {
			return fmt.Errorf("parkway: journal: %w", err)
		}
	}
	n, err := j.f.WriteAt(frame, j.size)
	if err == nil && n != len(frame) {
		err = io.ErrShortWrite
	}
	if err == nil {
		// The file only grows by appends: fdatasync covers its data and
		// its size, without a journal commit for its timestamps.
		err = vfs.Datasync(j.f)
	}
	if err == nil && j.fresh {
		if err = j.store.fs.SyncDir(j.store.journalPath()); err == nil {
			j.fresh = false
		}
	}
	if err != nil {
		_ = j.f.Close()
		j.f = nil
		return fmt.Errorf("parkway: journal %s: %w", journalFileName(j.seq), err)
	}
	j.size += int64(len(frame))
	return nil
}

// create starts a new journal file.
func (j *Journal) create() error {
	if err := j.store.ensureJournalDir(); err != nil {
		return err
	}
	seq := j.store.journalSeq.Add(1)
	f, err := j.store.fs.OpenFile(j.store.journalFile(seq), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	j.mu.Lock()
	j.files = append(j.files, seq)
	j.mu.Unlock()
	j.f, j.seq, j.size, j.fresh = f, seq, 0, true
	return nil
}

// checkpoint closes the current file, syncs the files of every partition
// with records in the journal, and removes the journal files no partition
// needs any more. Frames after it go to a new file.
func (j *Journal) checkpoint() {
	if j.f != nil {
		_ = j.f.Close()
		j.f = nil
	}
	j.mu.Lock()
	members := make([]*filePartition, 0, len(j.parts))
	for fp := range j.parts {
		members = append(members, fp)
	}
	j.mu.Unlock()
	// A fixed order, so a serial run (SerialSyncs) is reproducible.
	slices.SortFunc(members, func(a, b *filePartition) int { return cmp.Compare(a.ns, b.ns) })
	errs := make([]error, len(members))
	fanOut(len(members), checkpointFanout, j.serial, func(k int) {
		if fp := members[k]; fp.synced < fp.next {
			errs[k] = fp.syncTail()
		}
	})
	j.mu.Lock()
	for k, fp := range members {
		if errs[k] != nil {
			continue // broken: its owner closes it; its records stay
		}
		fp.jnext, fp.jpend = fp.next, fp.jpend[:0]
		fp.jseq = 0
		j.unpinLocked(fp)
		delete(j.parts, fp)
	}
	j.mu.Unlock()
	j.prune()
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
	defer j.mu.Unlock()
	j.unpinLocked(fp)
	if fp.jseq == 0 {
		return
	}
	hi := j.seq
	if len(j.files) > 0 {
		hi = max(hi, j.files[len(j.files)-1])
	}
	if j.pinHi == 0 {
		j.pinLo, j.pinHi = fp.jseq, hi
	} else {
		j.pinLo, j.pinHi = min(j.pinLo, fp.jseq), max(j.pinHi, hi)
	}
	j.store.markLost(fp.ns, fp.epoch, fp.jseq, hi)
	fp.jseq = 0
	delete(j.parts, fp)
}

// prune removes the journal files that hold no record a partition's own
// files may lack. A removal need not be durable: a file that comes back
// after a crash is replayed again, and replay skips what partitions hold.
func (j *Journal) prune() {
	j.mu.Lock()
	need := uint64(0) // the oldest file still needed, 0 for none
	for fp := range j.parts {
		if need == 0 || fp.jseq < need {
			need = fp.jseq
		}
	}
	var drop []uint64
	kept := j.files[:0]
	for _, seq := range j.files {
		switch {
		case j.f != nil && seq == j.seq,
			need != 0 && seq >= need,
			j.pinHi != 0 && seq >= j.pinLo && seq <= j.pinHi:
			kept = append(kept, seq)
		default:
			drop = append(drop, seq)
		}
	}
	j.files = kept
	j.mu.Unlock()
	for _, seq := range drop {
		if err := j.store.fs.Remove(j.store.journalFile(seq)); err != nil && !isNotExist(err) {
			j.mu.Lock()
			j.files = append(j.files, seq) // retried by the next prune
			slices.Sort(j.files)
			j.mu.Unlock()
		}
	}
}

// Close closes the journal's file and removes its files if every
// partition it journaled has synced its own (its owner closes them
// first: Close of a partition syncs it). Files that may hold records a
// partition lacks are kept for the next open's replay.
func (j *Journal) Close() error {
	if j.closed {
		return ErrJournalClosed
	}
	j.closed = true
	var err error
	if j.f != nil {
		err = j.f.Close()
		j.f = nil
	}
	j.prune()
	return err
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
