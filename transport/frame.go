package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Wire format of one frame (all integers big-endian):
//
//	uint32 length   // bytes that follow: header + payload
//	uint64 from
//	uint64 to
//	uint8  kind
//	uint64 group
//	[]byte payload  // length - headerLen bytes
//
// Frames carry no checksum or authentication of their own: with TLS the
// record layer authenticates and encrypts them and the connection's peer is
// the authenticated sender (a frame whose from differs is refused); in
// insecure plaintext mode TCP's checksum is all there is and from is taken
// on trust.
const (
	prefixLen     = 4
	headerLen     = 8 + 8 + 1 + 8
	frameOverhead = prefixLen + headerLen

	// DefaultMaxFrame bounds a frame's length field (header + payload).
	DefaultMaxFrame = 64 << 20
)

// errBadFrame marks a frame that violates the format; the connection that
// carried it is closed.
var errBadFrame = errors.New("bus: bad frame")

// putHeader encodes m's length prefix and header into h.
func putHeader(h *[frameOverhead]byte, m *Message) {
	binary.BigEndian.PutUint32(h[0:], uint32(headerLen+len(m.Payload)))
	binary.BigEndian.PutUint64(h[4:], uint64(m.From))
	binary.BigEndian.PutUint64(h[12:], uint64(m.To))
	h[20] = m.Kind
	binary.BigEndian.PutUint64(h[21:], m.Group)
}

// appendFrame appends the encoding of m to dst.
func appendFrame(dst []byte, m *Message) []byte {
	var h [frameOverhead]byte
	putHeader(&h, m)
	dst = append(dst, h[:]...)
	return append(dst, m.Payload...)
}

// writeFrame writes m to w, using h as scratch.
func writeFrame(w io.Writer, h *[frameOverhead]byte, m *Message) error {
	putHeader(h, m)
	if _, err := w.Write(h[:]); err != nil {
		return err
	}
	if len(m.Payload) == 0 {
		return nil
	}
	_, err := w.Write(m.Payload)
	return err
}

// readFrame reads exactly one frame from r, using h as scratch. A length
// field below the header size or above maxFrame is errBadFrame (checked
// before anything is allocated); io.EOF means r ended cleanly between
// frames, io.ErrUnexpectedEOF inside one. An empty payload decodes as nil.
func readFrame(r io.Reader, h *[frameOverhead]byte, maxFrame uint32) (Message, error) {
	n, err := readLength(r, h, maxFrame)
	if err != nil {
		return Message{}, err
	}
	return readBody(r, h, n, nil)
}

// readLength reads a frame's length field into h and checks it against
// [headerLen, maxFrame]. It is split from readBody so the caller can charge
// the frame against its memory budget before the payload is allocated.
func readLength(r io.Reader, h *[frameOverhead]byte, maxFrame uint32) (uint32, error) {
	if _, err := io.ReadFull(r, h[:prefixLen]); err != nil {
		return 0, err
	}
	n := binary.BigEndian.Uint32(h[0:])
	if n < headerLen || n > maxFrame {
		return 0, fmt.Errorf("%w: length %d outside [%d, %d]", errBadFrame, n, headerLen, maxFrame)
	}
	return n, nil
}

// readBody reads the header and payload of a frame whose length field n
// readLength accepted, allocating exactly n-headerLen payload bytes.
func readBody(r io.Reader, h *[frameOverhead]byte, n uint32, bufs *bufPool) (Message, error) {
	m, err := readHeader(r, h)
	if err != nil {
		return Message{}, err
	}
	if p := n - headerLen; p > 0 {
		m.Payload = bufs.get(int(p))
		if _, err := io.ReadFull(r, m.Payload); err != nil {
			return Message{}, noEOF(err)
		}
	}
	return m, nil
}

// readHeader reads the header that follows a frame's length field into h
// and returns the message it describes, without its payload: a receiver
// learns the sender before it charges or allocates the payload.
func readHeader(r io.Reader, h *[frameOverhead]byte) (Message, error) {
	if _, err := io.ReadFull(r, h[prefixLen:]); err != nil {
		return Message{}, noEOF(err)
	}
	return Message{
		From:  NodeID(binary.BigEndian.Uint64(h[4:])),
		To:    NodeID(binary.BigEndian.Uint64(h[12:])),
		Kind:  h[20],
		Group: binary.BigEndian.Uint64(h[21:]),
	}, nil
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
