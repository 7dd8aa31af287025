package membership

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

// TestMemberDumpIsMemberAndAppendDump checks that Batch.MemberDump, one
// read of a user, returns what Member and AppendDump return, for users of
// every shape (history, a moved boundary, a late-leave window, a note, a
// refused rejoin, none at all), both as an open batch sees them and once
// committed.
func TestMemberDumpIsMemberAndAppendDump(t *testing.T) {
	s := openMem(t)
	b := s.NewBatch()
	apply := func(c Command) {
		t.Helper()
		if _, err := b.Apply(c); err != nil && !errors.Is(err, ErrRejoinBeforeLeave) {
			t.Fatalf("Apply(%+v): %v", c, err)
		}
	}
	apply(Command{Op: OpLeave, UserID: 1, AtNs: 100, RequestID: "a"})
	apply(Command{Op: OpRejoin, UserID: 1, AtNs: 200})
	apply(Command{Op: OpLeave, UserID: 2, AtNs: 500})
	apply(Command{Op: OpRejoin, UserID: 2, AtNs: 300}) // refused, remembered
	apply(Command{Op: OpLeave, UserID: 2, AtNs: 400})  // moves left_at back
	apply(Command{Op: OpLeave, UserID: 4, AtNs: 70})
	if err := b.RecordLateLeave(4, LateLeave{LeftAtNs: 70, ForwardedThroughNs: 90, Exact: true}); err != nil {
		t.Fatal(err)
	}
	if err := b.SetNote(5, []byte(`{"n":5}`)); err != nil {
		t.Fatal(err)
	}
	check := func(b *Batch, when string) {
		t.Helper()
		for u := uint64(1); u <= 6; u++ {
			want, err := b.Member(u)
			if err != nil {
				t.Fatal(err)
			}
			wantDump, err := b.AppendDump([]byte("prefix"), u)
			if err != nil {
				t.Fatal(err)
			}
			got, gotDump, err := b.MemberDump([]byte("prefix"), u)
			if err != nil {
				t.Fatalf("%s: MemberDump(user %d): %v", when, u, err)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s: member of user %d: %+v, want %+v", when, u, got, want)
			}
			if !bytes.Equal(gotDump, wantDump) {
				t.Errorf("%s: dump of user %d:\n%x\nwant\n%x", when, u, gotDump, wantDump)
			}
		}
	}
	check(b, "open batch")
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b = s.NewBatch()
	defer b.Close()
	check(b, "committed")
}

// TestApplyWithCorruptIdentity: a user holds an identity whose value does
// not decode. A command delivered again whose own identity is sound is
// still a duplicate, as when its identity alone was read; a new command
// fails with ErrCorrupt, when it would remember its identity among them.
func TestApplyWithCorruptIdentity(t *testing.T) {
	first := Command{Op: OpLeave, UserID: 7, AtNs: 100, RequestID: "first"}
	setup := func(t *testing.T) *Store {
		s := openMem(t)
		if _, err := s.Apply(first); err != nil {
			t.Fatal(err)
		}
		// An identity sorting before and one after first's, both corrupt
		// (unknown flags).
		bad := []byte{0, 0, 0, 0, 0, 0, 0, 0, 0xff}
		for _, id := range []string{"bad1", "bad2", "bad3"} {
			key := appendIdentityKey(nil, Command{Op: OpLeave, UserID: 7, AtNs: 1, RequestID: id})
			if err := s.db.Set(key, bad, nil); err != nil {
				t.Fatal(err)
			}
		}
		return s
	}
	t.Run("duplicate", func(t *testing.T) {
		s := setup(t)
		ch, err := s.Apply(first)
		if err != nil || !ch.Duplicate {
			t.Fatalf("Apply of the same command again: %+v, %v; want a duplicate", ch, err)
		}
	})
	t.Run("new", func(t *testing.T) {
		s := setup(t)
		_, err := s.Apply(Command{Op: OpLeave, UserID: 7, AtNs: 50, RequestID: "new"})
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Apply of a new command: %v, want ErrCorrupt", err)
		}
	})
}
