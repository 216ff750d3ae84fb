package host

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/parkway-io/parkway/internal/replica"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/shard"
	"github.com/parkway-io/parkway/transport"
)

// Message kinds on the transport. They are the wire protocol between
// nodes: never renumber them.
const (
	KindPartitionRaft uint8 = iota + 1
	KindMetaRaft
	KindRequest
	KindReply
	KindCatchUp
	// KindLiveness is a node's heartbeat to a peer (liveness.go): one per
	// node pair per interval, with no payload.
	KindLiveness
	// KindPartitionRaftBatch carries several partition raft messages for
	// one peer (raftbatch.go).
	KindPartitionRaftBatch
	// KindLease renews a group member's lease at the metadata leader,
	// which answers with KindLeaseReply (grouplease.go).
	KindLease
	KindLeaseReply
	// KindProbe asks the node a request was forwarded to whether it still
	// holds it (the request's id in Group, no payload); KindProbeReply
	// answers with one byte, 1 if it does (forward.go).
	KindProbe
	KindProbeReply
)

// clusterNode is the replicated side of an engine: the metadata group
// member, the transport endpoint, and forwarding.
type clusterNode struct {
	e     *Engine
	cfg   Cluster
	peers []uint64
	bus   transport.Bus

	meta *metaGroup
	live *liveness
	// metaLog is the metadata group's raft log ("": in memory).
	metaLog string
	// metaStoreConfig configures the node's metadata store.
	metaStoreConfig metadata.Config

	reqID   atomic.Uint64 // the last request id issued (newClusterNode)
	mu      sync.Mutex
	waiting map[uint64]awaited // forwarded requests awaiting replies
	// leaseWaits are the lease renewal messages awaiting answers, out
	// the renewals waiting to be sent (grouplease.go).
	leaseWaits map[uint64]chan LeaseResult
	out        *leaseOutbox
	// fwd bounds the forwarded requests this node holds for its peers.
	fwd *forwardBudget
	// watching are the forwarded waiting polls awaiting replies, by
	// partition and request id: told when the partition's leader moves
	// or the node they went to is declared dead (forward.go).
	watching map[metadata.Namespace]map[uint64]*forwardWatch
	// hints are the learnt leaders of partitions held elsewhere
	// (leaderhint.go).
	hints leaderHints

	// applied fires after every metadata command, configuration change
	// or snapshot this node applies, and whenever raftApplied moves:
	// membership calls and lease renewals wait on it (membership.go).
	applied *appliedSignal
	// appliedIndex is the index of the metadata command or snapshot this
	// node applied last. raftApplied is its member's raft applied index,
	// which also counts the entries that carry no command (a new leader's
	// empty entry, a learner's promotion): a leader's read index may be
	// one of those, and only raftApplied is sure to reach it before the
	// next command commits (published by publishApplied).
	appliedIndex atomic.Uint64
	raftApplied  atomic.Uint64

	// Data directory incarnations (identity.go): dirs records the peers'
	// (on disk with a DataDir, in memory without), beat is what this
	// node's heartbeats announce (nil without a DataDir: a node that
	// keeps nothing has nothing to vouch for), refused the peers whose
	// traffic is dropped, each with the incarnation refused (copied on
	// write, read by the receiver without a lock).
	dirs    *dataDir
	beat    []byte
	refused atomic.Pointer[map[uint64]uint64]
}

func newClusterNode(e *Engine) (*clusterNode, error) {
	cfg := *e.cfg.Cluster
	peers := make([]uint64, len(cfg.Peers))
	for i, p := range cfg.Peers {
		peers[i] = uint64(p)
	}
	c := &clusterNode{e: e, cfg: cfg, peers: peers, bus: cfg.Bus,
		waiting: make(map[uint64]awaited), applied: newAppliedSignal(), dirs: e.ident,
		fwd:      newForwardBudget(cfg.MaxForwardedPeerBytes, cfg.MaxForwardedBytes),
		watching: make(map[metadata.Namespace]map[uint64]*forwardWatch), out: newLeaseOutbox()}
	if c.dirs == nil {
		c.dirs = &dataDir{}
	} else {
		c.beat = binary.LittleEndian.AppendUint64(nil, c.dirs.incarnation())
	}
	c.live = newLiveness(c)
	// Request ids (forwarded requests, lease renewals) count up from a
	// random base on every start: a peer may still answer a request of
	// this node's earlier life, and its reply must find no request of
	// this life waiting under the same id (taken for a produce's answer,
	// it acknowledged an offset that holds another message).
	base, err := replica.IDBase()
	if err != nil {
		return nil, fmt.Errorf("parkway: request id base: %w", err)
	}
	c.reqID.Store(base)
	return c, nil
}

