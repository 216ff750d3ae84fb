package sim

import (
	"testing"
	"time"
)

// Convergence at quiescence counts a replica only while it runs and has
// applied its group's log as far as the others: a write that adds no
// message (a consumer offset) leaves every replica's message count
// equal, and a replica that is down, failed or rebuilding from a log
// whose commit index it has yet to learn again (a commit index is not
// synced) holds the message count it had. Cluster seed 7179, with a
// proposal restarting its group's quiescence count: n5's replica applied
// a consumer offset, lost it in a crash, failed on a full disk before it
// re-learned the commit and was rebuilt only once settling had counted
// its calm rounds of one tick each; the final reads found it without the
// offset its peers held (invariant 3), three ticks after its rebuild.
func TestConvergedCountsOnlyRunningAppliedReplicas(t *testing.T) {
	const seed = 3
	c := newSim(Config{Seed: seed, Nodes: 3, Steps: 300}.withDefaults())
	release := seedRaftRand(seed, &c.actions)
	defer release()
	c.guard(c.run)
	defer c.guard(c.close)
	if c.viol != nil {
		t.Fatalf("fault-free run: %v", c.viol)
	}
	if diff := c.converged(); diff != "" {
		t.Fatalf("a settled fault-free run has not converged: %s", diff)
	}
	ps := c.nodes[0].meta.Snapshot().Partitions
	if len(ps) == 0 {
		t.Fatal("the run created no partition")
	}
	n := c.replicasOf(ps[0])[0]
	c.crashHow(n, true, time.Second, time.Second)
	if diff := c.converged(); diff == "" {
		t.Fatalf("n%d, which holds a replica of %v, is down, and the cluster counts as converged", n.id, ps[0].NS)
	}
	c.restart(n)
	if c.viol != nil {
		t.Fatal(c.viol)
	}
	if diff := c.converged(); diff == "" {
		t.Fatalf("n%d restarted, its replica not built yet, and the cluster counts as converged", n.id)
	}
	// Rebuilt after a power loss, the replica holds every message (a
	// produce's entry is synced before it is acknowledged) but not the
	// commit index of the entries after them: the leader teaches it.
	nn := c.node(n.id)
	for i := range nn.shards {
		c.reconcile(nn, i)
	}
	if diff := c.converged(); diff == "" {
		t.Fatalf("n%d's replica rebuilt short of its group's commit index, and the cluster counts as converged", n.id)
	} else {
		t.Log(diff)
	}
	if !c.settle() {
		t.Fatalf("no quiescence after n%d's restart: %v", n.id, c.viol)
	}
	if diff := c.converged(); diff != "" {
		t.Fatalf("settled after n%d's restart, not converged: %s", n.id, diff)
	}
}
