package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// ForwardedStats are the counters of the requests other nodes forward to
// this one, as the forwarded collectors report them.
type ForwardedStats struct {
	// HeldBytes is what the node holds of forwarded requests received
	// and not yet answered, PeakHeldBytes the most ever held (gauges).
	HeldBytes, PeakHeldBytes uint64
	// Refused counts forwarded requests answered at once with a
	// retriable error because they would have passed a budget.
	Refused uint64
}

// forwarded are the forwarded-request collectors and their source; like
// the transport's, they are always described and collected only once a
// source is set.
type forwarded struct {
	held, peak, refused *prometheus.Desc
	stats               atomic.Pointer[func() ForwardedStats]
}

func newForwarded(labels prometheus.Labels) *forwarded {
	return &forwarded{
		held:    prometheus.NewDesc("parkway_forwarded_held_bytes", "Bytes of requests forwarded by other nodes that this node holds until it answers them (8 KiB counted per request for serving it).", nil, labels),
		peak:    prometheus.NewDesc("parkway_forwarded_held_bytes_peak", "The most bytes of forwarded requests ever held at once.", nil, labels),
		refused: prometheus.NewDesc("parkway_forwarded_refused_total", "Forwarded requests answered at once with a retriable error because the sender's or the node's budget was full.", nil, labels),
	}
}

func (f *forwarded) describe(ch chan<- *prometheus.Desc) {
	ch <- f.held
	ch <- f.peak
	ch <- f.refused
}

func (f *forwarded) collect(ch chan<- prometheus.Metric) {
	stats := f.stats.Load()
	if stats == nil {
		return
	}
	s := (*stats)()
	ch <- prometheus.MustNewConstMetric(f.held, prometheus.GaugeValue, float64(s.HeldBytes))
	ch <- prometheus.MustNewConstMetric(f.peak, prometheus.GaugeValue, float64(s.PeakHeldBytes))
	ch <- prometheus.MustNewConstMetric(f.refused, prometheus.CounterValue, float64(s.Refused))
}

// SetForwarded makes the collectors report the forwarded requests'
// statistics, read by calling stats at every scrape (nil: none). stats
// must be safe to call from any goroutine.
func (m *Metrics) SetForwarded(stats func() ForwardedStats) {
	if stats == nil {
		m.forwarded.stats.Store(nil)
		return
	}
	m.forwarded.stats.Store(&stats)
}
