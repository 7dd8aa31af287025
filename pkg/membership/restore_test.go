package membership

import (
	"context"
	"errors"
	"reflect"
	"testing"
)

func TestRestore(t *testing.T) {
	s := openMem(t)
	b := s.NewBatch()
	defer b.Close()
	must := mustOK(t)
	// Users chosen so that key order differs from insertion order.
	must(b.Leave(1<<40, 10))
	must(b.Leave(3, 10))
	must(b.Rejoin(3, 20))
	must(b.Leave(3, 30))
	must(b.Rejoin(3, 40))
	must(b.Leave(3, 50))
	must(b.Leave(2, 5))
	must(b.Rejoin(2, 6))
	must(b.Rejoin(4, 6)) // no-op: no record
	must(b.Rejoin(5, 6)) // no-op, but noted below
	for _, err := range []error{
		b.SetCheckpoint("c", 0, 1),
		// Late leaves and notes on users before and after others without,
		// so that a reused slice would show.
		b.RecordLateLeave(3, LateLeave{LeftAtNs: 10, ForwardedThroughNs: 15}),
		b.RecordLateLeave(3, LateLeave{LeftAtNs: 50, ForwardedThroughNs: 70}),
		b.SetNote(3, []byte("three")),
		b.SetNote(5, []byte("five")),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	three := member(3, Left, 50, Episode{10, 20}, Episode{30, 40})
	three.LateLeaves = []LateLeave{{LeftAtNs: 10, ForwardedThroughNs: 15}, {LeftAtNs: 50, ForwardedThroughNs: 70}}
	three.Note = []byte("three")
	five := member(5, Active, 0)
	five.Note = []byte("five")
	want := []Member{
		member(2, Active, 0, Episode{5, 6}),
		three,
		five,
		member(1<<40, Left, 10),
	}
	var got []Member
	st, err := s.Restore(context.Background(), func(m Member) error {
		// The slices are reused between calls: keep a copy.
		got = append(got, owned(m))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Restore delivered\n%+v\nwant\n%+v", got, want)
	}
	if st.Members != 4 || st.Episodes != 5 || st.Duration <= 0 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestRestoreEmpty(t *testing.T) {
	s := openMem(t)
	st, err := s.Restore(context.Background(), func(Member) error {
		t.Fatal("fn called on an empty store")
		return nil
	})
	if err != nil || st.Members != 0 || st.Episodes != 0 {
		t.Fatalf("Restore = %+v, %v", st, err)
	}
}

func TestRestoreStops(t *testing.T) {
	s := openMem(t)
	b := s.NewBatch()
	defer b.Close()
	const users = 3 * ctxCheckEvery
	for u := range uint64(users) {
		mustOK(t)(b.Leave(u, 1))
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}

	t.Run("fn error", func(t *testing.T) {
		stop := errors.New("stop")
		st, err := s.Restore(context.Background(), func(m Member) error {
			if m.UserID == 10 {
				return stop
			}
			return nil
		})
		if !errors.Is(err, stop) || st.Members != 10 {
			t.Fatalf("Restore = %+v, %v", st, err)
		}
	})
	t.Run("cancelled before", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		st, err := s.Restore(ctx, func(Member) error { return nil })
		if !errors.Is(err, context.Canceled) || st.Members != 0 {
			t.Fatalf("Restore = %+v, %v", st, err)
		}
	})
	t.Run("cancelled during", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		st, err := s.Restore(ctx, func(m Member) error {
			if m.UserID == 5 {
				cancel()
			}
			return nil
		})
		// ctx is looked at every ctxCheckEvery members.
		if !errors.Is(err, context.Canceled) || st.Members != ctxCheckEvery {
			t.Fatalf("Restore = %+v, %v", st, err)
		}
	})
}
