package membership

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Store is the durable membership state of one processor. See the package
// documentation for what may be called concurrently.
type Store struct {
	db       *pebble.DB
	dir      string
	opts     Options // defaulted copy
	writeOpt *pebble.WriteOptions
	closed   atomic.Bool
	// failed is the *fatalError of the storage failure the store met, nil
	// while there was none: see ErrFailed.
	failed atomic.Pointer[fatalError]
	// down is closed once failed is set (see Failed); downOnce closes it.
	down     chan struct{}
	downOnce sync.Once

	// imports numbers the table files of imports (Import), so that two
	// never share a name in the store's directory.
	imports atomic.Uint64

	// bgFailed is closed when Pebble's background jobs failed the store:
	// Pebble's own Close would wait for them.
	bgFailed <-chan struct{}

	// claims enforces that no two open batches change the same user.
	claims struct {
		sync.Mutex
		owner map[uint64]*Batch // user ID → the open batch that claimed it
	}

	// outbox hands out outbox sequence numbers; see outbox.go.
	outbox struct {
		// last is the largest sequence number handed out, or found in the
		// store by Open.
		last atomic.Uint64
		// commitMu is held across the commit of every batch with outbox
		// entries, so that the high-water marks they write never go down.
		commitMu sync.Mutex
	}
}

// Open opens the store in dir, creating it if it does not exist. opts may be
// nil; it is copied, defaulted and validated, and never modified.
//
// A new store is stamped with the format version of this build; an existing
// one is refused with an error wrapping ErrUnknownFormat unless its version
// is that one.
//
// An error of the storage (the file system refused a read, write or sync)
// is a *StorageError naming dir, with the operating system's error, which
// names the file, inside.
func Open(dir string, opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("membership: open %q: %w", dir, err)
	}
	s := &Store{dir: dir, opts: o, writeOpt: o.writeOptions(), down: make(chan struct{})}
	s.claims.owner = make(map[uint64]*Batch)
	if err := s.open(); err != nil {
		return nil, err
	}
	return s, nil
}

// open opens s's Pebble database and checks it. A Pebble fatal error on
// the way is an error like any other: the half-open database is left to
// the garbage collector, as Close could not finish on it.
//
// pebble.Open runs in a goroutine of its own, because it does not return
// while the flush of the log it found keeps failing: when the store fails
// meanwhile (see background), Open returns the failure and leaves that
// goroutine to close the database should it ever open.
func (s *Store) open() (err error) {
	bg := newBackground(s.dir, s.opts.BackgroundFailureTimeout, s.opts.Logger, s.markFailed)
	s.bgFailed = bg.failed
	type opened struct {
		db  *pebble.DB
		err error
	}
	done := make(chan opened, 1)
	go func() {
		var o opened
		defer func() { done <- o }()
		defer s.guard("open", &o.err)
		o.db, o.err = pebble.Open(s.dir, s.opts.pebbleOptions(s.dir, bg))
	}()
	var o opened
	select {
	case o = <-done:
	case <-bg.failed:
		go func() {
			if o := <-done; o.err == nil {
				defer s.guard("close", new(error))
				_ = o.db.Close()
			}
		}()
		return s.storageErr("open", bg.err)
	}
	if o.err != nil {
		var se *StorageError
		if errors.As(o.err, &se) {
			return o.err
		}
		return s.storageErr("open", o.err)
	}
	defer s.guard("open", &err)
	db := o.db
	if err := checkFormat(db); err != nil {
		return errors.Join(s.storageErr("open", err), db.Close())
	}
	last, err := loadOutboxSeq(db)
	if err != nil {
		return errors.Join(s.storageErr("open", err), db.Close())
	}
	// A caller's temporary files left by a crash are of no use: the
	// store never holds anything of theirs.
	if err := s.opts.FS.RemoveAll(s.TempDir()); err != nil {
		return errors.Join(s.storageErr("open: remove the temporary files", err), db.Close())
	}
	s.db = db
	s.outbox.last.Store(last)
	return nil
}

// TempDir returns the directory, in FS, where a caller of the store keeps
// temporary files that belong with its data (a restore's spilled headers):
// a subdirectory of the store's, which the caller creates when it needs
// it. Open removes it with whatever it holds, so that what a crash left
// there takes no room for long.
func (s *Store) TempDir() string { return s.opts.FS.PathJoin(s.dir, "temp") }

