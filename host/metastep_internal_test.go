package host

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/parkway-io/parkway/internal/replica"
	"github.com/parkway-io/parkway/metrics"
)

// The metadata member steps its peers' messages through groups.Step as
// the partition groups do: a message no correct member sends is counted
// under its reason (a term out of reach apart, which leaves the member's
// term where it was), and a member that is down steps nothing (raft
// re-sends once it is reopened).
func TestMetadataMemberRefusesAndDropsWhileDown(t *testing.T) {
	tr := newManualTrio(t)
	for range 30 {
		for _, e := range tr.engines {
			if err := e.TickMetadata(); err != nil {
				t.Fatal(err)
			}
		}
		tr.deliver()
	}
	e := tr.engines[1]
	m := e.cl.meta
	if m.g.Leader() == 0 {
		t.Fatal("no metadata leader after 30 ticks")
	}
	drops := func(reason string) float64 {
		return testutil.ToFloat64(e.metrics.FrameDrops.WithLabelValues("-1", metaRaftVariant, reason))
	}
	term := m.g.Term()
	far := func() *raftpb.Message {
		return &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: new(uint64(1)), To: new(uint64(2)),
			Term: new(term + replica.MaxTermStep + 1)}
	}
	if err := m.recv(far()); err != nil {
		t.Fatal(err)
	}
	misaddressed := &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: new(uint64(1)), To: new(uint64(3)), Term: new(term)}
	if err := m.recv(misaddressed); err != nil {
		t.Fatal(err)
	}
	if drops(metrics.ReasonOutOfReach) != 1 || drops(metrics.ReasonInvalidRaft) != 1 || m.g.Term() != term {
		t.Fatalf("out of reach %v, invalid %v, term %d (was %d); want 1, 1, unchanged",
			drops(metrics.ReasonOutOfReach), drops(metrics.ReasonInvalidRaft), m.g.Term(), term)
	}
	// Down (a started engine's driver steps what reaches it while the
	// member waits for its reopen): nothing is stepped.
	m.reopen.Fail(time.Time{}, 0, 0, errors.New("down"))
	m.step(far())
	m.reopen.Reopened()
	if drops(metrics.ReasonOutOfReach) != 1 {
		t.Fatalf("a down member stepped a message: out of reach %v, want 1", drops(metrics.ReasonOutOfReach))
	}
}
