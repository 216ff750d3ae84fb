package affinity_test

import (
	"errors"
	"runtime"
	"testing"

	"github.com/parkway-io/parkway/internal/affinity"
)

func TestPin(t *testing.T) {
	done := make(chan error)
	go func() {
		// The goroutine exits locked, so the runtime discards its pinned
		// thread.
		done <- affinity.Pin(0)
	}()
	err := <-done
	if runtime.GOOS != "linux" {
		if !errors.Is(err, affinity.ErrUnsupported) {
			t.Fatalf("Pin on %s: %v", runtime.GOOS, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("Pin(0): %v", err)
	}
	bad := make(chan error)
	go func() { bad <- affinity.Pin(1 << 20) }()
	if err := <-bad; err == nil {
		t.Fatal("pinning to a CPU that does not exist succeeded")
	}
}
