package replica

import (
	"crypto/rand"
	"encoding/binary"
)

// IDBase returns a random start for ids a process numbers its requests
// with, for ids that must not repeat across the process's lives: a reply
// or an entry addressed to an id an earlier life issued must not be taken
// for one addressed to the same id in this life (raft proposal ids here,
// a node's forwarded-request ids in host). It is odd and below 2^63, so a
// counter counting up from it neither wraps nor reaches 0.
// The simulator does not seed it: its runs stay reproducible because no
// trace line and no scheduling choice depends on an id's value
// (internal/sim's same-seed tests would fail if one did). It allocates
// nothing (every raft group draws one as it is built; io.ReadFull
// through rand.Reader made the eight bytes escape to the heap).
func IDBase() (uint64, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:])>>1 | 1, nil
}
