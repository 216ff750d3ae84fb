package host

import (
	"fmt"

	"github.com/parkway-io/parkway/internal/dedupe"
	"github.com/parkway-io/parkway/internal/replica"
	"github.com/parkway-io/parkway/metadata"
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
