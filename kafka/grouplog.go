package kafka

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// The group log. Every consumer group's state is written, as records, to
// its partition of the internal topic __group_coordinators — as Kafka
// writes it to __consumer_offsets: the group's generation, protocol,
// leader and members with their assignments once a rebalance completes
// (SyncGroup) or the group empties, every OffsetCommit, and the removals
// of OffsetDelete and DeleteGroups. A record's message key is the group
// id; its payload is one of the forms below.
//
// Each write is fenced to the raft term in which the coordinator loaded
// the partition (Cluster.ProduceInTerm): only the leader elected in that
// term proposes it, and an entry of a term commits only in that term's
// log. A coordinator that lost the partition's leadership — cut off,
// paused, or deposed and elected again — therefore cannot commit an
// offset after the new coordinator loaded the group: the new one first
// writes a load marker in its own term and replays the partition up to
// it, so it holds every write that committed before, and none commits
// after it from an older term.
//
// Layout: a version byte (1), a kind byte, then by kind (integers big
// endian; a string is a uint16 length and its bytes; bytes are a uint32
// length and the bytes):
//
//	marker:  nothing (a coordinator's load point)
//	group:   generation int32, protocol type, protocol, leader (strings),
//	         member count uint16, each member: id, client id, client
//	         host (strings), session and rebalance timeouts (uint32 ms),
//	         protocol metadata, assignment (bytes)
//	commit:  count uint32, each: topic (string), topic revision uint64,
//	         partition int32, offset int64 (written before commits kept
//	         their metadata; still read)
//	commit with metadata: as commit, each entry followed by the
//	         commit's metadata string (OffsetCommit's, at most
//	         maxCommitMetadata bytes)
//	forget:  count uint32, each: topic (string), partition int32 (OffsetDelete)
//	delete:  nothing (DeleteGroups: the group and all its offsets)
//	consumer: a whole consumer group (KIP-848, consumergroup.go),
//	         written before version 2 and still read, no longer
//	         written: group epoch and target epoch int32, topic count
//	         uint16, each: name (string), topic ID (16 bytes),
//	         partitions int32; member count uint16, each: id, client
//	         id, client host (strings), rebalance timeout uint32 ms,
//	         epoch and previous epoch int32, subscribed topic count
//	         uint16 and the names (strings), then its target, its
//	         assigned partitions and its revoking ones (each of these
//	         two followed by the epoch int32 it was given at), each list
//	         a uint32 count of topic (string) and partition int32
//
// Version 2 (the version byte 2) holds a consumer group as records of
// its parts, as Kafka's coordinator writes a consumer group to
// __consumer_offsets, so a change writes what changed — its members'
// records and, when its epochs or topics moved, the group's — rather
// than the whole group (consumerDelta, cglog.go). Each replaces
// the last record of its kind for its group (and member), and a gone
// record ends a member's three; a whole-group record of version 1 is
// their union:
//
//	cgroup:     group epoch and target epoch int32, the topic list of
//	            consumer (count uint16, name, ID, partitions)
//	csubscribe: member id, client id, client host (strings), rebalance
//	            timeout uint32 ms, subscribed topic count uint16 and the
//	            names (strings)
//	ctarget:    member id (string), its target (a partition list)
//	ccurrent:   member id (string), epoch and previous epoch int32, its
//	            assigned and its revoking partitions (each a partition
//	            list, each partition followed by the epoch int32 it was
//	            given at)
//	cgone:      member id (string): the member left or was removed
//
// The kinds of version 1 keep version 1 (their bytes do not change);
// the kinds of version 2 are read only under version 2.

const (
	groupLogVersion  = 1
	groupLogVersion2 = 2 // the consumer group's per-member records
)

type logKind byte

const (
	logMarker logKind = iota + 1
	logGroup
	logCommit
	logForget
	logDelete
	logCommitMeta // a commit whose offsets carry their metadata strings
	logConsumer   // a consumer group's whole state (KIP-848; version 1, read only)
	// Version 2: a consumer group's state in parts.
	logCGroup     // its epochs and topics
	logCSubscribe // a member's subscription and client
	logCTarget    // a member's target assignment
	logCCurrent   // a member's epochs and held partitions
	logCGone      // a member removed
)

// versionOf is the version a record of kind k is written with.
func versionOf(k logKind) byte {
	if k >= logCGroup {
		return groupLogVersion2
	}
	return groupLogVersion
}

