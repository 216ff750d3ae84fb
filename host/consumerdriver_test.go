package host_test

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/parkway-io/parkway/host"
)

// TestConsumerDriverRebalance pins a consumer's decisions through a
// rebalance: the fetches follow the assignment; a fetch goes on from
// where its last batch ended; a message of a fetch that was replaced
// does not count as handled; a revocation waits for the message being
// handled, commits the revoked partitions' positions (not under
// CommitManual) and only then acknowledges the generation; a partition
// held anew is fetched from the committed offset, not from the old
// fetch's position.
func TestConsumerDriverRebalance(t *testing.T) {
	t0 := time.Unix(1000, 0)
	d := host.NewConsumerDriver(host.ConsumerDriverConfig{Group: true, Commit: host.CommitAfterBatch,
		MaxPollInterval: time.Minute, SessionTimeout: 10 * time.Second}, t0)
	d.Joined(1)
	if _, added := d.Assign([]uint32{0, 1}, nil); !slices.Equal(added, []uint32{0, 1}) {
		t.Fatalf("added %v, want [0 1]", added)
	}
	f0, _ := d.Start(0)
	f1, _ := d.Start(1)
	if _, ok := d.Start(1); ok {
		t.Fatal("a second fetch of partition 1 started")
	}
	if d.Follow(1, nil) || d.AckGen() != 1 {
		t.Fatalf("generation 1 without revocations: ack %d, want 1", d.AckGen())
	}
	if _, ok := d.From(f0); ok {
		t.Fatal("a new fetch starts at an offset, not the committed one")
	}
	d.Fetched(f0, 10)
	if off, ok := d.From(f0); !ok || off != 10 {
		t.Fatalf("after a batch up to 10 the fetch goes on from %d (%v), want 10", off, ok)
	}
	// Partition 0's messages are handled, one of partition 1 is being
	// handled when generation 2 revokes 1.
	if !d.Deliver(f0) {
		t.Fatal("a current fetch's message refused")
	}
	d.Handled(f0, 10)
	if !d.BatchDone() {
		t.Fatal("CommitAfterBatch does not commit after a batch")
	}
	if !d.Deliver(f1) {
		t.Fatal("a current fetch's message refused")
	}
	stopped, added := d.Assign([]uint32{0}, []uint32{1})
	if len(added) != 0 || len(stopped) != 1 || stopped[0] != f1 {
		t.Fatalf("revoking 1: stopped %v added %v, want f1 stopped", stopped, added)
	}
	if !d.Follow(2, []uint32{1}) || d.Follow(2, []uint32{1}) {
		t.Fatal("a revocation does not start once")
	}
	if d.RevokeReady([]uint32{1}) {
		t.Fatal("the revocation goes on while a message of the revoked partition is handled")
	}
	d.Handled(f1, 5) // it passed the fence: it counts
	if !d.RevokeReady([]uint32{1}) {
		t.Fatal("the revocation waits after the message was handled")
	}
	if got := d.Revoke([]uint32{1}); !maps.Equal(got, map[uint32]uint64{1: 5}) {
		t.Fatalf("the revocation commits %v, want 1:5", got)
	}
	if d.AckGen() != 1 {
		t.Fatal("generation 2 acknowledged before its revocation was released")
	}
	d.RevokeDone(2, true)
	if d.AckGen() != 2 || d.Revoking() {
		t.Fatalf("after the release: ack %d, want 2", d.AckGen())
	}
	if got := d.ToCommit(); !maps.Equal(got, map[uint32]uint64{0: 10}) {
		t.Fatalf("to commit %v, want 0:10 (1 was committed by the revocation)", got)
	}
	// A message of the stopped fetch does not count.
	if d.Deliver(f1) {
		t.Fatal("a stopped fetch's message delivered")
	}
	d.Handled(f1, 7)
	if got := d.ToCommit(); got[1] != 0 {
		t.Fatalf("a stopped fetch's position counted: %v", got)
	}
	// Partition 1 comes back: a new fetch, from the committed offset.
	_, added = d.Assign([]uint32{0, 1}, nil)
	if !slices.Equal(added, []uint32{1}) {
		t.Fatalf("added %v, want [1]", added)
	}
	nf, _ := d.Start(1)
	if nf.ID == f1.ID {
		t.Fatal("a partition held anew reuses the old fetch")
	}
	if _, ok := d.From(nf); ok {
		t.Fatal("a partition held anew starts from the old fetch's position, not the committed offset")
	}
	d.Committed(map[uint32]uint64{0: 10})
	if d.Uncommitted() {
		t.Fatal("committed positions still wait")
	}
}

