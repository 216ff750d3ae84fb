package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/parkway-io/parkway/internal/replica"
	"github.com/parkway-io/parkway/internal/wal"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/shard"
)

const verifyUsage = `usage: parkway verify [flags] DIR

Reads every segment record, index and time index entry, consumer offset,
journal, metadata log and snapshot, and raft log of the data directory
DIR, checking checksums and offsets with the node's own code, and prints
each problem as

  FILE:BYTE: what is wrong (what a node opening the directory does about it)

with FILE relative to DIR and BYTE the byte offset in it. Nothing is
changed: torn tails a node would truncate are reported, not repaired.
Progress goes to stderr: a live line on a terminal, plain lines otherwise.

Exit codes: 0 nothing wrong; 1 problems found; 2 usage error; 3 DIR cannot
be read (missing, not a parkway data directory, permission denied, held by
a running node without --force).
`

// verifier collects the problems of one verify run.
type verifier struct {
	d        *dataDir
	stdout   io.Writer
	problems int
	node     uint64
}

func runVerify(args []string, stdout, stderr io.Writer) error {
	f := newFlags("verify", verifyUsage, stderr)
	force := f.Bool("force", false, "read a directory a running node holds (the data may be moving)")
	progress := f.String("progress", "auto", "progress on stderr: auto (a live line on a terminal, plain lines otherwise), plain, or none")
	node := f.Uint64("node", 0, "in a cluster member's directory, the member's node id (default: the one its identity file records): also report partitions placed on it whose directory is missing")
	pos, err := f.parse(args, stdout)
	if err != nil {
		return err
	}
	dir, err := oneDir("verify", pos)
	if err != nil {
		return err
	}
	mode, err := progressMode(*progress, stderr)
	if err != nil {
		return err
	}
	d, err := openDataDir(dir, *force, stderr)
	if err != nil {
		return err
	}
	defer d.close()
	total := dirBytes(dir)
	p := startProgress(stderr, mode, d.read, total)
	if *node == 0 {
		*node = d.node() // the identity file's, when it records one
	}
	v := &verifier{d: d, stdout: stdout, node: *node}
	files := v.run()
	p.stop()
	elapsed := p.elapsed()
	if v.problems > 0 {
		fmt.Fprintf(stdout, "%d problem(s) found in %s (%d files, %s read in %s)\n", v.problems, dir, files, formatBytes(d.read.Load()), elapsed.Round(time.Millisecond))
		return &exitError{code: exitProblems, err: errQuiet}
	}
	fmt.Fprintf(stdout, "ok: %s verified (%d files, %s read in %s)\n", dir, files, formatBytes(d.read.Load()), elapsed.Round(time.Millisecond))
	return nil
}

// report prints one problem.
func (v *verifier) report(path string, off int64, err error, repair string) {
	v.problems++
	msg := fmt.Sprintf("%s:%d: %v", v.d.rel(path), off, err)
	if repair != "" {
		msg += " (" + repair + ")"
	}
	fmt.Fprintln(v.stdout, msg)
}

// reportErr prints an error from a reader, at the file and byte it names
// (fallback otherwise).
func (v *verifier) reportErr(fallback string, err error, repair string) {
	path, off := locate(err, fallback)
	v.report(path, off, describe(err), repair)
}

// describe is what an error says beyond the file and byte that locate
// finds in it.
func describe(err error) error {
	var pe *partition.CorruptError
	if errors.As(err, &pe) && pe.Path != "" && pe.Err != nil {
		return pe.Err
	}
	var we *wal.CorruptError
	if errors.As(err, &we) {
		if we.Err != nil {
			return we.Err
		}
		return errors.New("damaged record followed by valid records (a torn write cannot do that: the node refuses the log)")
	}
	return err
}

// locate finds the file and byte offset an error names.
func locate(err error, fallback string) (string, int64) {
	var pe *partition.CorruptError
	if errors.As(err, &pe) && pe.Path != "" {
		return pe.Path, pe.Offset
	}
	var we *wal.CorruptError
	if errors.As(err, &we) {
		return we.Path, we.Offset
	}
	var de *metadata.DecodeError
	if errors.As(err, &de) {
		return fallback, int64(de.Offset)
	}
	var pathErr *fs.PathError
	if errors.As(err, &pathErr) {
		return pathErr.Path, 0
	}
	return fallback, 0
}

