package parkway

import "github.com/parkway-io/parkway/shard"

// oneProduce is the request of a single-message produce with its copy of
// the message: one allocation where a batch needs two, on the path every
// Produce of one message takes. The request refers to the message, so
// they live as long as each other.
//
// Produce takes it, with the channel its answer comes on, from a pool
// and puts it back once the call ended with the owner shard's one answer
// taken (host's CallReusing): many synchronous producers otherwise cost
// the collector a request and a channel per message. A call that ended
// any other way (the caller gave up, a retry, a forward, an error) may
// still get an answer on the channel, or have its request held by a
// shard, so its oneProduce is left to the collector: reused, that late
// answer would be read by the next call as its own.
type oneProduce struct {
	req shard.Request
	msg [1]Message
	// resp is where the answer is received: here rather than in
	// Produce's frame, which every synchronous producer's stack holds
	// (host.CallDriver's begin says why that costs).
	resp  shard.Response
	reply chan shard.Response
}

// takeOneProduce returns an idle oneProduce of n's pool (Node.oneProduces):
// its reply channel empty, nothing referring to it.
func (n *Node) takeOneProduce() *oneProduce {
	if o, ok := n.oneProduces.Get().(*oneProduce); ok {
		return o
	}
	return &oneProduce{reply: make(chan shard.Response, 1)}
}

// recycle puts an idle o back in n's pool for another Produce (nil:
// nothing). The request, message and answer are cleared, so the pool
// keeps none of the caller's bytes alive.
func (n *Node) recycle(o *oneProduce) {
	if o == nil {
		return
	}
	// Cleared in place: `*o = oneProduce{reply: o.reply}` builds the new
	// value in a temporary on the stack first, 360 bytes in the frame of
	// every caller this is inlined into (Produce, twice), and a
	// synchronous producer's stack is touched on every call (4,096 of
	// them cycle through the cores' caches).
	reply := o.reply
	*o = oneProduce{}
	o.reply = reply
	n.oneProduces.Put(o)
}
