package transport

// Recycler is implemented by a Bus that can reuse the payload buffers of
// the messages it delivers. A receiver done with a delivered message's
// payload — nothing refers to any of its bytes any more, the receiver's
// decoded form included — may hand it back with Recycle, and a later
// message may be received into the same bytes. Handing back a payload
// still in use corrupts the message that reuses it; not handing one back
// is always safe (the garbage collector takes it).
type Recycler interface {
	Recycle(payload []byte)
}

// bufClasses are the capacities of the recycled payload buffers: a raft
// response, an append of a few small entries, two steps above, and the
// appends of a busy group (a raft entry of a few hundred coalesced
// produces is tens of KiB) up to MaxSizePerMsg's 1 MiB. A larger payload
// gets a buffer of its own that is never recycled. The large classes
// matter for CPU, not only for the allocator: a fresh buffer of tens of
// KiB is cold memory (often pages the kernel must fault in), and copying
// a frame into it cost more than the frame's encoding on a 3-node cluster
// under many producers; a recycled one is warm.
var bufClasses = [...]int{64, 256, 1024, 4096, 16 << 10, 64 << 10, 256 << 10, 1 << 20}

// bufsPerClass bounds each class's free list: 64 buffers of each small
// class, and about 1 MiB of each large one, so an idle bus holds at most
// about 340 KiB + 4 MiB, and only once it has carried frames that large.
var bufsPerClass = [len(bufClasses)]int{64, 64, 64, 64, 64, 16, 4, 1}

// bufPool is a bounded free list of payload buffers per size class. Its
// channels make it safe for any goroutine, and they move slice headers
// without allocating (a sync.Pool would box every slice it holds).
type bufPool struct {
	free [len(bufClasses)]chan []byte
}

func newBufPool() *bufPool {
	p := &bufPool{}
	for i := range p.free {
		p.free[i] = make(chan []byte, bufsPerClass[i])
	}
	return p
}

// get returns a buffer of length n: a recycled one when its class has
// one, else a new one with its class's capacity. A nil pool allocates.
func (p *bufPool) get(n int) []byte {
	if p == nil {
		return make([]byte, n)
	}
	for i, c := range bufClasses {
		if n > c {
			continue
		}
		select {
		case b := <-p.free[i]:
			return b[:n]
		default:
			return make([]byte, n, c)
		}
	}
	return make([]byte, n)
}

// put takes b back if its capacity is exactly a class's (any other
// buffer is not one of the pool's) and the class's list has room.
func (p *bufPool) put(b []byte) {
	if p == nil {
		return
	}
	for i, c := range bufClasses {
		if cap(b) != c {
			continue
		}
		select {
		case p.free[i] <- b[:0]:
		default:
		}
		return
	}
}

// clone copies src into a buffer from the pool (nil for an empty src): the
// copy Send makes of every payload.
func (p *bufPool) clone(src []byte) []byte {
	if len(src) == 0 {
		return nil
	}
	b := p.get(len(src))
	copy(b, src)
	return b
}
