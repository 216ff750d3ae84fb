package shard

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/router"
	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// journalRounds is how many rounds the journal workloads run: the first
// commit of a partition syncs it directly, every later one goes through
// the journal.
const journalRounds = 4

// journalStore opens a store on fsys whose fsyncs run one after another,
// so the write points of a run come in a fixed order.
func journalStore(fsys vfs.FS) (*partition.FileStore, error) {
	return partition.NewFileStore(partition.FileConfig{Dir: "/data", FS: fsys, SerialSyncs: true})
}

// journalShards is how many shards the journal workloads run: each
// commits through its own handle on the store's one journal, so the
// journal files hold records of several shards.
const journalShards = 2

// journalRun is journalShards shards committing FsyncAlways groups through
// their handles on their store's journal: the workload of groupWorkload,
// round by round.
type journalRun struct {
	t     *testing.T
	h     *harness
	store *partition.FileStore
	parts map[metadata.Namespace]uint64
	nss   []metadata.Namespace
	acks  []ack
}

// newJournalRun opens the store on fsys and the shards, each with a
// handle on its journal. It returns nil if the disk failed before the
// store opened.
func newJournalRun(t *testing.T, fsys vfs.FS) *journalRun {
	t.Helper()
	store, err := journalStore(fsys)
	if err != nil {
		return nil
	}
	return newJournalRunOn(t, store, false)
}

// newJournalRunOn is newJournalRun on store, with Manual shards if manual.
func newJournalRunOn(t *testing.T, store *partition.FileStore, manual bool) *journalRun {
	t.Helper()
	h := newHarness(t, journalShards, nil, func(c *Config) { c.Journal, c.Manual = store.NewJournal(), manual })
	return &journalRun{t: t, h: h, store: store, parts: map[metadata.Namespace]uint64{}}
}

// owner is the shard that owns ns.
func (r *journalRun) owner(ns metadata.Namespace) *Shard {
	return r.h.shards[router.Assign(ns, len(r.h.shards))]
}

