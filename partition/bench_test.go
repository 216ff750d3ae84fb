package partition_test

import (
	"testing"

	"github.com/parkway-io/parkway/partition"
)

// BenchmarkAppend appends batches of 100 messages of 100 bytes. Bytes/op
// counts payload only; allocs/op is per batch.
func BenchmarkAppend(b *testing.B) {
	const batchSize, payloadSize = 100, 100
	stores := []struct {
		name string
		new  func(b *testing.B) partition.Store
	}{
		{"mem", func(*testing.B) partition.Store { return partition.NewMemStore() }},
		{"file", func(b *testing.B) partition.Store { return newFileStore(b, partition.FileConfig{Dir: b.TempDir()}) }},
	}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			p := mustBuild(b, st.new(b), mustNS(b, 1, 1, 1), 1)
			defer mustClose(b, p)
			msgs := make([]partition.Message, batchSize)
			buf := make([]byte, batchSize*payloadSize)
			for i := range msgs {
				msgs[i].Timestamp = int64(i)
				msgs[i].Payload = buf[i*payloadSize : (i+1)*payloadSize]
			}
			b.SetBytes(batchSize * payloadSize)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.Append(msgs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
