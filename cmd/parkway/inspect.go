package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/parkway-io/parkway/internal/replica"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
)

const inspectUsage = `usage: parkway inspect [flags] DIR

Shows what the data directory DIR holds: its streams, topics and
partitions (incarnation, start and end offsets, bytes, segments, fsync
policy, retention, replicas), named consumers' stored offsets, consumer
groups (generation, members, each partition's holder and committed
offset) and, in a cluster member's directory, the raft state of every
group (term, vote, commit index, snapshot index, last index, voters,
learners). The applied index is not kept on disk: a member applies every
committed entry when it starts, so COMMIT is what it will have applied.

It reads the directory as a node restoring it would, changing nothing:
a torn tail a node would truncate is left out of the end offset.

Exit codes: 0 ok; 1 damaged metadata kept it from being read; 2 usage
error; 3 DIR cannot be read (missing, not a parkway data directory,
permission denied, held by a running node without --force).
`

// inspection is what inspect reports (and --json prints).
type inspection struct {
	Dir     string `json:"dir"`
	Cluster bool   `json:"cluster"`
	// Moving: a running node holds the directory (read with --force).
	Moving bool `json:"moving,omitempty"`
	// Identity is what the identity file records (absent: no file).
	Identity      *identityView           `json:"identity,omitempty"`
	IdentityError string                  `json:"identity_error,omitempty"`
	Revision      uint64                  `json:"metadata_revision"`
	Nodes         []uint64                `json:"nodes,omitempty"`
	Streams       []streamView            `json:"streams"`
	Partitions    []partitionView         `json:"partitions"`
	Orphans       []partitionView         `json:"orphans,omitempty"`
	Consumers     []consumerView          `json:"consumers,omitempty"`
	Groups        []groupView             `json:"groups,omitempty"`
	Raft          []raftView              `json:"raft,omitempty"`
	Journal       []partition.JournalFile `json:"journal,omitempty"`
}

type identityView struct {
	Cluster     string            `json:"cluster,omitempty"`
	Node        uint64            `json:"node"` // 0: a single node
	Incarnation uint64            `json:"incarnation"`
	Peers       map[uint64]uint64 `json:"peers,omitempty"` // peer → its directory's incarnation
}

type streamView struct {
	ID     uint32      `json:"id"`
	Name   string      `json:"name"`
	Topics []topicView `json:"topics"`
}

type topicView struct {
	ID             uint32 `json:"id"`
	Name           string `json:"name"`
	Partitions     int    `json:"partitions"`
	Incarnation    uint64 `json:"incarnation"`
	Fsync          string `json:"fsync"`
	FsyncInterval  string `json:"fsync_interval,omitempty"`
	RetentionAge   string `json:"retention_age,omitempty"`
	RetentionBytes int64  `json:"retention_bytes,omitempty"`
	Replicas       int    `json:"replicas,omitempty"`
}

type partitionView struct {
	Stream      string        `json:"stream"`
	Topic       string        `json:"topic"`
	Partition   uint32        `json:"partition"`
	Incarnation uint64        `json:"incarnation"`
	Status      string        `json:"status"` // ok, journal, missing, orphan, or what is wrong
	Start       uint64        `json:"start"`
	End         uint64        `json:"end"`
	Bytes       int64         `json:"bytes"`
	Segments    []segmentView `json:"segments,omitempty"`
	Replicas    []uint64      `json:"replicas,omitempty"`
	Dir         string        `json:"dir"`
}

type segmentView struct {
	File string `json:"file"`
	Base uint64 `json:"base"`
	Next uint64 `json:"next"`
	Size int64  `json:"bytes"`
}

type consumerView struct {
	Stream    string `json:"stream"`
	Topic     string `json:"topic"`
	Partition uint32 `json:"partition"`
	Consumer  string `json:"consumer"`
	Offset    uint64 `json:"offset"`
}

