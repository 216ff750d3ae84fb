//go:build unix

package main

import (
	"context"
	binenc "encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/parkway-io/parkway"
)

func TestVerifyCleanDirectory(t *testing.T) {
	dir := makeDir(t, 50)
	before := checksum(t, dir)
	r := runBin(t, "verify", dir)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "ok: ") {
		t.Fatalf("verify of a clean directory:\n%v", r)
	}
	if after := checksum(t, dir); after != before {
		t.Fatal("verify changed the directory")
	}
}

// TestVerifyFindsDamage damages a clean directory at a chosen byte, one
// kind of damage at a time, and checks that verify names the file and
// the byte, exits 1, and changes nothing.
func TestVerifyFindsDamage(t *testing.T) {
	// Partition 0 spans several 1 MiB segments; partition 1 one.
	base := makeDir(t, 30000)
	for _, c := range []struct {
		name   string
		damage func(t *testing.T, dir string) (file string, off int64)
	}{
		{"flipped byte in a sealed segment", func(t *testing.T, dir string) (string, int64) {
			seg := segments(t, dir, 0)[0]
			flip(t, seg, 5000)
			return seg, -1
		}},
		{"flipped byte in the tail segment", func(t *testing.T, dir string) (string, int64) {
			segs := segments(t, dir, 1)
			seg := segs[len(segs)-1]
			flip(t, seg, fileSize(t, seg)-3)
			return seg, -1
		}},
		{"truncated sealed segment", func(t *testing.T, dir string) (string, int64) {
			seg := segments(t, dir, 0)[0]
			if err := os.Truncate(seg, fileSize(t, seg)-10); err != nil {
				t.Fatal(err)
			}
			return seg, -1
		}},
		{"missing middle segment", func(t *testing.T, dir string) (string, int64) {
			segs := segments(t, dir, 0)
			if len(segs) < 3 {
				t.Fatalf("want 3 segments, have %d", len(segs))
			}
			if err := os.Remove(segs[1]); err != nil {
				t.Fatal(err)
			}
			return segs[0], -1
		}},
		{"missing first segment", func(t *testing.T, dir string) (string, int64) {
			segs := segments(t, dir, 0)
			if err := os.Remove(segs[0]); err != nil {
				t.Fatal(err)
			}
			return segs[1], 0
		}},
		{"flipped index entry", func(t *testing.T, dir string) (string, int64) {
			idx := strings.TrimSuffix(segments(t, dir, 0)[0], ".log") + ".index"
			flip(t, idx, 12)
			return idx, 8
		}},
		{"missing index", func(t *testing.T, dir string) (string, int64) {
			idx := strings.TrimSuffix(segments(t, dir, 0)[0], ".log") + ".index"
			if err := os.Remove(idx); err != nil {
				t.Fatal(err)
			}
			return idx, 0
		}},
		{"flipped consumer offset", func(t *testing.T, dir string) (string, int64) {
			p := filepath.Join(filepath.Dir(segments(t, dir, 0)[0]), "offsets", "consumers", "billing")
			// Both slots of the file's sync mark: a damaged older slot
			// alone loses nothing (verify reports it, repaired).
			flip(t, p, 6)
			flip(t, p, 512+6)
			return p, 0
		}},
		{"missing incarnation", func(t *testing.T, dir string) (string, int64) {
			p := filepath.Join(filepath.Dir(segments(t, dir, 1)[0]), "incarnation")
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			return p, 0
		}},
		{"flipped byte in the metadata log", func(t *testing.T, dir string) (string, int64) {
			wals, _ := filepath.Glob(filepath.Join(dir, "metadata", "wal-*"))
			if len(wals) != 1 {
				t.Fatalf("metadata logs: %v", wals)
			}
			flip(t, wals[0], 9)
			return wals[0], 0
		}},
		{"truncated metadata log", func(t *testing.T, dir string) (string, int64) {
			wals, _ := filepath.Glob(filepath.Join(dir, "metadata", "wal-*"))
			if err := os.Truncate(wals[0], fileSize(t, wals[0])-2); err != nil {
				t.Fatal(err)
			}
			return wals[0], -1
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			if err := os.CopyFS(dir, os.DirFS(base)); err != nil {
				t.Fatal(err)
			}
			file, off := c.damage(t, dir)
			before := checksum(t, dir)
			r := runBin(t, "verify", dir)
			if r.code != 1 {
				t.Fatalf("verify of a damaged directory: want exit 1\n%v", r)
			}
			t.Logf("verify said:\n%s", r.stdout)
			rel, _ := filepath.Rel(dir, file)
			want := rel + ":"
			if off >= 0 {
				want += strconv.FormatInt(off, 10) + ":"
			}
			if !strings.Contains(r.stdout, want) {
				t.Fatalf("verify does not name %q:\n%v", want, r)
			}
			if after := checksum(t, dir); after != before {
				t.Fatal("verify changed the directory")
			}
		})
	}
}

