package sim

import (
	"errors"
	"fmt"
	"math"
	"path"
	"strconv"
	"strings"
	"syscall"

	"github.com/parkway-io/parkway/internal/replica"
	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/partition"
	"github.com/parkway-io/parkway/shard"
	"github.com/parkway-io/parkway/vfs"
	"github.com/parkway-io/parkway/vfs/errorfs"
)

// Disks that lie (DESIGN behaviour 28), single-node mode. FaultRates.Lie
// is the chance per scheduler step of one of six faults after which the
// disk reports success and the data is wrong; each is aimed at a file of
// the data directory outside the metadata log, chosen at random:
//
//   - while the node is down (the fault is a power loss, then the damage,
//     then the restart): a bit flipped in the stored bytes
//     (errorfs.FlipStored), the file cut short (errorfs.TruncateStored),
//     or the file rolled back to a copy saved, synced, at an earlier power
//     loss (errorfs.SaveCopy, Copy.Restore);
//   - while it runs: one of the next few writes of the file lands up to
//     8 KiB away and reports success (errorfs.MisdirectedWrite), every read
//     of a few bytes of it fails with EIO (errorfs.Sectors, a latent sector
//     error) or returns one bit flipped (errorfs.Flips). The read faults
//     last until quiescence.
//
// A single node has no other copy, so the invariant is detection: an
// acknowledged message is read intact at its offset, or its read fails
// with a typed error (a *partition.CorruptError, or EIO for a read that
// met a bad sector); never a wrong payload, never an offset handed out
// twice, never a message missing from a read that succeeded. The damage
// is allowed only in the incarnations a lie touched (lieKeys; a file
// outside every partition directory, as the journal is, excuses every
// incarnation), and their histories are left out of the linearizability
// check, since reads stop below damage by design.

// Lie kinds (FaultRates.LieKinds selects some).
const (
	lieFlipStored = iota
	lieTruncate
	lieRollback
	lieMisdirect
	lieReadError
	lieFlipOnRead
	lieKinds
)

// LieKind names one kind of lie, for FaultRates.LieKinds.
type LieKind uint

// The lie kinds, as FaultRates.LieKinds bits.
const (
	LieFlipStored LieKind = 1 << lieFlipStored
	LieTruncate   LieKind = 1 << lieTruncate
	LieRollback   LieKind = 1 << lieRollback
	LieMisdirect  LieKind = 1 << lieMisdirect
	LieReadError  LieKind = 1 << lieReadError
	LieFlipOnRead LieKind = 1 << lieFlipOnRead
)

// LieKindList lists every lie kind, with its name.
var LieKindList = []struct {
	Kind LieKind
	Name string
}{
	{LieFlipStored, "flip stored"}, {LieTruncate, "truncate"}, {LieRollback, "rollback"},
	{LieMisdirect, "misdirected write"}, {LieReadError, "read error"}, {LieFlipOnRead, "flip on read"},
}

var lieNames = [lieKinds]string{"flip stored", "truncate", "rollback", "misdirected write", "read error", "flip on read"}

