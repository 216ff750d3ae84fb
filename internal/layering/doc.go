// Package layering holds one test, which checks the module's imports
// against the layering of docs/DESIGN.md: imports point one way, down
//
//	examples → parkway (root: client API) → host (node engine) →
//	  reconciler → shard → router → partition → metadata
//
// with the public seams (vfs, vfs/errorfs, clock, metrics, transport)
// usable by any of them, and the internal packages as leaves that import
// none of the layered packages — except internal/sim, the simulator,
// which drives the node engine and may import it and everything below it,
// but never the root package. The package has no code.
package layering
