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
	// ErrRolledBack reports a failed Journal.Commit that took the
	// partition's appends since its last commit back out of its log,
	// durably: no read, rebuild or reopen finds them, and their offsets
	// are given to the next appends. Its owner answers them as not
	// appended. It is wrapped together with the error that failed the
	// commit (a full disk: syscall.ENOSPC). A failed Commit whose error
	// does not wrap it left the appends' outcome unknown: they may
	// survive.
	ErrRolledBack = errors.New("parkway: commit failed; its appends were taken back out of the log")
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
