package host

import (
	"errors"
	"io/fs"
	"testing"

	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/vfs"
)

// TestReadIdentity reads back what a node records, changing nothing, and
// refuses a damaged file as the node does.
func TestReadIdentity(t *testing.T) {
	mem := vfs.NewMem()
	if err := mem.MkdirAll("/d", 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadIdentity(mem, "/d"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("no identity file: %v", err)
	}
	d, err := loadIdentity(mem, "/d", "c", 2, true)
	if err != nil {
		t.Fatal(err)
	}
	d.peerAnnounced(3, 77, 5, true)
	before, _ := vfs.ReadFile(mem, "/d/IDENTITY")
	id, err := ReadIdentity(vfs.ReadOnly(mem), "/d")
	if err != nil {
		t.Fatal(err)
	}
	if id.Cluster != "c" || id.Node != 2 || id.Incarnation != d.incarnation() || id.Peers[3] != 77 {
		t.Fatalf("ReadIdentity = %+v", id)
	}
	b := append([]byte(nil), before...)
	b[9] ^= 0xff
	if err := vfs.WriteFileAtomic(mem, "/d/IDENTITY", b); err != nil {
		t.Fatal(err)
	}
	var ce *partition.CorruptError
	if _, err := ReadIdentity(mem, "/d"); !errors.As(err, &ce) || ce.Path != "/d/IDENTITY" {
		t.Fatalf("damaged identity: %v", err)
	}
}
