package host

import (
	"testing"

	"github.com/parkway-io/parkway/metadata"
)

// A watched forwarded poll hears of its partition's new leader and of
// the death of the node it went to; news it has not read yet is merged,
// so a death is not forgotten behind a "no leader yet", nor a known
// leader replaced by it; other partitions' news and other nodes' deaths
// do not reach it.
func TestForwardWatchNews(t *testing.T) {
	c := &clusterNode{watching: make(map[metadata.Namespace]map[uint64]*forwardWatch)}
	ns, other := metadata.Namespace(1), metadata.Namespace(2)
	w := c.watch(1, ns, 7)
	read := func() (forwardEvent, bool) {
		select {
		case ev := <-w.c:
			return ev, true
		default:
			return forwardEvent{}, false
		}
	}
	c.leaderChanged(other, 3)
	c.peerDead(8)
	if ev, ok := read(); ok {
		t.Fatalf("news of another partition or node: %+v", ev)
	}
	c.peerDead(7)
	c.leaderChanged(ns, 0)
	if ev, ok := read(); !ok || !ev.dead {
		t.Fatalf("death then no leader: %+v %v, want the death", ev, ok)
	}
	c.leaderChanged(ns, 9)
	c.leaderChanged(ns, 0)
	if ev, ok := read(); !ok || ev.lead != 9 || ev.dead {
		t.Fatalf("leader 9 then none: %+v %v, want leader 9", ev, ok)
	}
	c.unwatch(1, ns)
	if len(c.watching) != 0 {
		t.Fatalf("watches left: %v", c.watching)
	}
	c.leaderChanged(ns, 4) // nobody to tell
}
