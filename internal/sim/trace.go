package sim

import (
	"fmt"
	"hash"
	"hash/fnv"
	"io"
)

// tailLen is how many trace events a Violation carries.
const tailLen = 40

// trace is the run's event log: hashed, with the last events kept for
// failure reports and everything optionally written out.
type trace struct {
	h    hash.Hash64
	n    int64
	ring [tailLen]string
	w    io.Writer
}

func newTrace(w io.Writer) *trace { return &trace{h: fnv.New64a(), w: w} }

func (t *trace) add(line string) {
	t.n++
	_, _ = io.WriteString(t.h, line)
	_, _ = t.h.Write([]byte{'\n'})
	t.ring[t.n%tailLen] = line
	if t.w != nil {
		_, _ = io.WriteString(t.w, line+"\n")
	}
}

func (t *trace) sum() uint64 { return t.h.Sum64() }

// tail returns the last events, oldest first.
func (t *trace) tail() []string {
	var out []string
	for i := max(t.n-tailLen+1, 1); i <= t.n; i++ {
		out = append(out, t.ring[i%tailLen])
	}
	return out
}

// event records one trace event: its index, the virtual time, and what
// happened. Every value formatted here is deterministic (no pointers, no
// map iteration), so the trace hash is a function of the seed.
func (b *sim) event(format string, args ...any) int64 {
	line := fmt.Sprintf("%d %v ", b.tr.n+1, b.now()) + fmt.Sprintf(format, args...)
	b.tr.add(line)
	return b.tr.n
}
