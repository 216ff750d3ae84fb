package partition

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/parkway-io/parkway/internal/syncmark"
	"github.com/parkway-io/parkway/vfs"
)

// Small files beside the log: consumer offsets, the incarnation marker and
// the start offset. A reader sees the old or the new content of each,
// never a mix. The incarnation marker and the start offset are replaced
// atomically with vfs.WriteFileAtomic (write a temporary file, fsync,
// rename, fsync the directory). Temporary files start with "." and are
// ignored (and cleaned up) when a partition is reopened.
//
// A consumer offset file is a sync mark of package syncmark (consumerMark
// below): created whole the first time, the same way, and from then on
// overwritten in place, one slot of two in turn, and fdatasynced. A
// consumer that commits after every batch (the Consumer's
// CommitAfterBatch) stores an offset per batch on the shard's pump, and
// the atomic replacement cost two fsyncs, a file creation and a rename,
// each a journal commit of the filesystem: about 550 CPU-µs and several
// milliseconds of a busy disk per store, during which the pump served
// nothing. An in-place slot costs one fdatasync of a block the file
// already holds (no metadata to commit). A torn slot write leaves the
// other slot, the previous offset, whole: the store was not acknowledged,
// so the old offset is what a crash may leave. A damaged newer slot is
// told from a torn one by the write number each slot ends with
// (syncmark's SeqTrailer: a torn write leaves the older number there), and
// fails the partition's build as damage, as both slots damaged do; a bad
// slot older than the valid one loses nothing, and verify reports it
// (verifyConsumers).

const (
	incarnationFile = "incarnation"
	startFile       = "start"
	// maxConsumerFileName bounds escaped consumer file names, leaving room
	// under the usual 255-byte NAME_MAX for the temporary-file decoration.
	maxConsumerFileName = 200
	// consumerFileHeader is the fixed part of a consumer offset file:
	// CRC-32C u32 of the rest, offset u64; the consumer name follows.
	consumerFileHeader = 12
)

// consumerFileName maps a consumer name to a file name. Bytes in
// [A-Za-z0-9_-] (and '.' except first, so "." and ".." and temporary
// files cannot occur) are kept, others become %XX, which keeps simple names
// readable. An empty name or one whose escape is too long becomes "~" and
// the SHA-256 of the name instead ("~" itself is always escaped, so the two
// forms cannot collide). The name is also stored inside the file, so the
// mapping need not be reversible.
func consumerFileName(name string) string {
	var b strings.Builder
	for i := 0; i < len(name) && b.Len() <= maxConsumerFileName; i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-', c == '.' && i > 0:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	if name == "" || b.Len() > maxConsumerFileName {
		sum := sha256.Sum256([]byte(name))
		return "~" + hex.EncodeToString(sum[:])
	}
	return b.String()
}

// Consumer offset files. Two formats are read: the sync mark (a file of
// exactly consumerMarkFormat.Size bytes), which every store writes, and
// the single record of earlier versions (a consumer's first store
// replaces one with a sync mark), which stores still write for a name
// longer than a slot holds (consumerMarkName: longer than any name the
// API accepts, metadata.MaxNameLength):
//
//	single record: CRC-32C u32 of the rest, offset u64, the name
//	sync mark slot payload: offset u64, name length u16, the name
//
// the slot in a record of magic consumerMarkMagic ("PWCO"), its sequence
// number and its CRC-32C (package syncmark), then zeros, then the
// sequence number again in the slot's last 8 bytes (SeqTrailer): a slot
// is one 512-byte sector, and a store that reached its last bytes wrote
// it whole, so a slot of a newer store than the valid one that fails its
// checksum is damage, not a torn write.
const (
	consumerMarkMagic  = 0x4f435750 // "PWCO"
	consumerMarkStride = 512
	// consumerMarkPayload is the payload's fixed part: offset and name
	// length.
	consumerMarkPayload = 8 + 2
	// consumerMarkName is the longest name a slot holds.
	consumerMarkName = consumerMarkStride - syncmark.Header - consumerMarkPayload - 4 - syncmark.SeqTrailerLen
)

// consumerMarkFormat is a consumer offset file's.
var consumerMarkFormat = syncmark.Format[consumerMark]{
	Magic:  consumerMarkMagic,
	Stride: consumerMarkStride,
	Size:   2 * consumerMarkStride,
	Codec:  consumerMarkCodec{},
	// Without it a damaged newer slot read as a torn store, and the
	// node silently took the older slot's offset: an acknowledged store
	// lost without an error.
	SeqTrailer: true,
}

// consumerMark is one slot's payload: a consumer's offset and its name
// (file names are not reversible, see consumerFileName).
type consumerMark struct {
	offset uint64
	name   string
}

type consumerMarkCodec struct{}

