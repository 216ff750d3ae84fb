package host

import (
	"time"

	"github.com/parkway-io/parkway/internal/backoff"
)

// The membership resend: a configuration change of the metadata group
// (AddNode's learner, RemoveNode's removal) is proposed again until a
// member has applied it. raft drops a configuration change proposed while
// another is in flight, and a proposal is lost with its leader, so one
// not applied within the forward timeout is proposed again at once, and
// one refused ("retry") after a pause of the one backoff. The command
// keeps its deduplication key throughout, so a second commit is a no-op.
//
// ResendDriver holds the decisions without a clock or a goroutine: its
// owner asks Step with the time and whether the change is applied where
// it looks, proposes when told to and reports the proposal's fate with
// Proposed or Refused. memberDriver (memberchange.go) holds one for
// the configuration change of AddNode and RemoveNode.

// ResendOp is what a resend's driver asks for next.
type ResendOp uint8

const (
	// ResendDone: the change is applied.
	ResendDone ResendOp = iota
	// ResendPropose: propose the change (again), then call Proposed or
	// Refused.
	ResendPropose
	// ResendWait: wait until ResendStep.At, or until the change may be
	// applied, and Step again.
	ResendWait
)

// ResendStep is one decision of a ResendDriver.
type ResendStep struct {
	Op ResendOp
	At time.Time // ResendWait: when to step again at the latest
	// Again: the last proposal was not applied within the timeout and
	// is given up (ResendPropose follows, or a wait for a pause).
	Again bool
}

// ResendDriver decides the steps of one membership change. Make it with
// NewResendDriver; it is not safe for concurrent use.
type ResendDriver struct {
	timeout    time.Duration // how long a proposal is given to apply
	pause      backoff.Backoff
	inFlight   bool      // a proposal may still apply
	proposedAt time.Time // when it was made
	retryAt    time.Time // a refused proposal is made again from then
}

// NewResendDriver is a resend that gives each proposal timeout to apply
// and pauses between lo and hi (doubling) after a refusal.
func NewResendDriver(timeout, lo, hi time.Duration) ResendDriver {
	return ResendDriver{timeout: timeout, pause: backoff.New(lo, hi)}
}

// Step decides at now; applied reports whether the change is applied
// where its owner looks (the member proposed through, while a proposal
// is in flight).
func (r *ResendDriver) Step(now time.Time, applied bool) ResendStep {
	if applied {
		return ResendStep{Op: ResendDone}
	}
	var again bool
	if r.inFlight {
		if until := r.proposedAt.Add(r.timeout); now.Before(until) {
			return ResendStep{Op: ResendWait, At: until}
		}
		r.inFlight, again = false, true
	}
	if now.Before(r.retryAt) {
		return ResendStep{Op: ResendWait, At: r.retryAt, Again: again}
	}
	return ResendStep{Op: ResendPropose, Again: again}
}

// InFlight reports whether a proposal made may still apply.
func (r *ResendDriver) InFlight() bool { return r.inFlight }

// Proposed records a proposal made at now.
func (r *ResendDriver) Proposed(now time.Time) {
	r.inFlight, r.proposedAt, r.retryAt = true, now, time.Time{}
	r.pause.Reset()
}

// Refused records a proposal refused at now (or none made: no member to
// make it through); it returns the pause before the next.
func (r *ResendDriver) Refused(now time.Time) time.Duration {
	d := r.pause.Next()
	r.inFlight, r.retryAt = false, now.Add(d)
	return d
}
