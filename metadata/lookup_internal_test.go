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

// LivePartition answers what Revision, Partition and Topic answer one by
// one: the partition's incarnation only while the store has applied the
// topic's revision, the topic is that incarnation under that name, and
// the partition exists; a recreated topic's handle of the old incarnation
// and a partition past the topic's count are refused.
func TestLivePartitionAgreesWithTheLookups(t *testing.T) {
	s, nss := lookupStore(t, 3)
	ns := nss[1]
	topic, ok := s.Topic(ns.Stream(), ns.Topic())
	if !ok {
		t.Fatal("topic missing")
	}
	part, _ := s.Partition(ns)
	if rev, ok := s.LivePartition(ns, topic.CreatedRevision, topic.Name); !ok || rev != part.CreatedRevision {
		t.Fatalf("LivePartition of a live partition: %d, %v; want %d", rev, ok, part.CreatedRevision)
	}
	past, err := NewNamespace(ns.Stream(), ns.Topic(), 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		ns   Namespace
		rev  uint64
		tn   string
	}{
		{"another name", ns, topic.CreatedRevision, "other"},
		{"an older incarnation", ns, topic.CreatedRevision - 1, topic.Name},
		{"a revision the store has not applied", ns, s.Revision() + 1, topic.Name},
		{"a partition past the count", past, topic.CreatedRevision, topic.Name},
	} {
		if rev, ok := s.LivePartition(c.ns, c.rev, c.tn); ok {
			t.Errorf("%s: LivePartition = %d, true; want false", c.name, rev)
		}
	}
	mustApplyStore(t, s, DeleteTopic{Stream: ns.Stream(), Topic: ns.Topic()})
	if _, ok := s.LivePartition(ns, topic.CreatedRevision, topic.Name); ok {
		t.Error("a deleted topic's partition is live")
	}
	res := mustApplyStore(t, s, CreateTopic{Stream: ns.Stream(), Name: topic.Name, Partitions: 1})
	if res.Created[0].NS != ns {
		t.Fatalf("recreated at %v, want the ids of %v", res.Created[0].NS, ns)
	}
	if _, ok := s.LivePartition(ns, topic.CreatedRevision, topic.Name); ok {
		t.Error("the old incarnation's handle resolves in the recreated topic")
	}
	if rev, ok := s.LivePartition(ns, res.Created[0].CreatedRevision, topic.Name); !ok || rev != res.Created[0].CreatedRevision {
		t.Errorf("the new incarnation: %d, %v", rev, ok)
	}
}

func mustApplyStore(t *testing.T, s *Store, cmd Command) Result {
	t.Helper()
	res, err := s.Apply(cmd)
	if err != nil {
		t.Fatalf("Apply(%#v): %v", cmd, err)
	}
	return res
}
