//go:build unix

package main

import (
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// regularFiles lists the files in dir's subdirectories (metadata,
// streams, journal, raft logs: what verify reads), sorted; files at the
// top (LOCK, which holds a pid nothing reads back, and any other a node
// keeps there) are left out.
func regularFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() && filepath.Dir(path) != filepath.Clean(dir) {
			out = append(out, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// TestEveryFlippedByteIsFound flips one byte at a random place of a
// random file of a clean directory, many times over (a fixed seed): every
// byte of a data directory is covered by a checksum or checked against
// what covers it, so verify must find each one, and inspect and dump
// must answer with an exit code, never a panic (runBin fails on one).
func TestEveryFlippedByteIsFound(t *testing.T) {
	base := makeDir(t, 2000)
	for _, cluster := range []bool{false, true} {
		src := base
		if cluster {
			src = makeDir(t, 300, inCluster)
		}
		rng := rand.New(rand.NewPCG(7, uint64(len(src))))
		files := regularFiles(t, src)
		for i := range 25 {
			dir := copyDir(t, src)
			rel, _ := filepath.Rel(src, files[rng.IntN(len(files))])
			path := filepath.Join(dir, rel)
			size := fileSize(t, path)
			if size == 0 {
				continue
			}
			off := rng.Int64N(size)
			flip(t, path, off)
			r := runBin(t, "verify", dir)
			t.Logf("byte %d of %s: %s", off, rel, strings.SplitN(r.stdout, "\n", 2)[0])
			if r.code != exitProblems {
				t.Errorf("round %d: byte %d of %s flipped: verify exit %d, want 1\n%v", i, off, rel, r.code, r)
			}
			for _, args := range [][]string{{"inspect", dir}, {"inspect", "--json", dir},
				{"dump", dir, "--stream", "shop", "--topic", "orders", "--partition", "0"}} {
				r := runBin(t, args...)
				if r.code != 0 && r.code != exitProblems && r.code != exitDir && r.code != exitUsage {
					t.Errorf("round %d: %s after byte %d of %s flipped: exit %d\n%v", i, strings.Join(args[:1], " "), off, rel, r.code, r)
				}
			}
			os.RemoveAll(dir)
		}
	}
}

// TestRandomTruncationsNeverPanic cuts a random file of a clean directory
// at a random length, many times over (a fixed seed): every command
// answers with an exit code. (Not every cut is damage: a tail's index
// cut at an entry boundary is one a node completes at open, and a tail
// segment cut at a record boundary looks like a shorter log.)
func TestRandomTruncationsNeverPanic(t *testing.T) {
	src := makeDir(t, 2000)
	rng := rand.New(rand.NewPCG(11, 3))
	files := regularFiles(t, src)
	found := 0
	for i := range 25 {
		dir := copyDir(t, src)
		rel, _ := filepath.Rel(src, files[rng.IntN(len(files))])
		path := filepath.Join(dir, rel)
		size := fileSize(t, path)
		cut := rng.Int64N(size + 1)
		if err := os.Truncate(path, cut); err != nil {
			t.Fatal(err)
		}
		before := checksum(t, dir)
		for _, args := range [][]string{{"verify", dir}, {"inspect", dir}, {"inspect", "--json", dir},
			{"dump", dir, "--stream", "shop", "--topic", "orders", "--partition", "0"}} {
			r := runBin(t, args...)
			if r.code < 0 || r.code > exitDir {
				t.Errorf("round %d: %s after %s cut to %d of %d bytes: exit %d\n%v", i, args[0], rel, cut, size, r.code, r)
			}
			if args[0] == "verify" {
				if r.code == exitProblems {
					found++
				} else {
					t.Logf("round %d: %s cut to %d of %d bytes: verify exit %d", i, rel, cut, size, r.code)
				}
			}
		}
		if checksum(t, dir) != before {
			t.Fatalf("round %d: a read-only command changed the directory", i)
		}
		os.RemoveAll(dir)
	}
	t.Logf("verify found %d of 25 cuts", found)
}
