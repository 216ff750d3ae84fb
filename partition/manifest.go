package partition

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"path/filepath"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/vfs"
)

// The partitions manifest: which partitions had a directory of their own
// when the node last closed cleanly.
//
// Why. A partition directory that is missing looks the same as a deferred
// partition (BuildDeferred) that never needed files, once the journal no
// longer holds its records: both are a partition in the metadata with no
// directory, and the node builds either one empty. Only a record kept
// outside the directory can tell them apart, and the offline verify reads
// it to report a removed directory as damage. A record kept as the
// directories are made would cost a write on every partition's first
// files; the manifest instead is written once, at a clean close, after
// every partition's files are synced, from what the store lists then.
//
// What it proves. An entry (namespace, incarnation) says the directory
// existed, synced, at that close. It may be stale: after a crash the
// file is the one from the close before, and the partitions deleted or
// recreated since then are still in it. A reader therefore trusts an
// entry only for the incarnation the metadata still holds: a deleted
// partition is not in the metadata, a recreated one has another
// incarnation. A partition created after the last clean close is not in
// it at all, and its missing directory cannot be told from an empty
// deferred one.
//
// Format (little endian): "PWPM", a version byte (1), the entry count
// (uint32), count × (namespace uint64, incarnation uint64), and the
// CRC-32C of everything before it. The file is replaced atomically.

const (
	manifestName    = "PARTITIONS"
	manifestVersion = 1
	manifestHeader  = 4 + 1 + 4
	manifestEntry   = 16
)

var manifestMagic = [4]byte{'P', 'W', 'P', 'M'}

// ManifestPath is the manifest's file in a store's directory.
func ManifestPath(dir string) string { return filepath.Join(dir, manifestName) }

// RecordPartitions writes the manifest from the partition directories the
// store holds now (List): call it once every partition is closed, at a
// clean shutdown. Directories whose incarnation is unknown (half-built or
// damaged) are left out.
func (s *FileStore) RecordPartitions() error {
	if s.readOnly {
		return vfs.ErrReadOnly
	}
	stored, err := s.List()
	if err != nil {
		return err
	}
	m := make(map[metadata.Namespace]uint64, len(stored))
	for _, st := range stored {
		if st.Epoch != 0 && st.Damage == nil {
			m[st.NS] = st.Epoch
		}
	}
	return vfs.WriteFileAtomic(s.raw, ManifestPath(s.cfg.Dir), encodeManifest(stored, m))
}

// RecordedPartitions reads the manifest: the incarnation of every
// partition that had a directory at the last clean close. A store without
// a manifest (never closed cleanly since it began to be written) answers
// an error matching fs.ErrNotExist; a damaged one a *CorruptError.
func (s *FileStore) RecordedPartitions() (map[metadata.Namespace]uint64, error) {
	path := ManifestPath(s.cfg.Dir)
	b, err := vfs.ReadFile(s.raw, path)
	if err != nil {
		return nil, err
	}
	m, err := decodeManifest(b)
	if err != nil {
		var ce *CorruptError
		if errors.As(err, &ce) {
			ce.Path = path
		}
		return nil, err
	}
	return m, nil
}

// encodeManifest encodes m in the order of stored (sorted by namespace).
func encodeManifest(stored []Stored, m map[metadata.Namespace]uint64) []byte {
	b := make([]byte, 0, manifestHeader+len(m)*manifestEntry+4)
	b = append(b, manifestMagic[:]...)
	b = append(b, manifestVersion)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m)))
	for _, st := range stored {
		if epoch, ok := m[st.NS]; ok {
			b = binary.LittleEndian.AppendUint64(b, uint64(st.NS))
			b = binary.LittleEndian.AppendUint64(b, epoch)
		}
	}
	return appendCRC(b)
}

// appendCRC appends the CRC-32C of b.
func appendCRC(b []byte) []byte {
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// decodeManifest decodes a manifest. Every byte is checked: the count
// against the bytes that follow before anything is allocated, the
// checksum, and each namespace and incarnation.
func decodeManifest(b []byte) (map[metadata.Namespace]uint64, error) {
	if len(b) < manifestHeader+4 {
		return nil, corruptf("", 0, "manifest of %d bytes is shorter than its header", len(b))
	}
	if [4]byte(b[:4]) != manifestMagic {
		return nil, corruptf("", 0, "not a partitions manifest (magic %q)", b[:4])
	}
	if b[4] != manifestVersion {
		return nil, corruptf("", 4, "manifest version %d, want %d", b[4], manifestVersion)
	}
	body := b[:len(b)-4]
	if sum := binary.LittleEndian.Uint32(b[len(b)-4:]); sum != crc32.Checksum(body, castagnoli) {
		return nil, corruptf("", int64(len(b)-4), "manifest checksum mismatch")
	}
	n := binary.LittleEndian.Uint32(b[5:])
	if uint64(n)*manifestEntry != uint64(len(body)-manifestHeader) {
		return nil, corruptf("", 5, "manifest counts %d entries in %d bytes", n, len(body)-manifestHeader)
	}
	m := make(map[metadata.Namespace]uint64, n)
	for off := manifestHeader; off < len(body); off += manifestEntry {
		ns := metadata.Namespace(binary.LittleEndian.Uint64(body[off:]))
		epoch := binary.LittleEndian.Uint64(body[off+8:])
		if err := checkNamespace(ns); err != nil || epoch == 0 {
			return nil, corruptf("", int64(off), "manifest entry for namespace %#x, incarnation %d, is not a partition's", uint64(ns), epoch)
		}
		if _, dup := m[ns]; dup {
			return nil, corruptf("", int64(off), "manifest names partition %v twice", ns)
		}
		m[ns] = epoch
	}
	return m, nil
}
