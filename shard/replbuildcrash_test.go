package shard

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// replRounds and replPayload size the replicated-build workload: the
// first rounds fit in a deferred partition's write-behind buffer (held
// there, the raft log holding them), the later ones make it create its
// files part-way through the run.
const (
	replParts   = 2
	replRounds  = 5
	replPayload = 900
)

// replRun is one shard of a node whose partitions are replicated (a
// group of one voter, this node: every raft write is the node's own), on
// a FileStore, its partitions built deferred as the reconciler builds
// them (partition.FileStore.BuildDeferred, DESIGN behaviour 32).
type replRun struct {
	t     *testing.T
	h     *harness
	store *partition.FileStore
	dur   Durability
	parts map[metadata.Namespace]uint64
	nss   []metadata.Namespace
	acks  []ack
}

func newReplRun(t *testing.T, fsys vfs.FS, dur Durability) *replRun {
	t.Helper()
	h := newHarness(t, 1, nil, func(c *Config) {
		c.Replication = &Replication{Node: 1, Peers: []uint64{1},
			Send: func(uint64, metadata.Namespace, uint64, *raftpb.Message) {}}
	})
	r := &replRun{t: t, h: h, dur: dur, parts: map[metadata.Namespace]uint64{}}
	// As a cluster node's store: a directory holding a raft log and no
	// incarnation file is the incarnation the log's tag names.
	r.store, _ = partition.NewFileStore(partition.FileConfig{Dir: "/data", FS: fsys, SerialSyncs: true,
		OwnerIncarnation: func(fsys vfs.FS, dir string) (uint64, error) {
			l, err := RaftLogOf(fsys, dir)
			return l.Incarnation, err
		}}) // nil: the disk failed before the store opened
	return r
}

// add creates a topic and builds and inserts its partition; a failed
// build or insert is tried once more, as the reconciler retries it (the
// second build finds what the first left), then left out.
func (r *replRun) add(name string) {
	ns, epoch := r.h.topic(name)
	r.parts[ns] = epoch
	for try := 0; r.store != nil && try < 2; try++ {
		if r.insert(ns, epoch) {
			r.nss = append(r.nss, ns)
			return
		}
	}
}

func (r *replRun) insert(ns metadata.Namespace, epoch uint64) bool {
	p, err := r.store.BuildDeferred(ns, epoch)
	if err != nil {
		return false
	}
	if err := r.h.step(r.h.shards[0], opInsertOwned(p, r.dur)); err != nil {
		return false // the shard closed p
	}
	r.h.shards[0].settle() // the single voter elects itself
	return true
}

// round produces one message to every inserted partition and settles
// the shard: proposed, committed, applied and answered.
func (r *replRun) round(k int) {
	s := r.h.shards[0]
	var calls []call
	for _, ns := range r.nss {
		c := produce(ns, replPayloadOf(ns, r.parts[ns], k))
		s.handle(c.f)
		calls = append(calls, c)
	}
	s.settle()
	for i, c := range calls {
		if resp := c.answered(r.t); resp.Err == nil {
			r.acks = append(r.acks, ack{ns: r.nss[i], offset: resp.Offset, payload: string(c.f.Req.Messages[0].Payload)})
		}
	}
}

// replPayloadOf is payloadOf, padded to replPayload bytes.
func replPayloadOf(ns metadata.Namespace, epoch uint64, k int) string {
	p := payloadOf(ns, epoch, k)
	return p + "/" + strings.Repeat("x", replPayload-len(p)-1)
}

// replWorkload runs replRounds rounds over replParts new partitions;
// with closeShard the shard is closed at the end.
func replWorkload(t *testing.T, fsys vfs.FS, dur Durability, closeShard bool) *replRun {
	t.Helper()
	r := newReplRun(t, fsys, dur)
	for i := range replParts {
		r.add(fmt.Sprint("t", i))
	}
	for k := range replRounds {
		r.round(k)
	}
	if closeShard {
		_ = r.h.shards[0].Close() // a failed close is a crash's cousin: the checks tell
	}
	return r
}