// FS returns the file system the store lives in (Options.FS).
func (s *Store) FS() vfs.FS { return s.opts.FS }

// storageErr returns err of op as a *StorageError naming the store's
// directory.
func (s *Store) storageErr(op string, err error) error {
	return &StorageError{Dir: s.dir, Op: op, Err: err}
}

// usable reports why the store cannot take a call of op: closed, or failed.
func (s *Store) usable(op string) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if f := s.failed.Load(); f != nil {
		return s.storageErr(op, f)
	}
	return nil
}

// guard is deferred by every call of the store that may reach Pebble's
// Fatalf: it recovers the *fatalError that the store's logger panics with,
// marks the store failed and makes it the call's error, an error of op
// wrapping ErrFailed. Any other panic goes on.
func (s *Store) guard(op string, err *error) {
	if r := recover(); r != nil {
		*err = s.storageErr(op, s.fail(r))
	}
}

// guardBare is guard for a call whose caller wraps the error: the error is
// the *fatalError itself.
func (s *Store) guardBare(err *error) {
	if r := recover(); r != nil {
		*err = s.fail(r)
	}
}

// fail marks the store failed by the *fatalError r, or panics again with r
// if it is something else.
func (s *Store) fail(r any) *fatalError {
	f, ok := r.(*fatalError)
	if !ok {
		panic(r)
	}
	s.markFailed(f)
	return f
}

// markFailed records f as the store's failure, unless it failed already,
// and closes Failed's channel.
func (s *Store) markFailed(f *fatalError) {
	s.failed.CompareAndSwap(nil, f)
	s.downOnce.Do(func() { close(s.down) })
}

// Failed returns a channel that is closed once the store has failed
// (ErrFailed): a call met a failed write or sync, or one of Pebble's
// background jobs did (a flush or compaction that kept failing for
// Options.BackgroundFailureTimeout, or a failed write of its MANIFEST). A
// failure in the background is seen by no call until the next one, which
// may be long in coming when no commands arrive; a processor selects on
// Failed to stop at once. Err says what failed.
func (s *Store) Failed() <-chan struct{} { return s.down }

// Err returns the store's failure, a *StorageError wrapping ErrFailed that
// names the directory, or nil while it has not failed.
func (s *Store) Err() error {
	if f := s.failed.Load(); f != nil {
		return s.storageErr("run", f)
	}
	return nil
}

// checkFormat stamps an empty store with formatVersion, or checks the stamp of
// a store that has records.
func checkFormat(db *pebble.DB) error {
	value, closer, err := db.Get(metaFormatKey)
	switch {
	case err == nil:
		defer closer.Close()
		v, err := decodeFormat(metaFormatKey, value)
		if err != nil {
			return err
		}
		if v != formatVersion {
			return fmt.Errorf("%w: store has format version %d, this build reads only %d; "+
				"the state is rebuilt from the commands topic: move the directory away and start with an empty one",
				ErrUnknownFormat, v, formatVersion)
		}
		return nil
	case errors.Is(err, pebble.ErrNotFound):
	default:
		return fmt.Errorf("unable to read format version: %w", err)
	}

	// Only a store with no records at all is new. Records without a stamp
	// were written by something else, and their layout is unknown.
	it, err := db.NewIter(nil)
	if err != nil {
		return err
	}
	nonEmpty := it.First()
	var firstKey []byte
	if nonEmpty {
		firstKey = append(firstKey, it.Key()...)
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("unable to scan store: %w", err)
	}
	if nonEmpty {
		return fmt.Errorf("%w: store has records (first key %x) but no format version", ErrUnknownFormat, firstKey)
	}
	v := encodeFormat(formatVersion)
	// Always synced: it is written once, and a store that lost it would be
	// refused on the next open.
	if err := db.Set(metaFormatKey, v[:], pebble.Sync); err != nil {
		return fmt.Errorf("unable to write format version: %w", err)
	}
	return nil
}

// Close closes the store. It must not be called concurrently with any other
// method, nor while a Batch is open. Calling it again returns ErrClosed.
// Closing a failed store (ErrFailed) releases its directory and reports the
// failure again.
func (s *Store) Close() (err error) {
	if s.closed.Swap(true) {
		return ErrClosed
	}
	defer s.guard("close", &err)
	select {
	case <-s.bgFailed:
		// Pebble's Close waits for the job that keeps failing: let it
		// close, should the job ever end, and report the failure now.
		go func() {
			defer s.guard("close", new(error))
			_ = s.db.Close()
		}()
	default:
		err = s.db.Close()
	}
	if f := s.failed.Load(); f != nil {
		return s.storageErr("close", f) // what Close met follows from it
	}
	if err != nil {
		return s.storageErr("close", err)
	}
	return nil
}

