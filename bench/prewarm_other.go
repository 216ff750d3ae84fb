//go:build !unix

package bench

// prewarm does nothing where anonymous memory cannot be mapped and
// unmapped directly.
func prewarm(int) error { return nil }
