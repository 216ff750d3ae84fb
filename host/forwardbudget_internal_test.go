package host

import (
	"fmt"
	"testing"
)

// TestForwardBudget: a request is refused past the total, or past its
// peer's bound while the peer holds anything; a peer holding nothing may
// have one request larger than its bound; releases free both bounds. It
// knows which requests it holds, by sender and id (a refused one is not
// held), so a sender's probe is answered truly.
func TestForwardBudget(t *testing.T) {
	f := newForwardBudget(10, 25)
	steps := []struct {
		peer uint64
		n    int64
		ok   bool
	}{
		{1, 8, true},
		{1, 3, false}, // past peer 1's bound
		{2, 15, true}, // larger than the bound, but peer 2 holds nothing
		{3, 3, false}, // past the total (8+15+3 > 25)
		{3, 2, true},
	}
	for i, s := range steps {
		if got := f.admit(s.peer, uint64(i), uint64(i), s.n) == admitted; got != s.ok {
			t.Fatalf("step %d: take(%d, %d) = %v", i, s.peer, s.n, got)
		}
	}
	if st := f.stats(); st.HeldBytes != 25 || st.PeakHeldBytes != 25 || st.Refused != 2 {
		t.Fatalf("stats %+v", st)
	}
	for _, h := range []struct {
		peer, id uint64
		want     bool
	}{{1, 0, true}, {1, 1, false}, {2, 2, true}, {3, 3, false}, {3, 4, true}, {2, 0, false}} {
		if got := f.holds(h.peer, h.id); got != h.want {
			t.Fatalf("holds(%d, %d) = %v", h.peer, h.id, got)
		}
	}
	f.release(1, 0, 0, 8)
	if f.holds(1, 0) {
		t.Fatal("a request answered is still held")
	}
	if f.admit(1, 9, 9, 8) != admitted {
		t.Fatal("a released peer was refused")
	}
	f.release(1, 9, 9, 8)
	f.release(2, 2, 2, 15)
	f.release(3, 4, 4, 2)
	if st := f.stats(); st.HeldBytes != 0 || len(f.byPeer) != 0 || len(f.reqs) != 0 {
		t.Fatalf("after release: %+v, %d peers, %d requests", st, len(f.byPeer), len(f.reqs))
	}
}

// BenchmarkForwardDigest is what the forwarded-request deduplication
// costs the receiving node per request: the digest of its payload, then
// admit and release. Reported per byte (-benchmem's MB/s) at the sizes
// a forwarded produce has: one small message, a batch, a large batch.
func BenchmarkForwardDigest(b *testing.B) {
	for _, n := range []int{128, 64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("%dB", n), func(b *testing.B) {
			f := newForwardBudget(DefaultMaxForwardedPeerBytes, DefaultMaxForwardedBytes)
			payload := make([]byte, n)
			b.SetBytes(int64(n))
			for i := 0; b.Loop(); i++ {
				sum := f.digest(payload)
				if f.admit(1, uint64(i), sum, forwardCharge(n)) != admitted {
					b.Fatal("not admitted")
				}
				f.release(1, uint64(i), sum, forwardCharge(n))
			}
		})
	}
}
