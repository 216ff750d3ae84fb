//go:build parkway_brokenbuild

package testhooks

import "sync/atomic"

// Enabled reports whether this build has the switches (the tag
// parkway_brokenbuild).
const Enabled = true

var (
	// ServeStaleParked, when set, makes a shard serve parked frames stamped
	// with another incarnation when their partition materialises, instead
	// of rejecting them as stale (breaks DESIGN behaviour 4). Read in the
	// shard's re-dispatch, once per materialisation.
	ServeStaleParked atomic.Bool
	// NoTermStep, when set, lets a raft message through whatever its
	// term's distance ahead of the receiver's (replica.MaxTermStep is not
	// applied; the absolute cap still is), as validation did before issue
	// 26: one message at term 2^62 leaves a group unable to elect for
	// good. Read in replica's message check, once per message.
	NoTermStep atomic.Bool
	// NoForwardBudget, when set, makes a node take every forwarded
	// request whatever the bytes it already holds for its sender and in
	// total (Cluster.MaxForwardedPeerBytes, MaxForwardedBytes), as before
	// issue 26. Read in host's forward budget, once per request.
	NoForwardBudget atomic.Bool
	// NoReadIndexWait, when set, makes a metadata read barrier answer
	// at once, before the metadata group confirmed a read index and
	// before this node applied it: a lookup after it may miss a command
	// committed through another node. Read in host's askRead, once per
	// try.
	NoReadIndexWait atomic.Bool
	// NoJoinConfChange, when set, makes AddNode propose its AddNode
	// command alone, without the metadata group's configuration change
	// that carries it: the metadata names a node the group does not have
	// as a member, as a node addition that forgot the raft configuration
	// change would. Read in host's proposeConfChange, once per proposal
	// of an addition.
	NoJoinConfChange atomic.Bool
	// CommitSkipsOffset, when set, makes a consumer group's committed
	// offset one past the offset its commit names: the message at the
	// offset committed is never read by the group, as a commit path that
	// lost count of what it delivered would leave it. Read in metadata's
	// commitGroupOffsets, once per partition committed.
	CommitSkipsOffset atomic.Bool
	// CommitBeforeHandled, when set, makes a consumer count a fetched
	// batch as handled when its fetch answers, before the application
	// was handed any of it: a batch dropped after (its partition
	// revoked, the member's fence refusing it) is committed all the
	// same, by the revocation or the next commit, and its messages are
	// never read by the group. Read in host's ConsumerDriver.Fetched,
	// once per batch.
	CommitBeforeHandled atomic.Bool
	// IntervalCommitsFetched, when set, makes a consumer's interval
	// commit (CommitOnInterval) name where each of its fetches stands —
	// past batches fetched but not handed to the application yet —
	// instead of the positions the application handled: a batch dropped
	// after (its partition revoked, the member's fence refusing it) is
	// committed by the timer, and its messages are never read by the
	// group. Read in host's ConsumerDriver.IntervalCommit, once per
	// interval commit.
	IntervalCommitsFetched atomic.Bool
	// NoStallTimeout, when set, gives a frame being read no stall
	// deadline, only its FrameTimeout: a peer that stops inside a frame
	// holds its charge of the inbound budget until the frame's end is
	// due rather than for StallTimeout, as if the per-chunk deadline had
	// been forgotten. Read in internal/inbound's Conn.Next, once per
	// chunk awaited.
	NoStallTimeout atomic.Bool
	// CloseKeepsFrame, when set, makes closing an inbound connection
	// keep the charge of the frame it was reading: a connection closed
	// at a read deadline (or for any other reason) mid-frame leaks that
	// frame's bytes from the connection's, its peer's and the total
	// budget for good, as a close path that forgot the frame in progress
	// would. Read in internal/inbound's Conn.Close, once per close.
	CloseKeepsFrame atomic.Bool
	// NoHandshakeBound, when set, bounds the inbound connections that
	// have not authenticated by MaxConns alone, as before issue 28
	// (MaxHandshakes and MaxAddrHandshakes are not applied): connections
	// that never finish a handshake can take every slot, and a member's
	// redial is refused while they are held. Read in internal/slots'
	// Table.Accept, once per connection accepted.
	NoHandshakeBound atomic.Bool
	// CloseKeepsSlot, when set, makes closing an inbound connection
	// keep its slot of MaxConns: every connection closed leaks one, until
	// the receiver refuses every connection. Read in internal/slots'
	// Conn.Close, once per close.
	CloseKeepsSlot atomic.Bool
)
