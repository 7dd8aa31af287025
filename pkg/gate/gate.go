package gate

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
)

// OpenEnd is the RejoinedAtNs of an episode that has not ended: the user is
// still out.
const OpenEnd = math.MaxUint64

// Episode is a leave episode, the half-open interval [LeftAtNs,
// RejoinedAtNs) in nanoseconds since the Unix epoch. The open episode has
// RejoinedAtNs == OpenEnd and covers every timestamp from LeftAtNs on.
type Episode struct {
	LeftAtNs, RejoinedAtNs uint64
}

// Contains reports whether tsNs lies in the episode: LeftAtNs ≤ tsNs <
// RejoinedAtNs, or LeftAtNs ≤ tsNs for an open episode (so that an open
// episode also covers math.MaxUint64).
func (e Episode) Contains(tsNs uint64) bool {
	return e.LeftAtNs <= tsNs && (tsNs < e.RejoinedAtNs || e.RejoinedAtNs == OpenEnd)
}

// ErrBadEpisodes is wrapped by the error [Map.Set] returns for episodes that
// are not ascending and disjoint with only the last one open.
var ErrBadEpisodes = errors.New("gate: bad episodes")

// Map maps user ids to leave episodes. Make one with [New]; the zero Map is
// also ready to use (empty, unsized). A Map must not be copied after first
// use. See the package documentation for who may call what concurrently.
type Map struct {
	// table is the current table; readers load it once per call.
	table atomic.Pointer[table]

	// live counts users with at least one episode (Len); bytes is the
	// approximate size of the current table (MemoryBytes). Written only
	// under mu, read by anyone.
	live  atomic.Int64
	bytes atomic.Int64

	capacity int // from the options; read-only after New

	// spare is the memory PrepareSnapshot allocated for the next Snapshot's
	// copy, of a table of slots slots; words is nil if none.
	spare struct {
		sync.Mutex
		words   []uint64
		release func()
		slots   int
	}

	mu struct {
		sync.Mutex
		// used counts the occupied slots of the current table, including
		// users set to no episodes, whose slots stay until the next rebuild.
		used int
		// ovfLen counts the overflow indices handed out in the current
		// table; they are never reused before the next rebuild.
		ovfLen int
		// histBytes is the size of the histories the current table holds.
		histBytes int64
	}
}

// New returns an empty Map.
func New(opts ...Opt) *Map {
	var c cfg
	for _, o := range opts {
		o.apply(&c)
	}
	m := &Map{capacity: c.capacity}
	m.mu.Lock()
	m.installLocked(newTable(slotsFor(c.capacity)))
	m.mu.Unlock()
	return m
}

// Allows reports whether a signal of userID stamped tsNs may be forwarded:
// false iff tsNs lies in one of the user's episodes. A user without an entry
// is allowed. Allows takes no lock and does not allocate.
func (m *Map) Allows(userID, tsNs uint64) bool {
	t := m.table.Load()
	if t == nil { // zero Map
		return true
	}
	h := t.hash(userID)
	if !t.mayContain(h) {
		return true
	}
	v := t.find(userID, h)
	switch {
	case v == valEmpty || v == valNone:
		return true
	case v < ovfFlag: // one open episode starting at v-1
		return tsNs < v-1
	default:
		return allowedBy(t.history(v).eps, tsNs)
	}
}

