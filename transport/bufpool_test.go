package transport

import "testing"

// A buffer handed back is handed out again for a payload of its class;
// one of another capacity, or past a full list, is not kept; a payload
// above the largest class gets a buffer of its own size; a nil pool
// allocates.
func TestBufPool(t *testing.T) {
	p := newBufPool()
	b := p.get(100)
	if len(b) != 100 || cap(b) != 256 {
		t.Fatalf("get(100): len %d cap %d, want 100 and 256", len(b), cap(b))
	}
	p.put(b)
	if again := p.get(200); &again[:1][0] != &b[:1][0] || len(again) != 200 {
		t.Fatal("a recycled buffer was not handed out again for its class")
	}
	p.put(make([]byte, 10, 100)) // not a class capacity
	if got := p.get(90); cap(got) != 256 {
		t.Fatalf("get(90) after a foreign put: cap %d", cap(got))
	}
	for range bufsPerClass[0] + 1 {
		p.put(make([]byte, 0, 64)) // the last one is dropped, without blocking
	}
	// A raft append of a few hundred small produces is recycled too: a
	// fresh buffer that size is cold memory for every frame.
	app := p.get(40 << 10)
	p.put(app)
	if again := p.get(33 << 10); &again[:1][0] != &app[:1][0] || len(again) != 33<<10 {
		t.Fatal("a 40 KiB buffer was not handed out again")
	}
	largest := bufClasses[len(bufClasses)-1]
	if big := p.get(largest + 1); len(big) != largest+1 || cap(big) != largest+1 {
		t.Fatalf("get(%d): len %d cap %d", largest+1, len(big), cap(big))
	}
	var none *bufPool
	none.put(none.get(3))
	if p.clone(nil) != nil {
		t.Fatal("clone of an empty payload is not nil")
	}
}

// A payload the receiver recycles is reused for the next message of its
// class, which arrives intact.
func TestNetworkRecycle(t *testing.T) {
	n := NewNetwork(NetworkOptions{})
	defer n.Close()
	a, b := n.Endpoint(1), n.Endpoint(2)
	r, ok := b.(Recycler)
	if !ok {
		t.Fatal("the in-memory endpoint is not a Recycler")
	}
	mustSend(t, a, Message{To: 2, Payload: []byte("first")})
	first := recv(t, b.Recv()).Payload
	r.Recycle(first)
	mustSend(t, a, Message{To: 2, Payload: []byte("second!")})
	second := recv(t, b.Recv()).Payload
	if string(second) != "second!" || &second[0] != &first[0] {
		t.Fatalf("second payload %q, reused the first's buffer: %v", second, &second[0] == &first[0])
	}
}
