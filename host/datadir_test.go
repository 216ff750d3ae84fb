package host_test

import (
	"errors"
	"os"
	"testing"

	"github.com/parkway-io/parkway/clock"
	"github.com/parkway-io/parkway/host"
)

// TestBehaviour27DataDirLockEngine: a host that builds engines with
// package host directly gets the data directory's lock: a second
// host.New on a held directory fails with *host.LockedError naming it and
// this process, and succeeds once the first engine is closed.
func TestBehaviour27DataDirLockEngine(t *testing.T) {
	dir := t.TempDir()
	cfg := host.Config{Shards: 1, Manual: true, DataDir: dir, Clock: clock.NewManual(t0)}
	first, err := host.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	second, err := host.New(cfg)
	var locked *host.LockedError
	if !errors.As(err, &locked) || !errors.Is(err, host.ErrDataDirLocked) || locked.Dir != dir || locked.PID != os.Getpid() {
		if second != nil {
			_ = second.Close()
		}
		t.Fatalf("second New on a held directory: %v, want a *LockedError naming %s and pid %d", err, dir, os.Getpid())
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := host.New(cfg)
	if err != nil {
		t.Fatalf("New after Close: %v", err)
	}
	_ = again.Close()
}