// close closes every shard.
func (r *journalRun) close() error {
	var errs []error
	for _, s := range r.h.shards {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}

// add builds and inserts the partition of a new topic; a failed build
// leaves it out (but known, for the checks).
func (r *journalRun) add(name string) metadata.Namespace {
	ns, epoch := r.h.topic(name)
	r.parts[ns] = epoch
	p, err := r.store.Build(ns, epoch)
	if err != nil {
		return ns
	}
	if err := r.h.step(r.owner(ns), opInsertOwned(p, always)); err != nil {
		r.t.Fatal(err)
	}
	r.nss = append(r.nss, ns)
	return ns
}

// round sends one produce to every inserted partition and runs each
// shard's pump until its inbox is empty: one commit group per shard
// covering its partitions.
func (r *journalRun) round(k int) {
	var calls []call
	for _, ns := range r.nss {
		c := produce(ns, payloadOf(ns, r.parts[ns], k))
		if err := r.owner(ns).TrySend(c.f); err != nil {
			r.t.Fatal(err)
		}
		calls = append(calls, c)
	}
	for _, s := range r.h.shards {
		for len(s.inbox) > 0 {
			s.handleFrame(s.taken(<-s.inbox))
		}
	}
	for i, c := range calls {
		if resp := c.answered(r.t); resp.Err == nil {
			r.acks = append(r.acks, ack{ns: r.nss[i], offset: resp.Offset, payload: string(c.f.Req.Messages[0].Payload)})
		}
	}
}

// payloadOf names round k's message to ns at epoch: the checks parse it
// back to tell incarnations and rounds apart.
func payloadOf(ns metadata.Namespace, epoch uint64, k int) string {
	return fmt.Sprintf("%d@%d/%d", uint64(ns), epoch, k)
}

// journalWorkload runs journalRounds rounds over groupParts partitions;
// with closeShard the shard is closed at the end (its partitions synced,
// unless the disk refuses), otherwise the process stops there.
func journalWorkload(t *testing.T, fsys vfs.FS, closeShard bool) (acks []ack, parts map[metadata.Namespace]uint64) {
	t.Helper()
	r := newJournalRun(t, fsys)
	if r == nil {
		return nil, map[metadata.Namespace]uint64{}
	}
	for i := range groupParts {
		r.add(fmt.Sprint("t", i))
	}
	used := map[*Shard]bool{}
	for ns := range r.parts {
		used[r.owner(ns)] = true
	}
	if len(used) != journalShards {
		t.Fatalf("the workload's partitions are on %d of the %d shards: the journal would not hold records of several", len(used), journalShards)
	}
	for k := range journalRounds {
		r.round(k)
	}
	if closeShard {
		if err := r.close(); err != nil {
			t.Fatal(err)
		}
	}
	return r.acks, r.parts
}

// checkLogs opens a store on fsys (replaying its journal) and checks every
// partition of parts: each acknowledged produce at its offset, and every
// message the log holds one that was produced to that incarnation, whole,
// in the order it was produced.
func checkLogs(t *testing.T, fsys vfs.FS, acks []ack, parts map[metadata.Namespace]uint64, what string) {
	t.Helper()
	store, err := journalStore(fsys)
	if err != nil {
		t.Fatalf("%s: reopening the store: %v", what, err)
	}
	byOffset := map[metadata.Namespace]map[uint64]string{}
	for _, a := range acks {
		if byOffset[a.ns] == nil {
			byOffset[a.ns] = map[uint64]string{}
		}
		byOffset[a.ns][a.offset] = a.payload
	}
	for ns, epoch := range parts {
		p, err := store.Build(ns, epoch)
		if err != nil {
			t.Fatalf("%s: rebuilding %v: %v", what, ns, err)
		}
		msgs, err := p.Read(0, 1000)
		if err != nil {
			t.Fatalf("%s: reading %v: %v", what, ns, err)
		}
		last := -1
		for i, m := range msgs {
			var gotNS, gotEpoch uint64
			var k int
			if n, err := fmt.Sscanf(string(m.Payload), "%d@%d/%d", &gotNS, &gotEpoch, &k); err != nil || n != 3 ||
				metadata.Namespace(gotNS) != ns || gotEpoch != epoch || k <= last || m.Offset != uint64(i) {
				t.Fatalf("%s: %v@%d offset %d holds %q (after round %d): not a message produced to it, in order", what, ns, epoch, m.Offset, m.Payload, last)
			}
			last = k
		}
		for off, payload := range byOffset[ns] {
			if off >= uint64(len(msgs)) || string(msgs[off].Payload) != payload {
				t.Fatalf("%s: acknowledged %q at %v offset %d lost (the log holds %d messages)", what, payload, ns, off, len(msgs))
			}
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// journalFiles lists the journal files on fsys.
func journalFiles(t *testing.T, fsys vfs.FS) []string {
	t.Helper()
	names, err := fsys.ReadDir("/data/journal")
	if err != nil {
		return nil
	}
	var out []string
	for _, n := range names {
		if strings.HasSuffix(n, ".journal") {
			out = append(out, n)
		}
	}
	return out
}

// With a journal, a commit group covering several partitions is one
// journal write and fsync; nothing it acknowledges may be lost, and
// nothing unacknowledged may show up torn or out of order. Every mutating
// filesystem operation of the workload is failed in turn, once (the disk
// fails and recovers) and from then on (the machine stops there, so the
// partitions' lazy syncs never happen); after each, a power loss and a
// process crash must both keep every acknowledged produce, which the
// reopen's replay of the journal restores.
func TestJournalCrashAtEveryWritePoint(t *testing.T) {
	count := errorfs.OnIndex(-1, nil)
	acks, _ := journalWorkload(t, errorfs.New(vfs.NewMem(), count), true)
	if len(acks) != groupParts*journalRounds {
		t.Fatalf("clean run acknowledged %d produces, want %d", len(acks), groupParts*journalRounds)
	}
	n := count.Count()
	t.Logf("%d write points", n)
	for i := range n {
		for _, mode := range []string{"once", "from then on"} {
			mem := vfs.NewMem()
			inj := errorfs.OnIndex(i, syscall.EIO)
			if mode == "from then on" {
				inj = errorfs.FromIndex(i, syscall.EIO)
			}
			acks, parts := journalWorkload(t, errorfs.New(mem, inj), true)
			if !inj.Fired() {
				t.Fatalf("op %d never happened", i)
			}
			what := fmt.Sprintf("op %d failing %s, %d acknowledged", i, mode, len(acks))
			checkLogs(t, mem.Crash(), acks, parts, "power loss: "+what)
			checkLogs(t, mem, acks, parts, "process crash: "+what)
		}
	}
}

// crashedAfterJournal runs the workload and loses power before any
// partition's lazy sync: the later rounds are durable in the journal
// only. It checks that they are (the partitions' files lack them, the
// journal holds them) and returns the crashed disk.
func crashedAfterJournal(t *testing.T) (*vfs.MemFS, []ack, map[metadata.Namespace]uint64) {
	t.Helper()
	mem := vfs.NewMem()
	acks, parts := journalWorkload(t, mem, false)
	if len(acks) != groupParts*journalRounds {
		t.Fatalf("acknowledged %d produces, want %d", len(acks), groupParts*journalRounds)
	}
	crashed := mem.Crash()
	if len(journalFiles(t, crashed)) == 0 {
		t.Fatal("no journal file survived the crash")
	}
	for ns := range parts {
		dir := "/data/streams/" + strconv.FormatUint(uint64(ns.Stream()), 10) + "/topics/" +
			strconv.FormatUint(uint64(ns.Topic()), 10) + "/partitions/" + strconv.FormatUint(uint64(ns.Partition()), 10)
		b, err := vfs.ReadFile(crashed, dir+"/00000000000000000000.log")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), payloadOf(ns, parts[ns], journalRounds-1)) {
			t.Fatalf("%v: the last round reached the partition's own file before the crash: the journal was not exercised", ns)
		}
	}
	return crashed, acks, parts
}

// A crash between the journal's fsync and the partitions' lazy syncs: the
// acknowledged produces are in the journal only, and the reopen replays
// them into the partitions, in order, each once (a second reopen, which
// finds the journal gone, sees the same logs).
func TestJournalCrashBeforeLazySyncs(t *testing.T) {
	crashed, acks, parts := crashedAfterJournal(t)
	checkLogs(t, crashed, acks, parts, "after the crash")
	if files := journalFiles(t, crashed); len(files) != 0 {
		t.Fatalf("journal files %v left after a replay", files)
	}
	checkLogs(t, crashed.Crash(), acks, parts, "after a second crash") // the replay was durable
}

// A crash during the replay itself: every mutating operation of the
// reopen is failed from then on, the power is lost, and the next reopen
// must still find every acknowledged produce, each once.
func TestJournalCrashDuringReplay(t *testing.T) {
	crashed, acks, parts := crashedAfterJournal(t)
	count := errorfs.OnIndex(-1, nil)
	if _, err := journalStore(errorfs.New(crashed.Crash(), count)); err != nil {
		t.Fatal(err)
	}
	n := count.Count()
	if n == 0 {
		t.Fatal("the replay wrote nothing")
	}
	t.Logf("%d write points in the replay", n)
	for i := range n {
		disk := crashed.Crash()
		var seen atomic.Int64
		inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
			if op.Mutating() && seen.Add(1)-1 >= i {
				return syscall.EIO
			}
			return nil
		})
		_, err := journalStore(errorfs.New(disk, inj))
		what := fmt.Sprintf("replay failing from op %d (%v)", i, err)
		checkLogs(t, disk.Crash(), acks, parts, "power loss: "+what)
		checkLogs(t, disk, acks, parts, "process crash: "+what)
	}
}

