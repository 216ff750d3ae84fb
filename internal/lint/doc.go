// Package lint holds tests of the tree itself rather than of a package's
// behaviour: checks that keep hand-kept lists and the code they describe
// from drifting apart (today: scripts/fuzz.sh lists every fuzz target of
// the module). The package has no code.
package lint
