//go:build unix

package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// lockShared takes a shared, non-blocking flock on the data directory's
// LOCK file if there is one (a node holds it exclusively while it runs):
// held reports a node holding it, with the pid the file names (0 if
// unknown). The file is opened read-only and never created. The returned
// function releases the lock.
func lockShared(name string) (release func(), held bool, pid int, err error) {
	f, err := os.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return func() {}, false, 0, nil
	}
	if err != nil {
		return nil, false, 0, err
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB)
		if err != unix.EINTR {
			break
		}
	}
	switch {
	case err == nil:
		return func() { f.Close() }, false, 0, nil
	case errors.Is(err, unix.EWOULDBLOCK):
		b, _ := io.ReadAll(io.LimitReader(f, 32))
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		f.Close()
		return func() {}, true, pid, nil
	}
	f.Close()
	return nil, false, 0, fmt.Errorf("lock %s: %w", name, err)
}
