package router

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/spaolacci/murmur3"

	"github.com/parkway-io/parkway/metadata"
)

// The unrolled hash must be murmur3 x86_32 exactly, or assignments stop
// agreeing with the reference server. The module's streaming hasher is the
// oracle (its one-shot Sum32 trips checkptr under -race).
func TestHashNamespaceIsMurmur3(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 10000 {
		ns := metadata.Namespace(rng.Uint64())
		if i < 64 {
			ns = metadata.Namespace(i)
		}
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], uint64(ns))
		h := murmur3.New32WithSeed(0)
		_, _ = h.Write(b[:])
		if got, want := hashNamespace(ns), h.Sum32(); got != want {
			t.Fatalf("hashNamespace(%#x) = %#x, murmur3 = %#x", uint64(ns), got, want)
		}
	}
}
