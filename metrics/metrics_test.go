package metrics_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/parkway-io/parkway/metrics"
)

// Behaviour 19: every counter the design names is exposed on a registry
// the host owns, with the documented labels, and scrapes as Prometheus
// text.
func TestBehaviour19CountersAreScrapeable(t *testing.T) {
	m := metrics.New()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(m); err != nil {
		t.Fatal(err)
	}
	s := m.Shard(0)
	for _, reason := range []string{metrics.ReasonFull, metrics.ReasonDisconnected, metrics.ReasonUnroutable,
		metrics.ReasonDeliveryFailed, metrics.ReasonMisrouted, metrics.ReasonParkOverflow} {
		s.Drop("produce", reason)
	}
	s.Deny(metrics.DenyTombstoned)
	s.StaleRejects.Inc()
	s.ParkedFrames.Set(3)
	s.ParkedBytes.Set(12288)
	s.Materialised.Inc()
	s.Removed.Inc()
	s.BuildFailed.Inc()

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
	}
	for _, want := range []string{
		"parkway_frame_drops_total", "parkway_partitions_materialised_total",
		"parkway_partitions_removed_total", "parkway_partition_builds_failed_total",
		"parkway_parked_frames", "parkway_parked_bytes", "parkway_stale_rejects_total",
		"parkway_transient_denies_total",
	} {
		if !slices.Contains(names, want) {
			t.Errorf("%s not exposed (have %v)", want, names)
		}
	}
	expected := `
# HELP parkway_frame_drops_total Frames not delivered to a partition, by frame variant and reason. Every dropped client frame was answered with an error.
# TYPE parkway_frame_drops_total counter
parkway_frame_drops_total{reason="delivery_failed",shard="0",variant="produce"} 1
parkway_frame_drops_total{reason="disconnected",shard="0",variant="produce"} 1
parkway_frame_drops_total{reason="full",shard="0",variant="produce"} 1
parkway_frame_drops_total{reason="misrouted",shard="0",variant="produce"} 1
parkway_frame_drops_total{reason="park_overflow",shard="0",variant="produce"} 1
parkway_frame_drops_total{reason="unroutable",shard="0",variant="produce"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(expected), "parkway_frame_drops_total"); err != nil {
		t.Fatal(err)
	}
}

// The transport's statistics are read at scrape time from the source
// SetTransport gave, with direction and reason labels; with no source the
// families are described but empty, so the set registers either way.
func TestTransportStatsScrapedFromTheirSource(t *testing.T) {
	m := metrics.NewLabeled(prometheus.Labels{"node": "3"})
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(m); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "parkway_transport_frames_total"); err != nil || n != 0 {
		t.Fatalf("frames series without a source: %d, %v", n, err)
	}
	stats := metrics.TransportStats{FramesWritten: 7, BytesWritten: 700, FramesRead: 5, BytesRead: 500,
		OverBudget: 2, RejectedHandshakes: 1, InboundConns: 4}
	m.SetTransport(func() metrics.TransportStats { return stats })
	stats.FramesWritten = 8 // read at scrape time, not when set
	expected := `
# HELP parkway_transport_frames_total Frames written to outbound and read from inbound connections.
# TYPE parkway_transport_frames_total counter
parkway_transport_frames_total{direction="received",node="3"} 5
parkway_transport_frames_total{direction="sent",node="3"} 8
# HELP parkway_transport_inbound_connections Open inbound node-to-node connections.
# TYPE parkway_transport_inbound_connections gauge
parkway_transport_inbound_connections{node="3"} 4
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(expected),
		"parkway_transport_frames_total", "parkway_transport_inbound_connections"); err != nil {
		t.Fatal(err)
	}
	for reason, want := range map[string]float64{"over_budget": 2, "handshake": 1, "bad_frame": 0} {
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, f := range families {
			for _, s := range f.GetMetric() {
				if f.GetName() != "parkway_transport_refused_total" {
					continue
				}
				for _, l := range s.GetLabel() {
					if l.GetName() == "reason" && l.GetValue() == reason {
						found = true
						if got := s.GetCounter().GetValue(); got != want {
							t.Errorf("refused{reason=%q} = %v, want %v", reason, got, want)
						}
					}
				}
			}
		}
		if !found {
			t.Errorf("refused{reason=%q} not exposed", reason)
		}
	}
}
