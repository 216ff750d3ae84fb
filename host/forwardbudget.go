package host

import (
	"hash/maphash"
	"slices"
	"sync"

	"github.com/parkway-io/parkway/internal/dedupe"
	"github.com/parkway-io/parkway/internal/testhooks"
)

// Forwarded requests are held from their receipt until their answer is
// sent: a produce until its quorum commit, a waiting poll up to its wait.
// The transport's budgets end once a request is taken from its inbox, so
// without one of their own a peer could make this node hold any number of
// them (issue 26: 200 forwarded 16 MiB produces took the heap past 3 GiB).
// forwardBudget counts their bytes per sending peer and in total; a
// request over either bound is answered at once with a retriable error
// (behaviour 17: never dropped silently), which the forwarding node
// retries in place within its deadline (behaviour 18).

// Defaults of Cluster.MaxForwardedBytes and MaxForwardedPeerBytes.
const (
	DefaultMaxForwardedBytes     = 256 << 20
	DefaultMaxForwardedPeerBytes = 64 << 20
)

// forwardOverhead is what a forwarded request is charged on top of its
// bytes: the goroutine that serves it (its stack starts at a few KiB) and
// the decoded request, so a flood of tiny requests (waiting polls, say) is
// bounded too — 8,192 at most per peer with the defaults.
const forwardOverhead = 8 << 10

// forwardCharge is what a forwarded request of n bytes is charged.
func forwardCharge(n int) int64 { return int64(n) + forwardOverhead }

// forwardBudget is the bytes of forwarded requests a node holds, by peer,
// and which requests they are: a peer that waited long for an answer asks
// whether its request is still held (KindProbe) before it sends another
// copy (forward.go).
type forwardBudget struct {
	peerMax, totalMax int64

	mu      sync.Mutex
	held    int64
	peak    int64
	refused uint64
	// duplicates counts the copies admit recognised.
	duplicates uint64
	byPeer     map[uint64]int64 // peers holding bytes only
	// reqs are the held requests by (peer, request id), each as the
	// digests of its payloads: one, unless a peer reuses an id
	// (parkway's own start each life from a random base, newClusterNode). With answered (the
	// digest of the ones answered last by (peer, id), in the one
	// deduplication window) they tell a copy of a request the network
	// delivered twice from a request of its own (see admit), and whether
	// a request is held at all (holds).
	reqs     map[heldRequest][]uint64
	answered *dedupe.Window[uint64]
	seed     maphash.Seed
}

// heldRequest names a forwarded request: its sender and the sender's id.
type heldRequest struct{ peer, id uint64 }

// maxAnswered bounds the answered requests remembered for telling late
// copies apart: 4,096 records of 24 bytes (plus the map's).
const maxAnswered = 4096

// admission is admit's verdict on a forwarded request.
type admission uint8

const (
	// admitted: charged and held until give; the caller serves it.
	admitted admission = iota
	// admitOverBudget: refused (nothing charged); the caller answers it
	// at once with a retriable error.
	admitOverBudget
	// admitDuplicate: a copy of a request held or answered (the network
	// delivered it twice); nothing charged, and the caller neither
	// serves nor answers it: the first copy's answer is the request's.
	admitDuplicate
)

func newForwardBudget(peerMax, totalMax int64) *forwardBudget {
	return &forwardBudget{peerMax: peerMax, totalMax: totalMax, byPeer: make(map[uint64]int64),
		reqs:     make(map[heldRequest][]uint64),
		answered: dedupe.New[uint64](maxAnswered), seed: maphash.MakeSeed()}
}

// digest is the digest of a forwarded request's payload that admit and
// give take.
func (f *forwardBudget) digest(payload []byte) uint64 { return maphash.Bytes(f.seed, payload) }

