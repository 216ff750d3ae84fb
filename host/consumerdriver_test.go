package host_test

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
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
	d.Handled(f0, 10, t0)
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
	if st := d.RevokeNext(false); st.Op != host.RevokeWait {
		t.Fatalf("the revocation goes on (%v) while a message of the revoked partition is handled", st.Op)
	}
	d.Handled(f1, 5, t0) // it passed the fence: it counts
	if st := d.RevokeNext(false); st.Op != host.RevokeCallback || !slices.Equal(st.Parts, []uint32{1}) {
		t.Fatalf("after the message was handled: %+v, want OnRevoked([1])", st)
	}
	if st := d.RevokeNext(false); st.Op != host.RevokeCommit || !maps.Equal(st.Offsets, map[uint32]uint64{1: 5}) {
		t.Fatalf("the revocation commits %+v, want 1:5", st)
	}
	if st := d.RevokeNext(false); st.Op != host.RevokeRelease || st.Gen != 2 {
		t.Fatalf("after the commit: %+v, want the release of generation 2", st)
	}
	if d.AckGen() != 1 {
		t.Fatal("generation 2 acknowledged before its revocation was released")
	}
	d.RevokeDone(true)
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
	d.Handled(f1, 7, t0)
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
	if !d.Handled(f, 4, t0) {
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

// TestConsumerDriverIntervalCommit pins CommitOnInterval's deadline: a
// first handled position is due CommitInterval after it was handled
// (not after the timer happened to be armed), nothing is due before,
// a round whose commit failed or left positions is due an interval
// later, and no timer runs while none wait or under the other
// policies.
func TestConsumerDriverIntervalCommit(t *testing.T) {
	t0 := time.Unix(1000, 0)
	sec := time.Second
	d := host.NewConsumerDriver(host.ConsumerDriverConfig{Group: true, Commit: host.CommitOnInterval,
		MaxPollInterval: time.Minute, CommitInterval: sec}, t0)
	d.Joined(1)
	d.Assign([]uint32{0, 1}, nil)
	fs := d.Assigned([]uint32{0, 1})
	if _, ok := d.NextCommit(t0); ok {
		t.Fatal("a commit timer runs while no position waits")
	}
	d.Fetched(fs[0], 20)
	d.Deliver(fs[0])
	if !d.Handled(fs[0], 10, t0) {
		t.Fatal("a first handled position does not arm the timer")
	}
	d.Deliver(fs[1])
	if d.Handled(fs[1], 3, t0.Add(400*time.Millisecond)) {
		t.Fatal("a second position armed the timer again")
	}
	if wait, ok := d.NextCommit(t0.Add(300 * time.Millisecond)); !ok || wait != 700*time.Millisecond {
		t.Fatalf("next commit in %v (%v), want 700ms: an interval after the first handling", wait, ok)
	}
	if _, due := d.IntervalCommit(t0.Add(999 * time.Millisecond)); due {
		t.Fatal("an interval commit before the interval passed")
	}
	offsets, due := d.IntervalCommit(t0.Add(sec))
	if !due || !maps.Equal(offsets, map[uint32]uint64{0: 10, 1: 3}) {
		t.Fatalf("at the interval: %v (%v), want the handled positions 0:10 1:3 (not the fetch's 20)", offsets, due)
	}
	// The commit failed: the positions wait another interval.
	if wait, ok := d.NextCommit(t0.Add(sec)); !ok || wait != sec {
		t.Fatalf("after a failed round: next in %v (%v), want an interval", wait, ok)
	}
	if _, due := d.IntervalCommit(t0.Add(sec + 500*time.Millisecond)); due {
		t.Fatal("a failed round retried before its interval")
	}
	offsets, _ = d.IntervalCommit(t0.Add(2 * sec))
	d.Committed(offsets)
	if _, ok := d.NextCommit(t0.Add(2 * sec)); ok {
		t.Fatal("the timer runs on after everything was committed")
	}
	// A position handled long after starts its own interval.
	d.Deliver(fs[0])
	if !d.Handled(fs[0], 12, t0.Add(10*sec)) {
		t.Fatal("a position handled after an idle spell does not arm the timer")
	}
	if wait, _ := d.NextCommit(t0.Add(10 * sec)); wait != sec {
		t.Fatalf("next commit in %v, want an interval from the handling", wait)
	}
	for _, mode := range []host.CommitMode{host.CommitAfterBatch, host.CommitManual} {
		o := host.NewConsumerDriver(host.ConsumerDriverConfig{Commit: mode, CommitInterval: sec}, t0)
		o.Assign([]uint32{0}, nil)
		f := o.Assigned([]uint32{0})[0]
		o.Deliver(f)
		if o.Handled(f, 1, t0) {
			t.Fatalf("policy %d armed an interval timer", mode)
		}
		if _, due := o.IntervalCommit(t0.Add(time.Hour)); due {
			t.Fatalf("policy %d made an interval commit", mode)
		}
	}
}

// TestConsumerDriverFetchFailed pins what a failed fetch does: a refusal
// because the group moved on or the lease lapsed ends it (forgotten, the
// owner refreshes); a position out of range starts over at the committed
// offset at once, unless the reset policy is ResetError (fatal); a
// topic, stream or group gone or the node closed is fatal; anything else
// is retried after a doubling backoff, which the fetch's next answer
// resets.
func TestConsumerDriverFetchFailed(t *testing.T) {
	t0 := time.Unix(0, 0)
	ms := time.Millisecond
	d := host.NewConsumerDriver(host.ConsumerDriverConfig{Group: true, RetryMin: 10 * ms, RetryMax: 35 * ms}, t0)
	d.Joined(1)
	d.Assign([]uint32{0, 1, 2}, nil)
	fs := d.Assigned([]uint32{0, 1, 2})
	transient := errors.New("leader changed")
	for i, want := range []time.Duration{10 * ms, 20 * ms, 35 * ms, 35 * ms} {
		if st := d.FetchFailed(fs[0], transient); st.Op != host.FetchRetry || st.Wait != want {
			t.Fatalf("failure %d: %+v, want a retry after %v", i+1, st, want)
		}
	}
	d.Fetched(fs[0], 5)
	if st := d.FetchFailed(fs[0], transient); st.Wait != 10*ms {
		t.Fatalf("after an answer: wait %v, want the backoff started over at 10ms", st.Wait)
	}
	d.Fetched(fs[1], 40)
	if st := d.FetchFailed(fs[1], fmt.Errorf("poll: %w", partition.ErrOffsetOutOfRange)); st.Op != host.FetchRetry || st.Wait != 0 {
		t.Fatalf("out of range: %+v, want a retry at once", st)
	}
	if _, ok := d.From(fs[1]); ok {
		t.Fatal("out of range: the fetch goes on from its position, not the committed offset")
	}
	for _, err := range []error{metadata.ErrNotAssigned, metadata.ErrStaleGeneration, metadata.ErrUnknownMember, metadata.ErrRebalanceInProgress} {
		st := d.FetchFailed(fs[2], fmt.Errorf("poll: %w", err))
		if st.Op != host.FetchEnd {
			t.Fatalf("%v: %+v, want the fetch ended", err, st)
		}
		if _, ok := d.Fetching(2); ok {
			t.Fatalf("%v: the fetch is still current", err)
		}
		d.Assign([]uint32{0, 1, 2}, nil)
		fs[2] = d.Assigned([]uint32{2})[0]
	}
	if st := d.FetchFailed(fs[2], metadata.ErrNotAssigned); !st.Stopped {
		t.Fatal("a current fetch ended without the owner told to stop it")
	}
	if st := d.FetchFailed(fs[2], transient); st.Op != host.FetchEnd || st.Stopped {
		t.Fatalf("a stopped fetch's failure: %+v, want it ended, nothing to stop", st)
	}
	for _, err := range []error{metadata.ErrTopicNotFound, metadata.ErrStreamNotFound, metadata.ErrGroupNotFound, host.ErrClosed} {
		if st := d.FetchFailed(fs[0], err); st.Op != host.FetchFatal {
			t.Fatalf("%v: %+v, want fatal", err, st)
		}
	}
	strict := host.NewConsumerDriver(host.ConsumerDriverConfig{ResetError: true}, t0)
	strict.Assign([]uint32{0}, nil)
	f := strict.Assigned([]uint32{0})[0]
	if st := strict.FetchFailed(f, partition.ErrOffsetOutOfRange); st.Op != host.FetchFatal {
		t.Fatalf("ResetError: out of range is %+v, want fatal", st)
	}
}

// TestConsumerDriverRevocationSteps pins a revocation's order under
// CommitManual and when the wait is given up: OnRevoked comes before
// any commit and the release, the driver commits nothing itself under
// CommitManual (the application commits in OnRevoked: its positions
// are still there to commit until the commit step), a revocation whose
// release was not answered acknowledges nothing and the next refresh
// revokes again, and OnAssigned comes before a new partition's fetch.
func TestConsumerDriverRevocationSteps(t *testing.T) {
	t0 := time.Unix(0, 0)
	d := host.NewConsumerDriver(host.ConsumerDriverConfig{Group: true, Commit: host.CommitManual, MaxPollInterval: time.Minute}, t0)
	d.Joined(1)
	_, added := d.Assign([]uint32{0, 1}, nil)
	if _, ok := d.Fetching(0); ok {
		t.Fatal("a fetch started before the application was told of its partition")
	}
	fs := d.Assigned(added)
	d.Follow(1, nil)
	d.Deliver(fs[1])
	d.Handled(fs[1], 8, t0)
	d.Deliver(fs[1]) // a second message of 1 being handled
	d.Assign([]uint32{0}, []uint32{1})
	if !d.Follow(2, []uint32{1}) {
		t.Fatal("no revocation")
	}
	if st := d.RevokeNext(false); st.Op != host.RevokeWait {
		t.Fatalf("%+v, want a wait for the message being handled", st)
	}
	if st := d.RevokeNext(true); st.Op != host.RevokeCallback {
		t.Fatalf("the wait given up: %+v, want OnRevoked", st)
	}
	if got := d.ToCommit(); !maps.Equal(got, map[uint32]uint64{1: 8}) {
		t.Fatalf("inside OnRevoked the application can commit %v, want 1:8", got)
	}
	if st := d.RevokeNext(false); st.Op != host.RevokeCommit || len(st.Offsets) != 0 {
		t.Fatalf("CommitManual: %+v, want a commit step of nothing", st)
	}
	if st := d.RevokeNext(false); st.Op != host.RevokeRelease || st.Gen != 2 {
		t.Fatalf("%+v, want the release of generation 2", st)
	}
	d.RevokeDone(false)
	if d.AckGen() != 1 || d.Revoking() {
		t.Fatalf("an unanswered release: ack %d, revoking %v; want 1, none", d.AckGen(), d.Revoking())
	}
	if !d.Follow(2, []uint32{1}) {
		t.Fatal("the next refresh does not revoke again")
	}
	if st := d.RevokeNext(false); st.Op != host.RevokeWait {
		t.Fatalf("%+v, want a wait: the message is still being handled", st)
	}
	d.Refused(fs[1]) // the fence refused it: no message of 1 is handled now
	if st := d.RevokeNext(false); st.Op != host.RevokeCallback {
		t.Fatalf("%+v, want OnRevoked again (nothing being handled)", st)
	}
}