// TestVerifyClusterDirectory: a cluster member's directory has raft logs:
// the metadata group's and one per partition; verify reads them as a
// restarting member does.
func TestVerifyClusterDirectory(t *testing.T) {
	base := makeDir(t, 200, inCluster)
	if r := runBin(t, "verify", base); r.code != 0 {
		t.Fatalf("verify of a clean cluster directory:\n%v", r)
	}
	partRaft := func(dir string) string { return filepath.Join(filepath.Dir(segments(t, dir, 0)[0]), "raft.log") }
	metaRaft := func(dir string) string { return filepath.Join(dir, "metadata-raft", "raft.log") }
	for _, c := range []struct {
		name   string
		damage func(dir string) string
		want   string
	}{
		{"flipped byte in a partition raft log", func(dir string) string {
			p := partRaft(dir)
			flip(t, p, 12)
			return p
		}, ":0:"},
		{"truncated partition raft log", func(dir string) string {
			p := partRaft(dir)
			if err := os.Truncate(p, fileSize(t, p)-3); err != nil {
				t.Fatal(err)
			}
			return p
		}, "cut short"},
		{"truncated partition raft log without a sync mark (a log from before marks)", func(dir string) string {
			p := partRaft(dir)
			if err := os.Remove(p + ".mark"); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(p, fileSize(t, p)-3); err != nil {
				t.Fatal(err)
			}
			return p
		}, "torn tail"},
		{"missing partition raft log", func(dir string) string {
			p := partRaft(dir)
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			return p
		}, "raft log missing"},
		{"empty partition raft log", func(dir string) string {
			p := partRaft(dir)
			if err := os.Truncate(p, 0); err != nil {
				t.Fatal(err)
			}
			return p
		}, "cut short"},
		{"empty partition raft log without a sync mark", func(dir string) string {
			p := partRaft(dir)
			if err := os.Remove(p + ".mark"); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(p, 0); err != nil {
				t.Fatal(err)
			}
			return p
		}, "holds no state"},
		{"missing partition directory (the node id from IDENTITY)", func(dir string) string {
			p := filepath.Dir(partRaft(dir))
			if err := os.RemoveAll(p); err != nil {
				t.Fatal(err)
			}
			return p
		}, "directory is missing"},
		{"flipped byte in IDENTITY", func(dir string) string {
			p := filepath.Join(dir, "IDENTITY")
			flip(t, p, 3)
			return p
		}, "IDENTITY:0:"},
		{"flipped byte in the metadata raft log", func(dir string) string {
			p := metaRaft(dir)
			flip(t, p, 20)
			return p
		}, ":0:"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := copyDir(t, base)
			file := c.damage(dir)
			before := checksum(t, dir)
			r := runBin(t, "verify", dir)
			t.Logf("verify said:\n%s", r.stdout)
			rel, _ := filepath.Rel(dir, file)
			if r.code != exitProblems || !strings.Contains(r.stdout, rel) || !strings.Contains(r.stdout, c.want) {
				t.Fatalf("want exit 1 naming %s and %q\n%v", rel, c.want, r)
			}
			if checksum(t, dir) != before {
				t.Fatal("verify changed the directory")
			}
		})
	}
}

// TestVerifyMetadataSnapshot: a damaged metadata snapshot is skipped by a
// node opening the directory; verify names it, and the log that no longer
// reaches back to a usable snapshot.
func TestVerifyMetadataSnapshot(t *testing.T) {
	base := makeDir(t, 10, func(_ *testing.T, cfg *parkway.Config) { cfg.MetadataSnapshotEvery = 3 })
	snaps, _ := filepath.Glob(filepath.Join(base, "metadata", "snapshot-*"))
	if len(snaps) != 1 {
		t.Fatalf("snapshots: %v", snaps)
	}
	if r := runBin(t, "verify", base); r.code != 0 {
		t.Fatalf("verify of a clean directory with a snapshot:\n%v", r)
	}
	if r := runBin(t, "inspect", base); r.code != 0 || !strings.Contains(r.stdout, "audit") {
		t.Fatalf("inspect through a snapshot:\n%v", r)
	}
	dir := copyDir(t, base)
	rel, _ := filepath.Rel(base, snaps[0])
	flip(t, filepath.Join(dir, rel), 20)
	fi, err := os.Stat(snaps[0])
	if err != nil {
		t.Fatal(err)
	}
	// The mismatch is found at the checksum, the file's last 4 bytes
	// (where depends on the snapshot's format version and contents).
	at := fmt.Sprintf("%s:%d:", rel, fi.Size()-4)
	r := runBin(t, "verify", dir)
	t.Logf("verify said:\n%s", r.stdout)
	if r.code != exitProblems || !strings.Contains(r.stdout, at) || !strings.Contains(r.stdout, "falls back") {
		t.Fatalf("verify with a damaged snapshot:\n%v", r)
	}

	// A snapshot from a newer format version (its checksum valid): named
	// as such, by verify and by inspect.
	dir = copyDir(t, base)
	path := filepath.Join(dir, rel)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[4] = 2 // the version byte after "PWMS"
	binenc.LittleEndian.PutUint32(b[len(b)-4:], crc32.Checksum(b[:len(b)-4], crc32.MakeTable(crc32.Castagnoli)))
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	r = runBin(t, "verify", dir)
	if r.code != exitProblems || !strings.Contains(r.stdout, "unknown version 2") {
		t.Fatalf("verify with a snapshot of a newer version:\n%v", r)
	}
	r = runBin(t, "inspect", dir)
	if r.code != exitProblems || !strings.Contains(r.stderr, "metadata cannot be read") {
		t.Fatalf("inspect with a snapshot of a newer version:\n%v", r)
	}
}

