package replica_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/parkway-io/parkway/internal/replica"
	"github.com/parkway-io/parkway/internal/wal"
	"github.com/parkway-io/parkway/vfs"
)

// fuzzHandler accepts whatever a Ready hands it and drops the messages.
type fuzzHandler struct{}

func (fuzzHandler) Send(*raftpb.Message)               {}
func (fuzzHandler) Apply(uint64, uint64, []byte) error { return nil }
func (fuzzHandler) LeaderChanged(uint64)               {}
func (fuzzHandler) ApplySnapshot(uint64, []byte) error { return nil }

// drive handles every Ready and ticks the group a few times, as an owner
// does after a Step.
func drive(g *replica.Group) error {
	for range 3 {
		for g.HasReady() {
			if err := g.Handle(fuzzHandler{}); err != nil {
				return err
			}
		}
		if err := g.Tick(); err != nil {
			return err
		}
	}
	return nil
}

// fuzzLeader is member 1 of {1, 2, 3}, elected with member 2's votes,
// with one entry committed by the two of them.
func fuzzLeader(t *testing.T) *replica.Group {
	g, err := replica.New(replica.Config{Group: 1, Node: 1, Peers: []uint64{1, 2, 3}, ForwardProposals: true})
	if err != nil {
		t.Fatal(err)
	}
	steps := []func() error{
		g.Campaign,
		func() error { return g.Handle(fuzzHandler{}) },
		func() error { return g.Step(msg(raftpb.MsgPreVoteResp, 2, 1, 2)) },
		func() error { return g.Handle(fuzzHandler{}) },
		func() error { return g.Step(msg(raftpb.MsgVoteResp, 2, 1, 2)) },
		func() error { return drive(g) },
		func() error {
			_, err := g.Propose([]byte("payload"))
			return err
		},
		func() error { return drive(g) },
		func() error {
			m := msg(raftpb.MsgAppResp, 2, 1, 2)
			m.Index = new(uint64(3))
			return g.Step(m)
		},
		func() error { return drive(g) },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("leader setup step %d: %v", i, err)
		}
	}
	if !g.IsLeader() {
		t.Fatal("member 1 did not become leader")
	}
	return g
}

// FuzzStep unmarshals arbitrary bytes as a raft message and steps it into
// a fresh follower and a fresh leader: the process never panics, and a
// message the validation lets through never fails the group (raft never
// panics on it) — a failure here is a gap in the validation.
func FuzzStep(f *testing.F) {
	c, term := electedCluster(f)
	for i := range 3 {
		if _, err := c.members[1].Propose(fmt.Appendf(nil, "proposal-%d", i)); err != nil {
			f.Fatal(err)
		}
		c.settle()
	}
	c.tick(3)
	seen := map[raftpb.MessageType]int{}
	for _, m := range c.sent {
		if seen[m.GetType()]++; seen[m.GetType()] <= 3 {
			b, err := proto.Marshal(m)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	forged := []*raftpb.Message{
		snapMsg(1, 2, term+1, 100, term, &raftpb.ConfState{Voters: []uint64{1, 1, 2}}),
		snapMsg(1, 2, term+1, 100, term, &raftpb.ConfState{Voters: []uint64{1, 2, 3}}),
		msg(raftpb.MsgProp, 2, 1, 0),
		msg(raftpb.MsgReadIndex, 2, 1, 0),
		func() *raftpb.Message {
			m := msg(raftpb.MsgHeartbeat, 1, 2, term)
			m.Commit = new(uint64(1000))
			return m
		}(),
		func() *raftpb.Message {
			m := msg(raftpb.MsgAppResp, 2, 1, term)
			m.Index = new(uint64(1000))
			return m
		}(),
		func() *raftpb.Message { // a membership change, for the Dynamic member
			cc, err := proto.Marshal(&raftpb.ConfChange{Type: raftpb.ConfChangeAddNode.Enum(), NodeId: new(uint64(4))})
			if err != nil {
				f.Fatal(err)
			}
			m := msg(raftpb.MsgApp, 1, 2, term)
			m.Index, m.LogTerm = new(uint64(1)), new(uint64(1))
			m.Entries = []*raftpb.Entry{{Type: raftpb.EntryConfChange.Enum(), Index: new(uint64(2)), Term: new(term), Data: cc}}
			return m
		}(),
	}
	for _, m := range forged {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m := &raftpb.Message{}
		if proto.Unmarshal(b, m) != nil {
			return
		}
		follower, err := replica.New(replica.Config{Group: 1, Node: 2, Peers: []uint64{1, 2, 3}})
		if err != nil {
			t.Fatal(err)
		}
		defer follower.Close()
		// A member of a group whose membership changes (the metadata
		// group): membership changes in appends and snapshots with other
		// voters pass its own checks.
		dynamic, err := replica.New(replica.Config{Group: 1, Node: 2, Peers: []uint64{1, 2, 3}, Dynamic: true})
		if err != nil {
			t.Fatal(err)
		}
		defer dynamic.Close()
		leader := fuzzLeader(t)
		defer leader.Close()
		for _, g := range []*replica.Group{follower, dynamic, leader} {
			err := g.Step(m)
			if err == nil {
				err = drive(g)
			}
			if errors.Is(err, replica.ErrGroupFailed) {
				t.Fatalf("a message that passed validation failed the group: %v\n%v", err, m)
			}
		}
	})
}

// recordsOf splits fuzz input into records: each is a 2-byte length and
// that many bytes (the last one takes what is left).
func recordsOf(b []byte) [][]byte {
	var out [][]byte
	for len(b) >= 2 {
		n := int(binary.LittleEndian.Uint16(b))
		b = b[2:]
		n = min(n, len(b))
		out = append(out, b[:n])
		b = b[n:]
	}
	return out
}

// joinRecords is recordsOf's inverse.
func joinRecords(recs [][]byte) []byte {
	var b []byte
	for _, r := range recs {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(r)))
		b = append(b, r...)
	}
	return b
}

