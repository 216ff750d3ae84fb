package sim

import "testing"

// quorumReached is the acknowledged-write check's judge: a commit needs a
// replica linked, at some moment while the op ran, to a majority of the
// partition's replicas (itself included) — of its replicas, not of the
// cluster's nodes — in both directions: a member the leader could send to
// but not hear from (or the reverse) is no part of a quorum.
func TestQuorumReached(t *testing.T) {
	link := func(l *links, a, b uint64) {
		l[a] |= 1<<a | 1<<b
		l[b] |= 1<<a | 1<<b
	}
	var alone links // node 1 up, cut off from everyone
	alone[1] = 1 << 1
	var pair links // 1 and 2 linked; 4 and 5 linked to 1 but hold no replica
	link(&pair, 1, 2)
	link(&pair, 1, 4)
	link(&pair, 1, 5)
	var outsiders links // 1 linked to 4 and 5 only: a cluster majority, no replica majority
	link(&outsiders, 1, 4)
	link(&outsiders, 1, 5)
	var chain links // 1-2 and 2-3 at different moments: 2 reached both
	link(&chain, 1, 2)
	link(&chain, 2, 3)
	// to sets the link from a to b only (both up).
	to := func(l *links, a, b uint64) {
		l[a] |= 1<<a | 1<<b
		l[b] |= 1 << b
	}
	var deaf links // 1 sends to 2 and 3, hears neither; 2 and 3 linked
	to(&deaf, 1, 2)
	to(&deaf, 1, 3)
	link(&deaf, 2, 3)
	var mute links // 2 and 3 send to 1, 1 reaches neither
	to(&mute, 2, 1)
	to(&mute, 3, 1)
	var crossed links // 1 → 2 only and 3 → 1 only: no member both ways
	to(&crossed, 1, 2)
	to(&crossed, 3, 1)
	for _, tc := range []struct {
		name  string
		reach links
		reps  []uint64
		want  bool
	}{
		{"factor one, its node up", alone, []uint64{1}, true},
		{"factor one, its node never up", alone, []uint64{2}, false},
		{"factor three, leader cut off", alone, []uint64{1, 2, 3}, false},
		{"factor three, leader and one follower", pair, []uint64{1, 2, 3}, true},
		{"factor three, linked only to non-replicas", outsiders, []uint64{1, 2, 3}, false},
		{"factor two needs both", pair, []uint64{1, 3}, false},
		{"factor two, both linked", pair, []uint64{2, 1}, true},
		{"factor five, three linked through the middle one", chain, []uint64{1, 2, 3, 4, 5}, true},
		{"factor five, two linked", pair, []uint64{2, 3, 6, 7, 1}, false},
		{"factor three, leader can send but not hear", deaf, []uint64{1, 2, 3}, true}, // 2 with 3
		{"factor two, leader can send but not hear", deaf, []uint64{1, 2}, false},
		{"factor three, a node heard but unable to send", mute, []uint64{1, 2, 3}, false},
		{"factor three, one direction to each", crossed, []uint64{1, 2, 3}, false},
	} {
		if got := quorumReached(tc.reach, tc.reps); got != tc.want {
			t.Errorf("%s: quorumReached = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Regression for the checker's false alarm on cluster seed 1376: a
// follower acknowledged over a clogged link and went down; its held
// acknowledgements reached the leader when the clog ended and the entry
// committed, as raft allows. The clog's links count as up at its end for
// the produces in flight (noteClogged), when the receiver runs; a clog
// into a node that is down delivers nothing and counts nothing.
func TestCheckerSeed1376ClogReleasedAfterItsSenderWentDown(t *testing.T) {
	c := &sim{}
	for id := uint64(1); id <= 3; id++ {
		c.nodes = append(c.nodes, &node{b: c, member: true, id: id})
	}
	c.node(3).down = true // n3 acknowledged, then went down
	o := &op{kind: kindProduce}
	o.reach[1] = 1<<1 | 1<<3 // the leader reached n3 while the op ran
	o.reach[3] = 1 << 3      // n3's answers were held by the clog
	c.clients = []*client{{op: o}}
	reps := []uint64{1, 2, 3}
	if quorumReached(o.reach, reps) {
		t.Fatal("a quorum before the clog ended: the test does not set up the case")
	}
	c.netf.clogs = [][2]uint64{{3, 2}} // into n2, which is down too
	c.node(2).down = true
	c.noteClogged()
	if quorumReached(o.reach, reps) {
		t.Fatal("a clog into a node that is down counted as a link")
	}
	c.netf.clogs = [][2]uint64{{3, 1}}
	c.noteClogged()
	if !quorumReached(o.reach, reps) {
		t.Fatalf("the clog's release to the leader not counted: reach %v", o.reach)
	}
}
