package gate

import (
	"errors"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestAllows(t *testing.T) {
	type probe struct {
		ts    uint64
		allow bool
	}
	tests := []struct {
		name   string
		userID uint64
		eps    []Episode // nil: user never set
		probes []probe
	}{
		{
			name:   "absent",
			userID: 7,
			probes: []probe{{0, true}, {100, true}, {math.MaxUint64, true}},
		},
		{
			name:   "open",
			userID: 7,
			eps:    []Episode{{100, OpenEnd}},
			probes: []probe{{0, true}, {99, true}, {100, false}, {101, false}, {math.MaxUint64, false}},
		},
		{
			name:   "open at zero",
			userID: 7,
			eps:    []Episode{{0, OpenEnd}},
			probes: []probe{{0, false}, {1, false}, {math.MaxUint64, false}},
		},
		{
			name:   "open too large to inline",
			userID: 7,
			eps:    []Episode{{math.MaxUint64 - 1, OpenEnd}},
			probes: []probe{{0, true}, {math.MaxUint64 - 2, true}, {math.MaxUint64 - 1, false}, {math.MaxUint64, false}},
		},
		{
			name:   "open at largest inline value",
			userID: 7,
			eps:    []Episode{{maxInline, OpenEnd}},
			probes: []probe{{maxInline - 1, true}, {maxInline, false}, {math.MaxUint64, false}},
		},
		{
			name:   "closed",
			userID: 7,
			eps:    []Episode{{100, 200}},
			probes: []probe{{99, true}, {100, false}, {150, false}, {199, false}, {200, true}, {201, true}, {math.MaxUint64, true}},
		},
		{
			name:   "empty episode covers nothing",
			userID: 7,
			eps:    []Episode{{100, 100}},
			probes: []probe{{99, true}, {100, true}, {101, true}},
		},
		{
			name:   "several with gaps and an open last",
			userID: 7,
			eps:    []Episode{{10, 20}, {30, 40}, {40, 40}, {40, 45}, {60, OpenEnd}},
			probes: []probe{
				{9, true}, {10, false}, {19, false}, {20, true}, {29, true}, {30, false},
				{39, false}, {40, false}, {44, false}, {45, true}, {59, true}, {60, false}, {math.MaxUint64, false},
			},
		},
		{
			name:   "adjacent closed episodes",
			userID: 7,
			eps:    []Episode{{10, 20}, {20, 30}},
			probes: []probe{{9, true}, {10, false}, {20, false}, {29, false}, {30, true}},
		},
		{
			name:   "user 0",
			userID: 0,
			eps:    []Episode{{100, OpenEnd}},
			probes: []probe{{99, true}, {100, false}},
		},
		{
			name:   "user max",
			userID: math.MaxUint64,
			eps:    []Episode{{5, 10}},
			probes: []probe{{4, true}, {5, false}, {9, false}, {10, true}},
		},
		{
			name:   "set empty",
			userID: 7,
			eps:    []Episode{},
			probes: []probe{{0, true}, {100, true}, {math.MaxUint64, true}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, m := range []*Map{New(), new(Map)} {
				// Neighbours, so that the user under test is not alone.
				for _, id := range []uint64{1, 2, 3, 1 << 40} {
					if id != tt.userID {
						mustSet(t, m, id, []Episode{{0, OpenEnd}})
					}
				}
				if tt.eps != nil {
					mustSet(t, m, tt.userID, tt.eps)
				}
				for _, p := range tt.probes {
					if got := m.Allows(tt.userID, p.ts); got != p.allow {
						t.Errorf("Allows(%d, %d) = %v, want %v", tt.userID, p.ts, got, p.allow)
					}
				}
				want := slices.Clone(tt.eps)
				if len(want) == 0 {
					want = nil
				}
				if got := m.Episodes(tt.userID, nil); !slices.Equal(got, want) {
					t.Errorf("Episodes = %v, want %v", got, want)
				}
			}
		})
	}
}

func TestZeroMap(t *testing.T) {
	var m Map
	if !m.Allows(1, 1) || m.Episodes(1, nil) != nil || m.Len() != 0 || m.MemoryBytes() != 0 {
		t.Fatal("zero Map is not empty")
	}
	mustSet(t, &m, 1, nil)
	if m.MemoryBytes() != 0 {
		t.Error("setting no episodes on a zero Map allocated a table")
	}
	mustSet(t, &m, 1, []Episode{{5, OpenEnd}})
	if m.Allows(1, 5) || m.Len() != 1 || m.MemoryBytes() == 0 {
		t.Error("zero Map did not take a Set")
	}
}

func TestCapacity(t *testing.T) {
	for _, n := range []int{-5, 0, 1, 48, 49, 1000} {
		m := New(Capacity(n))
		slots := len(m.table.Load().slots)
		for i := range uint64(max(n, 0)) {
			mustSet(t, m, i, []Episode{{1, OpenEnd}})
		}
		if got := len(m.table.Load().slots); got != slots {
			t.Errorf("Capacity(%d): table grew from %d to %d slots within the hint", n, slots, got)
		}
		if slots > 2*slotsFor(n) {
			t.Errorf("Capacity(%d): %d slots", n, slots)
		}
	}
}

func TestSetReplaces(t *testing.T) {
	m := New()
	const u = 42
	steps := []struct {
		name    string
		eps     []Episode
		wantLen int
		probes  map[uint64]bool
	}{
		{"leave", []Episode{{100, OpenEnd}}, 1, map[uint64]bool{99: true, 100: false, 300: false}},
		{"rejoin", []Episode{{100, 200}}, 1, map[uint64]bool{99: true, 100: false, 200: true, 300: true}},
		{"leave again", []Episode{{100, 200}, {300, OpenEnd}}, 1, map[uint64]bool{150: false, 250: true, 300: false}},
		{"back to one open", []Episode{{500, OpenEnd}}, 1, map[uint64]bool{150: true, 499: true, 500: false}},
		{"cleared", nil, 0, map[uint64]bool{150: true, 500: true}},
		{"open again", []Episode{{50, OpenEnd}}, 1, map[uint64]bool{49: true, 50: false}},
		{"cleared again", []Episode{}, 0, map[uint64]bool{50: true}},
	}
	for _, s := range steps {
		mustSet(t, m, u, s.eps)
		for ts, want := range s.probes {
			if got := m.Allows(u, ts); got != want {
				t.Errorf("%s: Allows(%d) = %v, want %v", s.name, ts, got, want)
			}
		}
		if got := m.Len(); got != s.wantLen {
			t.Errorf("%s: Len = %d, want %d", s.name, got, s.wantLen)
		}
	}
}

func TestSetCopies(t *testing.T) {
	m := New()
	eps := []Episode{{10, 20}, {30, OpenEnd}}
	mustSet(t, m, 1, eps)
	eps[0] = Episode{0, 1}
	if !m.Allows(1, 5) || m.Allows(1, 15) {
		t.Fatal("Set kept a reference to the caller's slice")
	}
	got := m.Episodes(1, nil)
	got[0] = Episode{0, 1}
	if !m.Allows(1, 5) {
		t.Fatal("Episodes returned the map's own slice")
	}
}

func TestSetRejectsBadEpisodes(t *testing.T) {
	tests := []struct {
		name string
		eps  []Episode
	}{
		{"rejoined before left", []Episode{{20, 10}}},
		{"open not last", []Episode{{10, OpenEnd}, {20, 30}}},
		{"two open", []Episode{{10, OpenEnd}, {OpenEnd, OpenEnd}}},
		{"overlapping", []Episode{{10, 30}, {20, 40}}},
		{"descending", []Episode{{30, 40}, {10, 20}}},
		{"bad after good", []Episode{{1, 2}, {3, 4}, {6, 5}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := New()
			before := []Episode{{100, OpenEnd}}
			mustSet(t, m, 9, before)
			err := m.Set(9, tt.eps)
			if !errors.Is(err, ErrBadEpisodes) {
				t.Fatalf("Set = %v, want ErrBadEpisodes", err)
			}
			if got := m.Episodes(9, nil); !slices.Equal(got, before) {
				t.Errorf("after a rejected Set, Episodes = %v, want %v", got, before)
			}
			if err := m.Set(10, tt.eps); err == nil || m.Len() != 1 || !m.Allows(10, 25) {
				t.Errorf("a rejected Set added a user (err %v, Len %d)", err, m.Len())
			}
		})
	}
}

func TestLenAndMemory(t *testing.T) {
	m := New(Capacity(1000))
	start := m.MemoryBytes()
	if start <= 0 || m.Len() != 0 {
		t.Fatalf("new map: MemoryBytes %d, Len %d", start, m.Len())
	}
	for i := range uint64(1000) {
		mustSet(t, m, i, []Episode{{i, OpenEnd}})
	}
	if m.Len() != 1000 {
		t.Fatalf("Len = %d, want 1000", m.Len())
	}
	if got := m.MemoryBytes(); got != start {
		t.Errorf("MemoryBytes changed from %d to %d within the capacity hint", start, got)
	}
	for i := range uint64(100) {
		mustSet(t, m, i, []Episode{{1, 2}, {3, OpenEnd}})
	}
	if got := m.MemoryBytes(); got <= start {
		t.Errorf("MemoryBytes = %d with histories, want more than %d", got, start)
	}
	for i := range uint64(5000) {
		mustSet(t, m, 1<<32+i, []Episode{{i, OpenEnd}})
	}
	if m.Len() != 6000 {
		t.Fatalf("Len = %d, want 6000", m.Len())
	}
	if got := m.MemoryBytes(); got < 6000*16 {
		t.Errorf("MemoryBytes = %d after growth, want at least %d", got, 6000*16)
	}
}

// TestRebuildDropsCleared checks that users set to no episodes are dropped
// when the table is rebuilt, so clearing users does not grow the table.
func TestRebuildDropsCleared(t *testing.T) {
	m := New()
	for i := range uint64(20_000) {
		mustSet(t, m, i, []Episode{{1, OpenEnd}})
		mustSet(t, m, i, nil)
	}
	if m.Len() != 0 {
		t.Fatalf("Len = %d, want 0", m.Len())
	}
	if got := len(m.table.Load().slots); got > minSlots {
		t.Errorf("table has %d slots after only clearing users", got)
	}
}

// TestModel compares the Map with a plain map over random operations,
// across many rebuilds.
func TestModel(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		rng := rand.New(rand.NewPCG(seed, 0))
		var opts []Opt
		if seed == 3 {
			opts = append(opts, Capacity(5000))
		}
		m := New(opts...)
		model := map[uint64][]Episode{}
		// Ids: sequential ones, random ones and the extremes.
		ids := make([]uint64, 0, 30_000)
		for i := range uint64(10_000) {
			ids = append(ids, i)
		}
		for range 20_000 {
			ids = append(ids, rng.Uint64())
		}
		ids = append(ids, math.MaxUint64, math.MaxUint64-1)

		check := func(id uint64) {
			t.Helper()
			eps := model[id]
			ts := []uint64{0, rng.Uint64N(1000), rng.Uint64(), math.MaxUint64}
			for _, e := range eps {
				ts = append(ts, e.LeftAtNs-1, e.LeftAtNs, e.RejoinedAtNs-1, e.RejoinedAtNs)
			}
			for _, x := range ts {
				want := !slices.ContainsFunc(eps, func(e Episode) bool { return e.Contains(x) })
				if got := m.Allows(id, x); got != want {
					t.Fatalf("seed %d: Allows(%d, %d) = %v, want %v (episodes %v)", seed, id, x, got, want, eps)
				}
			}
			if got := m.Episodes(id, nil); !slices.Equal(got, eps) {
				t.Fatalf("seed %d: Episodes(%d) = %v, want %v", seed, id, got, eps)
			}
		}

		for op := range 60_000 {
			id := ids[rng.IntN(len(ids))]
			if rng.IntN(3) == 0 {
				check(id)
				continue
			}
			eps := randomEpisodes(rng)
			mustSet(t, m, id, eps)
			if len(eps) == 0 {
				delete(model, id)
			} else {
				model[id] = eps
			}
			if op%10_000 == 0 && m.Len() != len(model) {
				t.Fatalf("seed %d: Len = %d, want %d", seed, m.Len(), len(model))
			}
		}
		for _, id := range ids {
			check(id)
		}
		if m.Len() != len(model) {
			t.Fatalf("seed %d: Len = %d, want %d", seed, m.Len(), len(model))
		}
	}
}

