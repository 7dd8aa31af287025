package gate

import (
	"math/bits"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"unsafe"
)

// State words. A slot's val is one of:
//
//	valEmpty                 slot unused (the key is meaningless)
//	1 … ovfFlag-1            one open episode, LeftAtNs = val-1
//	ovfFlag | i              the episodes are the history at overflow index i
//	valNone                  the user has no episodes (allowed; slot kept
//	                         until the next rebuild)
//
// Keeping "unused" in the state word rather than the key lets user id 0 be
// an ordinary key.
const (
	valEmpty  = 0
	ovfFlag   = 1 << 63
	valNone   = ^uint64(0)
	maxInline = ovfFlag - 2 // largest LeftAtNs stored inline
)

const (
	minSlots = 64
	// filterK bits are set per key, all in one 64-bit filter word; with 8
	// filter bits per slot, that is 10.7 to 16 bits per user between the
	// load limits, a false-positive rate of about 1.4% to 0.4%.
	filterK            = 5
	slotsPerFilterWord = 8
)

// slot is one table entry. key is written once, before val becomes
// non-zero, and never changes while the table is in use; val is replaced
// atomically by Set.
type slot struct {
	key atomic.Uint64
	val atomic.Uint64
}

// history is an immutable list of episodes, once published.
type history struct {
	eps []Episode
}

// historyWith2 puts a short history in one allocation with its header, so
// that a lookup of the common overflow case (one closed and one open
// episode) reads one object instead of two.
type historyWith2 struct {
	history
	buf [2]Episode
}

func newHistory(eps []Episode) *history {
	if len(eps) <= len(historyWith2{}.buf) {
		h := &historyWith2{}
		h.eps = h.buf[:len(eps):len(eps)]
		copy(h.eps, eps)
		return &h.history
	}
	return &history{eps: slices.Clone(eps)}
}

func (h *history) bytes() int64 {
	if cap(h.eps) <= len(historyWith2{}.buf) {
		return int64(unsafe.Sizeof(historyWith2{}))
	}
	return int64(unsafe.Sizeof(*h)) + int64(cap(h.eps))*int64(unsafe.Sizeof(Episode{}))
}

// overflow holds the histories of the users whose state word is an
// overflow index. It only grows, by copying into a new overflow that is
// published before any state word indexing beyond the old one.
type overflow struct {
	lists []atomic.Pointer[history]
}

// table is one generation of the hash table. Readers load a *table once and
// use it to the end of the call; Set writes only into the current one.
type table struct {
	seed   uint64
	shift  uint   // 64 - log2(len(slots)): the slot index is the top bits of the hash
	mask   uint64 // len(slots) - 1
	fmask  uint64 // len(filter) - 1
	slots  []slot
	filter []atomic.Uint64
	ovf    atomic.Pointer[overflow]
}

// newTable returns an empty table of n slots; n is a power of 2 ≥ minSlots.
func newTable(n int) *table { return newTableSeeded(n, rand.Uint64()) }

// newTableSeeded is newTable with the hash seed given (a snapshot's).
func newTableSeeded(n int, seed uint64) *table {
	t := &table{
		seed:   seed,
		shift:  uint(64 - bits.TrailingZeros(uint(n))),
		mask:   uint64(n - 1),
		fmask:  uint64(n/slotsPerFilterWord - 1),
		slots:  make([]slot, n),
		filter: make([]atomic.Uint64, n/slotsPerFilterWord),
	}
	t.ovf.Store(&overflow{})
	return t
}

// maxUsed is the number of occupied slots at which a table of n slots is
// rebuilt: three quarters, which keeps linear probes short.
func maxUsed(n int) int { return n / 4 * 3 }

// slotsFor returns the slots needed to hold users without a rebuild.
func slotsFor(users int) int {
	n := minSlots
	for maxUsed(n) < users {
		n *= 2
	}
	return n
}

func pow2AtLeast(n int) int { return 1 << bits.Len(uint(n-1)) }

// hash mixes the user id with the table's seed (the SplitMix64 finalizer, a
// bijection), so that sequential or adversarial ids spread evenly.
func (t *table) hash(userID uint64) uint64 {
	x := userID ^ t.seed
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// filterBits picks filterK bits of a filter word from hash bits 34-63; the
// word index comes from the low bits, so the two are independent.
func filterBits(h uint64) uint64 {
	return 1<<(h>>34&63) | 1<<(h>>40&63) | 1<<(h>>46&63) | 1<<(h>>52&63) | 1<<(h>>58)
}

// mayContain reports false only if the key with hash h is not in the table.
func (t *table) mayContain(h uint64) bool {
	b := filterBits(h)
	return t.filter[h&t.fmask].Load()&b == b
}

func (t *table) addToFilter(h uint64) {
	t.filter[h&t.fmask].Or(filterBits(h))
}

// find returns the state word of userID, valEmpty if it has no slot.
func (t *table) find(userID, h uint64) uint64 {
	for i := h >> t.shift; ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		v := s.val.Load()
		if v == valEmpty {
			return valEmpty
		}
		if s.key.Load() == userID {
			return v
		}
	}
}

// probe returns the index of userID's slot and its state word, or the index
// of the empty slot where it would go and valEmpty.
func (t *table) probe(userID, h uint64) (int, uint64) {
	for i := h >> t.shift; ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		v := s.val.Load()
		if v == valEmpty || s.key.Load() == userID {
			return int(i), v
		}
	}
}

// history returns the history a state word with ovfFlag set points to. The
// overflow is loaded after the word, so it is at least as new as the word.
func (t *table) history(v uint64) *history {
	return t.ovf.Load().lists[v&^ovfFlag].Load()
}

// bytes is the size of the table without its histories.
func (t *table) bytes() int64 {
	return int64(unsafe.Sizeof(*t)) +
		int64(len(t.slots))*int64(unsafe.Sizeof(slot{})) +
		int64(len(t.filter))*8 +
		int64(len(t.ovf.Load().lists))*int64(unsafe.Sizeof(atomic.Pointer[history]{}))
}