// maxCommitMetadata bounds the metadata string of a committed offset, as
// Kafka's offset.metadata.max.bytes does (its default): a longer one is
// refused with OFFSET_METADATA_TOO_LARGE.
const maxCommitMetadata = 4096

// errGroupLog reports a record that is not one of the forms above.
var errGroupLog = errors.New("kafka: malformed group log record")

// logMember is a member as the group record keeps it.
type logMember struct {
	id, clientID, clientHost string
	sessionMs, rebalanceMs   uint32
	metadata, assignment     []byte
}

// logGroupState is a group record's body.
type logGroupState struct {
	generation                     int32
	protocolType, protocol, leader string
	members                        []logMember
}

// topicPart names a committed offset: a topic by name and a partition.
type topicPart struct {
	topic string
	part  int32
}

// logOffset is one committed offset of a commit record; revision is the
// topic incarnation it was committed for (a topic deleted and recreated
// under the name does not inherit it).
type logOffset struct {
	tp       topicPart
	revision uint64
	offset   int64
	metadata string // the committer's, as OffsetFetch answers it
}

// logCTopic is a topic of a consumer group's view.
type logCTopic struct {
	name  string
	id    [16]byte
	parts int32
}

// logAssigned is a partition a consumer group member holds, with the
// member epoch it was given the partition at.
type logAssigned struct {
	tp    topicPart
	epoch int32
}

// logCMember is a consumer group member as its group record keeps it.
type logCMember struct {
	id, clientID, clientHost string
	rebalanceMs              uint32
	epoch, prevEpoch         int32
	topics                   []string
	target                   []topicPart
	assigned                 []logAssigned
	revoking                 []logAssigned
}

// logConsumerState is a consumer group record's body.
type logConsumerState struct {
	epoch, targetEpoch int32
	topics             []logCTopic
	members            []logCMember
}

