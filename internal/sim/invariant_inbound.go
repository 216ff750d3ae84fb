package sim

// Invariant 13: the inbound frame budget against a member that stalls
// frames and links whose frames arrive slowly (cluster mode). After
// every action no node's inbound budget (internal/inbound, the
// transport's) has held more than its bounds per connection, per peer
// and in total; no stalled or slow frame is still charged once its
// receiver's read deadlines were checked past the frame's stall or frame
// deadline; no frame of a member that does not stall is refused for the
// budget (checked as each frame arrives, cpeer.go's frameIn); and a
// connection closed mid-frame holds nothing once closed (checked as it
// closes, cslow.go's checkClosed). At quiescence no node holds any
// inbound bytes.
var invInbound = invariant{
	id:        13,
	name:      "inbound frames within their budget and deadlines",
	behaviour: "26",
	step:      inCluster(func(c *sim) { c.checkInbound(false) }),
	settled:   inCluster(func(c *sim) { c.checkInbound(true) }),
	online:    "cpeer.go's frameIn refuses no frame of a member that does not stall",
	caughtBy:  []string{"testhooks.NoStallTimeout", "testhooks.CloseKeepsFrame"},
}
