package parkway_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/parkway-io/parkway"
)

// TestMain fails the package if any test leaves a goroutine behind: every
// Node a test opens must be closed, and Close must stop everything it
// started.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testTimeout bounds every call a test makes, so a lost answer fails the
// test instead of hanging it. It is a safety net, never an assertion.
const testTimeout = 30 * time.Second

// open opens a node inside a synctest bubble and closes it when the test
// ends (synctest runs the cleanup inside the bubble).
//
// Tests that open nodes run in bubbles (synctest.Test): time is virtual
// there, so periods, backoffs and deadlines cost nothing and a test never
// depends on the machine's speed; and the cleanup waits, with
// synctest.Wait, until the node is idle, so a test ends on a settled node.
func open(t *testing.T, cfg parkway.Config) *parkway.Node {
	t.Helper()
	n, err := parkway.Open(cfg)
	if err != nil {
		t.Fatalf("Open(%+v): %v", cfg, err)
	}
	t.Cleanup(func() {
		synctest.Wait()
		if err := n.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return n
}

// ctxFor returns a context bounded by testTimeout, cancelled at test end.
func ctxFor(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func mustStream(t testing.TB, n *parkway.Node, name string) parkway.Stream {
	t.Helper()
	id, err := n.Admin().CreateStream(ctxFor(t), name)
	if err != nil {
		t.Fatalf("CreateStream(%q): %v", name, err)
	}
	return id
}

func mustTopic(t testing.TB, n *parkway.Node, stream parkway.Stream, name string, partitions int, opts ...parkway.TopicOption) parkway.Topic {
	t.Helper()
	id, err := n.Admin().CreateTopic(ctxFor(t), stream, name, partitions, opts...)
	if err != nil {
		t.Fatalf("CreateTopic(%v, %q, %d): %v", stream, name, partitions, err)
	}
	return id
}

func mustProduce(t testing.TB, n *parkway.Node, topic parkway.Topic, to parkway.Partitioning, payloads ...string) parkway.Ack {
	t.Helper()
	msgs := make([]parkway.Message, len(payloads))
	for i, p := range payloads {
		msgs[i].Payload = []byte(p)
	}
	ack, err := n.Produce(ctxFor(t), topic, to, msgs...)
	if err != nil {
		t.Fatalf("Produce(%v, %q): %v", topic, payloads, err)
	}
	if ack.Count != len(payloads) {
		t.Fatalf("Produce(%v, %q) acked %d messages", topic, payloads, ack.Count)
	}
	return ack
}

// readAll polls a partition from offset 0 to its end. It reads the node's
// own replica (Local): cluster tests check what each replica holds.
func readAll(t testing.TB, n *parkway.Node, topic parkway.Topic, part uint32) []parkway.Message {
	t.Helper()
	var out []parkway.Message
	from := uint64(0)
	for {
		b, err := n.Poll(ctxFor(t), topic, part, parkway.AtOffset(from).Local(), 1000)
		if err != nil {
			t.Fatalf("Poll(%v/%d @%d): %v", topic, part, from, err)
		}
		if len(b.Messages) == 0 {
			if b.Next != from {
				t.Fatalf("Poll(%v/%d @%d): empty batch with Next %d", topic, part, from, b.Next)
			}
			return out
		}
		for i, m := range b.Messages {
			if m.Offset != from+uint64(i) {
				t.Fatalf("Poll(%v/%d @%d): message %d at offset %d, offsets not dense", topic, part, from, i, m.Offset)
			}
		}
		out = append(out, b.Messages...)
		from = b.Messages[len(b.Messages)-1].Offset + 1
		if b.Next != from {
			t.Fatalf("Poll(%v/%d): Next %d, want %d", topic, part, b.Next, from)
		}
	}
}

// payloads renders messages as payload@offset, for comparisons and
// failure messages.
func payloads(msgs []parkway.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = fmt.Sprintf("%s@%d", m.Payload, m.Offset)
	}
	return out
}

// expectLog checks a partition holds exactly want, at offsets 0, 1, ...
func expectLog(t testing.TB, n *parkway.Node, topic parkway.Topic, part uint32, want ...string) {
	t.Helper()
	got := readAll(t, n, topic, part)
	ok := len(got) == len(want)
	for i := 0; ok && i < len(got); i++ {
		ok = bytes.Equal(got[i].Payload, []byte(want[i]))
	}
	if !ok {
		t.Fatalf("partition %v/%d holds %v, want %q at offsets 0..", topic, part, payloads(got), want)
	}
}

// registry registers a node's collectors on a fresh registry.
func registry(t testing.TB, n *parkway.Node) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(n.Metrics()); err != nil {
		t.Fatalf("registering the node's metrics: %v", err)
	}
	return reg
}

// metricValue sums the samples of family name whose labels include every
// pair of labels (alternating name, value); a histogram's sample is its
// count. A family with no matching sample counts 0.
func metricValue(t testing.TB, reg prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			match := true
			for i := 0; match && i+1 < len(labels); i += 2 {
				match = false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						match = true
					}
				}
			}
			if !match {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}

// missingWords reports the words of want missing from err's message.
func missingWords(err error, want ...string) []string {
	var missing []string
	for _, w := range want {
		if err == nil || !strings.Contains(err.Error(), w) {
			missing = append(missing, w)
		}
	}
	return missing
}
