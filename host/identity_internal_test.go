package host

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/vfs"
)

func identitySamples() []identity {
	return []identity{
		{dir: 1},
		{cluster: "prod-1.example", node: 3, dir: 42},
		{cluster: "c", node: 1, dir: 7, peers: map[uint64]uint64{2: 9, 3: 11}},
	}
}

// TestIdentityRoundTrip: an identity decodes to what was encoded; every
// truncation and every single flipped bit is refused.
func TestIdentityRoundTrip(t *testing.T) {
	for _, id := range identitySamples() {
		b := id.encode()
		got, err := decodeIdentity(b)
		if err != nil || !reflect.DeepEqual(got, id) {
			t.Fatalf("decode(encode(%+v)) = %+v, %v", id, got, err)
		}
		for n := range len(b) {
			if _, err := decodeIdentity(b[:n]); err == nil {
				t.Fatalf("%d of %d bytes decoded", n, len(b))
			}
		}
		for i := range 8 * len(b) {
			c := bytes.Clone(b)
			c[i/8] ^= 1 << (i % 8)
			if _, err := decodeIdentity(c); err == nil {
				t.Fatalf("bit %d flipped decoded", i)
			}
		}
	}
}

// TestIdentityFile: the file is recorded on first use and checked after;
// a damaged one refuses the open as *partition.CorruptError naming it; a
// directory found fresh (no metadata) gets a new incarnation.
func TestIdentityFile(t *testing.T) {
	fs := vfs.NewMem()
	if err := fs.MkdirAll("/d", 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := openIdentity(fs, "/d", "c", 2, true)
	if err != nil {
		t.Fatal(err)
	}
	first := d.incarnation()
	d, err = openIdentity(fs.Crash(), "/d", "c", 2, false) // durable at once
	if err != nil || d.incarnation() != first {
		t.Fatalf("reopen: incarnation %d, %v; want %d", d.incarnation(), err, first)
	}
	if d, err = openIdentity(fs, "/d", "c", 2, true); err != nil || d.incarnation() == first {
		t.Fatalf("fresh directory kept incarnation %d (%v)", first, err)
	}
	if _, err := openIdentity(fs, "/d", "c", 3, false); !errors.Is(err, ErrWrongDataDir) {
		t.Fatalf("node 3 on node 2's directory: %v", err)
	}
	b, _ := vfs.ReadFile(fs, "/d/IDENTITY")
	b[len(b)/2] ^= 0x10
	if err := vfs.WriteFileAtomic(fs, "/d/IDENTITY", b); err != nil {
		t.Fatal(err)
	}
	var ce *partition.CorruptError
	if _, err := openIdentity(fs, "/d", "c", 2, false); !errors.As(err, &ce) || ce.Path != "/d/IDENTITY" {
		t.Fatalf("damaged identity file: %v, want a *partition.CorruptError naming it", err)
	}
}

// FuzzDecodeIdentity: no input panics or allocates beyond its size, and
// whatever decodes encodes back to the same bytes.
func FuzzDecodeIdentity(f *testing.F) {
	for _, id := range identitySamples() {
		f.Add(id.encode())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		id, err := decodeIdentity(b)
		if err != nil {
			return
		}
		if again := id.encode(); !bytes.Equal(again, b) {
			t.Fatalf("re-encoded %x, decoded from %x", again, b)
		}
	})
}
