package sim

import (
	"testing"

	"github.com/parkway-io/parkway/shard"
)

// Regression for the checker's false alarms on cluster seeds 5504 and
// 8371: a consumer offset store whose tries span a delete and recreate is
// a store of unknown outcome in every earlier incarnation a leader took a
// try against without a definite answer, besides where its last try was
// served. (Dropping those entries made a correct read of the stored
// offset in the earlier incarnation look non-linearizable.)
func TestCheckerSeeds5504And8371StoreAcrossIncarnations(t *testing.T) {
	c := &sim{}
	o := &op{id: 41, kind: kindStore, ns: 7, consumer: "c0", offset: 0, outcome: outcomeOK}
	o.attempts = []*attempt{
		{handles: 1, stamp: 11, resp: shard.Response{Err: shard.ErrOutcomeUnknown}}, // may have applied @11
		{handles: 1, stamp: 11, resp: shard.Response{Err: shard.ErrOutcomeUnknown}}, // the same incarnation again
		{handles: 0, stamp: 12}, // never taken by a leader
		{handles: 1, stamp: 13, resp: shard.Response{Err: shard.ErrRetry}}, // definitely not applied
		{handles: 1, stamp: 14, crashed: true},                             // node crashed with it
		{handles: 1, stamp: 15, served: 15},                                // acknowledged @15
	}
	got := map[incKey]linOut{}
	c.storeElsewhere(o, 15, func(_ *op, k incKey, in linIn, out linOut) {
		if _, dup := got[k]; dup {
			t.Fatalf("%v placed twice", k)
		}
		if in.consumer != "c0" || in.offset != 0 || in.kind != kindStore {
			t.Fatalf("wrong input %+v", in)
		}
		got[k] = out
	})
	want := []incKey{{7, 11}, {7, 14}}
	if len(got) != len(want) {
		t.Fatalf("placed in %v, want %v", got, want)
	}
	for _, k := range want {
		if out, ok := got[k]; !ok || !out.unknown {
			t.Fatalf("%v: %+v, %v; want an unknown-outcome store", k, out, ok)
		}
	}
}
