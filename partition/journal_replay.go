package partition

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/vfs"
)

// replayJournals applies the journal files a previous process left to
// their partitions, syncs the partitions and removes the files (see
// Journal). It runs in NewFileStore, before anything lists, builds or
// removes a partition.
//
// Every record of a partition is applied in journal order (files by
// number, frames and entries in file order). A record is skipped when its
// partition directory is gone or holds another incarnation (the
// partition was deleted, or recreated, after the record was written), and
// so is the part of it the partition holds already (its files were
// synced at a checkpoint, or the process crashed without losing the page
// cache); the rest is appended. A record that starts past the end of its
// partition's log would leave a gap: acknowledged messages before it were
// lost, which a crash cannot do (the journal holds every record its
// partition's files may lack), so it is reported as a *CorruptError.
//
// A crash during replay leaves the files in place: the next open replays
// them again, skipping what the first attempt appended. The removals are
// made durable once done (see the end of replayJournals).
//
// Damage fences the partitions it may concern, not the store (DESIGN
// behaviour 28: one damaged partition must not keep a node from serving
// the others). A partition whose replay meets damage (a *CorruptError: a
// record past its log's end, a damaged consumer offset file) is left to
// its Build, which applies the records again and fences what it cannot
// (held); a journal file that is damaged itself, whose damaged frame
// names no partition one can trust, fences every partition held at open
// at its log's end (held, with no records). The journal files are then
// kept, not removed: they are the only durable record of the damage, and
// the next open fences the same partitions again. A partition purged past
// the damage (TruncateBefore(NextOffset)) holds every record of the kept
// files by offset, so a gap no longer fences it; damage in a journal file
// fences every partition held until that file is removed by hand.
func (s *FileStore) replayJournals() error {
	files, err := s.journalFiles()
	if err != nil {
		return err
	}
	// The mark says how far each file was synced, and numbers new files
	// past every one it saw (journal_mark.go). One with no valid slot
	// reads as none.
	mark, _, _, err := readJournalMark(s.fs, s.journalMarkPath())
	if err != nil && !errors.Is(err, ErrCorrupt) {
		return fmt.Errorf("parkway: journal: %w", err)
	}
	s.journalSeq.Store(mark.high)
	s.jmark.seq = mark.seq
	if len(files) == 0 {
		return nil
	}
	s.journalSeq.Store(max(mark.high, files[len(files)-1]))
	byNS := make(map[metadata.Namespace][]journalEntry)
	var damaged error // the first journal file found damaged
	for _, seq := range files {
		path := s.journalFile(seq)
		b, err := vfs.ReadFile(s.fs, path)
		if err != nil {
			return fmt.Errorf("parkway: journal: %w", err)
		}
		entries, end, err := decodeJournalTo(b, path)
		if errors.Is(err, ErrCorrupt) {
			damaged = cmp.Or(damaged, err)
			continue
		}
		if err != nil {
			return err
		}
		// A file whose frames end before it was synced lost acknowledged
		// records: damage, not a torn tail. The frames before the cut are
		// whole, and applied.
		if err := checkJournalEnd(mark, seq, path, int64(end)); err != nil {
			damaged = cmp.Or(damaged, err)
		}
		for _, e := range entries {
			byNS[e.ns] = append(byNS[e.ns], e)
		}
	}
	nss := make([]metadata.Namespace, 0, len(byNS))
	for ns := range byNS {
		nss = append(nss, ns)
	}
	slices.SortFunc(nss, cmp.Compare)
	keep := damaged != nil
	if keep {
		// The files are kept, and so are their synced ends: the next
		// open finds a file cut short again.
		s.jmark.ends = make(map[uint64]int64)
		for _, seq := range files {
			if e, ok := mark.ends[seq]; ok {
				s.jmark.ends[seq] = e
			}
		}
	}
	for _, ns := range nss {
		err := s.replayPartition(ns, byNS[ns])
		if errors.Is(err, ErrCorrupt) {
			// Left to the partition's Build, which fences it: the rest
			// of the node opens.
			s.hold(ns, byNS[ns], nil)
			keep = true
			continue
		}
		if err != nil {
			return fmt.Errorf("parkway: replaying the journal into partition %v: %w", ns, err)
		}
	}
	if damaged != nil {
		errors.As(damaged, &s.journalDamage)
		stored, err := s.List()
		if err != nil {
			return fmt.Errorf("parkway: journal: %w", err)
		}
		for _, st := range stored {
			if st.Epoch != 0 {
				s.hold(st.NS, byNS[st.NS], damaged)
			}
		}
	}
	if keep {
		// The files are kept (see above); the manifest still records the
		// directories the replay synced, and lists no journal file: the
		// kept ones are read by every open, not by an offline verify.
		if err := s.RecordPartitions(); err != nil {
			return fmt.Errorf("parkway: journal: recording the replayed partitions: %w", err)
		}
		return nil
	}
	// The replayed files go: the manifest records first the directories
	// the replay synced and no journal file (manifest.go).
	if err := s.RecordPartitions(); err != nil {
		return fmt.Errorf("parkway: journal: recording the replayed partitions: %w", err)
	}
	for _, seq := range files {
		if err := s.fs.Remove(s.journalFile(seq)); err != nil && !isNotExist(err) {
			return fmt.Errorf("parkway: journal: %w", err)
		}
	}
	// The removals are made durable before anything else runs. A replayed
	// record may be of an incarnation whose metadata command never became
	// durable (a produce issued with its create, written while the
	// command was synced): the orphan sweep removes the partition the
	// replay rebuilt for it, and the next create of that topic may get
	// the same ids and revision. A journal file that came back after a
	// later crash would rebuild the dead incarnation's record into it.
	if err := s.fs.SyncDir(s.journalPath()); err != nil && !isNotExist(err) {
		return fmt.Errorf("parkway: journal: %w", err)
	}
	return nil
}

