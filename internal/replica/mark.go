package replica

import (
	"encoding/binary"
	"fmt"

	"github.com/parkway-io/parkway/internal/syncmark"
	"github.com/parkway-io/parkway/vfs"
)

// The sync mark: how far a raft log was synced, recorded outside it.
//
// Why. Recovery truncates what follows a raft log's last whole record as a
// torn write (package wal), which is right for bytes written after the
// last fsync: nothing acted on them. But a log cut short, or rolled back
// to an older copy of itself, after it was synced ends on whole records
// too, and from the file alone it reads as exactly such a log: the member
// would come back having forgotten votes it cast and entries it
// acknowledged, which raft's safety rests on. No record inside the file
// can tell (a cut removes the records after it whole, a rollback restores
// the older records with the older file), so the fact is kept beside it:
// the mark file, <log>.mark, says which file the log was (its generation:
// Rewrite writes each new file with the next one, in a recGen record) and
// how many bytes of it were synced. OpenDisk refuses, as damage
// (ErrCorruptLog), a log of an older generation than its mark says, or
// shorter than the mark's size. A log ahead of its mark is fine: the mark
// is only ever a lower bound.
//
// How it is kept durable: before raft acts on the write. On a Disk
// synced on every Save, after every fsync of the log that made something
// new durable the mark's next slot is written — so it never claims more
// than the log holds — and fdatasynced before Save returns: a second
// flush per synced write. Raft acts on a Save as soon as it returns (a
// follower's append answer and its vote go out, a leader counts its own
// copy toward a commit in Advance, a candidate its own vote), so the
// mark must already vouch for the write then; otherwise a power loss
// right after the write and a cut (or rollback) of exactly that write
// would read as a torn tail, and the replica would come back having
// forgotten entries it acknowledged or a vote it cast — and a lie on one
// replica could lose an acknowledged write, which raft promises only a
// majority's loss can. OpenDisk's first mark on a synced Disk is
// fdatasynced too: it covers what Open synced (a process that crashed
// leaves its unsynced writes in the page cache), which raft may
// acknowledge at once. Compaction's Rewrite fdatasyncs the mark naming
// the new generation. An unsynced Disk (an interval policy, which
// promises nothing of a power loss before its next Sync) only writes
// the mark back (vfs.WriteBack: sync_file_range on Linux), durable with
// the device's next cache flush.
//
// Why the second flush, and why not fewer. With one flush per synced
// write the mark has to lag by one write: a power loss during the flush
// can make any subset of that write's blocks durable, so a mark claiming
// the new end that reached the disk without the batch it describes must
// read as a torn write, and the disk after that is the disk after the
// batch was synced and then cut off. The mark used to ride on the next
// flush that way (written back after the log's fsync), which left the
// window above open. The options weighed to close it:
//
//   - acknowledge batch N only after flush N+1 (which carries N's mark):
//     no extra flush under load, one more flush of latency, and an
//     explicit fdatasync of the mark when no next write comes. With
//     etcd raft's synchronous storage writes a leader's count of its own
//     copy and a candidate's of its own vote are stepped inside Advance,
//     right after the Save, so holding them back means driving raft with
//     asynchronous storage writes (every owner's Ready loop changed) —
//     not done; the messages to others alone would leave the leader's
//     count open, and a lie on the leader alone could still lose a
//     committed write.
//   - fdatasync the mark right after the log (done): two sequential
//     flushes per acknowledgement, the same latency as the above for a
//     lone writer and less throughput under load, by a simple rule
//     every owner gets for free; its cost is measured in
//     bench/RESULTS.md.
//   - the mark inside the log (a commit record per synced batch with the
//     generation and the cumulative length): a cut removes those records
//     with the batch, and a rollback restores the older ones with the
//     older file, so the log still cannot vouch for its own end. Raft's
//     hard state is no independent witness either: its commit index is in
//     the same file and is cut with it.
//   - a header slot at the start of the log file, overwritten with every
//     synced write: covered by the log's own fsync, it survives a cut
//     (which removes the end), but a rollback to an older copy brings the
//     older header back, which a mark beside the file is not subject to.
//   - a preallocated log of fixed size would make any truncation visible
//     at once (a torn write never shrinks it), at the cost of space per
//     log (a node holds a raft log per partition replica) and a different
//     wal format; rollbacks would still need the mark.
//
// On a filesystem that copies on write (btrfs, zfs) a written-back
// block may need the filesystem's next commit to become reachable, so
// an unsynced Disk's mark lags further there (vfs.WriteBacker); it is
// never ahead of the log, so it never refuses a sound one.
//
// What it does not catch at all: the mark and the log rolled back
// together (a whole disk restored from a backup), and a cut of bytes no
// fsync covered (a torn write: nothing acted on them). A damaged or short
// mark is damage too (the log is then not trusted); a missing one is
// written afresh from the log as found (a log written before marks
// existed, or a crash before the first mark was renamed into place).
//
// # Whose log it was
//
// A slot also records the owner's tag (Disk.SetTag) the synced bytes
// hold: a replicated partition's raft log is tagged with its incarnation
// and replica id in its first record, and a log cut below that record
// cannot say whose it was — an earlier incarnation's, left in the
// directory where the next one is placed (which may be discarded), or
// the incarnation's own, cut after it acknowledged writes (which must be
// refused). The mark survives the cut, so OwnerTag reads the tag from it
// (and from the log's valid prefix only for a mark that names none). A
// slot names only a tag that the fsync it follows made durable (SetTag
// appends the record, the next synced write covers it), so, like the
// size, it is never ahead of the log.
//
// # Format
//
// A sync mark file of package syncmark (its slots, checksums and
// write-back are that package's, shared with the partition journal's
// mark): two slots, at byte 0 and at markStride. The slot's magic names
// the payload's version. Version 2 (magic markMagic, "PWS2"; the file
// markStride+97 bytes long, the second slot's room for the longest
// record), little endian:
//
//	gen    uint64: the log file's generation (0: a file no Rewrite wrote)
//	size   uint64: bytes of the log synced
//	taglen uint8: the tag's length, at most MaxTag (0: not tagged)
//	tag    taglen bytes: the owner's tag the synced bytes hold
//
// Version 1 (magic markMagicV1, "PWSM"; the file markStride+32 bytes
// long), written before marks carried the tag, still decodes, as a mark
// naming no tag: gen and size alone, a record of 32 bytes. A writer
// writes version 2 only, so a version 1 file is written whole again at
// the first write (syncmark.File), which a Disk makes when it opens.