func (consumerMarkCodec) AppendPayload(dst []byte, m consumerMark) []byte {
	dst = le.AppendUint64(dst, m.offset)
	dst = le.AppendUint16(dst, uint16(len(m.name)))
	return append(dst, m.name...)
}

// PayloadLen reads the name's length: at most consumerMarkName.
func (consumerMarkCodec) PayloadLen(b []byte) (int, bool) {
	if len(b) < consumerMarkPayload {
		return 0, false
	}
	n := int(le.Uint16(b[8:]))
	if n > consumerMarkName {
		return 0, false
	}
	return consumerMarkPayload + n, true
}

func (consumerMarkCodec) DecodePayload(b []byte) (consumerMark, bool) {
	return consumerMark{offset: le.Uint64(b), name: string(b[consumerMarkPayload:])}, true
}

// decodeConsumerFile decodes a consumer offset file of either format;
// seq is the sync mark's sequence number, 0 for a single record.
func decodeConsumerFile(b []byte, path string) (name string, offset, seq uint64, err error) {
	if len(b) == consumerMarkFormat.Size {
		m, err := consumerMarkFormat.Decode(b)
		switch {
		case err == nil:
			return m.V.name, m.V.offset, m.Seq, nil
		case errors.Is(err, syncmark.ErrDamagedSlot):
			return "", 0, 0, corruptf(path, 0, "consumer offset file: %v", err)
		}
		// No valid slot: damage, unless it is a single record of a name
		// that made it this long.
		if name, offset, err := decodeConsumerOffset(b, path); err == nil {
			return name, offset, 0, nil
		}
		return "", 0, 0, corruptf(path, 0, "consumer offset file: %v", syncmark.ErrNoSlot)
	}
	name, offset, err = decodeConsumerOffset(b, path)
	return name, offset, 0, err
}

// storeConsumerFile makes offset the consumer's durable offset in the
// file at path. seq is the sequence number of the file's last slot, and
// known whether the caller knows it (from the file's load, or its last
// store); it returns the new one (0: a single record). A consumer's first
// store after a failed one, or after its file was loaded in the single
// record format, reads the file for it: a slot written with a number not
// above the file's last would lose to it.
func storeConsumerFile(fsys vfs.FS, path, name string, offset, seq uint64, known bool) (uint64, error) {
	if len(name) > consumerMarkName {
		return 0, vfs.WriteFileAtomic(fsys, path, encodeConsumerOffset(name, offset))
	}
	if !known {
		m, _, _, err := consumerMarkFormat.Read(fsys, path)
		switch {
		case err == nil:
			seq = m.Seq // 0 if there is no file
		case errors.Is(err, syncmark.ErrNoSlot):
			seq = 0 // any slot written wins over none
		case errors.Is(err, syncmark.ErrDamagedSlot):
			return 0, corruptf(path, 0, "consumer offset file: %v", err)
		default:
			return 0, err
		}
	}
	w := consumerMarkFormat.Writer(fsys, path, seq)
	err := w.Write(consumerMark{offset: offset, name: name}, syncmark.Durable)
	return w.Seq(), errors.Join(err, w.Close())
}

func encodeConsumerOffset(name string, offset uint64) []byte {
	b := make([]byte, consumerFileHeader, consumerFileHeader+len(name))
	le.PutUint64(b[4:], offset)
	b = append(b, name...)
	le.PutUint32(b, crc32.Checksum(b[4:], castagnoli))
	return b
}

func decodeConsumerOffset(b []byte, path string) (string, uint64, error) {
	if len(b) < consumerFileHeader {
		return "", 0, corruptf(path, 0, "consumer offset file of %d bytes", len(b))
	}
	if sum := crc32.Checksum(b[4:], castagnoli); sum != le.Uint32(b) {
		return "", 0, corruptf(path, 0, "checksum %#08x, computed %#08x", le.Uint32(b), sum)
	}
	return string(b[consumerFileHeader:]), le.Uint64(b[4:]), nil
}

// loadConsumerOffsets reads every consumer offset file in dir, removing
// leftover temporary files. The offsets are as stored: the caller clamps
// them to its log's end once the log is whole (clampConsumers), after the
// journal's records are applied, not before.
// seqs holds the sync mark sequence number of each consumer whose file is
// one (nil if none is).
func loadConsumerOffsets(fsys vfs.FS, dir string) (out, seqs map[string]uint64, err error) {
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	out = make(map[string]uint64, len(names))
	for _, n := range names {
		path := filepath.Join(dir, n)
		if strings.HasPrefix(n, ".") {
			_ = fsys.Remove(path) // a crashed atomic write; harmless if it stays
			continue
		}
		b, err := vfs.ReadFile(fsys, path)
		if errors.Is(err, syscall.EISDIR) {
			continue // not ours
		}
		if err != nil {
			return nil, nil, err
		}
		name, off, seq, err := decodeConsumerFile(b, path)
		if err != nil {
			return nil, nil, err
		}
		out[name] = off
		if seq > 0 {
			if seqs == nil {
				seqs = make(map[string]uint64)
			}
			seqs[name] = seq
		}
	}
	return out, seqs, nil
}

