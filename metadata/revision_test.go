package metadata

import (
	"errors"
	"testing"
)

// TestCommandRevisionRefusesAnotherIncarnation: a command naming a stream
// or topic revision fails with not-found and ErrStaleRevision once the id
// belongs to another incarnation, and leaves that incarnation alone; with
// the right revision (or none) it applies.
func TestCommandRevisionRefusesAnotherIncarnation(t *testing.T) {
	s := newTestStore(t)
	must := func(cmd Command) Result {
		t.Helper()
		r, err := s.Apply(cmd)
		if err != nil {
			t.Fatalf("%#v: %v", cmd, err)
		}
		return r
	}
	st := must(CreateStream{Name: "s"})
	old := must(CreateTopic{Stream: st.Stream, StreamRevision: st.Revision, Name: "t", Partitions: 1})
	must(DeleteTopic{Stream: st.Stream, Topic: old.Topic, Revision: old.Revision})
	fresh := must(CreateTopic{Stream: st.Stream, Name: "t", Partitions: 1})
	if fresh.Topic != old.Topic {
		t.Fatalf("recreated topic id %d, want %d", fresh.Topic, old.Topic)
	}
	stale := []Command{
		DeleteTopic{Stream: st.Stream, Topic: old.Topic, Revision: old.Revision},
		CreatePartitions{Stream: st.Stream, Topic: old.Topic, Count: 1, Revision: old.Revision},
		DeletePartitions{Stream: st.Stream, Topic: old.Topic, Count: 1, Revision: old.Revision},
		PurgeTopic{Stream: st.Stream, Topic: old.Topic, Revision: old.Revision},
		SetTopicConfig{Stream: st.Stream, Topic: old.Topic, Revision: old.Revision},
	}
	for _, cmd := range stale {
		if _, err := s.Apply(cmd); !errors.Is(err, ErrTopicNotFound) || !errors.Is(err, ErrStaleRevision) {
			t.Errorf("%#v: %v, want ErrTopicNotFound and ErrStaleRevision", cmd, err)
		}
		// Encoded with the revision (version 2), decoded back the same.
		b, err := EncodeCommand(cmd)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := DecodeCommand(b); err != nil || got != cmd {
			t.Errorf("round trip of %#v: %#v, %v", cmd, got, err)
		}
		if b[1] != commandVersionRevision {
			t.Errorf("%#v encoded as version %d, want %d", cmd, b[1], commandVersionRevision)
		}
	}
	if info, ok := s.Topic(st.Stream, fresh.Topic); !ok || info.CreatedRevision != fresh.Revision || info.Partitions != 1 {
		t.Fatalf("the recreated topic changed: %+v %v", info, ok)
	}
	must(DeleteStream{Stream: st.Stream, Revision: st.Revision})
	again := must(CreateStream{Name: "s"})
	if _, err := s.Apply(CreateTopic{Stream: again.Stream, StreamRevision: st.Revision, Name: "x", Partitions: 1}); !errors.Is(err, ErrStreamNotFound) || !errors.Is(err, ErrStaleRevision) {
		t.Errorf("CreateTopic in a stale stream: %v", err)
	}
	if _, err := s.Apply(DeleteStream{Stream: again.Stream, Revision: st.Revision}); !errors.Is(err, ErrStaleRevision) {
		t.Errorf("DeleteStream of a stale stream: %v", err)
	}
	// Revision 0 in version 2 is not canonical.
	b, _ := EncodeCommand(DeleteStream{Stream: 1, Revision: 5})
	b[len(b)-1] = 0
	if _, err := DecodeCommand(b); err == nil {
		t.Error("version 2 with revision 0 decoded")
	}
}
