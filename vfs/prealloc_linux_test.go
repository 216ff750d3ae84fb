//go:build linux

package vfs_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/parkway-io/parkway/vfs"
)

func TestOSPreallocateKeepsSize(t *testing.T) {
	name := filepath.Join(t.TempDir(), "f")
	f, err := vfs.Default.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	err = f.Preallocate(0, 1<<20)
	if vfs.IsUnsupported(err) {
		t.Skipf("filesystem cannot preallocate: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	fi, err := f.Stat()
	if err != nil || fi.Size() != 0 {
		t.Fatalf("size after Preallocate = %v, %v; want 0", fi, err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(name, &st); err != nil {
		t.Fatal(err)
	}
	if st.Blocks*512 < 1<<20 {
		t.Fatalf("only %d bytes allocated", st.Blocks*512)
	}
}