// logRecord is a decoded record.
type logRecord struct {
	kind     logKind
	group    logGroupState    // logGroup
	consumer logConsumerState // logConsumer; logCGroup (no members)
	// member is the member of logCSubscribe, logCTarget, logCCurrent and
	// logCGone, with the fields its kind holds.
	member  logCMember
	commits []logOffset // logCommit, logCommitMeta
	forgets []topicPart // logForget
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

func appendBytes(b []byte, p []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
	return append(b, p...)
}

// encodeLogRecord writes r. Strings longer than 65,535 bytes cannot be
// written (group ids, member ids, topic names and protocols are far
// shorter: they are checked where they enter).
func encodeLogRecord(r *logRecord) ([]byte, error) {
	b := []byte{versionOf(r.kind), byte(r.kind)}
	long := func(s string) bool { return len(s) > math.MaxUint16 }
	switch r.kind {
	case logMarker, logDelete:
	case logGroup:
		g := &r.group
		if long(g.protocolType) || long(g.protocol) || long(g.leader) || len(g.members) > math.MaxUint16 {
			return nil, fmt.Errorf("%w: a field is too long", errGroupLog)
		}
		b = binary.BigEndian.AppendUint32(b, uint32(g.generation))
		b = appendString(b, g.protocolType)
		b = appendString(b, g.protocol)
		b = appendString(b, g.leader)
		b = binary.BigEndian.AppendUint16(b, uint16(len(g.members)))
		for _, m := range g.members {
			if long(m.id) || long(m.clientID) || long(m.clientHost) {
				return nil, fmt.Errorf("%w: a member field is too long", errGroupLog)
			}
			b = appendString(b, m.id)
			b = appendString(b, m.clientID)
			b = appendString(b, m.clientHost)
			b = binary.BigEndian.AppendUint32(b, m.sessionMs)
			b = binary.BigEndian.AppendUint32(b, m.rebalanceMs)
			b = appendBytes(b, m.metadata)
			b = appendBytes(b, m.assignment)
		}
	case logCommit, logCommitMeta:
		b = binary.BigEndian.AppendUint32(b, uint32(len(r.commits)))
		for _, c := range r.commits {
			if long(c.tp.topic) || long(c.metadata) {
				return nil, fmt.Errorf("%w: a topic name or metadata is too long", errGroupLog)
			}
			if r.kind == logCommit && c.metadata != "" {
				return nil, fmt.Errorf("%w: metadata in a commit without", errGroupLog)
			}
			b = appendString(b, c.tp.topic)
			b = binary.BigEndian.AppendUint64(b, c.revision)
			b = binary.BigEndian.AppendUint32(b, uint32(c.tp.part))
			b = binary.BigEndian.AppendUint64(b, uint64(c.offset))
			if r.kind == logCommitMeta {
				b = appendString(b, c.metadata)
			}
		}
	case logForget:
		b = binary.BigEndian.AppendUint32(b, uint32(len(r.forgets)))
		for _, tp := range r.forgets {
			if long(tp.topic) {
				return nil, fmt.Errorf("%w: a topic name is too long", errGroupLog)
			}
			b = appendString(b, tp.topic)
			b = binary.BigEndian.AppendUint32(b, uint32(tp.part))
		}
	case logConsumer:
		return nil, fmt.Errorf("%w: whole consumer group records are no longer written", errGroupLog)
	case logCGroup:
		if len(r.consumer.members) > 0 {
			return nil, fmt.Errorf("%w: members in a consumer group's epoch record", errGroupLog)
		}
		return appendCGroup(b, &r.consumer)
	case logCSubscribe, logCTarget, logCCurrent, logCGone:
		return appendCMember(b, r.kind, &r.member)
	default:
		return nil, fmt.Errorf("%w: kind %d", errGroupLog, r.kind)
	}
	return b, nil
}

func appendParts(b []byte, tps []topicPart, epochs []int32) ([]byte, error) {
	b = binary.BigEndian.AppendUint32(b, uint32(len(tps)))
	for i, tp := range tps {
		if len(tp.topic) > math.MaxUint16 {
			return nil, fmt.Errorf("%w: a topic name is too long", errGroupLog)
		}
		b = appendString(b, tp.topic)
		b = binary.BigEndian.AppendUint32(b, uint32(tp.part))
		if epochs != nil {
			b = binary.BigEndian.AppendUint32(b, uint32(epochs[i]))
		}
	}
	return b, nil
}

// appendCGroup writes a consumer group's epochs and topics.
func appendCGroup(b []byte, g *logConsumerState) ([]byte, error) {
	if len(g.topics) > math.MaxUint16 {
		return nil, fmt.Errorf("%w: too many topics", errGroupLog)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(g.epoch))
	b = binary.BigEndian.AppendUint32(b, uint32(g.targetEpoch))
	b = binary.BigEndian.AppendUint16(b, uint16(len(g.topics)))
	for _, t := range g.topics {
		if len(t.name) > math.MaxUint16 {
			return nil, fmt.Errorf("%w: a topic name is too long", errGroupLog)
		}
		b = appendString(b, t.name)
		b = append(b, t.id[:]...)
		b = binary.BigEndian.AppendUint32(b, uint32(t.parts))
	}
	return b, nil
}

// appendCMember writes the part of member m a record of kind k holds.
func appendCMember(b []byte, k logKind, m *logCMember) ([]byte, error) {
	long := func(s string) bool { return len(s) > math.MaxUint16 }
	if long(m.id) {
		return nil, fmt.Errorf("%w: a member id is too long", errGroupLog)
	}
	b = appendString(b, m.id)
	switch k {
	case logCSubscribe:
		if long(m.clientID) || long(m.clientHost) || len(m.topics) > math.MaxUint16 {
			return nil, fmt.Errorf("%w: a member field is too long", errGroupLog)
		}
		b = appendString(b, m.clientID)
		b = appendString(b, m.clientHost)
		b = binary.BigEndian.AppendUint32(b, m.rebalanceMs)
		b = binary.BigEndian.AppendUint16(b, uint16(len(m.topics)))
		for _, t := range m.topics {
			if long(t) {
				return nil, fmt.Errorf("%w: a topic name is too long", errGroupLog)
			}
			b = appendString(b, t)
		}
	case logCTarget:
		return appendParts(b, m.target, nil)
	case logCCurrent:
		b = binary.BigEndian.AppendUint32(b, uint32(m.epoch))
		b = binary.BigEndian.AppendUint32(b, uint32(m.prevEpoch))
		return appendHeld(b, m)
	}
	return b, nil
}

// appendHeld writes m's assigned and revoking partitions, each with the
// epoch it was given at.
func appendHeld(b []byte, m *logCMember) ([]byte, error) {
	var err error
	for _, held := range [][]logAssigned{m.assigned, m.revoking} {
		tps := make([]topicPart, len(held))
		epochs := make([]int32, len(held))
		for i, a := range held {
			tps[i], epochs[i] = a.tp, a.epoch
		}
		if b, err = appendParts(b, tps, epochs); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// logReader reads a record's fields, each length checked against the
// bytes left before anything is allocated.
type logReader struct {
	b   []byte
	err error
}

func (r *logReader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.err = fmt.Errorf("%w: %d bytes wanted, %d left", errGroupLog, n, len(r.b))
		return nil
	}
	out := r.b[:n:n]
	r.b = r.b[n:]
	return out
}

func (r *logReader) u16() uint16 {
	if p := r.take(2); p != nil {
		return binary.BigEndian.Uint16(p)
	}
	return 0
}

func (r *logReader) u32() uint32 {
	if p := r.take(4); p != nil {
		return binary.BigEndian.Uint32(p)
	}
	return 0
}

func (r *logReader) u64() uint64 {
	if p := r.take(8); p != nil {
		return binary.BigEndian.Uint64(p)
	}
	return 0
}

func (r *logReader) str() string { return string(r.take(int(r.u16()))) }

func (r *logReader) bytes() []byte {
	n := r.u32()
	if uint64(n) > uint64(len(r.b)) {
		r.take(len(r.b) + 1) // fails with the lengths
		return nil
	}
	p := r.take(int(n))
	if len(p) == 0 {
		return nil
	}
	return append([]byte(nil), p...)
}

// count reads an element count and checks that the bytes left can hold
// that many elements of at least min bytes each.
func (r *logReader) count(n uint32, min int) int {
	if r.err == nil && uint64(n)*uint64(min) > uint64(len(r.b)) {
		r.err = fmt.Errorf("%w: %d elements in %d bytes", errGroupLog, n, len(r.b))
	}
	if r.err != nil {
		return 0
	}
	return int(n)
}

// decodeLogRecord reads a record encodeLogRecord wrote. Hostile input
// (the partition's bytes could be written by anything with access to the
// stream) is refused with errGroupLog, never a panic.
func decodeLogRecord(p []byte) (*logRecord, error) {
	if len(p) < 2 || (p[0] != groupLogVersion && p[0] != groupLogVersion2) {
		return nil, fmt.Errorf("%w: no version %d or %d header", errGroupLog, groupLogVersion, groupLogVersion2)
	}
	r := &logReader{b: p[2:]}
	out := &logRecord{kind: logKind(p[1])}
	if p[0] != versionOf(out.kind) {
		return nil, fmt.Errorf("%w: kind %d in a version %d record", errGroupLog, out.kind, p[0])
	}
	switch out.kind {
	case logMarker, logDelete:
	case logGroup:
		g := &out.group
		g.generation = int32(r.u32())
		g.protocolType, g.protocol, g.leader = r.str(), r.str(), r.str()
		// A member is at least three empty strings, two timeouts and two
		// empty byte strings.
		n := r.count(uint32(r.u16()), 3*2+2*4+2*4)
		if n > 0 {
			g.members = make([]logMember, 0, n)
		}
		for range n {
			var m logMember
			m.id, m.clientID, m.clientHost = r.str(), r.str(), r.str()
			m.sessionMs, m.rebalanceMs = r.u32(), r.u32()
			m.metadata, m.assignment = r.bytes(), r.bytes()
			if r.err != nil {
				break
			}
			g.members = append(g.members, m)
		}
	case logCommit, logCommitMeta:
		least := 2 + 8 + 4 + 8
		if out.kind == logCommitMeta {
			least += 2
		}
		n := r.count(r.u32(), least)
		if n > 0 {
			out.commits = make([]logOffset, 0, n)
		}
		for range n {
			var c logOffset
			c.tp.topic = r.str()
			c.revision = r.u64()
			c.tp.part = int32(r.u32())
			c.offset = int64(r.u64())
			if out.kind == logCommitMeta {
				c.metadata = r.str()
			}
			if r.err != nil {
				break
			}
			out.commits = append(out.commits, c)
		}
	case logForget:
		n := r.count(r.u32(), 2+4)
		if n > 0 {
			out.forgets = make([]topicPart, 0, n)
		}
		for range n {
			var tp topicPart
			tp.topic = r.str()
			tp.part = int32(r.u32())
			if r.err != nil {
				break
			}
			out.forgets = append(out.forgets, tp)
		}
	case logConsumer:
		out.consumer = r.consumer()
	case logCGroup:
		out.consumer = r.cgroupHead()
	case logCSubscribe, logCTarget, logCCurrent, logCGone:
		out.member = r.cmember(out.kind)
	default:
		return nil, fmt.Errorf("%w: kind %d", errGroupLog, out.kind)
	}
	if r.err != nil {
		return nil, r.err
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes left over", errGroupLog, len(r.b))
	}
	return out, nil
}

// parts reads a list of partitions (with their epochs when withEpochs).
func (r *logReader) parts(withEpochs bool) ([]topicPart, []int32) {
	least := 2 + 4
	if withEpochs {
		least += 4
	}
	n := r.count(r.u32(), least)
	if n == 0 {
		return nil, nil
	}
	tps := make([]topicPart, 0, n)
	var epochs []int32
	if withEpochs {
		epochs = make([]int32, 0, n)
	}
	for range n {
		tp := topicPart{topic: r.str(), part: int32(r.u32())}
		var e int32
		if withEpochs {
			e = int32(r.u32())
		}
		if r.err != nil {
			return nil, nil
		}
		tps = append(tps, tp)
		if withEpochs {
			epochs = append(epochs, e)
		}
	}
	return tps, epochs
}

// cgroupHead reads a consumer group's epochs and topics (the head of a
// whole-group record, and all of an epoch record).
func (r *logReader) cgroupHead() logConsumerState {
	var g logConsumerState
	g.epoch, g.targetEpoch = int32(r.u32()), int32(r.u32())
	nt := r.count(uint32(r.u16()), 2+16+4)
	if nt > 0 {
		g.topics = make([]logCTopic, 0, nt)
	}
	for range nt {
		var t logCTopic
		t.name = r.str()
		copy(t.id[:], r.take(16))
		t.parts = int32(r.u32())
		if r.err != nil {
			return g
		}
		g.topics = append(g.topics, t)
	}
	return g
}

// held reads a list of partitions with the epochs they were given at.
func (r *logReader) held() []logAssigned {
	tps, epochs := r.parts(true)
	var out []logAssigned
	if len(tps) > 0 {
		out = make([]logAssigned, 0, len(tps))
	}
	for i := range tps {
		out = append(out, logAssigned{tp: tps[i], epoch: epochs[i]})
	}
	return out
}

// subscription reads a member's subscribed topic names.
func (r *logReader) subscription() []string {
	ns := r.count(uint32(r.u16()), 2)
	var out []string
	if ns > 0 {
		out = make([]string, 0, ns)
	}
	for range ns {
		t := r.str()
		if r.err != nil {
			return nil
		}
		out = append(out, t)
	}
	return out
}

// cmember reads a member record of kind k (version 2).
func (r *logReader) cmember(k logKind) logCMember {
	m := logCMember{id: r.str()}
	switch k {
	case logCSubscribe:
		m.clientID, m.clientHost = r.str(), r.str()
		m.rebalanceMs = r.u32()
		m.topics = r.subscription()
	case logCTarget:
		m.target, _ = r.parts(false)
	case logCCurrent:
		m.epoch, m.prevEpoch = int32(r.u32()), int32(r.u32())
		m.assigned = r.held()
		m.revoking = r.held()
	}
	return m
}

// consumer reads a whole consumer group record's body (version 1).
func (r *logReader) consumer() logConsumerState {
	g := r.cgroupHead()
	if r.err != nil {
		return g
	}
	// A member is at least three empty strings, a timeout, two epochs,
	// an empty topic list and three empty partition lists.
	nm := r.count(uint32(r.u16()), 3*2+4+4+4+2+3*4)
	if nm > 0 {
		g.members = make([]logCMember, 0, nm)
	}
	for range nm {
		var m logCMember
		m.id, m.clientID, m.clientHost = r.str(), r.str(), r.str()
		m.rebalanceMs = r.u32()
		m.epoch, m.prevEpoch = int32(r.u32()), int32(r.u32())
		m.topics = r.subscription()
		m.target, _ = r.parts(false)
		m.assigned = r.held()
		m.revoking = r.held()
		if r.err != nil {
			return g
		}
		g.members = append(g.members, m)
	}
	return g
}
