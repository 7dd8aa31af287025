package membership

import (
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestHistoryFull: a user who toggled leave and rejoin MaxHistory times
// keeps its state bounded: the next leave applies (privacy first), the
// rejoin that would close one episode more is refused and the user stays
// left. Delivered again, in the store or in one a dump was imported into,
// it is refused again for the same reason.
func TestHistoryFull(t *testing.T) {
	const max, user = 3, 9
	src := openFS(t, vfs.NewMem(), &Options{MaxHistory: max})
	at := uint64(100)
	for range max {
		for _, op := range []Op{OpLeave, OpRejoin} {
			at += 10
			if c, err := src.Apply(Command{Op: op, UserID: user, AtNs: at}); err != nil || !c.Changed {
				t.Fatalf("%v at %d: %+v, %v", op, at, c, err)
			}
		}
	}
	if c, err := src.Apply(Command{Op: OpLeave, UserID: user, AtNs: at + 10}); err != nil || !c.Changed {
		t.Fatalf("a leave with a full history: %+v, %v; want it applied", c, err)
	}
	rejoin := Command{Op: OpRejoin, UserID: user, AtNs: at + 20, RequestID: "once-more"}
	c, err := src.Apply(rejoin)
	if !errors.Is(err, ErrHistoryFull) || c.Changed {
		t.Fatalf("a rejoin past %d episodes: %+v, %v; want ErrHistoryFull, no change", max, c, err)
	}
	if m, err := src.Member(user); err != nil || m.Status != Left || len(m.History) != max {
		t.Fatalf("after the refused rejoin: %+v, %v; want left with %d episodes", m, err, max)
	}

	dst := openFS(t, vfs.NewMem(), &Options{MaxHistory: max})
	copyUser(t, src, dst, user)
	for name, s := range map[string]*Store{"store": src, "imported": dst} {
		c, err := s.Apply(rejoin)
		if !errors.Is(err, ErrHistoryFull) || !c.Duplicate || c.Changed {
			t.Errorf("%s: the refused rejoin again: %+v, %v; want a duplicate refused with ErrHistoryFull", name, c, err)
		}
	}
}

// TestMaxHistoryOption: the option is checked and defaulted.
func TestMaxHistoryOption(t *testing.T) {
	if got := (&Options{}).EnsureDefaults().MaxHistory; got != DefaultMaxHistory {
		t.Errorf("default MaxHistory %d, want %d", got, DefaultMaxHistory)
	}
	if _, err := Open("db", &Options{FS: vfs.NewMem(), MaxHistory: -1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("MaxHistory -1: %v, want ErrInvalid", err)
	}
}