// lies is a node's lying-disk state, kept across restarts (the read
// faults are the disk's, not the process's).
type lies struct {
	// only, if set, says which partitions' files may be hit (the
	// cluster's: those where the liar is a minority of the replicas).
	only    func(ns metadata.Namespace) bool
	sectors *errorfs.Sectors
	flips   *errorfs.Flips
	// mis, when armed, misdirects one of the next writes to misPath.
	mis     *errorfs.Index
	misPath string
	// saved are copies of files taken right after power losses, when
	// only synced bytes remain: earlier synced copies to roll back to,
	// with the incarnation whose directory held each (epoch 0 for a file
	// outside the partition directories).
	saved []savedCopy
	// keys are the incarnations whose data a lie touched, with the kinds
	// of file touched (fileClass); all is set when one touched a file
	// outside every partition directory (the journal).
	keys map[incKey]map[string]bool
	all  bool
	// dirs are the partitions whose directory a lie touched: a later
	// incarnation of the namespace may find the damage too (a damaged
	// incarnation record cannot say whose directory it is, so it is
	// kept, and blocks the next incarnation's build with the error).
	dirs map[metadata.Namespace]bool
	// bases are the base names of the files a lie touched, per
	// partition directory (which names the known limit a stuck copy is
	// in).
	bases map[metadata.Namespace]map[string]bool
	// points are where lies hit the segments of each incarnation: the
	// file, the byte (for a truncation or a rollback, -1) and the kind.
	points map[incKey][]liePoint
	// readFaults is set while the read faults may fire.
	readFaults bool
	// journalWindow: a lie hit a journal file at or past the end its
	// synced-end mark recorded (the documented window: the journal's
	// last synced write, which the mark records only with the next one);
	// misdirected are the journal writes misdirected since the last
	// crash, judged against the mark the crash leaves (settleJournal).
	journalWindow bool
	misdirected   []liePoint
	// raftCut are the incarnations whose raft log (on the liar) a lie
	// cut or rolled back below the size its sync mark recorded (which
	// the mark reports), and raftHidden those of them whose mark a later
	// lie rolled back to an older copy recording less before any build
	// refused the cut log on disk (raftMarkHit): the log and its mark
	// rolled back together, which no mark catches
	// (knownRaftLogMarkRollback).
	raftCut, raftHidden map[incKey]bool

	// The liar's place in the run: the run's RNG, trace and violations
	// (b), the disk that lies (mem: the node's current one, which a power
	// loss replaces), the metadata that names the incarnation a
	// partition directory holds, the directory no lie reaches (the
	// metadata log's), where lies are counted, and the node's name in the
	// trace ("" on a single node).
	b      *sim
	mem    func() *vfs.MemFS
	meta   func() *metadata.Store
	skip   string
	counts *FaultCounts
	who    string
}

func newLies(b *sim, mem func() *vfs.MemFS, meta func() *metadata.Store, skip string, counts *FaultCounts, who string) *lies {
	return &lies{sectors: errorfs.NewSectors(), flips: errorfs.NewFlips(), keys: map[incKey]map[string]bool{}, dirs: map[metadata.Namespace]bool{}, points: map[incKey][]liePoint{},
		b: b, mem: mem, meta: meta, skip: skip, counts: counts, who: who}
}

// event records a trace event, naming the liar in a cluster.
func (l *lies) event(format string, args ...any) int64 {
	return l.b.event(l.who+format, args...)
}

// savedCopy is a saved copy of a file and the incarnation it belonged to.
type savedCopy struct {
	errorfs.Copy
	epoch uint64
}

// epochOf is the incarnation committed for the partition directory
// holding name, 0 for a file outside them (or one of no committed
// partition).
func (l *lies) epochOf(name string) uint64 {
	ns, ok := nsOfPath(name)
	if !ok {
		return 0
	}
	rev, _ := l.dirEpoch(ns, name)
	return rev
}

// dirEpoch is the incarnation whose directory holds name, a file of
// partition ns: the one its incarnation file names (read from the disk
// directly, past every fault), else the one committed. A partition being
// reopened may be an older incarnation than the committed one.
func (l *lies) dirEpoch(ns metadata.Namespace, name string) (uint64, bool) {
	// "", "data", "streams", s, "topics", t, "partitions", p: nsOfPath
	// checked the shape.
	dir := strings.Join(strings.Split(name, "/")[:8], "/")
	// Only a whole record (its newline read) names it: a file a lie cut
	// short may still start with digits, of another epoch (seed 1008:
	// "51 …" cut to "5").
	if b, err := vfs.ReadFile(l.mem(), path.Join(dir, "incarnation")); err == nil && strings.HasSuffix(string(b), "\n") {
		if f := strings.Fields(string(b)); len(f) > 0 {
			if epoch, err := strconv.ParseUint(f[0], 10, 64); err == nil {
				return epoch, true
			}
		}
	}
	return l.meta().CreatedRevision(ns)
}

// liePoint is where a lie hit a segment file.
type liePoint struct {
	name string
	off  int64
}

// maxSaved bounds the saved copies.
const maxSaved = 8