// TestVerifyMissingDirectory: a partition directory removed after the
// node closed cleanly is damage, even though the journal no longer holds
// the partition's records (a clean close dropped them) and an empty
// deferred partition (DESIGN behaviour 32) has no directory either: the
// manifest the node wrote at its close says this incarnation had one.
func TestVerifyMissingDirectory(t *testing.T) {
	dir := makeDir(t, 20)
	p := filepath.Dir(segments(t, dir, 1)[0])
	if err := os.RemoveAll(p); err != nil {
		t.Fatal(err)
	}
	r := runBin(t, "verify", dir)
	rel, _ := filepath.Rel(dir, p)
	if r.code != exitProblems || !strings.Contains(r.stdout, rel+":0: partition") ||
		!strings.Contains(r.stdout, "directory is missing (PARTITIONS records that it had one)") {
		t.Fatalf("verify:\n%v", r)
	}
}

// TestVerifyMissingDirectoryWithoutManifest pins the limit that is left:
// without the manifest of a clean close (the node crashed since it built
// the partition's files, or the file was removed too), a removed partition
// directory whose records the journal no longer holds looks like a
// partition that lives in the journal with no record yet, which the node
// builds empty: verify cannot call it a problem, and says so in a note.
func TestVerifyMissingDirectoryWithoutManifest(t *testing.T) {
	dir := makeDir(t, 20)
	p := filepath.Dir(segments(t, dir, 1)[0])
	if err := os.RemoveAll(p); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "PARTITIONS")); err != nil {
		t.Fatal(err)
	}
	r := runBin(t, "verify", dir)
	rel, _ := filepath.Rel(dir, p)
	if r.code != 0 || !strings.Contains(r.stdout, "note: "+rel+" has no directory") || !strings.Contains(r.stdout, "looks the same") {
		t.Fatalf("verify:\n%v", r)
	}
}

// TestVerifyDamagedManifest: a bit flipped in the manifest is reported at
// its byte; the partitions are still verified.
func TestVerifyDamagedManifest(t *testing.T) {
	dir := makeDir(t, 20)
	name := filepath.Join(dir, "PARTITIONS")
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-1] ^= 0x10
	if err := os.WriteFile(name, b, 0o644); err != nil {
		t.Fatal(err)
	}
	r := runBin(t, "verify", dir)
	if r.code != exitProblems || !strings.Contains(r.stdout, fmt.Sprintf("PARTITIONS:%d: manifest checksum mismatch", len(b)-4)) {
		t.Fatalf("verify:\n%v", r)
	}
}

// A replica built deferred (DESIGN behaviour 32) that never needed files
// of its own has its raft log alone in its directory, tagged with its
// incarnation: verify takes it as whole, and reads the log.
func TestVerifyClusterReplicaBuiltDeferred(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	cfg := parkway.Config{DataDir: dir, Shards: 2}
	inCluster(t, &cfg)
	node, err := parkway.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := node.Admin().CreateStream(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	tp, err := node.Admin().CreateTopic(ctx, st, "empty", 1)
	if err != nil {
		t.Fatal(err)
	}
	// A poll is answered by the replica's leader: once it is, the
	// replica and its raft log exist.
	if _, err := node.Poll(ctx, tp, 0, parkway.AtOffset(0), 1); err != nil {
		t.Fatal(err)
	}
	part := filepath.Join(dir, "streams", "0", "topics", "0", "partitions", "0")
	if _, err := os.Stat(filepath.Join(part, "raft.log")); err != nil {
		t.Fatal(err)
	}
	if err := node.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(part, "incarnation")); err == nil {
		t.Fatal("the empty replica has an incarnation file: it was not built deferred")
	}
	if r := runBin(t, "verify", dir); r.code != 0 {
		t.Fatalf("verify of a cluster directory holding a replica built deferred:\n%v", r)
	}
}