// openMetadata opens the metadata group (its raft log under dir, or in
// memory when dir is empty) and builds the node's store from it.
func (c *clusterNode) openMetadata(dir string, mcfg metadata.Config) error {
	c.metaStoreConfig = mcfg
	var disk *replica.Disk
	if dir != "" {
		c.metaLog = filepath.Join(dir, "raft.log")
		var err error
		if disk, err = c.openMetaDisk(); err != nil {
			return err
		}
	}
	m, err := openMetaGroup(c, disk, mcfg)
	if err != nil {
		if disk != nil {
			_ = disk.Close()
		}
		return err
	}
	c.meta = m
	c.e.meta = m.store
	return nil
}

// openMetaDisk opens the metadata group's raft log.
func (c *clusterNode) openMetaDisk() (*replica.Disk, error) {
	disk, err := replica.OpenDisk(c.e.cfg.FS, c.metaLog, true)
	if err != nil {
		return nil, fmt.Errorf("open metadata raft log: %w", err)
	}
	// The metadata log is always synced, commit included: its store
	// decides which partitions are orphans at the next start, and a
	// member reopened in place resumes applying after what its store
	// holds (metaGroup.reopen), which the log must have committed.
	disk.SyncCommit()
	return disk, nil
}

// campaignFirst makes the first listed peer campaign at once: a
// deterministic first leader, no election wait.
func (c *clusterNode) campaignFirst() {
	if !c.cfg.Join && c.cfg.Peers[0] == c.cfg.ID {
		c.meta.elect.Stand(c.meta)
	}
}

func (c *clusterNode) close() error {
	var err error
	if c.meta != nil {
		err = c.meta.close()
	}
	return errors.Join(err, c.bus.Close())
}

// send puts one message on the transport. Every node-to-node message
// leaves through here; a message the transport refuses is lost, which
// raft (and the forwarding timeout) repair.
func (c *clusterNode) send(to uint64, kind uint8, group uint64, payload []byte) error {
	return c.bus.Send(transport.Message{To: transport.NodeID(to), Kind: kind, Group: group, Payload: payload})
}

// sendRaft is the shards' transport for partition raft messages: the
// incarnation travels with every message (behaviour 20).
func (c *clusterNode) sendRaft(to uint64, ns metadata.Namespace, epoch uint64, m *raftpb.Message) {
	if payload, err := appendRaft(binary.LittleEndian.AppendUint64(make([]byte, 0, 8+proto.Size(m)), epoch), m); err == nil {
		_ = c.send(to, KindPartitionRaft, uint64(ns), payload)
	}
}

// sendCatchUp is the shards' transport for partition catch-up traffic,
// with the incarnation, like sendRaft.
func (c *clusterNode) sendCatchUp(to uint64, ns metadata.Namespace, epoch uint64, data []byte) {
	payload := binary.LittleEndian.AppendUint64(make([]byte, 0, 8+len(data)), epoch)
	_ = c.send(to, KindCatchUp, uint64(ns), append(payload, data...))
}

func appendRaft(b []byte, m *raftpb.Message) ([]byte, error) {
	return proto.MarshalOptions{}.MarshalAppend(b, m)
}

// receive is the transport receiver of a started engine.
func (c *clusterNode) receive(ctx context.Context) {
	recv := c.bus.Recv()
	rec, _ := c.bus.(transport.Recycler)
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-recv:
			if !ok {
				return
			}
			c.e.deliver(ctx, m)
			if rec != nil && payloadDone(m.Kind) {
				rec.Recycle(m.Payload)
			}
		}
	}
}

// payloadDone reports whether nothing refers to a delivered payload of
// kind once deliver returned, so the transport may reuse its bytes: raft
// messages are decoded into copies (decodeRaft never aliases its input,
// nor does proto.Unmarshal) and liveness payloads are read in place. Catch-up
// data, requests and replies are handed on as they are, so theirs are
// kept. Only the started receiver recycles: a manual engine's driver owns
// the messages it delivers.
func payloadDone(kind uint8) bool {
	switch kind {
	case KindPartitionRaft, KindPartitionRaftBatch, KindMetaRaft, KindLiveness:
		return true
	}
	return false
}

