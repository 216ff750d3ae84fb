package partition_test

import (
	"errors"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/vfs"
)

// A lodged directory whose owner's log is damaged but still names its
// incarnation (a raft log whose valid prefix holds its tag, see
// FileConfig.OwnerIncarnation): a build of that incarnation reports the
// damage and keeps the directory; a build of a later incarnation
// discards it as an earlier incarnation's, as it discards an intact one.
// Before, every build of the later incarnation failed on the dead log,
// and the node's replica of it was never built (cluster seeds 390 and
// 20325: the recreated topic's group of two voters never elected).
func TestLodgedDamagedOwnerOfAnEarlierIncarnationDiscarded(t *testing.T) {
	partition.AllowSmallSegments(t, smallSegment)
	mem := vfs.NewMem()
	cfg := memConfig(mem)
	damage := errors.New("owner's log damaged")
	cfg.OwnerIncarnation = func(fsys vfs.FS, dir string) (uint64, error) {
		b, err := vfs.ReadFile(fsys, filepath.Join(dir, ownerLog))
		if err != nil {
			return 0, nil
		}
		line, rest, _ := strings.Cut(string(b), "\n")
		inc, err := strconv.ParseUint(line, 10, 64)
		if err != nil {
			return 0, err
		}
		if rest != "" {
			return inc, &partition.CorruptError{Path: filepath.Join(dir, ownerLog), Err: damage}
		}
		return inc, nil
	}
	s, err := partition.NewFileStore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dir := partDir("/data", crashNS)
	p := lodge(t, s, mem, 7)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := vfs.WriteFileAtomic(mem, filepath.Join(dir, ownerLog), []byte("7\ngarbage")); err != nil {
		t.Fatal(err)
	}

	// Its own incarnation: the damage is reported, the directory kept.
	if _, err := s.BuildDeferred(crashNS, 7); !ownerDamage(err) {
		t.Fatalf("build of the damaged owner's own incarnation: %v, want its damage", err)
	}
	if got := names(t, mem, dir); !slices.Equal(got, []string{ownerLog}) {
		t.Fatalf("after the refused build: %q in the directory, want the owner's log kept", got)
	}
	stored, err := s.List()
	if err != nil || len(stored) != 1 || !ownerDamage(stored[0].Damage) {
		t.Fatalf("List: %+v, %v; want the directory with its damage", stored, err)
	}

	// A later incarnation: an earlier one's directory, discarded.
	p, err = s.BuildDeferred(crashNS, 9)
	if err != nil {
		t.Fatalf("build of a later incarnation over a damaged earlier one's directory: %v", err)
	}
	if p.NextOffset() != 0 {
		t.Fatalf("the new incarnation starts at %d, want 0", p.NextOffset())
	}
	if _, err := mem.Stat(filepath.Join(dir, ownerLog)); err == nil {
		t.Fatal("the earlier incarnation's damaged log is still in the new one's directory")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

// ownerDamage reports whether err is the damage of the owner's log.
func ownerDamage(err error) bool {
	var ce *partition.CorruptError
	return errors.As(err, &ce) && filepath.Base(ce.Path) == ownerLog
}
