// Package embedtest holds tests only: they use parkway the way a host
// application that embeds it does, from outside the module's internal
// tree, and fail when that stops being possible.
//
// The tests wire a node by hand from the public packages (metadata,
// router, shard, reconciler, partition) with a host's own partition store
// and reconciler, and drive it both with goroutines (reconciler.Run) and
// by hand (manual shards); they check that neither they nor the embed
// example import an internal package; and they scan the exported API of
// every public package and fail if an exported signature, field, method,
// type or variable names a type from an internal package, which a host
// could not name or construct.
package embedtest
