package shard

import (
	"fmt"
	"testing"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
)

// nopPartition isolates the barrier path from storage cost.
type nopPartition struct {
	ns    metadata.Namespace
	epoch uint64
	next  uint64
}

func (p *nopPartition) Namespace() metadata.Namespace { return p.ns }
func (p *nopPartition) Epoch() uint64                 { return p.epoch }
func (p *nopPartition) Append(m []partition.Message) (uint64, error) {
	first := p.next
	p.next += uint64(len(m))
	return first, nil
}
func (p *nopPartition) Read(uint64, int) ([]partition.Message, error) { return nil, nil }
func (p *nopPartition) NextOffset() uint64                            { return p.next }
func (p *nopPartition) StoreConsumerOffset(string, uint64) error      { return nil }
func (p *nopPartition) ConsumerOffset(string) (uint64, bool, error)   { return 0, false, nil }
func (p *nopPartition) DeleteConsumerOffset(string) error             { return nil }
func (p *nopPartition) ConsumerOffsets() map[string]uint64            { return nil }
func (p *nopPartition) Close() error                                  { return nil }
func (p *nopPartition) StartOffset() uint64                           { return 0 }
func (p *nopPartition) Sync() error                                   { return nil }
func (p *nopPartition) TruncateBefore(uint64) error                   { return nil }
func (p *nopPartition) SkipTo(uint64) error                           { return nil }
func (p *nopPartition) EnforceRetention(int64, int64) (uint64, error) { return 0, nil }
func (p *nopPartition) Size() int64                                   { return 0 }
func (p *nopPartition) OffsetForTime(int64) (uint64, error)           { return p.next, nil }

// BenchmarkParkRedispatch measures the park → re-dispatch path per frame
// with 1k and 100k frames parked at once (100 frames per namespace). The
// per-frame cost must stay flat: parking is a map lookup and an append
// against running totals, re-dispatch a queue walk.
func BenchmarkParkRedispatch(b *testing.B) {
	for _, total := range []int{1_000, 100_000} {
		b.Run(fmt.Sprint(total), func(b *testing.B) {
			const perNS = 100
			h := newHarness(b, 1, nil, func(c *Config) {
				c.Park = ParkLimits{FramesPerNamespace: perNS, BytesPerNamespace: 1 << 40, BytesPerShard: 1 << 40}
			})
			s := h.shards[0]
			h.apply(metadata.CreateStream{Name: "s"})
			var infos []metadata.PartitionInfo
			for i := 0; i < total/perNS; i++ {
				res := h.apply(metadata.CreateTopic{Stream: 0, Name: fmt.Sprint("t", i), Partitions: 1})
				infos = append(infos, res.Created[0])
			}
			reply := make(chan Response, perNS)
			frames := make([]Frame, total)
			for i := range frames {
				ns := infos[i/perNS].NS
				frames[i] = Frame{Req: &Request{Op: OpProduce, NS: ns, Messages: []partition.Message{{Payload: make([]byte, 100)}}}, Reply: reply}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				for _, f := range frames {
					s.handle(f)
				}
				for _, info := range infos {
					p := &nopPartition{ns: info.NS, epoch: info.CreatedRevision}
					o := &owned{p: p, dur: noSync}
					s.owned[info.NS] = o
					s.redispatch(info.NS, o)
					delete(s.owned, info.NS)
					for range perNS {
						<-reply
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*total), "ns/frame")
		})
	}
}
