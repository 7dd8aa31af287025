package membership

import (
	"cmp"
	"encoding/binary"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// assembler builds Members from users-space records fed in key order, and
// checks the invariants that no single record can show: a user's records
// come in key order (state, history, late leaves, note); history and
// late-leave records follow the user's current-state record; episodes are
// disjoint and ascending; an open leave starts at or after the last rejoin;
// a late-leave window starts where one of the user's episodes does; and an
// Active record has history (only a rejoin writes an Active record). A user
// with only a note is Active with no history.
//
// It hands each complete member to emit. The Member and the backing arrays
// of its History, LateLeaves and Note are reused for the next member, so
// that Restore allocates nothing per member: emit must copy what it keeps.
type assembler struct {
	emit  func(*Member) error
	m     Member
	have  bool       // m holds at least one record of user m.UserID
	state bool       // one of them is the current state
	last  recordKind // the kind of the last record fed for m
	ep    int        // the first episode of m.History a late leave may start
	note  []byte     // backing array of m.Note
	// noteInPlace makes m.Note the value fed, not a copy: the caller
	// keeps the values alive while it uses the member (Dump.Decode).
	noteInPlace bool
}

// add feeds one record. The first record of a user completes the member
// before it, which is emitted first.
func (a *assembler) add(key, value []byte) error {
	userID, kind, leftAtNs, err := decodeUserKey(key)
	if err != nil {
		return err
	}
	switch {
	case !a.have:
		a.start(userID)
	case userID < a.m.UserID:
		return corruptf(key, "record of user %d follows user %d", userID, a.m.UserID)
	case userID > a.m.UserID:
		if err := a.flush(); err != nil {
			return err
		}
		a.start(userID)
	case kind < a.last || (kind == a.last && (kind == kindState || kind == kindNote)):
		// Only possible if records are not fed in key order.
		return corruptf(key, "record of user %d out of key order", userID)
	}
	a.last = kind
	m := &a.m
	switch kind {
	case kindState:
		st, err := decodeStateValue(key, userID, value)
		if err != nil {
			return err
		}
		m.CommunityMembership = st
		a.state = true
	case kindHistory:
		if !a.state {
			return corruptf(key, "history record without a current state of user %d", userID)
		}
		e, err := decodeHistoryValue(key, leftAtNs, value)
		if err != nil {
			return err
		}
		if n := len(m.History); n > 0 && e.LeftAtNs < m.History[n-1].RejoinedAtNs {
			last := m.History[n-1]
			return corruptf(key, "episode [%d, %d) overlaps episode [%d, %d)", e.LeftAtNs, e.RejoinedAtNs, last.LeftAtNs, last.RejoinedAtNs)
		}
		m.History = append(m.History, e)
	case kindLateLeave:
		if !a.state {
			return corruptf(key, "late-leave record without a current state of user %d", userID)
		}
		w, err := decodeLateLeaveValue(key, leftAtNs, value)
		if err != nil {
			return err
		}
		if n := len(m.LateLeaves); n > 0 && w.LeftAtNs <= m.LateLeaves[n-1].LeftAtNs {
			return corruptf(key, "late-leave window at %d follows the one at %d", w.LeftAtNs, m.LateLeaves[n-1].LeftAtNs)
		}
		// Windows ascend, so the search resumes where the last one ended.
		for a.ep < len(m.History) && m.History[a.ep].LeftAtNs < w.LeftAtNs {
			a.ep++
		}
		atClosed := a.ep < len(m.History) && m.History[a.ep].LeftAtNs == w.LeftAtNs
		atOpen := m.Status == Left && m.LeftAtNs == w.LeftAtNs
		if !atClosed && !atOpen {
			return corruptf(key, "late-leave window at %d, where no episode of user %d starts", w.LeftAtNs, userID)
		}
		m.LateLeaves = append(m.LateLeaves, w)
	case kindNote:
		if err := checkNoteValue(key, value); err != nil {
			return err
		}
		if a.noteInPlace {
			m.Note = value
			break
		}
		a.note = append(a.note[:0], value...)
		m.Note = a.note
	}
	return nil
}

// start begins the member userID, reusing the backing arrays.
func (a *assembler) start(userID uint64) {
	a.m = Member{
		CommunityMembership: CommunityMembership{UserID: userID, Status: Active},
		History:             a.m.History[:0],
		LateLeaves:          a.m.LateLeaves[:0],
	}
	a.have, a.state, a.last, a.ep = true, false, 0, 0
}

// finish emits the last member, if any, once every record has been fed.
func (a *assembler) finish() error {
	if !a.have {
		return nil
	}
	return a.flush()
}

// flush checks the member being built against its whole history and emits
// it.
func (a *assembler) flush() error {
	a.have = false
	m := &a.m
	if !a.state {
		// Only a note: add refuses the other records without a state.
		return a.emit(m)
	}
	switch n := len(m.History); {
	case m.Status == Active && n == 0:
		return corruptf(appendStateKey(nil, m.UserID), "active state without history")
	case m.Status == Left && n > 0 && m.LeftAtNs < m.History[n-1].RejoinedAtNs:
		last := m.History[n-1]
		return corruptf(appendStateKey(nil, m.UserID), "open leave at %d overlaps episode [%d, %d)", m.LeftAtNs, last.LeftAtNs, last.RejoinedAtNs)
	case m.Status == Left && n > 0 && m.LeftAtNs == m.History[n-1].LeftAtNs:
		return corruptf(appendStateKey(nil, m.UserID), "open leave at %d starts where the closed episode [%d, %d) does", m.LeftAtNs, m.History[n-1].LeftAtNs, m.History[n-1].RejoinedAtNs)
	}
	return a.emit(m)
}

// episodeStart returns the start of m's episode that holds ns: the open one
// if ns is at or after left_at, else the closed one with LeftAtNs <= ns <
// RejoinedAtNs, or the empty one starting at ns.
func (m *Member) episodeStart(ns uint64) (uint64, bool) {
	if m.Status == Left && m.LeftAtNs <= ns {
		return m.LeftAtNs, true
	}
	// The last episode starting at or before ns is the only candidate:
	// episodes are disjoint and ascending.
	i, found := slices.BinarySearchFunc(m.History, ns, func(e Episode, ns uint64) int { return cmp.Compare(e.LeftAtNs, ns) })
	if !found {
		i--
	}
	if i < 0 {
		return 0, false
	}
	e := m.History[i]
	if e.Contains(ns) || (e.IsEmpty() && e.LeftAtNs == ns) {
		return e.LeftAtNs, true
	}
	return 0, false
}

// reader is what readMember needs of a *pebble.DB or an indexed *pebble.Batch.
type reader interface {
	NewIter(*pebble.IterOptions) (*pebble.Iterator, error)
}

// readMember reads and validates userID's records. A user without records is
// Active with no history. The member's slices are its own. bounds is scratch
// space for the iterator bounds.
func readMember(r reader, userID uint64, bounds *[2 * stateKeyLen]byte) (Member, error) {
	return readUser(r, userID, bounds, nil)
}

// dumpRecords is the users-space part of a dump being made: its records
// as the dump lays them out, and how many.
type dumpRecords struct {
	b []byte
	n int
}

// add appends the record (key, value) of the users space.
func (d *dumpRecords) add(key, value []byte) {
	k := key[1+8:] // the tag and suffix: the space byte and user ID off
	d.b = binary.AppendUvarint(d.b, uint64(len(k)))
	d.b = append(d.b, k...)
	d.b = binary.AppendUvarint(d.b, uint64(len(value)))
	d.b = append(d.b, value...)
	d.n++
}

// readUser is readMember that also adds, when recs is not nil, each record
// read to recs: one pass over the user's records gives the member and the
// users-space part of its dump.
func readUser(r reader, userID uint64, bounds *[2 * stateKeyLen]byte, recs *dumpRecords) (Member, error) {
	lower := appendStateKey(bounds[:0], userID)
	upper := appendUserUpperBound(bounds[stateKeyLen:stateKeyLen], userID)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return Member{}, err
	}
	var (
		m     Member
		found bool
	)
	a := assembler{emit: func(got *Member) error {
		m, found = *got, true
		return nil
	}}
	for valid := it.First(); valid; valid = it.Next() {
		value, err := it.ValueAndErr()
		if err != nil {
			break // reported by it.Close
		}
		if err := a.add(it.Key(), value); err != nil {
			_ = it.Close()
			return Member{}, err
		}
		if recs != nil {
			recs.add(it.Key(), value)
		}
	}
	if err := it.Close(); err != nil {
		return Member{}, err
	}
	if err := a.finish(); err != nil {
		return Member{}, err
	}
	if !found {
		return Member{CommunityMembership: CommunityMembership{UserID: userID}}, nil
	}
	// Only one member is read: the slices are not shared.
	if len(m.History) == 0 {
		m.History = nil
	}
	if len(m.LateLeaves) == 0 {
		m.LateLeaves = nil
	}
	return m, nil
}
