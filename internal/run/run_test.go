package run_test

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/parkway-io/parkway/internal/run"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStopCancelsAndWaits(t *testing.T) {
	g := run.NewGroup()
	exited := make(chan struct{}, 3)
	for range 3 {
		g.Go(func(ctx context.Context) {
			<-ctx.Done()
			exited <- struct{}{}
		})
	}
	g.Stop()
	g.Stop() // idempotent
	if len(exited) != 3 {
		t.Fatalf("%d goroutines exited before Stop returned, want 3", len(exited))
	}
	select {
	case <-g.Done():
	default:
		t.Fatal("Done not closed after Stop")
	}
}