const (
	markMagic   = 0x3253_5750 // "PWS2": version 2
	markMagicV1 = 0x4d53_5750 // "PWSM": version 1
	// markFixed is version 2's payload before the tag; markPayload its
	// longest payload.
	markFixed   = 8 + 8 + 1
	markPayload = markFixed + MaxTag
	// markPayloadV1 is version 1's payload.
	markPayloadV1 = 16
	markStride    = 512
)

// markFormat is the raft log mark's file.
var markFormat = syncmark.Format[mark]{
	Magic:  markMagic,
	Stride: markStride,
	Size:   markStride + syncmark.Header + markPayload + 4,
	Codec:  markCodec{},
	Older: []syncmark.Version[mark]{{
		Magic: markMagicV1,
		Size:  markStride + syncmark.Header + markPayloadV1 + 4,
		Codec: markCodecV1{},
	}},
}

// MarkSuffix makes the name of a raft log's sync mark from the log's: a
// file kept beside the log wherever the log is kept (see MarkName).
const MarkSuffix = ".mark"

// MarkName is the name (or path) of the sync mark of the raft log named
// (or at) log.
func MarkName(log string) string { return log + MarkSuffix }

func markPath(path string) string { return MarkName(path) }

// SyncedSize reads what the sync mark of the raft log at path records,
// changing nothing: the generation of the log file and how many bytes of
// it were synced; found is false if there is no mark. A mark with no
// valid slot is an error. For offline tools and the simulator, which
// tell a cut at or past it (bytes nothing acknowledged, read as a torn
// tail) from one the mark reports.
func SyncedSize(fsys vfs.FS, path string) (gen, size uint64, found bool, err error) {
	m, found, _, err := readMark(fsys, path)
	return m.V.gen, m.V.size, found, err
}

// OwnerTag returns whose the raft log at path is, for a log ReadDisk
// refuses as damaged: the tag its sync mark names, if the mark is read
// and names one, else the tag its valid prefix holds (PrefixTag); nil if
// neither names one. The mark comes first: it survives a cut of the log
// below its tag record, and it names the tag of the log it measured
// whatever file now stands at the path (a log rolled back to another's
// copy holds that other's tag). Like PrefixTag, it says whose the log
// was, not what it held.
func OwnerTag(fsys vfs.FS, path string) ([]byte, error) {
	// The mark's own reading, its size unchecked: a slot of a mark cut
	// short still names whose log it measured.
	if m, found, _, err := markFormat.Read(fsys, markPath(path)); err == nil && found && m.V.tag != "" {
		return []byte(m.V.tag), nil
	}
	return PrefixTag(fsys, path)
}

// mark is one slot's payload: which log file, and how much of it, was
// synced, and the owner's tag those bytes hold ("" if none).
type mark struct {
	gen, size uint64
	tag       string
}

// markCodec is version 2's payload codec.
type markCodec struct{}

