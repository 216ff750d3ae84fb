package sim

import (
	"testing"

	"github.com/parkway-io/parkway/vfs/errorfs"
)

// A calm ends every fault, the liar's lies of the running disk included:
// armed before the calm, a misdirected write, a read error or a flip on
// read would otherwise fire in it, on a survivor whose replica the
// failover check counts on. Cluster seed 1265, with a proposal
// restarting its group's quiescence count: a misdirected write armed a
// second before the judged deaf spell hit the campaigner's first write
// of its new term (its raft log's sync mark), the replica failed and
// waited out its build backoff, and the group, its leader deaf, had no
// majority to elect with before the check (invariant 8).
func TestCalmEndsTheLiarsRunningLies(t *testing.T) {
	for _, how := range []string{"deaf", "crash"} {
		c := newSim(DefaultClusterConfig(1265).withDefaults())
		if c.lies == nil {
			t.Fatal("the cluster has no liar")
		}
		name := dataDir + "/streams/0/topics/0/partitions/1/raft.log.mark"
		c.lies.mis, c.lies.misPath = errorfs.OnIndex(0, &errorfs.MisdirectedWrite{Delta: -987}, errorfs.OpWriteAt), name
		c.lies.sectors.Add(name, 0, 64)
		c.lies.flips.Add(name, 8, 1)
		c.lies.readFaults = true
		switch how {
		case "deaf":
			if !c.quietForDeaf() {
				t.Fatal("no quiet before a deaf spell started")
			}
		case "crash":
			c.calm(&node{b: c, id: 1}, nil, nil, false) // n1 crashed
		}
		c.lies.only = nil
		for _, op := range []errorfs.Op{
			{Kind: errorfs.OpWriteAt, Path: name, Off: 0, Len: 32},
			{Kind: errorfs.OpReadAt, Path: name, Off: 0, Len: 32},
		} {
			fired := 0
			err := c.lies.maybeLie(op, func(int, errorfs.Op) { fired++ })
			if err != nil || fired != 0 {
				t.Fatalf("%s calm: a lie armed before it fired on %v in it: %v (fired %d)", how, op.Kind, err, fired)
			}
		}
	}
}
