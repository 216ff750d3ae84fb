package host

import (
	"fmt"
	"path/filepath"

	"github.com/parkway-io/parkway/internal/dedupe"
	"github.com/parkway-io/parkway/internal/replica"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/vfs"
)

// ReadMetadataGroup rebuilds the metadata store a cluster node would start
// from out of the metadata group's raft log at path (under a data
// directory, metadata-raft/raft.log), without changing a byte: the log is
// read as a restarted member reads it (the same validation and the same
// refusals), and the store is the log's snapshot with every committed
// command after it applied through the code a member applies them with,
// deduplication included. Offline tools use it; a running node's store
// may be ahead of what its log held when it was read.
func ReadMetadataGroup(fsys vfs.FS, path string, mcfg metadata.Config) (*metadata.Store, error) {
	disk, err := replica.ReadDisk(fsys, path)
	if err != nil {
		return nil, err
	}
	defer disk.Close()
	rec := disk.Recovered()
	seen := dedupe.New[MetadataResult](metaDedupeWindow)
	store, err := metadata.NewStore(mcfg)
	if data := rec.Snapshot.GetData(); len(data) > 0 && err == nil {
		var snap metadata.StoreSnapshot
		if snap, err = decodeMetaSnapshot(seen, data); err == nil {
			store, err = metadata.Restore(mcfg, snap)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%s: metadata snapshot: %w", path, err)
	}
	err = rec.CommittedEntries(func(_, _ uint64, payload []byte, _ bool) error {
		applyMetaCommand(store, seen, payload)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return store, nil
}

// DataDirIdentity is what a data directory's identity file records (see
// DESIGN behaviour 27): the cluster and node that first used it, the
// incarnation of its contents, and the incarnations this node recorded
// for its peers' directories.
type DataDirIdentity struct {
	Cluster string
	// Node is the node id; 0 for a single node.
	Node uint64
	// Incarnation is the directory contents' incarnation.
	Incarnation uint64
	// Peers maps each peer to the incarnation of its directory this node
	// recorded.
	Peers map[uint64]uint64
}

// ReadIdentity reads the identity recorded in the data directory dir
// with the decoder a node opening it uses, changing nothing. A missing
// file matches fs.ErrNotExist (a directory never opened by a node that
// records identities); a damaged one, which a node refuses, is a
// *partition.CorruptError naming it.
func ReadIdentity(fsys vfs.FS, dir string) (DataDirIdentity, error) {
	path := filepath.Join(dir, identityFile)
	b, err := vfs.ReadFile(fsys, path)
	if err != nil {
		return DataDirIdentity{}, err
	}
	id, err := decodeIdentity(b)
	if err != nil {
		return DataDirIdentity{}, &partition.CorruptError{Path: path, Err: err}
	}
	out := DataDirIdentity{Cluster: id.cluster, Node: id.node, Incarnation: id.dir}
	if len(id.peers) > 0 {
		out.Peers = make(map[uint64]uint64, len(id.peers))
		for p, d := range id.peers {
			out.Peers[p] = d.inc
		}
	}
	return out, nil
}
