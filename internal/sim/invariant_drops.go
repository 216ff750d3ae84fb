package sim

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
)

// Invariant 4: at quiescence every park buffer is empty and no frame
// was dropped for a reason that no injected fault explains (the mode's
// dropOK: dropGates on one node, clusterDropOK in a cluster).
var invDrops = invariant{
	id:        4,
	name:      "park buffers drain, every drop explained",
	behaviour: "8, 12, 15, 17, 19",
	final:     checkParkAndDrops,
	online:    "frames still parked when the run does not settle (notQuiescent), partitions not readable at the final reads",
	caughtBy:  []string{"BreakFastSkip", "BreakEarlySettle", "testhooks.NoTermStep"},
}

// checkParkAndDrops: at quiescence every park buffer is empty, and every
// frame drop is explained by an injected fault or by convergence.
func checkParkAndDrops(h *sim) {
	if h.viol != nil {
		return
	}
	for _, s := range shardsNow(h) {
		st, err := s.sh.Inspect(context.Background())
		if err != nil {
			h.fail(0, "inspect %s: %v", s.name, err)
			return
		}
		if st.ParkedFrames != 0 || st.ParkedBytes != 0 || len(st.Parked) != 0 || s.sh.Parked() != 0 {
			h.fail(4, "%s park buffer not empty at quiescence: %d frames, %d bytes, %d namespaces",
				s.name, st.ParkedFrames, st.ParkedBytes, len(st.Parked))
			return
		}
	}
	for _, d := range h.dropCounters() {
		reg := prometheus.NewRegistry()
		if err := reg.Register(d.m); err != nil {
			h.fail(0, "metrics: %v", err)
			return
		}
		fams, err := reg.Gather()
		if err != nil {
			h.fail(0, "metrics: %v", err)
			return
		}
		for _, f := range fams {
			if f.GetName() != "parkway_frame_drops_total" {
				continue
			}
			for _, mt := range f.GetMetric() {
				if mt.GetCounter().GetValue() == 0 {
					continue
				}
				labels := map[string]string{}
				for _, l := range mt.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if !h.dropOK(labels["variant"], labels["reason"]) {
					h.fail(4, "%sshard %s dropped %v %s frames for reason %q, which no injected fault explains",
						d.who, labels["shard"], mt.GetCounter().GetValue(), labels["variant"], labels["reason"])
					return
				}
				h.event("drops %sshard=%s %s %s=%v", d.label, labels["shard"], labels["variant"], labels["reason"], mt.GetCounter().GetValue())
			}
		}
	}
}