// allowedBy reports whether tsNs lies outside every episode of eps, which
// are ascending and disjoint. Only the last episode starting at or before
// tsNs can contain it, so a binary search finds it.
func allowedBy(eps []Episode, tsNs uint64) bool {
	lo, hi := 0, len(eps)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if eps[mid].LeftAtNs <= tsNs {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo == 0 || !eps[lo-1].Contains(tsNs)
}

// Episodes appends the user's episodes to dst and returns the extended
// slice; for a user without episodes it returns dst unchanged. Pass dst[:0]
// to reuse a buffer.
func (m *Map) Episodes(userID uint64, dst []Episode) []Episode {
	t := m.table.Load()
	if t == nil {
		return dst
	}
	v := t.find(userID, t.hash(userID))
	switch {
	case v == valEmpty || v == valNone:
		return dst
	case v < ovfFlag:
		return append(dst, Episode{LeftAtNs: v - 1, RejoinedAtNs: OpenEnd})
	default:
		return append(dst, t.history(v).eps...)
	}
}

// Len returns the number of users with at least one episode.
func (m *Map) Len() int { return int(m.live.Load()) }

// MemoryBytes returns the approximate number of bytes the Map holds: the
// current table, filter and episode histories. A table replaced by growth
// is not counted; it is freed once the last reader that started on it
// returns.
func (m *Map) MemoryBytes() int64 { return m.bytes.Load() }

// Set replaces the user's episodes with a copy of eps. Empty eps means the
// user is allowed at all times, like a user without an entry. eps must be
// ascending and disjoint, each RejoinedAtNs ≥ its LeftAtNs, and only the
// last episode may be open (RejoinedAtNs == OpenEnd); otherwise Set returns an
// error wrapping [ErrBadEpisodes] that names the first bad episode, and the
// user's entry stays as it was.
//
// Set is safe to call from several goroutines; calls are serialized.
func (m *Map) Set(userID uint64, eps []Episode) error {
	if err := validate(userID, eps); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.setLocked(userID, eps)
	return nil
}

// Grow makes room for n more users with episodes, so that setting them
// does not rebuild the table on the way: one rebuild now, if the table is
// too small, instead of one per doubling (a restore of a partition's
// million users spent most of its gate time in them). Values above 2^28
// count as 2^28. Grow is safe to call from several goroutines; it
// serializes with Set.
func (m *Map) Grow(n int) {
	n = min(n, maxCapacity)
	if n <= 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.table.Load()
	if t == nil { // zero Map
		m.installLocked(newTable(slotsFor(n)))
		return
	}
	// A new user rebuilds when used reaches maxUsed: n more must stay
	// below it.
	if m.mu.used+n < maxUsed(len(t.slots)) {
		return
	}
	m.rebuildLocked(t, int(m.live.Load())+n)
}

// Clear drops every user: afterwards the map allows every signal, as a
// new one does. A reader that loaded the table before sees the users
// until its call returns. Clear is safe to call from several goroutines;
// it serializes with Set.
func (m *Map) Clear() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mu.used, m.mu.ovfLen, m.mu.histBytes = 0, 0, 0
	m.live.Store(0)
	m.installLocked(newTable(slotsFor(m.capacity)))
}

func validate(userID uint64, eps []Episode) error {
	if i, reason := badEpisode(eps); reason != "" {
		e := eps[i]
		return fmt.Errorf("%w: user %d: episode %d [%d, %d) %s",
			ErrBadEpisodes, userID, i, e.LeftAtNs, e.RejoinedAtNs, reason)
	}
	return nil
}

// badEpisode returns the index of the first episode of eps that breaks
// the rules of Set, and why; reason is empty if none does.
func badEpisode(eps []Episode) (i int, reason string) {
	for i, e := range eps {
		switch {
		case e.RejoinedAtNs < e.LeftAtNs:
			return i, "rejoined before it left"
		case e.RejoinedAtNs == OpenEnd && i != len(eps)-1:
			return i, "open but not the last"
		case i > 0 && e.LeftAtNs < eps[i-1].RejoinedAtNs:
			return i, "starts before the previous episode ends"
		}
	}
	return 0, ""
}

