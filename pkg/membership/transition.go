package membership

import (
	"cmp"
	"fmt"
	"slices"
)

// transition computes the effect of op at atNs on m. It is the whole of the
// package's semantics and touches no storage, so that every write path
// agrees on it.
func transition(m Member, op Op, atNs uint64) (Change, error) {
	if atNs == OpenEnd {
		return Change{}, fmt.Errorf("%w: user %d: %v at %d: time is the OpenEnd sentinel (math.MaxUint64)", ErrInvalid, m.UserID, op, atNs)
	}
	// Cap the history so that appending to After never writes into a
	// backing array that Before also shows.
	m.History = m.History[:len(m.History):len(m.History)]
	c := Change{Before: m, After: m}
	switch op {
	case OpLeave:
		if m.Status == Left {
			return c, nil // keep the first boundary
		}
		// A leave at the start of a closed episode is that episode's leave
		// delivered again after the rejoin (a re-published record, say).
		// Applied, it would open a new leave; it is a no-op instead.
		if _, dup := slices.BinarySearchFunc(m.History, atNs, func(e Episode, at uint64) int {
			return cmp.Compare(e.LeftAtNs, at)
		}); dup {
			return c, nil
		}
		left := atNs
		// History is never rewritten, so a leave stamped before the end of
		// the last closed episode starts where that episode ended: episodes
		// stay disjoint and ascending, and no signal of the overlap is
		// counted twice.
		if n := len(m.History); n > 0 && m.History[n-1].RejoinedAtNs > left {
			left = m.History[n-1].RejoinedAtNs
		}
		c.After.Status, c.After.LeftAtNs = Left, left
		c.Changed = true
		return c, nil
	case OpRejoin:
		if m.Status == Active {
			return c, nil
		}
		if atNs <= m.LeftAtNs {
			return Change{}, fmt.Errorf("%w: user %d: left_at %d, rejoin at %d", ErrRejoinBeforeLeave, m.UserID, m.LeftAtNs, atNs)
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
