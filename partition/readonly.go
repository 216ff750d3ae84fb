package partition

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/vfs"
)

// Offline access: a FileStore opened read-only, for tools that look at a
// data directory without being its node (inspect, dump, verify). It runs
// the node's own code — the same listing, the same open of every segment
// with the same checks, the same record decoding — with every repair left
// out: a torn tail is not truncated, an index is not rewritten, no
// journal is replayed, no half-built directory is discarded, and the
// filesystem underneath is wrapped in vfs.ReadOnly, so a path that would
// change a byte fails instead.

// OpenReadOnlyStore opens the partition store in dir for reading only (see
// above). fsys nil means the operating system's filesystem. Build opens a
// partition as found, at the epoch its incarnation file records (List
// gives it); a directory that does not hold that incarnation is an error
// matching fs.ErrNotExist. Writes to its partitions fail.
func OpenReadOnlyStore(dir string, fsys vfs.FS) (*FileStore, error) {
	if fsys == nil {
		fsys = vfs.Default
	}
	fsys = vfs.ReadOnly(fsys)
	fi, err := fsys.Stat(dir)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s: not a directory", dir)
	}
	cfg := FileConfig{Dir: dir, FS: fsys, SegmentSize: DefaultSegmentSize, MaxOpenFiles: DefaultMaxOpenFiles()}
	c := newHandleCache(fsys, cfg.MaxOpenFiles)
	s := &FileStore{
		cfg: cfg, fs: budgetFS{FS: fsys, c: c}, raw: fsys, handles: c, dirs: newDirSyncs(),
		busy: make(map[metadata.Namespace]struct{}), lost: make(map[metadata.Namespace]lostRecords),
		readOnly: true,
	}
	s.located = storeFS{budgetFS{FS: fsys, c: c}}
	s.loadSyncedEnds() // a log shorter than it was synced reads as the node finds it
	return s, nil
}

// notStored is a read-only Build's answer for a directory that does not
// hold incarnation epoch (inc and err are what reading it gave).
func (s *FileStore) notStored(ns metadata.Namespace, epoch, inc uint64, err error) error {
	switch {
	case err == nil:
		return fmt.Errorf("partition %v: %w: the directory holds incarnation %d, not %d", ns, fs.ErrNotExist, inc, epoch)
	case isNotExist(err):
		return fmt.Errorf("partition %v: %w: no incarnation file", ns, err)
	case errors.Is(err, errBadIncarnation):
		return fmt.Errorf("partition %v: %w: %w", ns, fs.ErrNotExist, err)
	}
	return err
}

// readTail is openTail for a read-only store: the tail is verified record
// by record, its logical end is the last whole record, and damage with
// whole records after it is returned as holes, as openTail finds them;
// but the file is left as it is.
func (s *FileStore) readTail(seg *segment, buf []byte) ([]byte, []hole, error) {
	seg.log = s.handles.newHandle(seg.logPath, os.O_RDONLY)
	fi, err := seg.log.Stat()
	if err != nil {
		return buf, nil, err
	}
	end, next, holes, buf, err := seg.scanTail(fi.Size(), buf) // as openTail judges it
	if err != nil {
		return buf, nil, err
	}
	// synced: a reader has nothing to make durable (Close must not sync).
	seg.size, seg.next, seg.maxTSKnown, seg.synced = end, next, true, true
	if len(holes) > 0 {
		seg.damaged = holes[0].err
	}
	return buf, holes, nil
}

// SegmentInfo describes one segment of a FileStore partition.
type SegmentInfo struct {
	// Path is the segment's log file.
	Path string
	// Base is its first offset, Next the offset after its last record.
	Base, Next uint64
	// Size is its logical size: the end of its last whole record.
	Size int64
}

// Layout is implemented by FileStore partitions: where they keep what.
type Layout interface {
	// Dir is the partition's directory.
	Dir() string
	// Segments lists the segments, oldest first.
	Segments() []SegmentInfo
	// ConsumerOffsets returns every stored consumer offset, by consumer.
	ConsumerOffsets() map[string]uint64
}

func (p *filePartition) Dir() string { return p.dir }

func (p *filePartition) Segments() []SegmentInfo {
	out := make([]SegmentInfo, len(p.segs))
	for i, s := range p.segs {
		out[i] = SegmentInfo{Path: s.logPath, Base: s.base, Next: s.next, Size: s.size}
	}
	return out
}

