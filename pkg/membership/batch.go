package membership

import (
	"bytes"
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
	keyBuf  [identityKeyLen]byte
}

// NewBatch returns an empty batch.
func (s *Store) NewBatch() *Batch {
	return &Batch{s: s, pb: s.db.NewIndexedBatch()}
}

// Leave is Apply of {OpLeave, userID, atNs, ""}. See Store.Leave.
func (b *Batch) Leave(userID, atNs uint64) (Change, error) {
	return b.Apply(Command{Op: OpLeave, UserID: userID, AtNs: atNs})
}

// Rejoin is Apply of {OpRejoin, userID, atNs, ""}. See Store.Rejoin.
func (b *Batch) Rejoin(userID, atNs uint64) (Change, error) {
	return b.Apply(Command{Op: OpRejoin, UserID: userID, AtNs: atNs})
}

// IdentityWindow is how many command identities the store keeps per
// user: those of the user's last IdentityWindow commands applied or
// refused. It bounds what a user costs, whatever arrives: a service that
// re-sends a user's leave for ever with fresh request ids keeps at most
// this many. A re-delivery is recognised while its identity is in the
// window; an older one is taken as a new command.
const IdentityWindow = 64

// Apply adds c to the batch and returns what it does, given the store's
// committed state and the batch's earlier commands. Nothing is durable
// before Commit.
//
// A command whose identity (all of c's fields) is among the user's last
// IdentityWindow identities, in this batch or any committed one, is a
// duplicate: it changes nothing (Change.Duplicate), whatever happened
// since; a duplicate of a refused command is refused again, with an error
// wrapping ErrRejoinBeforeLeave. Every other command is remembered, the
// oldest identity of a full window forgotten, so that it is a duplicate
// when it comes again. A rejoin before the open boundary changes nothing
// and returns an error wrapping ErrRejoinBeforeLeave, but it is remembered
// all the same: the batch stays usable and committing it records that the
// command was refused. Any other error leaves the batch as it was.
func (b *Batch) Apply(c Command) (_ Change, err error) {
	if err := b.claim(c.UserID); err != nil {
		return Change{}, err
	}
	defer b.s.guard(fmt.Sprintf("apply %v of user %d at %d", c.Op, c.UserID, c.AtNs), &err)
	before, err := readMember(b.pb, c.UserID, &b.bounds)
	if err != nil {
		return Change{}, b.s.storageErr(fmt.Sprintf("read user %d", c.UserID), err)
	}
	// One scan of the user's identities tells whether c is a duplicate
	// and gives remember what it forgets.
	ids, dup, err := b.identities(c)
	switch {
	case err != nil:
		return Change{}, b.s.storageErr(fmt.Sprintf("read identity of %v of user %d at %d", c.Op, c.UserID, c.AtNs), err)
	case dup != nil:
		b.n++
		if *dup != accepted {
			return Change{Before: before, After: before, Duplicate: true}, dup.again(c)
		}
		return Change{Before: before, After: before, Duplicate: true}, nil
	}
	ch, refused := transition(before, c.Op, c.AtNs, b.s.opts.MaxHistory)
	r, isRefusal := refusalOf(refused)
	if !isRefusal {
		return Change{}, refused
	}
	if ch.Changed {
		if err := b.write(ch); err != nil {
			return Change{}, fmt.Errorf("membership: %v user %d at %d: %w", c.Op, c.UserID, c.AtNs, err)
		}
	}
	if err := b.remember(c, r, ids); err != nil {
		// A held identity that does not decode fails it, as a write may.
		return Change{}, b.s.storageErr(fmt.Sprintf("remember %v of user %d at %d", c.Op, c.UserID, c.AtNs), err)
	}
	b.n++
	if refused != nil {
		return Change{Before: before, After: before}, refused
	}
	return ch, nil
}

// heldIdentities are the identities a user holds, as identities reads
// them for remember.
type heldIdentities struct {
	ids  []heldIdentity
	next uint64 // the sequence number of the next identity
	// corrupt is the first identity value that does not decode, in key
	// order: remember fails with it. A duplicate is recognised all the
	// same, as by a read of its identity alone.
	corrupt error
}

type heldIdentity struct {
	seq uint64
	key []byte
}

