//go:build linux

package partition_test

import (
	"path/filepath"
	"syscall"
	"testing"

	"github.com/parkway-io/parkway/partition"
)

func allocated(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// TestFilePreallocateReserves checks that a new segment reserves
// SegmentSize bytes without changing its size, and that rolling releases
// the unused reservation of the sealed segment.
func TestFilePreallocateReserves(t *testing.T) {
	cfg := partition.FileConfig{Dir: t.TempDir(), SegmentSize: mib, Preallocate: true}
	ns := mustNS(t, 3, 1, 5)
	p := mustBuild(t, newFileStore(t, cfg), ns, 1)
	defer mustClose(t, p)
	first := filepath.Join(partDir(cfg.Dir, ns), segName(0, ".log"))
	if got := allocated(t, first); got < mib {
		t.Skipf("filesystem did not preallocate (%d bytes allocated)", got)
	}
	mustAppend(t, p, batch(0, 4, 200<<10))
	mustAppend(t, p, batch(4, 2, 200<<10)) // rolls
	if got, size := allocated(t, first), fileSize(t, first); got > size+64<<10 {
		t.Fatalf("sealed segment keeps %d bytes allocated for %d bytes of data", got, size)
	}
	if got := allocated(t, filepath.Join(partDir(cfg.Dir, ns), segName(4, ".log"))); got < mib {
		t.Fatalf("new segment has only %d bytes allocated", got)
	}
}
