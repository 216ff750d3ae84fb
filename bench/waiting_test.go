package bench

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// The waiting section runs every side of both cases through the same code
// as the command, on its own (-only waiting), and leaves nothing behind:
// every message of W1 was seen once by its reader with a latency, every
// reader of W2 was waiting and woke for the one message after the window.
func TestWaitingSection(t *testing.T) {
	defer goleak.VerifyNone(t)
	const latency, idle, window = 30, 20, 200 * time.Millisecond
	sizes := Sizes{Waiting: WaitingSizes{Latency: latency, Idle: idle, IdleWindow: window}}
	base := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var progress strings.Builder
	rep, err := Run(ctx, Config{Rounds: 1, Sizes: &sizes, MinRound: -1, TempDir: base, Progress: &progress,
		Filter: mustCompile(t, `^waiting/`)})
	if err != nil {
		t.Fatal(err)
	}
	if left, err := os.ReadDir(base); err != nil || len(left) != 0 {
		t.Errorf("temp dir not cleaned: %v, %v", left, err)
	}
	if len(rep.sets) != 0 || rep.replicated != nil || len(rep.limits) != 0 {
		t.Fatalf("the filter ran more than the waiting section")
	}
	if rep.waiting == nil || len(rep.waiting.cases) != 2 {
		t.Fatalf("waiting section: %+v, want cases latency and idle", rep.waiting)
	}
	for _, c := range rep.waiting.cases {
		for i, side := range c.spec.sides {
			if len(c.samples[i]) != 1 {
				t.Fatalf("%s on %s: %d samples, want 1", c.spec.key, side.name, len(c.samples[i]))
			}
			s := c.samples[i][0]
			if s.cpu <= 0 || s.elapsed <= 0 {
				t.Errorf("%s on %s: CPU %v over %v not measured", c.spec.key, side.name, s.cpu, s.elapsed)
			}
			switch c.spec.key {
			case "latency":
				if s.msgs != latency || len(s.lat) != latency {
					t.Errorf("latency on %s: %d messages, %d latencies, want %d of each", side.name, s.msgs, len(s.lat), latency)
				}
				for _, l := range s.lat {
					if l <= 0 || l > drainTimeout {
						t.Errorf("latency on %s: implausible latency %v", side.name, l)
						break
					}
				}
			case "idle":
				want := idle
				if side.start == nil {
					want = 0
				}
				if s.msgs != want || s.elapsed < window {
					t.Errorf("idle on %s: %d readers over %v, want %d over at least %v", side.name, s.msgs, s.elapsed, want, window)
				}
				if s.missed != 0 {
					t.Errorf("idle on %s: %d readers missed the wake message: %s", side.name, s.missed, s.missedState)
				}
				if want > 0 && (s.wake <= 0 || s.setUp <= 0) {
					t.Errorf("idle on %s: wake-all %v, set-up %v not measured", side.name, s.wake, s.setUp)
				}
				if side.countsEmpty != (s.empties >= 0) {
					t.Errorf("idle on %s: empty answers %d, counted %v", side.name, s.empties, side.countsEmpty)
				}
			}
		}
	}
	md := rep.Markdown("go -C bench run ./cmd/compare -only waiting")
	for _, want := range []string{
		"## Waiting consumers: latency and idle cost", "### W1 produce→consume latency", "### W2 20 readers waiting",
		"parkway Consumer, commit after each batch / JetStream Consume", "parkway Poll+WaitFor / JetStream Fetch+MaxWait", "CPU, % of one core",
		"JetStream, no reader",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if t.Failed() {
		t.Log(progress.String())
	}
}
