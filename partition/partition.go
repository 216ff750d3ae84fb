// Package partition stores the messages of one partition: an append-only
// log with dense offsets, and the consumer offsets stored beside it.
//
// A Partition never knows who routes to it. It is owned by exactly one
// shard and used only from that shard's pump goroutine, so implementations
// need no locks and must not be shared between goroutines. The one
// exception is Sync: a shard closes a commit group by syncing its dirty
// partitions concurrently, each from a goroutine the pump waits for, so
// Sync of different partitions (of one Store) may run at the same time —
// never two calls on one partition, and never while anything else uses
// it.
//
// Two stores are provided: MemStore keeps everything in memory (tests,
// embedded caches), FileStore keeps segments on disk in the reference
// server's layout:
//
//	<dir>/streams/<s>/topics/<t>/partitions/<p>/<base offset, 20 digits>.log
//	                                           /<base offset, 20 digits>.index
//	                                           /<base offset, 20 digits>.timeindex
//	                                           /incarnation (the epoch)
//	                                           /start (the start offset, once truncated)
//	                                           /offsets/consumers/<name>
//	                                           /offsets/groups/
//
// A FileStore also offers group commit across partitions (Journal): a
// shard hands the partitions of a commit group to its handle on the
// store's one journal, which writes their new records — with those of
// every other shard committing at the same time — to one journal file
// with one write and one fdatasync; the partitions' own files are synced
// lazily. The journal files
// live beside the partitions, never among them:
//
//	<dir>/journal/<number, 20 digits>.journal
//
// because the partition lifecycle is driven by the reconciler through
// Build, Remove and List, which only ever see <dir>/streams/: a partition
// deleted, recreated at a new incarnation, or swept as an orphan at start
// takes nothing of a journal with it, and a journal keeps no partition
// directory alive. NewFileStore replays the journals before anything else
// touches the store, so by the time the node lists its partitions and
// the reconcilers build them, every acknowledged record is in its
// partition's own files (records of a dead incarnation skipped), the
// journal files are gone, and a changed shard count does not matter. A
// journal's open file (one per store) counts in the descriptor budget.
//
// A FileStore holds a bounded number of descriptors over all its
// partitions (FileConfig.MaxOpenFiles): segment files are opened when
// used and idle ones closed least recently used first, so a node can
// hold far more partitions than the process may open files.
//
// Build and Remove of a namespace whose Partition is still open are
// ErrInUse in both stores: Close the partition first.
//
// OpenReadOnlyStore opens a FileStore's directory for offline tools: the
// same open and the same checks, none of the repairs, nothing written
// (readonly.go); VerifyPartition and VerifyJournals read everything with
// the same decoders and report every problem with its file and byte.
package partition

import (
	"errors"
	"fmt"

	"github.com/parkway-io/parkway/metadata"
	"github.com/parkway-io/parkway/vfs"
)

// Header is one user header of a message.
type Header struct {
	Key   string
	Value []byte
}

// Message is one record of a partition log.
type Message struct {
	// Offset is assigned by Append; the value passed in is ignored.
	Offset uint64
	// ID is a 128-bit message id chosen by the producer (zero is allowed).
	ID [16]byte
	// Timestamp is microseconds since the Unix epoch, set by the producer
	// (Kafka's CreateTime). The partition keeps it as given and never
	// reads a clock; retention by age compares against it.
	Timestamp int64
	// AppendTime is microseconds since the Unix epoch at which the owner
	// appended the message (Kafka's LogAppendTime): the shard stamps it
	// from its clock before Append (a replicated partition's leader, before
	// proposing, so every replica stores the same value). Append keeps
	// append times non-decreasing along the log: a message stamped below
	// its predecessor (a clock step back, a new leader with a slower
	// clock) gets its predecessor's, and one stamped 0 gets its Timestamp
	// first. OffsetForTime searches it. Messages stored in the format 1
	// record (before append times were kept) read back with AppendTime
	// equal to Timestamp.
	AppendTime int64
	// Key is the message key, kept with the message (nil for none). A
	// produce with Key partitioning chose the partition by it.
	Key []byte
	// Headers are optional user headers.
	Headers []Header
	// Payload is the message body. Append copies it (Keeper.AppendKept,
	// where a partition offers it, keeps it); messages returned by Read,
	// their Key, Headers and Payload included, must be treated as
	// read-only.
	Payload []byte
}