type groupView struct {
	Stream     string           `json:"stream"`
	Topic      string           `json:"topic"`
	Name       string           `json:"name"`
	Generation uint64           `json:"generation"`
	Members    []memberView     `json:"members"`
	Partitions []groupPartition `json:"partitions"`
}

type memberView struct {
	ID   uint64 `json:"id"`
	Name string `json:"name"`
}

type groupPartition struct {
	Partition uint32  `json:"partition"`
	Holder    uint64  `json:"holder,omitempty"`
	Committed *uint64 `json:"committed,omitempty"`
}

type raftView struct {
	Group    string   `json:"group"` // "metadata" or stream/topic/partition
	Log      string   `json:"log"`
	Term     uint64   `json:"term"`
	Vote     uint64   `json:"vote"`
	Commit   uint64   `json:"commit"`
	Snapshot uint64   `json:"snapshot_index"`
	Last     uint64   `json:"last_index"`
	Voters   []uint64 `json:"voters"`
	Learners []uint64 `json:"learners,omitempty"`
	Error    string   `json:"error,omitempty"`
}

func runInspect(args []string, stdout, stderr io.Writer) error {
	f := newFlags("inspect", inspectUsage, stderr)
	force := f.Bool("force", false, "read a directory a running node holds (the data may be moving)")
	asJSON := f.Bool("json", false, "print one JSON document instead of tables")
	pos, err := f.parse(args, stdout)
	if err != nil {
		return err
	}
	dir, err := oneDir("inspect", pos)
	if err != nil {
		return err
	}
	d, err := openDataDir(dir, *force, stderr)
	if err != nil {
		return err
	}
	defer d.close()
	in, err := inspect(d)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(in)
	}
	printInspection(stdout, in)
	return nil
}

