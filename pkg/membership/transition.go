package membership

import (
	"fmt"
)

// transition computes the effect of op at atNs on m, a user who has never
// seen this command's identity (duplicates are recognised before, by
// Batch.Apply). It is the whole of the package's semantics and touches no
// storage, so that every write path agrees on it.
//
// A leave's boundary is first raised to the end of the last closed episode:
// history is never rewritten, so episodes stay disjoint and ascending. On an
// Active user the leave opens an episode there. On a Left user an earlier
// boundary moves left_at back (privacy first: the earliest boundary wins)
// and a later one changes nothing. When the resulting left_at is the start
// of the last closed episode, that episode is the empty [t, t) (nothing
// else can start where the last one ends), and it is reopened: taken out of
// the history, so that no two episodes share a start.
//
// A rejoin closes the open episode [left_at, atNs) and makes the user
// Active; atNs == left_at closes the empty episode (a leave and a rejoin in
// the same instant, ordered by their arrival). A rejoin before left_at is
// refused with ErrRejoinBeforeLeave; on an Active user it changes nothing.
// A rejoin that would close episode maxHistory+1 is refused with
// ErrHistoryFull: a user's state grows with its episodes, and the cap keeps
// it (and every changelog record and restore header of it) bounded, while
// the user stays left, which fails closed.
func transition(m Member, op Op, atNs uint64, maxHistory int) (Change, error) {
	if atNs == OpenEnd {
		return Change{}, fmt.Errorf("%w: user %d: %v at %d: time is the OpenEnd sentinel (math.MaxUint64)", ErrInvalid, m.UserID, op, atNs)
	}
	// Cap the slices so that appending to After never writes into a
	// backing array that Before also shows.
	m.History = m.History[:len(m.History):len(m.History)]
	m.LateLeaves = m.LateLeaves[:len(m.LateLeaves):len(m.LateLeaves)]
	c := Change{Before: m, After: m}
	switch op {
	case OpLeave:
		left := atNs
		n := len(m.History)
		if n > 0 && m.History[n-1].RejoinedAtNs > left {
			left = m.History[n-1].RejoinedAtNs
		}
		switch {
		case m.Status == Active:
			c.After.Status = Left
		case left < m.LeftAtNs:
			c.MovedFrom = m.LeftAtNs
		default:
			return c, nil // the earliest boundary stays
		}
		c.After.LeftAtNs = left
		if n > 0 && m.History[n-1].LeftAtNs == left {
			reopened := m.History[n-1]
			c.Reopened = &reopened
			c.After.History = m.History[: n-1 : n-1]
		}
		if c.MovedFrom != 0 {
			c.After.LateLeaves = moveWindow(m.LateLeaves, c.MovedFrom, left)
		}
		c.Changed = true
		return c, nil
	case OpRejoin:
		if m.Status == Active {
			return c, nil
		}
		if atNs < m.LeftAtNs {
			return Change{}, fmt.Errorf("%w: user %d: left_at %d, rejoin at %d", ErrRejoinBeforeLeave, m.UserID, m.LeftAtNs, atNs)
		}
		if len(m.History) >= maxHistory {
			return Change{}, fmt.Errorf("%w: user %d: %d closed episodes, the most a user keeps: the user stays left", ErrHistoryFull, m.UserID, len(m.History))
		}
		closed := Episode{LeftAtNs: m.LeftAtNs, RejoinedAtNs: atNs}
		c.After.Status, c.After.LeftAtNs = Active, 0
		c.After.History = append(m.History, closed)
		c.Changed = true
		c.Closed = &closed
		return c, nil
	default:
		return Change{}, fmt.Errorf("%w: user %d: unknown op %v", ErrInvalid, m.UserID, op)
	}
}

// moveWindow returns ws with the window of the open leave at from, if any,
// carried to the new boundary to (to < from), merged with a window already
// there (one of a reopened empty episode). ws is ascending by LeftAtNs and
// is not modified; the result is a new slice when anything moves.
func moveWindow(ws []LateLeave, from, to uint64) []LateLeave {
	i := -1
	for j, w := range ws {
		if w.LeftAtNs == from {
			i = j
		}
	}
	if i < 0 {
		return ws
	}
	moved := ws[i]
	moved.LeftAtNs = to
	out := make([]LateLeave, 0, len(ws))
	for j, w := range ws {
		switch {
		case j == i:
		case w.LeftAtNs == to:
			moved = moved.merge(w)
		default:
			out = append(out, w)
		}
	}
	// Windows start at episode starts; to is the open episode's start, so
	// it follows every window of a closed episode except the reopened one,
	// merged above.
	return append(out, moved)
}