// journalFiles lists the numbers of the journal files, in order.
func (s *FileStore) journalFiles() ([]uint64, error) {
	names, err := s.fs.ReadDir(s.journalPath())
	if isNotExist(err) || errors.Is(err, syscall.ENOTDIR) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("parkway: journal: %w", err)
	}
	var files []uint64
	for _, n := range names {
		if seq, ok := parseJournalName(n); ok {
			files = append(files, seq)
		}
	}
	slices.Sort(files)
	return files, nil
}

// replayPartition applies entries, all of namespace ns, to its partition.
func (s *FileStore) replayPartition(ns metadata.Namespace, entries []journalEntry) error {
	if err := s.acquire(ns); err != nil {
		return err
	}
	dir := s.partitionDir(ns)
	inc, err := readIncarnation(s.fs, dir)
	have := err == nil
	switch {
	case err == nil:
	case isNotExist(err), errors.Is(err, syscall.ENOTDIR), errors.Is(err, errBadIncarnation):
		// deleted, or never durably built
	default:
		s.release(ns)
		return err
	}
	// A fresh entry at offset 0 is the first of an incarnation whose
	// directory was not durable when it was written (a deferred
	// partition): every record of it is in the journal, since no journal
	// file holding them is removed before the partition's files are
	// synced, which makes its directory durable. If the directory holds
	// an older incarnation or none, that one is rebuilt from the journal.
	// One that was deleted comes back too: the node's orphan sweep,
	// which runs after the replay, removes it.
	fresh, rebuild := rebuildEpoch(entries, inc, have)
	var p *filePartition
	switch {
	case rebuild:
		inc = fresh
		if err = s.fs.RemoveAll(dir); err == nil {
			p, err = s.open(ns, inc, dir, true)
		}
	case !have || !slices.ContainsFunc(entries, func(e journalEntry) bool { return e.epoch == inc }):
		// Deleted or never durably built (nothing was acknowledged in
		// it), or only other incarnations' records — unless entries
		// written once its layout was durable name a newer incarnation
		// than the directory's: its incarnation file was damaged
		// (incarnationLost), and its Build reports it.
		s.release(ns)
		if epoch, end, ok := durableEpoch(entries); ok && (!have || inc < epoch) && !s.readOnly && s.syncedIncarnation(ns).epoch <= epoch {
			s.noteSynced(ns, epoch, end)
			if lerr := s.incarnationLost(ns, epoch, dir, inc, err); lerr != nil {
				return lerr
			}
		}
		return nil
	default:
		p, err = s.open(ns, inc, dir, false)
	}
	if err != nil {
		s.release(ns)
		return err
	}
	if p, err = s.repairFromJournal(p, entries); err != nil {
		_ = p.closeFiles()
		s.release(ns)
		return err
	}
	if err := p.applyJournal(entries); err != nil {
		_ = p.Close()
		return err
	}
	if err := p.Close(); err != nil { // syncs what was appended, and the layout
		return err
	}
	// The journal files go once the manifest is written (replayJournal):
	// the end their entries (records and synced-end marks) give the log
	// must be in it, or a log they held whole, its own files synced in an
	// earlier run, would lose its synced end with them, and a segment cut
	// short after the next crash would read as a torn tail (single-node
	// seeds 6073 and 6678). applyJournal checked the log reaches it.
	var end uint64
	for _, e := range entries {
		if e.epoch == inc {
			end = max(end, e.first+uint64(len(e.msgs)))
		}
	}
	if end > 0 && !s.readOnly {
		s.noteSynced(ns, inc, end)
	}
	return nil
}

