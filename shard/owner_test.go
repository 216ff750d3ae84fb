package shard

import (
	"reflect"
	"testing"
)

// The shard's parts reach the shard only through their owner interfaces
// (owner.go): none holds a *Shard, directly or in a field's struct, so
// what a part may do to the shard stays the short list there.
func TestPartsHoldNoShard(t *testing.T) {
	shard := reflect.TypeFor[*Shard]()
	var holds func(ty reflect.Type, seen map[reflect.Type]bool) bool
	holds = func(ty reflect.Type, seen map[reflect.Type]bool) bool {
		if ty == shard {
			return true
		}
		if ty.Kind() != reflect.Struct || seen[ty] {
			return false
		}
		seen[ty] = true
		for f := range ty.Fields() {
			if holds(f.Type, seen) {
				return true
			}
		}
		return false
	}
	for _, part := range []reflect.Type{reflect.TypeFor[raftGroups](), reflect.TypeFor[commitGroup](),
		reflect.TypeFor[waitingPolls](), reflect.TypeFor[groupHandler]()} {
		if holds(part, map[reflect.Type]bool{}) {
			t.Errorf("%v holds a *Shard: reach the shard through an owner interface (owner.go)", part)
		}
	}
}