func (p *filePartition) ConsumerOffsets() map[string]uint64 {
	out := make(map[string]uint64, len(p.consumers))
	for k, v := range p.consumers {
		out[k] = v
	}
	return out
}

// Problem is one thing VerifyPartition or VerifyJournals found wrong.
type Problem struct {
	// Path is the file, Offset the byte position in it.
	Path   string
	Offset int64
	// Err describes it; a *CorruptError for damage to records.
	Err error
	// Repair says what a node opening the directory does about it ("" if
	// nothing: the node refuses to open the partition, reports the damage
	// on the read that reaches it, or loses what it cannot see).
	Repair string
}

func (p Problem) String() string {
	s := fmt.Sprintf("%s at byte %d: %v", p.Path, p.Offset, unwrapCorrupt(p.Err))
	if p.Repair != "" {
		s += " (" + p.Repair + ")"
	}
	return s
}

// unwrapCorrupt drops a *CorruptError's own path and offset, which the
// Problem prints already.
func unwrapCorrupt(err error) error {
	var ce *CorruptError
	if errors.As(err, &ce) && ce.Err != nil {
		return ce.Err
	}
	return err
}

// VerifyPartition reads every record, index entry, time index entry and
// consumer offset of the partition directory of ns with the node's own
// decoders, and returns every problem found: unlike a Build, which stops
// at the first, it goes on to the next segment. It changes nothing
// (the store is read-only). An error is returned only when the directory
// cannot be read at all.
func (s *FileStore) VerifyPartition(ns metadata.Namespace) ([]Problem, error) {
	if err := checkNamespace(ns); err != nil {
		return nil, err
	}
	dir := s.partitionDir(ns)
	var out []Problem
	add := func(path string, off int64, repair string, err error) {
		out = append(out, Problem{Path: path, Offset: off, Err: err, Repair: repair})
	}
	if _, err := readIncarnation(s.fs, dir); err != nil {
		const repair = "the node discards the directory as half-built and starts the partition over, empty"
		switch {
		case isNotExist(err):
			add(filepath.Join(dir, incarnationFile), 0, repair, errors.New("incarnation file missing"))
		case errors.Is(err, errBadIncarnation):
			add(filepath.Join(dir, incarnationFile), 0, repair, errors.New("incarnation file unparsable or torn"))
		case errors.As(err, new(*CorruptError)):
			add(filepath.Join(dir, incarnationFile), 0,
				"the node keeps the directory and refuses to build the partition; rewrite the record (the epoch and a newline) or remove the directory", err)
		default:
			return nil, err
		}
	}
	start, err := readStart(s.fs, dir)
	if err != nil {
		var ce *CorruptError
		if !errors.As(err, &ce) {
			return nil, err
		}
		add(ce.Path, ce.Offset, "", err)
	}
	names, err := s.fs.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var bases []uint64
	for _, name := range names {
		if base, ok := parseSegmentName(name); ok {
			bases = append(bases, base)
		}
	}
	slices.Sort(bases)
	// Segments wholly below start are deleted at open (a truncation a
	// crash interrupted): they are not the log.
	for len(bases) > 1 && bases[1] <= start {
		bases = bases[1:]
	}
	if len(bases) > 0 && bases[0] > start {
		add(filepath.Join(dir, segmentName(bases[0], logExt)), 0, "",
			fmt.Errorf("the log starts at offset %d, its start offset is %d: the segments before it are missing", bases[0], start))
	}
	var buf []byte
	var prev *segment
	prevWhole := true
	for i, base := range bases {
		seg := newSegment(dir, base)
		tail := i == len(bases)-1
		var problems []Problem
		var whole bool
		problems, whole, buf, err = s.verifySegment(seg, tail, buf)
		if err != nil {
			return nil, err
		}
		// A gap after a damaged segment is that damage, reported already.
		if prev != nil && base != prev.next && prevWhole {
			add(prev.logPath, prev.size, "",
				corruptf(prev.logPath, prev.size, "segment ends at offset %d but the next segment starts at %d", prev.next, base))
		}
		out = append(out, problems...)
		prev, prevWhole = seg, whole
	}
	next := start
	if prev != nil {
		next = max(next, prev.next)
	}
	out = append(out, s.verifyConsumers(filepath.Join(dir, consumersDir), next)...)
	return out, nil
}

