package metadata

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/parkway-io/parkway/internal/wal"
	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

const metaDir = "/data/meta"

func openDurable(t *testing.T, fs vfs.FS, every int) *Durable {
	t.Helper()
	d, err := OpenDurable(fs, metaDir, testConfig, DurableOptions{SnapshotEvery: every})
	if err != nil {
		t.Fatalf("OpenDurable: %v", err)
	}
	return d
}

func closeDurable(t *testing.T, d *Durable) {
	t.Helper()
	if err := d.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func outcome(res Result, err error) string { return fmt.Sprintf("%+v | %v", res, err) }

// applyBoth applies cmd to the durable store and to a plain reference store
// and fails unless both answer alike.
func applyBoth(t *testing.T, d *Durable, ref *Store, cmd Command) Result {
	t.Helper()
	res, err := d.Apply(cmd)
	rr, rerr := ref.Apply(cmd)
	if outcome(res, err) != outcome(rr, rerr) {
		t.Fatalf("Apply(%#v): durable %s, reference %s", cmd, outcome(res, err), outcome(rr, rerr))
	}
	return res
}

func dirNames(t *testing.T, fs vfs.FS) []string {
	t.Helper()
	names, err := fs.ReadDir(metaDir)
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// richWorkload exercises every command, topic configs, failures, slab holes
// (deletes in the middle), and delete + recreate.
func richWorkload() []Command {
	cfg := TopicConfig{Fsync: FsyncInterval, FsyncInterval: 20 * time.Millisecond, RetentionAge: time.Hour}
	return []Command{
		CreateStream{Name: "a"},
		CreateStream{Name: "b"},
		CreateStream{Name: "c"},
		CreateStream{Name: "d"},
		CreateStream{Name: "a"}, // fails: exists
		CreateTopic{Stream: 0, Name: "t0", Partitions: 3, Config: cfg},
		CreateTopic{Stream: 0, Name: "t1", Partitions: 1},
		CreateTopic{Stream: 0, Name: "t2", Partitions: 2, Config: TopicConfig{Fsync: FsyncAlways}},
		CreateTopic{Stream: 0, Name: "t3", Partitions: 1},
		CreateTopic{Stream: 2, Name: "x", Partitions: 4},
		CreateTopic{Stream: 9, Name: "nope", Partitions: 1},                               // fails: no stream
		CreateTopic{Stream: 0, Name: "bad", Partitions: 1, Config: TopicConfig{Fsync: 9}}, // fails: config
		CreatePartitions{Stream: 0, Topic: 0, Count: 2},
		DeletePartitions{Stream: 2, Topic: 0, Count: 1},
		PurgeTopic{Stream: 0, Topic: 0},
		PurgeTopic{Stream: 0, Topic: 1},
		SetTopicConfig{Stream: 0, Topic: 1, Config: TopicConfig{RetentionBytes: 1 << 30}},
		SetTopicConfig{Stream: 0, Topic: 1, Config: TopicConfig{RetentionBytes: -1}}, // fails
		DeleteTopic{Stream: 0, Topic: 1},                                             // a hole in the middle
		DeleteStream{Stream: 1},                                                      // a hole in the middle
		DeleteTopic{Stream: 0, Topic: 2},
		CreateTopic{Stream: 0, Name: "t2", Partitions: 2}, // recreate: takes id 1, the lowest hole
		CreateTopic{Stream: 0, Name: "t1", Partitions: 1}, // takes id 2
		DeletePartitions{Stream: 0, Topic: 0, Count: 5},   // fails: all of them
		DeletePartitions{Stream: 0, Topic: 0, Count: 4},   // all but one
		PurgeTopic{Stream: 0, Topic: 0},
		CreatePartitions{Stream: 0, Topic: 0, Count: 1},
		DeleteStream{Stream: 3},
		DeleteStream{Stream: 7}, // fails
	}
}

// The restarted store equals a store that applied the same commands, and
// behaves the same from then on (slab reuse included).
func TestDurableRestartRestoresEverything(t *testing.T) {
	for _, every := range []int{1, 3, 7, 1000} {
		t.Run(fmt.Sprint("every ", every), func(t *testing.T) {
			mem := vfs.NewMem()
			d := openDurable(t, mem, every)
			ref := newTestStore(t)
			for _, cmd := range richWorkload() {
				applyBoth(t, d, ref, cmd)
			}
			closeDurable(t, d)

			fs := mem.Crash()
			d = openDurable(t, fs, every)
			sameStores(t, ref, d.Store())
			checkInvariants(t, d.Store())
			if _, ok := d.Store().StreamByName("b"); ok {
				t.Error("deleted stream came back")
			}
			if info, _ := d.Store().Topic(0, 0); info.Config.Fsync != FsyncInterval || info.Config.FsyncInterval != 20*time.Millisecond {
				t.Errorf("topic config after restart: %+v", info.Config)
			}
			// Same future: new ids fill the holes lowest first.
			if res := applyBoth(t, d, ref, CreateStream{Name: "new"}); res.Stream != 1 {
				t.Errorf("first stream after restart got id %d, want 1", res.Stream)
			}
			if res := applyBoth(t, d, ref, DeleteTopic{Stream: 0, Topic: 2}); res.Topic != 2 {
				t.Fatalf("DeleteTopic result %+v", res)
			}
			if res := applyBoth(t, d, ref, CreateTopic{Stream: 0, Name: "new", Partitions: 1}); res.Topic != 2 {
				t.Errorf("first topic after restart got id %d, want 2", res.Topic)
			}
			applyBoth(t, d, ref, CreateStream{Name: "newer"})
			rng := rand.New(rand.NewPCG(uint64(every), 1))
			for range 300 {
				applyBoth(t, d, ref, randomCommandWithConfig(rng, ref))
			}
			closeDurable(t, d)
			d = openDurable(t, fs.Crash(), every)
			sameStores(t, ref, d.Store())
			closeDurable(t, d)
		})
	}
}

// Delete + recreate before a restart comes back as the new incarnation
// only.
func TestDurableRecreateComesBackAsNewIncarnation(t *testing.T) {
	mem := vfs.NewMem()
	d := openDurable(t, mem, 0)
	mustApply(t, d.store, CreateStream{Name: "warmup"}) // unlogged: a plain store op...
	closeDurable(t, d)
	// ...is lost on restart, which is why only Apply may change the store.
	fs := mem.Crash()
	d = openDurable(t, fs, 0)
	if len(d.Store().Streams()) != 0 {
		t.Fatal("a command applied around the log survived a restart")
	}
	mustDurable := func(cmd Command) Result {
		t.Helper()
		res, err := d.Apply(cmd)
		if err != nil {
			t.Fatalf("Apply(%#v): %v", cmd, err)
		}
		return res
	}
	mustDurable(CreateStream{Name: "s"})
	old := mustDurable(CreateTopic{Stream: 0, Name: "t", Partitions: 2}).Created
	mustDurable(DeleteTopic{Stream: 0, Topic: 0})
	recreated := mustDurable(CreateTopic{Stream: 0, Name: "t", Partitions: 1}).Created
	if recreated[0].NS != old[0].NS || recreated[0].CreatedRevision == old[0].CreatedRevision {
		t.Fatalf("recreate: %+v vs %+v", recreated[0], old[0])
	}
	closeDurable(t, d)
	d = openDurable(t, fs.Crash(), 0)
	defer closeDurable(t, d)
	s := d.Store()
	if rev, ok := s.CreatedRevision(old[0].NS); !ok || rev != recreated[0].CreatedRevision {
		t.Errorf("CreatedRevision(%v) = %d, %v; want the new incarnation %d", old[0].NS, rev, ok, recreated[0].CreatedRevision)
	}
	if _, ok := s.Partition(old[1].NS); ok {
		t.Errorf("partition %v of the dead incarnation came back", old[1].NS)
	}
	if topics := s.Topics(0); len(topics) != 1 || topics[0].CreatedRevision != recreated[0].CreatedRevision || topics[0].Partitions != 1 {
		t.Errorf("topics after restart: %+v", topics)
	}
	if s.Revision() != 4 {
		t.Errorf("revision %d, want 4", s.Revision())
	}
}

// Snapshots rotate the log, the superseded files go, and a restart loads
// the snapshot and replays the log tail after it.
func TestDurableSnapshotAndTailReplay(t *testing.T) {
	mem := vfs.NewMem()
	d := openDurable(t, mem, 4)
	if got := dirNames(t, mem); !slices.Equal(got, []string{"wal-00000000000000000001"}) {
		t.Fatalf("fresh dir: %v", got)
	}
	ref := newTestStore(t)
	cmds := richWorkload()
	for _, cmd := range cmds[:10] {
		applyBoth(t, d, ref, cmd)
	}
	// Snapshots after commands 4 and 8; the log holds 9 and 10.
	snapRev := uint64(0)
	{
		r := newTestStore(t)
		for _, cmd := range cmds[:8] {
			r.Apply(cmd) //nolint:errcheck
		}
		snapRev = r.Revision()
	}
	want := []string{snapshotName(snapRev), "wal-00000000000000000009"}
	if got := dirNames(t, mem); !slices.Equal(got, want) {
		t.Fatalf("files %v, want %v", got, want)
	}
	b, err := vfs.ReadFile(mem, filepath.Join(metaDir, want[0]))
	if err != nil {
		t.Fatal(err)
	}
	index, snap, err := decodeSnapshotFile(b)
	if err != nil || index != 8 || snap.Revision != snapRev {
		t.Fatalf("snapshot file: index %d, revision %d, %v", index, snap.Revision, err)
	}
	closeDurable(t, d)

	crashed := mem.Crash()
	d = openDurable(t, crashed, 4)
	sameStores(t, ref, d.Store())
	if d.applied != 10 || d.snapIndex != 8 || d.log.Path() != filepath.Join(metaDir, want[1]) || d.log.Len() != 2 {
		t.Fatalf("after reopen: applied %d, snapshot %d, log %s with %d records", d.applied, d.snapIndex, d.log.Path(), d.log.Len())
	}
	// Two more commands reach the snapshot point again.
	for _, cmd := range cmds[10:12] {
		applyBoth(t, d, ref, cmd)
	}
	if got := dirNames(t, crashed); len(got) != 2 || got[1] != "wal-00000000000000000013" {
		t.Fatalf("after the next snapshot: %v", got)
	}
	closeDurable(t, d)
	d = openDurable(t, crashed.Crash(), 4)
	sameStores(t, ref, d.Store())
	closeDurable(t, d)
}

// A failed log write or sync fails the command, leaves the store alone,
// and breaks the Durable until it is reopened.
func TestDurableLogFailureBreaks(t *testing.T) {
	for _, kind := range []errorfs.OpKind{errorfs.OpWriteAt, errorfs.OpSync} {
		t.Run(kind.String(), func(t *testing.T) {
			mem := vfs.NewMem()
			sw := errorfs.NewSwitch(syscall.EIO, kind)
			d := openDurable(t, errorfs.New(mem, sw), 0)
			ref := newTestStore(t)
			applyBoth(t, d, ref, CreateStream{Name: "a"})
			wake, cancel := d.Store().Subscribe()
			defer cancel()
			sw.Set(true)
			res, err := d.Apply(CreateTopic{Stream: 0, Name: "t", Partitions: 1})
			if !errors.Is(err, syscall.EIO) || !reflect.DeepEqual(res, Result{}) {
				t.Fatalf("Apply with a failing %v = %+v, %v", kind, res, err)
			}
			sameStores(t, ref, d.Store())
			if woken(wake) {
				t.Error("a command that was not logged woke a subscriber")
			}
			if d.Err() == nil {
				t.Error("Err() = nil after a log failure")
			}
			sw.Set(false)
			if _, err := d.Apply(CreateStream{Name: "b"}); !errors.Is(err, ErrLogBroken) || !errors.Is(err, syscall.EIO) {
				t.Fatalf("Apply on a broken Durable = %v, want ErrLogBroken wrapping the cause", err)
			}
			sameStores(t, ref, d.Store())
			d.Close()
			// Reopening recovers: after a power loss the failed command is
			// gone (it was never synced).
			fs := mem.Crash()
			d = openDurable(t, fs, 0)
			sameStores(t, ref, d.Store())
			applyBoth(t, d, ref, CreateStream{Name: "b"})
			closeDurable(t, d)
			d = openDurable(t, fs.Crash(), 0)
			sameStores(t, ref, d.Store())
			closeDurable(t, d)
		})
	}
}

// A snapshot that fails does not fail the command it follows (that one is
// durable and applied), but it breaks the Durable.
func TestDurableSnapshotFailure(t *testing.T) {
	for _, kind := range []errorfs.OpKind{errorfs.OpRename, errorfs.OpSyncDir} {
		t.Run(kind.String(), func(t *testing.T) {
			mem := vfs.NewMem()
			sw := errorfs.NewSwitch(syscall.ENOSPC, kind)
			d := openDurable(t, errorfs.New(mem, sw), 2)
			ref := newTestStore(t)
			applyBoth(t, d, ref, CreateStream{Name: "a"})
			sw.Set(true)
			applyBoth(t, d, ref, CreateStream{Name: "b"}) // succeeds, snapshot fails
			if err := d.Err(); !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("Err() = %v, want the snapshot failure", err)
			}
			sw.Set(false)
			if _, err := d.Apply(CreateStream{Name: "c"}); !errors.Is(err, ErrLogBroken) {
				t.Fatalf("Apply after a failed snapshot = %v", err)
			}
			d.Close()
			fs := mem.Crash()
			d = openDurable(t, fs, 2)
			sameStores(t, ref, d.Store())
			applyBoth(t, d, ref, CreateStream{Name: "c"})
			applyBoth(t, d, ref, CreateStream{Name: "d"})
			closeDurable(t, d)
			d = openDurable(t, fs.Crash(), 2)
			sameStores(t, ref, d.Store())
			closeDurable(t, d)
		})
	}
}

// The crash test: fail each write point of a workload in turn (an error or
// a torn write), then crash (power loss, or process crash keeping the page
// cache) and reopen. The store must equal the state after some prefix of
// the commands that includes every acknowledged one, and must go on exactly
// as the reference does.
//
// The commands that create partitions carry their last partition's first
// messages (ApplyCarrying), and every fourth batch is settled at once: a
// write point inside a snapshot falls between its new log and its file,
// or after both. The reopened Durable must list, in log order, the batch
// of every command of the prefix that is not settled, and may list a
// settled one (settling is not logged) but nothing else.
func TestDurableCrashAtEveryWritePoint(t *testing.T) {
	const every = 5
	rng := rand.New(rand.NewPCG(7, 7))
	cmds := richWorkload()
	driver := newTestStore(t)
	for _, cmd := range cmds {
		driver.Apply(cmd) //nolint:errcheck
	}
	for range 20 {
		cmd := randomCommandWithConfig(rng, driver)
		driver.Apply(cmd) //nolint:errcheck
		cmds = append(cmds, cmd)
	}
	// Reference: outcomes and states after each prefix, and the batch
	// each command carries.
	type carry struct {
		part    uint32
		records []byte   // nil: applied with Apply
		want    *Carried // what the log holds once the command is in it
		settle  bool
	}
	carries := make([]carry, len(cmds))
	ref := newTestStore(t)
	states := []string{fmt.Sprintf("%+v", ref.Export())}
	var outcomes []string
	for j, cmd := range cmds {
		res, err := ref.Apply(cmd)
		outcomes = append(outcomes, outcome(res, err))
		states = append(states, fmt.Sprintf("%+v", ref.Export()))
		switch cmd.(type) {
		case CreateTopic, CreatePartitions:
			c := &carries[j]
			c.records = []byte(fmt.Sprint("the first messages of command ", j))
			if n := len(res.Created); n > 0 {
				p := res.Created[n-1]
				c.part, c.settle = p.Partition, j%4 == 0
				c.want = &Carried{NS: p.NS, Epoch: p.CreatedRevision, Records: c.records}
			}
		}
	}
	final := states[len(states)-1]
	// apply applies command j as the workload does; acked reports whether
	// it answered as the reference did.
	apply := func(t *testing.T, d *Durable, j int) (got string, acked bool) {
		t.Helper()
		c := carries[j]
		if c.records == nil {
			got = outcome(d.Apply(cmds[j]))
			return got, got == outcomes[j]
		}
		res, carried, err := d.ApplyCarrying(cmds[j], c.part, c.records, nil)
		got = outcome(res, err)
		if got != outcomes[j] {
			if carried {
				t.Fatalf("command %d failed (%s) but reports its records carried", j, got)
			}
			return got, false
		}
		if carried != (c.want != nil) {
			t.Fatalf("command %d: carried %v, want %v", j, carried, c.want != nil)
		}
		if c.settle {
			d.Settle(c.want.NS, c.want.Epoch)
		}
		return got, true
	}
	// checkCarried checks what a Durable holding the first k commands
	// lists.
	checkCarried := func(t *testing.T, name string, d *Durable, k int) {
		t.Helper()
		got := d.Carried()
		i := 0
		for j := range k {
			w := carries[j].want
			if w == nil {
				continue
			}
			// A batch whose incarnation is gone (its topic deleted
			// later) may be dropped by a snapshot; a live one never.
			info, live := d.Store().Partition(w.NS)
			live = live && info.CreatedRevision == w.Epoch
			if i < len(got) && reflect.DeepEqual(got[i], *w) {
				i++
			} else if !carries[j].settle && live {
				t.Fatalf("%s: holding %d commands, lists %+v: command %d's batch missing or out of order", name, k, got, j)
			}
		}
		if i != len(got) {
			t.Fatalf("%s: holding %d commands, lists %+v: %+v is not one of them, or out of order", name, k, got, got[i])
		}
	}

	// Count the write points of a clean run.
	counter := errorfs.OnIndex(-1, nil)
	d, err := OpenDurable(errorfs.New(vfs.NewMem(), counter), metaDir, testConfig, DurableOptions{SnapshotEvery: every})
	if err != nil {
		t.Fatal(err)
	}
	for j := range cmds {
		apply(t, d, j)
	}
	checkCarried(t, "a clean run", d, len(cmds))
	points := counter.Count()
	if points < int64(2*len(cmds)) {
		t.Fatalf("only %d write points for %d commands", points, len(cmds))
	}

	faults := []error{syscall.EIO, &errorfs.TornWrite{N: 3}, &errorfs.TornWrite{N: 9}}
	var resumedAcked, resumedInFlight int // how often each outcome happened
	for i := range points {
		for _, fault := range faults {
			for _, powerLoss := range []bool{true, false} {
				mem := vfs.NewMem()
				inj := errorfs.OnIndex(i, fault)
				var failed errorfs.Op
				record := errorfs.InjectorFunc(func(op errorfs.Op) error {
					err := inj.MaybeError(op)
					if err != nil {
						failed = op
					}
					return err
				})
				acked, attempted := 0, 0
				d, err := OpenDurable(errorfs.New(mem, record), metaDir, testConfig, DurableOptions{SnapshotEvery: every})
				name := func() string {
					return fmt.Sprintf("point %d (%v %s) fault %v power loss %v", i, failed.Kind, failed.Path, fault, powerLoss)
				}
				if err == nil {
					for j := range cmds {
						attempted = j + 1
						got, ok := apply(t, d, j)
						if !ok {
							// Not logged: the store must be unchanged.
							if s := fmt.Sprintf("%+v", d.Store().Export()); s != states[j] {
								t.Fatalf("%s: command %d failed (%s) but changed the store", name(), j, got)
							}
							break
						}
						acked = j + 1
						if d.Err() != nil {
							break // a snapshot failed after an acknowledged command
						}
					}
					if d.Err() != nil {
						if _, err := d.Apply(CreateStream{Name: "zz"}); !errors.Is(err, ErrLogBroken) {
							t.Fatalf("%s: Apply after a failure = %v, want ErrLogBroken", name(), err)
						}
					}
				}
				if !inj.Fired() {
					t.Fatalf("%s: the fault never fired (%d points counted)", name(), points)
				}
				fs := mem
				if powerLoss {
					fs = mem.Crash()
				}
				d2, err := OpenDurable(fs, metaDir, testConfig, DurableOptions{SnapshotEvery: every})
				if err != nil {
					t.Fatalf("%s: reopen: %v", name(), err)
				}
				got := fmt.Sprintf("%+v", d2.Store().Export())
				k := -1
				for c := acked; c <= attempted; c++ {
					if states[c] == got {
						k = c
						break
					}
				}
				if k < 0 {
					t.Fatalf("%s: reopened state matches no prefix in [%d, %d] of %d commands:\n%s", name(), acked, attempted, len(cmds), got)
				}
				if k == acked {
					resumedAcked++
				} else {
					resumedInFlight++
				}
				checkInvariants(t, d2.Store())
				checkCarried(t, name(), d2, k)
				for j := k; j < len(cmds); j++ {
					if got, ok := apply(t, d2, j); !ok {
						t.Fatalf("%s: after reopen at %d, command %d: %s, want %s", name(), k, j, got, outcomes[j])
					}
				}
				d2.Close()
				d3, err := OpenDurable(fs.Crash(), metaDir, testConfig, DurableOptions{SnapshotEvery: every})
				if err != nil {
					t.Fatalf("%s: second reopen: %v", name(), err)
				}
				if got := fmt.Sprintf("%+v", d3.Store().Export()); got != final {
					t.Fatalf("%s: final state after the second reopen differs (acked %d, attempted %d, resumed at %d):\n%s\nwant\n%s", name(), acked, attempted, k, got, final)
				}
				checkCarried(t, name()+", second reopen", d3, len(cmds))
				d3.Close()
			}
		}
	}
	t.Logf("%d write points; reopened at the acknowledged prefix %d times, with the in-flight command %d times",
		points, resumedAcked, resumedInFlight)
	if resumedAcked == 0 || resumedInFlight == 0 {
		t.Errorf("the crash points never produced one of the two outcomes: %d / %d", resumedAcked, resumedInFlight)
	}
}

// Commands that all fail leave the revision, hence the snapshot's name,
// unchanged: the next snapshot replaces the file in place.
func TestDurableSnapshotAtAnUnchangedRevision(t *testing.T) {
	mem := vfs.NewMem()
	d := openDurable(t, mem, 2)
	ref := newTestStore(t)
	applyBoth(t, d, ref, CreateStream{Name: "a"})
	applyBoth(t, d, ref, CreateStream{Name: "b"}) // snapshot at index 2, revision 2
	for range 4 {
		applyBoth(t, d, ref, DeleteStream{Stream: 9}) // fails: snapshots at 4 and 6, revision 2
	}
	if got, want := dirNames(t, mem), []string{snapshotName(2), walName(7)}; !slices.Equal(got, want) {
		t.Fatalf("files %v, want %v", got, want)
	}
	applyBoth(t, d, ref, CreateStream{Name: "c"})
	closeDurable(t, d)
	d = openDurable(t, mem.Crash(), 2)
	sameStores(t, ref, d.Store())
	if d.applied != 7 || d.snapIndex != 6 {
		t.Errorf("applied %d, snapshot index %d; want 7, 6", d.applied, d.snapIndex)
	}
	closeDurable(t, d)
}

func TestDurableTornTailIsRecovered(t *testing.T) {
	mem := vfs.NewMem()
	d := openDurable(t, mem, 0)
	ref := newTestStore(t)
	for _, cmd := range richWorkload()[:8] {
		applyBoth(t, d, ref, cmd)
	}
	path := d.log.Path()
	closeDurable(t, d)
	f, err := mem.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := f.Stat()
	f.WriteAt([]byte{40, 0, 0, 0, 1, 2, 3, 4, 3, 1, 0}, st.Size()) // a torn record
	f.Sync()
	f.Close()
	d = openDurable(t, mem, 0)
	sameStores(t, ref, d.Store())
	for _, cmd := range richWorkload()[8:] {
		applyBoth(t, d, ref, cmd)
	}
	closeDurable(t, d)
	d = openDurable(t, mem.Crash(), 0)
	sameStores(t, ref, d.Store())
	closeDurable(t, d)
}

func TestDurableRefusesCorruption(t *testing.T) {
	setup := func(t *testing.T) (*vfs.MemFS, []string) {
		mem := vfs.NewMem()
		d := openDurable(t, mem, 4)
		for _, cmd := range richWorkload()[:6] {
			d.Apply(cmd) //nolint:errcheck
		}
		closeDurable(t, d)
		return mem, dirNames(t, mem) // a snapshot at 4, wal-5 with 2 records
	}
	mustCorrupt := func(t *testing.T, mem vfs.FS) {
		t.Helper()
		if _, err := OpenDurable(mem, metaDir, testConfig, DurableOptions{SnapshotEvery: 4}); !errors.Is(err, ErrCorruptLog) {
			t.Fatalf("OpenDurable = %v, want ErrCorruptLog", err)
		} else if !strings.HasPrefix(err.Error(), "parkway: ") {
			t.Errorf("error %q lacks the parkway: prefix", err)
		}
	}
	t.Run("bad record in the middle of the log", func(t *testing.T) {
		mem, names := setup(t)
		flipByte(t, mem, filepath.Join(metaDir, names[1]), 9)
		mustCorrupt(t, mem)
	})
	t.Run("last record written whole, then damaged", func(t *testing.T) {
		// The metadata log applies package tail's rule: its last record,
		// of its whole length, with a byte flipped, is damage (truncating
		// it would forget a committed command), not a torn write.
		mem, names := setup(t)
		path := filepath.Join(metaDir, names[1])
		st, err := mem.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		flipByte(t, mem, path, st.Size()-1)
		mustCorrupt(t, mem)
	})
	t.Run("no snapshot before the log", func(t *testing.T) {
		mem, names := setup(t)
		mem.Remove(filepath.Join(metaDir, names[0]))
		mustCorrupt(t, mem)
	})
	t.Run("corrupt snapshot, nothing to fall back to", func(t *testing.T) {
		mem, names := setup(t)
		flipByte(t, mem, filepath.Join(metaDir, names[0]), 20)
		mustCorrupt(t, mem)
	})
	t.Run("record that does not decode", func(t *testing.T) {
		mem := vfs.NewMem()
		mem.MkdirAll(metaDir, 0o755)
		l, err := wal.Create(mem, filepath.Join(metaDir, walName(1)), wal.Options{FirstIndex: 1})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := EncodeCommand(CreateStream{Name: "ok"})
		l.Append(b)
		l.Append([]byte{99, 1})
		l.Sync()
		l.Close()
		mustCorrupt(t, mem)
	})
	t.Run("snapshot whose name is not its revision", func(t *testing.T) {
		mem, names := setup(t)
		rev, ok := parseName(names[0], snapshotPrefix)
		if !ok {
			t.Fatalf("%s is not a snapshot", names[0])
		}
		if err := mem.Rename(filepath.Join(metaDir, names[0]), filepath.Join(metaDir, snapshotName(rev+1))); err != nil {
			t.Fatal(err)
		}
		mustCorrupt(t, mem)
	})
	t.Run("gap between logs", func(t *testing.T) {
		mem, _ := setup(t)
		l, err := wal.Create(mem, filepath.Join(metaDir, walName(9)), wal.Options{FirstIndex: 9})
		if err != nil {
			t.Fatal(err)
		}
		l.Close()
		mustCorrupt(t, mem)
	})
}

func flipByte(t *testing.T, fs vfs.FS, path string, off int64) {
	t.Helper()
	f, err := fs.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x20
	f.WriteAt(b, off)
	f.Sync()
	f.Close()
}

// When cleanup could not remove the previous snapshot and log, a corrupt
// newest snapshot falls back to them.
func TestDurableFallsBackToAnOlderSnapshot(t *testing.T) {
	mem := vfs.NewMem()
	noRemove := errorfs.NewSwitch(syscall.EACCES, errorfs.OpRemove)
	noRemove.Set(true)
	d := openDurable(t, errorfs.New(mem, noRemove), 3)
	ref := newTestStore(t)
	for _, cmd := range richWorkload()[:8] {
		applyBoth(t, d, ref, cmd)
	}
	if d.Err() != nil {
		t.Fatalf("a failed cleanup broke the Durable: %v", d.Err())
	}
	closeDurable(t, d)
	names := dirNames(t, mem)
	var snaps []string
	for _, n := range names {
		if strings.HasPrefix(n, snapshotPrefix) {
			snaps = append(snaps, n)
		}
	}
	if len(snaps) != 2 || len(names) != 5 {
		t.Fatalf("files %v: want two snapshots and three logs", names)
	}
	flipByte(t, mem, filepath.Join(metaDir, snaps[1]), 15)
	d = openDurable(t, mem, 3)
	sameStores(t, ref, d.Store())
	for _, cmd := range richWorkload()[8:] {
		applyBoth(t, d, ref, cmd)
	}
	closeDurable(t, d)
	// Cleanup worked this time: one snapshot, one log.
	if names := dirNames(t, mem); len(names) != 2 {
		t.Errorf("files after a clean snapshot: %v", names)
	}
	d = openDurable(t, mem.Crash(), 3)
	sameStores(t, ref, d.Store())
	if names := dirNames(t, mem); len(names) != 2 {
		t.Errorf("files after a clean snapshot: %v", names)
	}
	closeDurable(t, d)
}

// A crash between writing a snapshot and creating the log after it (the
// order of earlier versions, whose directories are still read: the log
// now comes first) leaves the snapshot with the older log only; the
// reopened Durable appends behind that log, so it then holds commands
// past the snapshot. When the next
// snapshot is corrupt (and its cleanup failed, so the older files remain),
// the fall-back to the older snapshot replays that log from inside it and
// chains on to the newer log — it must not discard the older log because
// it starts before the snapshot.
func TestDurableFallsBackToASnapshotInsideALog(t *testing.T) {
	mem := vfs.NewMem()
	noRemove := errorfs.NewSwitch(syscall.EACCES, errorfs.OpRemove)
	noRemove.Set(true)
	ref := newTestStore(t)
	work := richWorkload()
	d := openDurable(t, errorfs.New(mem, noRemove), 3)
	for _, cmd := range work[:3] { // the third writes a snapshot and wal-4
		applyBoth(t, d, ref, cmd)
	}
	closeDurable(t, d)
	// The crash point: the snapshot is written, its log not yet created.
	if err := mem.Remove(filepath.Join(metaDir, walName(4))); err != nil {
		t.Fatal(err)
	}
	d = openDurable(t, errorfs.New(mem, noRemove), 3)
	for _, cmd := range work[3:8] { // 4-6 go behind wal-1; the sixth snapshots and starts wal-7
		applyBoth(t, d, ref, cmd)
	}
	closeDurable(t, d)
	var snaps, wals []string
	for _, n := range dirNames(t, mem) {
		if strings.HasPrefix(n, snapshotPrefix) {
			snaps = append(snaps, n)
		} else {
			wals = append(wals, n)
		}
	}
	if len(snaps) != 2 || !slices.Equal(wals, []string{walName(1), walName(7)}) {
		t.Fatalf("snapshots %v, logs %v: want two snapshots, %s and %s", snaps, wals, walName(1), walName(7))
	}
	flipByte(t, mem, filepath.Join(metaDir, snaps[1]), 15)
	d, err := OpenDurable(mem, metaDir, testConfig, DurableOptions{SnapshotEvery: 3})
	if err != nil {
		t.Fatalf("falling back to the snapshot inside %s: %v", walName(1), err)
	}
	sameStores(t, ref, d.Store())
	for _, cmd := range work[8:] {
		applyBoth(t, d, ref, cmd)
	}
	closeDurable(t, d)
}

func TestDurableMisc(t *testing.T) {
	mem := vfs.NewMem()
	if _, err := OpenDurable(mem, metaDir, Config{}, DurableOptions{}); err == nil {
		t.Error("OpenDurable with an invalid Config succeeded")
	}
	if _, err := OpenDurable(mem, metaDir, testConfig, DurableOptions{SnapshotEvery: -1}); err == nil {
		t.Error("OpenDurable with a negative SnapshotEvery succeeded")
	}
	// Leftovers of a crashed WriteFileAtomic are removed; other files stay.
	mem.MkdirAll(metaDir, 0o755)
	for _, n := range []string{".snapshot-00000000000000000003.tmp", "README", "wal-12", "snapshot-x"} {
		f, _ := mem.OpenFile(filepath.Join(metaDir, n), os.O_CREATE|os.O_WRONLY, 0o644)
		f.Close()
	}
	d := openDurable(t, mem, 0)
	if got := dirNames(t, mem); !slices.Equal(got, []string{"README", "snapshot-x", "wal-00000000000000000001", "wal-12"}) {
		t.Errorf("files: %v", got)
	}
	if d.applied != 0 || d.snapIndex != 0 {
		t.Errorf("fresh Durable: applied %d, snapshot %d", d.applied, d.snapIndex)
	}
	// Commands that fail whatever the state are not logged.
	size := d.log.Size()
	for _, cmd := range []Command{nil, foreignCommand{}, CreateStream{Name: strings.Repeat("x", 1<<20)},
		CreateTopic{Stream: 0, Name: strings.Repeat("x", MaxNameLength+1), Partitions: 1}} {
		if _, err := d.Apply(cmd); err == nil {
			t.Errorf("Apply(%T) succeeded", cmd)
		}
	}
	if d.log.Size() != size || d.applied != 0 {
		t.Errorf("commands that cannot succeed were logged: size %d -> %d", size, d.log.Size())
	}
	// Pointers are logged as values.
	if _, err := d.Apply(&CreateStream{Name: "p"}); err != nil {
		t.Fatal(err)
	}
	closeDurable(t, d)
	if _, err := d.Apply(CreateStream{Name: "q"}); !errors.Is(err, ErrDurableClosed) {
		t.Errorf("Apply after Close = %v", err)
	}
	if err := d.Close(); !errors.Is(err, ErrDurableClosed) {
		t.Errorf("second Close = %v", err)
	}
	if _, ok := d.Store().StreamByName("p"); !ok {
		t.Error("the store is not readable after Close")
	}
	d = openDurable(t, mem.Crash(), 0)
	if _, ok := d.Store().StreamByName("p"); !ok {
		t.Error("a pointer command did not survive a restart")
	}
	closeDurable(t, d)
}

func TestDurableConcurrentApply(t *testing.T) {
	mem := vfs.NewMem()
	d := openDurable(t, mem, 16)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				if _, err := d.Apply(CreateStream{Name: fmt.Sprint(g, "-", i)}); err != nil {
					t.Error(err)
					return
				}
				d.Store().Streams()
			}
		}()
	}
	wg.Wait()
	want := d.Store().Export()
	closeDurable(t, d)
	d = openDurable(t, mem.Crash(), 16)
	if got := d.Store().Export(); !reflect.DeepEqual(got, want) || len(got.Streams) != 100 {
		t.Errorf("after restart: %d streams, equal %v", len(got.Streams), reflect.DeepEqual(got, want))
	}
	closeDurable(t, d)
}

// Names of exactly MaxNameLength bytes are valid: they are logged like any
// other command and survive a restart; one byte more is refused.
func TestDurableLogsNamesOfMaxLength(t *testing.T) {
	mem := vfs.NewMem()
	d := openDurable(t, mem, 100)
	longest := strings.Repeat("n", MaxNameLength)
	if _, err := d.Apply(CreateStream{Name: longest}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Apply(CreateTopic{Stream: 0, Name: longest, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Apply(CreateStream{Name: longest + "n"}); err == nil {
		t.Fatal("a name one byte over MaxNameLength was accepted")
	}
	closeDurable(t, d)
	d = openDurable(t, mem, 100)
	defer closeDurable(t, d)
	if _, ok := d.Store().StreamByName(longest); !ok {
		t.Fatal("a stream with a MaxNameLength name did not survive a restart")
	}
	if _, ok := d.Store().Topic(0, 0); !ok {
		t.Fatal("a topic with a MaxNameLength name did not survive a restart")
	}
}
