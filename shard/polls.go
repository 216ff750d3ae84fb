package shard

import (
	"time"

	"github.com/google/btree"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/metrics"
)

// waitingPolls are the shard's waiting (long) polls (wait.go): indexed
// by deadline for the one wait timer, and by partition (owned.waiters)
// for the appends that satisfy them. It is pump-owned; owner is the shard
// it answers through (owner.go), maxWaiters Config.MaxWaiters.
type waitingPolls struct {
	owner      pollsOwner
	clock      clock.Clock
	meta       *metadata.Store
	m          *metrics.Shard
	maxWaiters int

	waiters     *btree.BTreeG[*waiter] // waiting polls by deadline
	waitSeq     uint64                 // last waiter's sequence number
	waitTimer   clock.Timer            // fires at the earliest waiter's deadline
	waitAt      time.Time              // when waitTimer fires; zero when disarmed
	touchedList []*owned               // partitions whose waiters wakeWaiters looks at
}
