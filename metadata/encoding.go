package metadata

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// ErrInvalidEncoding reports bytes that DecodeCommand or DecodeSnapshot
// cannot decode. The error returned is a *DecodeError wrapping it.
var ErrInvalidEncoding = errors.New("parkway: invalid metadata encoding")

// DecodeError describes where and why decoding failed. It matches
// ErrInvalidEncoding with errors.Is.
type DecodeError struct {
	What   string // what was decoded: "command", "snapshot", "log record"...
	Offset int    // byte offset of the problem in the input
	Reason string
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("%v: %s at byte %d: %s", ErrInvalidEncoding, e.What, e.Offset, e.Reason)
}

// Unwrap returns ErrInvalidEncoding.
func (e *DecodeError) Unwrap() error { return ErrInvalidEncoding }

// Command encoding
//
// A command encodes as
//
//	type    1 byte (cmdCreateStream ... cmdSetTopicConfig)
//	version 1 byte (1: the layout below; 2: the same, then the command's
//	        non-zero Revision, or CreateTopic's StreamRevision, as a
//	        uvarint — a command whose revision is 0 is always version 1,
//	        so an encoding stays canonical and logs written before
//	        revisions existed still decode; 3 and 4: versions 1 and 2
//	        whose TopicConfig is followed by its non-zero Replicas, a
//	        varint — only CreateTopic and SetTopicConfig, and only when
//	        Replicas is not 0, for the same reasons)
//	fields  in declaration order:
//	        uint32         uvarint
//	        int, Duration,
//	        int64          zig-zag varint
//	        string         uvarint byte length, then the raw bytes
//	        FsyncPolicy    1 byte
//	        TopicConfig    Fsync, FsyncInterval, RetentionAge, RetentionBytes
//	        uint64         uvarint (member ids, generations, offsets)
//	        []GroupOffset  uvarint count, then each Partition, Offset
//
// Every field value round-trips, including the invalid ones (negative
// counts, over-long or non-UTF-8 names, unknown fsync policies): a log
// records commands before they are validated, so a command that fails must
// fail identically when replayed. Decoding is strict and canonical: varints
// must be minimal, ids must fit a uint32, and nothing may follow the last
// field, so Encode(Decode(b)) == b for every b that decodes.
const (
	cmdCreateStream byte = iota + 1
	cmdDeleteStream
	cmdCreateTopic
	cmdDeleteTopic
	cmdCreatePartitions
	cmdDeletePartitions
	cmdPurgeTopic
	cmdSetTopicConfig
	cmdCreateGroup
	cmdDeleteGroup
	cmdJoinGroup
	cmdLeaveGroup
	cmdHeartbeat
	cmdCommitGroupOffsets
	cmdAddNode
	cmdDrainNode
	cmdRemoveNode
	cmdRebalance
	cmdSettleReplicas
	cmdExpireMembers
	cmdReseedReplica
)

const (
	commandVersion         = 1
	commandVersionRevision = 2
	// versions 1 and 2 plus the config's replication factor
	commandVersionReplicas         = 3
	commandVersionRevisionReplicas = 4
)