// TestConsumerDriverFenceRefusal pins what a refused delivery does: the
// fetch is replaced by one that starts at the committed offset, so the
// messages skipped are fetched again, not passed by.
func TestConsumerDriverFenceRefusal(t *testing.T) {
	d := host.NewConsumerDriver(host.ConsumerDriverConfig{Group: true, MaxPollInterval: time.Minute}, time.Unix(0, 0))
	d.Joined(1)
	d.Assign([]uint32{3}, nil)
	f, _ := d.Start(3)
	d.Fetched(f, 40)
	if !d.Deliver(f) {
		t.Fatal("refused")
	}
	nf, ok := d.Refused(f)
	if !ok || nf.ID == f.ID || nf.Part != 3 {
		t.Fatalf("refusal: %v %v, want a new fetch of 3", nf, ok)
	}
	if _, ok := d.From(nf); ok {
		t.Fatal("the new fetch goes on past the refused batch")
	}
	if d.Deliver(f) {
		t.Fatal("the refused fetch still delivers")
	}
	if _, ok := d.Refused(f); ok {
		t.Fatal("a stale refusal replaced the fetch again")
	}
}

// TestConsumerDriverRejoinAndStall pins the application's bound and a
// rejoin: an application that does not ask for MaxPollInterval stalls
// (not while it waits for messages), the member leaves and every fetch
// stops; its next ask rejoins; a new membership forgets the old one's
// positions; the heartbeat waits at most until the bound passes, and a
// third of the session while the member is lost.
func TestConsumerDriverRejoinAndStall(t *testing.T) {
	t0 := time.Unix(0, 0)
	d := host.NewConsumerDriver(host.ConsumerDriverConfig{Group: true, MaxPollInterval: time.Minute, SessionTimeout: 9 * time.Second}, t0)
	d.Joined(3)
	d.Assign([]uint32{0}, nil)
	f, _ := d.Start(0)
	d.Deliver(f)
	if !d.Handled(f, 4) {
		t.Fatal("CommitOnInterval's timer not armed by a first position")
	}
	if d.Stalled(t0.Add(2*time.Minute)) != true {
		t.Fatal("an application that did not ask for two minutes is not stalled")
	}
	if got := d.NextHeartbeat(t0.Add(30*time.Second), time.Hour, false); got != 30*time.Second+time.Millisecond {
		t.Fatalf("next heartbeat %v, want when the bound passes", got)
	}
	if got := d.NextHeartbeat(t0.Add(30*time.Second), time.Hour, true); got != 3*time.Second {
		t.Fatalf("lost: next heartbeat %v, want a third of the session", got)
	}
	d.Asked(true, t0.Add(30*time.Second))
	if d.Stalled(t0.Add(time.Hour)) || !d.Live(t0.Add(time.Hour)) {
		t.Fatal("an application waiting for messages stalled")
	}
	d.Asked(false, t0.Add(time.Hour))
	if !d.Stalled(t0.Add(time.Hour + 2*time.Minute)) {
		t.Fatal("not stalled")
	}
	if stopped := d.Leave(true); len(stopped) != 1 || !d.Idle() || d.Live(t0.Add(time.Hour)) {
		t.Fatalf("leaving: stopped %v, idle %v", stopped, d.Idle())
	}
	if !d.Asked(true, t0.Add(2*time.Hour)) || d.Idle() {
		t.Fatal("the next ask does not rejoin")
	}
	d.Joined(5)
	if d.Uncommitted() || d.AckGen() != 5 {
		t.Fatalf("a new membership keeps the old positions or generation: ack %d", d.AckGen())
	}
}