// randomEpisodes returns 0 to 4 ascending, disjoint episodes, the last one
// open half of the time; one open episode is the most common result.
func randomEpisodes(rng *rand.Rand) []Episode {
	n := []int{0, 1, 1, 1, 1, 2, 3, 4}[rng.IntN(8)]
	eps := make([]Episode, 0, n)
	at := rng.Uint64N(1000)
	if rng.IntN(50) == 0 {
		at = math.MaxUint64 - 1000 // beyond the inline range
	}
	for i := range n {
		left := at + rng.Uint64N(50)
		right := left + rng.Uint64N(50)
		if i == n-1 && rng.IntN(2) == 0 {
			right = OpenEnd
		}
		eps = append(eps, Episode{left, right})
		at = right
	}
	return eps
}

func TestFilterFalsePositives(t *testing.T) {
	const n = 100_000
	rng := rand.New(rand.NewPCG(1, 2))
	tb := newTable(slotsFor(n))
	for range n {
		tb.addToFilter(tb.hash(rng.Uint64()))
	}
	fp := 0
	for range n {
		if tb.mayContain(tb.hash(rng.Uint64())) {
			fp++
		}
	}
	// 8 filter bits per slot at this load (0.76 of 3/4) is about 13 bits
	// per key: about 0.8% false positives.
	if rate := float64(fp) / n; rate > 0.02 {
		t.Errorf("filter false-positive rate %.2f%%, want about 0.8%%", 100*rate)
	}
	for range 1000 {
		if b := bits.OnesCount64(filterBits(rng.Uint64())); b < 1 || b > filterK {
			t.Fatalf("filterBits sets %d bits, want 1 to %d", b, filterK)
		}
	}
}

