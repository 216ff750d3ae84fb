//go:build unix

package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// childEnv runs this test binary as the child of the signal tests: it
// catches the signals as main does, says it is ready, then writes lines
// to stdout until it is ended.
const childEnv = "IDLE_SIGNALS_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		reportSignals()
		setPhase("the signal tests' child running")
		for {
			if _, err := fmt.Println("ready"); err != nil {
				select {} // a closed pipe: the signal's report ends the process
			}
		}
	}
	os.Exit(m.Run())
}

// startChild starts the child with its stdout piped to the test, and
// waits for its first line (its signals are caught by then).
func startChild(t *testing.T) (*exec.Cmd, *os.File, *strings.Builder) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = w, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if _, err := bufio.NewReader(r).ReadString('\n'); err != nil {
		t.Fatalf("the child's first line: %v (stderr %q)", err, stderr.String())
	}
	return cmd, r, &stderr
}

// endedWith checks that the child exited with status 2 after saying
// which signal ended it and what it was doing: a signal the command does
// not catch ends a Go program without a word (what a 300,000-partition
// run did).
func endedWith(t *testing.T, cmd *exec.Cmd, stderr *strings.Builder, sig string) {
	t.Helper()
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("child ended with %v, want exit status 2 (stderr %q)", err, stderr.String())
	}
	want := "idle: ended by " + sig + " while the signal tests' child running (resident "
	if !strings.Contains(stderr.String(), want) {
		t.Fatalf("child's stderr %q, want a line with %q", stderr.String(), want)
	}
}

func TestTerminationIsReported(t *testing.T) {
	cmd, r, stderr := startChild(t)
	defer r.Close()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	endedWith(t, cmd, stderr, "terminated")
}

func TestClosedOutputIsReported(t *testing.T) {
	cmd, r, stderr := startChild(t)
	r.Close() // the reader of its output is gone, as with `| head`
	endedWith(t, cmd, stderr, "broken pipe")
}
