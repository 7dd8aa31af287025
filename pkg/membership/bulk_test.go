package membership

import (
	"context"
	"errors"
	"reflect"
	"testing"
)

// TestBulkAsCommands: members put in bulk read back, through Member and
// Restore, exactly as the same members made by commands.
func TestBulkAsCommands(t *testing.T) {
	byCmds, bulk := openMem(t), openMem(t)
	note := []byte(`{"n":1}`)
	b := byCmds.NewBatch()
	for _, c := range []Command{
		{Op: OpLeave, UserID: 1, AtNs: 100},
		{Op: OpLeave, UserID: 2, AtNs: 10}, {Op: OpRejoin, UserID: 2, AtNs: 20}, {Op: OpLeave, UserID: 2, AtNs: 30},
		{Op: OpLeave, UserID: 3, AtNs: 5}, {Op: OpRejoin, UserID: 3, AtNs: 5},
	} {
		if _, err := b.Apply(c); err != nil {
			t.Fatal(err)
		}
	}
	for _, u := range []uint64{1, 3, 4} {
		if err := b.SetNote(u, note); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}

	var want []Member
	if _, err := byCmds.Restore(context.Background(), func(m Member) error {
		m.History = append([]Episode(nil), m.History...)
		m.Note = append([]byte(nil), m.Note...)
		want = append(want, m)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(want) != 4 {
		t.Fatalf("%d members by commands, want 4", len(want))
	}
	bk := bulk.NewBulk()
	for _, m := range want {
		if err := bk.Put(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := bk.Commit(); err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		got, err := bulk.Member(w.UserID)
		if err != nil {
			t.Fatal(err)
		}
		exp, _ := byCmds.Member(w.UserID)
		if !reflect.DeepEqual(got, exp) {
			t.Errorf("user %d: bulk %+v, by commands %+v", w.UserID, got, exp)
		}
	}
}

func TestBulkRefuses(t *testing.T) {
	s := openMem(t)
	bk := s.NewBulk()
	defer bk.Close()
	left := func(u, at uint64) Member {
		return Member{CommunityMembership: CommunityMembership{UserID: u, Status: Left, LeftAtNs: at}}
	}
	if err := bk.Put(left(5, 1)); err != nil {
		t.Fatal(err)
	}
	for name, m := range map[string]Member{
		"same user":          left(5, 2),
		"user below":         left(4, 2),
		"nothing to write":   {CommunityMembership: CommunityMembership{UserID: 9}},
		"active, no history": {CommunityMembership: CommunityMembership{UserID: 9}, LateLeaves: []LateLeave{{LeftAtNs: 1}}},
		"overlapping history": {CommunityMembership: CommunityMembership{UserID: 9},
			History: []Episode{{LeftAtNs: 1, RejoinedAtNs: 10}, {LeftAtNs: 5, RejoinedAtNs: 20}}},
		"open before the last rejoin": {CommunityMembership: CommunityMembership{UserID: 9, Status: Left, LeftAtNs: 3},
			History: []Episode{{LeftAtNs: 1, RejoinedAtNs: 10}}},
	} {
		if err := bk.Put(m); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: error %v, want ErrInvalid", name, err)
		}
	}
	if bk.Len() != 1 {
		t.Fatalf("Len %d, want 1", bk.Len())
	}
}
