package host

import (
	"testing"
	"time"

	"github.com/parkway-io/parkway/clock"
)

// A manual engine's Barrier stepped when its try's answer and the try's
// timer are both ready takes the answer, every time. A select over both
// picks at random: the simulator then saw the same cluster seed end its
// read barrier in one run and time it out (and ask again a second
// later) in the next, and the runs diverged.
func TestBarrierStepTakesAnswerBeforeTimer(t *testing.T) {
	// Each round would pass by chance with probability one half if the
	// choice were random.
	for round := range 64 {
		clk := clock.NewManual(time.Unix(1_000_000, 0))
		e := &Engine{cl: &clusterNode{}}
		e.cfg.Clock = clk
		b := &Barrier{e: e, deadline: clk.Now().Add(time.Hour), t: askTimer{clk: clk},
			d: NewAskDriver(time.Second, time.Millisecond, time.Second, func(error) bool { return true })}
		b.st = b.d.Start(clk.Now())
		if b.st.Op != AskSend {
			t.Fatalf("first step %v, want a try", b.st.Op)
		}
		// The try is in flight: its answer arrives in the step in which
		// its time runs out.
		b.reply = make(chan error, 1)
		b.t.until(b.st.At)
		b.reply <- nil
		clk.Advance(time.Second)
		err, done := b.Step()
		b.t.stop()
		if !done || err != nil {
			t.Fatalf("round %d: Step = %v, done %v; want the answer taken (nil, done)", round, err, done)
		}
	}
}
