//go:build unix

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/parkway-io/parkway"
)

func TestUsageAndHelp(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		out  string // in stdout (code 0) or stderr
	}{
		{nil, exitUsage, "usage: parkway <command>"},
		{[]string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{[]string{"--help"}, exitOK, "Exit codes"},
		{[]string{"verify", "--help"}, exitOK, "usage: parkway verify"},
		{[]string{"inspect", "--help"}, exitOK, "usage: parkway inspect"},
		{[]string{"dump", "--help"}, exitOK, "usage: parkway dump"},
		{[]string{"serve", "--help"}, exitOK, "usage: parkway serve"},
		{[]string{"verify"}, exitUsage, "missing the data directory"},
		{[]string{"verify", "a", "b"}, exitUsage, "one data directory expected"},
		{[]string{"verify", "--bogus", "x"}, exitUsage, "flag provided but not defined"},
		{[]string{"verify", "--progress", "loud", "x"}, exitUsage, "--progress must be"},
	} {
		r := runBin(t, c.args...)
		out := r.stderr
		if c.code == exitOK {
			out = r.stdout
		}
		if r.code != c.code || !strings.Contains(out, c.out) {
			t.Errorf("parkway %v: want exit %d and %q\n%v", c.args, c.code, c.out, r)
		}
	}
}

// TestBadDirectories: whatever the directory, the read-only commands
// answer with a message and exit 3 (1 for damage), never a panic.
func TestBadDirectories(t *testing.T) {
	empty := t.TempDir()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	foreign := t.TempDir()
	if err := os.WriteFile(filepath.Join(foreign, "notes.txt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, dir, want string
	}{
		{"missing", filepath.Join(empty, "nothing-here"), "no such file or directory"},
		{"empty", empty, "not a parkway data directory"},
		{"a file", file, "not a directory"},
		{"foreign", foreign, "not a parkway data directory"},
	} {
		for _, cmd := range readOnlyCommands {
			r := runBin(t, cmd, c.dir)
			if r.code != exitDir || !strings.Contains(r.stderr, c.want) {
				t.Errorf("%s of a %s directory: want exit 3 and %q\n%v", cmd, c.name, c.want, r)
			}
		}
	}
}

// TestUnreadableDirectory runs verify as a user that cannot read a
// partition's directory, then the whole data directory. Under root, which
// reads everything, the command runs as nobody.
func TestUnreadableDirectory(t *testing.T) {
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		cred = &syscall.Credential{Uid: 65534, Gid: 65534}
	}
	// A directory everyone can reach, so nobody can reach the data.
	top, err := os.MkdirTemp("", "parkway-unreadable")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(top) })
	dir := filepath.Join(top, "data")
	if err := os.CopyFS(dir, os.DirFS(makeDir(t, 5))); err != nil {
		t.Fatal(err)
	}
	if err := filepath.Walk(top, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chmod(path, fi.Mode().Perm()|0o555)
	}); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(binary(t)), 0o755); err != nil {
		t.Fatal(err)
	}
	part := filepath.Dir(segments(t, dir, 0)[0])
	before := checksum(t, dir)
	if err := os.Chmod(part, 0); err != nil {
		t.Fatal(err)
	}
	r := runBinAs(t, cred, "verify", dir)
	if r.code == 0 || !strings.Contains(r.stdout+r.stderr, "permission denied") {
		t.Fatalf("verify with an unreadable partition directory:\n%v", r)
	}
	if err := os.Chmod(part, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o755) })
	r = runBinAs(t, cred, "verify", dir)
	if r.code != exitDir || !strings.Contains(r.stderr, "permission denied") {
		t.Fatalf("verify of an unreadable directory:\n%v", r)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if checksum(t, dir) != before {
		t.Fatal("verify changed the directory")
	}
}

// TestEmptyFiles empties one file at a time: each is found.
func TestEmptyFiles(t *testing.T) {
	base := makeDir(t, 3000)
	for _, c := range []struct {
		name string
		file func(dir string) string
		want string
	}{
		{"metadata log", func(dir string) string {
			w, _ := filepath.Glob(filepath.Join(dir, "metadata", "wal-*"))
			return w[0]
		}, "orphan partition directory"},
		{"tail segment", func(dir string) string { return segments(t, dir, 1)[0] }, "names no record"},
		{"consumer offset", func(dir string) string {
			return filepath.Join(filepath.Dir(segments(t, dir, 0)[0]), "offsets", "consumers", "billing")
		}, "consumer offset file of 0 bytes"},
		{"incarnation", func(dir string) string {
			return filepath.Join(filepath.Dir(segments(t, dir, 0)[0]), "incarnation")
		}, "incarnation file unparsable"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := copyDir(t, base)
			if err := os.Truncate(c.file(dir), 0); err != nil {
				t.Fatal(err)
			}
			before := checksum(t, dir)
			r := runBin(t, "verify", dir)
			if r.code != exitProblems || !strings.Contains(r.stdout, c.want) {
				t.Fatalf("verify with an empty %s: want exit 1 and %q\n%v", c.name, c.want, r)
			}
			if checksum(t, dir) != before {
				t.Fatal("verify changed the directory")
			}
		})
	}
}

// TestLockedDirectory: a directory whose LOCK a running node holds is
// refused, and read with a warning under --force; an unheld LOCK file
// changes nothing.
func TestLockedDirectory(t *testing.T) {
	dir := makeDir(t, 5)
	lock := filepath.Join(dir, "LOCK")
	if err := os.WriteFile(lock, []byte("4242\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := runBin(t, "verify", dir); r.code != 0 {
		t.Fatalf("verify with an unheld LOCK file:\n%v", r)
	}
	f, err := os.OpenFile(lock, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	before := checksum(t, dir)
	for _, cmd := range readOnlyCommands {
		r := runBin(t, cmd, dir)
		if r.code != exitDir || !strings.Contains(r.stderr, "held by a running node (pid 4242)") || !strings.Contains(r.stderr, "--force") {
			t.Fatalf("%s of a held directory: want exit 3 naming the holder\n%v", cmd, r)
		}
		r = runBin(t, cmd, "--force", dir)
		if r.code != 0 || !strings.Contains(r.stderr, "may be moving") {
			t.Fatalf("%s --force of a held directory: want exit 0 and a warning\n%v", cmd, r)
		}
	}
	if checksum(t, dir) != before {
		t.Fatal("a read-only command changed the directory")
	}
}

// readOnlyCommands are the commands that take a data directory.
var readOnlyCommands = []string{"verify", "inspect"}

// TestDirectoryOfARunningNode: a node open on the directory holds its
// lock; the read-only commands refuse it naming the node's pid, and read
// it with a warning under --force.
func TestDirectoryOfARunningNode(t *testing.T) {
	dir := makeDir(t, 20)
	node, err := parkway.Open(parkway.Config{DataDir: dir, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	want := fmt.Sprintf("held by a running node (pid %d)", os.Getpid())
	for _, cmd := range readOnlyCommands {
		r := runBin(t, cmd, dir)
		if r.code != exitDir || !strings.Contains(r.stderr, want) {
			t.Fatalf("%s of a running node's directory: want exit 3 and %q\n%v", cmd, want, r)
		}
		if r := runBin(t, cmd, "--force", dir); r.code > exitProblems || !strings.Contains(r.stderr, "may be moving") {
			t.Fatalf("%s --force of a running node's directory:\n%v", cmd, r)
		}
	}
}
