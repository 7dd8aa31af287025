package membership

import (
	"errors"
	"reflect"
	"testing"
)

type step struct {
	op          Op
	user, at    uint64
	req         string // request id, "" for none
	wantErr     error  // sentinel the error must wrap, or nil
	wantChanged bool
	wantDup     bool
}

func leave(user, at uint64, changed bool) step {
	return step{op: OpLeave, user: user, at: at, wantChanged: changed}
}

func rejoin(user, at uint64, changed bool) step {
	return step{op: OpRejoin, user: user, at: at, wantChanged: changed}
}

// with gives the step a request id, making it another command than one
// with the same op, user and time but another id.
func (s step) with(req string) step { s.req = req; return s }

// dup is a step whose identity was applied before: it changes nothing.
func (s step) dup() step { s.wantDup, s.wantChanged = true, false; return s }

func failing(op Op, user, at uint64, sentinel error) step {
	return step{op: op, user: user, at: at, wantErr: sentinel}
}

func member(user uint64, status Status, leftAt uint64, history ...Episode) Member {
	return Member{CommunityMembership: CommunityMembership{UserID: user, Status: status, LeftAtNs: leftAt}, History: history}
}

var semanticsCases = []struct {
	name  string
	steps []step
	want  []Member // the final state of every user named, in any order
}{
	{
		name: "absent user is active",
		want: []Member{member(9, Active, 0)},
	},
	{
		name:  "leave",
		steps: []step{leave(1, 100, true)},
		want:  []Member{member(1, Left, 100)},
	},
	{
		name:  "leave at zero",
		steps: []step{leave(1, 0, true), rejoin(1, 1, true)},
		want:  []Member{member(1, Active, 0, Episode{0, 1})},
	},
	{
		name:  "leaving while left keeps the earliest boundary",
		steps: []step{leave(1, 100, true), leave(1, 200, false), leave(1, 50, true), leave(1, 70, false)},
		want:  []Member{member(1, Left, 50)},
	},
	{
		name:  "rejoin of absent user is a no-op",
		steps: []step{rejoin(1, 100, false)},
		want:  []Member{member(1, Active, 0)},
	},
	{
		name:  "rejoin of active user with history is a no-op",
		steps: []step{leave(1, 100, true), rejoin(1, 200, true), rejoin(1, 300, false)},
		want:  []Member{member(1, Active, 0, Episode{100, 200})},
	},
	{
		name:  "rejoin closes the episode",
		steps: []step{leave(1, 100, true), rejoin(1, 200, true)},
		want:  []Member{member(1, Active, 0, Episode{100, 200})},
	},
	{
		name:  "rejoin closes the episode the leave moved back",
		steps: []step{leave(1, 100, true), leave(1, 50, true), rejoin(1, 60, true)},
		want:  []Member{member(1, Active, 0, Episode{50, 60})},
	},
	{
		name:  "rejoin before leave is refused",
		steps: []step{leave(1, 100, true), failing(OpRejoin, 1, 50, ErrRejoinBeforeLeave)},
		want:  []Member{member(1, Left, 100)},
	},
	{
		name: "a refused rejoin delivered again is refused again",
		steps: []step{
			leave(1, 100, true), failing(OpRejoin, 1, 50, ErrRejoinBeforeLeave),
			leave(1, 40, true), // moves left_at before the refused rejoin
			failing(OpRejoin, 1, 50, ErrRejoinBeforeLeave),
		},
		want: []Member{member(1, Left, 40)},
	},
	{
		name:  "leave and rejoin at the same instant close an empty episode",
		steps: []step{leave(1, 100, true), rejoin(1, 100, true)},
		want:  []Member{member(1, Active, 0, Episode{100, 100})},
	},
	{
		name:  "a new leave at an empty episode reopens it",
		steps: []step{leave(1, 100, true), rejoin(1, 100, true), leave(1, 100, true).with("b")},
		want:  []Member{member(1, Left, 100)},
	},
	{
		name:  "a leave clamped to an empty episode reopens it",
		steps: []step{leave(1, 10, true), rejoin(1, 20, true), leave(1, 100, true), rejoin(1, 100, true), leave(1, 50, true)},
		want:  []Member{member(1, Left, 100, Episode{10, 20})},
	},
	{
		name: "a reopened episode closes again",
		steps: []step{
			leave(1, 100, true), rejoin(1, 100, true), leave(1, 100, true).with("b"), rejoin(1, 300, true),
			leave(1, 100, false).dup(), rejoin(1, 100, false).dup(),
		},
		want: []Member{member(1, Active, 0, Episode{100, 300})},
	},
	{
		name:  "leave before last rejoin is clamped to it",
		steps: []step{leave(1, 100, true), rejoin(1, 200, true), leave(1, 150, true)},
		want:  []Member{member(1, Left, 200, Episode{100, 200})},
	},
	{
		name:  "leave at last rejoin is not clamped",
		steps: []step{leave(1, 100, true), rejoin(1, 200, true), leave(1, 200, true), rejoin(1, 201, true)},
		want:  []Member{member(1, Active, 0, Episode{100, 200}, Episode{200, 201})},
	},
	{
		name:  "the same leave again after the rejoin is a duplicate",
		steps: []step{leave(1, 100, true), rejoin(1, 200, true), leave(1, 100, false).dup()},
		want:  []Member{member(1, Active, 0, Episode{100, 200})},
	},
	{
		name:  "another leave at a closed episode's start is clamped",
		steps: []step{leave(1, 100, true).with("a"), rejoin(1, 200, true), leave(1, 100, true).with("b")},
		want:  []Member{member(1, Left, 200, Episode{100, 200})},
	},
	{
		name: "duplicates of earlier episodes change nothing",
		steps: []step{
			leave(1, 100, true), rejoin(1, 200, true), leave(1, 300, true), rejoin(1, 400, true),
			leave(1, 100, false).dup(), leave(1, 300, false).dup(), rejoin(1, 200, false).dup(), rejoin(1, 500, false),
		},
		want: []Member{member(1, Active, 0, Episode{100, 200}, Episode{300, 400})},
	},
	{
		// Before, the re-delivered leave@150 re-opened a leave (integration's
		// TestRedeliveredLeaveAfterRejoin).
		name: "a clamped leave delivered again after a later rejoin is a duplicate",
		steps: []step{
			leave(1, 100, true), rejoin(1, 200, true), leave(1, 150, true), rejoin(1, 250, true),
			leave(1, 150, false).dup(),
		},
		want: []Member{member(1, Active, 0, Episode{100, 200}, Episode{200, 250})},
	},
	{
		name: "the same leave with a new request id is a new leave",
		steps: []step{
			leave(1, 100, true), rejoin(1, 200, true), leave(1, 150, true), rejoin(1, 250, true),
			leave(1, 150, true).with("again"),
		},
		want: []Member{member(1, Left, 250, Episode{100, 200}, Episode{200, 250})},
	},
	{
		name: "a rejoin delivered again after a later leave is a duplicate",
		steps: []step{
			leave(1, 100, true), rejoin(1, 200, true), leave(1, 150, true),
			rejoin(1, 200, false).dup(), // would close [200, 200) and let the user's signals through
		},
		want: []Member{member(1, Left, 200, Episode{100, 200})},
	},
	{
		name:  "a leave moved back stops at the last rejoin",
		steps: []step{leave(1, 100, true), rejoin(1, 200, true), leave(1, 300, true), leave(1, 150, true).with("m")},
		want:  []Member{member(1, Left, 200, Episode{100, 200})},
	},
	{
		name:  "a leave far in the past while left moves the boundary to the last rejoin",
		steps: []step{leave(1, 100, true), rejoin(1, 200, true), leave(1, 250, true), leave(1, 1, true)},
		want:  []Member{member(1, Left, 200, Episode{100, 200})},
	},
	{
		name:  "clamped leave far in the past then rejoin",
		steps: []step{leave(1, 100, true), rejoin(1, 200, true), leave(1, 1, true), failing(OpRejoin, 1, 150, ErrRejoinBeforeLeave), rejoin(1, 250, true)},
		want:  []Member{member(1, Active, 0, Episode{100, 200}, Episode{200, 250})},
	},
	{
		name: "multiple episodes in ascending order",
		steps: []step{
			leave(1, 100, true), rejoin(1, 200, true),
			leave(1, 300, true), rejoin(1, 400, true),
			leave(1, 1000, true), rejoin(1, 1<<40, true),
			leave(1, 1<<41, true),
		},
		want: []Member{member(1, Left, 1<<41, Episode{100, 200}, Episode{300, 400}, Episode{1000, 1 << 40})},
	},
	{
		name: "users are independent",
		steps: []step{
			leave(1, 100, true), leave(2, 50, true), rejoin(2, 60, true),
			leave(1<<63, 7, true), rejoin(1, 300, true), leave(0, 1, true),
			leave(2, 100, true), // user 2's identity set is its own: user 1 left at 100 too
		},
		want: []Member{
			member(0, Left, 1),
			member(1, Active, 0, Episode{100, 300}),
			member(2, Left, 100, Episode{50, 60}),
			member(1<<63, Left, 7),
			member(3, Active, 0),
		},
	},
	{
		name:  "time OpenEnd is refused",
		steps: []step{failing(OpLeave, 1, OpenEnd, ErrInvalid), leave(1, 5, true), failing(OpRejoin, 1, OpenEnd, ErrInvalid)},
		want:  []Member{member(1, Left, 5)},
	},
	{
		name:  "unknown op is refused",
		steps: []step{failing(Op(3), 1, 5, ErrInvalid), failing(Op(0), 1, 5, ErrInvalid)},
		want:  []Member{member(1, Active, 0)},
	},
}