// Deliver dispatches one message the transport delivered. It never blocks
// on a shard: partition traffic goes through the router's non-blocking
// send, and a full inbox drops it (raft re-sends). A manual engine's
// caller hands it every message it takes from the endpoint; a started
// engine's receiver does the same. It reports what it could not accept
// (a malformed message, or traffic for a group this node refused).
func (e *Engine) Deliver(m transport.Message) error {
	if e.cl == nil {
		return errNotClustered
	}
	return e.deliver(e.group.Context(), m)
}

var (
	// errRefusedPeer answers a message from a peer whose data directory
	// is not the one it was a member with (see announced).
	errRefusedPeer  = errors.New("parkway: peer refused: its data directory is not the one it was a member with")
	errNotClustered = errors.New("parkway: not a cluster node")
	// ErrMalformed reports a transport message that does not decode.
	ErrMalformed = errors.New("parkway: malformed node-to-node message")
)

func (e *Engine) deliver(ctx context.Context, m transport.Message) error {
	c := e.cl
	if m.Kind == KindLiveness {
		return c.announced(uint64(m.From), m.Payload)
	}
	if c.isRefused(uint64(m.From)) {
		e.drops.Drop("peer", reasonWrongDataDir)
		return errRefusedPeer
	}
	c.live.heardFrom(uint64(m.From))
	switch m.Kind {
	case KindPartitionRaft, KindCatchUp:
		if len(m.Payload) < 8 {
			return fmt.Errorf("%w: kind %d without its incarnation", ErrMalformed, m.Kind)
		}
		ns := metadata.Namespace(m.Group)
		epoch := binary.LittleEndian.Uint64(m.Payload)
		var req *shard.Request
		if m.Kind == KindPartitionRaft {
			in := &inboundRaft{}
			if err := decodeRaft(&in.box, m.Payload[8:]); err != nil {
				return fmt.Errorf("%w: partition raft message: %w", ErrMalformed, err)
			}
			in.req = shard.Request{Op: shard.OpRaft, NS: ns, Epoch: epoch, Raft: &in.box.msg, Peer: uint64(m.From)}
			req = &in.req
		} else {
			req = &shard.Request{Op: shard.OpCatchUp, NS: ns, Epoch: epoch, Payload: m.Payload[8:], Peer: uint64(m.From)}
		}
		if _, err := e.router.Send(ns, shard.Frame{Req: req}); err != nil {
			e.countSendFailure(req, err)
			return err
		}
		return nil
	case KindPartitionRaftBatch:
		return e.deliverRaftBatch(uint64(m.From), m.Payload)
	case KindLease, KindLeaseReply:
		return c.deliverLease(uint64(m.From), m.Kind, m.Payload)
	case KindMetaRaft:
		box := &raftBox{}
		if err := decodeRaft(box, m.Payload); err != nil {
			return fmt.Errorf("%w: metadata raft message: %w", ErrMalformed, err)
		}
		return c.meta.recv(&box.msg)
	case KindRequest:
		// Held until answered: charged first, answered at once when over
		// budget; a copy the network delivered twice is served once.
		n, sum := forwardCharge(len(m.Payload)), c.fwd.digest(m.Payload)
		switch c.fwd.admit(uint64(m.From), m.Group, sum, n) {
		case admitDuplicate:
			return nil
		case admitOverBudget:
			err := fmt.Errorf("%w: node %d holds its bound of forwarded requests", shard.ErrRetry, c.cfg.ID)
			_ = c.send(uint64(m.From), KindReply, m.Group, EncodeResponse(shard.Response{Err: err}))
			return nil
		}
		if e.cfg.Manual {
			c.serveManual(m, sum, n)
			return nil
		}
		e.group.Go(func(ctx context.Context) {
			defer c.fwd.release(uint64(m.From), m.Group, sum, n)
			c.serveRemote(ctx, m)
		})
		return nil
	case KindProbe:
		held := byte(0)
		if c.fwd.holds(uint64(m.From), m.Group) {
			held = 1
		}
		_ = c.send(uint64(m.From), KindProbeReply, m.Group, []byte{held})
		return nil
	case KindProbeReply:
		if len(m.Payload) != 1 || m.Payload[0] > 1 {
			return fmt.Errorf("%w: probe reply of %d bytes", ErrMalformed, len(m.Payload))
		}
		c.mu.Lock()
		w, ok := c.waiting[m.Group]
		if ok && w.to == uint64(m.From) {
			// One writer (this receiver), so once the stale news is
			// taken the send cannot block.
			select {
			case <-w.probe:
			default:
			}
			w.probe <- m.Payload[0] == 1
			signal(w.arrived)
		}
		c.mu.Unlock()
		return nil
	case KindReply:
		c.mu.Lock()
		w, ok := c.waiting[m.Group]
		if ok && w.to == uint64(m.From) {
			// Only the node asked answers: another peer's reply with the
			// same id is dropped, not taken for the answer.
			delete(c.waiting, m.Group)
		}
		c.mu.Unlock()
		if ok && w.to == uint64(m.From) {
			w.ch <- m.Payload
			signal(w.arrived)
		}
		return nil
	default:
		return fmt.Errorf("%w: kind %d", ErrMalformed, m.Kind)
	}
}

