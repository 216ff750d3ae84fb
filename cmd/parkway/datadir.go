package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/parkway-io/parkway/host"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/router"
	"github.com/parkway-io/parkway/vfs"
)

// The layout of a data directory, as the node writes it.
const (
	lockName     = "LOCK"          // held (flock) by a running node
	identityName = "IDENTITY"      // the cluster and node that use the directory
	metaDir      = "metadata"      // a single node's metadata log and snapshots
	metaRaftDir  = "metadata-raft" // a cluster node's metadata group raft log
	metaRaftLog  = "raft.log"
	streamsDir   = "streams"
	journalDir   = "journal"
	partRaftName = "raft.log" // a replicated partition's raft log, in its directory
)

// dataDir is a data directory opened for reading: its files are read
// through a read-only filesystem that counts the bytes read (for
// progress), under a shared lock on its LOCK file when it has one.
type dataDir struct {
	path    string
	cluster bool // a cluster member's (metadata-raft/), else a single node's
	fsys    vfs.FS
	read    *atomic.Int64 // bytes read so far
	store   *partition.FileStore
	unlock  func()
	// moving: a running node holds the directory (read with --force).
	moving bool
	// identity is what the directory's identity file records (nil: no
	// file), identityErr why it could not be read.
	identity    *host.DataDirIdentity
	identityErr error
}

// openDataDir opens path for reading. force reads a directory a running
// node holds; a warning is written to stderr then.
func openDataDir(path string, force bool, stderr io.Writer) (*dataDir, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, dirErr(err)
	}
	if !fi.IsDir() {
		return nil, dirErr(fmt.Errorf("%s is not a directory", path))
	}
	names, err := readDirNames(path)
	if err != nil {
		return nil, dirErr(err)
	}
	d := &dataDir{path: path, read: new(atomic.Int64)}
	has := func(n string) bool { _, ok := names[n]; return ok }
	switch {
	case has(metaRaftDir):
		d.cluster = true
	case has(metaDir), has(streamsDir):
	default:
		return nil, dirErr(fmt.Errorf("%s is not a parkway data directory (no %s/, %s/ or %s/ in it)", path, metaDir, metaRaftDir, streamsDir))
	}
	unlock, held, pid, err := lockShared(filepath.Join(path, lockName))
	if err != nil {
		return nil, dirErr(err)
	}
	if held {
		who := "a running node"
		if pid > 0 {
			who = fmt.Sprintf("a running node (pid %d)", pid)
		}
		if !force {
			return nil, dirErr(fmt.Errorf("%s is held by %s; stop it first, or pass --force to read it anyway while the data may be moving", path, who))
		}
		fmt.Fprintf(stderr, "parkway: warning: %s is held by %s: the data may be moving while it is read; expect torn tails and counts that do not add up\n", path, who)
		d.moving = true
	}
	d.unlock = unlock
	d.fsys = vfs.ReadOnly(countingFS{FS: vfs.Default, n: d.read})
	if d.store, err = partition.OpenReadOnlyStore(path, d.fsys); err != nil {
		d.unlock()
		return nil, dirErr(err)
	}
	switch id, err := host.ReadIdentity(d.fsys, path); {
	case err == nil:
		d.identity = &id
	case !errors.Is(err, fs.ErrNotExist):
		d.identityErr = err
	}
	return d, nil
}

// lockShared takes a shared lock on the data directory's LOCK file if
// there is one (a node holds it exclusively while it runs), so no node
// starts on the directory while it is read: held reports a node holding
// it, with the pid the file names (0 if unknown). The file is opened
// read-only and never created. The returned function releases the lock.
func lockShared(name string) (release func(), held bool, pid int, err error) {
	l, err := vfs.SharedLock(name)
	switch {
	case err == nil:
		return func() { _ = l.Close() }, false, 0, nil
	case errors.Is(err, fs.ErrNotExist):
		return func() {}, false, 0, nil
	case errors.Is(err, vfs.ErrLocked):
		return func() {}, true, vfs.LockHolder(vfs.ReadOnly(vfs.Default), name), nil
	}
	return nil, false, 0, fmt.Errorf("lock %s: %w", name, err)
}

// node is the node id the identity file records (0: none, or a single
// node's).
func (d *dataDir) node() uint64 {
	if d.identity == nil {
		return 0
	}
	return d.identity.Node
}

func (d *dataDir) close() {
	if d.unlock != nil {
		d.unlock()
	}
}

// readDirNames lists dir's entries.
func readDirNames(dir string) (map[string]struct{}, error) {
	es, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := make(map[string]struct{}, len(es))
	for _, e := range es {
		out[e.Name()] = struct{}{}
	}
	return out, nil
}

// metadataConfig is the store configuration for reading metadata offline:
// shard owners are recomputed with one shard (the directory does not say
// how many the node ran), which no offline command shows.
func metadataConfig() metadata.Config {
	return metadata.Config{Shards: 1, Assign: router.Assign}
}

// metadataFiles is what reading the metadata found beside the store.
type metadataFiles struct {
	durable metadata.DurableFiles // single node
}

// loadMetadata reads the directory's metadata as the node would restore
// it, changing nothing.
func (d *dataDir) loadMetadata() (*metadata.Store, metadataFiles, error) {
	if d.cluster {
		s, err := host.ReadMetadataGroup(d.fsys, filepath.Join(d.path, metaRaftDir, metaRaftLog), metadataConfig())
		return s, metadataFiles{}, err
	}
	dir := filepath.Join(d.path, metaDir)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil, metadataFiles{}, fmt.Errorf("%s is missing: a node opening this directory starts with empty metadata and deletes every partition as an orphan", dir)
	}
	s, files, err := metadata.ReadDurable(d.fsys, dir, metadataConfig())
	return s, metadataFiles{durable: files}, err
}

// rel names path relative to the data directory, for messages.
func (d *dataDir) rel(path string) string {
	if r, err := filepath.Rel(d.path, path); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return path
}

// countingFS counts the bytes read through its files.
type countingFS struct {
	vfs.FS
	n *atomic.Int64
}

type countingFile struct {
	vfs.File
	n *atomic.Int64
}

func (c countingFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := c.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return countingFile{File: f, n: c.n}, nil
}

func (f countingFile) Read(b []byte) (int, error) {
	n, err := f.File.Read(b)
	f.n.Add(int64(n))
	return n, err
}

func (f countingFile) ReadAt(b []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(b, off)
	f.n.Add(int64(n))
	return n, err
}
