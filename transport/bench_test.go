package transport

import (
	"bytes"
	"runtime"
	"sync/atomic"
	"testing"
)

const benchPayload = 100

// BenchmarkNetworkThroughput: one sender, one receiver, 100-byte payloads,
// sent in batches of 512 and drained (so the inbox never overflows).
func BenchmarkNetworkThroughput(b *testing.B) {
	n := NewNetwork(NetworkOptions{})
	defer n.Close()
	a, r := n.Endpoint(1), n.Endpoint(2)
	m := Message{To: 2, Kind: 1, Group: 1, Payload: bytes.Repeat([]byte{1}, benchPayload)}
	b.SetBytes(benchPayload)
	b.ReportAllocs()
	const batch = 512
	sent := 0
	for b.Loop() {
		if err := a.Send(m); err != nil {
			b.Fatal(err)
		}
		if sent++; sent == batch {
			for range sent {
				<-r.Recv()
			}
			sent = 0
		}
	}
	for range sent {
		<-r.Recv()
	}
}

// BenchmarkTCPThroughput: 100-byte messages from node 1 to node 2 over
// loopback, with the sender at most window messages ahead of the receiver
// so nothing is dropped.
func BenchmarkTCPThroughput(b *testing.B) {
	b.Run("plaintext", func(b *testing.B) {
		benchTCP(b, TCPOptions{InsecurePlaintext: true}, TCPOptions{InsecurePlaintext: true})
	})
	b.Run("tls", func(b *testing.B) {
		ca := newCA(b, "ca")
		benchTCP(b, ca.tlsOpts(b, cluster, 1), ca.tlsOpts(b, cluster, 2))
	})
}

func benchTCP(b *testing.B, oa, or TCPOptions) {
	const window = 4096
	oa.QueueSize, or.QueueSize = window, 2*window
	a := listen(b, 1, oa)
	r := listen(b, 2, or)
	mesh(b, a, r)
	m := Message{To: 2, Kind: 1, Group: 1, Payload: bytes.Repeat([]byte{1}, benchPayload)}
	var received atomic.Int64
	done := make(chan struct{})
	b.SetBytes(benchPayload)
	b.ReportAllocs()
	b.ResetTimer()
	total := int64(b.N)
	go func() {
		defer close(done)
		for range total {
			<-r.Recv()
			received.Add(1)
		}
	}()
	for i := range total {
		for i-received.Load() >= window {
			waitProgress(&received, i-window)
		}
		for a.Send(m) != nil { // ErrQueueFull: the writer is behind
			waitProgress(&received, received.Load())
		}
	}
	<-done
	b.StopTimer()
	if s := r.Stats(); s.InboxFull != 0 {
		b.Fatalf("dropped %d", s.InboxFull)
	}
}

// waitProgress yields until the receiver count passes v.
func waitProgress(c *atomic.Int64, v int64) {
	for c.Load() <= v {
		runtime.Gosched()
	}
}