// Partition is one partition's log. Implementations are not safe for
// concurrent use: the owning shard is the only caller, one goroutine at a
// time (its pump, or a caller running its frame while the pump waits,
// holding the shard's run token).
type Partition interface {
	// Namespace is the partition's namespace.
	Namespace() metadata.Namespace
	// Epoch is the incarnation (committed created_revision) this partition
	// was built for.
	Epoch() uint64
	// Append assigns consecutive offsets starting at NextOffset to msgs and
	// appends them whole or not at all. It returns the first assigned offset.
	// An empty batch is ErrEmptyBatch.
	Append(msgs []Message) (first uint64, err error)
	// Read returns up to max messages starting at offset from (fewer at the
	// end of the log; none, with no error, at or past NextOffset). An offset
	// below the log's start is ErrOffsetOutOfRange. FileStore: a read stops
	// below damaged or missing messages, returning those before them; the
	// read that starts at one returns a *CorruptError (see FileStore.Build).
	// MemStore: a read returns the stored messages themselves, not a copy,
	// and stops at the end of the run holding from (at most 1,024
	// messages appended one produce after another, or one encoded batch,
	// EncodedKeeper), so it may return fewer than max below NextOffset;
	// read on from the next offset. The returned messages (the structs and the bytes they point
	// to) are read-only for every store: nothing may write them, and an
	// append to the returned slice does not reach the log.
	Read(from uint64, max int) ([]Message, error)
	// OffsetForTime returns the offset of the first readable message
	// whose AppendTime is at or after t (µs since the Unix epoch), or
	// NextOffset if there is none. FileStore searches a per-segment time
	// index; it is exact for append times written by Append (which keeps
	// them non-decreasing) and approximate over older segments whose
	// records carry producer timestamps only.
	OffsetForTime(t int64) (uint64, error)
	// NextOffset is the offset the next appended message will get.
	NextOffset() uint64
	// StartOffset is the first readable offset: 0 until TruncateBefore or
	// EnforceRetention removes a prefix of the log. Reads below it are
	// ErrOffsetOutOfRange. StartOffset <= NextOffset always.
	StartOffset() uint64
	// Sync makes every message appended so far durable: once it returns
	// nil they survive a crash of the process or of the machine. Append
	// itself does not sync (unless FileConfig.Sync is set), so the owner
	// decides when to pay for it: per topic fsync policy, group commit of
	// several batches. A message is acknowledged to a producer only after
	// a Sync that followed its Append returned nil.
	//
	// A failed Sync leaves the partition unusable (every later Append,
	// Sync and TruncateBefore returns the same error): after a failed
	// fsync the kernel may have dropped the dirty data, so what is durable
	// is unknown. Close it and Build it again, which recovers the log from
	// what is on disk. MemStore's Sync does nothing. Sync of different
	// partitions may run concurrently (see the package documentation).
	Sync() error
	// TruncateBefore makes the messages below offset unreadable and
	// deletes whatever only they occupy (FileStore: whole segments, never
	// the active one). The new StartOffset is recorded durably before
	// anything is deleted, so it survives a reopen. offset at or below
	// StartOffset is a no-op; offset past NextOffset is
	// ErrOffsetOutOfRange. Offsets are never reused: NextOffset does not
	// change, and TruncateBefore(NextOffset()) purges the partition (the
	// next message still gets NextOffset). Consumer offsets are kept.
	//
	// On error StartOffset may already have advanced (the truncation took
	// effect but not every file was deleted); the deletion is retried by
	// the next TruncateBefore or EnforceRetention and on reopen.
	TruncateBefore(offset uint64) error
	// SkipTo makes the partition empty and continues it at offset: every
	// message is removed and StartOffset = NextOffset = offset. A replica
	// catching up uses it when its peers have removed (truncated, purged
	// or retired) the messages it lacks: the offsets are skipped, never
	// reused. offset at or below NextOffset is TruncateBefore(offset).
	// Durable once it returns (FileStore: the new start is recorded before
	// a segment is created at offset). Consumer offsets are kept.
	SkipTo(offset uint64) error
	// EnforceRetention removes a prefix of the log by age and by size,
	// and returns the number of messages removed (StartOffset advances by
	// that much). Units are removed oldest first, and only as a prefix:
	//
	//   - if olderThanMicros != 0, units whose newest message timestamp is
	//     below olderThanMicros, stopping at the first unit that is not;
	//   - then, if maxBytes > 0, the oldest units while Size() > maxBytes.
	//
	// The unit is a whole non-active segment for FileStore (so the log
	// never shrinks below its active segment, and a removed segment's
	// space is returned to the filesystem), a single message for MemStore
	// (which may remove every message). Removal goes through
	// TruncateBefore, so it is durable before files are deleted.
	EnforceRetention(olderThanMicros int64, maxBytes int64) (removed uint64, err error)
	// Size is the number of bytes the log occupies. FileStore: the sum of
	// its segments' logical sizes (a prefix hidden by TruncateBefore in
	// the oldest segment still counts until that segment is deleted).
	// MemStore: the encoded size of the readable messages (as FileStore
	// would store them), so byte limits mean the same in both stores.
	Size() int64
	// StoreConsumerOffset records a consumer's offset (durably for
	// FileStore). Storing an offset past NextOffset is ErrOffsetOutOfRange.
	StoreConsumerOffset(consumer string, offset uint64) error
	// ConsumerOffset returns the consumer's stored offset.
	ConsumerOffset(consumer string) (offset uint64, ok bool, err error)
	// DeleteConsumerOffset removes the consumer's stored offset (durably
	// for FileStore); removing one that is not stored is no error.
	DeleteConsumerOffset(consumer string) error
	// ConsumerOffsets returns every stored consumer offset, by consumer
	// (a copy).
	ConsumerOffsets() map[string]uint64
	// Close releases files. The partition's data stays in its store.
	Close() error
}

