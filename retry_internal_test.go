package parkway

import (
	"errors"
	"fmt"
	"testing"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/router"
	"github.com/parkway-io/parkway/shard"
)

// TestBehaviour18RetryHereIsDistinctFromNotLeader pins the client's
// classification (DESIGN behaviour 18): node-local convergence ("retry here
// shortly") is retried in place, "not leader / go elsewhere" never is, and
// an error that somehow carries both is treated as "go elsewhere" — a
// retry here can never succeed for it.
func TestBehaviour18RetryHereIsDistinctFromNotLeader(t *testing.T) {
	if errors.Is(ErrRetry, ErrNotLeader) || errors.Is(ErrNotLeader, ErrRetry) {
		t.Fatal("ErrRetry and ErrNotLeader must be distinct sentinels")
	}
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"ErrRetry", ErrRetry, true},
		{"wrapped ErrRetry", fmt.Errorf("partition materialising: %w", ErrRetry), true},
		{"shard.ErrRetry", shard.ErrRetry, true},
		{"ErrStaleIncarnation", shard.ErrStaleIncarnation, true},
		{"wrapped ErrStaleIncarnation", fmt.Errorf("ns 0/1/0: %w", shard.ErrStaleIncarnation), true},
		{"router.ErrFull", router.ErrFull, true},
		{"wrapped router.ErrFull", fmt.Errorf("shard 1: %w", router.ErrFull), true},

		{"ErrNotLeader", ErrNotLeader, false},
		{"wrapped ErrNotLeader", fmt.Errorf("partition 0/1/0: %w", ErrNotLeader), false},
		{"ErrNotLeader wrapping ErrRetry", fmt.Errorf("%w: %w", ErrNotLeader, ErrRetry), false},
		{"ErrRetry wrapping ErrNotLeader", fmt.Errorf("%w: %w", ErrRetry, ErrNotLeader), false},
		{"joined ErrRetry and ErrNotLeader", errors.Join(ErrRetry, ErrNotLeader), false},
		{"ErrNotLeader and router.ErrFull", errors.Join(router.ErrFull, ErrNotLeader), false},

		{"nil", nil, false},
		{"ErrClosed", ErrClosed, false},
		{"shard.ErrClosed", shard.ErrClosed, false},
		{"router.ErrDisconnected", router.ErrDisconnected, false},
		{"router.ErrUnroutable", router.ErrUnroutable, false},
		{"ErrTopicNotFound", ErrTopicNotFound, false},
		{"ErrPartitionNotFound", ErrPartitionNotFound, false},
		{"ErrOffsetOutOfRange", ErrOffsetOutOfRange, false},
		{"other", errors.New("disk on fire"), false},
	}
	for _, c := range cases {
		if got := host.RetryInPlace(c.err); got != c.want {
			t.Errorf("host.RetryInPlace(%s = %v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