// admit decides what to do with forwarded request id of n bytes from
// peer, whose payload has digest sum. A request whose exact bytes under
// the same id are held, or were answered lately, is a copy the network
// duplicated (the sender sends each request once, forward.go): serving
// it as well would apply a write twice, and the sender, which takes the
// first answer, could be told "not applied, retry" by one copy while the
// other was appended (seed 104: a copy parked behind a slow build was
// answered "no leader yet" while its twin was appended). Otherwise it is
// takeLocked.
func (f *forwardBudget) admit(peer, id, sum uint64, n int64) admission {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := heldRequest{peer, id}
	if sent, ok := f.answered.Get(dedupe.Key{Producer: peer, Seq: id}); (ok && sent == sum) || slices.Contains(f.reqs[k], sum) {
		f.duplicates++
		return admitDuplicate
	}
	if !f.takeLocked(peer, id, sum, n) {
		return admitOverBudget
	}
	return admitted
}

// release is giveLocked for a request admit admitted: its answer was sent, and
// it is remembered as answered for a while.
func (f *forwardBudget) release(peer, id, sum uint64, n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.giveLocked(peer, id, sum, n)
	f.answered.Put(dedupe.Key{Producer: peer, Seq: id}, sum)
}

// takeLocked charges request id of n bytes from peer; false (nothing charged,
// counted as refused) when that would pass the total, or the peer's bound
// while the peer holds anything: a peer holding nothing may always have
// one request served, so a request larger than the peer bound (it is
// bounded by the transport's frame) is not refused for good.
func (f *forwardBudget) takeLocked(peer, id, sum uint64, n int64) bool {
	p := f.byPeer[peer]
	if (f.held+n > f.totalMax || (p > 0 && p+n > f.peerMax)) && !testhooks.NoForwardBudget.Load() {
		f.refused++
		return false
	}
	f.byPeer[peer] = p + n
	f.held += n
	f.peak = max(f.peak, f.held)
	k := heldRequest{peer, id}
	f.reqs[k] = append(f.reqs[k], sum)
	return true
}

// giveLocked releases what takeLocked charged. Its callers have sent the request's
// answer first, so a peer told the request is no longer held finds the
// answer ahead of that news (one connection per peer keeps their order).
func (f *forwardBudget) giveLocked(peer, id, sum uint64, n int64) {
	k := heldRequest{peer, id}
	if sums := f.reqs[k]; len(sums) > 1 {
		if i := slices.Index(sums, sum); i >= 0 {
			f.reqs[k] = slices.Delete(sums, i, i+1)
		}
	} else {
		delete(f.reqs, k)
	}
	if p := f.byPeer[peer] - n; p > 0 {
		f.byPeer[peer] = p
	} else {
		delete(f.byPeer, peer)
	}
	f.held -= n
}

// holds reports whether request id from peer is held: received and not
// yet answered.
func (f *forwardBudget) holds(peer, id uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.reqs[heldRequest{peer, id}]) > 0
}

// ForwardStats describe the forwarded requests a node serves for its
// peers.
type ForwardStats struct {
	// HeldBytes is the bytes of forwarded requests received and not yet
	// answered, each counted with a fixed overhead for what serving it
	// takes (8 KiB); PeakHeldBytes its high-water mark. Neither passes
	// Cluster.MaxForwardedBytes.
	HeldBytes, PeakHeldBytes uint64
	// Refused counts forwarded requests answered at once with a
	// retriable error because they would have passed
	// Cluster.MaxForwardedBytes or the sender's MaxForwardedPeerBytes.
	Refused uint64
	// Duplicates counts forwarded requests received again (the network
	// delivered one twice) while held or lately answered: neither served
	// nor answered a second time, the first copy's answer being theirs.
	Duplicates uint64
}

func (f *forwardBudget) stats() ForwardStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return ForwardStats{HeldBytes: uint64(f.held), PeakHeldBytes: uint64(f.peak), Refused: f.refused, Duplicates: f.duplicates}
}

// ForwardStats returns the counters of the forwarded requests this node
// serves (zero on a node that is not clustered).
func (e *Engine) ForwardStats() ForwardStats {
	if e.cl == nil {
		return ForwardStats{}
	}
	return e.cl.fwd.stats()
}
