package membership

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"testing"
)

func TestRecordLateLeaveKeepsMax(t *testing.T) {
	s := openMem(t)
	mustOK(t)(s.Leave(1, 100))
	record := func(left, through uint64) {
		t.Helper()
		b := s.NewBatch()
		defer b.Close()
		if err := b.RecordLateLeave(1, LateLeave{LeftAtNs: left, ForwardedThroughNs: through}); err != nil {
			t.Fatalf("RecordLateLeave(1, %d, %d): %v", left, through, err)
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	record(100, 150)
	checkMembers(t, s, []Member{{CommunityMembership: CommunityMembership{UserID: 1, Status: Left, LeftAtNs: 100}, LateLeaves: []LateLeave{{LeftAtNs: 100, ForwardedThroughNs: 150}}}})

	// A window that reaches no further writes nothing.
	before := dump(t, s)
	for _, through := range []uint64{100, 120, 150} {
		b := s.NewBatch()
		if err := b.RecordLateLeave(1, LateLeave{LeftAtNs: 100, ForwardedThroughNs: through}); err != nil || !b.pb.Empty() {
			t.Fatalf("RecordLateLeave(1, 100, %d) = %v; staged %d bytes", through, err, b.pb.Len())
		}
		b.Close()
		record(100, through)
	}
	if after := dump(t, s); after != before {
		t.Fatalf("smaller windows changed the store\nbefore:\n%s\nafter:\n%s", before, after)
	}
	record(100, 180)

	// Windows of later leaves, and of closed episodes, ascend.
	mustOK(t)(s.Rejoin(1, 200))
	mustOK(t)(s.Leave(1, 300))
	record(300, 300)
	record(100, 190)
	mustOK(t)(s.Rejoin(1, 400))
	record(300, 350)
	want := Member{
		CommunityMembership: CommunityMembership{UserID: 1, Status: Active},
		History:             []Episode{{100, 200}, {300, 400}},
		LateLeaves:          []LateLeave{{LeftAtNs: 100, ForwardedThroughNs: 190}, {LeftAtNs: 300, ForwardedThroughNs: 350}},
	}
	checkMembers(t, s, []Member{want})
	got := restoreAll(t, s)
	if !reflect.DeepEqual(got, []Member{want}) {
		t.Fatalf("Restore = %+v, want %+v", got, want)
	}
}

func TestRecordLateLeaveInvalid(t *testing.T) {
	s := openMem(t)
	mustOK(t)(s.Leave(1, 100))
	mustOK(t)(s.Leave(2, 100))
	mustOK(t)(s.Rejoin(2, 200))
	b := s.NewBatch()
	if err := b.SetNote(3, []byte("n")); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	before := dump(t, s)
	for _, tc := range []struct {
		name                string
		user, left, through uint64
	}{
		{"through before left", 1, 100, 99},
		{"user who never left", 4, 100, 100},
		{"user with only a note", 3, 100, 100},
		{"before the first episode", 2, 99, 150},
		{"at a rejoin", 2, 200, 200},
		{"after a closed episode", 2, 250, 300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := s.NewBatch()
			defer b.Close()
			err := b.RecordLateLeave(tc.user, LateLeave{LeftAtNs: tc.left, ForwardedThroughNs: tc.through})
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("RecordLateLeave(%d, %d, %d) = %v, want ErrInvalid", tc.user, tc.left, tc.through, err)
			}
			if !b.pb.Empty() {
				t.Fatalf("refused window staged %d bytes", b.pb.Len())
			}
		})
	}
	if after := dump(t, s); after != before {
		t.Fatalf("store changed:\n%s", after)
	}
}

