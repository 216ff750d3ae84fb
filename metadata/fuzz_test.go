package metadata

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"
)

// exportedSnapshots returns the exports of a store along a random
// workload.
func exportedSnapshots(tb testing.TB) []StoreSnapshot {
	rng := rand.New(rand.NewPCG(13, 13))
	s := newTestStore(tb)
	var out []StoreSnapshot
	for i := range 40 {
		s.Apply(randomCommandWithConfig(rng, s)) //nolint:errcheck
		if i%10 == 9 {
			out = append(out, s.Export())
		}
	}
	// And one with consumer groups: members, assignments, offsets.
	g := groupStore(tb, 3)
	for i := range 40 {
		g.Apply(randomGroupCommand(rng, int64(i)*int64(time.Second)/4)) //nolint:errcheck
	}
	out = append(out, g.Export())
	// And one of a cluster: nodes, replication factors, replica sets.
	c, err := NewStore(Config{Shards: 3, Assign: testAssign, Nodes: []uint64{1, 2, 3, 4, 5}})
	if err != nil {
		tb.Fatal(err)
	}
	for range 40 {
		c.Apply(randomCommandWithConfig(rng, c)) //nolint:errcheck
	}
	out = append(out, c.Export())
	// And with replicas moving: a node draining, leaving and joined
	// replicas.
	c.Apply(AddNode{Node: 6})   //nolint:errcheck
	c.Apply(Rebalance{})        //nolint:errcheck
	c.Apply(DrainNode{Node: 2}) //nolint:errcheck
	return append(out, c.Export())
}

// FuzzDecodeGroupSnapshot: a replicated metadata group's snapshot (what a
// peer sends in a raft snapshot) decodes or is refused with a typed error,
// never panics, and what decodes encodes back to the same bytes. Each
// input is also tried with its store part's checksum fixed, so mutations
// reach past the checksum.
func FuzzDecodeGroupSnapshot(f *testing.F) {
	for i, snap := range exportedSnapshots(f) {
		keys := make([][2]uint64, i)
		for j := range keys {
			keys[j] = [2]uint64{uint64(j + 1), uint64(100 + j)}
		}
		b, err := EncodeGroupSnapshot(keys, snap)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		check := func(b []byte) {
			keys, snap, err := DecodeGroupSnapshot(b)
			if err != nil {
				if !errors.Is(err, ErrInvalidSnapshot) && !errors.Is(err, ErrInvalidEncoding) {
					t.Fatalf("DecodeGroupSnapshot error %v is not typed", err)
				}
				return
			}
			again, err := EncodeGroupSnapshot(keys, snap)
			// A store part of an older version (before consumer
			// groups, before placement) re-encodes as the current
			// version; the current one must round-trip byte for byte.
			old := b[4+16*len(keys)] < snapshotVersion5
			if err != nil || (!old && !bytes.Equal(again, b)) {
				t.Fatalf("decoded snapshot encodes as %x, %v; was %x", again, err, b)
			}
			_, _ = Restore(testConfig, snap) // must not panic
		}
		check(b)
		if len(b) >= 4 {
			n := uint64(binary.LittleEndian.Uint32(b))
			if at := 4 + 16*n; at < uint64(len(b)) && len(b)-int(at) >= 4 {
				body := b[at : len(b)-4]
				check(withCRC32C(append(slices.Clone(b[:at]), body...)))
			}
		}
	})
}

// FuzzDecodeSnapshotFile: a durable store's snapshot file decodes or is
// refused with a *DecodeError, never panics.
func FuzzDecodeSnapshotFile(f *testing.F) {
	for i, snap := range exportedSnapshots(f) {
		b, err := encodeSnapshotFile(uint64(10*i), snap)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(snapshotMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, in := range [][]byte{b, withCRC32C(slices.Clone(b[:max(len(b)-4, 0)]))} {
			index, snap, err := decodeSnapshotFile(in)
			if err != nil {
				var de *DecodeError
				if !errors.As(err, &de) || !errors.Is(err, ErrInvalidEncoding) {
					t.Fatalf("decodeSnapshotFile error %v is not a *DecodeError", err)
				}
				continue
			}
			again, err := encodeSnapshotFile(index, snap)
			// A store snapshot of an older version re-encodes as the
			// current version; the current one must round-trip byte
			// for byte.
			const header = len(snapshotMagic) + 1 + 8
			if err != nil || (in[header] >= snapshotVersion5 && !bytes.Equal(again, in)) {
				t.Fatalf("decoded snapshot file encodes as %x, %v; was %x", again, err, in)
			}
		}
	})
}

// TestDecodeSnapshotAllocationBounded: a list count read from the bytes
// sizes no allocation beyond what the remaining bytes can hold. The input
// claims as many streams as it has bytes, but a stream takes at least
// four; with counts bounded by one byte per element, decoding it
// allocated 56 bytes per input byte.
func TestDecodeSnapshotAllocationBounded(t *testing.T) {
	const size = 1 << 16
	body := []byte{snapshotVersion, 0, 0, 0} // revision, group clock, no nodes
	body = binary.AppendUvarint(body, size-8)
	body = append(body, make([]byte, size-len(body))...)
	body[len(body)-1] = 0xff // not a whole stream: the decode fails at the end
	in := withCRC32C(body)
	if _, err := DecodeSnapshot(in); !errors.Is(err, ErrInvalidEncoding) {
		t.Fatalf("DecodeSnapshot = %v, want ErrInvalidEncoding", err)
	}
	const runs = 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range runs {
		_, _ = DecodeSnapshot(in)
	}
	runtime.ReadMemStats(&after)
	per := (after.TotalAlloc - before.TotalAlloc) / runs
	t.Logf("decoding %d bytes allocates %d bytes", len(in), per)
	if per > 16*uint64(len(in)) {
		t.Fatalf("decoding %d bytes allocates %d bytes", len(in), per)
	}
}
