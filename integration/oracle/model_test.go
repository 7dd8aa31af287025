package oracle

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
)

// cmd is one command of a model test: op, boundary, request id.
type cmd struct {
	op  op
	at  uint64
	req string
}

func leave(at uint64, req string) cmd  { return cmd{opLeave, at, req} }
func rejoin(at uint64, req string) cmd { return cmd{opRejoin, at, req} }

// closed is a closed episode [l, r).
func closed(l, r uint64) episode { return episode{leftAt: l, rejoinedAt: r} }

// TestModel applies each case's commands in order to a fresh user and
// checks every outcome and the final episodes.
func TestModel(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cmds     []cmd
		outcomes []outcome
		want     []episode // closed ones, then the open one
	}{
		{"C6: an Active user leaves",
			[]cmd{leave(100, "a")}, []outcome{changed}, []episode{{leftAt: 100, open: true}}},
		{"C6: a later leave while Left changes nothing",
			[]cmd{leave(100, "a"), leave(150, "b")}, []outcome{changed, unchanged}, []episode{{leftAt: 100, open: true}}},
		{"C6, finding 5: the earliest boundary wins",
			[]cmd{leave(100, "a"), leave(40, "b")}, []outcome{changed, changed}, []episode{{leftAt: 40, open: true}}},
		{"C6: a leave before the last closed episode's end is clamped to it",
			[]cmd{leave(100, "a"), rejoin(200, "b"), leave(150, "c")}, []outcome{changed, changed, changed},
			[]episode{closed(100, 200), {leftAt: 200, open: true}}},
		{"C6: a clamped leave moves left_at back no further than the history's end",
			[]cmd{leave(100, "a"), rejoin(200, "b"), leave(300, "c"), leave(150, "d")}, []outcome{changed, changed, changed, changed},
			[]episode{closed(100, 200), {leftAt: 200, open: true}}},
		{"C5, finding 4: a re-delivered leave after a rejoin is a no-op",
			[]cmd{leave(100, "a"), rejoin(200, "b"), leave(150, "c"), rejoin(250, "d"), leave(150, "c")},
			[]outcome{changed, changed, changed, changed, duplicate},
			[]episode{closed(100, 200), closed(200, 250)}},
		{"C5: the same leave with a new request id is a new command (clamped)",
			[]cmd{leave(100, "a"), rejoin(200, "b"), leave(150, "c"), rejoin(250, "d"), leave(150, "e")},
			[]outcome{changed, changed, changed, changed, changed},
			[]episode{closed(100, 200), closed(200, 250), {leftAt: 250, open: true}}},
		{"C5: an identity that changed nothing is remembered too",
			[]cmd{leave(100, "a"), leave(150, "x"), rejoin(200, "b"), leave(150, "x")},
			[]outcome{changed, unchanged, changed, duplicate}, []episode{closed(100, 200)}},
		{"C5: an absent request id is one identity",
			[]cmd{leave(100, ""), rejoin(200, ""), leave(100, "")}, []outcome{changed, changed, duplicate}, []episode{closed(100, 200)}},
		{"C5: op is part of the identity",
			[]cmd{leave(100, "a"), rejoin(100, "a")}, []outcome{changed, changed}, []episode{closed(100, 100)}},
		{"C7: rejoining an Active user changes nothing",
			[]cmd{rejoin(100, "a")}, []outcome{unchanged}, nil},
		{"C7: a rejoin before the open leave is refused, and so is its re-delivery",
			[]cmd{leave(100, "a"), rejoin(50, "b"), rejoin(50, "b")}, []outcome{changed, refused, refused},
			[]episode{{leftAt: 100, open: true}}},
		{"C7, finding 6: leave and rejoin at one boundary close an empty episode",
			[]cmd{leave(100, "a"), rejoin(100, "b")}, []outcome{changed, changed}, []episode{closed(100, 100)}},
		{"C6: a leave at an empty episode's boundary reopens it",
			[]cmd{leave(100, "a"), rejoin(100, "b"), leave(100, "c")}, []outcome{changed, changed, changed},
			[]episode{{leftAt: 100, open: true}}},
		{"C6: a leave clamped to an empty episode reopens it",
			[]cmd{leave(100, "a"), rejoin(100, "b"), leave(60, "c")}, []outcome{changed, changed, changed},
			[]episode{{leftAt: 100, open: true}}},
		{"C6: moving left_at back onto an empty episode reopens it",
			[]cmd{leave(100, "a"), rejoin(100, "b"), leave(300, "c"), leave(50, "d")}, []outcome{changed, changed, changed, changed},
			[]episode{{leftAt: 100, open: true}}},
		{"C6: a later leave keeps an empty episode closed",
			[]cmd{leave(100, "a"), rejoin(100, "b"), leave(101, "c")}, []outcome{changed, changed, changed},
			[]episode{closed(100, 100), {leftAt: 101, open: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m member
			var got []outcome
			for _, c := range tc.cmds {
				got = append(got, m.apply(c.op, c.at, c.req))
			}
			if !reflect.DeepEqual(got, tc.outcomes) {
				t.Errorf("outcomes %v, want %v", got, tc.outcomes)
			}
			if eps := m.episodes(); !reflect.DeepEqual(eps, tc.want) && !(len(eps) == 0 && len(tc.want) == 0) {
				t.Errorf("episodes %+v, want %+v", eps, tc.want)
			}
		})
	}
}

