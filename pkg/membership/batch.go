package membership

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// Batch collects commands, the checkpoints they belong to, the late-leave
// windows and notes of their users and the outbox entries they produce, and
// commits them in one Pebble batch with one sync: after a crash either all
// of it is in the store or none of it is.
//
// Later commands see earlier ones: each command reads the user's records
// through the batch, as does Batch.Member. A call that fails leaves the
// batch as it was, so the caller may skip it and go on.
//
// A Batch belongs to one goroutine. The first call for a user (Apply, Leave,
// Rejoin, RecordLateLeave, SetNote, Member) claims the user until Commit or
// Close; a call for a user claimed by another open batch fails with
// ErrConflict. Always call Close, which is a no-op after Commit, so that the
// claims are released.
type Batch struct {
	s       *Store
	pb      *pebble.Batch // indexed: reads see the batch's own writes
	n       int
	done    bool
	outbox  bool     // the batch holds outbox entries
	claimed []uint64 // users this batch claimed, released by Commit or Close
	bounds  [2 * stateKeyLen]byte
	keyBuf  [historyKeyLen]byte
}

// NewBatch returns an empty batch.
func (s *Store) NewBatch() *Batch {
	return &Batch{s: s, pb: s.db.NewIndexedBatch()}
}

// Leave is Apply(OpLeave, userID, atNs). See Store.Leave.
func (b *Batch) Leave(userID, atNs uint64) (Change, error) {
	return b.Apply(OpLeave, userID, atNs)
}

// Rejoin is Apply(OpRejoin, userID, atNs). See Store.Rejoin.
func (b *Batch) Rejoin(userID, atNs uint64) (Change, error) {
	return b.Apply(OpRejoin, userID, atNs)
}

// Apply adds op for userID at atNs (ns since the Unix epoch) to the batch
// and returns what it does, given the store's committed state and the
// batch's earlier commands. Nothing is durable before Commit.
func (b *Batch) Apply(op Op, userID, atNs uint64) (Change, error) {
	if err := b.claim(userID); err != nil {
		return Change{}, err
	}
	before, err := readMember(b.pb, userID, &b.bounds)
	if err != nil {
		return Change{}, fmt.Errorf("membership: read user %d: %w", userID, err)
	}
	c, err := transition(before, op, atNs)
	if err != nil {
		return Change{}, err
	}
	if c.Changed {
		if err := b.write(c); err != nil {
			return Change{}, fmt.Errorf("membership: %v user %d at %d: %w", op, userID, atNs, err)
		}
	}
	b.n++
	return c, nil
}

// usable reports why the batch cannot take another call.
func (b *Batch) usable() error {
	if b.done {
		return ErrBatchDone
	}
	if b.s.closed.Load() {
		return ErrClosed
	}
	return nil
}

// claim checks that the batch is usable and claims userID for it.
func (b *Batch) claim(userID uint64) error {
	if err := b.usable(); err != nil {
		return err
	}
	return b.s.claim(b, userID)
}

// Member returns userID's records as the batch would commit them: the
// committed records with the batch's own writes applied. It claims the user.
// The member's slices are the caller's.
func (b *Batch) Member(userID uint64) (Member, error) {
	if err := b.claim(userID); err != nil {
		return Member{}, err
	}
	m, err := readMember(b.pb, userID, &b.bounds)
	if err != nil {
		return Member{}, fmt.Errorf("membership: read user %d: %w", userID, err)
	}
	return m, nil
}

// RecordLateLeave records that signals of userID with event times in
// [leftAtNs, throughNs] may have been forwarded although the user had left
// at leftAtNs, because the leave arrived after them. It claims the user.
//
// leftAtNs must be where one of the user's episodes starts, open or closed,
// as the batch sees the user (Change.After.LeftAtNs of the leave that came
// late), and throughNs must not be before it; otherwise the error wraps
// ErrInvalid and nothing is written. A window for the same leave that is
// already recorded keeps the larger throughNs: recording one that reaches no
// further writes nothing.
func (b *Batch) RecordLateLeave(userID, leftAtNs, throughNs uint64) error {
	if err := b.usable(); err != nil {
		return err
	}
	if throughNs < leftAtNs {
		return errInvalidf("late leave of user %d at %d: forwarded through %d, before the leave", userID, leftAtNs, throughNs)
	}
	if err := b.claim(userID); err != nil {
		return err
	}
	m, err := readMember(b.pb, userID, &b.bounds)
	if err != nil {
		return fmt.Errorf("membership: read user %d: %w", userID, err)
	}
	if !m.startsEpisode(leftAtNs) {
		return errInvalidf("late leave of user %d at %d: no episode of the user starts there", userID, leftAtNs)
	}
	i, found := slices.BinarySearchFunc(m.LateLeaves, leftAtNs, func(w LateLeave, ns uint64) int { return cmp.Compare(w.LeftAtNs, ns) })
	if found && m.LateLeaves[i].ThroughNs >= throughNs {
		return nil
	}
	key := appendLateLeaveKey(b.keyBuf[:0], userID, leftAtNs)
	v := encodeLateLeave(LateLeave{LeftAtNs: leftAtNs, ThroughNs: throughNs})
	if err := b.pb.Set(key, v[:], nil); err != nil {
		return fmt.Errorf("membership: record late leave of user %d at %d: %w", userID, leftAtNs, err)
	}
	return nil
}

