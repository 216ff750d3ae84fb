package partition

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"maps"
	"path/filepath"
	"slices"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/vfs"
)

// The partitions manifest: which partitions had a directory of their own,
// and which journal files may hold records a partition's files lack.
//
// Why. A partition directory that is missing looks the same as a deferred
// partition (BuildDeferred) that never needed files, once the journal no
// longer holds its records: both are a partition in the metadata with no
// directory, and the node builds either one empty. And a journal file
// that is missing leaves nothing behind at all. Only a record kept
// outside the directories and the journal can tell, and the offline
// verify reads it to report a removed directory or journal file as
// damage. A record kept as the directories are made would cost a write on
// every partition's first files; the manifest instead is written at the
// rare moments that change what it must say:
//
//   - when the journal starts a file, before the first frame goes into
//     it (once per journal file: JournalFileSize, 64 MiB by default, of
//     records, or a failed write), listing it;
//   - when the journal is about to remove files (prune), listing the
//     partition directories the store holds then and the journal files
//     it keeps: a removal waits for the manifest, and a manifest that
//     cannot be written keeps the files;
//   - when an opening store has replayed its journal, before it removes
//     the replayed files;
//   - at a clean close, after every partition's files are synced.
//
// What it proves. A journal file it lists existed, durable, when it was
// written, and is removed only after a later manifest leaves it out: a
// listed file that is missing was lost (the records of its entries with
// it). An entry (namespace, incarnation) says the directory existed when
// it was written; a partition that got a durable directory since has
// records in a journal file that is not removed before a manifest lists
// the directory, so one of the two tells its removal, except for a
// partition that got its directory without a journaled record (FsyncNever
// topics, whose partitions always get files and verify always expects,
// and a partition whose first write was a consumer offset). Entries may be
// stale: the partitions deleted or recreated since are still in it, so a
// reader trusts an entry only for the incarnation the metadata still
// holds. A directory listed whose layout was not yet durable may be gone
// after a crash; its journal entries are then fresh ones, from which the
// node rebuilds it, and a reader must ask the journal first.
//
// The synced end. Each entry also records how far its partition's log
// was durable (synced, and committed) when the manifest was written: the
// log's synced end. A crash never takes a log below it, so a log found
// shorter — its last segment cut short, rolled back to an earlier synced
// copy, or its last segments deleted with their indexes — lost messages
// that were acknowledged: Build reports it (a *CorruptError naming the
// last segment) and fences the partition for writes, with the offsets up
// to the synced end a hole, rather than truncate it as a torn tail and
// give the offsets out again. The manifest is written at the moments
// listed above, none on the path that acknowledges a message; what it
// does not yet record is in the journal, whose records replay (or, if
// the log ends before one, a *CorruptError) makes good, since a journal
// file is removed only after a manifest recorded the ends its records
// reached. A partition written without the journal (not FsyncAlways, or
// its first commit after a build, which is a direct fsync) is covered
// from the next manifest on: the journal's next file, its next prune, the
// next open or clean close. Ends only grow for an incarnation: a manifest
// keeps the end the last one recorded for an incarnation it still
// lists, whatever the partition's files say now.
//
// Format (little endian): "PWPM", a version byte, the entry count
// (uint32), count × (namespace uint64, incarnation uint64, synced end
// uint64); then the journal file count (uint32) and count × file number
// (uint64, ascending); then the CRC-32C of everything before it. Version
// 2 (entries without the synced end) and version 1 (no journal list
// either) are still read. The file is replaced atomically.

const (
	manifestName     = "PARTITIONS"
	manifestVersion1 = 1
	manifestVersion2 = 2
	manifestVersion  = 3
	manifestHeader   = 4 + 1 + 4
	manifestEntry2   = 16 // versions 1 and 2
	manifestEntry    = 24
)

var manifestMagic = [4]byte{'P', 'W', 'P', 'M'}

// ManifestPath is the manifest's file in a store's directory.
func ManifestPath(dir string) string { return filepath.Join(dir, manifestName) }

