package host

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"sync"

	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/vfs"
)

// Node identity (DESIGN behaviour 27): a data directory records, when it
// is first used, the cluster and node it belongs to, and an engine
// refuses a directory of another node or cluster. It also records the
// incarnation of its contents — a random id drawn whenever the node finds
// its directory without metadata, so a directory emptied (or replaced by
// an empty one) under the same node id gets a new one — and the
// incarnations this node has seen its peers announce (liveness
// heartbeats carry them): a member that comes back with another
// incarnation has forgotten its votes and its log, and its peers refuse
// its traffic (see peerDirs) rather than let it vote or acknowledge as if
// it held data.

// identityFile is the data directory's identity, written atomically
// (vfs.WriteFileAtomic: temporary file, fsync, rename, directory fsync).
const identityFile = "IDENTITY"

// ErrWrongDataDir reports a data directory that belongs to another node
// or another cluster. A *WrongDataDirError carries it.
var ErrWrongDataDir = errors.New("parkway: data directory belongs to another node")

// WrongDataDirError reports a data directory recorded for another node
// (Node; 0 is a single node, not part of a cluster) or another cluster
// (Cluster) than the engine opening it. It matches ErrWrongDataDir.
type WrongDataDirError struct {
	Dir                       string
	WantCluster, FoundCluster string
	WantNode, FoundNode       uint64
}

func (e *WrongDataDirError) Error() string {
	return fmt.Sprintf("%v: %s holds %s, this is %s", ErrWrongDataDir, e.Dir,
		describeNode(e.FoundCluster, e.FoundNode), describeNode(e.WantCluster, e.WantNode))
}

func (e *WrongDataDirError) Unwrap() error { return ErrWrongDataDir }

func describeNode(cluster string, node uint64) string {
	if node == 0 {
		return "a single node (no cluster)"
	}
	return fmt.Sprintf("node %d of cluster %q", node, cluster)
}

// identity is what the identity file holds.
type identity struct {
	cluster string
	node    uint64 // 0: a single node
	// dir is the incarnation of the directory's contents.
	dir uint64
	// peers maps each peer to the incarnation of its directory this node
	// saw it announce (only a cluster node's).
	peers map[uint64]peerDir
}

// peerDir is a peer's directory incarnation as this node recorded it, and
// the metadata group's index this node had applied then: a membership
// change of the peer committed after that index makes the record stale
// (the peer may have left and come back with a new directory).
type peerDir struct{ inc, at uint64 }

// Identity file layout, little endian:
//
//	magic      8 bytes  "PKWYIDN1"
//	node       8 bytes
//	dir        8 bytes
//	cluster    1 byte length n (at most maxClusterName), n bytes
//	peers      4 bytes count k, k × (node 8, incarnation 8, at 8 bytes), nodes ascending
//	crc        4 bytes  CRC-32C of all the above
const (
	identityMagic  = "PKWYIDN1"
	maxClusterName = 253 // a DNS name, as transport.TLSConfig.ClusterID
	// maxIdentityPeers bounds the peer table (and the file: 24 bytes a peer).
	maxIdentityPeers = 1 << 16
)

var (
	castagnoli     = crc32.MakeTable(crc32.Castagnoli)
	errBadIdentity = errors.New("malformed identity file")
)

func (id identity) encode() []byte {
	b := make([]byte, 0, len(identityMagic)+8+8+1+len(id.cluster)+4+24*len(id.peers)+4)
	b = append(b, identityMagic...)
	b = binary.LittleEndian.AppendUint64(b, id.node)
	b = binary.LittleEndian.AppendUint64(b, id.dir)
	b = append(b, byte(len(id.cluster)))
	b = append(b, id.cluster...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(id.peers)))
	for _, p := range slices.Sorted(maps.Keys(id.peers)) {
		b = binary.LittleEndian.AppendUint64(b, p)
		b = binary.LittleEndian.AppendUint64(b, id.peers[p].inc)
		b = binary.LittleEndian.AppendUint64(b, id.peers[p].at)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// decodeIdentity decodes an identity file. Every count is checked against
// the bytes left before anything is allocated for it.
func decodeIdentity(b []byte) (identity, error) {
	const fixed = len(identityMagic) + 8 + 8 + 1
	if len(b) < fixed+4+4 {
		return identity{}, fmt.Errorf("%w: %d bytes", errBadIdentity, len(b))
	}
	body := b[:len(b)-4]
	if want, got := binary.LittleEndian.Uint32(b[len(b)-4:]), crc32.Checksum(body, castagnoli); want != got {
		return identity{}, fmt.Errorf("%w: checksum %#x, want %#x", errBadIdentity, got, want)
	}
	if string(body[:len(identityMagic)]) != identityMagic {
		return identity{}, fmt.Errorf("%w: bad magic", errBadIdentity)
	}
	id := identity{
		node: binary.LittleEndian.Uint64(body[len(identityMagic):]),
		dir:  binary.LittleEndian.Uint64(body[len(identityMagic)+8:]),
	}
	n := int(body[fixed-1])
	rest := body[fixed:]
	if n > maxClusterName || len(rest) < n+4 {
		return identity{}, fmt.Errorf("%w: cluster name of %d bytes", errBadIdentity, n)
	}
	id.cluster, rest = string(rest[:n]), rest[n:]
	k := binary.LittleEndian.Uint32(rest)
	rest = rest[4:]
	if k > maxIdentityPeers || uint64(len(rest)) != 24*uint64(k) {
		return identity{}, fmt.Errorf("%w: %d peers in %d bytes", errBadIdentity, k, len(rest))
	}
	if k > 0 {
		id.peers = make(map[uint64]peerDir, k)
	}
	last := uint64(0)
	for i := range int(k) {
		r := rest[24*i:]
		p := binary.LittleEndian.Uint64(r)
		if p <= last {
			return identity{}, fmt.Errorf("%w: peers out of order", errBadIdentity)
		}
		id.peers[p] = peerDir{inc: binary.LittleEndian.Uint64(r[8:]), at: binary.LittleEndian.Uint64(r[16:])}
		last = p
	}
	return id, nil
}

// newDirIncarnation draws a directory incarnation (never 0: 0 is "not
// announced" on the wire).
func newDirIncarnation() uint64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:])
		if v := binary.LittleEndian.Uint64(b[:]); v != 0 {
			return v
		}
	}
}