// identities reads the identities userID holds, and returns c's refusal
// when c's identity is among them (a duplicate), nil otherwise. The error
// is a failed read, or c's own identity value that does not decode.
func (b *Batch) identities(c Command) (heldIdentities, *refusal, error) {
	var h heldIdentities
	idKey := appendIdentityKey(b.keyBuf[:0], c)
	lower, upper := identityBounds(c.UserID)
	it, err := b.pb.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return h, nil, err
	}
	for valid := it.First(); valid; valid = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			break // reported by it.Close
		}
		seq, r, err := decodeIdentityValue(v)
		if bytes.Equal(it.Key(), idKey) {
			if err != nil {
				err = corruptf(idKey, "%v", err)
			}
			if cerr := it.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return h, nil, err
			}
			return h, &r, nil
		}
		if err != nil {
			if h.corrupt == nil {
				h.corrupt = corruptf(it.Key(), "%v", err)
			}
			continue
		}
		h.ids = append(h.ids, heldIdentity{seq, slices.Clone(it.Key())})
		h.next = max(h.next, seq+1)
	}
	if err := it.Close(); err != nil {
		return h, nil, err
	}
	return h, nil, nil
}

// remember writes c's identity as the user's newest, and forgets the
// oldest ones beyond IdentityWindow. The user holds at most
// IdentityWindow identities before the write (legacy stores excepted:
// they shrink to the window on the first command), so held, read by
// identities, is short.
func (b *Batch) remember(c Command, r refusal, held heldIdentities) error {
	if held.corrupt != nil {
		return held.corrupt
	}
	ids, next := held.ids, held.next
	if drop := len(ids) - (IdentityWindow - 1); drop > 0 {
		// Oldest first; legacy identities (all seq 0) by key, which is
		// deterministic, so a replay forgets the same ones.
		slices.SortFunc(ids, func(x, y heldIdentity) int {
			if c := cmp.Compare(x.seq, y.seq); c != 0 {
				return c
			}
			return bytes.Compare(x.key, y.key)
		})
		for _, h := range ids[:drop] {
			if err := b.pb.Delete(h.key, nil); err != nil {
				return err
			}
		}
	}
	var val [identityValueLen]byte
	return b.pb.Set(appendIdentityKey(b.keyBuf[:0], c), appendIdentityValue(val[:0], next, r), nil)
}