// checkReplicated opens the store on fsys again, as a restarted node
// does, and rebuilds every partition of parts the same way: its raft log
// re-applies what the partition's files lack. Every acknowledged produce
// must be at its offset, and every message the log holds one produced to
// that incarnation, whole, in order.
func checkReplicated(t *testing.T, fsys vfs.FS, dur Durability, acks []ack, parts map[metadata.Namespace]uint64, names int, what string) {
	t.Helper()
	r := newReplRun(t, fsys, dur)
	if r.store == nil {
		t.Fatalf("%s: reopening the store failed", what)
	}
	for i := range names {
		ns, epoch := r.h.topic(fmt.Sprint("t", i))
		if parts[ns] != epoch {
			t.Fatalf("%s: topic t%d is %v@%d on the restart, %v@%d before", what, i, ns, epoch, ns, parts[ns])
		}
	}
	byOffset := map[metadata.Namespace]map[uint64]string{}
	for _, a := range acks {
		if byOffset[a.ns] == nil {
			byOffset[a.ns] = map[uint64]string{}
		}
		byOffset[a.ns][a.offset] = a.payload
	}
	s := r.h.shards[0]
	for ns, epoch := range parts {
		p, err := r.store.BuildDeferred(ns, epoch)
		if err != nil {
			t.Fatalf("%s: rebuilding %v: %v", what, ns, err)
		}
		if err := r.h.step(s, opInsertOwned(p, dur)); err != nil {
			t.Fatalf("%s: inserting %v: %v", what, ns, err)
		}
		s.settle()
		msgs, err := p.Read(0, 1000)
		if err != nil {
			t.Fatalf("%s: reading %v: %v", what, ns, err)
		}
		last := -1
		for i, m := range msgs {
			var gotNS, gotEpoch uint64
			var k int
			if n, err := fmt.Sscanf(string(m.Payload), "%d@%d/%d/", &gotNS, &gotEpoch, &k); err != nil || n != 3 ||
				metadata.Namespace(gotNS) != ns || gotEpoch != epoch || k <= last || m.Offset != uint64(i) ||
				string(m.Payload) != replPayloadOf(ns, epoch, k) {
				t.Fatalf("%s: %v@%d offset %d holds %.40q (after round %d): not a message produced to it, in order", what, ns, epoch, m.Offset, m.Payload, last)
			}
			last = k
		}
		for off, payload := range byOffset[ns] {
			if off >= uint64(len(msgs)) || string(msgs[off].Payload) != payload {
				t.Fatalf("%s: acknowledged %.40q at %v offset %d lost (the log holds %d messages)", what, payload, ns, off, len(msgs))
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatalf("%s: closing: %v", what, err)
	}
}

// A replicated partition is built deferred (DESIGN behaviour 32): its
// first acknowledgement waits on its raft log only, its directory holds
// nothing else until its records outgrow the write-behind buffer (or a
// sync, a compaction, a close needs its files). Every mutating
// filesystem operation of a workload that builds such partitions, acks
// writes held behind, materialises the partitions part-way and closes is
// failed in turn, once (the disk fails and recovers) and from then on
// (the machine stops there); after each, a restart on what a power loss
// leaves (FsyncAlways) and on what a process crash leaves must keep every
// acknowledged produce, which the raft log re-applies to a partition
// whose files lack it.
func TestReplicatedDeferredBuildCrashAtEveryWritePoint(t *testing.T) {
	for _, tc := range []struct {
		name      string
		dur       Durability
		powerLoss bool
	}{
		{"always", always, true},
		{"interval", Durability{Fsync: metadata.FsyncInterval, Interval: 1 << 40}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewMem()
			count := errorfs.OnIndex(-1, nil)
			clean := replWorkload(t, errorfs.New(mem, count), tc.dur, true)
			if len(clean.acks) != replParts*replRounds {
				t.Fatalf("clean run acknowledged %d produces, want %d", len(clean.acks), replParts*replRounds)
			}
			checkLayoutCreated(t, mem, clean.parts)
			n := count.Count()
			t.Logf("%d write points", n)
			for i := range n {
				for _, mode := range []string{"once", "from then on"} {
					mem := vfs.NewMem()
					inj := errorfs.OnIndex(i, syscall.EIO)
					if mode == "from then on" {
						inj = errorfs.FromIndex(i, syscall.EIO)
					}
					r := replWorkload(t, errorfs.New(mem, inj), tc.dur, true)
					if !inj.Fired() {
						t.Fatalf("op %d never happened", i)
					}
					what := fmt.Sprintf("op %d failing %s, %d acknowledged", i, mode, len(r.acks))
					if tc.powerLoss {
						checkReplicated(t, mem.Crash(), tc.dur, r.acks, r.parts, replParts, "power loss: "+what)
					}
					checkReplicated(t, mem, tc.dur, r.acks, r.parts, replParts, "process crash: "+what)
				}
			}
		})
	}
}

// checkLayoutCreated checks that the clean workload's partitions did get
// their files (the write points include the deferred materialisation).
func checkLayoutCreated(t *testing.T, fsys vfs.FS, parts map[metadata.Namespace]uint64) {
	t.Helper()
	for ns := range parts {
		dir := fmt.Sprintf("/data/streams/%d/topics/%d/partitions/%d", ns.Stream(), ns.Topic(), ns.Partition())
		for _, f := range []string{"incarnation", "raft.log", "00000000000000000000.log"} {
			if _, err := fsys.Stat(dir + "/" + f); err != nil {
				t.Fatalf("%v: %s after the clean run: %v", ns, f, err)
			}
		}
	}
}

// Before its records outgrow the write-behind buffer, a replicated
// partition built deferred has its raft log in its directory and nothing
// else: no segment, no offsets directories, no incarnation file. Its
// acknowledged messages are read back from what it holds behind, and a
// power loss keeps them: the directory was durable before the raft log
// acknowledged anything, and the log re-applies them on the restart.
//
// The directories the build created are synced before the raft log's
// first fsync (the power loss below cannot tell: the in-memory
// filesystem keeps what MkdirAll makes), so they are checked in the
// order of the operations.
func TestReplicatedDeferredBuildHoldsOnlyItsRaftLog(t *testing.T) {
	mem := vfs.NewMem()
	var mu sync.Mutex
	var ops []errorfs.Op
	rec := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpSync || op.Kind == errorfs.OpSyncDir {
			mu.Lock()
			ops = append(ops, op)
			mu.Unlock()
		}
		return nil
	})
	r := newReplRun(t, errorfs.New(mem, rec), always)
	r.add("t0")
	r.round(0)
	if len(r.acks) != 1 {
		t.Fatalf("acknowledged %d produces, want 1", len(r.acks))
	}
	ns := r.nss[0]
	dir := fmt.Sprintf("/data/streams/%d/topics/%d/partitions/%d", ns.Stream(), ns.Topic(), ns.Partition())
	names, err := mem.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if n != raftLogName && n != RaftMarkName {
			t.Errorf("the partition's directory holds %s before the partition needs files: only the raft log belongs there", n)
		}
	}
	if _, err := mem.Stat(dir + "/" + raftLogName); err != nil {
		t.Fatalf("no raft log: %v", err)
	}
	synced := map[string]bool{}
	for _, op := range ops {
		if op.Kind == errorfs.OpSync && strings.HasSuffix(op.Path, "/"+raftLogName) {
			break
		}
		if op.Kind == errorfs.OpSyncDir {
			synced[op.Path] = true
		}
	}
	for d := dir; d != "/data/streams"; d = filepath.Dir(d) {
		if !synced[filepath.Dir(d)] {
			t.Errorf("%s, which the build created, is not durable in %s before the raft log's first fsync", d, filepath.Dir(d))
		}
	}
	crashed := mem.Crash()
	if _, err := crashed.Stat(dir + "/" + raftLogName); err != nil {
		t.Fatalf("the raft log did not survive the power loss (its directory was not durable): %v", err)
	}
	checkReplicated(t, crashed, always, r.acks, r.parts, 1, "power loss")
}
