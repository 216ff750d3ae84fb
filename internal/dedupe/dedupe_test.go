package dedupe

import "testing"

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
