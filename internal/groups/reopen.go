package groups

import (
	"time"

	"github.com/parkway-io/parkway/internal/backoff"
)

// Reopen after a failure. A group that failed (a Ready its raft log
// refused, a panic raft contained) is taken down by its owner and opened
// again from its raft log once a try is due; each failed try doubles the
// wait, within the owner's bounds (the one backoff, internal/backoff).
// Both owners pace it with a Reopen: the metadata member reopens itself
// on its tick, and a partition's group is rebuilt with its partition by
// the shard's reconciler, whose every build or removal that failed waits
// the same way.

// Default bounds of a Reopen's wait, the reference server's: 1 s
// doubling, clamped at 60 s.
const (
	DefaultReopenMin = time.Second
	DefaultReopenMax = time.Minute
)

// Reopen is one failed group's (or build's) way back: why it is down and
// when it is tried again. The zero value is not down.
type Reopen struct {
	bo  backoff.Backoff
	err error
}

// Fail takes the group down (or counts a failed reopen) with err, why
// it is down, and returns the wait before the next try: at first lo
// (DefaultReopenMin when 0), doubling on each failure since the last
// Reopened, clamped at hi (DefaultReopenMax when 0).
func (r *Reopen) Fail(now time.Time, lo, hi time.Duration, err error) time.Duration {
	if !r.bo.Failing() {
		if lo == 0 {
			lo = DefaultReopenMin
		}
		if hi == 0 {
			hi = DefaultReopenMax
		}
		r.bo = backoff.New(lo, hi)
	}
	r.err = err
	return r.bo.Fail(now)
}

// Down is why the group is down, nil when it runs.
func (r *Reopen) Down() error { return r.err }

// Due reports whether the next try of a down group may start at now.
func (r *Reopen) Due(now time.Time) bool { return r.bo.Due(now) }

// Reopened records that the group runs again: the next failure waits lo
// again.
func (r *Reopen) Reopened() { *r = Reopen{} }
