package host_test

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/transport"
)

// value returns the value of the series of family name whose labels
// include want, and whether it exists.
func value(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) (float64, bool) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			for k, v := range want {
				if !hasLabel(m, k, v) {
					continue series
				}
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue(), true
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

func hasLabel(m *dto.Metric, k, v string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == k && l.GetValue() == v {
			return true
		}
	}
	return false
}

// A cluster engine on a TCP bus exposes the bus's statistics through its
// metrics: the frames and bytes its metadata traffic took, its inbound
// connections, and a connection closed for a malformed frame — read at
// scrape time, each series labelled with the node.
func TestEngineExposesTransportStats(t *testing.T) {
	peers := []transport.NodeID{1, 2}
	buses := map[transport.NodeID]*transport.TCPBus{}
	for _, id := range peers {
		b, err := transport.ListenTCP(id, "127.0.0.1:0", nil, transport.TCPOptions{InsecurePlaintext: true})
		if err != nil {
			t.Fatal(err)
		}
		buses[id] = b
	}
	for _, id := range peers {
		for _, p := range peers {
			if p != id {
				if err := buses[id].AddPeer(p, buses[p].Addr().String()); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	reg := prometheus.NewPedanticRegistry()
	var engines []*host.Engine
	for _, id := range peers {
		e, err := host.New(host.Config{Shards: 1, Cluster: &host.Cluster{ID: id, Peers: peers, Bus: buses[id]}})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		if err := reg.Register(e.Metrics()); err != nil {
			t.Fatal(err)
		}
		if err := e.Start(); err != nil {
			t.Fatal(err)
		}
		engines = append(engines, e)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := engines[0].ApplyMetadata(ctx, metadata.CreateStream{Name: "s"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
	}{
		{"parkway_transport_frames_total", map[string]string{"node": "1", "direction": "sent"}},
		{"parkway_transport_bytes_total", map[string]string{"node": "1", "direction": "sent"}},
		{"parkway_transport_frames_total", map[string]string{"node": "1", "direction": "received"}},
		{"parkway_transport_bytes_total", map[string]string{"node": "1", "direction": "received"}},
		{"parkway_transport_messages_total", map[string]string{"node": "2", "direction": "received"}},
		{"parkway_transport_dials_total", map[string]string{"node": "2"}},
	} {
		if v, ok := value(t, reg, c.name, c.labels); !ok || v == 0 {
			t.Errorf("%s%v = %v (exists: %v), want > 0", c.name, c.labels, v, ok)
		}
	}
	frames, _ := value(t, reg, "parkway_transport_frames_total", map[string]string{"node": "1", "direction": "sent"})
	bytes, _ := value(t, reg, "parkway_transport_bytes_total", map[string]string{"node": "1", "direction": "sent"})
	if bytes < 29*frames {
		t.Errorf("%v bytes for %v frames: less than a frame's header each", bytes, frames)
	}

	// A stranger's malformed frame closes its connection, counted.
	refused := map[string]string{"node": "1", "reason": "bad_frame"}
	if v, ok := value(t, reg, "parkway_transport_refused_total", refused); !ok || v != 0 {
		t.Fatalf("bad frames before any: %v (exists: %v)", v, ok)
	}
	c, err := net.Dial("tcp", buses[1].Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte{0, 0, 0, 1, 0, 0, 0, 0}); err != nil { // a length below the header's
		t.Fatal(err)
	}
	if _, err := io.ReadAll(c); err != nil { // until the bus closes it, after counting
		t.Fatal(err)
	}
	if v, _ := value(t, reg, "parkway_transport_refused_total", refused); v != 1 {
		t.Fatalf("bad frames after a malformed one: %v, want 1", v)
	}

	// A frame from a peer the host removed from the bus is refused too.
	if err := buses[1].RemovePeer(9); err != nil {
		t.Fatal(err)
	}
	removed := map[string]string{"node": "1", "reason": "removed_sender"}
	if v, ok := value(t, reg, "parkway_transport_refused_total", removed); !ok || v != 0 {
		t.Fatalf("removed senders before any: %v (exists: %v)", v, ok)
	}
	c9, err := net.Dial("tcp", buses[1].Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c9.Close()
	frame := binary.BigEndian.AppendUint32(nil, 25)            // length: the header, no payload
	frame = binary.BigEndian.AppendUint64(frame, 9)            // from
	frame = binary.BigEndian.AppendUint64(frame, 1)            // to
	frame = binary.BigEndian.AppendUint64(append(frame, 0), 0) // kind, group
	if _, err := c9.Write(frame); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(c9); err != nil {
		t.Fatal(err)
	}
	if v, _ := value(t, reg, "parkway_transport_refused_total", removed); v != 1 {
		t.Fatalf("removed senders after one frame: %v, want 1", v)
	}
}
