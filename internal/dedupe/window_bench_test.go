package dedupe

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkWindowApply is what a partition replica does per applied
// produce once its window is full: look the key up (a miss), then put it,
// evicting the oldest. consecutive is one node's producer writing one
// partition (its sequence numbers in order, the R2 case); random is keys
// with nothing in common.
func BenchmarkWindowApply(b *testing.B) {
	for _, shape := range []string{"consecutive", "random"} {
		b.Run(shape, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			key := func(i int) Key {
				if shape == "random" {
					return Key{Producer: rng.Uint64() | 1, Seq: rng.Uint64()}
				}
				return Key{Producer: 0x9e3779b97f4a7c15, Seq: uint64(i)}
			}
			w := New[uint64](DefaultSize)
			for i := range DefaultSize {
				w.Put(key(i), uint64(i))
			}
			keys := make([]Key, 1<<20)
			for i := range keys {
				keys[i] = key(DefaultSize + i)
			}
			b.ResetTimer()
			for i := range b.N {
				k := keys[i%len(keys)]
				if _, dup := w.Get(k); dup && i < len(keys) {
					b.Fatalf("key %v found before it was put", k)
				}
				w.Put(k, uint64(i))
			}
		})
	}
}

// BenchmarkWindowAll is a snapshot's walk of a full window.
func BenchmarkWindowAll(b *testing.B) {
	w := New[uint64](DefaultSize)
	for i := range DefaultSize {
		w.Put(Key{Producer: 1, Seq: uint64(i)}, uint64(i))
	}
	b.ResetTimer()
	for range b.N {
		var sum uint64
		w.All(func(k Key, v uint64) bool { sum += v; return true })
		if sum == 0 {
			b.Fatal("empty walk")
		}
	}
}
