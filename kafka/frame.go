package kafka

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Why a request is refused before it is served: each closes the
// connection, as a Kafka broker does (an unsupported ApiVersions is the
// exception: it is answered).
var (
	errFrameSize          = errors.New("kafka: request size outside the limit")
	errUnknownKey         = errors.New("kafka: unknown API key")
	errUnsupportedVersion = errors.New("kafka: unsupported API version")
	errMalformed          = errors.New("kafka: malformed request")
	errUnauthenticated    = errors.New("kafka: request before SASL authentication")
)

// versionRange is the versions of one API key this listener serves.
type versionRange struct{ min, max int16 }

// served lists the API keys served and their versions: the ranges current
// clients use, each capped at what the handler fills in correctly.
// Produce starts at 3 and Fetch at 4, the first versions that carry
// record batches v2 (the only record format served).
var served = map[int16]versionRange{
	int16(kmsg.Produce):                 {3, 13},
	int16(kmsg.Fetch):                   {4, 17},
	int16(kmsg.ListOffsets):             {1, 10},
	int16(kmsg.OffsetForLeaderEpoch):    {0, 4},
	int16(kmsg.Metadata):                {1, 13},
	int16(kmsg.ApiVersions):             {0, 4},
	int16(kmsg.CreateTopics):            {2, 7},
	int16(kmsg.DeleteTopics):            {1, 6},
	int16(kmsg.InitProducerID):          {0, 5},
	int16(kmsg.DescribeCluster):         {0, 1},
	int16(kmsg.FindCoordinator):         {0, 4},
	int16(kmsg.JoinGroup):               {0, 9},
	int16(kmsg.SyncGroup):               {0, 5},
	int16(kmsg.Heartbeat):               {0, 4},
	int16(kmsg.LeaveGroup):              {0, 5},
	int16(kmsg.OffsetCommit):            {0, 9},
	int16(kmsg.OffsetFetch):             {0, 7},
	int16(kmsg.ListGroups):              {0, 4},
	int16(kmsg.DescribeGroups):          {0, 5},
	int16(kmsg.DeleteGroups):            {0, 2},
	int16(kmsg.OffsetDelete):            {0, 0},
	int16(kmsg.CreatePartitions):        {0, 3},
	int16(kmsg.DeleteRecords):           {0, 2},
	int16(kmsg.DescribeConfigs):         {0, 4},
	int16(kmsg.IncrementalAlterConfigs): {0, 1},
	// KIP-848's consumer group protocol: v1 is the one clients use (a
	// member id of the client's making).
	int16(kmsg.ConsumerGroupHeartbeat): {1, 1},
	int16(kmsg.ConsumerGroupDescribe):  {0, 1},
	// Handshake v0 would be followed by raw SASL tokens outside Kafka's
	// framing; v1 wraps them in SaslAuthenticate, which every current
	// client uses.
	int16(kmsg.SASLHandshake):    {1, 1},
	int16(kmsg.SASLAuthenticate): {0, 2},
}

// reqHeader is a request header (versions 1 and 2).
type reqHeader struct {
	key, version int16
	corr         int32
	clientID     *string
	flexible     bool // header v2 and a flexible body; the response header then carries tags
}

