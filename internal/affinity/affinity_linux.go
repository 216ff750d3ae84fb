//go:build linux

package affinity

import (
	"fmt"

	"golang.org/x/sys/unix"
)

func setAffinity(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("parkway: pin to cpu %d: %w", cpu, err)
	}
	return nil
}
