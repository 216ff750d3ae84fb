package parkway

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/internal/backoff"
	"github.com/parkway-io/parkway/metadata"
)

// Stream is a handle on one incarnation of a stream: its id, the revision
// of the commit that created it, and its name. Ids are reused after a
// delete (the lowest free one first), so the id alone cannot tell a stream
// from the one that replaced it; the revision can. CreateStream and the
// lookups return handles; every call that acts on a stream takes one, and
// a handle whose stream was deleted is refused with ErrStreamNotFound
// (wrapping ErrStaleHandle), even when a new stream took its id.
//
// A handle also names its origin: the cluster (ClusterConfig.ClusterID)
// or, for a single node, its data directory (or, without one, the Node).
// A handle used on a node of another origin is refused with
// ErrStaleHandle even when a stream or topic there has the same ids and
// revision — two fresh nodes that run the same creations do. Two clusters
// without a ClusterID are told apart by the names the handle carries.
//
// A Stream is a plain comparable value: two handles are equal exactly when
// they name the same incarnation.
type Stream struct {
	ID uint32
	// Revision is the stream's committed created revision: its
	// incarnation.
	Revision uint64
	Name     string

	origin uint64 // the node's or cluster's (Node.origin)
}

// String returns the stream's name, id and incarnation.
func (s Stream) String() string {
	return fmt.Sprintf("stream %q (id %d, revision %d)", s.Name, s.ID, s.Revision)
}

// Topic is a handle on one incarnation of a topic of one incarnation of a
// stream. CreateTopic and the lookups return handles; Produce, Poll, the
// offset calls and the topic's admin calls take one. A request made with a
// handle whose topic was deleted is refused with ErrTopicNotFound
// (wrapping ErrStaleHandle) — wherever it is parked or forwarded, it never
// lands in a topic that reused the ids.
type Topic struct {
	Stream Stream
	ID     uint32
	// Revision is the topic's committed created revision: its
	// incarnation. Revisions are global to the node's (or cluster's)
	// metadata, so it names the topic alone.
	Revision uint64
	Name     string
}

// String returns the topic's name, ids and incarnation.
func (t Topic) String() string {
	return fmt.Sprintf("topic %q (stream %q, ids %d/%d, revision %d)", t.Name, t.Stream.Name, t.Stream.ID, t.ID, t.Revision)
}

func (n *Node) streamHandle(info metadata.StreamInfo) Stream {
	return Stream{ID: info.ID, Revision: info.CreatedRevision, Name: info.Name, origin: n.origin}
}

func topicHandle(s Stream, info metadata.TopicInfo) Topic {
	return Topic{Stream: s, ID: info.ID, Revision: info.CreatedRevision, Name: info.Name}
}

// checkHandle refuses the zero handle and hand-made ones that no lookup
// could have returned: revision 0 is never a created revision.
func checkStream(s Stream) error {
	if s.Revision == 0 {
		return fmt.Errorf("%w: %v is not a handle from CreateStream or a lookup", ErrInvalidArgument, s)
	}
	return nil
}

func checkTopic(t Topic) error {
	if err := checkStream(t.Stream); err != nil {
		return err
	}
	if t.Revision == 0 || t.Revision < t.Stream.Revision {
		return fmt.Errorf("%w: %v is not a handle from CreateTopic or a lookup", ErrInvalidArgument, t)
	}
	return nil
}

// caughtUp waits, in a cluster, until this node's metadata has applied
// revision rev: a handle created through another node names a revision
// this one may not have applied yet. Past rev, the committed state says
// for certain whether the handle's incarnation still exists. On a single
// node every handle's revision is already applied.
//
// The wait is one metadata read barrier, not the caller's deadline: once
// the node has applied everything the group had committed when the call
// began, a handle whose revision is still ahead names a revision the
// cluster never committed (a forged handle, or one from another cluster
// or from before a data loss) and never will for that incarnation. ahead
// reports it; the caller refuses the handle as stale.
func (n *Node) caughtUp(ctx context.Context, rev uint64) (ahead bool, err error) {
	if !n.eng.Clustered() || n.meta.Revision() >= rev {
		return false, nil
	}
	dctx, cancel := n.deadline(ctx)
	defer cancel()
	if err := n.eng.ReadBarrier(dctx); err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		return false, err
	}
	return n.meta.Revision() < rev, nil
}

// aheadOf is the answer to a handle whose revision the cluster has not
// reached: stale, and revision names what this node has applied.
func (n *Node) aheadOf(notFound error, what fmt.Stringer) error {
	return fmt.Errorf("%w: %w: %v is ahead of the cluster's committed metadata (revision %d)",
		notFound, ErrStaleHandle, what, n.meta.Revision())
}

// liveStream checks s against the committed metadata (caught up to it).
func (n *Node) liveStream(ctx context.Context, s Stream) error {
	if err := checkStream(s); err != nil {
		return err
	}
	if ahead, err := n.caughtUp(ctx, s.Revision); err != nil || ahead {
		if ahead {
			return n.aheadOf(ErrStreamNotFound, s)
		}
		return err
	}
	return n.streamAlive(s)
}

func (n *Node) streamAlive(s Stream) error {
	if s.origin != n.origin {
		return n.foreign(ErrStreamNotFound, s)
	}
	info, ok := n.meta.Stream(s.ID)
	if !ok || info.CreatedRevision != s.Revision || info.Name != s.Name {
		return fmt.Errorf("%w: %w: %v", ErrStreamNotFound, ErrStaleHandle, s)
	}
	return nil
}

// foreign is the answer to a handle of another origin (see Stream).
func (n *Node) foreign(notFound error, what fmt.Stringer) error {
	return fmt.Errorf("%w: %w: %v was not obtained from this node's cluster or data directory", notFound, ErrStaleHandle, what)
}

