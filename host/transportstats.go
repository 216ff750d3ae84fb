package host

import (
	"github.com/parkway-io/parkway/metrics"
	"github.com/parkway-io/parkway/transport"
)

// tcpStatser is a bus that counts its traffic as transport.TCPBus does.
type tcpStatser interface {
	Stats() transport.TCPStats
}

// exposeTransport makes the engine's metrics report its bus's statistics
// at every scrape, when the bus keeps them (a TCPBus, or a host's bus
// with the same Stats method).
func (e *Engine) exposeTransport() {
	if e.cfg.Cluster == nil {
		return
	}
	bus, ok := e.cfg.Cluster.Bus.(tcpStatser)
	if !ok {
		return
	}
	e.metrics.SetTransport(func() metrics.TransportStats {
		s := bus.Stats()
		return metrics.TransportStats{
			InboundConns: s.InboundConns, Dials: s.Dials, DialErrors: s.DialErrors, WriteErrors: s.WriteErrors,
			Sent: s.Sent, Received: s.Received,
			FramesWritten: s.FramesWritten, BytesWritten: s.BytesWritten,
			FramesRead: s.FramesRead, BytesRead: s.BytesRead,
			QueueFull: s.QueueFull, InboxFull: s.InboxFull, PeerRemoved: s.PeerRemoved,
			BadFrames: s.BadFrames, ForgedFrames: s.ForgedFrames, RejectedHandshakes: s.RejectedHandshakes,
			RejectedConns: s.RejectedConns, OverBudget: s.OverBudget, ReadTimeouts: s.ReadTimeouts,
			RemovedSender: s.RemovedSender,
			InFlightBytes: s.InFlightBytes, PeakInFlightBytes: s.PeakInFlightBytes,
		}
	})
}
