package membership

import (
	"errors"
	"fmt"
)

var (
	// ErrCorrupt is wrapped by every error about a stored record that does
	// not decode exactly: wrong length, unknown status, impossible times,
	// malformed key, or records that contradict each other. The wrapping
	// error is a *CorruptError naming the key.
	ErrCorrupt = errors.New("membership: corrupt record")

	// ErrRejoinBeforeLeave is wrapped by the error of a rejoin whose time is
	// before the user's open leave boundary. No state changes; the
	// command's identity is remembered (see Batch.Apply).
	ErrRejoinBeforeLeave = errors.New("membership: rejoin before leave")

	// ErrHistoryFull is wrapped by the error of a rejoin of a user who
	// already has Options.MaxHistory closed episodes: the user stays left
	// (nothing of theirs is forwarded). No state changes; the command's
	// identity is remembered, as a refused one (see Batch.Apply).
	ErrHistoryFull = errors.New("membership: history full")

	// ErrConflict is wrapped by the error of a command for a user that another
	// open batch has already claimed. See the package documentation, section
	// Concurrency.
	ErrConflict = errors.New("membership: user claimed by another batch")

	// ErrInvalid is wrapped by errors about arguments the store cannot
	// represent: a command time of OpenEnd, an unknown Op, a topic that is empty
	// or contains 0x00, a negative partition or offset.
	ErrInvalid = errors.New("membership: invalid argument")

	// ErrUnknownFormat is wrapped by the error of Open when the store was
	// written in a format version this build does not read, or holds records
	// but no format version at all.
	ErrUnknownFormat = errors.New("membership: unknown format")

	// ErrClosed is returned by methods of a closed Store.
	ErrClosed = errors.New("membership: closed")

	// ErrBatchDone is returned by methods of a Batch that was already
	// committed or closed.
	ErrBatchDone = errors.New("membership: batch already committed or closed")

	// ErrFailed is wrapped by the errors of a store that met a storage
	// failure Pebble cannot continue from (a write or sync of its
	// write-ahead log that failed, a full disk): the call that met it and
	// every later call fail with a *StorageError wrapping ErrFailed, since
	// Pebble's commit pipeline is broken and its memory may hold writes
	// that are not durable. Close the store and open it again once the
	// disk is fixed: every batch whose Commit returned nil is there, and
	// the one that failed is there in full or not at all.
	ErrFailed = errors.New("membership: store failed")
)

// StorageError is an error the store met reading or writing its
// directory: the file system refused a read, write or sync, a record did
// not decode, or Pebble failed. It names the store's directory and what
// the store was doing; Err, which it wraps, is the cause, which for an
// error of the operating system names the file and the system call (an
// *fs.PathError, which errors.Is matches against syscall.ENOSPC, say).
type StorageError struct {
	Dir string // the store's directory, as given to Open
	Op  string // what the store was doing, e.g. "commit batch of 3 commands"
	Err error
}

// Error implements error.
func (e *StorageError) Error() string {
	if f, ok := e.Err.(*fatalError); ok { // its own text names the directory too
		return fmt.Sprintf("membership: %s in %s: store failed: %s", e.Op, e.Dir, f.msg)
	}
	return fmt.Sprintf("membership: %s in %s: %v", e.Op, e.Dir, e.Err)
}

// Unwrap returns Err.
func (e *StorageError) Unwrap() error { return e.Err }

// fatalError is what the store's Pebble logger panics with when Pebble
// calls Fatalf: Pebble's message, and the first error among its
// arguments. It matches ErrFailed.
type fatalError struct {
	dir   string
	msg   string
	cause error
}

// Error says which store failed: it is the message of the panic that ends
// the process when no call of the store recovers it.
func (e *fatalError) Error() string { return "membership: store in " + e.dir + " failed: " + e.msg }

func (e *fatalError) Unwrap() error { return e.cause }

func (e *fatalError) Is(target error) bool { return target == ErrFailed }

// CorruptError describes a stored record that failed to decode. It matches
// ErrCorrupt with errors.Is.
type CorruptError struct {
	Key    []byte // the record's key, owned by the error
	Reason string // what was wrong, e.g. "value has 3 bytes, want 9"
}

func corruptf(key []byte, format string, args ...any) error {
	return &CorruptError{Key: append([]byte(nil), key...), Reason: fmt.Sprintf(format, args...)}
}

// Error implements error. The key is printed in hex.
func (e *CorruptError) Error() string {
	return fmt.Sprintf("%v at key %x: %s", ErrCorrupt, e.Key, e.Reason)
}

// Unwrap returns ErrCorrupt.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }

// errInvalidf returns an error wrapping ErrInvalid.
func errInvalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}
