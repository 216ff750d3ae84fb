//go:build !linux

package affinity

func setAffinity(int) error { return ErrUnsupported }
