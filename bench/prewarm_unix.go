//go:build unix

package bench

import "syscall"

// prewarm maps mib MiB of anonymous memory, writes one byte to each page
// and unmaps it: the pages go back to the kernel's free lists backed by
// the host, where the page cache takes its next pages from (Config.PrewarmMiB).
func prewarm(mib int) error {
	if mib <= 0 {
		return nil
	}
	b, err := syscall.Mmap(-1, 0, mib<<20, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return err
	}
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	return syscall.Munmap(b)
}