// TestSemantics runs every case twice: one command per Store call, and all
// commands in one batch, where each command must see the earlier ones.
func TestSemantics(t *testing.T) {
	for _, tc := range semanticsCases {
		t.Run(tc.name+"/store", func(t *testing.T) {
			s := openMem(t)
			for i, st := range tc.steps {
				var c Change
				var err error
				switch {
				case st.op == OpLeave && st.req == "":
					c, err = s.Leave(st.user, st.at)
				case st.op == OpRejoin && st.req == "":
					c, err = s.Rejoin(st.user, st.at)
				default:
					c, err = s.Apply(Command{Op: st.op, UserID: st.user, AtNs: st.at, RequestID: st.req})
				}
				checkStep(t, i, st, c, err)
			}
			checkMembers(t, s, tc.want)
		})
		t.Run(tc.name+"/batch", func(t *testing.T) {
			s := openMem(t)
			b := s.NewBatch()
			defer b.Close()
			applied := 0
			for i, st := range tc.steps {
				c, err := b.Apply(Command{Op: st.op, UserID: st.user, AtNs: st.at, RequestID: st.req})
				checkStep(t, i, st, c, err)
				// A refused rejoin counts: it is remembered.
				if err == nil || errors.Is(err, ErrRejoinBeforeLeave) {
					applied++
				}
			}
			if b.Len() != applied {
				t.Errorf("Len() = %d, want %d", b.Len(), applied)
			}
			if err := b.Commit(); err != nil {
				t.Fatalf("Commit: %v", err)
			}
			checkMembers(t, s, tc.want)
		})
	}
}