// verifySegment scans the whole of seg and checks its index files
// against what the scan finds.
// whole reports whether its records run whole to the end of the file.
func (s *FileStore) verifySegment(seg *segment, tail bool, buf []byte) (_ []Problem, whole bool, _ []byte, _ error) {
	var out []Problem
	seg.log = s.handles.newHandle(seg.logPath, os.O_RDONLY)
	defer seg.close()
	fi, err := seg.log.Stat()
	if err != nil {
		return nil, false, buf, err
	}
	size := fi.Size()
	end, next, buf, err := seg.scan(0, seg.base, size, buf, true)
	seg.size, seg.next = end, next
	var ce *CorruptError
	switch {
	case errors.As(err, &ce):
		repair := ""
		if tail {
			repair = fmt.Sprintf("the node truncates the tail segment here, dropping %d bytes", size-end)
			// Judged as the node's open judges it (scanTail): the scan
			// is returned from below, so seg's state no longer matters.
			_, _, holes, b, terr := seg.scanTail(size, buf)
			if buf = b; terr != nil {
				return nil, false, buf, terr
			}
			if len(holes) > 0 {
				repair = "the node keeps the file: the record is damage, not a torn write (it was written whole, or whole records follow it); reads stop at it and writes to the partition are refused"
			}
		}
		out = append(out, Problem{Path: ce.Path, Offset: ce.Offset, Err: err, Repair: repair})
	case err != nil:
		return nil, false, buf, err
	case end < size:
		repair := ""
		if tail {
			repair = "the node truncates the tail segment here"
		}
		out = append(out, Problem{Path: seg.logPath, Offset: end, Repair: repair,
			Err: fmt.Errorf("records end at byte %d (offset %d), then %d bytes of zeros to the end of the file", end, next, size-end)})
	}
	if err != nil || end < size {
		return out, false, buf, nil // the index past the damage cannot be judged
	}
	repair := "the node rebuilds the index when it opens the partition"
	if present, err := s.exists(seg.indexPath()); err != nil {
		return nil, false, buf, err
	} else if !present {
		out = append(out, Problem{Path: seg.indexPath(), Repair: repair, Err: errors.New("index file missing")})
	} else {
		es, exact, err := loadIndex(s.fs, seg.indexPath())
		if err != nil {
			return nil, false, buf, err
		}
		if p, ok := compareIndex(seg, es, exact, tail); !ok {
			// The node rewrites a tail's index at open, and a sealed
			// segment's when it fails the checks made without reading
			// the log; one that passes them is trusted unless
			// VerifyOnOpen rescans the segment.
			p.Repair = repair
			if !tail && exact && len(es) > 0 && plausibleIndex(es, size) && es[len(es)-1] == seg.index[min(len(es), len(seg.index))-1] {
				p.Repair = "the node trusts this index at open unless VerifyOnOpen is set, and a read that seeks by this entry fails as damaged"
			}
			out = append(out, p)
		}
	}
	p, err := s.verifyTimeIndex(seg, tail)
	if err != nil {
		return nil, false, buf, err
	}
	if p != nil {
		out = append(out, *p)
	}
	return out, true, buf, nil
}

// exists reports whether path exists.
func (s *FileStore) exists(path string) (bool, error) {
	_, err := s.fs.Stat(path)
	if isNotExist(err) {
		return false, nil
	}
	return err == nil, err
}

// verifyTimeIndex checks seg's time index file against the offset index
// and the append times the scan of seg found. A tail's may lag behind its
// records, as its offset index does.
func (s *FileStore) verifyTimeIndex(seg *segment, tail bool) (*Problem, error) {
	path := seg.timeIndexPath()
	repair := "the node rebuilds the time index"
	fi, err := s.fs.Stat(path)
	if isNotExist(err) {
		return &Problem{Path: path, Repair: repair, Err: errors.New("time index file missing")}, nil
	}
	if err != nil {
		return nil, err
	}
	n := fi.Size() / timeEntrySize
	switch {
	case fi.Size()%timeEntrySize != 0:
		return &Problem{Path: path, Offset: n * timeEntrySize, Repair: repair, Err: errors.New("torn time index entry at the end of the file")}, nil
	case n > int64(len(seg.index)):
		return &Problem{Path: path, Offset: int64(len(seg.index)) * timeEntrySize, Repair: repair,
			Err: fmt.Errorf("time index holds %d entries, the records call for %d", n, len(seg.index))}, nil
	case n < int64(len(seg.index)) && !tail:
		return &Problem{Path: path, Offset: n * timeEntrySize, Repair: repair,
			Err: fmt.Errorf("time index holds %d entries, the records call for %d", n, len(seg.index))}, nil
	}
	times, ok, err := loadTimeIndex(s.fs, path, seg.index[:n])
	if err != nil {
		return nil, err
	}
	if !ok {
		return &Problem{Path: path, Repair: repair, Err: errors.New("time index entries do not name the offset index's records")}, nil
	}
	for i := range times {
		if times[i] != seg.times[i] {
			// A sealed segment's time index is checked at open by its
			// last entry only (openSealed); a wrong earlier one stays.
			if !tail && i < len(times)-1 {
				repair = "the node trusts it at open: a search by time may start at the wrong record"
			}
			return &Problem{Path: path, Offset: int64(i) * timeEntrySize, Repair: repair,
				Err: fmt.Errorf("time index entry %d says append time %d, the record it names has %d", i, times[i], seg.times[i])}, nil
		}
	}
	return nil, nil
}

