package sim

import (
	"math/rand/v2"
	"testing"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// TestArmedLieWithheldFromAPartitionNoLongerLiedTo: a lie of the running
// disk is armed on a file of a partition the liar may lie to, and meets
// the file once the partition is one it may not (a later incarnation
// placed on two nodes writes the directory now): it is withheld, and an
// armed misdirected write dropped, as pick would not choose the file now.
// Fired, it broke the group of two that the lies' rule (an honest
// majority in every group a lie touches) keeps clear of (cluster seed
// 849: invariant 3, replicas never converged).
func TestArmedLieWithheldFromAPartitionNoLongerLiedTo(t *testing.T) {
	s := &sim{base: newBase(Config{}, rand.New(rand.NewPCG(1, 2)), clock.NewManual(epoch0))}
	l := newLies(s, nil, nil, "", &FaultCounts{}, "")
	liedTo := true
	l.only = func(metadata.Namespace) bool { return liedTo }
	name := dataDir + "/streams/0/topics/0/partitions/0/raft.log"
	if !l.mayHit(name) {
		t.Fatal("a file of a partition lied to may not be hit")
	}
	l.mis, l.misPath = errorfs.OnIndex(0, &errorfs.MisdirectedWrite{Delta: 1456}, errorfs.OpWriteAt), name
	liedTo = false // the next incarnation has two replicas
	fired := 0
	err := l.maybeLie(errorfs.Op{Kind: errorfs.OpWriteAt, Path: name, Off: 46, Len: 13}, func(int, errorfs.Op) { fired++ })
	if err != nil || fired != 0 {
		t.Fatalf("the armed misdirected write fired on a partition no longer lied to: %v (fired %d)", err, fired)
	}
	if l.mis != nil {
		t.Fatal("the misdirected write is still armed")
	}
	if l.mayHit(name) {
		t.Fatal("pick may choose a file of a partition no longer lied to")
	}
}
