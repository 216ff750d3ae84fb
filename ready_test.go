package parkway_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/parkway-io/parkway"
	"github.com/parkway-io/parkway/reconciler"
	"github.com/parkway-io/parkway/router"
)

type idle struct{}

func (idle) Reconcile(context.Context) (reconciler.Report, error) { return reconciler.Report{}, nil }

// TestReady: a node is ready once every partition it holds is
// materialised, and says which is missing until then; a closed node is
// ErrClosed.
func TestReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{Shards: 2, DataDir: t.TempDir()})
		ctx := ctxFor(t)
		if err := n.Ready(ctx); err != nil {
			t.Fatalf("Ready of an empty node: %v", err)
		}
		mustTopic(t, n, mustStream(t, n, "s"), "t", 4)
		synctest.Wait()
		if err := n.Ready(ctx); err != nil {
			t.Fatalf("Ready with the topic's partitions built: %v", err)
		}
	})
	// A reconciler that builds nothing: the topic's partitions never
	// materialise, and Ready says so.
	synctest.Test(t, func(t *testing.T) {
		n := open(t, parkway.Config{Shards: 2, NewReconciler: func(reconciler.Config, *router.Table) (reconciler.Reconciler, error) {
			return idle{}, nil
		}})
		ctx := ctxFor(t)
		mustTopic(t, n, mustStream(t, n, "s"), "t", 4)
		synctest.Wait()
		if err := n.Ready(ctx); !errors.Is(err, parkway.ErrNotReady) || !strings.Contains(err.Error(), "4 partitions not materialised") {
			t.Fatalf("Ready with nothing built: %v", err)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		n, err := parkway.Open(parkway.Config{Shards: 1})
		if err != nil {
			t.Fatal(err)
		}
		n.Close()
		if err := n.Ready(ctxFor(t)); !errors.Is(err, parkway.ErrClosed) {
			t.Fatalf("Ready of a closed node: %v", err)
		}
	})
}
