// Package affinity pins the calling goroutine's OS thread to one CPU, for
// hosts that want a shard's pump to stay on its core.
package affinity

import (
	"errors"
	"runtime"
)

// ErrUnsupported reports a platform without CPU affinity.
var ErrUnsupported = errors.New("parkway: cpu pinning unsupported on this platform")

// Pin locks the calling goroutine to its OS thread and restricts that
// thread to cpu. The goroutine stays locked until it exits: the runtime then
// destroys the thread, and the restricted mask dies with it instead of
// leaking into the thread pool that runs the host's goroutines.
func Pin(cpu int) error {
	runtime.LockOSThread()
	if err := setAffinity(cpu); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	return nil
}