// dataDir is an engine's record of its data directory's identity. Its
// methods are safe for concurrent use: the transport receiver records
// peers' incarnations while the rest of the engine reads its own.
type dataDir struct {
	fs   vfs.FS
	path string // the identity file

	mu    sync.Mutex
	id    identity
	dirty bool // the peers changed since the last write that succeeded
}

// openIdentity checks the data directory's identity, or records it. The
// directory is fresh when the metadata this engine keeps there is missing.
func (e *Engine) openIdentity() error {
	cluster, node, meta := "", uint64(0), "metadata"
	if c := e.cfg.Cluster; c != nil {
		cluster, node, meta = c.ClusterID, uint64(c.ID), filepath.Join("metadata-raft", "raft.log")
	}
	_, err := e.cfg.FS.Stat(filepath.Join(e.cfg.DataDir, meta))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("parkway: data dir: %w", err)
	}
	e.ident, err = loadIdentity(e.cfg.FS, e.cfg.DataDir, cluster, node, err != nil)
	return err
}

// loadIdentity checks the identity recorded in dir against the engine's
// (cluster, node) and records it if there is none. fresh says the
// directory holds no metadata: its contents get a new incarnation (a
// directory emptied under a node id is not the directory it was).
func loadIdentity(fsys vfs.FS, dir, cluster string, node uint64, fresh bool) (*dataDir, error) {
	d := &dataDir{fs: fsys, path: filepath.Join(dir, identityFile)}
	b, err := vfs.ReadFile(fsys, d.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// First use, or a directory from before identities: this node's
		// from now on.
		d.id = identity{cluster: cluster, node: node, dir: newDirIncarnation()}
		return d, d.write()
	case err != nil:
		return nil, fmt.Errorf("parkway: read %s: %w", d.path, err)
	}
	if d.id, err = decodeIdentity(b); err != nil {
		return nil, &partition.CorruptError{Path: d.path, Err: err}
	}
	if d.id.cluster != cluster || d.id.node != node {
		return nil, &WrongDataDirError{Dir: dir, WantCluster: cluster, WantNode: node,
			FoundCluster: d.id.cluster, FoundNode: d.id.node}
	}
	if fresh {
		d.id.dir = newDirIncarnation()
		return d, d.write()
	}
	return d, nil
}

// write replaces the identity file with d.id. d.mu is held or d is not
// shared yet. A node without a data directory keeps its record in memory.
func (d *dataDir) write() error {
	if d.fs == nil {
		return nil
	}
	if err := vfs.WriteFileAtomic(d.fs, d.path, d.id.encode()); err != nil {
		d.dirty = true
		return fmt.Errorf("parkway: write %s: %w", d.path, err)
	}
	d.dirty = false
	return nil
}

// incarnation is the directory's content incarnation.
func (d *dataDir) incarnation() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.id.dir
}

// DirIncarnation is the incarnation of the data directory's contents: a
// random id recorded in its IDENTITY file when the directory is first
// used, and drawn again when the directory is found without metadata. A
// wrapper names what it hands out after it (package parkway's handles),
// so nothing from another directory is taken for this one's. False
// without a DataDir.
func (e *Engine) DirIncarnation() (uint64, bool) {
	if e.ident == nil {
		return 0, false
	}
	return e.ident.incarnation(), true
}

