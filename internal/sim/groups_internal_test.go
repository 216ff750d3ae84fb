package sim

import (
	"strings"
	"testing"
	"time"

	"github.com/parkway-io/parkway/metadata"
)

// The invariant 6 checker itself: it accepts a group's history, and
// reports a generation observed with two different assignments and a
// committed offset that went back. (The simulator with the engine's
// regression check removed fails seeds 37, 80, 120, … on invariant 6.)
func TestGroupCheckFindsViolations(t *testing.T) {
	cfg := metadata.Config{Shards: 1, Assign: func(metadata.Namespace, int) int { return 0 }}
	store := func(t *testing.T) *metadata.Store {
		s, err := metadata.NewStore(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []metadata.Command{
			metadata.CreateStream{Name: "s"},
			metadata.CreateTopic{Stream: 0, Name: "t", Partitions: 2},
			metadata.CreateGroup{Stream: 0, Topic: 0, Name: "g"},
			metadata.JoinGroup{Stream: 0, Topic: 0, Group: "g", SessionTimeout: time.Second},
			metadata.JoinGroup{Stream: 0, Topic: 0, Group: "g", SessionTimeout: time.Second},
			metadata.CommitGroupOffsets{Stream: 0, Topic: 0, Group: "g", Member: 1, Generation: 2, Offsets: []metadata.GroupOffset{{Partition: 0, Offset: 5}}},
		} {
			if _, err := s.Apply(c); err != nil {
				t.Fatalf("%#v: %v", c, err)
			}
		}
		return s
	}
	gc := newGroupCheck()
	good := store(t)
	if err := gc.observe("n1", good); err != nil {
		t.Fatal(err)
	}
	if err := gc.observe("n2", store(t)); err != nil {
		t.Fatalf("the same history on another node: %v", err)
	}

	// Same generation, holders swapped.
	snap := good.Export()
	parts := snap.Streams[0].Topics[0].Groups[0].Partitions
	// Partition 0 handed to the other member: with two-step moves both
	// partitions may still be held by the first member (the second one's
	// on its way to the newcomer), so a swap would change nothing.
	parts[0].Holder = parts[0].Holder%2 + 1
	swapped, err := metadata.Restore(cfg, snap)
	if err != nil {
		t.Fatal(err)
	}
	if err := gc.observe("n3", swapped); err == nil || !strings.Contains(err.Error(), "generation") {
		t.Fatalf("two assignments of one generation: %v", err)
	}

	// The same store, read again only when its revision moved: a
	// snapshot installed over it (a later revision) is read, and its
	// second assignment of the generation caught.
	gc = newGroupCheck()
	same := store(t)
	if err := gc.observe("n1", same); err != nil {
		t.Fatal(err)
	}
	snap = same.Export()
	snap.Revision++
	parts = snap.Streams[0].Topics[0].Groups[0].Partitions
	parts[0].Holder = parts[0].Holder%2 + 1
	if err := same.Replace(snap); err != nil {
		t.Fatal(err)
	}
	if err := gc.observe("n1", same); err == nil || !strings.Contains(err.Error(), "generation") {
		t.Fatalf("a later revision of the same store: %v", err)
	}

	// Offset back from 5 to 3.
	gc = newGroupCheck()
	if err := gc.observe("n1", good); err != nil {
		t.Fatal(err)
	}
	snap = good.Export()
	snap.Streams[0].Topics[0].Groups[0].Partitions[0].Offset = 3
	back, err := metadata.Restore(cfg, snap)
	if err != nil {
		t.Fatal(err)
	}
	if err := gc.observe("n1", back); err == nil || !strings.Contains(err.Error(), "went back") {
		t.Fatalf("an offset going back: %v", err)
	}
}
