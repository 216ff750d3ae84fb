package sim

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"strings"
	"time"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/metadata"
)

// base is what both modes share: the configuration, the one seeded RNG
// every scheduling choice comes from, the virtual clock, the trace and the
// first violation found.
type base struct {
	cfg  Config
	rng  *rand.Rand
	clk  *clock.Manual
	tr   *trace
	viol *Violation
	grp  *groupCheck // invariant 6, created on first use
}

// checkGroups checks one node's committed consumer groups (invariant 6).
func (b *base) checkGroups(node string, meta *metadata.Store) {
	if b.viol != nil || meta == nil {
		return
	}
	if b.grp == nil {
		b.grp = newGroupCheck()
	}
	if err := b.grp.observe(node, meta); err != nil {
		b.fail(6, "%v", err)
	}
}

// fail records the first violation; later ones are ignored.
func (b *base) fail(inv int, format string, args ...any) {
	if b.viol != nil {
		return
	}
	detail := fmt.Sprintf(format, args...)
	b.event("VIOLATION invariant=%d %s", inv, detail)
	b.viol = &Violation{Seed: b.cfg.Seed, Cluster: b.cfg.cluster(), Invariant: inv, Detail: detail, Event: b.tr.n,
		Tail: b.tr.tail(), Replay: replayCommand(b.cfg)}
}

// guard runs f, turning a panic — the engine's or raft's, all on this
// goroutine — into a violation that carries the seed and the replay
// command, rather than a crashed test binary.
func (b *base) guard(f func()) {
	defer func() {
		if r := recover(); r != nil {
			if b.viol != nil {
				b.event("panic after the violation: %v", r)
				return
			}
			stack := debug.Stack()
			b.fail(0, "panic: %v\n%s", r, stack)
			switch msg := fmt.Sprint(r); {
			case strings.Contains(msg, "state.commit") && strings.Contains(msg, "out of range") &&
				bytes.Contains(stack, []byte("replica.New(")):
			}
		}
	}()
	f()
}

// roll reports true with probability p.
func (b *base) roll(p float64) bool {
	return p > 0 && b.rng.Float64() < p
}

// now is the virtual time since the start, for trace lines.
func (b *base) now() time.Duration { return b.clk.Now().Sub(epoch0) }
