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
		{cluster: "c", node: 1, dir: 7, peers: map[uint64]peerDir{2: {inc: 9, at: 4}, 3: {inc: 11}}},
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
	d, err := loadIdentity(fs, "/d", "c", 2, true)
	if err != nil {
		t.Fatal(err)
	}
	first := d.incarnation()
	d, err = loadIdentity(fs.Crash(), "/d", "c", 2, false) // durable at once
	if err != nil || d.incarnation() != first {
		t.Fatalf("reopen: incarnation %d, %v; want %d", d.incarnation(), err, first)
	}
	if d, err = loadIdentity(fs, "/d", "c", 2, true); err != nil || d.incarnation() == first {
		t.Fatalf("fresh directory kept incarnation %d (%v)", first, err)
	}
	if _, err := loadIdentity(fs, "/d", "c", 3, false); !errors.Is(err, ErrWrongDataDir) {
		t.Fatalf("node 3 on node 2's directory: %v", err)
	}
	b, _ := vfs.ReadFile(fs, "/d/IDENTITY")
	b[len(b)/2] ^= 0x10
	if err := vfs.WriteFileAtomic(fs, "/d/IDENTITY", b); err != nil {
		t.Fatal(err)
	}
	var ce *partition.CorruptError
	if _, err := loadIdentity(fs, "/d", "c", 2, false); !errors.As(err, &ce) || ce.Path != "/d/IDENTITY" {
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

// TestPeerAnnounced: a peer's first incarnation is recorded (durably);
// the same one is admitted; another one from a member is refused, from a
// node that is not a member recorded; a membership change after the
// record forgets it, one before it (a log replayed at start) does not.
func TestPeerAnnounced(t *testing.T) {
	fs := vfs.NewMem()
	if err := fs.MkdirAll("/d", 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := loadIdentity(fs, "/d", "c", 1, true)
	if err != nil {
		t.Fatal(err)
	}
	if d.peerAnnounced(2, 20, 5, true) {
		t.Fatal("a peer's first incarnation refused")
	}
	d, err = loadIdentity(fs.Crash(), "/d", "c", 1, false)
	if err != nil {
		t.Fatal(err)
	}
	if d.peerAnnounced(2, 20, 9, true) {
		t.Fatal("the recorded incarnation refused after a restart")
	}
	if !d.peerAnnounced(2, 21, 9, true) {
		t.Fatal("a member's new incarnation admitted")
	}
	d.forgetPeer(2, 4, false) // the change that added it, replayed
	if !d.peerAnnounced(2, 21, 9, true) {
		t.Fatal("a replayed membership change older than the record forgot it")
	}
	d.forgetPeer(2, 7, false) // removed (or added again) after the record
	if d.peerAnnounced(2, 21, 9, true) {
		t.Fatal("the incarnation announced after a membership change refused")
	}
	if d.peerAnnounced(2, 21, 9, true) {
		t.Fatal("the incarnation recorded after a membership change refused when announced again")
	}
	if d.peerAnnounced(3, 30, 9, false) || d.peerAnnounced(3, 31, 9, false) {
		t.Fatal("a node that is not a member refused")
	}
	if !d.peerAnnounced(3, 30, 9, true) {
		t.Fatal("a member coming back with an incarnation it replaced admitted")
	}
	d.forgetPeer(0, 10, true) // a snapshot at 10
	if d.peerAnnounced(3, 30, 11, true) {
		t.Fatal("a record older than an installed snapshot was kept")
	}
}