// Leave records that userID left at atNs (ns since the Unix epoch), with one
// synced write, and returns what changed. It is Apply of the command
// {OpLeave, userID, atNs, ""}: see Batch.Apply and the package
// documentation for what a leave does.
func (s *Store) Leave(userID, atNs uint64) (Change, error) {
	return s.apply(Command{Op: OpLeave, UserID: userID, AtNs: atNs})
}

// Rejoin records that userID rejoined at atNs, with one synced write, and
// returns what changed. It closes the open leave into a history episode
// [left_at, atNs) and makes the user Active. On an Active user it is a
// no-op. If atNs is before the open boundary, it fails with an error
// wrapping ErrRejoinBeforeLeave and records only that the command was seen.
func (s *Store) Rejoin(userID, atNs uint64) (Change, error) {
	return s.apply(Command{Op: OpRejoin, UserID: userID, AtNs: atNs})
}

// Apply applies c with one synced write and returns what changed. See
// Batch.Apply.
func (s *Store) Apply(c Command) (Change, error) {
	return s.apply(c)
}

func (s *Store) apply(cmd Command) (Change, error) {
	if err := s.usable("apply"); err != nil {
		return Change{}, err
	}
	b := s.NewBatch()
	defer b.Close()
	c, applyErr := b.Apply(cmd)
	if _, isRefusal := refusalOf(applyErr); !isRefusal {
		return Change{}, applyErr
	}
	// A refused rejoin is remembered, so it is committed too.
	if err := b.Commit(); err != nil {
		return Change{}, err
	}
	return c, applyErr
}

// Status returns userID's current state. A user without records is Active.
// It reads only the current-state record; Member also checks the history.
func (s *Store) Status(userID uint64) (_ CommunityMembership, err error) {
	op := fmt.Sprintf("read status of user %d", userID)
	if err := s.usable(op); err != nil {
		return CommunityMembership{}, err
	}
	defer s.guard(op, &err)
	var buf [stateKeyLen]byte
	key := appendStateKey(buf[:0], userID)
	value, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return CommunityMembership{UserID: userID, Status: Active}, nil
	}
	if err != nil {
		return CommunityMembership{}, s.storageErr(op, err)
	}
	defer closer.Close()
	m, err := decodeStateValue(key, userID, value)
	if err != nil {
		return CommunityMembership{}, s.storageErr(op, err)
	}
	return m, nil
}

// History returns userID's closed episodes in ascending order, or nil if
// there are none.
func (s *Store) History(userID uint64) ([]Episode, error) {
	m, err := s.Member(userID)
	return m.History, err
}

// Member returns userID's current state, closed episodes, late-leave windows
// and note, checked against each other. A user without records is Active
// with no history. The member's slices are the caller's.
func (s *Store) Member(userID uint64) (_ Member, err error) {
	op := fmt.Sprintf("read user %d", userID)
	if err := s.usable(op); err != nil {
		return Member{}, err
	}
	defer s.guard(op, &err)
	var bounds [2 * stateKeyLen]byte
	m, err := readMember(s.db, userID, &bounds)
	if err != nil {
		return Member{}, s.storageErr(op, err)
	}
	return m, nil
}

// claim gives userID to b, unless another open batch holds it.
func (s *Store) claim(b *Batch, userID uint64) error {
	s.claims.Lock()
	defer s.claims.Unlock()
	switch owner, ok := s.claims.owner[userID]; {
	case !ok:
		s.claims.owner[userID] = b
		b.claimed = append(b.claimed, userID)
		return nil
	case owner == b:
		return nil
	default:
		return fmt.Errorf("%w: user %d", ErrConflict, userID)
	}
}

// release returns the users b claimed.
func (s *Store) release(b *Batch) {
	if len(b.claimed) == 0 {
		return
	}
	s.claims.Lock()
	for _, u := range b.claimed {
		delete(s.claims.owner, u)
	}
	s.claims.Unlock()
	b.claimed = b.claimed[:0]
}
