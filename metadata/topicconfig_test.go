package metadata

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

func TestFsyncPolicyString(t *testing.T) {
	for p, want := range map[FsyncPolicy]string{
		FsyncDefault: "default", FsyncAlways: "always", FsyncInterval: "interval", FsyncNever: "never",
		FsyncNever + 1: "FsyncPolicy(4)", 255: "FsyncPolicy(255)",
	} {
		if got := p.String(); got != want {
			t.Errorf("FsyncPolicy(%d).String() = %q, want %q", uint8(p), got, want)
		}
	}
	if FsyncDefault != 0 {
		t.Error("the zero FsyncPolicy is not FsyncDefault")
	}
}

func TestTopicConfigValidate(t *testing.T) {
	valid := []TopicConfig{
		{},
		{Fsync: FsyncAlways},
		{Fsync: FsyncInterval}, // zero interval: the node's default
		{Fsync: FsyncInterval, FsyncInterval: time.Millisecond},
		{Fsync: FsyncNever, FsyncInterval: time.Second}, // kept, unused
		{RetentionAge: 24 * time.Hour, RetentionBytes: 1 << 30},
	}
	for _, c := range valid {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	invalid := []TopicConfig{
		{Fsync: FsyncNever + 1},
		{Fsync: FsyncInterval, FsyncInterval: -time.Second},
		{FsyncInterval: -1},
		{RetentionAge: -1},
		{RetentionBytes: -1},
	}
	for _, c := range invalid {
		if err := c.Validate(); !errors.Is(err, ErrInvalidTopicConfig) {
			t.Errorf("%+v: %v, want ErrInvalidTopicConfig", c, err)
		}
	}
}

func TestTopicConfigStoredAndSet(t *testing.T) {
	s := newTestStore(t)
	mustApply(t, s, CreateStream{Name: "s"})
	cfg := TopicConfig{Fsync: FsyncInterval, FsyncInterval: 50 * time.Millisecond, RetentionAge: time.Hour, RetentionBytes: 1 << 20}
	mustApply(t, s, CreateTopic{Stream: 0, Name: "configured", Partitions: 2, Config: cfg})
	mustApply(t, s, CreateTopic{Stream: 0, Name: "plain", Partitions: 1})
	if info, _ := s.Topic(0, 0); info.Config != cfg {
		t.Errorf("configured topic: %+v", info.Config)
	}
	if info, _ := s.TopicByName(0, "plain"); info.Config != (TopicConfig{}) {
		t.Errorf("plain topic: %+v", info.Config)
	}

	wake, cancel := s.Subscribe()
	defer cancel()
	before := s.Snapshot()
	next := TopicConfig{Fsync: FsyncAlways, RetentionBytes: 5}
	res := mustApply(t, s, SetTopicConfig{Stream: 0, Topic: 1, Config: next})
	if res.Revision != before.Revision+1 || res.Stream != 0 || res.Topic != 1 || res.Created != nil || res.Removed != nil {
		t.Errorf("SetTopicConfig result %+v", res)
	}
	if !woken(wake) {
		t.Error("SetTopicConfig woke no one")
	}
	if info, _ := s.Topic(0, 1); info.Config != next || info.CreatedRevision != 3 || info.Partitions != 1 {
		t.Errorf("after SetTopicConfig: %+v", info)
	}
	if info, _ := s.Topic(0, 0); info.Config != cfg {
		t.Errorf("other topic changed: %+v", info.Config)
	}
	// Partitions (and their incarnations) are untouched.
	after := s.Snapshot()
	if len(after.Partitions) != len(before.Partitions) {
		t.Fatal("SetTopicConfig changed the partitions")
	}
	for i := range after.Partitions {
		if !reflect.DeepEqual(after.Partitions[i], before.Partitions[i]) {
			t.Errorf("partition %v changed: %+v", before.Partitions[i].NS, after.Partitions[i])
		}
	}
	// Deleting and recreating the topic starts from the new command's config.
	mustApply(t, s, DeleteTopic{Stream: 0, Topic: 1})
	mustApply(t, s, CreateTopic{Stream: 0, Name: "plain", Partitions: 1})
	if info, _ := s.Topic(0, 1); info.Config != (TopicConfig{}) {
		t.Errorf("recreated topic kept the old config: %+v", info.Config)
	}
}
