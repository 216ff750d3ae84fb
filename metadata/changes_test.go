package metadata

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// view is what a reader of the store cares about at one revision: every
// committed partition and its topic's configuration.
type view map[Namespace]struct {
	info PartitionInfo
	cfg  TopicConfig
}

func viewOf(s *Store) view {
	v := view{}
	for _, p := range s.Snapshot().Partitions {
		t, _ := s.Topic(p.Stream, p.Topic)
		v[p.NS] = struct {
			info PartitionInfo
			cfg  TopicConfig
		}{p, t.Config}
	}
	return v
}

// Changes answers for any revision the log still covers, its ranges cover
// every namespace whose partition or configuration differs between that
// revision and now, and its partitions are exactly the committed ones in
// its ranges.
func TestChangesCoverEveryDifference(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 17))
			s := newTestStore(t)
			views := map[uint64]view{0: viewOf(s)}
			for step := range 400 {
				applyRandom(rng, s, step)
				rev := s.Revision()
				views[rev] = viewOf(s)
				since := rng.Uint64N(rev + 1)
				ch, ok := s.Changes(since)
				if !ok {
					t.Fatalf("Changes(%d) at revision %d: no answer within the log", since, rev)
				}
				if ch.Revision != rev {
					t.Fatalf("Changes revision %d, store %d", ch.Revision, rev)
				}
				in := func(ns Namespace) bool {
					for _, r := range ch.Ranges {
						if r.Contains(ns) {
							return true
						}
					}
					return false
				}
				old, now := views[since], views[rev]
				for ns, a := range old {
					if b, ok := now[ns]; (!ok || !reflect.DeepEqual(a, b)) && !in(ns) {
						t.Fatalf("since %d: %v changed outside the ranges %v", since, ns, ch.Ranges)
					}
				}
				for ns, b := range now {
					if a, ok := old[ns]; (!ok || !reflect.DeepEqual(a, b)) && !in(ns) {
						t.Fatalf("since %d: %v changed outside the ranges %v", since, ns, ch.Ranges)
					}
				}
				var want []PartitionInfo
				for _, p := range s.Snapshot().Partitions {
					if in(p.NS) {
						want = append(want, p)
					}
				}
				if !reflect.DeepEqual(ch.Partitions, want) {
					t.Fatalf("since %d: partitions %v, want %v", since, ch.Partitions, want)
				}
			}
		})
	}
}

// applyRandom applies one random command (failures are fine: they change
// nothing).
func applyRandom(rng *rand.Rand, s *Store, step int) {
	streams := s.Streams()
	pick := func() (StreamInfo, TopicInfo, bool) {
		if len(streams) == 0 {
			return StreamInfo{}, TopicInfo{}, false
		}
		st := streams[rng.IntN(len(streams))]
		ts := s.Topics(st.ID)
		if len(ts) == 0 {
			return st, TopicInfo{}, false
		}
		return st, ts[rng.IntN(len(ts))], true
	}
	var cmd Command
	switch k := rng.IntN(10); {
	case k == 0 || len(streams) == 0:
		cmd = CreateStream{Name: fmt.Sprintf("s%d", step)}
	case k == 1:
		st := streams[rng.IntN(len(streams))]
		cmd = DeleteStream{Stream: st.ID, Revision: st.CreatedRevision}
	case k <= 4:
		st := streams[rng.IntN(len(streams))]
		cmd = CreateTopic{Stream: st.ID, StreamRevision: st.CreatedRevision, Name: fmt.Sprintf("t%d", step), Partitions: 1 + rng.IntN(3)}
	default:
		_, tp, ok := pick()
		if !ok {
			cmd = CreateStream{Name: fmt.Sprintf("s%d", step)}
			break
		}
		switch k {
		case 5:
			cmd = DeleteTopic{Stream: tp.Stream, Topic: tp.ID, Revision: tp.CreatedRevision}
		case 6:
			cmd = CreatePartitions{Stream: tp.Stream, Topic: tp.ID, Revision: tp.CreatedRevision, Count: 1 + rng.IntN(2)}
		case 7:
			cmd = DeletePartitions{Stream: tp.Stream, Topic: tp.ID, Revision: tp.CreatedRevision, Count: 1}
		case 8:
			cmd = PurgeTopic{Stream: tp.Stream, Topic: tp.ID, Revision: tp.CreatedRevision}
		default:
			cmd = SetTopicConfig{Stream: tp.Stream, Topic: tp.ID, Revision: tp.CreatedRevision,
				Config: TopicConfig{RetentionAge: time.Duration(1+rng.IntN(3)) * time.Hour}}
		}
	}
	_, _ = s.Apply(cmd)
}

// Past the log's length, and across a Replace, Changes refuses instead of
// answering with less than what changed.
func TestChangesRefusesWhatItForgot(t *testing.T) {
	s := newTestStore(t)
	st := mustApply(t, s, CreateStream{Name: "s"})
	mustApply(t, s, CreateTopic{Stream: st.Stream, StreamRevision: st.Revision, Name: "t0", Partitions: 1})
	for i := range changeLogSize {
		mustApply(t, s, CreateTopic{Stream: st.Stream, StreamRevision: st.Revision, Name: fmt.Sprintf("t%d", i+1), Partitions: 1})
		if i == changeLogSize-3 {
			if _, ok := s.Changes(1); !ok {
				t.Fatal("Changes(1) refused while the log still covers it")
			}
		}
	}
	if _, ok := s.Changes(1); ok {
		t.Fatal("Changes(1) answered after the log dropped revision 2")
	}
	rev := s.Revision()
	ch, ok := s.Changes(rev - 1)
	if !ok || len(ch.Partitions) != 1 || ch.Partitions[0].CreatedRevision != rev {
		t.Fatalf("Changes(rev-1) = %+v, %v: want the last topic's partition", ch, ok)
	}
	if ch, ok := s.Changes(rev); !ok || len(ch.Ranges) != 0 || len(ch.Partitions) != 0 {
		t.Fatalf("Changes(rev) = %+v, %v: want nothing changed", ch, ok)
	}
	if _, ok := s.Changes(rev + 1); ok {
		t.Fatal("Changes answered for a revision the store has not reached")
	}

	// A Replace changes the state without commits: nothing before it can
	// be answered.
	if err := s.Replace(s.Export()); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Changes(rev - 1); ok {
		t.Fatal("Changes answered across a Replace")
	}
	if _, ok := s.Changes(s.Revision()); !ok {
		t.Fatal("Changes refused the revision a Replace installed")
	}
	r, err := Restore(testConfig, s.Export())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Changes(rev - 1); ok {
		t.Fatal("a restored store answered for a revision before its snapshot")
	}
}
