package replica

import (
	"errors"
	"io/fs"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/parkway-io/parkway/vfs"
)

// TestReadDisk reads back what a Disk saved without changing it, reports
// a torn tail, does not create a missing log, and summarises the state.
func TestReadDisk(t *testing.T) {
	fsys := vfs.NewMem()
	d, err := OpenDisk(fsys, "/g/raft.log", true)
	if err != nil {
		t.Fatal(err)
	}
	snap := &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: new(uint64(1)), Term: new(uint64(1)),
		ConfState: &raftpb.ConfState{Voters: []uint64{1, 2}}}}
	ents := []*raftpb.Entry{{Index: new(uint64(2)), Term: new(uint64(2)), Data: []byte("12345678payload")}}
	if err := d.Save(snap, ents, &raftpb.HardState{Term: new(uint64(2)), Vote: new(uint64(1)), Commit: new(uint64(2))}); err != nil {
		t.Fatal(err)
	}
	d.Close()
	before, _ := vfs.ReadFile(fsys, "/g/raft.log")

	r, err := ReadDisk(vfs.ReadOnly(fsys), "/g/raft.log")
	if err != nil {
		t.Fatal(err)
	}
	st := r.Recovered().State()
	if st.Term != 2 || st.Vote != 1 || st.Commit != 2 || st.SnapshotIndex != 1 || st.LastIndex != 2 || len(st.Voters) != 2 {
		t.Fatalf("State = %+v", st)
	}
	var payloads []string
	if err := r.Recovered().CommittedEntries(func(index, id uint64, payload []byte, conf bool) error {
		payloads = append(payloads, string(payload))
		return nil
	}); err != nil || len(payloads) != 1 || payloads[0] != "payload" {
		t.Fatalf("CommittedEntries: %q, %v", payloads, err)
	}
	if err := r.Save(nil, ents, nil); err == nil {
		t.Fatal("Save on a read-only Disk succeeded")
	}
	r.Close()
	if after, _ := vfs.ReadFile(fsys, "/g/raft.log"); string(after) != string(before) {
		t.Fatal("ReadDisk changed the log")
	}

	if _, err := ReadDisk(fsys, "/g/missing.log"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ReadDisk of a missing log: %v", err)
	}
	if _, err := fsys.Stat("/g/missing.log"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("ReadDisk created the missing log")
	}
}