// inspect reads everything inspect shows.
func inspect(d *dataDir) (*inspection, error) {
	meta, _, err := d.loadMetadata()
	if err != nil {
		path, off := locate(err, d.path)
		return nil, problemsErr(fmt.Errorf("the metadata cannot be read (%s at byte %d): %v; run parkway verify", d.rel(path), off, describe(err)))
	}
	in := &inspection{Dir: d.path, Cluster: d.cluster, Moving: d.moving, Revision: meta.Revision(), Nodes: meta.Nodes()}
	if id := d.identity; id != nil {
		in.Identity = &identityView{Cluster: id.Cluster, Node: id.Node, Incarnation: id.Incarnation, Peers: id.Peers}
	}
	if d.identityErr != nil {
		path, off := locate(d.identityErr, filepath.Join(d.path, identityName))
		in.IdentityError = fmt.Sprintf("%s at byte %d: %v", d.rel(path), off, describe(d.identityErr))
	}
	names := map[[2]uint32][2]string{} // (stream, topic) → names
	for _, s := range meta.Streams() {
		sv := streamView{ID: s.ID, Name: s.Name}
		for _, t := range meta.Topics(s.ID) {
			c := t.Config
			tv := topicView{ID: t.ID, Name: t.Name, Partitions: t.Partitions, Incarnation: t.CreatedRevision,
				Fsync: c.Fsync.String(), RetentionBytes: c.RetentionBytes, Replicas: c.Replicas}
			if c.Fsync == metadata.FsyncInterval && c.FsyncInterval > 0 {
				tv.FsyncInterval = c.FsyncInterval.String()
			}
			if c.RetentionAge > 0 {
				tv.RetentionAge = c.RetentionAge.String()
			}
			sv.Topics = append(sv.Topics, tv)
			names[[2]uint32{s.ID, t.ID}] = [2]string{s.Name, t.Name}
			for _, g := range meta.Groups(s.ID, t.ID) {
				gv := groupView{Stream: s.Name, Topic: t.Name, Name: g.Name, Generation: g.Generation}
				for _, m := range g.Members {
					gv.Members = append(gv.Members, memberView{ID: m.ID, Name: m.Name})
				}
				for i, p := range g.Partitions {
					gp := groupPartition{Partition: uint32(i), Holder: p.Holder}
					if p.Committed {
						gp.Committed = new(p.Offset)
					}
					gv.Partitions = append(gv.Partitions, gp)
				}
				in.Groups = append(in.Groups, gv)
			}
		}
		in.Streams = append(in.Streams, sv)
	}
	nameOf := func(ns metadata.Namespace) (string, string) {
		if n, ok := names[[2]uint32{ns.Stream(), ns.Topic()}]; ok {
			return n[0], n[1]
		}
		return fmt.Sprint(ns.Stream()), fmt.Sprint(ns.Topic())
	}
	stored, err := d.store.List()
	if err != nil {
		return nil, dirErr(err)
	}
	epochs := map[metadata.Namespace]uint64{}
	for _, st := range stored {
		epochs[st.NS] = st.Epoch
	}
	if d.cluster {
		in.Raft = append(in.Raft, raftState("metadata", filepath.Join(d.path, metaRaftDir, metaRaftLog), d))
	}
	for _, pi := range meta.Snapshot().Partitions {
		sn, tn := nameOf(pi.NS)
		pv := partitionView{Stream: sn, Topic: tn, Partition: pi.Partition, Incarnation: pi.CreatedRevision,
			Replicas: metadata.NodesOf(pi.Replicas), Dir: d.rel(partitionDir(d.path, pi.NS))}
		epoch, ok := epochs[pi.NS]
		delete(epochs, pi.NS)
		switch {
		case !ok && d.cluster:
			pv.Status = "not here" // placed on other nodes, or missing
		case !ok:
			pv.Status = "missing"
			journalOnly(d, meta, pi, &pv)
		case epoch != pi.CreatedRevision:
			pv.Status = fmt.Sprintf("directory holds incarnation %d", epoch)
		default:
			consumers := readPartition(d, pi.NS, epoch, &pv)
			if pv.Status != "" && !strings.HasPrefix(pv.Status, "unreadable") && !strings.HasPrefix(pv.Status, "damaged") {
				// Records the node acknowledged through the journal and
				// replays into the files when it opens the directory.
				if t, err := d.store.JournalTail(pi.NS, pv.End); err == nil && !t.Rebuild && len(t.Messages) > 0 {
					pv.End = t.Messages[len(t.Messages)-1].Offset + 1
					pv.Status += fmt.Sprintf(" (%d records in the journal only)", len(t.Messages))
				}
			}
			for _, name := range sortedKeys(consumers) {
				in.Consumers = append(in.Consumers, consumerView{Stream: sn, Topic: tn, Partition: pi.Partition, Consumer: name, Offset: consumers[name]})
			}
			if d.cluster {
				in.Raft = append(in.Raft, raftState(fmt.Sprintf("%s/%s/%d", sn, tn, pi.Partition), filepath.Join(partitionDir(d.path, pi.NS), partRaftName), d))
			}
		}
		in.Partitions = append(in.Partitions, pv)
	}
	for _, st := range stored {
		if _, ok := epochs[st.NS]; !ok {
			continue
		}
		sn, tn := nameOf(st.NS)
		in.Orphans = append(in.Orphans, partitionView{Stream: sn, Topic: tn, Partition: st.NS.Partition(), Incarnation: st.Epoch,
			Status: "orphan: not in the metadata (a node deletes it when it starts)", Dir: d.rel(partitionDir(d.path, st.NS))})
	}
	jfiles, _, err := d.store.VerifyJournals()
	if err == nil {
		in.Journal = jfiles
	}
	return in, nil
}

// journalOnly fills in pv for a single node's partition that has no
// directory, when it lives in the node's journal (see verifier.deferred):
// status "journal", and END the end of the records the journal holds of
// it, which the node rebuilds the partition from.
func journalOnly(d *dataDir, meta *metadata.Store, pi metadata.PartitionInfo, pv *partitionView) {
	if neverSynced(meta, pi.NS) {
		return
	}
	t, err := d.store.JournalTail(pi.NS, 0)
	switch {
	case err != nil:
		pv.Status = "missing; the journal cannot be read: " + describe(err).Error()
	case t.Entries == 0:
		pv.Status = "journal" // deferred, nothing appended yet
	case t.Rebuild && t.Epoch == pi.CreatedRevision:
		pv.Status = "journal"
		if n := len(t.Messages); n > 0 {
			pv.End = t.Messages[n-1].Offset + 1
		}
	}
}