// peerAnnounced records that peer announced its directory incarnation inc
// while this node had applied the metadata group up to index at, and
// reports whether the peer must be refused: it is a member (member) and
// announced another incarnation than the one recorded, so its directory
// is not the one it voted and acknowledged with. A peer first seen, or
// not a member (joining, or removed), is recorded as it is now. The
// record is written through at once; a write that fails is retried at the
// next announcement (the record in memory holds meanwhile).
func (d *dataDir) peerAnnounced(peer, inc, at uint64, member bool) (refuse bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	prev, ok := d.id.peers[peer]
	switch {
	case ok && prev.inc == inc:
	case ok && member:
		return true
	default:
		if d.id.peers == nil {
			d.id.peers = map[uint64]peerDir{}
		}
		d.id.peers[peer] = peerDir{inc: inc, at: at}
		d.dirty = true
	}
	if d.dirty {
		_ = d.write()
	}
	return false
}

// forgetPeer drops the record of peer if it predates index, the metadata
// entry that adds or removes it: the next incarnation it announces is
// recorded afresh. all drops every record older than index (a metadata
// snapshot installed at index: the changes it covers are unknown).
func (d *dataDir) forgetPeer(peer, index uint64, all bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for p, r := range d.id.peers {
		if (all || p == peer) && r.at < index {
			delete(d.id.peers, p)
			d.dirty = true
		}
	}
	if d.dirty {
		_ = d.write()
	}
}

// reasonWrongDataDir labels the frames dropped from a refused peer.
const reasonWrongDataDir = "wrong_data_dir"

// announced takes a peer's heartbeat: a sign of life, the incarnation of
// its data directory (8 bytes, 0 or none from a node without one), and
// after it the peers it does not hear (liveness.go: 8 bytes each). A member
// that announces another incarnation than the one recorded lost what it
// held — its directory was emptied, replaced, or restored from another
// copy — but a fresh raft member would vote and acknowledge as if it
// still held its log, and a stale leader could be elected with its vote:
// acknowledged writes would be lost. So the peer is refused: its frames
// are dropped (and counted) and it is not heard from, so its groups elect
// leaders without it, until it is removed from the cluster (its record
// is forgotten at the change; it may then join again as a new node and is
// caught up from its peers) or comes back with the directory it had.
func (c *clusterNode) announced(from uint64, payload []byte) error {
	var report []byte
	switch {
	case len(payload) == 0:
	case len(payload) >= 8 && len(payload)%8 == 0:
		report = payload[8:]
		inc := binary.LittleEndian.Uint64(payload)
		if inc == 0 || from == uint64(c.cfg.ID) {
			break
		}
		member := slices.Contains(c.e.meta.Nodes(), from)
		c.setRefused(from, inc, c.dirs.peerAnnounced(from, inc, c.appliedIndex.Load(), member))
	default:
		return fmt.Errorf("%w: liveness payload of %d bytes", ErrMalformed, len(payload))
	}
	if c.isRefused(from) {
		c.e.drops.Drop("peer", reasonWrongDataDir)
		return errRefusedPeer
	}
	c.live.heardFrom(from)
	return c.live.heardReport(from, report)
}

// heartbeat is the payload of this node's heartbeats: its directory's
// incarnation (none without a DataDir), then report, the peers it does
// not hear — behind an incarnation of 0 if it has none to announce.
func (c *clusterNode) heartbeat(report []byte) []byte {
	if len(report) == 0 {
		return c.beat
	}
	b := c.beat
	if len(b) == 0 {
		b = make([]byte, 8)
	}
	return append(slices.Clip(b), report...)
}

func (c *clusterNode) isRefused(peer uint64) bool {
	r := c.refused.Load()
	if r == nil {
		return false
	}
	_, ok := (*r)[peer]
	return ok
}

// setRefused refuses peer's incarnation inc, or admits the peer again.
// Only the receiver calls it (a manual engine's driver, or the started
// engine's receive goroutine), so copy-on-write needs no lock.
func (c *clusterNode) setRefused(peer, inc uint64, refuse bool) {
	old := c.refused.Load()
	if !refuse && !c.isRefused(peer) {
		return
	}
	if refuse && old != nil && (*old)[peer] == inc {
		return
	}
	next := map[uint64]uint64{}
	if old != nil {
		next = maps.Clone(*old)
	}
	if refuse {
		next[peer] = inc
		c.e.cfg.Logger.Error("peer refused: it announced a data directory other than the one it was a member with "+
			"(emptied, replaced or restored from another copy); its traffic is dropped until it is removed from the cluster "+
			"(RemoveNode through a member) or comes back with its own directory", "peer", peer, "incarnation", inc)
	} else {
		delete(next, peer)
		c.e.cfg.Logger.Info("peer admitted again", "peer", peer)
	}
	c.refused.Store(&next)
}