// EncodeCommand encodes a command (a value or a non-nil pointer). It fails
// only with ErrUnknownCommand.
func EncodeCommand(c Command) ([]byte, error) {
	c, ok := deref(c)
	if !ok {
		return nil, fmt.Errorf("%w: %T", ErrUnknownCommand, c)
	}
	var e encoder
	rev := commandRevision(c)
	if rev != 0 {
		e.version = commandVersionRevision
	}
	if commandReplicas(c) != 0 {
		e.replicas = true
		e.version = commandVersionReplicas
		if rev != 0 {
			e.version = commandVersionRevisionReplicas
		}
	}
	switch c := c.(type) {
	case CreateStream:
		e.header(cmdCreateStream)
		e.str(c.Name)
	case DeleteStream:
		e.header(cmdDeleteStream)
		e.uvarint(uint64(c.Stream))
	case CreateTopic:
		e.header(cmdCreateTopic)
		e.uvarint(uint64(c.Stream))
		e.str(c.Name)
		e.varint(int64(c.Partitions))
		e.config(c.Config)
	case DeleteTopic:
		e.header(cmdDeleteTopic)
		e.uvarint(uint64(c.Stream))
		e.uvarint(uint64(c.Topic))
	case CreatePartitions:
		e.header(cmdCreatePartitions)
		e.uvarint(uint64(c.Stream))
		e.uvarint(uint64(c.Topic))
		e.varint(int64(c.Count))
	case DeletePartitions:
		e.header(cmdDeletePartitions)
		e.uvarint(uint64(c.Stream))
		e.uvarint(uint64(c.Topic))
		e.varint(int64(c.Count))
	case PurgeTopic:
		e.header(cmdPurgeTopic)
		e.uvarint(uint64(c.Stream))
		e.uvarint(uint64(c.Topic))
	case SetTopicConfig:
		e.header(cmdSetTopicConfig)
		e.uvarint(uint64(c.Stream))
		e.uvarint(uint64(c.Topic))
		e.config(c.Config)
	case CreateGroup:
		e.header(cmdCreateGroup)
		e.uvarint(uint64(c.Stream))
		e.uvarint(uint64(c.Topic))
		e.str(c.Name)
	case DeleteGroup:
		e.header(cmdDeleteGroup)
		e.uvarint(uint64(c.Stream))
		e.uvarint(uint64(c.Topic))
		e.str(c.Name)
	case JoinGroup:
		e.header(cmdJoinGroup)
		e.uvarint(uint64(c.Stream))
		e.uvarint(uint64(c.Topic))
		e.str(c.Group)
		e.str(c.Member)
		e.varint(int64(c.SessionTimeout))
		e.varint(c.Now)
	case LeaveGroup:
		e.header(cmdLeaveGroup)
		e.uvarint(uint64(c.Stream))
		e.uvarint(uint64(c.Topic))
		e.str(c.Group)
		e.uvarint(c.Member)
		e.varint(c.Now)
	case Heartbeat:
		e.header(cmdHeartbeat)
		e.uvarint(uint64(c.Stream))
		e.uvarint(uint64(c.Topic))
		e.str(c.Group)
		e.uvarint(c.Member)
		e.varint(c.Now)
	case ExpireMembers:
		e.header(cmdExpireMembers)
		e.uvarint(uint64(c.Stream))
		e.uvarint(uint64(c.Topic))
		e.str(c.Group)
		e.uvarint(c.GroupRevision)
		e.varint(c.Now)
		e.uvarint(uint64(len(c.Members)))
		for _, m := range c.Members {
			e.uvarint(m)
		}
	case CommitGroupOffsets:
		e.header(cmdCommitGroupOffsets)
		e.uvarint(uint64(c.Stream))
		e.uvarint(uint64(c.Topic))
		e.str(c.Group)
		e.uvarint(c.Member)
		e.uvarint(c.Generation)
		e.varint(c.Now)
		e.uvarint(uint64(len(c.Offsets)))
		for _, o := range c.Offsets {
			e.uvarint(uint64(o.Partition))
			e.uvarint(o.Offset)
		}
	case AddNode:
		e.header(cmdAddNode)
		e.uvarint(c.Node)
	case DrainNode:
		e.header(cmdDrainNode)
		e.uvarint(c.Node)
	case RemoveNode:
		e.header(cmdRemoveNode)
		e.uvarint(c.Node)
	case Rebalance:
		e.header(cmdRebalance)
	case SettleReplicas:
		e.header(cmdSettleReplicas)
		e.uvarint(uint64(c.NS))
		e.uvarint(c.CreatedRevision)
		e.uvarint(c.Node)
	case ReseedReplica:
		e.header(cmdReseedReplica)
		e.uvarint(uint64(c.NS))
		e.uvarint(c.CreatedRevision)
		e.uvarint(c.Replica)
	}
	if rev != 0 {
		e.uvarint(rev)
	}
	return e.b, nil
}

