package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// TransportStats is a node-to-node transport's counters at one moment, as
// the transport collectors report them. The engine fills it from its bus
// (transport.TCPBus.Stats holds every field); a transport without one of
// them leaves it zero.
type TransportStats struct {
	// Connections.
	InboundConns      uint64 // open now (gauge)
	Dials, DialErrors uint64
	WriteErrors       uint64 // outbound connections dropped on a write error
	// Traffic: messages accepted by Send and delivered to the inbox;
	// frames and bytes written to and read from connections.
	Sent, Received              uint64
	FramesWritten, BytesWritten uint64
	FramesRead, BytesRead       uint64
	// Messages dropped on a full send queue or a full inbox, or queued for
	// a peer the host removed.
	QueueFull, InboxFull, PeerRemoved uint64
	// Connections refused or closed on hostile or excess input: malformed
	// frames, frames in another node's name, failed TLS handshakes, the
	// connection limit, the byte budgets, read deadlines, frames from a
	// removed peer.
	BadFrames, ForgedFrames, RejectedHandshakes            uint64
	RejectedConns, OverBudget, ReadTimeouts, RemovedSender uint64
	// Inbound connections closed because their peer opened more than its
	// bound (the oldest first).
	PeerConnsClosed uint64
	// Inbound frame bytes held now, and the most ever held (gauges).
	InFlightBytes, PeakInFlightBytes uint64
}

// transportDescs are the transport collectors' descriptions. They are
// always described, whether or not a source is set, so a registry accepts
// the set before the engine attaches its bus.
type transportDescs struct {
	conns, dials, dialErrors, writeErrors *prometheus.Desc
	messages, frames, bytes, dropped      *prometheus.Desc
	refused, inFlight, peakInFlight       *prometheus.Desc
}

func newTransportDescs(labels prometheus.Labels) transportDescs {
	d := func(name, help string, variable ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, variable, labels)
	}
	return transportDescs{
		conns:       d("parkway_transport_inbound_connections", "Open inbound node-to-node connections."),
		dials:       d("parkway_transport_dials_total", "Outbound node-to-node connection attempts."),
		dialErrors:  d("parkway_transport_dial_errors_total", "Outbound connection attempts that failed, a refused TLS handshake included."),
		writeErrors: d("parkway_transport_write_errors_total", "Outbound connections dropped on a write error; the frames buffered on them were lost."),
		messages:    d("parkway_transport_messages_total", "Messages accepted by Send (direction=sent) and put into the inbox (direction=received).", "direction"),
		frames:      d("parkway_transport_frames_total", "Frames written to outbound and read from inbound connections.", "direction"),
		bytes:       d("parkway_transport_bytes_total", "Frame bytes, length prefix and header included, written to outbound and read from inbound connections.", "direction"),
		dropped:     d("parkway_transport_dropped_total", "Messages dropped because the peer's send queue (queue_full) or the inbox (inbox_full) was full, or queued for a peer that was removed (peer_removed); raft re-sends.", "reason"),
		refused: d("parkway_transport_refused_total", "Inbound connections closed or refused, and TLS handshakes failed (either direction), by reason: "+
			"bad_frame, forged_frame, handshake, conn_limit, peer_conn_limit, over_budget, read_timeout, removed_sender.", "reason"),
		inFlight:     d("parkway_transport_inflight_bytes", "Inbound frame bytes held now (being read, or waiting in the inbox)."),
		peakInFlight: d("parkway_transport_inflight_bytes_peak", "The most inbound frame bytes ever held at once."),
	}
}

func (d *transportDescs) describe(ch chan<- *prometheus.Desc) {
	for _, x := range []*prometheus.Desc{d.conns, d.dials, d.dialErrors, d.writeErrors, d.messages,
		d.frames, d.bytes, d.dropped, d.refused, d.inFlight, d.peakInFlight} {
		ch <- x
	}
}

func (d *transportDescs) collect(ch chan<- prometheus.Metric, s TransportStats) {
	counter := func(desc *prometheus.Desc, v uint64, label ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), label...)
	}
	gauge := func(desc *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(v))
	}
	gauge(d.conns, s.InboundConns)
	counter(d.dials, s.Dials)
	counter(d.dialErrors, s.DialErrors)
	counter(d.writeErrors, s.WriteErrors)
	counter(d.messages, s.Sent, "sent")
	counter(d.messages, s.Received, "received")
	counter(d.frames, s.FramesWritten, "sent")
	counter(d.frames, s.FramesRead, "received")
	counter(d.bytes, s.BytesWritten, "sent")
	counter(d.bytes, s.BytesRead, "received")
	counter(d.dropped, s.QueueFull, "queue_full")
	counter(d.dropped, s.InboxFull, "inbox_full")
	counter(d.dropped, s.PeerRemoved, "peer_removed")
	counter(d.refused, s.BadFrames, "bad_frame")
	counter(d.refused, s.ForgedFrames, "forged_frame")
	counter(d.refused, s.RejectedHandshakes, "handshake")
	counter(d.refused, s.RejectedConns, "conn_limit")
	counter(d.refused, s.PeerConnsClosed, "peer_conn_limit")
	counter(d.refused, s.OverBudget, "over_budget")
	counter(d.refused, s.ReadTimeouts, "read_timeout")
	counter(d.refused, s.RemovedSender, "removed_sender")
	gauge(d.inFlight, s.InFlightBytes)
	gauge(d.peakInFlight, s.PeakInFlightBytes)
}

// transportSource holds the function a scrape reads transport statistics
// from.
type transportSource struct {
	stats atomic.Pointer[func() TransportStats]
}

// SetTransport makes the collectors report a node-to-node transport's
// statistics, read by calling stats at every scrape (nil: none). stats
// must be safe to call from any goroutine. It may be called before or
// after the Metrics are registered.
func (m *Metrics) SetTransport(stats func() TransportStats) {
	if stats == nil {
		m.transport.stats.Store(nil)
		return
	}
	m.transport.stats.Store(&stats)
}