// Store builds and removes partitions. Build and Remove do I/O and are
// called by the reconciler, off the shard pump.
type Store interface {
	// Build creates the partition for (ns, epoch): its directory, its first
	// segment (preallocated when configured) and its offsets directories. If
	// the store already holds ns at the same epoch (a clean reopen), Build
	// opens it with its messages and consumer offsets; if it holds ns at
	// another epoch, that dead incarnation's data is discarded first.
	Build(ns metadata.Namespace, epoch uint64) (Partition, error)
	// Remove deletes everything the store holds for ns. Removing a
	// namespace the store does not hold is not an error.
	Remove(ns metadata.Namespace) error
	// List returns every partition the store holds, with the epoch it was
	// built for, sorted by namespace. The node uses it at open to remove
	// orphans: partitions the committed metadata no longer has, or has at
	// another incarnation.
	List() ([]Stored, error)
}

// stampAppendTime returns the append time Append stores for m after a
// message stored with last: m's own (its Timestamp if 0), never below
// last.
func stampAppendTime(m *Message, last int64) int64 {
	at := m.AppendTime
	if at == 0 {
		at = m.Timestamp
	}
	return max(at, last)
}

// Stored is one partition a Store holds, as listed by List.
type Stored struct {
	NS metadata.Namespace
	// Epoch is the incarnation the data was built for; 0 for a partition
	// directory without a valid incarnation (a half-built one, which
	// Build discards, or a damaged one).
	Epoch uint64
	// Damage, when set, is the *CorruptError of a damaged incarnation
	// record: which incarnation the data belongs to is unknown, so it
	// must be neither removed as an orphan nor served; Build reports it.
	// A directory of a replica built deferred has its owner's damage
	// here (a raft log damaged, or refused), though the owner's files may
	// still name the incarnation (FileConfig.OwnerIncarnation): the
	// caller may ask them, as a cluster node's orphan sweep does.
	Damage error
}

