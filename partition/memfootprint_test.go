package partition_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
)

// TestMemStoreSmallPartitionsStaySmall pins the in-memory store's cost
// for many partitions holding a message or two: a node with 10,000
// partitions on three replicas once held 3.2 GB for one message each,
// because every partition's first message allocated a full chunk of
// 1,024 message slots. TotalAlloc counts bytes allocated whatever the
// garbage collector does, so the bound is deterministic.
func TestMemStoreSmallPartitionsStaySmall(t *testing.T) {
	const parts = 1000
	s := partition.NewMemStore()
	msg := []partition.Message{{Payload: []byte("x")}}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range uint32(parts) {
		ns, err := metadata.NewNamespace(1, 1, i)
		if err != nil {
			t.Fatal(err)
		}
		p, err := s.Build(ns, 1)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if _, err := p.Append(msg); err != nil {
				t.Fatal(err)
			}
		}
	}
	runtime.ReadMemStats(&after)
	per := (after.TotalAlloc - before.TotalAlloc) / parts
	// A full first chunk alone is over 100 KiB.
	if per > 8<<10 {
		t.Fatalf("a partition with two messages allocated %d bytes, want at most 8 KiB", per)
	}
	t.Logf("%d bytes allocated per partition with two messages", per)
}

// TestMemStoreFirstChunkGrows reads back a log that grows its first chunk
// past every doubling and into the next chunks, then drops a prefix.
func TestMemStoreFirstChunkGrows(t *testing.T) {
	s := partition.NewMemStore()
	ns, err := metadata.NewNamespace(1, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Build(ns, 1)
	if err != nil {
		t.Fatal(err)
	}
	const n = 2500
	for i := range n {
		if _, err := p.Append([]partition.Message{{Payload: fmt.Appendf(nil, "m%d", i)}}); err != nil {
			t.Fatal(err)
		}
	}
	check := func(from int) {
		t.Helper()
		for off := from; off < n; {
			got, err := p.Read(uint64(off), 300)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) == 0 {
				t.Fatalf("read at %d returned nothing", off)
			}
			for _, m := range got {
				if m.Offset != uint64(off) || string(m.Payload) != fmt.Sprintf("m%d", off) {
					t.Fatalf("offset %d: got %d %q", off, m.Offset, m.Payload)
				}
				off++
			}
		}
	}
	check(0)
	if err := p.TruncateBefore(1500); err != nil {
		t.Fatal(err)
	}
	check(1500)
}
