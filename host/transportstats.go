package host

import (
	"github.com/parkway-io/parkway/metrics"
	"github.com/parkway-io/parkway/transport"
)

// tcpStatser is a bus that counts its traffic as transport.TCPBus does.
type tcpStatser interface {
	Stats() transport.TCPStats
}

// exposeTransport makes the engine's metrics report the forwarded
// requests' statistics and its bus's at every scrape, the latter when the
// bus keeps them (a TCPBus, or a host's bus with the same Stats method).
func (e *Engine) exposeTransport() {
	if e.cfg.Cluster == nil {
		return
	}
	e.metrics.SetForwarded(func() metrics.ForwardedStats {
		s := e.ForwardStats()
		return metrics.ForwardedStats{HeldBytes: s.HeldBytes, PeakHeldBytes: s.PeakHeldBytes, Refused: s.Refused}
	})
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
			RemovedSender: s.RemovedSender, PeerConnsClosed: s.PeerConnsClosed,
			InFlightBytes: s.InFlightBytes, PeakInFlightBytes: s.PeakInFlightBytes,
		}
	})
}