var (
	// ErrEmptyBatch reports an Append with no messages.
	ErrEmptyBatch = errors.New("parkway: empty batch")
	// ErrOffsetOutOfRange reports an offset outside the log.
	ErrOffsetOutOfRange = errors.New("parkway: offset out of range")
	// ErrCorrupt reports data that fails its checksum or cannot be decoded.
	// It is wrapped in a *CorruptError carrying the path and offset.
	ErrCorrupt = errors.New("parkway: corrupt data")
	// ErrClosed reports use of a closed partition.
	ErrClosed = errors.New("parkway: partition closed")
)

// Damaged is implemented by partitions that can open with damage found
// by recovery (FileStore's, see FileStore.Build): Damage returns the
// first *CorruptError found, nil if none, so the owner can report it when
// it takes the partition; the reads that reach the damage return it too.
type Damaged interface {
	Damage() error
}

// WriteFenced is implemented by partitions that can refuse every append
// because of damage recovery found at their end (FileStore's: a damaged
// last segment, or last segments missing, see FileStore.Build):
// WritesRefused returns the error an Append would return, nil if appends
// are taken. A replicated partition's owner asks before it proposes a
// write: a committed write its log refuses could never be applied.
type WriteFenced interface {
	WritesRefused() error
}

// Keeper is implemented by partitions that can store a batch's bytes
// without copying them (MemStore's). AppendKept is Append, except that
// the partition keeps the Key, Headers (the slice, its Header structs
// and their values) and Payload of each message as the stored message's
// own instead of copying them: the caller hands them over, and nothing
// may write them afterwards, the caller included (readers get them from
// Read). Only the Message structs are copied. A partition whose Append
// copies into storage of its own (FileStore's encodes records) has no
// use for it.
type Keeper interface {
	AppendKept(msgs []Message) (first uint64, err error)
}

// Encoded is a batch of messages kept in its producer's encoding rather
// than as Messages: the Kafka listener's record batch, as its client sent
// it (compressed or not). A partition that keeps it as it is
// (EncodedKeeper) hands it back to a reader that serves the same
// encoding (a Kafka fetch) without decoding it, and decodes it only for a
// reader of messages. Its producer validated it whole before handing it
// over (Decode must succeed), and nothing may write its bytes afterwards.
type Encoded interface {
	// Len is the number of messages, at least 1.
	Len() int
	// Size is the bytes the batch occupies as kept: what the
	// partition's Size, and retention by bytes, count for it (as a Kafka
	// broker counts a compressed batch's stored bytes).
	Size() int64
	// MaxTimestamp is the newest Timestamp of its messages (µs since
	// the Unix epoch): retention by age removes the batch whole once it
	// is older than the limit.
	MaxTimestamp() int64
	// Decode returns its Len messages in order, with ID, Timestamp, Key,
	// Headers and Payload set, in memory of their own that nothing else
	// writes (the partition keeps them and sets Offset and AppendTime).
	// Called from the partition owner's goroutine.
	Decode() ([]Message, error)
}

// Lent is implemented by an Encoded whose bytes its producer lends only
// until the append is acknowledged (the Kafka listener reads each produce
// request into a buffer it reuses for the next). A partition that keeps
// the batch as it is copies them into memory of its own and hands the
// copy to Own before AppendEncoded returns; one that decodes it copies
// them by decoding it. A producer that finds its batch not owned after
// the ack must not reuse the bytes (a partition that knows nothing of
// Lent kept them).
type Lent interface {
	Encoded
	// Bytes is the batch's encoding as lent, Size bytes of it.
	Bytes() []byte
	// Own makes the batch hold b, a copy of Bytes the partition keeps,
	// instead of the lent bytes. Called once, by the partition owner's
	// goroutine.
	Own(b []byte)
}

// DecodeEncoded is b's messages (Decode), checked against its count: a
// batch that does not decode, or decodes to another count, is ErrCorrupt.
func DecodeEncoded(b Encoded) ([]Message, error) {
	msgs, err := b.Decode()
	if err == nil && (len(msgs) != b.Len() || len(msgs) == 0) {
		err = fmt.Errorf("decoded %d messages of %d", len(msgs), b.Len())
	}
	if err != nil {
		return nil, fmt.Errorf("%w: encoded batch: %w", ErrCorrupt, err)
	}
	return msgs, nil
}