// durableEpoch is the newest incarnation among entries (all of one
// partition) with an entry written once the partition's layout was
// durable (not journalEntryFresh: a synced-end mark or records), and the
// end its entries give the log.
func durableEpoch(entries []journalEntry) (epoch, end uint64, ok bool) {
	for _, e := range entries {
		if !e.fresh && e.epoch >= epoch {
			if e.epoch > epoch {
				end = 0
			}
			epoch, ok = e.epoch, true
			end = max(end, e.first+uint64(len(e.msgs)))
		}
	}
	return epoch, end, ok && end > 0
}

// rebuildEpoch is the incarnation a replay rebuilds from entries (all of
// one partition) alone, and whether it does: the newest with a fresh entry
// at offset 0 that is newer than the directory's (inc, if have).
func rebuildEpoch(entries []journalEntry, inc uint64, have bool) (uint64, bool) {
	var fresh uint64
	rebuild := false
	for _, e := range entries {
		if e.fresh && e.first == 0 && (!have || e.epoch > inc) && (!rebuild || e.epoch > fresh) {
			fresh, rebuild = e.epoch, true
		}
	}
	return fresh, rebuild
}

// heldReplay is what a replay left to a partition's Build (see
// replayJournals): its journal records, and the damaged journal file
// that fences it, if one does.
type heldReplay struct {
	entries []journalEntry
	journal error
}

// hold records a partition whose replay is left to its Build. A damaged
// journal (journal) adds to what its replay left.
func (s *FileStore) hold(ns metadata.Namespace, entries []journalEntry, journal error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held == nil {
		s.held = make(map[metadata.Namespace]heldReplay)
	}
	h := s.held[ns]
	h.entries = entries
	h.journal = cmp.Or(h.journal, journal)
	s.held[ns] = h
}

// applyHeld applies to p, just opened, the replay its open left to it
// (hold), as the replay would have, and fences it for what that cannot
// apply: a record past the log's end (the messages between were lost)
// makes a hole from the log's end to the last record's end (reads in it
// answer the *CorruptError), a damaged journal one at the log's end that
// no read reaches; reads below are served, and appends are refused with
// the *CorruptError, so no offset is handed out twice. The records stay held: a later Build of
// the same incarnation (a rebuild after a fence) meets the same gap.
//
// It returns p, or the partition reopened by repairFromJournal; on error
// p is still the caller's to close.
func (s *FileStore) applyHeld(p *filePartition) (*filePartition, error) {
	s.mu.Lock()
	h, ok := s.held[p.ns]
	s.mu.Unlock()
	if !ok {
		return p, nil
	}
	p, err := s.repairFromJournal(p, h.entries)
	if err != nil {
		return p, err
	}
	var end uint64
	for _, e := range h.entries {
		if e.ns == p.ns && e.epoch == p.epoch {
			end = max(end, e.first+uint64(len(e.msgs)))
		}
	}
	from := p.next
	err = p.applyJournal(h.entries)
	var ce *CorruptError
	if err != nil && !errors.As(err, &ce) {
		return p, err
	}
	if p.next > from {
		if err := p.Sync(); err != nil {
			return p, err
		}
	}
	switch {
	case err == nil:
	case p.fenced != nil:
		// Damaged already, its damage reported: what the journal holds
		// past it cannot be appended, and its offsets are a hole, so
		// that no purge hands them out again.
		if end > p.next {
			p.holes = append(p.holes, hole{from: p.next, to: end, err: ce})
			p.next = end
		}
		return p, nil
	case end > p.next:
		p.holes = append(p.holes, hole{from: p.next, to: end, err: ce})
		p.fenced = fmt.Errorf("partition %v: writes refused: its journal holds records past its log's end, the messages between lost: %w", p.ns, ce)
		p.next = end
	default:
		return p, err
	}
	if errors.As(h.journal, &ce) && p.fenced == nil {
		p.fenceJournalDamage(ce)
	}
	return p, nil
}

