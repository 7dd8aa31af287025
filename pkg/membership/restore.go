package membership

import (
	"context"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// RestoreStats reports what Restore delivered.
type RestoreStats struct {
	Members  int           // calls of fn that returned nil, note-only users included
	Episodes int           // episodes of those members, closed and open
	Duration time.Duration // wall time of the whole scan
}

// ctxCheckEvery is how many members Restore delivers between looks at ctx:
// often enough to stop within a millisecond, rarely enough to cost nothing.
const ctxCheckEvery = 1024

// Restore calls fn once for every user with records, in ascending user ID
// order, with the member's validated state, history, late-leave windows and
// note, reading the users key space once from one consistent view of the
// store. That includes users with only a note, who are Active with no
// episodes: a caller rebuilding a gate skips them.
//
// The Member's History, LateLeaves and Note are only valid during the call:
// their backing arrays are reused for the next member, so fn must copy what
// it keeps (m.Episodes(nil) makes a copy of the episodes). A member without
// a note has a nil Note.
//
// Restore stops at the first error of fn, at a corrupt record (an error
// wrapping ErrCorrupt that names the key, before fn sees the member), or
// when ctx is done; the returned stats count what was delivered until then.
func (s *Store) Restore(ctx context.Context, fn func(Member) error) (RestoreStats, error) {
	start := time.Now()
	var st RestoreStats
	if err := s.usable("restore"); err != nil {
		return st, err
	}
	err := s.restore(ctx, fn, &st)
	st.Duration = time.Since(start)
	return st, err
}

func (s *Store) restore(ctx context.Context, fn func(Member) error, st *RestoreStats) (err error) {
	defer s.guard("restore", &err)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("membership: restore: %w", err)
	}
	it, err := s.db.NewIterWithContext(ctx, &pebble.IterOptions{
		LowerBound: []byte{spaceUsers},
		UpperBound: []byte{spaceUsers + 1},
	})
	if err != nil {
		return s.storageErr("restore", err)
	}
	var a assembler
	a.emit = func(m *Member) error {
		if st.Members%ctxCheckEvery == 0 && st.Members > 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("membership: restore stopped before user %d: %w", m.UserID, err)
			}
		}
		if err := fn(*m); err != nil {
			return fmt.Errorf("membership: restore stopped at user %d: %w", m.UserID, err)
		}
		st.Members++
		st.Episodes += len(m.History)
		if m.Status == Left {
			st.Episodes++
		}
		return nil
	}
	for valid := it.First(); valid; valid = it.Next() {
		value, err := it.ValueAndErr()
		if err != nil {
			break // reported by it.Close
		}
		if err := a.add(it.Key(), value); err != nil {
			_ = it.Close()
			return err
		}
	}
	if err := it.Close(); err != nil {
		return s.storageErr("restore", err)
	}
	return a.finish()
}