func (markCodec) AppendPayload(dst []byte, m mark) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, m.gen)
	dst = binary.LittleEndian.AppendUint64(dst, m.size)
	dst = append(dst, byte(len(m.tag))) // at most MaxTag: SetTag's and replay's bound
	return append(dst, m.tag...)
}

// PayloadLen reads the tag's length, refusing one past MaxTag.
func (markCodec) PayloadLen(b []byte) (int, bool) {
	if len(b) < markFixed {
		return 0, false
	}
	n := markFixed + int(b[markFixed-1])
	return n, int(b[markFixed-1]) <= MaxTag && len(b) >= n
}

func (markCodec) DecodePayload(b []byte) (mark, bool) {
	if len(b) < markFixed || len(b) != markFixed+int(b[markFixed-1]) {
		return mark{}, false
	}
	m := mark{gen: binary.LittleEndian.Uint64(b), size: binary.LittleEndian.Uint64(b[8:]), tag: string(b[markFixed:])}
	return m, m.size <= maxLogSize
}

// markCodecV1 is version 1's payload codec: no tag. (Its AppendPayload
// writes what a version 1 writer wrote, for the tests that keep those
// bytes decoding.)
type markCodecV1 struct{}

func (markCodecV1) AppendPayload(dst []byte, m mark) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, m.gen)
	return binary.LittleEndian.AppendUint64(dst, m.size)
}

func (markCodecV1) PayloadLen(b []byte) (int, bool) { return markPayloadV1, len(b) >= markPayloadV1 }

func (markCodecV1) DecodePayload(b []byte) (mark, bool) {
	if len(b) != markPayloadV1 {
		return mark{}, false
	}
	m := mark{gen: binary.LittleEndian.Uint64(b), size: binary.LittleEndian.Uint64(b[8:])}
	return m, m.size <= maxLogSize
}

// maxLogSize bounds a mark's size: no log a Disk reads whole in memory is
// anywhere near it, and a larger one is damage.
const maxLogSize = 1 << 50

// readMark reads the mark of the log at path; found is false if there is
// none. A mark with no valid slot is an error (syncmark.ErrNoSlot), and
// so is a mark file of no mark's size (syncmark.ErrSize).
// slack is syncmark's (Disk.MarkSlack).
// A mark file cut short is damage too (syncmark.ErrSize), though the
// slot it keeps is valid: that slot is the older one, whose smaller size
// would pass a log cut back to it (cluster simulator seed 555: a lie cut
// a replica's raft log, another its mark, and the member came back
// having forgotten entries it acknowledged).
func readMark(fsys vfs.FS, path string) (m syncmark.Mark[mark], found bool, slack string, err error) {
	m, found, slack, err = markFormat.Read(fsys, markPath(path))
	if err != nil || !found {
		return m, found, slack, err
	}
	fi, err := fsys.Stat(markPath(path))
	if err == nil {
		err = markFormat.CheckSize(fi.Size())
	}
	if err != nil {
		return syncmark.Mark[mark]{}, false, "", fmt.Errorf("sync mark %s: %w", markPath(path), err)
	}
	return m, found, slack, nil
}

// checkMark compares the log d recovered with its mark m: a log of an
// older generation than the mark, or shorter than the size the mark says
// was synced, was cut short or rolled back after it was synced.
func (d *Disk) checkMark(m mark) error {
	switch size := uint64(d.log.Size()); {
	case d.gen < m.gen:
		return d.corrupt(d.log.Size(), fmt.Errorf("raft log of generation %d, but generation %d was synced (sync mark %s): the log was rolled back to an older file",
			d.gen, m.gen, markPath(d.path)))
	case d.gen == m.gen && size < m.size:
		return d.corrupt(d.log.Size(), fmt.Errorf("raft log ends at byte %d, but %d bytes of it were synced (sync mark %s): the log was cut short or rolled back, not torn",
			size, m.size, markPath(d.path)))
	}
	return nil
}

// writeMark records that the log is synced as it stands, in the mark
// file's next slot: fdatasynced if durable (a synced Disk's, see above),
// else handed to the device to be durable with its next flush. A Disk whose mark file is missing creates it whole,
// synced, under a temporary name and renames it into place, so that a
// mark file that exists always holds a valid slot (syncmark.File).
func (d *Disk) writeMark(durable bool) error {
	if d.mark == nil {
		return nil // a Disk that only reads (ReadDisk) writes no mark
	}
	m := mark{gen: d.gen, size: uint64(d.log.Size()), tag: d.tag}
	if d.hasMark && m == d.marked {
		return nil // nothing new was synced
	}
	sync := syncmark.WrittenBack
	if durable {
		sync = syncmark.Durable
	}
	if err := d.mark.Write(m, sync); err != nil {
		return fmt.Errorf("raft log %s: %w", d.path, err)
	}
	d.marked, d.hasMark = m, true
	return nil
}