// readPartition opens one partition read-only and fills in its offsets,
// size and segments; it returns its named consumers' offsets.
func readPartition(d *dataDir, ns metadata.Namespace, epoch uint64, pv *partitionView) map[string]uint64 {
	p, err := d.store.Build(ns, epoch)
	if err != nil {
		pv.Status = "unreadable: " + describe(err).Error()
		if errors.Is(err, partition.ErrCorrupt) {
			path, off := locate(err, "")
			pv.Status = fmt.Sprintf("damaged: %s at byte %d: %v", d.rel(path), off, describe(err))
		}
		return nil
	}
	defer p.Close()
	pv.Status = "ok"
	if dm, ok := p.(partition.Damaged); ok && dm.Damage() != nil {
		// Found at open, as a node finds it: read around, writes refused
		// if it is in the last segment.
		path, off := locate(dm.Damage(), "")
		pv.Status = fmt.Sprintf("damaged: %s at byte %d: %v", d.rel(path), off, describe(dm.Damage()))
	}
	pv.Start, pv.End = p.StartOffset(), p.NextOffset()
	lay, ok := p.(partition.Layout)
	if !ok {
		return nil
	}
	segs := lay.Segments()
	for _, s := range segs {
		pv.Bytes += s.Size
		pv.Segments = append(pv.Segments, segmentView{File: filepath.Base(s.Path), Base: s.Base, Next: s.Next, Size: s.Size})
	}
	// Only the tail can hold bytes past its last whole record and still
	// open: a torn write, or damage a node treats as one.
	if n := len(segs); n > 0 {
		if fi, err := d.fsys.Stat(segs[n-1].Path); err == nil && fi.Size() > segs[n-1].Size && pv.Status == "ok" {
			pv.Status = fmt.Sprintf("ok, but %s has %d bytes after its last whole record (a node truncates them; parkway verify says why)",
				filepath.Base(segs[n-1].Path), fi.Size()-segs[n-1].Size)
		}
	}
	return lay.ConsumerOffsets()
}

// raftState reads a raft log's state.
func raftState(group, path string, d *dataDir) raftView {
	rv := raftView{Group: group, Log: d.rel(path)}
	disk, err := replica.ReadDisk(d.fsys, path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			rv.Error = "missing"
		} else {
			p, off := locate(err, path)
			rv.Error = fmt.Sprintf("%s at byte %d: %v", d.rel(p), off, describe(err))
		}
		return rv
	}
	defer disk.Close()
	st := disk.Recovered().State()
	rv.Term, rv.Vote, rv.Commit, rv.Snapshot, rv.Last = st.Term, st.Vote, st.Commit, st.SnapshotIndex, st.LastIndex
	rv.Voters, rv.Learners = st.Voters, st.Learners
	return rv
}

