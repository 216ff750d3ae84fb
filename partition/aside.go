package partition

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/vfs"
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
// file is missing is a replica built deferred (see Lodger), whose
// directory holds its owner's files only: they are set aside, but keep.
// One whose file is damaged or torn is refused with ErrIncarnationDamaged
// (see Reincarnate).
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
	return s.setAside(ns, 0, keep)
}

// IncarnationName is the name of the incarnation file in a partition's
// directory: the record of which incarnation the directory holds. A
// *CorruptError naming it is damage to that record (see Reincarnate).
const IncarnationName = incarnationFile

// ErrIncarnationDamaged marks the error of SetAside for a partition whose
// incarnation file is damaged (a *CorruptError naming it is wrapped too)
// or torn (a prefix of its record, as a half-built directory has):
// which incarnation the directory holds is unknown, and only Reincarnate,
// told by its caller, sets such a copy aside.
var ErrIncarnationDamaged = errors.New("parkway: incarnation file damaged")

// Reincarnate is SetAside for a partition whose incarnation file is
// damaged or torn, when the caller knows from elsewhere that the
// directory holds incarnation epoch (a replica's raft log tagged with
// it, and the metadata naming it): the data and the damaged file's bytes go into
// damaged-N as SetAside's do, and the incarnation file is then replaced,
// atomically, by one naming epoch, so that the next Build opens an empty
// log at epoch with the files in keep beside it. A whole incarnation file
// naming epoch is SetAside's case, and is handled as by it; one naming
// another incarnation, or none, is refused: Build discards that
// directory, and nothing in it may be kept.
//
// The new incarnation file is written last: a crash before it leaves the
// damaged one, so the next Build fails on it again and a second
// Reincarnate finishes; never a directory without an incarnation file,
// which a Build would take for a half-built one and remove with the
// files in keep.
func (s *FileStore) Reincarnate(ns metadata.Namespace, epoch uint64, keep ...string) (string, error) {
	if epoch == 0 {
		return "", fmt.Errorf("partition: reincarnate %v at epoch 0", ns)
	}
	return s.setAside(ns, epoch, keep)
}

// Location returns the filesystem and the directory that hold partition
// ns (whether or not the store holds it): where its owner keeps the files
// a partition does not know, such as a replica's raft log.
func (s *FileStore) Location(ns metadata.Namespace) (vfs.FS, string) {
	return s.fs, s.partitionDir(ns)
}

// setAside is SetAside (epoch 0) and Reincarnate (epoch set).
func (s *FileStore) setAside(ns metadata.Namespace, epoch uint64, keep []string) (string, error) {
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
	// file is not damage a fresh log under it repairs, unless the
	// caller knows the incarnation (Reincarnate).
	inc, err := readIncarnation(s.fs, dir)
	var ce *CorruptError
	if errors.Is(err, errBadIncarnation) {
		// Cut short where an incarnation was synced: damaged, not
		// half-built (incarnationLost).
		if lerr := s.incarnationLost(ns, s.syncedIncarnation(ns).epoch, dir, inc, err); lerr != nil {
			err = lerr
		}
	}
	// A torn file (a prefix of the record) is a half-built directory to
	// Build, which starts it over; with the directory's data to set
	// aside it is no more known than a damaged one, and is handled as
	// one: refused here, taken by Reincarnate from a caller that knows
	// the incarnation. Refused with its own error, a re-seeded replica's
	// old copy (whose raft log was damaged too) could never be set aside
	// and the new replica never built (cluster seed 191 on the
	// hibernation branch: a lie cut the file from 11 to 6 bytes).
	damaged := errors.As(err, &ce) || errors.Is(err, errBadIncarnation)
	switch {
	case err == nil && (epoch == 0 || inc == epoch):
		epoch = 0 // whole: nothing to rewrite
	case isNotExist(err) && epoch == 0:
		// A replica built deferred (see Lodger) whose partition has no
		// files yet: the directory holds its owner's files only, which
		// the owner judged (a raft log's tag names its incarnation).
	case err == nil:
		return "", fmt.Errorf("partition %v: incarnation file names incarnation %d, not %d", ns, inc, epoch)
	case damaged && epoch == 0:
		return "", fmt.Errorf("%w: %w", ErrIncarnationDamaged, err)
	case !damaged:
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
	// The log will be empty under the same incarnation: the synced end
	// recorded for it goes first, or the next Build would find the empty
	// log shorter than it and fence it (a crash before the move leaves
	// the data, which the next Build reports as damage again).
	if err := s.dropSynced(ns); err != nil {
		return "", err
	}
	if len(move) == 0 && epoch == 0 {
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
	if epoch != 0 {
		// The damaged record is kept as evidence if it can be read (a
		// bad sector may refuse it); the replacement is atomic.
		if b, err := vfs.ReadFile(s.fs, filepath.Join(dir, incarnationFile)); err == nil {
			if err := vfs.WriteFileAtomic(s.fs, filepath.Join(aside, incarnationFile), b); err != nil {
				return "", fmt.Errorf("setting the incarnation file aside: %w", err)
			}
		}
	}
	if err := s.fs.SyncDir(aside); err != nil {
		return "", err
	}
	if err := s.fs.SyncDir(dir); err != nil {
		return "", err
	}
	if epoch != 0 {
		if err := vfs.WriteFileAtomic(s.fs, filepath.Join(dir, incarnationFile), encodeIncarnation(epoch)); err != nil {
			return "", fmt.Errorf("rewriting the incarnation file: %w", err)
		}
	}
	return aside, nil
}
