package parkway

import (
	"reflect"
	"testing"

	"github.com/parkway-io/parkway/partition"
)

// TestMessageLayout: the client's Message and Header are converted to the
// engine's (and back) by reinterpreting their memory (engineMessages,
// clientMessages, messageSize), which is only sound while both have the
// same fields, in the same order, of the same types. A field added,
// removed, reordered or retyped on either side fails here.
func TestMessageLayout(t *testing.T) {
	same := map[reflect.Type]reflect.Type{
		reflect.TypeFor[Message](): reflect.TypeFor[partition.Message](),
		reflect.TypeFor[Header]():  reflect.TypeFor[partition.Header](),
	}
	var equal func(a, b reflect.Type) bool
	equal = func(a, b reflect.Type) bool {
		if m, ok := same[a]; ok {
			a = m
		}
		if a == b {
			return true
		}
		if a.Kind() != b.Kind() || a.Size() != b.Size() || a.Align() != b.Align() {
			return false
		}
		switch a.Kind() {
		case reflect.Slice, reflect.Pointer:
			return equal(a.Elem(), b.Elem())
		case reflect.Array:
			return a.Len() == b.Len() && equal(a.Elem(), b.Elem())
		}
		return false
	}
	for client, engine := range same {
		if client.Size() != engine.Size() || client.NumField() != engine.NumField() {
			t.Fatalf("%v has size %d and %d fields, %v has %d and %d", client, client.Size(), client.NumField(), engine, engine.Size(), engine.NumField())
		}
		for i := range client.NumField() {
			c, e := client.Field(i), engine.Field(i)
			if c.Name != e.Name || c.Offset != e.Offset || !equal(c.Type, e.Type) {
				t.Errorf("%v field %d is %s %v at %d, %v's is %s %v at %d", client, i, c.Name, c.Type, c.Offset, engine, e.Name, e.Type, e.Offset)
			}
		}
	}
}
