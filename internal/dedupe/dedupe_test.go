package dedupe

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func TestWindowEvictsOldestFirst(t *testing.T) {
	w := New[int](3)
	for i := range 5 {
		w.Put(Key{1, uint64(i)}, i)
	}
	if w.Len() != 3 {
		t.Fatalf("Len = %d, want 3", w.Len())
	}
	for i := range 2 {
		if _, ok := w.Get(Key{1, uint64(i)}); ok {
			t.Fatalf("key %d survived eviction", i)
		}
	}
	var got []int
	w.All(func(k Key, v int) bool {
		if k.Seq != uint64(v) {
			t.Fatalf("key %v holds %d", k, v)
		}
		got = append(got, v)
		return true
	})
	if len(got) != 3 || got[0] != 2 || got[1] != 3 || got[2] != 4 {
		t.Fatalf("All = %v, want [2 3 4] (oldest first)", got)
	}
}

func TestWindowPutExistingKeepsPlace(t *testing.T) {
	w := New[string](2)
	w.Put(Key{1, 1}, "a")
	w.Put(Key{1, 2}, "b")
	w.Put(Key{1, 1}, "a2") // no eviction: the key is present
	if v, ok := w.Get(Key{1, 2}); !ok || v != "b" {
		t.Fatalf("key 2 = %q, %v", v, ok)
	}
	if v, _ := w.Get(Key{1, 1}); v != "a2" {
		t.Fatalf("key 1 = %q, want a2", v)
	}
	w.Put(Key{1, 3}, "c") // evicts key 1, the oldest
	if _, ok := w.Get(Key{1, 1}); ok {
		t.Fatal("the oldest key was not evicted")
	}
	w.Reset()
	if w.Len() != 0 {
		t.Fatal("Reset left keys")
	}
}

// model is the window as it was before the inline form: a map and the
// ring of its keys. Window must answer, evict and iterate exactly as it
// does, since the window is replicated state.
type model struct {
	size  int
	seen  map[Key]int
	order []Key
	next  int
}

func (m *model) put(k Key, v int) {
	if _, ok := m.seen[k]; ok {
		m.seen[k] = v
		return
	}
	if len(m.order) < m.size {
		m.order = append(m.order, k)
	} else {
		delete(m.seen, m.order[m.next])
		m.order[m.next] = k
		m.next = (m.next + 1) % m.size
	}
	m.seen[k] = v
}

func (m *model) all() []Key {
	var out []Key
	for i := range m.order {
		out = append(out, m.order[(m.next+i)%len(m.order)])
	}
	return out
}

// checkLike fails unless w holds exactly m's keys, values and order.
func checkLike(t *testing.T, w *Window[int], m *model, step string) {
	t.Helper()
	want := m.all()
	if w.Len() != len(want) {
		t.Fatalf("%s: Len = %d, want %d", step, w.Len(), len(want))
	}
	i := 0
	w.All(func(k Key, v int) bool {
		if i >= len(want) || k != want[i] || v != m.seen[k] {
			t.Fatalf("%s: All's key %d is %v=%d, want %v=%d (order %v)", step, i, k, v, want[min(i, len(want)-1)], m.seen[k], want)
		}
		i++
		return true
	})
	for k, mv := range m.seen {
		if v, ok := w.Get(k); !ok || v != mv {
			t.Fatalf("%s: Get(%v) = %d, %v, want %d", step, k, v, ok, mv)
		}
	}
}

// The inline form (up to inlineKeys keys, no map) and the map form it
// turns into answer, evict oldest first, and iterate in the same order as
// a plain map and ring, across the switch and around the ring, with keys
// put again; a window restored from All (as a snapshot restores one) holds
// the same keys and evicts the same ones afterwards.
func TestWindowInlineAndMapFormsAgree(t *testing.T) {
	for _, size := range []int{1, 2, inlineKeys - 1, inlineKeys, inlineKeys + 1, 3 * inlineKeys} {
		w := New[int](size)
		m := &model{size: size, seen: map[Key]int{}}
		var restored *Window[int]
		for i := range 6 * inlineKeys {
			// Every third put repeats a recent key (kept or evicted).
			k := Key{Producer: uint64(i % 2), Seq: uint64(i)}
			if i%3 == 2 {
				k = Key{Producer: uint64((i - 2) % 2), Seq: uint64(i - 2)}
			}
			w.Put(k, i)
			m.put(k, i)
			step := fmt.Sprintf("size %d, put %d", size, i)
			checkLike(t, w, m, step)
			if restored != nil {
				restored.Put(k, i)
				checkLike(t, restored, m, step+" (restored)")
			}
			if i == inlineKeys+2 {
				restored = New[int](size)
				w.All(func(k Key, v int) bool { restored.Put(k, v); return true })
				checkLike(t, restored, m, step+" (restored)")
			}
		}
		if _, ok := w.Get(Key{Producer: 7, Seq: 7}); ok {
			t.Fatalf("size %d: a key never put is found", size)
		}
		w.Reset()
		if w.Len() != 0 {
			t.Fatalf("size %d: Reset left keys", size)
		}
	}
}