// A partition deleted and recreated (same namespace, a new incarnation)
// while the journal holds records of the old one, and another deleted
// for good: after a crash the replay applies only the new incarnation's
// records to it, and brings back nothing of the deleted one.
func TestJournalSkipsRecordsOfDeletedIncarnations(t *testing.T) {
	mem := vfs.NewMem()
	r := newJournalRun(t, mem)
	re := r.add("re")
	gone := r.add("gone")
	for k := range journalRounds {
		r.round(k)
	}
	// Delete both topics: tombstone (closes the partition), remove the
	// data, confirm; then recreate "re", which reuses its ids.
	for _, ns := range []metadata.Namespace{re, gone} {
		var epoch uint64
		if err := r.h.step(r.owner(ns), opTombstone(ns, &epoch)); err != nil {
			t.Fatal(err)
		}
		r.h.apply(metadata.DeleteTopic{Stream: ns.Stream(), Topic: ns.Topic()})
		if err := r.store.Remove(ns); err != nil {
			t.Fatal(err)
		}
		if err := r.h.step(r.owner(ns), opRemoveOwned(ns)); err != nil {
			t.Fatal(err)
		}
	}
	oldEpoch := r.parts[re]
	delete(r.parts, gone)
	r.nss, r.acks = nil, nil
	if again := r.add("re"); again != re || r.parts[re] == oldEpoch {
		t.Fatalf("recreated topic: %v at epoch %d, want %v at a new epoch (old %d)", again, r.parts[re], re, oldEpoch)
	}
	for k := range journalRounds - 1 { // fewer: old records past the new end would show
		r.round(k)
	}
	crashed := mem.Crash()
	if len(journalFiles(t, crashed)) == 0 {
		t.Fatal("no journal file survived the crash: the old incarnation's records are not exercised")
	}
	checkLogs(t, crashed, r.acks, r.parts, "after the crash")
	store, err := journalStore(crashed)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := store.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range stored {
		if st.NS == gone {
			t.Fatalf("the deleted partition %v came back at epoch %d", gone, st.Epoch)
		}
	}
	p, err := store.Build(re, r.parts[re])
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if n := p.NextOffset(); n != journalRounds-1 {
		t.Fatalf("the recreated partition holds %d messages after the replay, want %d", n, journalRounds-1)
	}
}