// commandReplicas is the replication factor a command's config carries.
func commandReplicas(c Command) int {
	switch c := c.(type) {
	case CreateTopic:
		return c.Config.Replicas
	case SetTopicConfig:
		return c.Config.Replicas
	}
	return 0
}

// commandRevision is the incarnation a command names (0: none).
func commandRevision(c Command) uint64 {
	switch c := c.(type) {
	case DeleteStream:
		return c.Revision
	case CreateTopic:
		return c.StreamRevision
	case DeleteTopic:
		return c.Revision
	case CreatePartitions:
		return c.Revision
	case DeletePartitions:
		return c.Revision
	case PurgeTopic:
		return c.Revision
	case SetTopicConfig:
		return c.Revision
	case CreateGroup:
		return c.Revision
	case DeleteGroup:
		return c.Revision
	case JoinGroup:
		return c.Revision
	case LeaveGroup:
		return c.Revision
	case Heartbeat:
		return c.Revision
	case CommitGroupOffsets:
		return c.Revision
	case ExpireMembers:
		return c.Revision
	}
	return 0
}

// withRevision sets the incarnation a command names.
func withRevision(c Command, rev uint64) Command {
	switch c := c.(type) {
	case DeleteStream:
		c.Revision = rev
		return c
	case CreateTopic:
		c.StreamRevision = rev
		return c
	case DeleteTopic:
		c.Revision = rev
		return c
	case CreatePartitions:
		c.Revision = rev
		return c
	case DeletePartitions:
		c.Revision = rev
		return c
	case PurgeTopic:
		c.Revision = rev
		return c
	case SetTopicConfig:
		c.Revision = rev
		return c
	case CreateGroup:
		c.Revision = rev
		return c
	case DeleteGroup:
		c.Revision = rev
		return c
	case JoinGroup:
		c.Revision = rev
		return c
	case LeaveGroup:
		c.Revision = rev
		return c
	case Heartbeat:
		c.Revision = rev
		return c
	case CommitGroupOffsets:
		c.Revision = rev
		return c
	case ExpireMembers:
		c.Revision = rev
		return c
	}
	return c
}