// parseRequest decodes one request frame (what follows the size prefix):
// the header here, the body through kmsg. It returns errUnknownKey or
// errUnsupportedVersion with the header read (the caller answers an
// ApiVersions with UNSUPPORTED_VERSION), or errMalformed.
func parseRequest(frame []byte) (reqHeader, kmsg.Request, error) {
	var h reqHeader
	if len(frame) < 10 { // key, version, correlation id, client id length
		return h, nil, fmt.Errorf("%w: %d-byte frame", errMalformed, len(frame))
	}
	h.key = int16(binary.BigEndian.Uint16(frame))
	h.version = int16(binary.BigEndian.Uint16(frame[2:]))
	h.corr = int32(binary.BigEndian.Uint32(frame[4:]))
	n := int16(binary.BigEndian.Uint16(frame[8:]))
	rest := frame[10:]
	switch {
	case n == -1:
	case n < -1 || int(n) > len(rest):
		return h, nil, fmt.Errorf("%w: client id of %d bytes, %d left", errMalformed, n, len(rest))
	default:
		id := string(rest[:n])
		h.clientID, rest = &id, rest[n:]
	}
	req := kmsg.RequestForKey(h.key)
	if req == nil {
		return h, nil, fmt.Errorf("%w %d", errUnknownKey, h.key)
	}
	vr, ok := served[h.key]
	if !ok {
		return h, nil, fmt.Errorf("%w: %s is not served", errUnknownKey, apiName(h.key))
	}
	if h.version < vr.min || h.version > vr.max {
		return h, nil, fmt.Errorf("%w: %s v%d (serving v%d-v%d)", errUnsupportedVersion, apiName(h.key), h.version, vr.min, vr.max)
	}
	req.SetVersion(h.version)
	h.flexible = req.IsFlexible()
	if h.flexible {
		r := tagReader{src: rest}
		kmsg.SkipTags(&r)
		if r.bad {
			return h, nil, fmt.Errorf("%w: header tags", errMalformed)
		}
		rest = r.src
	}
	if err := req.ReadFrom(rest); err != nil {
		return h, nil, fmt.Errorf("%w: %s v%d: %v", errMalformed, apiName(h.key), h.version, err)
	}
	return h, req, nil
}

// tagReader is kmsg.TagReader over a byte slice: every read checks the
// bytes left and marks the reader bad instead of reading past them.
type tagReader struct {
	src []byte
	bad bool
}

func (r *tagReader) Ok() bool { return !r.bad }

func (r *tagReader) Uvarint() uint32 {
	v, n := binary.Uvarint(r.src)
	if n <= 0 || v > 1<<31 {
		r.bad, r.src = true, nil
		return 0
	}
	r.src = r.src[n:]
	return uint32(v)
}

func (r *tagReader) Span(n int) []byte {
	if n < 0 || n > len(r.src) {
		r.bad, r.src = true, nil
		return nil
	}
	s := r.src[:n]
	r.src = r.src[n:]
	return s
}

// appendResponse appends a response frame — size prefix, header, body —
// for a request with header h.
func appendResponse(dst []byte, h reqHeader, resp kmsg.Response) []byte {
	if f, ok := resp.(*kmsg.FetchResponse); ok {
		dst = slices.Grow(dst, fetchResponseBound(f))
	}
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(h.corr))
	// Response header v1 (tags) follows a flexible request, except for
	// ApiVersions, whose response header is always v0 so that a client
	// can read it whatever versions it guessed.
	if h.flexible && h.key != int16(kmsg.ApiVersions) {
		dst = append(dst, 0)
	}
	resp.SetVersion(h.version)
	dst = resp.AppendTo(dst)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}

// fetchResponseBound is about the encoded size of resp's frame, a little
// over:
// its record batches, most of it, and a generous allowance for each
// topic's and partition's fixed fields. appendResponse reserves it up
// front, so a response of megabytes is copied into the frame once rather
// than once more at every doubling of the frame (the connection's frame
// buffer starts empty after any large response, so every large fetch grew
// it from nothing).
func fetchResponseBound(resp *kmsg.FetchResponse) int {
	n := 64 // the frame's size, the response header, the top-level fields
	for i := range resp.Topics {
		t := &resp.Topics[i]
		n += 64 + len(t.Topic)
		for j := range t.Partitions {
			n += 128 + len(t.Partitions[j].RecordBatches)
		}
	}
	return n
}

// apiVersionsResponse lists the versions served. An ApiVersions of a
// version not served is answered in version 0 with UNSUPPORTED_VERSION,
// as Kafka brokers do, so the client can retry with one that is.
func apiVersionsResponse(version int16, code int16) *kmsg.ApiVersionsResponse {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = version
	resp.ErrorCode = code
	for key := int16(0); key < 128; key++ {
		vr, ok := served[key]
		if !ok {
			continue
		}
		k := kmsg.NewApiVersionsResponseApiKey()
		k.ApiKey, k.MinVersion, k.MaxVersion = key, vr.min, vr.max
		resp.ApiKeys = append(resp.ApiKeys, k)
	}
	return resp
}