// ForwardTimeout is how long a forwarded request waits for its answer
// before its node is asked whether it still holds it (forward), and
// bounds one metadata proposal: several election timeouts, so a dead
// leader is replaced before the retry.
func (e *Engine) ForwardTimeout() time.Duration {
	if e.cl == nil {
		return 0
	}
	return 50 * e.cl.cfg.TickInterval
}

// minForwardRate is the slowest node-to-node rate the forward timeout
// allows for: a forwarded batch crosses the network about three times
// (to the leader, to the followers, the reply is small) before it is
// answered.
const minForwardRate = 16 << 20 // bytes per second

// transferTime is the extra wait a forwarded request of n bytes gets.
func transferTime(n int) time.Duration {
	return time.Duration(3 * int64(n) * int64(time.Second) / minForwardRate)
}

// serveRemote runs a forwarded request on this node's owner shard, once,
// and replies. It does not forward again: a request that reaches a node
// that no longer leads is answered "not leader" and the client follows the
// new hint.
func (c *clusterNode) serveRemote(ctx context.Context, m transport.Message) {
	req, err := DecodeRequest(m.Payload, c.e.cfg.Clock.Now())
	var r shard.Response
	if err != nil {
		r = shard.Response{Err: err}
	} else {
		r = c.e.Once(ctx, req)
	}
	_ = c.send(uint64(m.From), KindReply, m.Group, EncodeResponse(r))
}

// serveManual is serveRemote for a manual engine: the request is queued
// on its owner shard and the reply sent when the caller's steps answer it
// (PumpReplies). n is what the request holds of the forward budget,
// released with its reply.
func (c *clusterNode) serveManual(m transport.Message, sum uint64, n int64) {
	req, err := DecodeRequest(m.Payload, c.e.cfg.Clock.Now())
	if err != nil {
		_ = c.send(uint64(m.From), KindReply, m.Group, EncodeResponse(shard.Response{Err: err}))
		c.fwd.release(uint64(m.From), m.Group, sum, n)
		return
	}
	reply := make(chan shard.Response, 1)
	if _, err := c.e.router.Send(req.NS, shard.Frame{Req: req, Reply: reply}); err != nil {
		c.e.countSendFailure(req, err)
		_ = c.send(uint64(m.From), KindReply, m.Group, EncodeResponse(shard.Response{Err: fmt.Errorf("%w: %w", shard.ErrRetry, err)}))
		c.fwd.release(uint64(m.From), m.Group, sum, n)
		return
	}
	c.meta.served = append(c.meta.served, served{to: uint64(m.From), id: m.Group, reply: reply, sum: sum, n: n})
}

// served is a forwarded request a manual engine queued on a shard, with
// the bytes it holds of the forward budget.
type served struct {
	to, id, sum uint64
	reply       chan shard.Response
	n           int64
}

// PumpReplies sends the replies of forwarded requests a manual engine's
// shards have answered since the last call. A started engine replies as
// soon as each is answered.
func (e *Engine) PumpReplies() {
	if e.cl == nil {
		return
	}
	m := e.cl.meta
	keep := m.served[:0]
	for _, s := range m.served {
		select {
		case r := <-s.reply:
			_ = e.cl.send(s.to, KindReply, s.id, EncodeResponse(r))
			e.cl.fwd.release(s.to, s.id, s.sum, s.n)
		default:
			keep = append(keep, s)
		}
	}
	clear(m.served[len(keep):])
	m.served = keep
}

// newProducerID draws this node incarnation's producer id for
// deduplicating its metadata proposals.
func newProducerID() uint64 { return rand.Uint64() | 1 }
