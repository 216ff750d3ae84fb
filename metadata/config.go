package metadata

import (
	"errors"
	"fmt"
)

// Config configures a Store.
type Config struct {
	// Shards is the number of shards per node; it must be > 0.
	Shards int
	// Assign returns the owner shard of a partition, in [0, shards). It is
	// required and must be a pure function of its arguments: every replica
	// computes owners with it while applying commands, so an impure Assign
	// breaks determinism. (The hash assignment lives with the router; the
	// store only records its answer in PartitionInfo.Owner.)
	Assign func(ns Namespace, shards int) int
	// Nodes are the cluster's nodes when its metadata began (distinct,
	// non-zero raft ids). Partitions are placed on them (see
	// PartitionInfo.Replicas); nil means a single node, whose partitions
	// carry no replica set. A store restored from a snapshot that records
	// its nodes takes them from the snapshot instead.
	Nodes []uint64
}

// Validate reports every problem with the configuration, joined with
// errors.Join, or nil.
func (c Config) Validate() error {
	var errs []error
	if c.Shards <= 0 {
		errs = append(errs, fmt.Errorf("parkway: metadata config: Shards is %d, must be > 0", c.Shards))
	}
	if c.Assign == nil {
		errs = append(errs, errors.New("parkway: metadata config: Assign is required"))
	}
	if err := checkNodes(c.Nodes); err != nil {
		errs = append(errs, fmt.Errorf("parkway: metadata config: Nodes: %w", err))
	}
	return errors.Join(errs...)
}
