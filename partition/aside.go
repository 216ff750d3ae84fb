package partition

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/parkway-io/parkway/metadata"
)

// asidePrefix names the directories SetAside moves a damaged copy into,
// inside the partition's own directory: "damaged-1", "damaged-2", ….
// Not a segment name and not a dot file, so a Build leaves them alone,
// and Remove deletes them with the partition.
const asidePrefix = "damaged-"

// SetAside moves the data of partition ns out of the way, so that the
// next Build opens an empty log at the same incarnation: every segment,
// index, start record and consumer offset goes into a new directory
// damaged-N inside the partition's directory, where an operator can
// inspect it (it is deleted with the partition). The incarnation file
// stays, and so do the files named in keep (a replica's raft log: what
// the replica promised its group is not damaged with its partition log)
// and the copies set aside before. It returns the directory the data went
// to ("" if there was nothing to move). A partition whose incarnation
// file is missing or damaged is refused with the error reading it.
//
// Why. A replica of a partition whose files are damaged (a
// *CorruptError that is not a torn tail) must not go on serving them as
// if they were whole, and must not hand out their offsets again; its
// peers hold the same messages, so its owner sets the damaged copy aside
// and fetches the log again from them. Moving rather than deleting keeps
// the evidence, and keeps the data should every replica turn out damaged.
//
// The partition must not be open (ErrInUse). Each rename is atomic and
// the directories are synced before SetAside returns; a crash half way
// leaves some files moved, which the next Build reports as damage again
// (segments missing), and a second SetAside moves the rest.
func (s *FileStore) SetAside(ns metadata.Namespace, keep ...string) (string, error) {
	if err := checkNamespace(ns); err != nil {
		return "", err
	}
	if err := s.acquire(ns); err != nil {
		return "", err
	}
	defer s.release(ns)
	dir := s.partitionDir(ns)
	names, err := s.fs.ReadDir(dir)
	if isNotExist(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	// The copy must be of a known incarnation: a damaged incarnation
	// file is not damage a fresh log under it repairs.
	if _, err := readIncarnation(s.fs, dir); err != nil {
		return "", err
	}
	n := 0
	var move []string
	for _, name := range names {
		if k, ok := strings.CutPrefix(name, asidePrefix); ok {
			if i, err := strconv.Atoi(k); err == nil {
				n = max(n, i)
			}
			continue
		}
		if name != incarnationFile && !slices.Contains(keep, name) {
			move = append(move, name)
		}
	}
	if len(move) == 0 {
		return "", nil
	}
	aside := filepath.Join(dir, asidePrefix+strconv.Itoa(n+1))
	if err := s.fs.MkdirAll(aside, 0o755); err != nil {
		return "", err
	}
	for _, name := range move {
		if err := s.fs.Rename(filepath.Join(dir, name), filepath.Join(aside, name)); err != nil {
			return "", fmt.Errorf("setting %s aside: %w", name, err)
		}
	}
	if err := s.fs.SyncDir(aside); err != nil {
		return "", err
	}
	if err := s.fs.SyncDir(dir); err != nil {
		return "", err
	}
	return aside, nil
}