// lieInjector is the lying part of a node's injector: the read faults,
// then the armed misdirected write. fired is told of each lie that took
// effect, with the operation it changed.
func (l *lies) maybeLie(op errorfs.Op, fired func(kind int, op errorfs.Op)) error {
	if !l.mayHit(op.Path) {
		// Armed while its partition was lied to, the lie meets a file
		// of one that is not (a later incarnation placed on fewer than
		// three nodes now writes the directory): withheld, as pick
		// would not have chosen the file now. A misdirected write armed
		// for it is dropped. Cluster seed 849 fired one, armed under a
		// three-replica incarnation, into the next one's raft log of a
		// group of two, which no honest majority can repair.
		if l.mis != nil && op.Path == l.misPath {
			l.mis = nil
			l.event("lie misdirected write withheld: %s is no longer lied to", op.Path)
		}
		return nil
	}
	if l.readFaults {
		if err := l.sectors.MaybeError(op); err != nil {
			return l.fire(lieReadError, op, err, fired)
		}
		if err := l.flips.MaybeError(op); err != nil {
			return l.fire(lieFlipOnRead, op, err, fired)
		}
	}
	if l.mis != nil && op.Path == l.misPath {
		if err := l.mis.MaybeError(op); err != nil {
			l.mis = nil
			hit := op
			if m, ok := err.(*errorfs.MisdirectedWrite); ok && m.Delta < 0 {
				hit.Off += m.Delta // the first byte it damaged
			}
			return l.fire(lieMisdirect, hit, err, fired)
		}
	}
	return nil
}

// fire makes an armed lie of the running disk take effect on op: err,
// which the fault filesystem applies, after telling fired — or nothing
// at all when the lies are disarmed (Config.Faults.LiesDisarmed).
func (l *lies) fire(kind int, op errorfs.Op, err error, fired func(kind int, op errorfs.Op)) error {
	if l.b.cfg.Faults.LiesDisarmed {
		l.event("lie %s disarmed: %v %s [%d, +%d) left intact", lieNames[kind], op.Kind, op.Path, op.Off, op.Len)
		return nil
	}
	fired(kind, op)
	return err
}

// mayHit reports whether a lie may hit the file name now: a partition's
// file only while only admits its partition, another file only without
// LiePartitionsOnly. Asked when a lie is picked and again when an armed
// one would fire, since the partition may have changed in between.
func (l *lies) mayHit(name string) bool {
	ns, ok := nsOfPath(name)
	if !ok {
		return !l.b.cfg.Faults.LiePartitionsOnly
	}
	return l.only == nil || l.only(ns)
}

// nsOfPath returns the partition whose directory holds name, if any.
func nsOfPath(name string) (metadata.Namespace, bool) {
	rest, ok := strings.CutPrefix(name, dataDir+"/streams/")
	if !ok {
		return 0, false
	}
	parts := strings.Split(rest, "/")
	if len(parts) < 6 || parts[1] != "topics" || parts[3] != "partitions" {
		return 0, false
	}
	var ids [3]uint64
	for i, p := range []string{parts[0], parts[2], parts[4]} {
		v, err := strconv.ParseUint(p, 10, 32)
		if err != nil {
			return 0, false
		}
		ids[i] = v
	}
	ns, err := metadata.NewNamespace(uint32(ids[0]), uint32(ids[1]), uint32(ids[2]))
	return ns, err == nil
}

// lieTouched records that a lie changed name: the incarnation committed
// for its directory now, or every incarnation for a file outside them.
func (l *lies) lieTouched(name string) {
	ns, ok := nsOfPath(name)
	if !ok {
		l.all = true
		return
	}
	l.dirs[ns] = true
	if l.bases == nil {
		l.bases = map[metadata.Namespace]map[string]bool{}
	}
	if l.bases[ns] == nil {
		l.bases[ns] = map[string]bool{}
	}
	l.bases[ns][path.Base(name)] = true
	if rev, ok := l.dirEpoch(ns, name); ok {
		key := incKey{ns, rev}
		if l.keys[key] == nil {
			l.keys[key] = map[string]bool{}
		}
		l.keys[key][fileClass(name)] = true
	}
}

// lieAt records that a lie hit byte off of the segment file name (-1:
// the file was cut short or rolled back).
func (l *lies) lieAt(name string, off int64) {
	ns, ok := nsOfPath(name)
	if !ok || fileClass(name) != "log" {
		return
	}
	if rev, ok := l.dirEpoch(ns, name); ok {
		key := incKey{ns, rev}
		l.points[key] = append(l.points[key], liePoint{name, off})
	}
	// A lie in the directory of an incarnation no longer committed
	// touches nothing anyone reads.
}