// SetNote attaches note to userID, replacing any earlier note. The package
// stores it and hands it back in Member.Note, and does not interpret it; it
// must be 1 to MaxNoteLen bytes, or the error wraps ErrInvalid. note is
// copied. It claims the user. A user who never left may have a note: such a
// user is Active with no history.
func (b *Batch) SetNote(userID uint64, note []byte) error {
	if err := b.usable(); err != nil {
		return err
	}
	if err := validNote(userID, note); err != nil {
		return err
	}
	if err := b.claim(userID); err != nil {
		return err
	}
	// Set copies the value into the batch.
	if err := b.pb.Set(appendNoteKey(b.keyBuf[:0], userID), note, nil); err != nil {
		return fmt.Errorf("membership: set note of user %d: %w", userID, err)
	}
	return nil
}

// AddOutbox adds value to the outbox, to be committed with the batch, and
// returns its sequence number. value must be 1 to MaxOutboxValueLen bytes, or
// the error wraps ErrInvalid; it is copied. See the package documentation,
// section Outbox.
func (b *Batch) AddOutbox(value []byte) (seq uint64, err error) {
	if err := b.usable(); err != nil {
		return 0, err
	}
	if err := validOutboxValue(value); err != nil {
		return 0, err
	}
	seq, err = b.s.nextOutboxSeq()
	if err != nil {
		return 0, err
	}
	if err := b.pb.Set(appendOutboxKey(b.keyBuf[:0], seq), value, nil); err != nil {
		return 0, fmt.Errorf("membership: add outbox entry %d: %w", seq, err)
	}
	b.outbox = true
	return seq, nil
}

// write stages the records that differ between c.Before and c.After. A
// rejoin writes the closed episode and the Active state together, so no
// reader of a committed store sees one without the other.
func (b *Batch) write(c Change) error {
	if c.Closed != nil {
		key := appendHistoryKey(b.keyBuf[:0], c.After.UserID, c.Closed.LeftAtNs)
		v := encodeHistory(*c.Closed)
		if err := b.pb.Set(key, v[:], nil); err != nil {
			return err
		}
	}
	key := appendStateKey(b.keyBuf[:0], c.After.UserID)
	v := encodeState(c.After.CommunityMembership)
	return b.pb.Set(key, v[:], nil)
}

// SetCheckpoint records next, the next offset to read of (topic, partition),
// in the batch, so that it commits with the state it accounts for. topic must
// be non-empty without 0x00; partition and next must not be negative.
func (b *Batch) SetCheckpoint(topic string, partition int32, next int64) error {
	if b.done {
		return ErrBatchDone
	}
	if err := validCheckpoint(topic, partition); err != nil {
		return err
	}
	if next < 0 {
		return errInvalidf("checkpoint %s/%d: offset %d is negative", topic, partition, next)
	}
	var buf [64]byte
	key := appendCheckpointKey(buf[:0], topic, partition)
	v := encodeCheckpoint(next)
	if err := b.pb.Set(key, v[:], nil); err != nil {
		return fmt.Errorf("membership: set checkpoint %s/%d: %w", topic, partition, err)
	}
	return nil
}

// Len returns the number of commands (Apply, Leave, Rejoin) applied without
// error, no-ops included.
func (b *Batch) Len() int { return b.n }

// Commit writes the batch to the store, all or nothing, synced unless
// Options.NoSync. An empty batch writes nothing. The batch is done
// afterwards, whatever the result; its claims are released.
func (b *Batch) Commit() error {
	if b.done {
		return ErrBatchDone
	}
	if b.s.closed.Load() {
		return ErrClosed
	}
	var err error
	switch {
	case b.outbox:
		err = b.s.commitOutbox(b.pb)
	case !b.pb.Empty():
		err = b.pb.Commit(b.s.writeOpt)
	}
	b.finish()
	if err != nil {
		return fmt.Errorf("membership: commit batch of %d commands: %w", b.n, err)
	}
	return nil
}

// Close discards the batch if it was not committed and releases its claims.
// It is safe to call after Commit and more than once.
func (b *Batch) Close() error {
	if b.done {
		return nil
	}
	b.finish()
	return nil
}

// finish releases the claims (after the commit, so a batch that claims a user
// next reads the committed records) and the Pebble batch.
func (b *Batch) finish() {
	b.done = true
	b.s.release(b)
	_ = b.pb.Close() // an unused or committed batch closes without error
}
