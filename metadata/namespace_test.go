package metadata

import (
	"errors"
	"testing"
)

func TestNamespaceRoundTrip(t *testing.T) {
	cases := []struct{ s, t, p uint32 }{
		{0, 0, 0},
		{0, 1, 0},
		{1, 0, 0},
		{0, 0, 1},
		{7, 42, 999},
		{MaxStreamID, MaxTopicID, MaxPartitionID},
		{MaxStreamID, 0, 0},
		{0, MaxTopicID, 0},
		{0, 0, MaxPartitionID},
	}
	for _, c := range cases {
		ns, err := NewNamespace(c.s, c.t, c.p)
		if err != nil {
			t.Fatalf("NewNamespace(%d, %d, %d): %v", c.s, c.t, c.p, err)
		}
		if ns.Stream() != c.s || ns.Topic() != c.t || ns.Partition() != c.p {
			t.Errorf("NewNamespace(%d, %d, %d) = %v, unpacks to %d/%d/%d",
				c.s, c.t, c.p, uint64(ns), ns.Stream(), ns.Topic(), ns.Partition())
		}
		if ns&MetadataNamespace != 0 {
			t.Errorf("%v sets the metadata bit", ns)
		}
		if ns == MetadataNamespace {
			t.Errorf("%v collides with the metadata namespace", ns)
		}
	}
}

func TestNamespacePacking(t *testing.T) {
	// The reference server's layout: partition bits 0–19, topic 20–31,
	// stream 32–51.
	ns, err := NewNamespace(3, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := Namespace(3<<32 | 2<<20 | 1); ns != want {
		t.Errorf("NewNamespace(3, 2, 1) = %#x, want %#x", uint64(ns), uint64(want))
	}
	// The design pins (0, t, 0) for t in 0..8.
	for topic := uint32(0); topic < 9; topic++ {
		ns, err := NewNamespace(0, topic, 0)
		if err != nil {
			t.Fatal(err)
		}
		if want := Namespace(uint64(topic) << 20); ns != want {
			t.Errorf("NewNamespace(0, %d, 0) = %#x, want %#x", topic, uint64(ns), uint64(want))
		}
	}
	// Packing preserves id order, high to low.
	a, _ := NewNamespace(0, MaxTopicID, MaxPartitionID)
	b, _ := NewNamespace(1, 0, 0)
	if a >= b {
		t.Errorf("%v >= %v: packing does not order by stream first", a, b)
	}
}

func TestNamespaceOutOfRange(t *testing.T) {
	cases := []struct{ s, t, p uint32 }{
		{MaxStreamID + 1, 0, 0},
		{0, MaxTopicID + 1, 0},
		{0, 0, MaxPartitionID + 1},
		{0, 0, 1<<20 - 1}, // fits 20 bits but not the reference limit
		{^uint32(0), ^uint32(0), ^uint32(0)},
	}
	for _, c := range cases {
		ns, err := NewNamespace(c.s, c.t, c.p)
		if !errors.Is(err, ErrIDOutOfRange) {
			t.Errorf("NewNamespace(%d, %d, %d) = %v, %v; want ErrIDOutOfRange", c.s, c.t, c.p, ns, err)
		}
		if ns != 0 {
			t.Errorf("NewNamespace(%d, %d, %d) returned %v with an error, want 0", c.s, c.t, c.p, ns)
		}
	}
}

func TestNamespaceString(t *testing.T) {
	ns, _ := NewNamespace(1, 2, 3)
	if got := ns.String(); got != "1/2/3" {
		t.Errorf("String() = %q, want 1/2/3", got)
	}
	if got := MetadataNamespace.String(); got != "metadata" {
		t.Errorf("MetadataNamespace.String() = %q, want metadata", got)
	}
}
