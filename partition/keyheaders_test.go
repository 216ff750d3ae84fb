package partition_test

import (
	"bytes"
	"testing"

	"github.com/parkway-io/parkway/partition"
)

// A record keeps the message key and its headers side by side: a message
// with both reads back with both — from the store that wrote it, after a
// restart (the file store re-validates each record as it opens its
// segment), and through a batch's wire form — and both stores count them
// in the partition's size.
func TestKeyAndHeadersTogetherRoundTrip(t *testing.T) {
	in := []partition.Message{
		{Key: []byte("user-42"), Headers: []partition.Header{{Key: "trace", Value: []byte("abc")}, {Key: "flag"}}, Payload: []byte("both")},
		{Key: []byte("k"), Payload: []byte("key only")},
		{Headers: []partition.Header{{Key: "h", Value: []byte("v")}}, Payload: []byte("headers only")},
	}
	check := func(t *testing.T, what string, got []partition.Message) {
		t.Helper()
		if len(got) != len(in) {
			t.Fatalf("%s: %d messages, want %d", what, len(got), len(in))
		}
		for i, m := range got {
			w := in[i]
			if !bytes.Equal(m.Key, w.Key) || !bytes.Equal(m.Payload, w.Payload) || len(m.Headers) != len(w.Headers) {
				t.Fatalf("%s: message %d = key %q payload %q headers %q, want key %q payload %q headers %q",
					what, i, m.Key, m.Payload, m.Headers, w.Key, w.Payload, w.Headers)
			}
			for j := range w.Headers {
				if m.Headers[j].Key != w.Headers[j].Key || !bytes.Equal(m.Headers[j].Value, w.Headers[j].Value) {
					t.Fatalf("%s: message %d header %d = %q:%q, want %q:%q", what, i, j,
						m.Headers[j].Key, m.Headers[j].Value, w.Headers[j].Key, w.Headers[j].Value)
				}
			}
		}
	}

	b, err := partition.EncodeBatch(nil, in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := partition.DecodeBatch(b)
	if err != nil {
		t.Fatalf("DecodeBatch: %v", err)
	}
	check(t, "batch", out)

	for _, h := range harnesses() {
		t.Run(h.name, func(t *testing.T) {
			store, restart := h.open(t)
			ns := mustNS(t, 1, 2, 3)
			p := mustBuild(t, store, ns, 1)
			mustAppend(t, p, in)
			// Both stores count a message's key in its size, as the
			// record holds it (retention by bytes depends on it).
			var want int64
			for _, m := range in {
				want += recSize(m)
			}
			if p.Size() != want {
				t.Fatalf("Size %d, want %d", p.Size(), want)
			}
			got, err := p.Read(0, 10)
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			check(t, "read", got)
			mustClose(t, p)
			p = mustBuild(t, restart(), ns, 1)
			defer mustClose(t, p)
			got, err = p.Read(0, 10)
			if err != nil {
				t.Fatalf("Read after a restart: %v", err)
			}
			check(t, "read after a restart", got)
		})
	}
}