// DecodeCommand decodes what EncodeCommand produced into a command value
// (never a pointer). Anything else is rejected with a *DecodeError; it
// never panics.
func DecodeCommand(b []byte) (Command, error) {
	d := decoder{b: b, what: "command", command: true}
	typ := d.byte()
	ver := d.byte()
	if d.err == nil && (ver < commandVersion || ver > commandVersionRevisionReplicas) {
		d.failAt(1, "unknown version "+strconv.Itoa(int(ver)))
	}
	d.replicas = ver >= commandVersionReplicas
	if d.replicas && typ != cmdCreateTopic && typ != cmdSetTopicConfig {
		d.failAt(1, "version "+strconv.Itoa(int(ver))+" of a command without a topic config")
	}
	if d.replicas {
		ver -= commandVersionReplicas - commandVersion
	}
	if d.err != nil {
		return nil, d.err
	}
	var c Command
	switch typ {
	case cmdCreateStream:
		c = CreateStream{Name: d.str()}
	case cmdDeleteStream:
		c = DeleteStream{Stream: d.u32()}
	case cmdCreateTopic:
		c = CreateTopic{Stream: d.u32(), Name: d.str(), Partitions: d.int(), Config: d.config()}
	case cmdDeleteTopic:
		c = DeleteTopic{Stream: d.u32(), Topic: d.u32()}
	case cmdCreatePartitions:
		c = CreatePartitions{Stream: d.u32(), Topic: d.u32(), Count: d.int()}
	case cmdDeletePartitions:
		c = DeletePartitions{Stream: d.u32(), Topic: d.u32(), Count: d.int()}
	case cmdPurgeTopic:
		c = PurgeTopic{Stream: d.u32(), Topic: d.u32()}
	case cmdSetTopicConfig:
		c = SetTopicConfig{Stream: d.u32(), Topic: d.u32(), Config: d.config()}
	case cmdCreateGroup:
		c = CreateGroup{Stream: d.u32(), Topic: d.u32(), Name: d.str()}
	case cmdDeleteGroup:
		c = DeleteGroup{Stream: d.u32(), Topic: d.u32(), Name: d.str()}
	case cmdJoinGroup:
		c = JoinGroup{Stream: d.u32(), Topic: d.u32(), Group: d.str(), Member: d.str(),
			SessionTimeout: time.Duration(d.varint()), Now: d.varint()}
	case cmdLeaveGroup:
		c = LeaveGroup{Stream: d.u32(), Topic: d.u32(), Group: d.str(), Member: d.uvarint(), Now: d.varint()}
	case cmdHeartbeat:
		c = Heartbeat{Stream: d.u32(), Topic: d.u32(), Group: d.str(), Member: d.uvarint(), Now: d.varint()}
	case cmdCommitGroupOffsets:
		cg := CommitGroupOffsets{Stream: d.u32(), Topic: d.u32(), Group: d.str(),
			Member: d.uvarint(), Generation: d.uvarint(), Now: d.varint()}
		// Each offset takes at least two bytes: the count is checked
		// against what remains before the list is sized from it.
		if n := d.count(2); n > 0 {
			cg.Offsets = make([]GroupOffset, n)
			for i := range cg.Offsets {
				cg.Offsets[i] = GroupOffset{Partition: d.u32(), Offset: d.uvarint()}
			}
		}
		c = cg
	case cmdAddNode:
		c = AddNode{Node: d.uvarint()}
	case cmdDrainNode:
		c = DrainNode{Node: d.uvarint()}
	case cmdRemoveNode:
		c = RemoveNode{Node: d.uvarint()}
	case cmdRebalance:
		c = Rebalance{}
	case cmdExpireMembers:
		em := ExpireMembers{Stream: d.u32(), Topic: d.u32(), Group: d.str(), GroupRevision: d.uvarint(), Now: d.varint()}
		// Each id takes at least a byte: the count is checked against
		// what remains before the list is sized from it.
		if n := d.count(1); n > 0 {
			em.Members = make([]uint64, n)
			for i := range em.Members {
				em.Members[i] = d.uvarint()
			}
		}
		c = em
	case cmdSettleReplicas:
		c = SettleReplicas{NS: Namespace(d.uvarint()), CreatedRevision: d.uvarint(), Node: d.uvarint()}
	case cmdReseedReplica:
		c = ReseedReplica{NS: Namespace(d.uvarint()), CreatedRevision: d.uvarint(), Replica: d.uvarint()}
	default:
		d.failAt(0, "unknown command type "+strconv.Itoa(int(typ)))
	}
	if ver == commandVersionRevision && d.err == nil {
		if typ == cmdCreateStream || (typ >= cmdAddNode && typ <= cmdSettleReplicas) || typ == cmdReseedReplica {
			d.failAt(1, "version 2 of a command that names no incarnation")
		}
		at := d.off
		if rev := d.uvarint(); d.err == nil {
			if rev == 0 {
				d.failAt(at, "revision 0 in version 2 (not canonical)")
			}
			c = withRevision(c, rev)
		}
	}
	if err := d.finish(); err != nil {
		return nil, err
	}
	return c, nil
}

// encoder appends fields to b.
type encoder struct {
	b       []byte
	version byte // 0: commandVersion
	// replicas: a TopicConfig carries its replication factor.
	replicas bool
}

func (e *encoder) header(typ byte) {
	v := e.version
	if v == 0 {
		v = commandVersion
	}
	e.b = append(e.b, typ, v)
}
func (e *encoder) byte(v byte)      { e.b = append(e.b, v) }
func (e *encoder) uvarint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) varint(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *encoder) str(s string)     { e.uvarint(uint64(len(s))); e.b = append(e.b, s...) }
func (e *encoder) config(c TopicConfig) {
	e.byte(byte(c.Fsync))
	e.varint(int64(c.FsyncInterval))
	e.varint(int64(c.RetentionAge))
	e.varint(c.RetentionBytes)
	if e.replicas {
		e.varint(int64(c.Replicas))
	}
}