// A zero Window is DefaultSize keys: it keeps more than inlineKeys.
func TestZeroWindowPassesInlineForm(t *testing.T) {
	var w Window[int]
	for i := range 4 * inlineKeys {
		w.Put(Key{1, uint64(i)}, i)
	}
	if w.Len() != 4*inlineKeys {
		t.Fatalf("Len = %d, want %d", w.Len(), 4*inlineKeys)
	}
	if v, ok := w.Get(Key{1, 0}); !ok || v != 0 {
		t.Fatalf("the first key: %d, %v", v, ok)
	}
}

// The index form answers, evicts and iterates as the model does over many
// evictions: keys of a few producers in sequence (neighbouring homes),
// random keys, and keys put again while kept and after their eviction, so
// removal's moving back of later keys runs across long probe runs and
// around the table's end; the index holds exactly the ring's keys.
func TestWindowIndexAgreesWithModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 33))
	for _, size := range []int{inlineKeys + 1, 100, 1000, 4096} {
		w := New[int](size)
		m := &model{size: size, seen: map[Key]int{}}
		var put []Key
		seqs := [3]uint64{}
		for i := range 12 * size {
			var k Key
			switch r := rng.IntN(10); {
			case r < 6: // a producer's next sequence number, gaps now and then
				p := rng.IntN(len(seqs))
				seqs[p] += 1 + uint64(rng.IntN(2))*uint64(rng.IntN(20))
				k = Key{Producer: uint64(p + 1), Seq: seqs[p]}
			case r < 8:
				k = Key{Producer: rng.Uint64(), Seq: rng.Uint64()}
			default: // an earlier key: kept or evicted
				if len(put) == 0 {
					continue
				}
				k = put[len(put)-1-rng.IntN(min(len(put), 2*size))]
			}
			put = append(put, k)
			w.Put(k, i)
			m.put(k, i)
			if v, ok := w.Get(k); !ok || v != i {
				t.Fatalf("size %d, put %d: Get(%v) = %d, %v right after Put", size, i, k, v, ok)
			}
			if i%(size/2+1) == 0 || i == 12*size-1 {
				step := fmt.Sprintf("size %d, put %d", size, i)
				checkLike(t, w, m, step)
				checkIndex(t, w, step)
				for range 50 { // keys that were never put
					k := Key{Producer: rng.Uint64(), Seq: rng.Uint64()}
					if _, ok := w.Get(k); ok {
						t.Fatalf("%s: %v found, never put", step, k)
					}
				}
			}
		}
	}
}

// checkIndex fails unless w's index holds each ring position once, at or
// after its key's home with no empty slot between.
func checkIndex(t *testing.T, w *Window[int], step string) {
	t.Helper()
	x := w.idx
	if x == nil {
		return
	}
	if x.count != len(w.order) {
		t.Fatalf("%s: index counts %d keys, the ring holds %d", step, x.count, len(w.order))
	}
	seen := make([]bool, len(w.order))
	for i, s := range x.slots {
		if s == 0 {
			continue
		}
		p := int(uint32(s)) - 1
		if p < 0 || p >= len(w.order) || seen[p] {
			t.Fatalf("%s: slot %d holds position %d (ring of %d, seen %v)", step, i, p, len(w.order), p >= 0 && p < len(seen) && seen[p])
		}
		seen[p] = true
		if h := x.hash(w.order[p]); h != s>>32 {
			t.Fatalf("%s: slot %d holds hash %#x for a key hashing to %#x", step, i, s>>32, h)
		}
		for j := s >> 32 & x.mask; j != uint64(i); j = (j + 1) & x.mask {
			if x.slots[j] == 0 {
				t.Fatalf("%s: an empty slot %d between key %v's home and its slot %d", step, j, w.order[p], i)
			}
		}
	}
}
