package reconciler

import (
	"maps"
	"slices"

	"github.com/parkway-io/parkway/metadata"
)

func sortedKeys[V any](m map[metadata.Namespace]V) []metadata.Namespace {
	return slices.Sorted(maps.Keys(m))
}