// Manifest is what a manifest records.
type Manifest struct {
	// Partitions maps a partition that had a directory to the incarnation
	// in it.
	Partitions map[metadata.Namespace]uint64
	// Journal lists the journal files that may hold records a
	// partition's files lack (ascending). JournalKnown is false for a
	// manifest of version 1, which does not say.
	Journal      []uint64
	JournalKnown bool
	// Ends maps a partition to its log's synced end in the incarnation
	// Partitions names (absent: 0, or a manifest older than version 3).
	Ends map[metadata.Namespace]uint64
}

// RecordPartitions writes the manifest from the partition directories the
// store holds now (List) and the journal's files: call it once every
// partition is closed, at a clean shutdown. Directories whose incarnation
// is unknown (half-built or damaged) are left out.
func (s *FileStore) RecordPartitions() error {
	if s.readOnly {
		return vfs.ErrReadOnly
	}
	parts, err := s.listedPartitions()
	if err != nil {
		return err
	}
	return s.writeManifest(parts)
}

// recordBeforePrune writes the manifest before the journal removes
// files: the directories the store holds now, the files it keeps.
func (s *FileStore) recordBeforePrune() error {
	parts, err := s.listedPartitions()
	if err != nil {
		return err
	}
	return s.writeManifest(parts)
}

// listedPartitions is what List finds, as the manifest records it.
func (s *FileStore) listedPartitions() (map[metadata.Namespace]uint64, error) {
	stored, err := s.List()
	if err != nil {
		return nil, err
	}
	m := make(map[metadata.Namespace]uint64, len(stored))
	for _, st := range stored {
		switch {
		case st.Epoch != 0 && st.Damage == nil:
			m[st.NS] = st.Epoch
		case st.Damage != nil:
			// A damaged incarnation file: the incarnation synced there,
			// if known, stays recorded with its end, so the next open
			// still tells the directory from a half-built one
			// (incarnationLost).
			if e := s.syncedIncarnation(st.NS); e.end > 0 {
				m[st.NS] = e.epoch
			}
		}
	}
	return m, nil
}

// writeManifest writes the manifest with parts (nil: the partitions the
// last manifest recorded) and the journal's files as they are now, read
// while the manifest lock is held: writes are serialised and each lists
// every file created before it, so no later write drops a file an
// earlier one listed unless prune removed it from the list first.
func (s *FileStore) writeManifest(parts map[metadata.Namespace]uint64) error {
	s.manifestMu.Lock()
	defer s.manifestMu.Unlock()
	if parts == nil {
		if s.recorded == nil {
			// The first write since the store opened: start from the
			// manifest on disk, or from what the store holds.
			if m, err := s.ReadManifest(); err == nil {
				s.recorded = m.Partitions
			} else if s.recorded, err = s.listedPartitions(); err != nil {
				return err
			}
		}
		parts = s.recorded
	}
	var journal []uint64
	if l := s.jlog; l != nil {
		l.mu.Lock()
		journal = slices.Clone(l.files)
		l.mu.Unlock()
	}
	ends := s.syncedEnds(parts)
	if err := vfs.WriteFileAtomic(s.raw, ManifestPath(s.cfg.Dir), encodeManifest(Manifest{Partitions: parts, Journal: journal, JournalKnown: true, Ends: ends})); err != nil {
		return err
	}
	s.recorded = parts
	return nil
}

// ReadManifest reads the manifest. A store without one (never written)
// answers an error matching fs.ErrNotExist; a damaged one a
// *CorruptError.
func (s *FileStore) ReadManifest() (Manifest, error) {
	path := ManifestPath(s.cfg.Dir)
	b, err := vfs.ReadFile(s.raw, path)
	if err != nil {
		return Manifest{}, err
	}
	m, err := decodeManifest(b)
	if err != nil {
		var ce *CorruptError
		if errors.As(err, &ce) {
			ce.Path = path
		}
		return Manifest{}, err
	}
	return m, nil
}

