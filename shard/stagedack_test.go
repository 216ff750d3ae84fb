package shard

import (
	"testing"
	"time"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/vfs"
)

// An FsyncInterval partition built deferred and attached to the shard's
// journal (staged) is answered through the commit group while its
// records are held behind its file: the group's Stage writes them to the
// journal first. Once they outgrow that and its appends go to its own
// file, a lone produce is answered as its append returns — not at the
// group's close, with its journal calls and the pump's yield — while
// one with others queued still waits for the group; and a process crash
// (the page cache kept) still finds every acknowledged produce.
func TestStagedIntervalAnsweredOnceItsAppendsReachItsFile(t *testing.T) {
	mem := vfs.NewMem()
	store, err := journalStore(mem)
	if err != nil {
		t.Fatal(err)
	}
	r := newJournalRunOn(t, store, false)
	ns, epoch := r.h.topic("t0")
	r.parts[ns] = epoch
	p, err := store.BuildDeferred(ns, epoch)
	if err != nil {
		t.Fatal(err)
	}
	s := r.owner(ns)
	if err := r.h.step(s, opInsertOwned(p, Durability{Fsync: metadata.FsyncInterval, Interval: time.Hour})); err != nil {
		t.Fatal(err)
	}
	if o := s.owned[ns]; o == nil || !o.sync.staged {
		t.Fatal("the deferred partition is not staged through the journal")
	}
	const rounds = 200 // past the 4 KiB held behind (writeBehind)
	grouped, direct := 0, 0
	for k := range rounds {
		c := produce(ns, payloadOf(ns, epoch, k))
		s.handle(c.f) // served, the group left open
		select {
		case resp := <-c.reply:
			direct++
			if resp.Err != nil {
				t.Fatalf("produce %d: %v", k, resp.Err)
			}
			r.acks = append(r.acks, ack{ns: ns, offset: resp.Offset, payload: string(c.f.Req.Messages[0].Payload)})
			continue
		default:
		}
		if direct > 0 {
			t.Fatalf("produce %d waits for the commit group after %d were answered at once", k, direct)
		}
		grouped++
		s.settle() // closes the group: the Stage, then the answer
		resp := c.answered(t)
		if resp.Err != nil {
			t.Fatalf("produce %d: %v", k, resp.Err)
		}
		r.acks = append(r.acks, ack{ns: ns, offset: resp.Offset, payload: string(c.f.Req.Messages[0].Payload)})
	}
	if grouped == 0 || direct < rounds/2 {
		t.Fatalf("%d produces answered through the commit group, %d at once; want the first few through it and the rest (at least %d) at once", grouped, direct, rounds/2)
	}

	// Concurrent producers still share the group: a produce with
	// another queued behind it waits for the group's close, so the
	// answered producers can join the next group.
	a, b := produce(ns, payloadOf(ns, epoch, rounds)), produce(ns, payloadOf(ns, epoch, rounds+1))
	if _, err := s.queueWaited(b.f); err != nil { // a synchronous caller's, in the waited lane
		t.Fatal(err)
	}
	s.handle(a.f)
	select {
	case <-a.reply:
		t.Fatal("a produce with another queued behind it was answered before the group closed")
	default:
	}
	s.settle()
	s.handleLane()
	for _, c := range []call{a, b} {
		resp := c.answered(t)
		if resp.Err != nil {
			t.Fatal(resp.Err)
		}
		r.acks = append(r.acks, ack{ns: ns, offset: resp.Offset, payload: string(c.f.Req.Messages[0].Payload)})
	}
	checkLogs(t, mem, r.acks, r.parts, "process crash of a staged FsyncInterval partition")
}