// fenceJournalDamage fences p for ce, a damaged journal file that may
// have held records of p past its log's end. Where the lost records would
// end is unknown: the hole starts at the log's end (Damage reports it),
// which stays where it is (every offset below it is served; none past it
// was seen), and appends are refused.
func (p *filePartition) fenceJournalDamage(ce *CorruptError) {
	p.holes = append(p.holes, hole{from: p.next, to: p.next + 1, err: ce})
	p.fenced = fmt.Errorf("partition %v: writes refused: a journal file is damaged, and records of the partition past its log's end may be lost with it: %w", p.ns, ce)
}

// applyJournal appends to p what entries hold of its incarnation beyond
// its log's end, in order (see replayJournals).
func (p *filePartition) applyJournal(entries []journalEntry) error {
	return walkJournal(entries, p.ns, p.epoch, func() uint64 { return p.next }, func(msgs []Message) error {
		_, err := p.Append(msgs)
		return err
	})
}

// walkJournal passes to apply, in order, what entries hold of ns at epoch
// beyond next() (the log's end, which apply advances), as a replay appends
// it.
func walkJournal(entries []journalEntry, ns metadata.Namespace, epoch uint64, next func() uint64, apply func([]Message) error) error {
	for _, e := range entries {
		if e.ns != ns || e.epoch != epoch {
			continue // another partition's, or another incarnation's
		}
		end := e.first + uint64(len(e.msgs))
		if end <= next() {
			continue // held already
		}
		if e.first > next() {
			if e.uncertain {
				// Written for FsyncInterval without an fdatasync: a
				// power loss may have lost the records before it (in
				// an older file the kernel did not write back), as that
				// policy allows. Nothing certain comes after them.
				continue
			}
			return corruptf(e.path, e.pos, "journal record of %v at offsets [%d, %d), but its log ends at %d", ns, e.first, end, next())
		}
		if err := apply(e.msgs[next()-e.first:]); err != nil {
			return err
		}
	}
	return nil
}

// lostRecords names the journal files that may hold records of a
// partition incarnation that its files lack (see Journal.lost).
type lostRecords struct {
	epoch  uint64
	lo, hi uint64 // journal file numbers
}

// markLost records that ns at epoch was closed with records in journal
// files lo..hi that its files may lack.
func (s *FileStore) markLost(ns metadata.Namespace, epoch, lo, hi uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.lost[ns]; ok && l.epoch == epoch {
		lo, hi = min(lo, l.lo), max(hi, l.hi)
	}
	s.lost[ns] = lostRecords{epoch: epoch, lo: lo, hi: hi}
}

// hasLost reports whether markLost recorded ns at epoch.
func (s *FileStore) hasLost(ns metadata.Namespace, epoch uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.lost[ns]
	return ok && l.epoch == epoch
}

// forgetLost drops what markLost recorded for ns: its directory is gone.
func (s *FileStore) forgetLost(ns metadata.Namespace) {
	s.mu.Lock()
	delete(s.lost, ns)
	s.mu.Unlock()
}

