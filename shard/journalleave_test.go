package shard

import (
	"testing"
	"time"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/vfs"
)

// A partition whose topic leaves FsyncAlways leaves the shard's journal:
// a journaled partition holds its records behind its files until the
// journal commits them, and an FsyncInterval produce is acknowledged
// without a journal commit, so after the change a process crash (the
// page cache kept, the process's memory gone) must still find every
// acknowledged produce in the partition's files.
func TestJournalLeftWhenTopicLeavesFsyncAlways(t *testing.T) {
	mem := vfs.NewMem()
	r := newJournalRun(t, mem)
	ns := r.add("t0")
	for k := range 3 {
		r.round(k) // the first commit joins the journal, the others go through it
	}
	interval := Durability{Fsync: metadata.FsyncInterval, Interval: time.Hour}
	if err := r.h.step(r.owner(ns), opSetDurability(ns, interval)); err != nil {
		t.Fatal(err)
	}
	for k := 3; k < 6; k++ {
		r.round(k)
	}
	if len(r.acks) != 6 {
		t.Fatalf("%d produces acknowledged, want 6", len(r.acks))
	}
	checkLogs(t, mem, r.acks, r.parts, "process crash after FsyncAlways → FsyncInterval")
}