// fileClass names the kind of a partition file: "incarnation", "log",
// "index" (offset and time indexes), "offsets" (consumer offsets) or
// "other".
func fileClass(name string) string {
	base := path.Base(name)
	switch {
	case base == "incarnation":
		return "incarnation"
	case strings.HasSuffix(base, ".log"):
		return "log"
	case strings.HasSuffix(base, ".index"), strings.HasSuffix(base, ".timeindex"):
		return "index"
	case strings.Contains(name, "/offsets/"):
		return "offsets"
	}
	return "other"
}

// damageOK reports whether key may report damage: a lie touched it.
func (l *lies) damageOK(key incKey) bool {
	return l != nil && (l.all || l.keys[key] != nil || l.dirs[key.ns])
}

// touched reports whether a lie touched a file of class in key.
func (l *lies) touched(key incKey, class string) bool {
	return l != nil && l.keys[key][class]
}

// journalFile returns the number of the journal file name, if it is one.
func journalFile(name string) (uint64, bool) {
	if path.Dir(name) != path.Join(dataDir, "journal") {
		return 0, false
	}
	return partition.JournalFileNumber(path.Base(name))
}

// journalHit records a lie that changed the journal file name from byte
// off on (a cut, a rollback to a copy of that size, a misdirected write's
// first byte): at or past the end the journal's synced-end mark records
// for the file, it is in the mark's window (the journal's last synced
// writes, partition/journal_mark.go), where a loss cannot be told from a
// torn tail; below it, the replay must report it.
func (l *lies) journalHit(name string, off int64) {
	seq, ok := journalFile(name)
	if !ok {
		return
	}
	ends, err := partition.JournalSyncedEnds(l.mem(), dataDir)
	if err != nil {
		l.b.fail(0, "reading the journal's mark: %v", err)
		return
	}
	if off >= ends[seq] {
		l.journalWindow = true
		l.event("lie on %s from byte %d: at or past its synced end %d in the mark (its last synced writes)", name, off, ends[seq])
	}
}

// raftLogHit records a lie that cut or rolled back the raft log name
// from byte off on: below the size its sync mark records, the replica
// must refuse the log and be re-seeded; at or past it (or with no mark
// yet), the lie removes only bytes no acknowledgement or vote rests on
// (package replica makes the mark durable before raft acts on a synced
// write, mark.go), which read as a torn tail, and nothing is excused:
// the event says so in the trace (TestRaftLogWindowClosed finds it).
func (l *lies) raftLogHit(name string, off int64) {
	ns, ok := nsOfPath(name)
	if !ok || path.Base(name) != "raft.log" {
		return
	}
	_, size, found, err := replica.SyncedSize(l.mem(), name)
	if err != nil {
		return // the mark reports it
	}
	rev, ok := l.dirEpoch(ns, name)
	if !ok {
		return
	}
	if found && off < int64(min(size, math.MaxInt64)) {
		// The mark reports it, unless a later lie rolls the mark back
		// too (raftMarkHit).
		if l.raftCut == nil {
			l.raftCut = map[incKey]bool{}
		}
		l.raftCut[incKey{ns, rev}] = true
		return
	}
	l.event("lie on %s from byte %d: at or past its synced size %d in the mark (found: %v; nothing acknowledged there)", name, off, size, found)
}

// raftMarkSize returns the synced size the raft log's sync mark name
// records, if name is one and it reads.
func (l *lies) raftMarkSize(name string) (uint64, bool) {
	if path.Base(name) != shard.RaftMarkName {
		return 0, false
	}
	_, size, found, err := replica.SyncedSize(l.mem(), strings.TrimSuffix(name, replica.MarkSuffix))
	return size, err == nil && found
}