// TestModelHolds is S5's test of an event time against the episodes: an
// empty episode holds nothing, a closed one holds up to but not including
// its end, an open one holds everything from its start.
func TestModelHolds(t *testing.T) {
	var m member
	for _, c := range []cmd{leave(100, "a"), rejoin(200, "b"), leave(300, "c"), rejoin(300, "d"), leave(400, "e")} {
		m.apply(c.op, c.at, c.req)
	}
	for ns, want := range map[int64]bool{
		-1: false, 0: false, 99: false, 100: true, 199: true, 200: false,
		299: false, 300: false, 399: false, 400: true, 1 << 62: true,
	} {
		if got := m.holds(ns); got != want {
			t.Errorf("holds(%d) = %v, want %v (episodes %+v)", ns, got, want, m.episodes())
		}
	}
	var never *member
	if never.holds(100) {
		t.Error("a user without commands holds a signal")
	}
}

// TestModelRedeliveryProperty is finding 4's property: random command
// sequences give the same state whether or not earlier commands are
// delivered again in between (a re-delivery is the same identity).
func TestModelRedeliveryProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 13))
	for round := range 2000 {
		var cmds []cmd
		for i := range 1 + rng.IntN(12) {
			c := cmd{op: opLeave, at: uint64(rng.IntN(20)) * 10, req: fmt.Sprint(i % 4)}
			if rng.IntN(2) == 0 {
				c.op = opRejoin
			}
			cmds = append(cmds, c)
		}
		var plain, redelivered member
		first := make(map[cmd]outcome) // what each identity did when it first came
		for i, c := range cmds {
			plain.apply(c.op, c.at, c.req)
			if o := redelivered.apply(c.op, c.at, c.req); first[c] == 0 {
				first[c] = o
			}
			for range rng.IntN(3) {
				again := cmds[rng.IntN(i+1)]
				want := duplicate
				if first[again] == refused {
					want = refused // a refused command is refused on every retry
				}
				if got := redelivered.apply(again.op, again.at, again.req); got != want {
					t.Fatalf("round %d: re-delivery of %+v was %v, want %v", round, again, got, want)
				}
			}
		}
		if !reflect.DeepEqual(plain.episodes(), redelivered.episodes()) {
			t.Fatalf("round %d: %+v gives %+v, with re-deliveries %+v", round, cmds, plain.episodes(), redelivered.episodes())
		}
		eps := plain.episodes()
		for i := 1; i < len(eps); i++ {
			if eps[i].leftAt < eps[i-1].rejoinedAt || eps[i-1].open {
				t.Fatalf("round %d: %+v gives overlapping episodes %+v", round, cmds, eps)
			}
		}
	}
}

// TestModelIdentityWindow: rule C5 remembers a user's last 64 identities;
// the 65th-newest is a new command again.
func TestModelIdentityWindow(t *testing.T) {
	var m member
	for i := range 65 {
		m.apply(opLeave, 100, fmt.Sprint("resend-", i))
	}
	if got := m.apply(opLeave, 100, "resend-64"); got != duplicate {
		t.Errorf("the newest identity again: %v, want duplicate", got)
	}
	if got := m.apply(opLeave, 100, "resend-1"); got != duplicate {
		t.Errorf("the oldest identity still remembered: %v, want duplicate", got)
	}
	if got := m.apply(opLeave, 100, "resend-0"); got != unchanged {
		t.Errorf("an identity forgotten: %v, want a new command that changes nothing", got)
	}
	if len(m.recent) != 64 {
		t.Errorf("%d identities remembered, want 64", len(m.recent))
	}
}

// TestModelHistoryFull: rule C7 caps a user's closed episodes at 10,000;
// the rejoin past them is refused, the user stays left, and its
// re-delivery is refused again for the same reason.
func TestModelHistoryFull(t *testing.T) {
	var m member
	b := uint64(1)
	for range 10000 {
		m.apply(opLeave, b, "")
		m.apply(opRejoin, b+1, "")
		b += 2
	}
	if got := m.apply(opLeave, b, ""); got != changed {
		t.Fatalf("a leave with 10,000 episodes: %v, want changed", got)
	}
	if got := m.apply(opRejoin, b+1, "last"); got != full {
		t.Fatalf("the rejoin past 10,000 episodes: %v, want full", got)
	}
	if got := m.apply(opRejoin, b+1, "last"); got != full {
		t.Fatalf("its re-delivery: %v, want full again", got)
	}
	if !m.left || len(m.history) != 10000 {
		t.Fatalf("left %v with %d episodes, want left with 10000", m.left, len(m.history))
	}
}