// Before a commit group closes on an empty inbox the pump yields once,
// and keeps the group open if frames arrived meanwhile (producers just
// answered by the previous group joining this one); it yields once per
// group only, never when the group is full, and never in manual mode,
// whose driver decides what runs next.
func TestLingerGroupYieldsOncePerGroup(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := h.shards[0]
	ns, epoch := h.topic("t")
	if err := h.step(s, opInsertOwned(h.build(ns, epoch), always)); err != nil {
		t.Fatal(err)
	}
	first := produce(ns, "first")
	s.handle(first.f)
	s.flushAppends()
	if len(s.commit.pending) != 1 {
		t.Fatalf("%d acks pending, want 1", len(s.commit.pending))
	}
	if s.commit.lingerGroup() {
		t.Fatal("lingered on an empty inbox and reported frames")
	}
	if s.commit.lingerGroup() {
		t.Fatal("lingered twice in one group")
	}
	s.maybeFlush() // lingered already: closes the group
	if r := first.answered(t); r.Err != nil {
		t.Fatal(r.Err)
	}
	// The next group lingers again, and reports a frame that arrived.
	second, third := produce(ns, "second"), produce(ns, "third")
	s.handle(second.f)
	s.flushAppends()
	if err := s.TrySend(third.f); err != nil {
		t.Fatal(err)
	}
	if !s.commit.lingerGroup() {
		t.Fatal("a new group did not linger, or missed the frame in the inbox")
	}
	second.pending(t)

	m := newHarness(t, 1, nil, func(c *Config) { c.Manual = true })
	m.shards[0].commit.pending = append(m.shards[0].commit.pending, pendingAck{})
	if m.shards[0].commit.lingerGroup() {
		t.Fatal("a manual shard lingered")
	}
	m.shards[0].commit.pending = nil
}