// raftMarkHit records a lie that rolled back the sync mark name of a raft
// log, which recorded the synced size before (ok: it read): if the copy
// restored records less, and a lie cut that incarnation's log below its
// mark earlier (raftCut), the log and its mark now read as an older log
// that was never cut — the mark and the log rolled back together, which
// package replica's mark.go says no mark catches. The replica then comes
// back without entries it acknowledged, or a vote it cast, as in the
// mark's window (knownRaftLogMarkRollback) — unless a build refused the
// cut log first and recorded it (shard.RefuseRaftLog: the directory
// holds shard.RaftRefusedName), which every later build refuses whatever
// the mark says (cluster seed 1901 before the record).
func (l *lies) raftMarkHit(name string, before uint64, ok bool) {
	after, aok := l.raftMarkSize(name)
	if !ok || !aok || after >= before {
		return
	}
	ns, nok := nsOfPath(name)
	if !nok {
		return
	}
	rev, rok := l.dirEpoch(ns, name)
	if !rok || !l.raftCut[incKey{ns, rev}] {
		return
	}
	if _, err := l.mem().Stat(path.Join(path.Dir(name), shard.RaftRefusedName)); err == nil {
		l.event("lie rolled %s back from synced size %d to %d, below a cut of its log already refused on disk: the cut stays refused", name, before, after)
		return
	}
	if l.raftHidden == nil {
		l.raftHidden = map[incKey]bool{}
	}
	l.raftHidden[incKey{ns, rev}] = true
	l.event("lie rolled %s back from synced size %d to %d, below a cut of its log it reported: the cut is hidden", name, before, after)
}

// settleJournal judges the journal writes misdirected before a crash
// against the mark the crash leaves.
func (l *lies) settleJournal() {
	for _, m := range l.misdirected {
		l.journalHit(m.name, m.off)
	}
	l.misdirected = nil
}

// fencedByJournal reports whether p, reopened after a lie touched the
// journal, refuses appends for damage at its end: the replay found the
// journal damaged (or cut below its synced end) and fenced the
// partitions it concerns at their log's end, or damage the partition's
// own files hold fenced it first (then the journal's adds no hole: seed
// 7656, a stored flip in the segment beside a misdirected journal
// write). Either way the acknowledged messages past its end are reported
// (the partition answers the *CorruptError) and their offsets are not
// given out again.
func fencedByJournal(p partition.Partition) bool {
	f, ok := p.(partition.WriteFenced)
	if !ok {
		return false
	}
	var ce *partition.CorruptError
	return errors.As(f.WritesRefused(), &ce)
}

// lossKnown classifies a silent loss of messages of key, found after a
// lie, as a known limit (known.go), or "" if none explains it. A last
// segment cut short or rolled back is not excused: how far each log was
// synced is durable (the partitions manifest, and the journal's
// synced-end marks for a direct commit), and a log found shorter is
// reported (package partition, checkSyncedEnd and the replay). Nor is
// a journal file cut below the end its own mark records (journal_mark.go
// in package partition): only a lie at or past it, in the window of the
// journal's last synced write, is. Nor is an incarnation file cut short
// or rolled back, unless a lie also touched what proves the incarnation
// was synced (the manifest, the journal: a file outside the partitions).
func (s *sim) lossKnown(key incKey) string {
	switch {
	case s.lies.touched(key, "incarnation") && s.lies.all:
		return knownIncarnationDamage
	case s.lies.journalWindow:
		return knownJournalDamage
	}
	return ""
}

// failKnown records a violation classified as the known limit known (a
// plain violation when known is "").
func (b *sim) failKnown(known string, inv int, format string, args ...any) {
	b.fail(inv, format, args...)
	if b.viol != nil && b.viol.Known == "" && known != "" && b.viol.Detail == fmt.Sprintf(format, args...) {
		b.viol.Known = known
	}
}

// isDamageError reports whether err is how damage may be reported: a
// typed corruption error, or the EIO of a bad sector.
func isDamageError(err error) bool {
	return isCorrupt(err) || errors.Is(err, syscall.EIO)
}

// isCorrupt reports whether err is a typed corruption error.
func isCorrupt(err error) bool {
	var ce *partition.CorruptError
	return errors.As(err, &ce) || errors.Is(err, partition.ErrCorrupt)
}

// dataFiles lists the files of the data directory a lie may hit: every
// regular file outside the metadata log, but the lock and the identity.
func (l *lies) dataFiles() []string {
	var out []string
	var walk func(dir string)
	walk = func(dir string) {
		names, err := l.mem().ReadDir(dir)
		if err != nil {
			return
		}
		for _, n := range names {
			p := path.Join(dir, n)
			fi, err := l.mem().Stat(p)
			if err != nil {
				continue
			}
			if fi.IsDir() {
				if p != l.skip {
					walk(p)
				}
				continue
			}
			if dir == dataDir && (n == "LOCK" || n == "IDENTITY") || strings.HasPrefix(n, ".") {
				continue
			}
			if !l.mayHit(p) {
				continue
			}
			if fi.Size() > 0 {
				out = append(out, p)
			}
		}
	}
	walk(dataDir)
	return out
}

