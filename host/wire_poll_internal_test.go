package host

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/parkway-io/parkway/shard"
)

// The poll fields round-trip, and hostile bytes are refused or clamped,
// never trusted.
func TestWirePollFields(t *testing.T) {
	in := shard.Request{Start: shard.StartTimestamp, Reset: shard.ResetLatest, Timestamp: -42,
		MaxWait: 1500 * time.Millisecond, MinCount: 7, MaxBytes: 1 << 20}
	b := appendPollFields([]byte{0xee}, &in)
	if len(b) != 1+pollFieldsSize {
		t.Fatalf("encoded %d bytes, want %d", len(b)-1, pollFieldsSize)
	}
	var out shard.Request
	rest, err := readPollFields(append(b[1:], 0xab), &out)
	if err != nil || len(rest) != 1 || rest[0] != 0xab {
		t.Fatalf("readPollFields: rest %x, %v", rest, err)
	}
	if out.Start != in.Start || out.Reset != in.Reset || out.Timestamp != in.Timestamp ||
		out.MaxWait != in.MaxWait || out.MinCount != in.MinCount || out.MaxBytes != in.MaxBytes {
		t.Fatalf("round trip: %+v, want %+v", out, in)
	}
	for name, mutate := range map[string]func([]byte){
		"unknown start": func(b []byte) { b[0] = 99 },
		"unknown reset": func(b []byte) { b[1] = 99 },
		"huge count":    func(b []byte) { b[21] = 0xff },
		"huge budget":   func(b []byte) { b[25] = 0xff },
	} {
		bad := append([]byte(nil), b[1:]...)
		mutate(bad)
		if _, err := readPollFields(bad, &out); !errors.Is(err, errWire) {
			t.Errorf("%s: %v, want errWire", name, err)
		}
	}
	if _, err := readPollFields(b[1:pollFieldsSize], &out); !errors.Is(err, errWire) {
		t.Errorf("short fields: %v", err)
	}
	long := in
	long.MaxWait = time.Hour
	if _, err := readPollFields(appendPollFields(nil, &long), &out); err != nil || out.MaxWait != shard.MaxPollWait {
		t.Errorf("an hour's wait decoded as %v, %v; want the cap", out.MaxWait, err)
	}
	long.MaxWait = -time.Second
	if _, err := readPollFields(appendPollFields(nil, &long), &out); err != nil || out.MaxWait != 0 {
		t.Errorf("a negative wait decoded as %v, %v; want 0", out.MaxWait, err)
	}

	var r shard.Response
	if _, err := readOffsetsFields(appendOffsetsFields(nil, shard.Response{Start: 3, End: 9}), &r); err != nil || r.Start != 3 || r.End != 9 {
		t.Fatalf("offsets round trip: %+v, %v", r, err)
	}
	if _, err := readOffsetsFields(appendOffsetsFields(nil, shard.Response{Start: 9, End: 3}), &r); !errors.Is(err, errWire) {
		t.Fatalf("end below start: %v", err)
	}
	// The leader's in-sync replicas travel with its term; a count the
	// bytes left cannot hold is refused before anything is allocated.
	r = shard.Response{}
	isr := appendOffsetsFields(nil, shard.Response{Start: 1, End: 2, Term: 7, InSync: []uint64{3, 1}})
	if rest, err := readOffsetsFields(isr, &r); err != nil || len(rest) != 0 || r.Term != 7 || !slices.Equal(r.InSync, []uint64{3, 1}) {
		t.Fatalf("in-sync round trip: %+v, %v (%d bytes left)", r, err, len(rest))
	}
	if _, err := readOffsetsFields(isr[:len(isr)-1], &r); !errors.Is(err, errWire) {
		t.Fatalf("an in-sync list cut short: %v", err)
	}
	if codeTooManyWaiters <= codeOther || flagPoll&(flagUseConsumer|flagFromLeader) != 0 {
		t.Fatal("the proposed code or flag collides with wire.go's")
	}
}