// When the store's journal starts a new file, a shard that commits nothing
// more still syncs its partitions whose records are in the old one: its
// pump takes the journal's signal (here a Manual shard's Step) and
// checkpoints, so an idle shard does not keep old journal files alive.
func TestJournalIdleShardCheckpointsOnNewFile(t *testing.T) {
	mem := vfs.NewMem()
	store, err := partition.NewFileStore(partition.FileConfig{Dir: "/data", FS: mem, SerialSyncs: true, JournalFileSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	r := newJournalRunOn(t, store, true)
	for i := range groupParts {
		r.add(fmt.Sprint("t", i))
	}
	idle := r.h.shards[0] // it commits first in a round: its records are in the older file
	for _, s := range r.h.shards {
		for s.Step() { // drain the signals of files started so far
		}
	}
	r.round(0) // direct
	r.round(1) // journaled: each shard's write starts a new file
	segOf := func(ns metadata.Namespace) string {
		b, err := vfs.ReadFile(mem.Crash(), "/data/streams/"+strconv.FormatUint(uint64(ns.Stream()), 10)+"/topics/"+
			strconv.FormatUint(uint64(ns.Topic()), 10)+"/partitions/"+strconv.FormatUint(uint64(ns.Partition()), 10)+"/00000000000000000000.log")
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	var mine []metadata.Namespace
	for _, ns := range r.nss {
		if r.owner(ns) == idle {
			mine = append(mine, ns)
			if strings.Contains(segOf(ns), payloadOf(ns, r.parts[ns], 1)) {
				t.Fatalf("%v: round 1 is in the partition's own file before any checkpoint: nothing to test", ns)
			}
		}
	}
	if len(mine) == 0 {
		t.Fatal("the idle shard owns no partition")
	}
	if !idle.Step() {
		t.Fatal("the idle shard had nothing to do after the journal started a new file")
	}
	for _, ns := range mine {
		if !strings.Contains(segOf(ns), payloadOf(ns, r.parts[ns], 1)) {
			t.Fatalf("%v: round 1 is not in the partition's own file after the shard's checkpoint", ns)
		}
	}
	checkLogs(t, mem.Crash(), r.acks, r.parts, "power loss after the checkpoint")
}

// A partition whose topic leaves FsyncAlways leaves the journal: its
// records acknowledged through the journal are synced into its own files
// at once, so the journal keeps no copy of appends no commit will carry.
func TestJournalLeavingFsyncAlwaysSyncs(t *testing.T) {
	mem := vfs.NewMem()
	r := newJournalRun(t, mem)
	ns := r.add("t")
	r.round(0) // direct
	r.round(1) // journaled
	seg := func() string {
		b, err := vfs.ReadFile(mem.Crash(), "/data/streams/"+strconv.FormatUint(uint64(ns.Stream()), 10)+"/topics/"+
			strconv.FormatUint(uint64(ns.Topic()), 10)+"/partitions/"+strconv.FormatUint(uint64(ns.Partition()), 10)+"/00000000000000000000.log")
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if strings.Contains(seg(), payloadOf(ns, r.parts[ns], 1)) {
		t.Fatal("round 1 is in the partition's own file before it left FsyncAlways: nothing to test")
	}
	if err := r.h.step(r.owner(ns), opSetDurability(ns, Durability{Fsync: metadata.FsyncNever})); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(seg(), payloadOf(ns, r.parts[ns], 1)) {
		t.Fatal("round 1, acknowledged through the journal, is not in the partition's own file after it left FsyncAlways")
	}
}