// compareIndex checks an index file's entries es against those the scan
// of seg built. A tail's index file may lag behind its records (it is
// written in batches and completed at Close): there a missing suffix is
// not a problem, only an entry that disagrees.
func compareIndex(seg *segment, es []indexEntry, exact, tail bool) (Problem, bool) {
	path := seg.indexPath()
	for i, e := range es {
		if i >= len(seg.index) {
			return Problem{Path: path, Offset: int64(i) * indexEntrySize,
				Err: fmt.Errorf("index entry %d (offset %d at byte %d) names no record the index rule picks", i, seg.base+uint64(e.rel), e.pos)}, false
		}
		if want := seg.index[i]; e != want {
			return Problem{Path: path, Offset: int64(i) * indexEntrySize,
				Err: fmt.Errorf("index entry %d says offset %d at byte %d, the records put offset %d at byte %d",
					i, seg.base+uint64(e.rel), e.pos, seg.base+uint64(want.rel), want.pos)}, false
		}
	}
	switch {
	case !exact:
		return Problem{Path: path, Offset: int64(len(es)) * indexEntrySize, Err: errors.New("torn index entry at the end of the file")}, false
	case len(es) < len(seg.index) && !tail:
		return Problem{Path: path, Offset: int64(len(es)) * indexEntrySize,
			Err: fmt.Errorf("index holds %d entries, the records call for %d", len(es), len(seg.index))}, false
	}
	return Problem{}, true
}

// verifyConsumers checks every consumer offset file in dir.
func (s *FileStore) verifyConsumers(dir string, next uint64) []Problem {
	names, err := s.fs.ReadDir(dir)
	if err != nil {
		if isNotExist(err) {
			return nil
		}
		return []Problem{{Path: dir, Err: err}}
	}
	var out []Problem
	for _, n := range names {
		if strings.HasPrefix(n, ".") {
			continue
		}
		path := filepath.Join(dir, n)
		b, err := vfs.ReadFile(s.fs, path)
		if err != nil {
			out = append(out, Problem{Path: path, Err: err})
			continue
		}
		name, off, seq, err := decodeConsumerFile(b, path)
		slack := ""
		if err == nil && seq > 0 {
			slack = consumerMarkFormat.Slack(b)
		}
		switch {
		case err != nil:
			out = append(out, Problem{Path: path, Err: err, Repair: ""})
		case slack != "":
			// A slot no newer than the valid one failing its checksum
			// (a store torn by a crash, or damage of the older slot: a
			// damaged newer one is decodeConsumerFile's error), or bytes
			// past a record: nothing acknowledged is lost.
			out = append(out, Problem{Path: path, Repair: "the node reads the valid slot's offset, the last durable store",
				Err: corruptf(path, 0, "consumer offset file: %s", slack)})
		case off > next:
			out = append(out, Problem{Path: path, Repair: "the node clamps it to the end of the log",
				Err: fmt.Errorf("consumer %q's offset %d is past the log's end %d", name, off, next)})
		}
	}
	return out
}

// JournalFile describes one journal file VerifyJournals read.
type JournalFile struct {
	Seq     uint64 // its number, which a manifest lists (Manifest.Journal)
	Path    string
	Size    int64
	Entries int // partition entries in its whole frames
	Records int
}

