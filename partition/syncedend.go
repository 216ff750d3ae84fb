package partition

import (
	"fmt"
	"path/filepath"

	"github.com/parkway-io/parkway/metadata"
)

// syncedEnd is a partition log's synced end in one incarnation: every
// offset below end was durable in its files (synced, and committed, so
// possibly acknowledged). The manifest records it (manifest.go, "The
// synced end"); a Build that finds the log shorter reports the damage.
type syncedEnd struct {
	epoch, end uint64
}

// loadSyncedEnds reads the synced ends the manifest recorded. A manifest
// that is missing or damaged records none: the logs are then judged as
// before there was one (their files alone), and the next manifest written
// starts again from what the partitions sync.
func (s *FileStore) loadSyncedEnds() {
	s.ends = make(map[metadata.Namespace]syncedEnd)
	m, err := s.ReadManifest()
	if err != nil {
		return
	}
	for ns, end := range m.Ends {
		s.ends[ns] = syncedEnd{epoch: m.Partitions[ns], end: end}
	}
}

// noteSynced raises ns's synced end in epoch to end (a new incarnation
// replaces an older one's): the next manifest written records it.
func (s *FileStore) noteSynced(ns metadata.Namespace, epoch, end uint64) {
	s.endsMu.Lock()
	defer s.endsMu.Unlock()
	if e, ok := s.ends[ns]; !ok || e.epoch != epoch || e.end < end {
		if ok && e.epoch == epoch {
			end = max(end, e.end)
		}
		s.ends[ns] = syncedEnd{epoch: epoch, end: end}
	}
}

// forgetSynced drops ns's synced end: its directory was removed on
// purpose (Remove), or its log emptied on purpose under the same
// incarnation (a Build that starts it over, SetAside). It reports whether
// there was one.
func (s *FileStore) forgetSynced(ns metadata.Namespace) bool {
	s.endsMu.Lock()
	defer s.endsMu.Unlock()
	_, ok := s.ends[ns]
	delete(s.ends, ns)
	return ok
}

// dropSynced is forgetSynced for a log emptied under the incarnation it
// had: the manifest is written at once without ns's synced end, so that
// a crash before the next manifest does not leave one that the empty log
// would be found shorter than. It is rare (a copy set aside, a directory
// started over) and costs one manifest write.
func (s *FileStore) dropSynced(ns metadata.Namespace) error {
	if !s.forgetSynced(ns) {
		return nil
	}
	return s.writeManifest(nil)
}

// syncedEndOf is ns's synced end in epoch (0 if none is known).
func (s *FileStore) syncedEndOf(ns metadata.Namespace, epoch uint64) uint64 {
	s.endsMu.Lock()
	defer s.endsMu.Unlock()
	if e := s.ends[ns]; e.epoch == epoch {
		return e.end
	}
	return 0
}

// syncedEnds is the synced ends of the incarnations parts names, for the
// manifest.
func (s *FileStore) syncedEnds(parts map[metadata.Namespace]uint64) map[metadata.Namespace]uint64 {
	s.endsMu.Lock()
	defer s.endsMu.Unlock()
	out := make(map[metadata.Namespace]uint64)
	for ns, epoch := range parts {
		if e := s.ends[ns]; e.epoch == epoch && e.end > 0 {
			out[ns] = e.end
		}
	}
	return out
}

// noteSynced tells the store how far p's log is durable and committed:
// below both its synced offset and its last commit point (the mark). Only
// what grew is passed on, so a partition costs the store's lock once per
// sync, not per append.
func (p *filePartition) noteSynced() {
	if p.deferred || p.store.readOnly {
		return
	}
	if e := min(p.synced, p.mark); e > p.notedEnd {
		p.notedEnd = e
		p.store.noteSynced(p.ns, p.epoch, e)
	}
}

// checkSyncedEnd compares the log, once opened and given what the
// journal held for it, with its synced end: a log that ends below it was
// cut short or rolled back after it was synced (no crash does that; a
// torn tail lies past the synced end), so acknowledged messages are
// missing. The offsets up to the synced end become a hole, read as the
// *CorruptError, and the partition is fenced for writes: none of them is
// given out again. The files are left as they are.
func (p *filePartition) checkSyncedEnd() {
	end := p.store.syncedEndOf(p.ns, p.epoch)
	if end <= p.next {
		return
	}
	tail := p.tail()
	ce := corruptf(tail.logPath, tail.size, "the log ends at offset %d, but it was synced up to offset %d (the partitions manifest): its end was cut off or rolled back, acknowledged messages are missing", p.next, end)
	p.holes = append(p.holes, hole{from: p.next, to: end, err: ce})
	if p.fenced == nil {
		p.fenced = fmt.Errorf("partition %v: writes refused: its log is shorter than it was synced: %w", p.ns, ce)
	}
	if p.synced == p.next {
		p.synced = end // the hole holds nothing to sync
	}
	p.next = end
	p.setMark()
}

// syncedIncarnation is ns's synced end with its incarnation, if one is
// known.
func (s *FileStore) syncedIncarnation(ns metadata.Namespace) syncedEnd {
	s.endsMu.Lock()
	defer s.endsMu.Unlock()
	return s.ends[ns]
}

// incarnationLost reports, as a *CorruptError naming the incarnation
// file, a partition directory whose incarnation file is missing or cut
// short (err, from readIncarnation), or names an older incarnation (inc),
// although incarnation epoch was synced there: its synced end is known
// (the partitions manifest, or the journal's entries, which are written
// only once a partition's layout, the incarnation file with it, is
// durable). No crash does that — a half-built directory, which Build
// starts over and the orphan sweep removes, never had anything synced —
// so the file was damaged, cut short or rolled back, and the directory
// holds acknowledged messages: it is kept, and Build refuses the
// partition with the error rather than start it over empty. nil if the
// directory is missing, or nothing of epoch was synced.
func (s *FileStore) incarnationLost(ns metadata.Namespace, epoch uint64, dir string, inc uint64, err error) error {
	end := s.syncedEndOf(ns, epoch)
	if end == 0 || err == nil && inc >= epoch {
		return nil
	}
	if _, serr := s.fs.Stat(dir); serr != nil {
		return nil // no directory: nothing to keep
	}
	path := filepath.Join(dir, incarnationFile)
	what := fmt.Sprintf("names incarnation %d", inc)
	switch {
	case isNotExist(err):
		what = "is missing"
	case err != nil:
		what = "is cut short"
	}
	return corruptf(path, 0, "the incarnation file %s, but incarnation %d of partition %v was synced here up to offset %d: the file was damaged; the directory and its acknowledged messages are kept", what, epoch, ns, end)
}