// originOf is what a node's handles name as their origin: its cluster's
// id, or a single node's data directory incarnation (or, in memory, a
// random id: nothing outlives the Node). Never 0, the origin of a handle
// made by hand.
func originOf(eng *host.Engine, cfg host.Config) uint64 {
	if cfg.Cluster != nil {
		h := fnv.New64a()
		_, _ = h.Write([]byte(cfg.Cluster.ClusterID))
		return h.Sum64() | 1
	}
	if inc, ok := eng.DirIncarnation(); ok {
		return inc | 1
	}
	return rand.Uint64() | 1
}

// topicInfo checks t against the committed metadata (caught up to it) and
// returns the topic's committed state.
func (n *Node) topicInfo(ctx context.Context, t Topic) (metadata.TopicInfo, error) {
	if err := checkTopic(t); err != nil {
		return metadata.TopicInfo{}, err
	}
	if err := n.topicCaughtUp(ctx, t); err != nil {
		return metadata.TopicInfo{}, err
	}
	return n.topicAlive(t)
}

// topicCaughtUp is caughtUp for a topic handle: a stream revision the
// cluster has not reached makes the stream the stale part.
func (n *Node) topicCaughtUp(ctx context.Context, t Topic) error {
	ahead, err := n.caughtUp(ctx, t.Revision)
	switch {
	case err != nil:
		return err
	case !ahead:
		return nil
	case n.meta.Revision() < t.Stream.Revision:
		return n.aheadOf(ErrStreamNotFound, t.Stream)
	}
	return n.aheadOf(ErrTopicNotFound, t)
}

func (n *Node) topicAlive(t Topic) (metadata.TopicInfo, error) {
	if t.Stream.origin != n.origin {
		return metadata.TopicInfo{}, n.foreign(ErrTopicNotFound, t)
	}
	info, ok := n.meta.Topic(t.Stream.ID, t.ID)
	if ok && info.CreatedRevision == t.Revision && info.Name == t.Name {
		return info, nil
	}
	if err := n.streamAlive(t.Stream); err != nil {
		return metadata.TopicInfo{}, err
	}
	return metadata.TopicInfo{}, fmt.Errorf("%w: %w: %v", ErrTopicNotFound, ErrStaleHandle, t)
}

// resolve turns a handle and a partition id into the partition's namespace
// and incarnation, or a typed error: not found when the topic's
// incarnation is gone, ErrPartitionNotFound when the topic lives but has
// no such partition. The partition is read before the topic is checked:
// incarnations only move forward, so a topic still at the handle's
// revision after the partition was read proves the partition read belongs
// to it (a delete and recreate in between would show as a newer topic
// revision).
//
// Every produce resolves, so the common case — this node's handle, its
// topic live and caught up to, the partition there — is one read of the
// store (LivePartition); anything else takes the checks one by one, which
// wait for the metadata to catch up and name what failed.
func (n *Node) resolve(ctx context.Context, t Topic, part uint32) (metadata.Namespace, uint64, error) {
	if err := checkTopic(t); err != nil {
		return 0, 0, err
	}
	ns, err := metadata.NewNamespace(t.Stream.ID, t.ID, part)
	if err != nil {
		return 0, 0, invalid(err)
	}
	if t.Stream.origin == n.origin {
		if rev, ok := n.meta.LivePartition(ns, t.Revision, t.Name); ok {
			return ns, rev, nil
		}
	}
	return n.resolveCaughtUp(ctx, t, part, ns)
}

// resolveCaughtUp is resolve past its fast path, in a frame of its own:
// every produce resolves, and every synchronous producer's stack holds
// the deepest frames of a produce (TestSyncProduceStack).
//
//go:noinline
func (n *Node) resolveCaughtUp(ctx context.Context, t Topic, part uint32, ns metadata.Namespace) (metadata.Namespace, uint64, error) {
	if err := n.topicCaughtUp(ctx, t); err != nil {
		return 0, 0, err
	}
	p, pok := n.meta.Partition(ns)
	if _, err := n.topicAlive(t); err != nil {
		return 0, 0, err
	}
	if !pok {
		return 0, 0, fmt.Errorf("%w: %d of %v", ErrPartitionNotFound, part, t)
	}
	return ns, p.CreatedRevision, nil
}

// invalid is err as an ErrInvalidArgument, built out of its caller's
// frame (see resolveCaughtUp).
//
//go:noinline
func invalid(err error) error { return fmt.Errorf("%w: %w", ErrInvalidArgument, err) }

// awaitMetadata runs f, and in a cluster retries it while it reports a
// partition as missing: this node's metadata may lag the commit that
// created it (CreatePartitions through another node). A stale handle needs
// no wait: resolve first catches up with the handle's revision, past which
// a missing stream or topic is gone for certain. The wait is bounded by the
// request deadline; then the not-found error stands.
func (n *Node) awaitMetadata(ctx context.Context, f func() error) error {
	err := f()
	if !n.eng.Clustered() || !missing(err) {
		return err
	}
	ctx, cancel := n.deadline(ctx)
	defer cancel()
	bo := backoff.New(n.cfg.RetryBackoffMin, n.cfg.RetryBackoffMax)
	for missing(err) {
		if n.sleep(ctx, bo.Next()) != nil {
			return err
		}
		err = f()
	}
	return err
}

func missing(err error) bool {
	return errors.Is(err, ErrPartitionNotFound)
}

// resolveWait is resolve through awaitMetadata.
func (n *Node) resolveWait(ctx context.Context, t Topic, part uint32) (ns metadata.Namespace, epoch uint64, err error) {
	err = n.awaitMetadata(ctx, func() (err error) {
		ns, epoch, err = n.resolve(ctx, t, part)
		return err
	})
	return ns, epoch, err
}