// encodeManifest encodes m, its partitions in namespace order: version
// 3, or version 1 if !m.JournalKnown.
func encodeManifest(m Manifest) []byte {
	version, entry := byte(manifestVersion), manifestEntry
	if !m.JournalKnown {
		version, entry = manifestVersion1, manifestEntry2
	}
	b := make([]byte, 0, manifestHeader+len(m.Partitions)*entry+4+8*len(m.Journal)+4)
	b = append(b, manifestMagic[:]...)
	b = append(b, version)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m.Partitions)))
	for _, ns := range slices.Sorted(maps.Keys(m.Partitions)) {
		b = binary.LittleEndian.AppendUint64(b, uint64(ns))
		b = binary.LittleEndian.AppendUint64(b, m.Partitions[ns])
		if m.JournalKnown {
			b = binary.LittleEndian.AppendUint64(b, m.Ends[ns])
		}
	}
	if m.JournalKnown {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(m.Journal)))
		for _, seq := range m.Journal {
			b = binary.LittleEndian.AppendUint64(b, seq)
		}
	}
	return appendCRC(b)
}

// appendCRC appends the CRC-32C of b.
func appendCRC(b []byte) []byte {
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// decodeManifest decodes a manifest. Every byte is checked: each count
// against the bytes that follow before anything is allocated, the
// checksum, each namespace and incarnation, and the journal files'
// order.
func decodeManifest(b []byte) (Manifest, error) {
	if len(b) < manifestHeader+4 {
		return Manifest{}, corruptf("", 0, "manifest of %d bytes is shorter than its header", len(b))
	}
	if [4]byte(b[:4]) != manifestMagic {
		return Manifest{}, corruptf("", 0, "not a partitions manifest (magic %q)", b[:4])
	}
	version := b[4]
	if version < manifestVersion1 || version > manifestVersion {
		return Manifest{}, corruptf("", 4, "manifest version %d, want %d to %d", b[4], manifestVersion1, manifestVersion)
	}
	entry := manifestEntry2
	if version == manifestVersion {
		entry = manifestEntry
	}
	body := b[:len(b)-4]
	if sum := binary.LittleEndian.Uint32(b[len(b)-4:]); sum != crc32.Checksum(body, castagnoli) {
		return Manifest{}, corruptf("", int64(len(b)-4), "manifest checksum mismatch")
	}
	n := binary.LittleEndian.Uint32(b[5:])
	end := uint64(manifestHeader) + uint64(n)*uint64(entry)
	switch {
	case version == manifestVersion1 && end != uint64(len(body)),
		version != manifestVersion1 && end+4 > uint64(len(body)):
		return Manifest{}, corruptf("", 5, "manifest counts %d entries in %d bytes", n, len(body)-manifestHeader)
	}
	m := Manifest{Partitions: make(map[metadata.Namespace]uint64, n), Ends: make(map[metadata.Namespace]uint64)}
	for off := manifestHeader; off < int(end); off += entry {
		ns := metadata.Namespace(binary.LittleEndian.Uint64(body[off:]))
		epoch := binary.LittleEndian.Uint64(body[off+8:])
		if err := checkNamespace(ns); err != nil || epoch == 0 {
			return Manifest{}, corruptf("", int64(off), "manifest entry for namespace %#x, incarnation %d, is not a partition's", uint64(ns), epoch)
		}
		if _, dup := m.Partitions[ns]; dup {
			return Manifest{}, corruptf("", int64(off), "manifest names partition %v twice", ns)
		}
		m.Partitions[ns] = epoch
		if entry == manifestEntry {
			if e := binary.LittleEndian.Uint64(body[off+16:]); e != 0 {
				m.Ends[ns] = e
			}
		}
	}
	if version == manifestVersion1 {
		return m, nil
	}
	m.JournalKnown = true
	jn := binary.LittleEndian.Uint32(body[end:])
	if uint64(jn)*8 != uint64(len(body))-end-4 {
		return Manifest{}, corruptf("", int64(end), "manifest counts %d journal files in %d bytes", jn, uint64(len(body))-end-4)
	}
	for off := int(end) + 4; off < len(body); off += 8 {
		seq := binary.LittleEndian.Uint64(body[off:])
		if seq == 0 || len(m.Journal) > 0 && seq <= m.Journal[len(m.Journal)-1] {
			return Manifest{}, corruptf("", int64(off), "manifest lists journal file %d out of order", seq)
		}
		m.Journal = append(m.Journal, seq)
	}
	return m, nil
}
