package workload

import (
	"slices"
	"testing"

	"github.com/cohortgate/cohortgate/pkg/membership"
)

// TestJudge is the verifier's arithmetic, one kind of damage per case: the
// signals seen in the cohort topic against the oracle's leave episodes.
// User 1 left at 100 and rejoined at 200; user 2 left at 150 for good;
// user 3 never left.
func TestJudge(t *testing.T) {
	episodes := map[uint64][]membership.Episode{
		1: {{LeftAtNs: 100, RejoinedAtNs: 200}},
		2: {{LeftAtNs: 150, RejoinedAtNs: membership.OpenEnd}},
	}
	// sig is a valid signal of user at event time ns, seen times in the
	// cohort topic.
	sig := func(user, ns uint64, seen int32) *signal {
		return &signal{user: user, eventNs: ns, valid: true, copies: 1, seen: seen}
	}
	type counts struct{ expected, duplicates, lost, leaked int }
	for _, tc := range []struct {
		name      string
		sigs      map[uint64]*signal
		want      counts
		lost      []uint64
		leaked    []uint64
		duplicate []uint64
	}{
		{
			name: "clean: each allowed signal once, none in an episode",
			sigs: map[uint64]*signal{
				0: sig(1, 99, 1), 1: sig(1, 100, 0), 2: sig(1, 199, 0), 3: sig(1, 200, 1),
				4: sig(2, 149, 1), 5: sig(2, 150, 0), 6: sig(3, 1000, 1),
			},
			want: counts{expected: 4},
		},
		{
			name: "duplicates: an allowed signal forwarded three times",
			sigs: map[uint64]*signal{0: sig(3, 10, 3), 1: sig(3, 11, 1)},
			want: counts{expected: 2, duplicates: 2}, duplicate: []uint64{0},
		},
		{
			name: "lost: allowed signals never forwarded",
			sigs: map[uint64]*signal{0: sig(3, 10, 0), 1: sig(1, 99, 0), 2: sig(1, 200, 1)},
			want: counts{expected: 3, lost: 2}, lost: []uint64{0, 1},
		},
		{
			name: "leaked: forwarded inside a closed and an open episode",
			sigs: map[uint64]*signal{0: sig(1, 100, 1), 1: sig(2, 10_000, 1), 2: sig(2, 149, 1)},
			want: counts{expected: 1, leaked: 2}, leaked: []uint64{0, 1},
		},
		{
			name: "a leaked signal forwarded twice is leaked and duplicated",
			sigs: map[uint64]*signal{7: sig(2, 150, 2)},
			want: counts{duplicates: 1, leaked: 1}, leaked: []uint64{7}, duplicate: []uint64{7},
		},
		{
			name: "dead-lettered and invalid signals are never expected",
			sigs: map[uint64]*signal{
				0: {user: 3, eventNs: 5, valid: true, copies: 1, dlq: true},
				1: {eventNs: 5, copies: 1},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rep Report
			judge(tc.sigs, episodes, &rep)
			got := counts{rep.Expected, rep.Duplicates, rep.Lost, rep.Leaked}
			if got != tc.want {
				t.Fatalf("expected, duplicates, lost, leaked = %+v, want %+v", got, tc.want)
			}
			if !slices.Equal(rep.LostIDs, tc.lost) || !slices.Equal(rep.LeakedIDs, tc.leaked) || !slices.Equal(rep.DuplicateIDs, tc.duplicate) {
				t.Fatalf("lost %v leaked %v duplicates %v, want %v %v %v",
					rep.LostIDs, rep.LeakedIDs, rep.DuplicateIDs, tc.lost, tc.leaked, tc.duplicate)
			}
			if damage := tc.want.duplicates + tc.want.lost + tc.want.leaked; rep.Damage() != damage {
				t.Fatalf("Damage() = %d, want %d", rep.Damage(), damage)
			}
		})
	}
}