// run verifies everything and returns how many files it read.
func (v *verifier) run() int {
	d := v.d
	files := 0
	if d.identityErr != nil {
		v.reportErr(filepath.Join(d.path, identityName), d.identityErr, "a node refuses to open the directory")
	} else if d.identity != nil {
		files++
	}
	meta, ok := v.verifyMetadata()
	files += ok
	jfiles, problems, err := d.store.VerifyJournals()
	if err != nil {
		v.reportErr(filepath.Join(d.path, journalDir), err, "")
	}
	for _, p := range problems {
		v.report(p.Path, p.Offset, describe(p.Err), p.Repair)
	}
	present := make(map[uint64]bool, len(jfiles))
	for _, jf := range jfiles {
		files++
		present[jf.Seq] = true
		if jf.Records == 0 {
			continue
		}
		fmt.Fprintf(v.stdout, "note: %s holds %d records (in %d entries) that a node opening the directory replays into the partitions whose files lack them\n", d.rel(jf.Path), jf.Records, jf.Entries)
	}
	stored, err := d.store.List()
	if err != nil {
		v.reportErr(filepath.Join(d.path, streamsDir), err, "")
		return files
	}
	have := make(map[metadata.Namespace]bool, len(stored))
	for _, st := range stored {
		have[st.NS] = true
		dir := partitionDir(d.path, st.NS)
		if d.cluster && v.lodged(dir, meta, st.NS) {
			// A replica built deferred (DESIGN behaviour 32): its raft
			// log, tagged with the metadata's incarnation, is its only
			// file until the partition needs its own; the log holds its
			// messages.
			files += countFiles(dir)
			v.verifyPartitionRaft(dir)
			continue
		}
		problems, err := d.store.VerifyPartition(st.NS)
		if err != nil {
			v.reportErr(dir, err, "")
			continue
		}
		for _, p := range problems {
			v.report(p.Path, p.Offset, describe(p.Err), p.Repair)
		}
		files += countFiles(dir)
		v.verifyPartitionRaft(dir)
		if meta == nil {
			continue
		}
		if rev, ok := meta.CreatedRevision(st.NS); !ok || (rev != st.Epoch && st.Epoch != 0) {
			why := "the metadata has no such partition"
			if ok {
				why = fmt.Sprintf("the metadata's partition is incarnation %d, the directory holds %d", rev, st.Epoch)
			}
			v.report(dir, 0, errors.New("orphan partition directory: "+why), "the node deletes it when it starts")
		}
	}
	man, err := d.store.ReadManifest()
	switch {
	case err == nil:
		files++
	case !errors.Is(err, fs.ErrNotExist):
		v.reportErr(partition.ManifestPath(d.path), err, "without it a removed partition directory or journal file cannot be told; the node writes it again when its journal next starts or drops a file, and at its next clean close")
	case len(jfiles) > 0:
		v.report(partition.ManifestPath(d.path), 0, errors.New("missing, while the journal holds files: a node writes it before it writes into a journal file"),
			"without it a removed journal file or partition directory cannot be told; the node writes it again")
	}
	// Every journal file the manifest lists was durable when it was
	// written, and is removed only after a later manifest leaves it out.
	for _, seq := range man.Journal {
		if !present[seq] {
			v.report(d.store.JournalFilePath(seq), 0,
				errors.New("journal file missing: PARTITIONS lists it as holding records the partitions' files may lack"),
				"the node opens without them: the acknowledged messages only it held are lost")
		}
	}
	recorded := man.Partitions
	if meta != nil {
		for _, pi := range meta.Snapshot().Partitions {
			if have[pi.NS] {
				continue
			}
			if d.cluster && (v.node == 0 || !slices.Contains(metadata.NodesOf(pi.Replicas), v.node)) {
				continue // another node's replica, or this node's id is not known
			}
			// The manifest says this incarnation had a directory; unless
			// the journal rebuilds it (its layout was not durable yet when
			// the manifest was written), it was removed.
			built := recorded[pi.NS] == pi.CreatedRevision
			if !d.cluster && v.deferred(meta, pi, built) {
				continue
			}
			repair := "the node builds it again, empty"
			if d.cluster {
				repair = "the node builds the replica again, empty and with no raft state: its votes and log are forgotten"
			}
			why := ""
			if built {
				why = " (PARTITIONS records that it had one)"
			}
			v.report(partitionDir(d.path, pi.NS), 0,
				fmt.Errorf("partition %v (incarnation %d) is in the metadata but its directory is missing%s", pi.NS, pi.CreatedRevision, why),
				repair)
		}
	}
	return files
}

