package partition

import "errors"

var (
	// ErrInUse reports a Build or Remove of a namespace whose Partition,
	// built by the same store, is still open (or which another goroutine is
	// building or removing right now). Two open handles on one log would
	// interleave their appends, and removing a log under its open handle
	// would let the handle write consumer offsets into the next
	// incarnation's directory, so the owner must Close the partition first.
	ErrInUse = errors.New("parkway: partition in use")
	// ErrTooLarge reports a FileStore Append with a message or batch that
	// does not fit the segment format: a record longer than 4 GiB (its
	// length field is a uint32), or a batch over 4 GiB (the sparse index
	// stores file positions as uint32).
	ErrTooLarge = errors.New("parkway: message or batch too large")
	// ErrUnusable reports a partition that refuses every later write: a
	// failed fsync (what is durable is unknown) or a failed append that
	// could not be rolled back. Its owner closes it and builds it again,
	// which recovers the log from what is on disk.
	ErrUnusable = errors.New("parkway: partition unusable (close and build it again)")
	// ErrReopen reports a failure to open again a segment file (or a file
	// opened through a partition's Location) that the FileStore closed to
	// stay within its descriptor budget (FileConfig.MaxOpenFiles): the
	// file was deleted, replaced or made unreadable
	// behind the store's back, or the process ran out of descriptors. It
	// wraps the filesystem's error. The operation that needed the file
	// did nothing; the partition stays usable and the operation can be
	// retried.
	ErrReopen = errors.New("parkway: reopening a file closed for the descriptor budget failed")
	// ErrInvalidConfig wraps each problem reported by FileConfig.Validate.
	ErrInvalidConfig = errors.New("parkway: invalid partition store config")
)