// readIncarnation returns the epoch recorded in dir. A missing directory
// or file is fs.ErrNotExist, a torn one errBadIncarnation: both mean the
// directory holds no live incarnation. A whole file that does not check
// is damage, a *CorruptError: taking it for another incarnation's would
// have the directory, and every acknowledged message in it, removed.
//
// The file is "<epoch> <CRC-32C of the decimal epoch, 8 hex digits>\n";
// a file of older versions holds the epoch alone and is read without a
// check.
func readIncarnation(fsys vfs.FS, dir string) (uint64, error) {
	path := filepath.Join(dir, incarnationFile)
	b, err := vfs.ReadFile(fsys, path)
	if err != nil {
		return 0, err
	}
	// The newline ends the record: without it the write was torn (the
	// file is written in place at build and synced with the rest of the
	// layout, concurrently, before anything in the partition is
	// acknowledged), and the directory is a half-built one. (A file cut
	// short by damage looks the same, and is taken for a half-built
	// one: the log beside it may hold synced records in either case.)
	// A torn write leaves a prefix of the record; anything else without
	// the newline was damaged.
	if len(b) == 0 || b[len(b)-1] != '\n' {
		if !tornIncarnation(b) {
			return 0, corruptf(path, 0, "incarnation file %q does not end its record", b)
		}
		return 0, errBadIncarnation
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 || len(fields) > 2 {
		return 0, corruptf(path, 0, "unparsable incarnation file %q", b)
	}
	epoch, err := strconv.ParseUint(fields[0], 10, 64)
	if err != nil {
		return 0, corruptf(path, 0, "unparsable incarnation file %q", b)
	}
	if len(fields) == 2 {
		sum, err := strconv.ParseUint(fields[1], 16, 32)
		if err != nil || len(fields[1]) != 8 {
			return 0, corruptf(path, 0, "unparsable incarnation checksum %q", b)
		}
		if want := crc32.Checksum([]byte(fields[0]), castagnoli); uint32(sum) != want {
			return 0, corruptf(path, 0, "incarnation checksum %08x, computed %08x", sum, want)
		}
		// A checked record is exactly what encodeIncarnation writes: a
		// checksum in capitals, a leading zero or extra spaces are bytes
		// no build wrote, so something else changed the file.
		if string(b) != string(encodeIncarnation(epoch)) {
			return 0, corruptf(path, 0, "incarnation file %q is not in its record's form", b)
		}
	}
	return epoch, nil
}

// tornIncarnation reports whether b, with no newline at its end, is a
// proper prefix of a record (a legacy one included): what a torn write
// of the file leaves.
func tornIncarnation(b []byte) bool {
	digits := 0
	for digits < len(b) && b[digits] >= '0' && b[digits] <= '9' {
		digits++
	}
	if digits == len(b) {
		return true // the epoch, or part of it
	}
	epoch, err := strconv.ParseUint(string(b[:digits]), 10, 64)
	if err != nil || digits == 0 {
		return false
	}
	full := encodeIncarnation(epoch)
	return len(b) < len(full) && string(full[:len(b)]) == string(b)
}

// encodeIncarnation is the incarnation file's content for epoch.
func encodeIncarnation(epoch uint64) []byte {
	e := strconv.FormatUint(epoch, 10)
	return fmt.Appendf(nil, "%s %08x\n", e, crc32.Checksum([]byte(e), castagnoli))
}

var errBadIncarnation = errors.New("partition: unparsable incarnation file")

// writeIncarnation writes the incarnation file of a partition being built,
// without syncing it: filePartition.syncLayout does, before anything
// written into the partition is made durable. A crash before that leaves
// a missing or torn file, which marks the directory half-built.
func writeIncarnation(fsys vfs.FS, dir string, epoch uint64) error {
	f, err := fsys.OpenFile(filepath.Join(dir, incarnationFile), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(encodeIncarnation(epoch))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// readStart returns the start offset recorded in dir, 0 if none is.
// Unparsable content is a *CorruptError: the file is written atomically,
// so that is damage, and guessing could resurrect truncated messages or
// hide live ones.
func readStart(fsys vfs.FS, dir string) (uint64, error) {
	path := filepath.Join(dir, startFile)
	b, err := vfs.ReadFile(fsys, path)
	if isNotExist(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	start, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, corruptf(path, 0, "unparsable start offset %q", b)
	}
	return start, nil
}

func writeStart(fsys vfs.FS, dir string, start uint64) error {
	return vfs.WriteFileAtomic(fsys, filepath.Join(dir, startFile), []byte(strconv.FormatUint(start, 10)+"\n"))
}

// isNotExist reports a missing file or directory.
func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