// pickFile picks one of files, weighted by size (at least lieMinWeight
// bytes each): a bit that rots, a sector that goes bad or a write that
// goes astray hits a file about in proportion to the space it takes.
func (l *lies) pickFile(files []string) string {
	weights := make([]int64, len(files))
	var total int64
	for i, f := range files {
		w := int64(lieMinWeight)
		if fi, err := l.mem().Stat(f); err == nil {
			w = max(w, fi.Size())
		}
		weights[i] = w
		total += w
	}
	r := l.b.rng.Int64N(total)
	for i, w := range weights {
		if r < w {
			return files[i]
		}
		r -= w
	}
	return files[len(files)-1]
}

// lieMinWeight is the weight of a small file in pickFile.
const lieMinWeight = 64

// lieWhileDown reports whether kind damages the stored bytes while the
// node is down (after a power loss).
func lieWhileDown(kind int) bool {
	return kind == lieFlipStored || kind == lieTruncate || kind == lieRollback
}

// pick picks a lie of a kind mask allows (0: any) and the file it hits;
// false if there is no file to hit.
func (l *lies) pick(mask LieKind) (kind int, name string, ok bool) {
	files := l.dataFiles()
	if len(files) == 0 {
		return 0, "", false
	}
	rng := l.b.rng
	kind = rng.IntN(lieKinds)
	if mask != 0 {
		var kinds []int
		for k := range lieKinds {
			if mask&(1<<k) != 0 {
				kinds = append(kinds, k)
			}
		}
		kind = kinds[rng.IntN(len(kinds))]
	}
	name = l.pickFile(files)
	if _, err := l.mem().Stat(name); err != nil {
		return 0, "", false
	}
	return kind, name, true
}

// arm arms a lie of the running disk (misdirected write, read error, flip
// on read) on name.
func (l *lies) arm(kind int, name string) {
	fi, err := l.mem().Stat(name)
	if err != nil {
		return
	}
	size := fi.Size()
	rng := l.b.rng
	switch kind {
	case lieMisdirect:
		if l.mis != nil {
			return
		}
		delta := int64(1 + rng.IntN(8192))
		if rng.IntN(2) == 0 {
			delta = -delta
		}
		k := int64(rng.IntN(4))
		l.mis, l.misPath = errorfs.OnIndex(k, &errorfs.MisdirectedWrite{Delta: delta}, errorfs.OpWriteAt), name
		l.event("lie armed: misdirected write #%d of %s by %+d", k, name, delta)
	case lieReadError:
		off := rng.Int64N(size)
		n := int64(1 + rng.IntN(512))
		l.sectors.Add(name, off, n)
		l.readFaults = true
		l.event("lie armed: read error on %s [%d, %d)", name, off, off+n)
	case lieFlipOnRead:
		off := rng.Int64N(size)
		mask := byte(1 << rng.IntN(8))
		l.flips.Add(name, off, mask)
		l.readFaults = true
		l.event("lie armed: flip on read of %s at byte %d mask %#02x", name, off, mask)
	}
}

// stopRunning ends the lies of the running disk (quiescence).
func (l *lies) stopRunning() {
	l.readFaults, l.mis = false, nil
	l.sectors.Clear()
	l.flips.Clear()
}

