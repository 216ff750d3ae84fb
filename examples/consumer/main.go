// Command consumer runs a consumer group: three consumers share a topic of
// six partitions, one leaves and comes back, and every message is handled
// — without a sleep or a hand-made assignment.
//
//	go run ./examples/consumer
//
// It prints who holds which partition after each change and exits
// non-zero if a message is never handled.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/parkway-io/parkway"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "consumer: FAIL:", err)
		os.Exit(1)
	}
}

// handled counts the messages the group handled, by payload.
type handled struct {
	mu   sync.Mutex
	seen map[string]string // payload → consumer that handled it last
	more chan struct{}     // signalled on every message
}

func (h *handled) add(who, payload string) {
	h.mu.Lock()
	h.seen[payload] = who
	h.mu.Unlock()
	select {
	case h.more <- struct{}{}:
	default:
	}
}

func (h *handled) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.seen)
}

// waitFor blocks until n distinct messages were handled.
func (h *handled) waitFor(ctx context.Context, n int) error {
	for h.count() < n {
		select {
		case <-h.more:
		case <-ctx.Done():
			return fmt.Errorf("%d of %d messages handled: %w", h.count(), n, ctx.Err())
		}
	}
	return nil
}

func run() error {
	dir, err := os.MkdirTemp("", "parkway-consumer-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	node, err := parkway.Open(parkway.Config{DataDir: dir, Shards: 2})
	if err != nil {
		return err
	}
	defer node.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	stream, err := node.Admin().CreateStream(ctx, "shop")
	if err != nil {
		return err
	}
	orders, err := node.Admin().CreateTopic(ctx, stream, "orders", 6)
	if err != nil {
		return err
	}

	h := &handled{seen: map[string]string{}, more: make(chan struct{}, 1)}
	var wg sync.WaitGroup
	consumers := map[string]*parkway.Consumer{}
	start := func(name string) error {
		c, err := node.NewConsumer(ctx, orders, parkway.ConsumerConfig{
			Group: "billing", Name: name, SessionTimeout: 3 * time.Second,
		})
		if err != nil {
			return err
		}
		consumers[name] = c
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d, err := range c.Messages(ctx) {
				if err != nil {
					if !errors.Is(err, context.Canceled) {
						fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
					}
					return
				}
				h.add(name, string(d.Payload))
			}
		}()
		return nil
	}
	// show prints the assignment once it settled: a partition leaves a
	// consumer that is still in the group in two steps — it stops
	// handing the partition out, commits it and releases it with its
	// next heartbeat (a second at this session timeout), and only then
	// does the partition's new holder get it.
	show := func(what string) error {
		var g parkway.GroupInfo
		for {
			var err error
			if g, err = node.Admin().Group(ctx, orders, "billing"); err != nil {
				return err
			}
			moving := false
			for _, p := range g.Partitions {
				moving = moving || p.Moving != 0
			}
			if !moving {
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
		fmt.Printf("%s (generation %d):\n", what, g.Generation)
		for _, m := range g.Members {
			fmt.Printf("  %-8s holds %v\n", m.Name, g.Assigned(m.ID))
		}
		return nil
	}
	produce := func(from, n int) error {
		for i := from; i < from+n; i++ {
			msg := parkway.Message{Key: fmt.Appendf(nil, "customer-%d", i%17), Payload: fmt.Appendf(nil, "order %d", i)}
			if _, err := node.Produce(ctx, orders, parkway.Key(msg.Key), msg); err != nil {
				return err
			}
		}
		return nil
	}

	for _, name := range []string{"alice", "bob", "carol"} {
		if err := start(name); err != nil {
			return err
		}
	}
	if err := show("three consumers joined"); err != nil {
		return err
	}
	if err := produce(0, 300); err != nil {
		return err
	}
	if err := h.waitFor(ctx, 300); err != nil {
		return err
	}
	fmt.Println("300 orders handled")

	// bob leaves: Close commits what he handled and leaves the group, so
	// his partitions move to alice and carol at once.
	if err := consumers["bob"].Close(); err != nil {
		return err
	}
	if err := show("bob left"); err != nil {
		return err
	}
	if err := produce(300, 300); err != nil {
		return err
	}
	if err := h.waitFor(ctx, 600); err != nil {
		return err
	}
	fmt.Println("600 orders handled")

	// bob comes back as a new member and gets a share again.
	if err := start("bob"); err != nil {
		return err
	}
	if err := show("bob rejoined"); err != nil {
		return err
	}
	if err := produce(600, 300); err != nil {
		return err
	}
	if err := h.waitFor(ctx, 900); err != nil {
		return err
	}
	by := map[string]int{}
	h.mu.Lock()
	for _, who := range h.seen {
		by[who]++
	}
	h.mu.Unlock()
	names := make([]string, 0, len(by))
	for n := range by {
		names = append(names, n)
	}
	slices.Sort(names)
	fmt.Println("900 orders handled; last handled by:")
	for _, n := range names {
		fmt.Printf("  %-8s %d\n", n, by[n])
	}
	for _, name := range []string{"alice", "bob", "carol"} {
		if err := consumers[name].Close(); err != nil {
			return err
		}
	}
	cancel()
	wg.Wait()
	g, err := node.Admin().Group(context.Background(), orders, "billing")
	if err != nil {
		return err
	}
	var committed uint64
	for _, p := range g.Partitions {
		committed += p.Offset
	}
	fmt.Printf("all consumers closed: %d members left, %d offsets committed\n", len(g.Members), committed)
	if committed != 900 {
		return fmt.Errorf("committed offsets add up to %d, want 900", committed)
	}
	return nil
}
