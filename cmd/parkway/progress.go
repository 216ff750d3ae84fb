package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/term"
)

type progressKind int

const (
	progressNone progressKind = iota
	progressPlain
	progressLive
)

// progressMode resolves the --progress flag: auto is a live line when w
// is a terminal, plain lines otherwise.
func progressMode(flag string, w io.Writer) (progressKind, error) {
	switch flag {
	case "none":
		return progressNone, nil
	case "plain":
		return progressPlain, nil
	case "auto":
		if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			return progressLive, nil
		}
		return progressPlain, nil
	}
	return 0, usageErr("--progress must be auto, plain or none, not %q", flag)
}

// progress reports bytes done against a total: bytes, rate and time
// left, rewritten in place every 200 ms on a terminal, a plain line every
// 5 s otherwise (none for a run that ends before the first).
type progress struct {
	w      io.Writer
	kind   progressKind
	done   *atomic.Int64
	total  int64
	start  time.Time
	end    time.Time
	quit   chan struct{}
	wg     sync.WaitGroup
	shown  bool
	stopMu sync.Once
}

func startProgress(w io.Writer, kind progressKind, done *atomic.Int64, total int64) *progress {
	p := &progress{w: w, kind: kind, done: done, total: total, start: time.Now(), quit: make(chan struct{})}
	if kind == progressNone {
		return p
	}
	every := 5 * time.Second
	if kind == progressLive {
		every = 200 * time.Millisecond
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-p.quit:
				return
			case <-t.C:
				p.show()
			}
		}
	}()
	return p
}

func (p *progress) show() {
	done := p.done.Load()
	el := time.Since(p.start)
	rate := float64(done) / el.Seconds()
	line := fmt.Sprintf("verify: %s of %s", formatBytes(done), formatBytes(p.total))
	if p.total > 0 {
		line += fmt.Sprintf(" (%d%%)", min(100, done*100/p.total))
	}
	line += fmt.Sprintf(", %s/s", formatBytes(int64(rate)))
	if rate > 0 && p.total > done {
		left := time.Duration(float64(p.total-done) / rate * float64(time.Second))
		if left < 10*time.Second {
			line += fmt.Sprintf(", %.1fs left", left.Seconds())
		} else {
			line += fmt.Sprintf(", %s left", left.Round(time.Second))
		}
	}
	if p.kind == progressLive {
		fmt.Fprintf(p.w, "\r\033[K%s", line)
	} else {
		fmt.Fprintln(p.w, line)
	}
	p.shown = true
}

// stop ends the reports (clearing a live line) and waits for them.
func (p *progress) stop() {
	p.stopMu.Do(func() {
		close(p.quit)
		p.wg.Wait()
		p.end = time.Now()
		if p.kind == progressLive && p.shown {
			fmt.Fprint(p.w, "\r\033[K")
		}
	})
}

func (p *progress) elapsed() time.Duration { return p.end.Sub(p.start) }

// formatBytes prints n in binary units.
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
