// Command parkway runs a parkway node and looks inside its data
// directory.
//
//	parkway serve    run one node (flags and PARKWAY_* environment variables)
//	parkway inspect  streams, topics, partitions, groups and raft state of a data directory
//	parkway verify   check every checksum and offset of a data directory
//	parkway dump     print a partition's messages as JSON lines
//	parkway remove-node  remove a node from a running cluster (through members started with --admin)
//
// inspect, verify and dump never change a byte of the directory: they read
// it through the node's own code (the partition, metadata and raft log
// packages) opened read-only, with none of the repairs a node makes when
// it opens a directory (torn tails are reported, not truncated). A
// directory a running node holds (its LOCK file is locked) is refused
// unless --force is given, and then read with a warning: the data may be
// moving underneath.
//
// Exit codes:
//
//	0  success (verify: nothing wrong found)
//	1  problems found (verify), or damaged data stopped inspect or dump;
//	   serve: the node failed to start or stopped with an error
//	2  usage error: unknown command or flag, missing argument, no such
//	   stream, topic or partition
//	3  the directory cannot be read: missing, not a parkway data
//	   directory, permission denied, or held by a running node (without
//	   --force)
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// Exit codes (see the package documentation).
const (
	exitOK       = 0
	exitProblems = 1
	exitUsage    = 2
	exitDir      = 3
)

// exitError carries an exit code with the message printed for it.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageErr(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

func dirErr(err error) error { return &exitError{code: exitDir, err: err} }

func problemsErr(err error) error { return &exitError{code: exitProblems, err: err} }

const topUsage = `usage: parkway <command> [flags] [args]

Commands:
  serve    run one node from flags and environment variables
  inspect  show a data directory's streams, topics, partitions, groups and raft state
  verify   check every record, index entry and log of a data directory
  dump     print a partition's messages as JSON lines
  remove-node  remove a node from a running cluster, through members'
           --http listeners (members started with --admin)

Run 'parkway <command> --help' for a command's flags.

Exit codes: 0 ok; 1 problems found (or damaged data stopped the command);
2 usage error; 3 the directory cannot be read (missing, not a parkway data
directory, permission denied, or held by a running node without --force).
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the command line args and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, topUsage)
		return exitUsage
	}
	var err error
	switch cmd, rest := args[0], args[1:]; cmd {
	case "serve":
		err = runServe(rest, stdout, stderr)
	case "inspect":
		err = runInspect(rest, stdout, stderr)
	case "verify":
		err = runVerify(rest, stdout, stderr)
	case "dump":
		err = runDump(rest, stdout, stderr)
	case "remove-node":
		err = runRemoveNode(rest, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, topUsage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "parkway: unknown command %q\n\n%s", cmd, topUsage)
		return exitUsage
	}
	if err == nil {
		return exitOK
	}
	if errors.Is(err, errHelp) {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil && !errors.Is(ee.err, errQuiet) {
			fmt.Fprintf(stderr, "parkway: %v\n", ee.err)
		}
		return ee.code
	}
	fmt.Fprintf(stderr, "parkway: %v\n", err)
	return exitProblems
}

// errHelp ends a command that printed its help; errQuiet one whose
// message was printed already.
var (
	errHelp  = errors.New("help")
	errQuiet = errors.New("reported")
)
