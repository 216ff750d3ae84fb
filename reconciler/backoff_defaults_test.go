package reconciler_test

import (
	"testing"

	"github.com/parkway-io/parkway/internal/groups"
	"github.com/parkway-io/parkway/reconciler"
)

// TestBackoffDefaultsAreGroups pins the reconciler's documented backoff
// defaults to the one reopen pace of every failed raft group
// (groups.Reopen): written out in the public package, they must not drift.
func TestBackoffDefaultsAreGroups(t *testing.T) {
	if reconciler.DefaultBackoffMin != groups.DefaultReopenMin || reconciler.DefaultBackoffMax != groups.DefaultReopenMax {
		t.Fatalf("reconciler backoff [%v, %v], groups' reopen pace [%v, %v]", reconciler.DefaultBackoffMin, reconciler.DefaultBackoffMax, groups.DefaultReopenMin, groups.DefaultReopenMax)
	}
}
