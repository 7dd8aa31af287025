package gate

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
)

// TestConcurrentReadersSeeWholeStates runs readers against a writer that
// cycles a few users through episode sets of every representation (none,
// inline, overflow) while inserting other users ("fillers", half of them
// with a history) so that the table and the overflow grow many times.
//
// The writer counts the Sets it has completed per user; state k of a user
// is cycle[k%len(cycle)], state 0 being "never set". A reader loads that
// count before (v0) and after (v1) a read. Sets are serialized, so the read
// may only have seen states v0 … v1+1 (v1+1 may be in flight). A torn read
// — a half-published history, a slot that is missing while the table is
// rebuilt, another user's history — gives an answer none of those states
// gives, at least at the probes where the states in the window agree.
func TestConcurrentReadersSeeWholeStates(t *testing.T) {
	cycle := [][]Episode{
		nil,
		{{100, OpenEnd}},
		{{50, 80}, {120, 200}, {300, OpenEnd}},
		{{90, 110}},
		{{40, 45}, {100, OpenEnd}},
		{{200, OpenEnd}},
		{},
	}
	probes := []uint64{0, 45, 60, 85, 95, 100, 115, 150, 250, 350, math.MaxUint64}
	users := []uint64{0, 1, 2, 3, 1 << 33, math.MaxUint64 - 1, math.MaxUint64}
	const (
		rounds        = 1000
		fillersPerSet = 4
		readers       = 4
		fillerBase    = 1 << 48
		fillerLeftAt  = 10
	)

	m := New()
	done := make([]atomic.Uint64, len(users)) // completed Sets per user
	var fillers atomic.Uint64                 // fillers inserted: ids fillerBase … fillerBase+n-1
	var stop atomic.Bool
	var wg sync.WaitGroup

	for r := range readers {
		wg.Go(func() {
			var buf []Episode
			checked := 0
			for i := r; !stop.Load() || checked < 1000; i++ {
				checked++
				ui := i % len(users)
				u := users[ui]
				p := probes[(i/len(users))%len(probes)]
				v0 := done[ui].Load()
				got := m.Allows(u, p)
				buf = m.Episodes(u, buf[:0])
				v1 := done[ui].Load()
				if v1+1-v0 >= uint64(len(cycle)) {
					continue // every state was possible
				}
				okAllow, okEps := false, false
				for k := v0; k <= v1+1; k++ {
					want := cycle[k%uint64(len(cycle))]
					okAllow = okAllow || got == allowedBy(want, p)
					okEps = okEps || slices.Equal(buf, want) || len(buf) == 0 && len(want) == 0
				}
				if !okAllow {
					t.Errorf("user %d: Allows(%d) = %v, no state among Sets %d…%d gives that", u, p, got, v0, v1+1)
					stop.Store(true)
					return
				}
				if !okEps {
					t.Errorf("user %d: Episodes = %v, not a state among Sets %d…%d", u, buf, v0, v1+1)
					stop.Store(true)
					return
				}
				if n := fillers.Load(); n > 0 {
					id := fillerBase + uint64(i)%n
					if ts := max(p, fillerLeftAt); m.Allows(id, ts) {
						t.Errorf("filler %d (of %d inserted) allowed at %d", id, n, ts)
						stop.Store(true)
						return
					}
				}
			}
		})
	}

	for round := uint64(1); round <= rounds && !stop.Load(); round++ {
		for ui, u := range users {
			if err := m.Set(u, cycle[round%uint64(len(cycle))]); err != nil {
				t.Fatal(err)
			}
			done[ui].Store(round)
			for range fillersPerSet {
				n := fillers.Load()
				eps := []Episode{{fillerLeftAt, OpenEnd}}
				if n%2 == 1 {
					eps = []Episode{{1, 5}, {fillerLeftAt, OpenEnd}}
				}
				if err := m.Set(fillerBase+n, eps); err != nil {
					t.Fatal(err)
				}
				fillers.Store(n + 1)
			}
		}
	}
	stop.Store(true)
	wg.Wait()
}