// FuzzRaftLog writes arbitrary records — each passing the log's checksum
// — as a raft log and opens a member from it: the log is refused with
// ErrCorruptLog or runs; it never panics, and raft never has to refuse
// what OpenDisk and New let through (a gap in their checks).
func FuzzRaftLog(f *testing.F) {
	// Seeds: the records of real logs.
	fsys := vfs.NewMem()
	c := newClusterOn(f, 3, fsys)
	c.settle()
	if err := c.members[1].Campaign(); err != nil {
		f.Fatal(err)
	}
	c.settle()
	for i := range 6 {
		if _, err := c.members[1].Propose(fmt.Appendf(nil, "proposal-%d", i)); err != nil {
			f.Fatal(err)
		}
		c.settle()
	}
	g := c.members[2]
	if err := g.Compact(g.Applied()-2, []byte("state")); err != nil {
		f.Fatal(err)
	}
	for id := uint64(1); id <= 3; id++ {
		path := fmt.Sprintf("/raft/%d/log", id)
		b, err := vfs.ReadFile(fsys, path)
		if err != nil {
			f.Fatal(err)
		}
		var recs [][]byte
		for len(b) >= wal.HeaderSize {
			n := int(binary.LittleEndian.Uint32(b))
			recs = append(recs, b[wal.HeaderSize:wal.HeaderSize+n])
			b = b[wal.HeaderSize+n:]
		}
		f.Add(joinRecords(recs))
		f.Add(joinRecords(recs[:len(recs)/2]))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		fsys := vfs.NewMem()
		if err := fsys.MkdirAll("/g", 0o755); err != nil {
			t.Fatal(err)
		}
		l, err := wal.Create(fsys, "/g/log", wal.Options{MaxRecordSize: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recordsOf(in) {
			if _, err := l.Append(r); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		// The tag a damaged log's valid prefix holds is read from any
		// bytes without failing, and bounded.
		if tag, err := replica.PrefixTag(fsys, "/g/log"); err != nil || len(tag) > replica.MaxTag {
			t.Fatalf("PrefixTag: %d bytes, %v", len(tag), err)
		}
		err = openGroup(fsys, "/g/log")
		switch {
		case err == nil:
		case errors.Is(err, replica.ErrCorruptLog) && !strings.Contains(err.Error(), "raft refused"):
		default:
			t.Fatalf("opening the log: %v", err)
		}
	})
}