// reapplyLost applies to p, just reopened, the journal records its files
// may lack because its fsync failed before it was closed: after a failed
// fsync the kernel may drop the written pages, so a log rebuilt from its
// files could lack messages acknowledged through the journal, and hand
// their offsets to new ones. The journal files concerned are kept until
// the next open (Journal.lost); the records are read back from them
// (a frame another shard is writing at the end of a file reads as torn
// and holds none of p's, which is closed), appended, and synced.
//
// A file whose frames end before this process synced it lost
// acknowledged records (a disk that lies: a frame written elsewhere, or
// not at all, reads as zeros, which alone look like a torn tail; a failed
// write is truncated only to where it began, never below a synced end).
// As the replay does for a file cut below its mark, the whole frames
// before the cut are applied and p is fenced at its log's end with the
// *CorruptError (reads below it served, appends refused: none of the lost
// records' offsets is given out again). The process knows its synced ends
// exactly, so here there is no window as the mark's after a power loss.
// What was lost stays recorded, so every later rebuild of p in the
// process fences it again; the next open's replay judges the files kept
// by the mark.
//
// It returns p, or the partition reopened by repairFromJournal.
func (s *FileStore) reapplyLost(p *filePartition) (*filePartition, error) {
	s.mu.Lock()
	l, ok := s.lost[p.ns]
	s.mu.Unlock()
	if !ok || l.epoch != p.epoch {
		return p, nil
	}
	// Taken before the files are read: whatever a sync made durable by
	// then is in the bytes read.
	synced := journalMark{ends: s.journal().syncedEnds()}
	var all []journalEntry
	var damaged *CorruptError
	for seq := l.lo; seq <= l.hi; seq++ {
		path := s.journalFile(seq)
		b, err := vfs.ReadFile(s.fs, path)
		if isNotExist(err) {
			continue // another journal's number, or pruned: nothing of p's
		}
		if err != nil {
			return p, fmt.Errorf("parkway: journal: %w", err)
		}
		entries, end, err := decodeJournalTo(b, path)
		if err != nil {
			return p, err
		}
		if err := checkJournalEnd(synced, seq, path, int64(end)); err != nil && damaged == nil {
			errors.As(err, &damaged)
		}
		all = append(all, entries...)
	}
	p, err := s.repairFromJournal(p, all)
	if err != nil {
		return p, err
	}
	if err := p.applyJournal(all); err != nil {
		return p, err
	}
	if err := p.Sync(); err != nil {
		return p, err
	}
	if damaged != nil {
		p.fenceJournalDamage(damaged)
		return p, nil
	}
	s.forgetLost(p.ns)
	return p, nil
}

// repairFromJournal repairs a damaged tail that the journal's records
// cover. A partition in a journal does not fsync its tail at every
// commit: the journal holds every record the tail may lack, and after a
// power loss (or a failed fsync, whose kernel may drop written pages
// anywhere in the file) the tail may read as damage — a stretch the disk
// never got, followed by records it did — where nothing acknowledged is
// lost. If the journal's records of p's incarnation cover, without a
// gap, every offset from p's first damaged tail record to p's end, the
// tail is truncated at that record (and fsynced) and p reopened: the
// caller's applyJournal then appends the rest from the journal. Otherwise
// p is returned as it is (fenced: its damage is reported). On error p is
// still the caller's to close.
func (s *FileStore) repairFromJournal(p *filePartition, entries []journalEntry) (*filePartition, error) {
	if p.fenced == nil {
		return p, nil
	}
	tail := p.tail()
	var h *hole
	for i := range p.holes {
		if p.holes[i].err.Path == tail.logPath && p.holes[i].from >= tail.base {
			h = &p.holes[i]
			break
		}
	}
	if h == nil {
		return p, nil
	}
	// The covered range [lo, hi): the entries of p's incarnation, in
	// journal order, as long as each starts within what the ones before
	// it cover.
	var lo, hi uint64
	started := false
	for _, e := range entries {
		if e.ns != p.ns || e.epoch != p.epoch || len(e.msgs) == 0 {
			continue
		}
		end := e.first + uint64(len(e.msgs))
		switch {
		case !started:
			lo, hi, started = e.first, end, true
		case e.first <= hi:
			lo, hi = min(lo, e.first), max(hi, end)
		}
	}
	if !started || lo > h.from || hi < p.next {
		return p, nil
	}
	pos := h.err.Offset
	if err := p.closeFiles(); err != nil {
		return p, err
	}
	f, err := s.fs.OpenFile(tail.logPath, os.O_RDWR, 0)
	if err != nil {
		return p, err
	}
	err = f.Truncate(pos)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return p, err
	}
	np, err := s.open(p.ns, p.epoch, p.dir, false)
	if err != nil {
		return p, err // its files are closed: closing it again is harmless
	}
	return np, nil
}

// parseJournalName returns the number of a journal file name.
func parseJournalName(name string) (uint64, bool) {
	digits, ok := strings.CutSuffix(name, journalExt)
	if !ok || len(digits) != 20 {
		return 0, false
	}
	seq, err := strconv.ParseUint(digits, 10, 64)
	if err != nil || seq == 0 {
		return 0, false
	}
	return seq, true
}

// ensureJournalDir creates the journal directory and makes its entry
// durable, once per store.
func (s *FileStore) ensureJournalDir() error {
	if s.journalReady.Load() {
		return nil
	}
	if err := s.fs.MkdirAll(s.journalPath(), 0o755); err != nil {
		return err
	}
	if err := s.fs.SyncDir(s.cfg.Dir); err != nil {
		return err
	}
	s.journalReady.Store(true)
	return nil
}
