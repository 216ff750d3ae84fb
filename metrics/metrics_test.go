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