func TestAllowsDoesNotAllocate(t *testing.T) {
	m := New()
	mustSet(t, m, 1, []Episode{{100, OpenEnd}})
	mustSet(t, m, 2, []Episode{{100, 200}, {300, OpenEnd}})
	var sink bool
	for _, id := range []uint64{0, 1, 2, 3} {
		if n := testing.AllocsPerRun(1000, func() { sink = m.Allows(id, 150) }); n != 0 {
			t.Errorf("Allows(%d) allocates %v times per call", id, n)
		}
	}
	_ = sink
}

func mustSet(t testing.TB, m *Map, userID uint64, eps []Episode) {
	t.Helper()
	if err := m.Set(userID, eps); err != nil {
		t.Fatal(err)
	}
}

// TestGrow: after Grow(n), setting n new users keeps the table (no
// rebuild on the way), and the users already in it stay; without Grow the
// same sets rebuild it.
func TestGrow(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before int // users set before Grow
		grow   int
	}{
		{"zero map", -1, 10_000},
		{"empty", 0, 10_000},
		{"holding users", 5_000, 20_000},
		{"room already", 3, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := New()
			if tc.before < 0 {
				m = &Map{}
			}
			for u := range uint64(max(tc.before, 0)) {
				if err := m.Set(u, []Episode{{LeftAtNs: u, RejoinedAtNs: OpenEnd}}); err != nil {
					t.Fatal(err)
				}
			}
			m.Grow(tc.grow)
			tbl := m.table.Load()
			for i := range uint64(tc.grow) {
				u := 1<<40 + i
				if err := m.Set(u, []Episode{{LeftAtNs: 1, RejoinedAtNs: 2}}); err != nil {
					t.Fatal(err)
				}
			}
			if m.table.Load() != tbl {
				t.Fatalf("the table was rebuilt while setting the %d users Grow made room for", tc.grow)
			}
			if got, want := m.Len(), max(tc.before, 0)+tc.grow; got != want {
				t.Fatalf("Len = %d, want %d", got, want)
			}
			for u := range uint64(max(tc.before, 0)) {
				if m.Allows(u, u) {
					t.Fatalf("user %d set before Grow is allowed inside its episode", u)
				}
			}
		})
	}
	// The control: the same sets without Grow rebuild.
	m := New()
	tbl := m.table.Load()
	for u := range uint64(10_000) {
		if err := m.Set(u, []Episode{{LeftAtNs: 1, RejoinedAtNs: 2}}); err != nil {
			t.Fatal(err)
		}
	}
	if m.table.Load() == tbl {
		t.Fatal("10,000 users set without Grow did not rebuild the table; the test shows nothing")
	}
}

// TestClear: a cleared map allows everyone and counts no member, and takes
// users again afterwards.
func TestClear(t *testing.T) {
	m := New()
	for u := uint64(1); u <= 100; u++ {
		if err := m.Set(u, []Episode{{LeftAtNs: 10, RejoinedAtNs: OpenEnd}}); err != nil {
			t.Fatal(err)
		}
	}
	m.Clear()
	if m.Len() != 0 {
		t.Errorf("Len after Clear = %d, want 0", m.Len())
	}
	for u := uint64(1); u <= 100; u++ {
		if !m.Allows(u, 20) {
			t.Fatalf("user %d not allowed after Clear", u)
		}
	}
	if err := m.Set(7, []Episode{{LeftAtNs: 10, RejoinedAtNs: OpenEnd}}); err != nil {
		t.Fatal(err)
	}
	if m.Allows(7, 20) || m.Len() != 1 {
		t.Errorf("after Clear and Set: Allows %v, Len %d; want false, 1", m.Allows(7, 20), m.Len())
	}
}
