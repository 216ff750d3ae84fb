package metadata

import "sync"

// lookupKeys recycles the probe values the btrees are searched with: a
// key handed to a btree's less function escapes to the heap, and every
// produce in a cluster looks its topic up (two probes). Readers run
// concurrently under the read lock, hence pools; a probe is only read by
// the btree while the search runs.
type lookupKeys struct {
	streams, topics sync.Pool
}

func (k *lookupKeys) stream(id uint32) *stream {
	p, _ := k.streams.Get().(*stream)
	if p == nil {
		p = &stream{}
	}
	p.id = id
	return p
}

func (k *lookupKeys) topic(id uint32) *topic {
	p, _ := k.topics.Get().(*topic)
	if p == nil {
		p = &topic{}
	}
	p.id = id
	return p
}

func (k *lookupKeys) putStream(p *stream) { k.streams.Put(p) }
func (k *lookupKeys) putTopic(p *topic)   { k.topics.Put(p) }