func checkStep(t *testing.T, i int, st step, c Change, err error) {
	t.Helper()
	if st.wantErr != nil {
		if !errors.Is(err, st.wantErr) {
			t.Fatalf("step %d (%v user %d at %d): err = %v, want %v", i, st.op, st.user, st.at, err, st.wantErr)
		}
		return
	}
	if err != nil {
		t.Fatalf("step %d (%v user %d at %d): %v", i, st.op, st.user, st.at, err)
	}
	if c.Changed != st.wantChanged || c.Duplicate != st.wantDup {
		t.Fatalf("step %d (%v user %d at %d %q): Changed = %v, Duplicate = %v; want %v, %v",
			i, st.op, st.user, st.at, st.req, c.Changed, c.Duplicate, st.wantChanged, st.wantDup)
	}
	if !c.Changed && !reflect.DeepEqual(c.Before, c.After) {
		t.Fatalf("step %d: no-op changed the member: %+v -> %+v", i, c.Before, c.After)
	}
	wantClosed := st.op == OpRejoin && c.Changed
	if (c.Closed != nil) != wantClosed {
		t.Fatalf("step %d: Closed = %v, want set: %v", i, c.Closed, wantClosed)
	}
	if c.Closed != nil {
		want := Episode{LeftAtNs: c.Before.LeftAtNs, RejoinedAtNs: st.at}
		if *c.Closed != want || c.After.History[len(c.After.History)-1] != want {
			t.Fatalf("step %d: Closed = %+v, After.History = %+v, want closed %+v", i, *c.Closed, c.After.History, want)
		}
	}
}

