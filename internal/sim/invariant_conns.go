package sim

// Invariant 14: the inbound connection slots against a connection flood
// (cluster mode, cconns.go). After every action no node's slots
// (internal/slots, the transport's) have held more connections than
// MaxConns, more handshaking than MaxHandshakes, from one address than
// MaxAddrHandshakes, or of one member than MaxPeerConns; the slots held
// are those of the connections the simulator holds open (a closed
// connection gave its slot back); and no handshake is still open once
// its receiver's sweep passed its deadline. An honest member's redial to
// the flooded node is admitted and authenticated before its handshake
// deadline (checked as it is accepted and as the deadlines are swept),
// and closing every connection (calms, quiescence) leaves no slot held.
var invConns = invariant{
	id:        14,
	name:      "inbound connections within their slots",
	behaviour: "26",
	step:      inCluster(func(c *sim) { c.checkConns() }),
	online:    "cconns.go's honestRedial admits every honest redial, sweepConns authenticates it before its deadline, connsOff leaves no slot held",
	caughtBy:  []string{"testhooks.NoHandshakeBound", "testhooks.CloseKeepsSlot"},
}