// usable reports why the batch cannot take another call.
func (b *Batch) usable() error {
	if b.done {
		return ErrBatchDone
	}
	return b.s.usable("use batch")
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
func (b *Batch) Member(userID uint64) (_ Member, err error) {
	if err := b.claim(userID); err != nil {
		return Member{}, err
	}
	defer b.s.guard(fmt.Sprintf("read user %d", userID), &err)
	m, err := readMember(b.pb, userID, &b.bounds)
	if err != nil {
		return Member{}, b.s.storageErr(fmt.Sprintf("read user %d", userID), err)
	}
	return m, nil
}

// RecordLateLeave records the late-leave window w of userID: signals of the
// user with event times in [w.LeftAtNs, w.ForwardedThroughNs] may have been forwarded
// although the user had left at w.LeftAtNs, because the leave arrived after
// them. It claims the user.
//
// w.LeftAtNs must lie in one of the user's episodes, open or closed, as the
// batch sees the user, and w.ForwardedThroughNs must not be before it; otherwise the
// error wraps ErrInvalid and nothing is written. The window is recorded at
// the start of that episode (the episode's leave may have moved back since
// the window was seen). A window of the same leave that is already recorded
// is merged: the later ForwardedThroughNs, exact only if both are. Recording a window
// that adds nothing writes nothing.
func (b *Batch) RecordLateLeave(userID uint64, w LateLeave) (err error) {
	if err := b.usable(); err != nil {
		return err
	}
	defer b.s.guard(fmt.Sprintf("record late leave of user %d", userID), &err)
	if w.ForwardedThroughNs < w.LeftAtNs {
		return errInvalidf("late leave of user %d at %d: forwarded through %d, before the leave", userID, w.LeftAtNs, w.ForwardedThroughNs)
	}
	if err := b.claim(userID); err != nil {
		return err
	}
	m, err := readMember(b.pb, userID, &b.bounds)
	if err != nil {
		return b.s.storageErr(fmt.Sprintf("read user %d", userID), err)
	}
	start, ok := m.episodeStart(w.LeftAtNs)
	if !ok {
		return errInvalidf("late leave of user %d at %d: in no episode of the user", userID, w.LeftAtNs)
	}
	w.LeftAtNs = start
	i, found := slices.BinarySearchFunc(m.LateLeaves, start, func(x LateLeave, ns uint64) int { return cmp.Compare(x.LeftAtNs, ns) })
	if found {
		merged := m.LateLeaves[i].merge(w)
		if merged == m.LateLeaves[i] {
			return nil
		}
		w = merged
	}
	key := appendLateLeaveKey(b.keyBuf[:0], userID, start)
	v := encodeLateLeave(w)
	if err := b.pb.Set(key, v[:], nil); err != nil {
		return fmt.Errorf("membership: record late leave of user %d at %d: %w", userID, start, err)
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
// reader of a committed store sees one without the other; a reopened empty
// episode goes with the Left state that replaces it, and a window carried
// to a moved boundary with the boundary.
func (b *Batch) write(c Change) error {
	user := c.After.UserID
	if c.Closed != nil {
		key := appendHistoryKey(b.keyBuf[:0], user, c.Closed.LeftAtNs)
		v := encodeHistory(*c.Closed)
		if err := b.pb.Set(key, v[:], nil); err != nil {
			return err
		}
	}
	if c.Reopened != nil {
		if err := b.pb.Delete(appendHistoryKey(b.keyBuf[:0], user, c.Reopened.LeftAtNs), nil); err != nil {
			return err
		}
	}
	if c.MovedFrom != 0 && !slices.Equal(c.Before.LateLeaves, c.After.LateLeaves) {
		if err := b.pb.Delete(appendLateLeaveKey(b.keyBuf[:0], user, c.MovedFrom), nil); err != nil {
			return err
		}
		w := c.After.LateLeaves[len(c.After.LateLeaves)-1] // the open episode's, last
		v := encodeLateLeave(w)
		if err := b.pb.Set(appendLateLeaveKey(b.keyBuf[:0], user, w.LeftAtNs), v[:], nil); err != nil {
			return err
		}
	}
	key := appendStateKey(b.keyBuf[:0], user)
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
//
// A failed write or sync fails the store (ErrFailed): the error is a
// *StorageError naming the store's directory, and the batch is in the
// store, after a reopen, in full or not at all.
func (b *Batch) Commit() error {
	if b.done {
		return ErrBatchDone
	}
	op := fmt.Sprintf("commit batch of %d commands", b.n)
	if err := b.s.usable(op); err != nil {
		b.finish()
		return err
	}
	err := b.commit()
	b.finish()
	if err != nil {
		return b.s.storageErr(op, err)
	}
	return nil
}

// commit commits the Pebble batch, turning a Pebble fatal error into the
// store's failure.
func (b *Batch) commit() (err error) {
	defer b.s.guardBare(&err)
	switch {
	case b.outbox:
		return b.s.commitOutbox(b.pb, false)
	case !b.pb.Empty():
		return b.pb.Commit(b.s.writeOpt)
	}
	return nil
}

// CommitNoSyncWait writes the batch to the store as Commit does, but
// returns once it is applied: later batches and reads see it, while the
// write-ahead log may not have reached the disk yet. Nothing that depends
// on the batch being durable may happen before the returned Syncing's Wait
// returns nil. Both together are Commit, in two halves: a crash before the
// sync loses the batch whole (and every batch committed after it), never
// part of it. The claims are released now (reads see the batch); the batch
// is done.
//
// It lets a caller overlap the sync of one batch with building the next
// one, which reads this one's writes. With Options.NoSync there is no sync
// to wait for, and Wait returns at once.
func (b *Batch) CommitNoSyncWait() (*Syncing, error) {
	if b.done {
		return nil, ErrBatchDone
	}
	op := fmt.Sprintf("commit batch of %d commands", b.n)
	if err := b.s.usable(op); err != nil {
		b.finish()
		return nil, err
	}
	if !b.s.writeOpt.Sync || b.pb.Empty() && !b.outbox {
		err := b.commit()
		b.finish()
		if err != nil {
			return nil, b.s.storageErr(op, err)
		}
		return &Syncing{}, nil
	}
	err := b.commitNoSyncWait()
	b.done = true
	b.s.release(b) // the Pebble batch stays open until its sync is over
	if err != nil {
		_ = b.pb.Close()
		return nil, b.s.storageErr(op, err)
	}
	return &Syncing{s: b.s, pb: b.pb, op: op}, nil
}

func (b *Batch) commitNoSyncWait() (err error) {
	defer b.s.guardBare(&err)
	if b.outbox {
		return b.s.commitOutbox(b.pb, true)
	}
	return b.s.db.ApplyNoSyncWait(b.pb, b.s.writeOpt)
}

// Syncing is a batch committed by CommitNoSyncWait whose sync may still be
// under way. It belongs to one goroutine, which need not be the batch's.
type Syncing struct {
	s  *Store
	pb *pebble.Batch // nil once waited for, or when there was no sync
	op string
}

// Wait returns once the batch is durable, or with the error that failed its
// sync: the store is then failed (ErrFailed), as when Commit fails, and
// the batch is in the store, after a reopen, in full or not at all. Calls
// after the first return nil.
func (s *Syncing) Wait() error {
	if s.pb == nil {
		return nil
	}
	pb := s.pb
	s.pb = nil
	err := pb.SyncWait()
	_ = pb.Close()
	if err != nil {
		f := &fatalError{dir: s.s.dir, msg: "sync of the write-ahead log: " + err.Error(), cause: err}
		return s.s.storageErr(s.op, s.s.fail(f))
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