// TestLateLeaveInBatch records a window for a leave of the same batch, then
// closes that leave, as a consumer does when both commands are in one poll.
func TestLateLeaveInBatch(t *testing.T) {
	s := openMem(t)
	b := s.NewBatch()
	defer b.Close()
	c := mustOK(t)(b.Leave(1, 100))
	if err := b.RecordLateLeave(1, LateLeave{LeftAtNs: c.After.LeftAtNs, ForwardedThroughNs: 130}); err != nil {
		t.Fatal(err)
	}
	c = mustOK(t)(b.Rejoin(1, 200))
	if want := []LateLeave{{LeftAtNs: 100, ForwardedThroughNs: 130}}; !reflect.DeepEqual(c.After.LateLeaves, want) || !reflect.DeepEqual(c.Before.LateLeaves, want) {
		t.Fatalf("rejoin's change: %+v, want late leaves %v on both sides", c, want)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	checkMembers(t, s, []Member{{
		CommunityMembership: CommunityMembership{UserID: 1, Status: Active},
		History:             []Episode{{100, 200}},
		LateLeaves:          []LateLeave{{LeftAtNs: 100, ForwardedThroughNs: 130}},
	}})
}

func TestNoteOnlyMember(t *testing.T) {
	s := openMem(t)
	b := s.NewBatch()
	defer b.Close()
	// A rejoin of a user who never left is a no-op; the caller notes it.
	if c := mustOK(t)(b.Rejoin(7, 100)); c.Changed {
		t.Fatalf("rejoin changed: %+v", c)
	}
	if err := b.SetNote(7, []byte(`{"op":"rejoin"}`)); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	want := Member{CommunityMembership: CommunityMembership{UserID: 7, Status: Active}, Note: []byte(`{"op":"rejoin"}`)}
	checkMembers(t, s, []Member{want})
	var got []Member
	st, err := s.Restore(context.Background(), func(m Member) error {
		got = append(got, owned(m))
		if len(m.Episodes(nil)) != 0 {
			t.Errorf("note-only member has episodes: %+v", m)
		}
		return nil
	})
	if err != nil || st.Members != 1 || st.Episodes != 0 {
		t.Fatalf("Restore = %+v, %v", st, err)
	}
	if !reflect.DeepEqual(got, []Member{want}) {
		t.Fatalf("Restore delivered %+v, want %+v", got, want)
	}

	// The note stays through leaves and rejoins, and a new one replaces it.
	c := mustOK(t)(s.Leave(7, 200))
	if !bytes.Equal(c.Before.Note, want.Note) || !bytes.Equal(c.After.Note, want.Note) {
		t.Fatalf("leave's change lost the note: %+v", c)
	}
	b = s.NewBatch()
	defer b.Close()
	if err := b.SetNote(7, []byte("second")); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	checkMembers(t, s, []Member{{CommunityMembership: CommunityMembership{UserID: 7, Status: Left, LeftAtNs: 200}, Note: []byte("second")}})
}

func TestSetNoteInvalid(t *testing.T) {
	s := openMem(t)
	b := s.NewBatch()
	defer b.Close()
	for _, note := range [][]byte{nil, {}, make([]byte, MaxNoteLen+1)} {
		if err := b.SetNote(1, note); !errors.Is(err, ErrInvalid) {
			t.Errorf("SetNote with %d bytes = %v, want ErrInvalid", len(note), err)
		}
	}
	if !b.pb.Empty() {
		t.Fatalf("refused notes staged %d bytes", b.pb.Len())
	}
	if err := b.SetNote(1, make([]byte, MaxNoteLen)); err != nil {
		t.Fatalf("SetNote with MaxNoteLen bytes: %v", err)
	}
}

// TestMemberOwnsItsSlices: the store copies what it is given and what it
// hands back, so neither side can change the other's bytes.
func TestMemberOwnsItsSlices(t *testing.T) {
	s := openMem(t)
	note := []byte("note")
	b := s.NewBatch()
	defer b.Close()
	mustOK(t)(b.Leave(1, 100))
	mustOK(t)(b.Rejoin(1, 200))
	mustOK(t)(b.Leave(1, 300))
	if err := b.RecordLateLeave(1, LateLeave{LeftAtNs: 300, ForwardedThroughNs: 310}); err != nil {
		t.Fatal(err)
	}
	if err := b.SetNote(1, note); err != nil {
		t.Fatal(err)
	}
	note[0] = 'X' // after SetNote, before Commit
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	want := Member{
		CommunityMembership: CommunityMembership{UserID: 1, Status: Left, LeftAtNs: 300},
		History:             []Episode{{100, 200}},
		LateLeaves:          []LateLeave{{LeftAtNs: 300, ForwardedThroughNs: 310}},
		Note:                []byte("note"),
	}
	m, err := s.Member(1)
	if err != nil || !reflect.DeepEqual(m, want) {
		t.Fatalf("Member = %+v, %v; want %+v", m, err, want)
	}
	m.History[0], m.LateLeaves[0], m.Note[0] = Episode{1, 2}, LateLeave{LeftAtNs: 3, ForwardedThroughNs: 4}, 'Y'
	checkMembers(t, s, []Member{want})
}

func TestBatchMember(t *testing.T) {
	s := openMem(t)
	mustOK(t)(s.Leave(1, 100))
	b := s.NewBatch()
	defer b.Close()
	mustOK(t)(b.Rejoin(1, 200))
	mustOK(t)(b.Leave(1, 300))
	if err := b.RecordLateLeave(1, LateLeave{LeftAtNs: 300, ForwardedThroughNs: 320}); err != nil {
		t.Fatal(err)
	}
	if err := b.SetNote(1, []byte("uncommitted")); err != nil {
		t.Fatal(err)
	}
	want := Member{
		CommunityMembership: CommunityMembership{UserID: 1, Status: Left, LeftAtNs: 300},
		History:             []Episode{{100, 200}},
		LateLeaves:          []LateLeave{{LeftAtNs: 300, ForwardedThroughNs: 320}},
		Note:                []byte("uncommitted"),
	}
	if got, err := b.Member(1); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("Batch.Member = %+v, %v; want %+v", got, err, want)
	}
	// The store does not see the batch before it commits.
	checkMembers(t, s, []Member{member(1, Left, 100)})
	// Member claims the user, like a command.
	other := s.NewBatch()
	defer other.Close()
	if _, err := other.Member(1); !errors.Is(err, ErrConflict) {
		t.Fatalf("other batch's Member of a claimed user: %v", err)
	}
	if got, err := other.Member(2); err != nil || !reflect.DeepEqual(got, member(2, Active, 0)) {
		t.Fatalf("Batch.Member of an absent user = %+v, %v", got, err)
	}
	if err := other.SetNote(1, []byte("x")); !errors.Is(err, ErrConflict) {
		t.Fatalf("other batch's SetNote of a claimed user: %v", err)
	}
	if err := other.RecordLateLeave(1, LateLeave{LeftAtNs: 100, ForwardedThroughNs: 100}); !errors.Is(err, ErrConflict) {
		t.Fatalf("other batch's RecordLateLeave of a claimed user: %v", err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	checkMembers(t, s, []Member{want})
	if _, err := b.Member(1); !errors.Is(err, ErrBatchDone) {
		t.Fatalf("Member after Commit: %v", err)
	}
}

// restoreAll returns every member Restore delivers, copied.
func restoreAll(t *testing.T, s *Store) []Member {
	t.Helper()
	var out []Member
	if _, err := s.Restore(context.Background(), func(m Member) error {
		out = append(out, owned(m))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// owned returns a copy of m that shares no memory with it, with empty
// slices nil, as Store.Member returns them.
func owned(m Member) Member {
	m = cloneMember(m)
	if len(m.History) == 0 {
		m.History = nil
	}
	if len(m.LateLeaves) == 0 {
		m.LateLeaves = nil
	}
	return m
}
