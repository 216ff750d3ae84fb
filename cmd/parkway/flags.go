package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// cmdFlags is a command's flag set and its usage text.
type cmdFlags struct {
	*flag.FlagSet
	usage string
}

// newFlags returns a flag set for command name; usage says what the
// command does and what its arguments are.
func newFlags(name, usage string, stderr io.Writer) *cmdFlags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	// The flag package calls Usage on --help and on a bad flag alike;
	// parse prints it, to stdout for --help and to stderr otherwise.
	fs.Usage = func() {}
	return &cmdFlags{FlagSet: fs, usage: usage}
}

func (f *cmdFlags) printUsage(w io.Writer) {
	f.SetOutput(w)
	fmt.Fprint(w, f.usage)
	fmt.Fprintln(w, "\nFlags:")
	f.PrintDefaults()
}

// parse parses args, allowing flags before and after the positional
// arguments (parkway dump DIR --topic t), and returns the positional
// ones. --help prints the usage to stdout and returns errHelp; a bad flag
// is a usage error.
func (f *cmdFlags) parse(args []string, stdout io.Writer) ([]string, error) {
	var pos []string
	for {
		if err := f.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				f.printUsage(stdout)
				return nil, errHelp
			}
			f.printUsage(f.Output())
			return nil, &exitError{code: exitUsage, err: errQuiet}
		}
		if f.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, f.Arg(0))
		args = f.Args()[1:]
	}
}

// oneDir checks that the positional arguments are exactly a directory.
func oneDir(name string, pos []string) (string, error) {
	switch len(pos) {
	case 0:
		return "", usageErr("%s: missing the data directory (parkway %s DIR)", name, name)
	case 1:
		return pos[0], nil
	}
	return "", usageErr("%s: one data directory expected, got %d arguments", name, len(pos))
}