// VerifyJournals decodes every journal file (records a node replays into
// their partitions when it opens the directory) with the node's decoder
// and returns them with the problems found.
func (s *FileStore) VerifyJournals() ([]JournalFile, []Problem, error) {
	dir := s.journalPath()
	names, err := s.fs.ReadDir(dir)
	if isNotExist(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	var files []JournalFile
	var out []Problem
	// The journal's mark: a file whose frames end before it was synced
	// is damage (journal_mark.go), and a mark with no valid slot is
	// reported (the node reads it as none).
	mark, _, slack, bad := readJournalMark(s.fs, s.journalMarkPath())
	var ce *CorruptError
	switch {
	case errors.As(bad, &ce):
		out = append(out, Problem{Path: ce.Path, Offset: ce.Offset, Err: bad})
	case bad != nil:
		return nil, nil, bad
	case slack != "":
		path := s.journalMarkPath()
		out = append(out, Problem{Path: path, Err: corruptf(path, 0, "journal mark: %s (the node reads its valid slot)", slack)})
	}
	for _, n := range names {
		seq, ok := parseJournalName(n)
		if !ok {
			continue
		}
		path := filepath.Join(dir, n)
		b, err := vfs.ReadFile(s.fs, path)
		if err != nil {
			return nil, nil, err
		}
		jf := JournalFile{Seq: seq, Path: path, Size: int64(len(b))}
		entries, end, err := decodeJournalTo(b, path)
		if err == nil {
			err = checkJournalEnd(mark, seq, path, int64(end))
		}
		switch {
		case errors.As(err, &ce):
			out = append(out, Problem{Path: ce.Path, Offset: ce.Offset, Err: err})
		case err != nil:
			return nil, nil, err
		}
		jf.Entries = len(entries)
		for _, e := range entries {
			jf.Records += len(e.msgs)
		}
		files = append(files, jf)
	}
	return files, out, nil
}

// JournalFilePath is the path journal file seq has in the store.
func (s *FileStore) JournalFilePath(seq uint64) string { return s.journalFile(seq) }

// JournalTail is what the journal files hold of one partition that its
// files lack, as a node opening the directory replays it
// (replayPartition): read with the node's decoder, changing nothing.
type JournalTail struct {
	// Epoch is the incarnation the replay applies Messages to.
	Epoch uint64
	// Rebuild reports that the replay builds the partition from the
	// journal alone: its directory is missing, or holds an older
	// incarnation, and the journal holds the incarnation's records from
	// offset 0 on, written before its directory was durable (a deferred
	// partition, see BuildDeferred).
	Rebuild bool
	// Messages are the records the replay appends, in offset order: from
	// offset 0 if Rebuild, else from the end of the files' log.
	Messages []Message
	// Entries counts the journal's entries of the partition, of any
	// incarnation, including those the replay skips.
	Entries int
}

// JournalTail returns what the journal holds of ns beyond filesEnd, the
// end of its files' log (ignored when the directory holds no
// incarnation). A journal file that cannot be decoded is an error, as it
// is for the node's replay.
func (s *FileStore) JournalTail(ns metadata.Namespace, filesEnd uint64) (JournalTail, error) {
	var out JournalTail
	if err := checkNamespace(ns); err != nil {
		return out, err
	}
	files, err := s.journalFiles()
	if err != nil {
		return out, err
	}
	var entries []journalEntry
	for _, seq := range files {
		path := s.journalFile(seq)
		b, err := vfs.ReadFile(s.fs, path)
		if err != nil {
			return out, fmt.Errorf("parkway: journal: %w", err)
		}
		all, err := decodeJournal(b, path)
		if err != nil {
			return out, err
		}
		for _, e := range all {
			if e.ns == ns {
				entries = append(entries, e)
			}
		}
	}
	out.Entries = len(entries)
	if len(entries) == 0 {
		return out, nil
	}
	inc, err := readIncarnation(s.fs, s.partitionDir(ns))
	have := err == nil
	switch {
	case err == nil:
	case isNotExist(err), errors.Is(err, syscall.ENOTDIR), errors.Is(err, errBadIncarnation):
	default:
		return out, err
	}
	epoch, rebuild := rebuildEpoch(entries, inc, have)
	next := filesEnd
	switch {
	case rebuild:
		next = 0
	case !have:
		return out, nil // the replay skips them all
	default:
		epoch = inc
	}
	out.Epoch, out.Rebuild = epoch, rebuild
	err = walkJournal(entries, ns, epoch, func() uint64 { return next }, func(msgs []Message) error {
		out.Messages = append(out.Messages, msgs...)
		next = msgs[len(msgs)-1].Offset + 1
		return nil
	})
	return out, err
}
