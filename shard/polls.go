package shard

import (
	"time"

	"github.com/google/btree"

	"github.com/parkway-io/parkway/clock"
)

// waitingPolls are the shard's waiting (long) polls (wait.go): indexed
// by deadline for the one wait timer, and by partition (owned.waiters)
// for the appends that satisfy them. It is pump-owned; sh is the shard
// it answers through.
type waitingPolls struct {
	sh *Shard

	waiters     *btree.BTreeG[*waiter] // waiting polls by deadline
	waitSeq     uint64                 // last waiter's sequence number
	waitTimer   clock.Timer            // fires at the earliest waiter's deadline
	waitAt      time.Time              // when waitTimer fires; zero when disarmed
	touchedList []*owned               // partitions whose waiters wakeWaiters looks at
}
