// Package raftid encodes the raft id of a partition's replica: which node
// holds it and which generation of that node's replica it is.
//
// Why a replica id distinct from the node id. A replica whose raft log is
// lost or damaged must never rejoin its group under the raft id it had:
// with an empty log it may vote a second time in a term it voted in
// already, and it forgets entries it acknowledged and that a commit
// quorum counted. The safe re-seed gives the new copy a raft id its group
// never saw, as etcd's member ids and CockroachDB's replica ids do: the
// group then treats it as any newcomer (a learner sent a snapshot and the
// partition log), and messages to or from the old id are refused by the
// new replica's raft (a raft message names the id it is addressed to).
//
// Why an encoding rather than a table. The transport addresses nodes,
// and every raft message must go to the node holding its recipient. With
// the node in the id, that is arithmetic (Node), on every path that sends
// a message, without a lookup that a stale placement could get wrong.
// And the generation 0 id of a node is the node id itself, so the raft
// logs, snapshots and metadata written before replica ids existed (their
// ids are node ids) keep their meaning unchanged.
//
// The layout: the low NodeBits bits are the node id, the high bits the
// generation. Node ids are therefore bounded (CheckNode, MaxNode): every
// place that admits a node id — the cluster configuration, a metadata
// snapshot, AddNode — checks it, so no node's id can be mistaken for
// another node's replica.
package raftid

import (
	"errors"
	"fmt"
)

const (
	// NodeBits is how many low bits of a raft id hold the node id.
	NodeBits = 32
	// MaxNode is the largest node id.
	MaxNode = 1<<NodeBits - 1
	// MaxGen is the largest replica generation.
	MaxGen = 1<<(64-NodeBits) - 1
)

// ErrInvalid reports a node id or generation out of range.
var ErrInvalid = errors.New("invalid replica id")

// CheckNode reports a node id that is zero or above MaxNode.
func CheckNode(node uint64) error {
	switch {
	case node == 0:
		return fmt.Errorf("%w: node id 0", ErrInvalid)
	case node > MaxNode:
		return fmt.Errorf("%w: node id %d above %d", ErrInvalid, node, uint64(MaxNode))
	}
	return nil
}

// ID is the raft id of generation gen of node's replica. Generation 0 is
// the node id itself. It panics on a node or generation out of range:
// callers check what they take from outside (CheckNode, Check) first,
// and an id that silently named another node would send raft traffic
// to the wrong member.
func ID(node, gen uint64) uint64 {
	if err := CheckNode(node); err != nil {
		panic(err)
	}
	if gen > MaxGen {
		panic(fmt.Errorf("%w: generation %d above %d", ErrInvalid, gen, uint64(MaxGen)))
	}
	return gen<<NodeBits | node
}

// Node is the node holding the replica of raft id id.
func Node(id uint64) uint64 { return id & MaxNode }

// Gen is the generation of the replica of raft id id.
func Gen(id uint64) uint64 { return id >> NodeBits }

// Check reports a raft id that names no node (its node part is 0).
func Check(id uint64) error {
	if Node(id) == 0 {
		return fmt.Errorf("%w: raft id %#x names node 0", ErrInvalid, id)
	}
	return nil
}