func sortedKeys(m map[string]uint64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// printInspection prints in as tables.
func printInspection(w io.Writer, in *inspection) {
	kind := "single node"
	if in.Cluster {
		kind = "cluster member"
		if len(in.Nodes) > 0 {
			kind += fmt.Sprintf(" (cluster nodes %v)", in.Nodes)
		}
	}
	fmt.Fprintf(w, "data directory %s: %s, metadata revision %d\n", in.Dir, kind, in.Revision)
	switch id := in.Identity; {
	case in.IdentityError != "":
		fmt.Fprintf(w, "identity: damaged (%s): a node refuses this directory\n", in.IdentityError)
	case id != nil && id.Node != 0:
		fmt.Fprintf(w, "identity: node %d of cluster %q, contents incarnation %#x, %d peers recorded\n", id.Node, id.Cluster, id.Incarnation, len(id.Peers))
	case id != nil:
		fmt.Fprintf(w, "identity: a single node, contents incarnation %#x\n", id.Incarnation)
	}
	if in.Moving {
		fmt.Fprintln(w, "warning: a running node holds this directory: the data may be moving")
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	section := func(header string) {
		fmt.Fprintln(w)
		fmt.Fprintln(tw, header)
	}
	section("STREAM\tTOPIC\tPARTITIONS\tINCARNATION\tFSYNC\tRETENTION\tREPLICAS")
	for _, s := range in.Streams {
		if len(s.Topics) == 0 {
			fmt.Fprintf(tw, "%s\t-\t\t\t\t\t\n", s.Name)
		}
		for _, t := range s.Topics {
			fsync := t.Fsync
			if t.FsyncInterval != "" {
				fsync += " " + t.FsyncInterval
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\n", s.Name, t.Name, t.Partitions, t.Incarnation, fsync,
				retention(t.RetentionAge, t.RetentionBytes), dashIfZero(t.Replicas))
		}
	}
	tw.Flush()
	section("STREAM\tTOPIC\tPARTITION\tSTART\tEND\tBYTES\tSEGMENTS\tREPLICAS\tSTATUS")
	for _, p := range slices.Concat(in.Partitions, in.Orphans) {
		reps := "-"
		if len(p.Replicas) > 0 {
			reps = joinIDs(p.Replicas)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%d\t%s\t%s\n", p.Stream, p.Topic, p.Partition, p.Start, p.End,
			formatBytes(p.Bytes), len(p.Segments), reps, p.Status)
	}
	tw.Flush()
	if len(in.Consumers) > 0 {
		section("CONSUMER\tSTREAM\tTOPIC\tPARTITION\tOFFSET")
		for _, c := range in.Consumers {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\n", c.Consumer, c.Stream, c.Topic, c.Partition, c.Offset)
		}
		tw.Flush()
	}
	if len(in.Groups) > 0 {
		section("GROUP\tSTREAM\tTOPIC\tGENERATION\tMEMBERS\tPARTITION\tHOLDER\tCOMMITTED")
		for _, g := range in.Groups {
			var members []string
			for _, m := range g.Members {
				members = append(members, fmt.Sprintf("%d:%s", m.ID, m.Name))
			}
			ms := strings.Join(members, ",")
			if ms == "" {
				ms = "-"
			}
			for _, p := range g.Partitions {
				committed := "-"
				if p.Committed != nil {
					committed = fmt.Sprint(*p.Committed)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%s\t%s\n", g.Name, g.Stream, g.Topic, g.Generation, ms, p.Partition,
					dashIfZero(int(p.Holder)), committed)
			}
		}
		tw.Flush()
	}
	if len(in.Raft) > 0 {
		section("RAFT GROUP\tTERM\tVOTE\tCOMMIT\tSNAPSHOT\tLAST\tVOTERS\tLEARNERS\tERROR")
		for _, r := range in.Raft {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", r.Group, r.Term, r.Vote, r.Commit, r.Snapshot, r.Last,
				joinIDs(r.Voters), joinIDs(r.Learners), r.Error)
		}
		tw.Flush()
	}
	for _, j := range in.Journal {
		if j.Records == 0 {
			continue
		}
		fmt.Fprintf(w, "\njournal %s: %d records in %d entries, replayed into the partitions whose files lack them when a node opens the directory (END above counts only what the partitions' files hold)\n", j.Path, j.Records, j.Entries)
	}
}

func retention(age string, bytes int64) string {
	var parts []string
	if age != "" {
		parts = append(parts, age)
	}
	if bytes > 0 {
		parts = append(parts, formatBytes(bytes))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

func dashIfZero(n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

func joinIDs(ids []uint64) string {
	if len(ids) == 0 {
		return "-"
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	return strings.Join(s, ",")
}