func checkMembers(t *testing.T, s *Store, want []Member) {
	t.Helper()
	for _, w := range want {
		got, err := s.Member(w.UserID)
		if err != nil {
			t.Fatalf("Member(%d): %v", w.UserID, err)
		}
		if !reflect.DeepEqual(got, w) {
			t.Errorf("Member(%d) = %+v, want %+v", w.UserID, got, w)
		}
		st, err := s.Status(w.UserID)
		if err != nil {
			t.Fatalf("Status(%d): %v", w.UserID, err)
		}
		if st != w.CommunityMembership {
			t.Errorf("Status(%d) = %+v, want %+v", w.UserID, st, w.CommunityMembership)
		}
		h, err := s.History(w.UserID)
		if err != nil {
			t.Fatalf("History(%d): %v", w.UserID, err)
		}
		if !reflect.DeepEqual(h, w.History) {
			t.Errorf("History(%d) = %+v, want %+v", w.UserID, h, w.History)
		}
	}
}

func TestChangeSharesNoWritableHistory(t *testing.T) {
	s := openMem(t)
	must := mustOK(t)
	must(s.Leave(1, 100))
	must(s.Rejoin(1, 200))
	must(s.Leave(1, 300))
	c, err := s.Rejoin(1, 400)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Before.History) != 1 || len(c.After.History) != 2 {
		t.Fatalf("Before.History = %v, After.History = %v", c.Before.History, c.After.History)
	}
	// Appending to Before must not overwrite After's closed episode.
	_ = append(c.Before.History, Episode{7, 8})
	if c.After.History[1] != (Episode{300, 400}) {
		t.Fatalf("After.History[1] = %+v after appending to Before.History", c.After.History[1])
	}
}

func TestEpisodesAndLeftAt(t *testing.T) {
	m := member(1, Left, 300, Episode{100, 200})
	got := m.Episodes([]Episode{{1, 2}})
	want := []Episode{{1, 2}, {100, 200}, {300, OpenEnd}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Episodes = %v, want %v", got, want)
	}
	if !got[2].IsOpen() || got[1].IsOpen() {
		t.Fatalf("IsOpen wrong: %v", got)
	}
	if !got[1].Contains(100) || got[1].Contains(200) || !got[2].Contains(OpenEnd-1) {
		t.Fatalf("Contains wrong")
	}
	if ns, ok := m.LeftAt(); !ok || ns != 300 {
		t.Fatalf("LeftAt = %d, %v", ns, ok)
	}
	a := member(1, Active, 0, Episode{100, 200})
	if _, ok := a.LeftAt(); ok {
		t.Fatal("LeftAt of Active: ok")
	}
	if got := a.Episodes(nil); !reflect.DeepEqual(got, []Episode{{100, 200}}) {
		t.Fatalf("Episodes of Active = %v", got)
	}
	if Active.String() != "active" || Left.String() != "left" || Status(9).String() != "Status(9)" {
		t.Fatal("Status.String")
	}
	if OpLeave.String() != "leave" || OpRejoin.String() != "rejoin" || Op(0).String() != "Op(0)" {
		t.Fatal("Op.String")
	}
}

// mustOK returns a function that fails t if a command failed, for
// must(s.Leave(...)).
func mustOK(t testing.TB) func(Change, error) Change {
	return func(c Change, err error) Change {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
}