// deferred reports whether partition pi of a single node, whose directory
// is missing, is one the node builds again without losing a record: a
// FsyncAlways or FsyncInterval partition lives in the node's journal until
// it needs files (DESIGN behaviour 32, FileStore.BuildDeferred), and the
// node's replay rebuilds it from the journal's fresh entries; with no
// entry of it in the journal it is an empty deferred partition. What is
// reported instead: a journal whose entries of it the replay skips (they
// were written once its directory was durable, so it had files), and a
// topic configured FsyncNever, whose partitions get files when built.
//
// built says the manifest (PARTITIONS, see partition.Manifest) records
// that the partition had a directory: then a journal without its records
// does not make it an empty deferred one, it was removed. The manifest
// is written whenever the journal starts or drops a file and at a clean
// close, so a directory built since the last one still has its records
// in the journal, and a journal file removed behind the node's back is
// one the manifest lists. What cannot be told from the directory: a
// partition whose first durable write was a consumer offset (it got
// files with no journal record) after the last manifest, and one of a
// topic on the node's default policy (FsyncDefault), which this tool does
// not know, when that default is FsyncNever.
func (v *verifier) deferred(meta *metadata.Store, pi metadata.PartitionInfo, built bool) bool {
	if neverSynced(meta, pi.NS) {
		return false
	}
	dir := partitionDir(v.d.path, pi.NS)
	t, err := v.d.store.JournalTail(pi.NS, 0)
	switch {
	case err != nil:
		v.reportErr(filepath.Join(v.d.path, journalDir), err, "")
		return true // the journal's problem, reported; the directory's follows from it
	case t.Entries == 0 && built:
		return false // it had a directory, and nothing rebuilds it
	case t.Entries == 0:
		fmt.Fprintf(v.stdout, "note: %s has no directory and the journal holds no record of partition %v: the node builds it empty, as a partition with no record yet lives (a lost directory whose records the journal no longer holds looks the same)\n", v.d.rel(dir), pi.NS)
		return true
	case t.Rebuild && t.Epoch == pi.CreatedRevision:
		fmt.Fprintf(v.stdout, "note: %s has no directory: the node builds partition %v from the %d records the journal holds of it\n", v.d.rel(dir), pi.NS, len(t.Messages))
		return true
	}
	v.report(dir, 0,
		fmt.Errorf("partition %v (incarnation %d) is in the metadata but its directory is missing, and the journal's %d entries of it are not enough to rebuild it", pi.NS, pi.CreatedRevision, t.Entries),
		"the node builds it again, empty, and skips the journal's records of it")
	return true
}

// verifyMetadata checks the metadata log and snapshots (single node) or
// the metadata group's raft log (cluster member), and returns the store
// they hold (nil if it could not be loaded) and the files read.
func (v *verifier) verifyMetadata() (*metadata.Store, int) {
	d := v.d
	if d.cluster {
		path := filepath.Join(d.path, metaRaftDir, metaRaftLog)
		if !v.verifyRaftLog(path, "the metadata group's") {
			return nil, 1
		}
		meta, _, err := d.loadMetadata()
		if err != nil {
			v.reportErr(path, err, "")
			return nil, 1
		}
		return meta, 1
	}
	dir := filepath.Join(d.path, metaDir)
	meta, files, err := d.loadMetadata()
	for _, s := range files.durable.Skipped {
		path, off := locate(s.Err, s.Path)
		v.report(path, off, describe(s.Err), "the node falls back to an older snapshot, or none")
	}
	for _, t := range files.durable.Torn {
		v.report(t.Path, t.Offset, fmt.Errorf("torn tail: %d bytes after the last whole record", t.Size), "the node truncates them")
	}
	if err != nil {
		v.reportErr(dir, err, "")
		return nil, countFiles(dir)
	}
	return meta, countFiles(dir)
}