func (m *Map) setLocked(userID uint64, eps []Episode) {
	t := m.table.Load()
	if t == nil { // zero Map
		if len(eps) == 0 {
			return
		}
		t = newTable(slotsFor(m.capacity))
		m.installLocked(t)
	}
	h := t.hash(userID)
	i, v := t.probe(userID, h)
	s := &t.slots[i]

	switch {
	case v == valEmpty: // a new user
		if len(eps) == 0 {
			return
		}
		if m.mu.used >= maxUsed(len(t.slots)) {
			t = m.rebuildLocked(t, int(m.live.Load())+1)
			h = t.hash(userID)
			i, _ = t.probe(userID, h)
			s = &t.slots[i]
		}
		nv := m.encodeLocked(t, eps)
		// Filter bit, then key, then state: a reader that finds the state
		// word non-zero also finds the key and the history it points to.
		t.addToFilter(h)
		s.key.Store(userID)
		s.val.Store(nv)
		m.mu.used++
		m.live.Add(1)

	case v == valNone || v < ovfFlag: // a user with no or one open episode
		s.val.Store(m.encodeLocked(t, eps))
		m.live.Add(int64(min(len(eps), 1) - b2i(v != valNone)))

	default: // a user with an overflow index keeps it until the next rebuild
		slot := &t.ovf.Load().lists[v&^ovfFlag]
		old := slot.Load()
		nh := newHistory(eps)
		slot.Store(nh)
		m.mu.histBytes += nh.bytes() - old.bytes()
		m.live.Add(int64(min(len(eps), 1) - min(len(old.eps), 1)))
	}
	m.bytes.Store(t.bytes() + m.mu.histBytes)
}

// encodeLocked returns the state word for eps, storing eps in the overflow
// of t if they do not fit inline.
func (m *Map) encodeLocked(t *table, eps []Episode) uint64 {
	switch {
	case len(eps) == 0:
		return valNone
	case len(eps) == 1 && eps[0].RejoinedAtNs == OpenEnd && eps[0].LeftAtNs <= maxInline:
		return eps[0].LeftAtNs + 1
	default:
		return m.addHistoryLocked(t, newHistory(eps))
	}
}

// addHistoryLocked stores h under a fresh overflow index of t and returns
// the state word pointing to it. The overflow array grows by copying into a
// new one; the array is published before any state word that indexes it.
func (m *Map) addHistoryLocked(t *table, h *history) uint64 {
	o := t.ovf.Load()
	if m.mu.ovfLen == len(o.lists) {
		no := &overflow{lists: make([]atomic.Pointer[history], max(16, 2*len(o.lists)))}
		for j := range m.mu.ovfLen {
			no.lists[j].Store(o.lists[j].Load())
		}
		t.ovf.Store(no)
		o = no
	}
	idx := m.mu.ovfLen
	m.mu.ovfLen++
	o.lists[idx].Store(h)
	m.mu.histBytes += h.bytes()
	return ovfFlag | uint64(idx)
}

// rebuildLocked copies the users with episodes of old into a new table with
// room for at least need users at half load, publishes it and returns it.
// Users without episodes are dropped and overflow indices are compacted.
func (m *Map) rebuildLocked(old *table, need int) *table {
	t := newTable(pow2AtLeast(max(minSlots, 2*need)))
	m.mu.used, m.mu.ovfLen, m.mu.histBytes = 0, 0, 0
	for i := range old.slots {
		s := &old.slots[i]
		v := s.val.Load()
		if v == valEmpty || v == valNone {
			continue
		}
		userID := s.key.Load()
		if v >= ovfFlag {
			h := old.history(v)
			switch {
			case len(h.eps) == 0:
				continue
			case len(h.eps) == 1 && h.eps[0].RejoinedAtNs == OpenEnd && h.eps[0].LeftAtNs <= maxInline:
				v = h.eps[0].LeftAtNs + 1
			default:
				v = m.addHistoryLocked(t, h) // histories are immutable: share
			}
		}
		hash := t.hash(userID)
		j, _ := t.probe(userID, hash)
		t.addToFilter(hash)
		t.slots[j].key.Store(userID)
		t.slots[j].val.Store(v)
		m.mu.used++
	}
	m.installLocked(t)
	return t
}

func (m *Map) installLocked(t *table) {
	m.table.Store(t)
	m.bytes.Store(t.bytes() + m.mu.histBytes)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
