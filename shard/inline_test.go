package shard

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
)

// waitForPumpToWait returns once the started shard's pump has let the run
// token go. It lets it go to wait for work, and, after answering frames,
// for one yield first (yieldBeforeWait), after which it takes the token
// back on its way to the wait: exact where nothing was answered since the
// pump last waited (answers to control operations do not count).
func waitForPumpToWait(s *Shard) {
	s.run.lock()
	s.run.unlock()
}

// startedWithTopic is a started shard owning topic t's partition.
func startedWithTopic(t *testing.T, opts ...harnessOpt) (*Shard, metadata.Namespace) {
	t.Helper()
	h := newHarness(t, 1, nil, opts...)
	s := h.shards[0]
	ns, epoch := h.topic("t")
	h.insert(s, h.build(ns, epoch))
	s.Start()
	return s, ns
}

// A lone synchronous produce to a waiting pump runs on the caller: its
// answer is on its reply channel when SendWaited returns, and a second
// one appends after it. Each follows a control operation the pump took
// from its channel (Inspect), which counts as handled once it ran.
func TestInlineLoneProduceRunsOnTheCaller(t *testing.T) {
	s, ns := startedWithTopic(t)
	for i, payload := range []string{"a", "b"} {
		st, err := s.Inspect(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if st.InlineRuns != uint64(i) || st.LaneRuns != 0 {
			t.Fatalf("before produce %d: inline runs %d, lane runs %d", i, st.InlineRuns, st.LaneRuns)
		}
		waitForPumpToWait(s)
		c := produce(ns, payload)
		if err := s.SendWaited(c.f); err != nil {
			t.Fatal(err)
		}
		if r := c.answered(t); r.Err != nil || r.Offset != uint64(i) {
			t.Fatalf("produce %d: %+v", i, r)
		}
	}
	if s.inlineRuns != 2 {
		t.Fatalf("inline runs %d, want 2", s.inlineRuns)
	}
}

// A frame the pump has taken from its inbox but not yet handled keeps a
// later one from running inline (the caller's order: an async produce,
// then a synchronous one, reach the partition in that order).
func TestInlineWaitsForTheFramesHandedToThePump(t *testing.T) {
	s, ns := startedWithTopic(t)
	// Holding the run token, the test stands where the pump stands between taking
	// a frame and handling it: the pump takes a, then waits for the run token.
	s.run.lock()
	a := produce(ns, "a")
	if err := s.TrySend(a.f); err != nil {
		s.run.unlock()
		t.Fatal(err)
	}
	ready := s.inlineReady()
	s.run.unlock()
	if ready {
		t.Fatal("a frame handed to the pump and not handled: ready to run another inline")
	}
	b := produce(ns, "b")
	if err := s.SendWaited(b.f); err != nil {
		t.Fatal(err)
	}
	ra, rb := <-a.reply, <-b.reply
	if ra.Err != nil || rb.Err != nil || ra.Offset != 0 || rb.Offset != 1 {
		t.Fatalf("a %+v, b %+v: want offsets 0 and 1", ra, rb)
	}
	// Once the pump has handled them, frames run inline again. The pump
	// may still be between its answers and its wait (its yield), where a
	// frame finds the token taken and goes through the inbox: a few tries.
	runs, next := s.inlineRuns, uint64(2)
	for try := 0; try < 100 && s.inlineRuns == runs; try++ {
		waitForPumpToWait(s)
		c := produce(ns, "c")
		if err := s.SendWaited(c.f); err != nil {
			t.Fatal(err)
		}
		if r := <-c.reply; r.Err != nil || r.Offset != next {
			t.Fatalf("c: %+v, want offset %d", r, next)
		}
		next++
	}
	if s.inlineRuns == runs {
		t.Fatal("no frame ran inline after the pump handled the frames handed to it: the handled count lags")
	}
}

// A frame run inline that parks (its partition is not built yet) arms the
// park timer the pump did not wait on: the caller pokes the pump, which
// answers the frame when it expires (never left without an answer).
func TestInlineParkedFrameIsAnsweredAtItsExpiry(t *testing.T) {
	clk := clock.NewManual(time.Unix(0, 0))
	h := newHarness(t, 1, nil, func(c *Config) { c.Clock = clk })
	s := h.shards[0]
	ns, _ := h.topic("t") // committed, not built: a frame for it parks
	s.Start()
	waitForPumpToWait(s)
	c := produce(ns, "x")
	if err := s.SendWaited(c.f); err != nil {
		t.Fatal(err)
	}
	if s.inlineRuns != 1 || s.Parked() != 1 {
		t.Fatalf("inline runs %d, parked %d: want the frame parked inline", s.inlineRuns, s.Parked())
	}
	c.pending(t)
	clk.Advance(s.cfg.Park.MaxAge)
	select {
	case r := <-c.reply:
		if !errors.Is(r.Err, errParkExpired) {
			t.Fatalf("answer %+v, want the park expiry", r)
		}
	case <-time.After(time.Minute): // a watchdog, not a synchronisation: the answer comes at once
		t.Fatal("a frame parked inline was never answered: the pump did not wait on the park timer")
	}
}

// An interval-fsync partition's first append, run inline, arms the sync
// timer: the pump syncs it at the interval.
func TestInlineArmsTheIntervalSync(t *testing.T) {
	clk := clock.NewManual(time.Unix(0, 0))
	h := newHarness(t, 1, nil, func(c *Config) { c.Clock = clk })
	s := h.shards[0]
	ns, epoch := h.topic("t")
	synced := make(chan struct{}, 1)
	p := &syncNotifier{Partition: h.build(ns, epoch), synced: synced}
	_ = h.step(s, opInsertOwned(p, Durability{Fsync: metadata.FsyncInterval, Interval: time.Second}))
	s.Start()
	waitForPumpToWait(s)
	c := produce(ns, "a")
	if err := s.SendWaited(c.f); err != nil {
		t.Fatal(err)
	}
	if r := c.answered(t); r.Err != nil || s.inlineRuns != 1 {
		t.Fatalf("answer %+v, inline runs %d", r, s.inlineRuns)
	}
	clk.Advance(time.Second)
	select {
	case <-synced:
	case <-time.After(time.Minute): // a watchdog, as above
		t.Fatal("a partition dirtied inline was never synced: the pump did not wait on the sync timer")
	}
}

// A shard that may not run frames inline queues them for its pump.
func TestInlineOffWherePumpWorkStaysOnThePump(t *testing.T) {
	for _, tc := range []struct {
		name   string
		manual bool // stepped by the test: no pump
	}{
		{name: "pinned"},
		{name: "manual", manual: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, ns := startedWithTopic(t, func(c *Config) { c.PinCPU, c.Manual = !tc.manual, tc.manual })
			if !tc.manual {
				waitForPumpToWait(s)
			}
			c := produce(ns, "a")
			if err := s.SendWaited(c.f); err != nil {
				t.Fatal(err)
			}
			if s.inline || s.inlineRuns != 0 {
				t.Fatalf("inline %v, runs %d", s.inline, s.inlineRuns)
			}
			if tc.manual {
				for s.Step() {
				}
			}
			if r := <-c.reply; r.Err != nil {
				t.Fatal(r.Err)
			}
		})
	}
}

// syncNotifier wraps a partition and signals each Sync.
type syncNotifier struct {
	partition.Partition
	synced chan struct{}
}

func (n *syncNotifier) Sync() error {
	select {
	case n.synced <- struct{}{}:
	default:
	}
	return n.Partition.Sync()
}
