package metadata

import (
	"fmt"
	"testing"
)

func lookupStore(tb testing.TB, topics int) (*Store, []Namespace) {
	tb.Helper()
	s, err := NewStore(Config{Shards: 2, Assign: func(ns Namespace, n int) int { return int(ns) % n }})
	if err != nil {
		tb.Fatal(err)
	}
	var nss []Namespace
	for st := range (topics + MaxTopicID) / (MaxTopicID + 1) {
		if _, err := s.Apply(CreateStream{Name: fmt.Sprint("s", st)}); err != nil {
			tb.Fatal(err)
		}
	}
	for i := range topics {
		res, err := s.Apply(CreateTopic{Stream: uint32(i / (MaxTopicID + 1)), Name: fmt.Sprint("t", i), Partitions: 1})
		if err != nil {
			tb.Fatal(err)
		}
		nss = append(nss, res.Created[0].NS)
	}
	return s, nss
}

// Behaviour 11: the committed created_revision lookup is keyed (the
// stream's and the topic's maps by id, then the topic's dense slice), not
// a scan. Pinned structurally (every committed partition is found by its
// namespace, and nothing else is), and by a lookup that allocates
// nothing; the benchmark below shows the cost flat from 1k to 100k
// partitions.
func TestBehaviour11CreatedRevisionLookupIsKeyed(t *testing.T) {
	s, nss := lookupStore(t, 5000)
	if s.partitions != len(nss) {
		t.Fatalf("store counts %d partitions, want %d", s.partitions, len(nss))
	}
	for _, ns := range nss {
		info, ok := s.partition(ns)
		rev, ok2 := s.CreatedRevision(ns)
		if !ok || !ok2 || info.CreatedRevision != rev {
			t.Fatalf("%v: index %+v %v, lookup %d %v", ns, info, ok, rev, ok2)
		}
	}
	if _, err := s.Apply(DeleteTopic{Stream: nss[7].Stream(), Topic: nss[7].Topic()}); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.partition(nss[7]); ok {
		t.Fatal("deleted partition still found")
	}
	if s.partitions != len(nss)-1 {
		t.Fatalf("store counts %d partitions after a delete, want %d", s.partitions, len(nss)-1)
	}
	if allocs := testing.AllocsPerRun(100, func() { s.CreatedRevision(nss[42]) }); allocs != 0 {
		t.Fatalf("lookup allocates %v times", allocs)
	}
}

func BenchmarkCreatedRevision(b *testing.B) {
	for _, n := range []int{1000, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			s, nss := lookupStore(b, n)
			i := 0
			for b.Loop() {
				s.CreatedRevision(nss[i%len(nss)])
				i++
			}
		})
	}
}
