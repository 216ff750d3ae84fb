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

	"github.com/parkway-io/parkway/vfs"
)

// Small files beside the log: consumer offsets, the incarnation marker and
// the start offset. All of them are replaced atomically with
// vfs.WriteFileAtomic (write a temporary file, fsync, rename, fsync the
// directory), so a reader sees the old or the new content, never a mix. Temporary files start with "." and are ignored (and
// cleaned up) when a partition is reopened.

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
func loadConsumerOffsets(fsys vfs.FS, dir string) (map[string]uint64, error) {
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := make(map[string]uint64, len(names))
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
			return nil, err
		}
		name, off, err := decodeConsumerOffset(b, path)
		if err != nil {
			return nil, err
		}
		out[name] = off
	}
	return out, nil
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
