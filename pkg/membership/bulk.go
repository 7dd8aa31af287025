package membership

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Bulk writes whole members into the store without reading it: a fast
// path to build large stores (the restart benchmarks build 100M members
// with it), some fifty times cheaper per member than a command through a
// Batch, which reads the user's records and writes the command's identity.
//
// Each member is written as Restore would hand it back: current state,
// history, late-leave windows and note. A Bulk records no command
// identities and no checkpoints. It trusts the caller for what it cannot
// see without reading: the store holds no records of the users it is given
// (their records would mix), and no Batch is open on them. It checks the
// rest: members come in ascending user order, each once, and each member
// on its own keeps the invariants of the package (Put validates it as
// Restore would).
//
// A Bulk belongs to one goroutine. Nothing is durable before Commit.
type Bulk struct {
	s    *Store
	pb   *pebble.Batch
	last uint64
	n    int
	done bool
	a    assembler
}

// NewBulk returns an empty Bulk.
func (s *Store) NewBulk() *Bulk {
	b := &Bulk{s: s, pb: s.db.NewBatch()}
	b.a.emit = func(*Member) error { return nil }
	return b
}

// Put stages m. It fails with an error wrapping ErrInvalid, and stages
// nothing, if m's user is not above the previous one's, or m breaks an
// invariant of the package (the error names which).
func (b *Bulk) Put(m Member) error {
	if b.done {
		return ErrBatchDone
	}
	if b.n > 0 && m.UserID <= b.last {
		return errInvalidf("bulk: user %d after user %d", m.UserID, b.last)
	}
	if len(m.Note) > 0 {
		if err := validNote(m.UserID, m.Note); err != nil {
			return err
		}
	}
	// Encode the records in key order and check them as Restore would,
	// before any is staged.
	var recs [][2][]byte
	if m.Status == Left || len(m.History) > 0 || len(m.LateLeaves) > 0 {
		v := encodeState(m.CommunityMembership)
		recs = append(recs, [2][]byte{appendStateKey(nil, m.UserID), v[:]})
	}
	for _, e := range m.History {
		v := encodeHistory(e)
		recs = append(recs, [2][]byte{appendHistoryKey(nil, m.UserID, e.LeftAtNs), v[:]})
	}
	for _, w := range m.LateLeaves {
		v := encodeLateLeave(w)
		recs = append(recs, [2][]byte{appendLateLeaveKey(nil, m.UserID, w.LeftAtNs), v[:]})
	}
	if len(m.Note) > 0 {
		recs = append(recs, [2][]byte{appendNoteKey(nil, m.UserID), m.Note})
	}
	if len(recs) == 0 {
		return errInvalidf("bulk: user %d is Active with no history and no note: nothing to write", m.UserID)
	}
	b.a.have = false
	for _, r := range recs {
		if err := b.a.add(r[0], r[1]); err != nil {
			return errInvalidf("bulk: user %d: %v", m.UserID, err)
		}
	}
	if err := b.a.finish(); err != nil {
		return errInvalidf("bulk: user %d: %v", m.UserID, err)
	}
	for _, r := range recs {
		if err := b.pb.Set(r[0], r[1], nil); err != nil {
			return fmt.Errorf("membership: bulk: user %d: %w", m.UserID, err)
		}
	}
	b.last = m.UserID
	b.n++
	return nil
}

// Len returns the members staged.
func (b *Bulk) Len() int { return b.n }

// Commit writes what was staged, all or nothing, synced unless
// Options.NoSync. The Bulk is done afterwards, whatever the result.
func (b *Bulk) Commit() error {
	if b.done {
		return ErrBatchDone
	}
	if b.s.closed.Load() {
		return ErrClosed
	}
	b.done = true
	var err error
	if !b.pb.Empty() {
		err = b.pb.Commit(b.s.writeOpt)
	}
	_ = b.pb.Close()
	if err != nil {
		return fmt.Errorf("membership: commit bulk of %d members: %w", b.n, err)
	}
	return nil
}

// Close discards what was not committed. It is safe after Commit.
func (b *Bulk) Close() error {
	if !b.done {
		b.done = true
		_ = b.pb.Close()
	}
	return nil
}