// verifyPartitionRaft checks a partition's raft log, which a cluster
// member's partitions have.
// lodged reports whether dir, the directory of a cluster's partition
// ns, holds a replica built deferred: a raft log tagged with the
// incarnation the metadata names, and none of the partition's own files
// (not even its incarnation file).
func (v *verifier) lodged(dir string, meta *metadata.Store, ns metadata.Namespace) bool {
	if meta == nil {
		return false
	}
	rev, ok := meta.CreatedRevision(ns)
	if !ok {
		return false
	}
	names, err := v.d.fsys.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, n := range names {
		if n != partRaftName && n != filepath.Base(replica.MarkName(partRaftName)) {
			return false
		}
	}
	l, err := shard.RaftLogOf(v.d.fsys, dir)
	return err == nil && l.Tagged && l.Incarnation == rev
}

func (v *verifier) verifyPartitionRaft(dir string) {
	if q := filepath.Join(dir, shard.RaftRefusedName); v.d.cluster {
		if _, err := v.d.fsys.Stat(q); err == nil {
			// Refused before (shard.RefuseRaftLog): no build takes this
			// copy again, whatever its raft log reads now.
			v.report(q, 0, errors.New("raft log refused as damaged and set aside"),
				"the node builds no replica from this copy: it waits for the replica's re-seed from its peers, which sets the copy aside")
			return
		}
	}
	path := filepath.Join(dir, partRaftName)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		if v.d.cluster {
			v.report(path, 0, errors.New("raft log missing"), "the node starts the replica with no raft state: its votes and log are forgotten")
		}
		return
	}
	v.verifyRaftLog(path, "the partition's")
}

// verifyRaftLog reads a raft log as a restarting member does; it reports
// whether the log could be read.
func (v *verifier) verifyRaftLog(path, whose string) bool {
	disk, err := replica.ReadDisk(v.d.fsys, path)
	if err != nil {
		repair := ""
		if errors.Is(err, fs.ErrNotExist) {
			err = fmt.Errorf("%s raft log is missing", whose)
			repair = "the node starts the member with no raft state: its votes and log are forgotten"
		}
		v.reportErr(path, err, repair)
		return false
	}
	defer disk.Close()
	if off, n := disk.TornTail(); n > 0 {
		v.report(path, off, fmt.Errorf("torn tail: %d bytes after the last whole record", n), "the node truncates them")
	}
	if slack := disk.MarkSlack(); slack != "" {
		v.report(replica.MarkName(path), 0, fmt.Errorf("sync mark: %s", slack), "the node reads the valid slot and writes the other next (a file not of its size: written whole again)")
	}
	if st := disk.Recovered().State(); st.Term == 0 && st.SnapshotIndex == 0 && st.LastIndex == 0 {
		v.report(path, 0, fmt.Errorf("%s raft log holds no state", whose), "the node starts the member afresh: its votes and log are forgotten")
	}
	return true
}

// partitionDir is a partition's directory under the data directory.
func partitionDir(root string, ns metadata.Namespace) string {
	return filepath.Join(root, streamsDir, fmt.Sprint(ns.Stream()), "topics", fmt.Sprint(ns.Topic()), "partitions", fmt.Sprint(ns.Partition()))
}

// dirBytes is the size of every regular file under dir (what verify
// reads, about), for progress.
func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() {
			if fi, err := e.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// countFiles counts the regular files under dir.
func countFiles(dir string) int {
	n := 0
	_ = filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() {
			n++
		}
		return nil
	})
	return n
}
