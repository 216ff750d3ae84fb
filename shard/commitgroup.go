package shard

import (
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/metrics"
	"github.com/parkway-io/parkway/partition"
)

// commitGroup makes the shard's appends durable before they are answered
// (durability.go, groupsync.go): the acks waiting for the group commit's
// fsync (FsyncAlways) or a journal stage, and the interval-policy
// partitions waiting for their timer (FsyncInterval). It is pump-owned;
// owner is the shard it answers and fences through (owner.go), polls the
// waiting polls an acknowledged append wakes; the rest is the shard's
// configuration (manual: Config.Manual, journal: Config.Journal).
type commitGroup struct {
	owner   commitOwner
	polls   *waitingPolls
	clock   clock.Clock
	log     hclog.Logger
	m       *metrics.Shard
	manual  bool
	journal *partition.Journal

	pending []pendingAck // acks waiting for the group's fsync
	// carriedLater are carried produces answered already whose
	// partition's fsync waits to share a group, or for carriedAt
	// (carried.go).
	carriedLater []pendingAck
	carriedAt    time.Time
	// held are the acks of provisional partitions made durable, waiting
	// for their incarnation's commit (provisional.go).
	held       map[*owned][]pendingAck
	groupStart time.Time   // when the commit group's first append was made
	syncTimer  clock.Timer // interval-policy fsync timer, armed while needed
	syncAt     time.Time   // when syncTimer fires; zero when disarmed
	lingered   bool        // the open group yielded once (lingerGroup)

	// groupBuf is scratch for the partitions a commit group or an
	// interval sync covers; intervalDirty lists the interval-policy
	// partitions dirty since their last sync.
	groupBuf      []*owned
	stageBuf      []*owned              // scratch for a group's staged partitions
	groupParts    []partition.Partition // scratch of syncGroup
	intervalDirty []*owned
}
