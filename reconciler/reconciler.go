// Package reconciler decides what each shard should hold and tells it.
//
// A reconciler is level-triggered: a pass diffs the committed metadata
// against what its shard holds and converges the difference — build what is
// missing, tear down what was deleted, rewrite stale routing rows, and sweep
// the park buffer. Passes run when a partition-shaping metadata commit wakes
// the reconciler and on a periodic tick, so a lost wake only delays
// convergence by one period; nothing is edge-triggered.
//
// The diff is over what can differ: the namespaces the commits since the
// last pass touched (the metadata store's change log says which), and the
// failures whose retry is due. Its cost follows what changed, not how many
// partitions are committed; the full diff over every partition runs when
// the reconciler's own view of its shard may be wrong (see
// Partitions.Reconcile). Park aging, backoff retries and retention ride
// on every pass that is not skipped, as before.
//
// The reconciler talks to its shard only through the shard's exported
// operations; the shard never calls back.
package reconciler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/parkway-io/parkway/clock"
)

// Reconciler converges one shard towards committed metadata. Hosts can
// supply their own (for example to place partitions differently); the
// default is Partitions.
type Reconciler interface {
	// Reconcile runs one pass. It may skip the pass when nothing can have
	// changed since the last one (see Partitions for the exact rule).
	Reconcile(ctx context.Context) (Report, error)
}

// Report says what a pass did.
type Report struct {
	// Revision is the metadata revision the pass reconciled against.
	Revision uint64
	// Skipped is true when the pass took the fast-skip.
	Skipped bool
	// Incremental is true when the pass converged only the namespaces
	// that commits since the last pass touched (see Partitions.Reconcile).
	Incremental bool
	// Examined counts the committed partitions the pass compared with
	// what the shard holds: every one in a full pass; in an incremental
	// pass, those in the namespaces changed since the last pass and those
	// whose backed-off build it retried.
	Examined int
	// Built, Removed and RowsWritten count partitions materialised, torn
	// down, and routing rows rewritten.
	Built, Removed, RowsWritten int
	// Failed counts builds and removals that failed (and are backed off).
	Failed int
	// Answered and Expired count parked frames the sweep answered by
	// verdict and by age.
	Answered, Expired int
	// Parked is the number of frames still parked after the pass.
	Parked int
	// Pending is the number of backed-off failures awaiting retry.
	Pending int
	// Reconfigured counts partitions whose durability changed.
	Reconfigured int
	// Retained counts messages removed by retention.
	Retained uint64
}

// DidWork reports whether the pass changed anything.
func (r Report) DidWork() bool {
	return r.Built+r.Removed+r.RowsWritten+r.Failed+r.Answered+r.Expired+r.Reconfigured > 0 || r.Retained > 0
}

// Default and limit of the pass period, the reference server's.
const (
	DefaultPeriod = time.Second
	MaxPeriod     = 30 * time.Second
)

// Run drives r until ctx is done: one pass at start, one on every wake,
// and one every period. The period is a steady tick — a wake does not push
// it back — so a stream of commits cannot starve park aging. An idle node
// has one timer per shard firing once per period and nothing else. Pass
// errors are logged and do not stop the loop: the next pass retries.
// A nil clock is the wall clock, a nil logger is silent and a
// non-positive period is DefaultPeriod.
func Run(ctx context.Context, r Reconciler, wake <-chan struct{}, clk clock.Clock, period time.Duration, log hclog.Logger) {
	RunPrebuilding(ctx, r, wake, nil, clk, period, log)
}

// RunPrebuilding is Run, and when r is a Prebuilder, a Prebuild on every
// wake from announced (metadata.Store.SubscribeAnnouncements), between
// passes, without a pass of its own: an announcement changes no committed
// state, and the commit that follows it wakes the pass that adopts what
// Prebuild built. When ctx is done, Release closes what no pass adopted.
func RunPrebuilding(ctx context.Context, r Reconciler, wake, announced <-chan struct{}, clk clock.Clock, period time.Duration, log hclog.Logger) {
	pb, ok := r.(Prebuilder)
	if !ok {
		announced = nil
	} else {
		defer pb.Release()
	}
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if clk == nil {
		clk = clock.Real{}
	}
	if period <= 0 {
		period = DefaultPeriod
	}
	timer := clk.NewTimer(period)
	defer timer.Stop()
	for pass := true; ; {
		if pass {
			if _, err := r.Reconcile(ctx); err != nil && ctx.Err() == nil {
				log.Warn("reconcile pass failed", "error", err)
			}
		}
		pass = true
		select {
		case <-ctx.Done():
			return
		case <-announced:
			if err := pb.Prebuild(ctx); err != nil && ctx.Err() == nil {
				log.Warn("prebuild failed", "error", err)
			}
			pass = false
		case <-wake:
		case <-timer.C():
			timer.Reset(period)
		}
	}
}

// ValidatePeriod checks a pass period against the reference bounds.
func ValidatePeriod(d time.Duration) error {
	if d <= 0 || d > MaxPeriod {
		return fmt.Errorf("reconcile period %v outside (0, %v]", d, MaxPeriod)
	}
	return nil
}

var errPartitionFenced = errors.New("parkway: partition fenced after a failed fsync; rebuilding")

var errNilDependency = errors.New("parkway: reconciler needs a shard, a metadata store and a partition store")
