package fanout

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cohortgate/cohortgate/pkg/gate"
	"github.com/cohortgate/cohortgate/pkg/membership"
)

// restoreUsers is enough members to fill several batches and a partial one.
const restoreUsers = 3*restoreChunk + 17

// TestRestoreGate checks that every member of the store, with however many
// episodes, reaches the gate intact through the two-goroutine restore.
func TestRestoreGate(t *testing.T) {
	store, err := membership.Open("", &membership.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	b := store.NewBatch()
	for u := uint64(1); u <= restoreUsers; u++ {
		at := u * 100
		apply := []membership.Op{membership.OpLeave}
		switch u % 6 {
		case 0:
			apply = append(apply, membership.OpRejoin, membership.OpLeave, membership.OpRejoin, membership.OpLeave)
		case 3:
			apply = append(apply, membership.OpRejoin)
		}
		for i, op := range apply {
			if _, err := b.Apply(membership.Command{Op: op, UserID: u, AtNs: at + uint64(i)*10}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}

	g := gate.New()
	info, err := restoreGate(context.Background(), store, g, gateSnapshot{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if info.Members != restoreUsers || g.Len() != restoreUsers {
		t.Fatalf("restored %d members, gate holds %d users; want %d", info.Members, g.Len(), restoreUsers)
	}
	for u := uint64(1); u <= restoreUsers; u++ {
		m, err := store.Member(u)
		if err != nil {
			t.Fatal(err)
		}
		want := gateEpisodes(nil, m.Episodes(nil))
		if got := g.Episodes(u, nil); !slices.Equal(got, want) {
			t.Fatalf("user %d: gate has %v, store has %v", u, got, want)
		}
	}
}

// fakeRestore is a Store whose Restore delivers members made by member(i)
// for i in [0, n), stopping at the first error of fn, and, if checkCtx is
// set, when ctx is done. Without checkCtx it stands for a store that looks
// at ctx rarely, so that only restoreGate's own waits can end the scan.
type fakeRestore struct {
	Store
	n        int
	member   func(i int) membership.Member
	checkCtx bool
}

func (f fakeRestore) Restore(ctx context.Context, fn func(membership.Member) error) (membership.RestoreStats, error) {
	var st membership.RestoreStats
	for i := range f.n {
		if err := ctx.Err(); f.checkCtx && err != nil {
			return st, err
		}
		if err := fn(f.member(i)); err != nil {
			return st, err
		}
		st.Members++
	}
	return st, nil
}

func leftAt(userID, atNs uint64) membership.Member {
	return membership.Member{CommunityMembership: membership.CommunityMembership{UserID: userID, Status: membership.Left, LeftAtNs: atNs}}
}

// TestRestoreGateErrors checks that a failure on either side ends the
// restore with that failure, without the other side waiting forever.
func TestRestoreGateErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		member func(i int) membership.Member
		cancel bool
		want   error
	}{
		{"bad episodes in the gate", func(i int) membership.Member {
			m := leftAt(uint64(i+1), 100)
			if i == restoreChunk+5 {
				m.History = []membership.Episode{{LeftAtNs: 50, RejoinedAtNs: 40}} // rejoined before it left
			}
			return m
		}, false, gate.ErrBadEpisodes},
		{"context canceled during the scan", func(i int) membership.Member { return leftAt(uint64(i+1), 100) }, true, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			member := tc.member
			if tc.cancel {
				member = func(i int) membership.Member {
					if i == 2*restoreChunk {
						cancel()
					}
					return tc.member(i)
				}
			}
			_, err := restoreGate(ctx, fakeRestore{n: restoreUsers * 4, member: member, checkCtx: tc.cancel}, gate.New(), gateSnapshot{}, nil)
			if !errors.Is(err, tc.want) {
				t.Fatalf("restoreGate = %v, want an error wrapping %v", err, tc.want)
			}
		})
	}
}
