package metadata

import (
	"reflect"
	"syscall"
	"testing"
	"time"

	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// Announce publishes exactly the partitions the command creates when it
// is applied next: namespaces, owners and incarnation, with the topic's
// configuration; a command that would fail announces nothing.
func TestAnnounceForecastsWhatApplyCreates(t *testing.T) {
	s := newTestStore(t)
	mustApply(t, s, CreateStream{Name: "s"})
	mustApply(t, s, CreateTopic{Stream: 0, Name: "a", Partitions: 1})
	mustApply(t, s, CreateTopic{Stream: 0, Name: "b", Partitions: 1})
	mustApply(t, s, DeleteTopic{Stream: 0, Topic: 0}) // a hole: the next topic takes id 0
	wake, cancel := s.SubscribeAnnouncements()
	defer cancel()
	cfg := TopicConfig{Fsync: FsyncAlways, RetentionAge: time.Hour}

	for _, cmd := range []Command{
		CreateTopic{Stream: 0, Name: "c", Partitions: 3, Config: cfg},
		&CreatePartitions{Stream: 0, Topic: 1, Count: 2},
	} {
		withdraw := s.Announce(cmd)
		if !woken(wake) {
			t.Fatalf("Announce(%#v) woke no announcement subscriber", cmd)
		}
		got := s.Announced()
		res := mustApply(t, s, cmd)
		wantCfg := cfg
		if _, ok := cmd.(*CreatePartitions); ok {
			wantCfg = TopicConfig{} // topic b's
		}
		var want []AnnouncedPartition
		for _, p := range res.Created {
			want = append(want, AnnouncedPartition{PartitionInfo: p, Config: wantCfg})
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Announce(%#v) announced %+v; Apply created %+v", cmd, got, want)
		}
		withdraw()
		if woken(wake) {
			t.Fatalf("withdrawing %#v, committed as announced, woke a subscriber", cmd)
		}
		if a := s.Announced(); len(a) != 0 {
			t.Fatalf("after withdraw: Announced() = %+v", a)
		}
	}

	for _, cmd := range []Command{
		CreateTopic{Stream: 0, Name: "c", Partitions: 1}, // exists
		CreateTopic{Stream: 5, Name: "x", Partitions: 1}, // no stream
		CreateStream{Name: "t"},                          // creates no partition
		DeleteTopic{Stream: 0, Topic: 1},
		nil,
	} {
		withdraw := s.Announce(cmd)
		if a := s.Announced(); len(a) != 0 || woken(wake) {
			t.Fatalf("Announce(%#v) announced %+v", cmd, a)
		}
		withdraw()
	}
}

// Withdrawing an announcement whose command did not commit as announced
// wakes the announcement subscribers, so what was built for it is removed.
func TestWithdrawnAnnouncementWakes(t *testing.T) {
	s := newTestStore(t)
	mustApply(t, s, CreateStream{Name: "s"})
	wake, cancel := s.SubscribeAnnouncements()
	defer cancel()
	withdraw := s.Announce(CreateTopic{Stream: 0, Name: "a", Partitions: 1})
	woken(wake)
	withdraw()
	if !woken(wake) {
		t.Fatal("withdrawing an announcement that never committed woke no one")
	}
	withdraw() // idempotent
	if woken(wake) {
		t.Fatal("a second withdraw woke again")
	}
}

// The Durable announces a command before it logs it, and withdraws it
// once it is applied or failed: during the log's sync the partitions are
// announced, afterwards nothing is.
func TestDurableAnnouncesWhileTheLogSyncs(t *testing.T) {
	var d *Durable
	var during []AnnouncedPartition
	syncs := 0
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpSync && d != nil {
			syncs++
			during = d.Store().Announced()
			if syncs == 3 { // CreateStream, CreateTopic t, CreateTopic u
				return syscall.EIO
			}
		}
		return nil
	})
	d = openDurable(t, errorfs.New(vfs.NewMem(), inj), 0)
	if _, err := d.Apply(CreateStream{Name: "s"}); err != nil {
		t.Fatal(err)
	}
	wake, cancel := d.Store().SubscribeAnnouncements()
	defer cancel()
	res, err := d.Apply(CreateTopic{Stream: 0, Name: "t", Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(during) != 1 || !reflect.DeepEqual(during[0].PartitionInfo, res.Created[0]) {
		t.Fatalf("announced during the log sync: %+v, want %+v", during, res.Created)
	}
	if a := d.Store().Announced(); len(a) != 0 {
		t.Fatalf("announced after Apply: %+v", a)
	}
	woken(wake)
	// The next sync fails: the command never commits, and its
	// announcement is withdrawn with a wake.
	if _, err := d.Apply(CreateTopic{Stream: 0, Name: "u", Partitions: 1}); err == nil {
		t.Fatal("Apply with a failing sync succeeded")
	}
	if len(during) != 1 {
		t.Fatalf("announced during the failed sync: %+v", during)
	}
	if a := d.Store().Announced(); len(a) != 0 || !woken(wake) {
		t.Fatalf("after a failed log sync: announced %+v, woken %v; want nothing announced and a wake", a, woken(wake))
	}
	d.Close()
}
