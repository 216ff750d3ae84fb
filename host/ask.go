package host

import (
	"time"

	"github.com/parkway-io/parkway/internal/backoff"
)

// The metadata apply-and-retry and the read barrier ask the metadata
// group the same way: a request (a command proposed, a read index asked)
// is given a bounded time to be answered, and one unanswered by then or
// answered "retry" is asked again after a pause of the one backoff, until
// an answer that ends it or the caller's deadline.
//
// AskDriver holds those decisions without a clock or a goroutine: its
// owner asks when told to (AskSend) and feeds the answer, or the error
// that stands for none by AskStep.At, to Answer; it waits when told to
// (AskWait) and then calls Fired. askSteps (steps.go) carries its tries
// out, for the read barrier and the apply-and-retry alike.

// AskOp is what an ask's driver asks for next.
type AskOp uint8

const (
	// AskDone: the ask is over, with AskStep.Err (nil: answered).
	AskDone AskOp = iota
	// AskSend: ask, and give up on this try at AskStep.At.
	AskSend
	// AskWait: pause until AskStep.At (AskStep.Err is why), then Fired.
	AskWait
)

// AskStep is one decision of an AskDriver.
type AskStep struct {
	Op  AskOp
	At  time.Time
	Err error
}

// AskDriver decides the steps of one ask. Make it with NewAskDriver; it
// is not safe for concurrent use.
type AskDriver struct {
	timeout time.Duration
	pause   backoff.Backoff
	again   func(error) bool
}

// NewAskDriver is an ask whose tries are given timeout each, and made
// again after a pause between lo and hi (doubling) when again reports
// their error worth another try.
func NewAskDriver(timeout, lo, hi time.Duration, again func(error) bool) AskDriver {
	return AskDriver{timeout: timeout, pause: backoff.New(lo, hi), again: again}
}

// Start is the first try, at now.
func (d *AskDriver) Start(now time.Time) AskStep { return d.Fired(now) }

// Answer takes a try's outcome at now: err is its answer's error, or
// the error that stands for no answer by the try's time.
func (d *AskDriver) Answer(now time.Time, err error) AskStep {
	if err == nil || !d.again(err) {
		return AskStep{Op: AskDone, Err: err}
	}
	return AskStep{Op: AskWait, At: now.Add(d.pause.Next()), Err: err}
}

// Fired is a pause over at now: the next try.
func (d *AskDriver) Fired(now time.Time) AskStep {
	return AskStep{Op: AskSend, At: now.Add(d.timeout)}
}