// EncodedKeeper is implemented by partitions that keep an Encoded batch
// as it is (MemStore's): one stored unit, whatever its count, holding
// consecutive offsets.
type EncodedKeeper interface {
	// AppendEncoded appends b's messages at NextOffset, all stamped with
	// the append time at (kept non-decreasing along the log, as Append
	// keeps its messages'), and returns the first offset. Read decodes
	// the batch when a reader first reaches it.
	AppendEncoded(b Encoded, at int64) (first uint64, err error)
	// ReadEncoded returns the encoded batch holding offset from and its
	// first message's offset (at or below from), or a nil batch when
	// the message at from is not kept encoded, or from is at or past
	// NextOffset. An offset below StartOffset is ErrOffsetOutOfRange; the
	// batch may begin below StartOffset (a prefix truncated inside it),
	// as a Kafka broker's fetch hands out whole batches.
	ReadEncoded(from uint64) (b Encoded, base uint64, err error)
}

// Located is implemented by partitions kept in a directory of a
// filesystem (FileStore's). A replicated partition keeps its raft log in
// that directory, so building a new incarnation, removing the partition
// and sweeping orphans carry the log along with the segments.
type Located interface {
	// Location is the partition's filesystem and directory. Files the
	// partition does not know (names that are not segments) are left
	// alone by it.
	Location() (vfs.FS, string)
}

// OffsetStager is implemented by partitions whose consumer offset store
// can be made durable off their owner's goroutine (FileStore's): an
// fdatasync per store, which the owner need not wait for while it serves
// other requests.
type OffsetStager interface {
	// StageConsumerOffset is StoreConsumerOffset, split: write, when it
	// is not nil, makes the offset durable, and done(write's error) then
	// makes it the one ConsumerOffset and ConsumerOffsets report — reads
	// see durable offsets only, never one a crash may take back — and the
	// store is acknowledged once write returned nil and done ran. A nil
	// write means the store is durable, and read, already (a consumer's
	// first store, which creates its file). The writes must run one at a
	// time, in the order they were returned (on any one goroutine, also
	// after the partition is closed, when they still write the file they
	// were staged for, even if it was removed or replaced since); each
	// done runs on the owner's goroutine after its write, in the same
	// order (a no-op once the partition is closed, and for a store that a
	// later store done at once or a DeleteConsumerOffset overtook). A
	// write that fails leaves the previous offset readable, as a failed
	// StoreConsumerOffset may (a crash keeps the previous one or this
	// one).
	StageConsumerOffset(consumer string, offset uint64) (write func() error, done func(error), err error)
}

// Deferred is implemented by partitions a store can build with no file
// of their own yet (FileStore.BuildDeferred).
type Deferred interface {
	// Deferred reports whether the partition still has no file of its
	// own: it holds its records behind, in memory, and (lodged, see
	// Lodger) its owner's log holds them durably; no descriptor of its
	// is open. Its files are created when it needs them, and by Sync.
	Deferred() bool
}

// Lodger is implemented by partitions kept in a directory (FileStore's)
// whose owner keeps a log of its own there that holds every record the
// partition appends until the partition's files hold them durably: a
// replicated partition's raft log, which holds every entry since its
// last snapshot and re-applies them after a restart, and whose
// compaction syncs the partition first.
type Lodger interface {
	// Lodge returns the partition's filesystem and directory, as
	// Location does, for the owner's log. A partition built deferred
	// (FileStore.BuildDeferred) then gets its directory only: none of
	// its own files, which are created when it needs them (see
	// FileStore.BuildDeferred), and it keeps its appends behind (in
	// memory) while they fit in its write-behind buffer, its owner's log
	// holding them. With durable, the directory's entry and every one
	// above it up to the store's directory are durable when Lodge
	// returns (for a partition that was not deferred, its whole layout),
	// so the log's fsyncs keep the log.
	Lodge(durable bool) (vfs.FS, string, error)
}
