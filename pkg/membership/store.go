package membership

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
)

// Store is the durable membership state of one processor. See the package
// documentation for what may be called concurrently.
type Store struct {
	db       *pebble.DB
	dir      string
	opts     Options // defaulted copy
	writeOpt *pebble.WriteOptions
	closed   atomic.Bool

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
func Open(dir string, opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("membership: open %q: %w", dir, err)
	}
	db, err := pebble.Open(dir, o.pebbleOptions())
	if err != nil {
		return nil, fmt.Errorf("membership: open %q: %w", dir, err)
	}
	if err := checkFormat(db); err != nil {
		return nil, errors.Join(fmt.Errorf("membership: open %q: %w", dir, err), db.Close())
	}
	last, err := loadOutboxSeq(db)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("membership: open %q: %w", dir, err), db.Close())
	}
	s := &Store{db: db, dir: dir, opts: o, writeOpt: o.writeOptions()}
	s.claims.owner = make(map[uint64]*Batch)
	s.outbox.last.Store(last)
	return s, nil
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
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return ErrClosed
	}
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("membership: close %q: %w", s.dir, err)
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
	if s.closed.Load() {
		return Change{}, ErrClosed
	}
	b := s.NewBatch()
	defer b.Close()
	c, applyErr := b.Apply(cmd)
	if applyErr != nil && !errors.Is(applyErr, ErrRejoinBeforeLeave) {
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
func (s *Store) Status(userID uint64) (CommunityMembership, error) {
	if s.closed.Load() {
		return CommunityMembership{}, ErrClosed
	}
	var buf [stateKeyLen]byte
	key := appendStateKey(buf[:0], userID)
	value, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return CommunityMembership{UserID: userID, Status: Active}, nil
	}
	if err != nil {
		return CommunityMembership{}, fmt.Errorf("membership: read status of user %d: %w", userID, err)
	}
	defer closer.Close()
	m, err := decodeStateValue(key, userID, value)
	if err != nil {
		return CommunityMembership{}, fmt.Errorf("membership: read status of user %d: %w", userID, err)
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
func (s *Store) Member(userID uint64) (Member, error) {
	if s.closed.Load() {
		return Member{}, ErrClosed
	}
	var bounds [2 * stateKeyLen]byte
	m, err := readMember(s.db, userID, &bounds)
	if err != nil {
		return Member{}, fmt.Errorf("membership: read user %d: %w", userID, err)
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
