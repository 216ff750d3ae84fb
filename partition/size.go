package partition

import (
	"errors"
	"syscall"
)

// ErrNoSpace reports a write refused because the disk is full (ENOSPC).
// The partition is not damaged: reads go on, and writes succeed again once
// space returns. It wraps the filesystem's error.
var ErrNoSpace = errors.New("parkway: no space left on device")

// ClassifyNoSpace returns err wrapped with ErrNoSpace when it is a disk
// full error that is not yet, and err otherwise.
func ClassifyNoSpace(err error) error {
	if err != nil && errors.Is(err, syscall.ENOSPC) && !errors.Is(err, ErrNoSpace) {
		return errors.Join(ErrNoSpace, err)
	}
	return err
}

// MessageSize is the bytes a message's key, payload and headers take in a
// record, header framing included: what the message-size limits count.
// A message with many empty headers is not free.
func MessageSize(m *Message) int {
	return len(m.Key) + int(headersSize(m.Headers)) + len(m.Payload)
}