// lieDown damages name while the node is down.
func (l *lies) lieDown(kind int, name string) {
	fi, err := l.mem().Stat(name)
	if err != nil {
		l.event("lie %s: %s is gone after the crash", lieNames[kind], name)
		return
	}
	size := fi.Size()
	// Disarmed, the lie makes the draws it would have made and nothing
	// else (Config.Faults.LiesDisarmed).
	disarmed := l.b.cfg.Faults.LiesDisarmed
	switch kind {
	case lieFlipStored:
		if size == 0 {
			return
		}
		off := l.b.rng.Int64N(size)
		mask := byte(1 << l.b.rng.IntN(8))
		if disarmed {
			l.event("lie flip stored disarmed: %s at byte %d left intact", name, off)
			return
		}
		err = errorfs.FlipStored(l.mem(), name, off, mask)
		l.event("LIE flip stored %s at byte %d mask %#02x: %v", name, off, mask, errString(err))
		l.lieAt(name, off)
	case lieTruncate:
		to := l.b.rng.Int64N(max(size, 1))
		if disarmed {
			l.event("lie truncate disarmed: %s left at %d bytes", name, size)
			return
		}
		err = errorfs.TruncateStored(l.mem(), name, to)
		l.event("LIE truncate %s from %d to %d bytes: %v", name, size, to, errString(err))
		l.lieAt(name, -1)
		l.journalHit(name, to)
		l.raftLogHit(name, to)
	case lieRollback:
		// An earlier copy of the same file: of the same incarnation (a
		// file of a dead incarnation restored into its successor's
		// directory is not a rollback but a foreign file, which nothing
		// in a record could tell).
		var c *errorfs.Copy
		epoch := l.epochOf(name)
		for i := range l.saved {
			if sc := &l.saved[i]; sc.Name == name && sc.epoch == epoch {
				c = &sc.Copy
			}
		}
		if c == nil {
			l.event("lie rollback: no earlier copy of %s", name)
			return
		}
		if disarmed {
			l.event("lie rollback disarmed: %s left at %d bytes", name, size)
			return
		}
		before, markOK := l.raftMarkSize(name)
		err = c.Restore(l.mem())
		l.lieAt(name, -1)
		l.journalHit(name, int64(len(c.Data)))
		l.raftLogHit(name, int64(len(c.Data)))
		l.raftMarkHit(name, before, markOK)
		l.event("LIE rollback %s from %d to %d bytes: %v", name, size, len(c.Data), errString(err))
	}
	if err != nil {
		l.b.fail(0, "lie %s on %s: %v", lieNames[kind], name, err)
		return
	}
	l.lieFired(kind, errorfs.Op{Path: name})
}

// lieFired counts a lie that took effect and records what it touched.
func (l *lies) lieFired(kind int, op errorfs.Op) {
	l.counts.Lies[kind]++
	if kind == lieMisdirect && op.Off < 0 {
		// Aimed before the file's start: errorfs fails the write (an
		// injected I/O error), which damages nothing.
		l.counts.LieWriteErrors++
		l.event("lie %s fired: %v %s [%d, +%d): answered as a failed write", lieNames[kind], op.Kind, op.Path, op.Off, op.Len)
		return
	}
	l.lieTouched(op.Path)
	switch kind {
	case lieMisdirect:
		// Both the range meant and the range hit are damaged.
		l.lieAt(op.Path, op.Off)
		if _, ok := journalFile(op.Path); ok {
			l.misdirected = append(l.misdirected, liePoint{op.Path, op.Off})
		}
	case lieFlipOnRead:
		if err, ok := l.flips.MaybeError(op).(*errorfs.FlipOnRead); ok {
			l.lieAt(op.Path, err.Off)
		}
	}
	if kind >= lieMisdirect {
		l.event("lie %s fired: %v %s [%d, +%d)", lieNames[kind], op.Kind, op.Path, op.Off, op.Len)
	}
}

// saveCopies, after a power loss, saves the content of a random data
// file (the disk holds only synced bytes then): a copy a later rollback
// may restore.
func (l *lies) saveCopies() {
	files := l.dataFiles()
	if len(files) == 0 {
		return
	}
	name := files[l.b.rng.IntN(len(files))]
	c, err := errorfs.SaveCopy(l.mem(), name)
	if err != nil {
		return
	}
	if len(l.saved) == maxSaved {
		l.saved = l.saved[1:]
	}
	l.saved = append(l.saved, savedCopy{Copy: c, epoch: l.epochOf(name)})
	l.event("saved a copy of %s (%d bytes)", name, len(c.Data))
}

// LieCounts counts the lying faults that took effect, by kind.
type LieCounts [lieKinds]int

