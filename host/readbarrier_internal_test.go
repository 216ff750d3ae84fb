package host

import (
	"testing"
	"time"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/shard"
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
		b := &Barrier{ask: askSteps{clk: clk, deadline: clk.Now().Add(time.Hour),
			d:   NewAskDriver(time.Second, time.Millisecond, time.Second, func(error) bool { return true }),
			try: func(chan MetadataResult) error { return nil }, noAnswer: shard.ErrRetry}}
		b.ask.start()
		if b.ask.st.Op != AskSend {
			t.Fatalf("first step %v, want a try", b.ask.st.Op)
		}
		// The try is in flight: its answer arrives in the step in which
		// its time runs out.
		b.ask.reply = make(chan MetadataResult, 1)
		b.ask.alarm.set(b.ask.due())
		b.ask.reply <- MetadataResult{}
		clk.Advance(time.Second)
		err, done := b.Step()
		if !done || err != nil {
			t.Fatalf("round %d: Step = %v, done %v; want the answer taken (nil, done)", round, err, done)
		}
	}
}
