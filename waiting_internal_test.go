package parkway

import "context"

// WaitingPolls returns how many polls are waiting on n's shards, read on
// each shard's pump: for benchmarks and tests that must know their
// waiting polls are registered before they measure.
func WaitingPolls(ctx context.Context, n *Node) (int, error) {
	states, err := n.eng.Inspect(ctx)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, st := range states {
		total += st.Waiting
	}
	return total, nil
}