// String lists the non-zero counts.
func (c LieCounts) String() string {
	var parts []string
	for k, n := range c {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", lieNames[k], n))
		}
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// Of is the number of lies of the kinds mask names.
func (c LieCounts) Of(mask LieKind) int {
	t := 0
	for k, n := range c {
		if mask&(1<<k) != 0 {
			t += n
		}
	}
	return t
}

// Total is the number of lies.
func (c LieCounts) Total() int {
	t := 0
	for _, n := range c {
		t += n
	}
	return t
}

// verifyDamaged checks a reopened incarnation a lie touched: every
// message below its end is read alone, without faults, and is either the
// message appended there, intact, or a typed damage error. Nothing
// acknowledged may be past its end: the next append would reuse the
// offset (verifyReopen checked that).
func (s *sim) verifyDamaged(n *node, key incKey, log *incLog, p partition.Partition) {
	n.inj.quiet++
	defer func() { n.inj.quiet-- }()
	next := p.NextOffset()
	if p.StartOffset() != 0 {
		s.fail(3, "%v reopened after a lie starting at offset %d: the messages below are gone without an error", key, p.StartOffset())
		return
	}
	damaged := 0
	for off := uint64(0); off < next; off++ {
		msgs, err := p.Read(off, 1)
		switch {
		case err != nil && isDamageError(err):
			damaged++
			continue
		case err != nil:
			s.fail(3, "%v reopened after a lie: reading offset %d: %v", key, off, err)
			return
		case len(msgs) == 0:
			s.fail(3, "%v reopened after a lie: offset %d below its end %d reads nothing, without an error", key, off, next)
			return
		}
		id, ok := decodePayload(msgs[0].Payload)
		if msgs[0].Offset != off || !ok || id != log.ids[off] {
			s.fail(3, "%v reopened after a lie: reading offset %d returned offset %d, message %d (intact %v), want message %d",
				key, off, msgs[0].Offset, id, ok, log.ids[off])
			return
		}
	}
	if damaged > 0 {
		s.faults.Detected++
		s.event("reopen %v after a lie: %d of %d offsets report damage", key, damaged, next)
	}
	if lost := uint64(len(log.ids)) - next; lost > 0 {
		s.event("reopen %v: %d unacknowledged messages lost", key, lost)
	}
	log.ids, log.acked = log.ids[:next], log.acked[:next]
}

// readDamaged is finalReadDamaged's reading.
func (s *sim) readDamaged(key incKey) bool {
	damaged := 0
	n := s.nodes[0]
	for from := uint64(0); s.viol == nil; {
		o := s.finalRead(n, key.ns, from)
		if !s.awaitFinal(o, s.settleRound, s.advanceSettling, fmt.Sprintf("final read of %v on %s", key, n.name())) {
			return false
		}
		// Read after the answer: the read may be what built the
		// partition (its builds failed on a bad sector until the read
		// faults ended at quiescence: seed 2992).
		log := s.oracle[key]
		switch {
		case o.outcome == outcomeOK && log == nil:
			s.fail(4, "committed partition %v was never built", key)
			return false
		case o.outcome == outcomeOK:
			msgs := o.resp.Messages
			if len(msgs) == 0 {
				if from < uint64(len(log.ids)) {
					s.fail(3, "final read of %v (touched by a lie) from %d returned nothing without an error; the incarnation holds %d messages",
						key, from, len(log.ids))
					return false
				}
				if damaged > 0 {
					s.faults.Detected++
				}
				s.event("final %v (touched by a lie) messages=%d damaged=%d", key, len(log.ids), damaged)
				return false
			}
			from = msgs[len(msgs)-1].Offset + 1
		case isDamageError(o.err) && errors.Is(o.err, shard.ErrPartitionFailed):
			s.faults.Detected++
			s.event("final read of %v (touched by a lie): refused whole for damage: %v", key, o.err)
			return false
		case isDamageError(o.err):
			damaged++
			if from++; log != nil && from > uint64(len(log.ids)) {
				s.fail(3, "final read of %v (touched by a lie): damage reported at offset %d, past the %d messages appended", key, from-1, len(log.ids))
				return false
			}
		case errors.Is(o.err, shard.ErrPartitionFailed):
			s.event("final read of %v: fenced after a failed fsync", key)
			return true
		default:
			s.fail(4, "committed partition %v (touched by a lie) not readable at quiescence from %d: %v", key, from, o.err)
			return false
		}
	}
	return false
}