// ids appends a list of node ids.
func (e *encoder) ids(ids []uint64) {
	e.uvarint(uint64(len(ids)))
	for _, id := range ids {
		e.uvarint(id)
	}
}

// decoder reads fields from b. The first failure sticks: later reads return
// zero values and the error reports the first problem.
type decoder struct {
	b    []byte
	off  int
	what string
	err  error
	// replicas: a TopicConfig carries its replication factor.
	replicas bool
	// command: a TopicConfig's replication factor must not be 0 (a
	// command's encoding carries it only when it is not).
	command bool
}

func (d *decoder) failAt(off int, reason string) {
	if d.err == nil {
		d.err = &DecodeError{What: d.what, Offset: off, Reason: reason}
	}
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if d.off >= len(d.b) {
		d.failAt(d.off, "unexpected end of input")
		return 0
	}
	v := d.b[d.off]
	d.off++
	return v
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	switch {
	case n == 0:
		d.failAt(d.off, "unexpected end of input")
		return 0
	case n < 0:
		d.failAt(d.off, "varint overflows 64 bits")
		return 0
	case n != uvarintLen(v):
		d.failAt(d.off, "varint not minimally encoded")
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) varint() int64 {
	u := d.uvarint()
	// Zig-zag, as binary.Varint.
	v := int64(u >> 1)
	if u&1 != 0 {
		v = ^v
	}
	return v
}

func (d *decoder) u32() uint32 {
	off := d.off
	v := d.uvarint()
	if v > math.MaxUint32 {
		d.failAt(off, fmt.Sprintf("id %d overflows 32 bits", v))
		return 0
	}
	return uint32(v)
}

func (d *decoder) int() int {
	off := d.off
	v := d.varint()
	if strconv.IntSize == 32 && (v < math.MinInt32 || v > math.MaxInt32) {
		d.failAt(off, fmt.Sprintf("%d overflows int", v))
		return 0
	}
	return int(v)
}

func (d *decoder) str() string {
	off := d.off
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)-d.off) {
		d.failAt(off, fmt.Sprintf("string of %d bytes overruns the input", n))
		return ""
	}
	s := string(d.b[d.off : d.off+int(n)])
	d.off += int(n)
	return s
}

func (d *decoder) config() TopicConfig {
	c := TopicConfig{
		Fsync:          FsyncPolicy(d.byte()),
		FsyncInterval:  time.Duration(d.varint()),
		RetentionAge:   time.Duration(d.varint()),
		RetentionBytes: d.varint(),
	}
	if d.replicas {
		at := d.off
		c.Replicas = d.int()
		if d.command && c.Replicas == 0 && d.err == nil {
			d.failAt(at, "replication factor 0 in a version that carries one (not canonical)")
		}
	}
	return c
}

// ids reads a list of at most limit node ids (nil when empty).
func (d *decoder) ids(limit int) []uint64 {
	off := d.off
	n := d.count(1)
	if n > limit {
		d.failAt(off, fmt.Sprintf("%d node ids, at most %d", n, limit))
		return nil
	}
	if n == 0 {
		return nil
	}
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = d.uvarint()
	}
	return ids
}

// count reads a list length; every element takes at least minSize bytes,
// so a length beyond what the remaining input can hold is garbage. It
// bounds allocations: a list is never sized from more than its input can
// hold.
func (d *decoder) count(minSize int) int {
	off := d.off
	n := d.uvarint()
	if d.err != nil {
		return 0
	}
	if n > uint64(len(d.b)-d.off)/uint64(minSize) {
		d.failAt(off, fmt.Sprintf("list of %d elements overruns the input", n))
		return 0
	}
	return int(n)
}

// finish reports the first failure, or trailing bytes.
func (d *decoder) finish() error {
	if d.err == nil && d.off != len(d.b) {
		d.failAt(d.off, fmt.Sprintf("%d trailing bytes", len(d.b)-d.off))
	}
	return d.err
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}
