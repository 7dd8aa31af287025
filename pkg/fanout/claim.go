package fanout

import (
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// claim is this instance's ownership of partition p of both input topics,
// from one assignment to its revocation. A later assignment of the same
// partition makes a new claim, so stale work can recognise itself by
// pointer.
//
// Fields set at creation are immutable. The atomics are shared between the
// commands goroutine (writes applied), the tracker (writes marks) and the
// main loop (writes deciding and maxEventNs); every cross-goroutine
// hand-off relies on their sequentially consistent ordering, documented at
// each use.
type claim struct {
	partition  int32
	assignedNs int64 // wall clock at assignment; signals wait for an observation after it
	marks      *watermarks
	// judgedBelow is the commands offset below which an earlier owner had
	// applied every command when it committed the decisions that seeded
	// maxEventNs (from the offset metadata): it judged those commands
	// late or not itself, so replaying them here is not late. Set before
	// the claim is shared.
	judgedBelow int64

	// applied is the next commands offset; every command below it is in
	// the gate and in Pebble (or in the batch about to commit).
	applied atomic.Int64
	// deciding is one past the highest signals offset whose gate decision
	// may have been taken; -1 before the first. The main loop stores it
	// BEFORE asking the gate, so a command applied to the gate before it
	// is read is enforced for every offset >= the value read.
	deciding atomic.Int64
	// maxEventNs is the highest event time (ns) of a signal of p the gate
	// was asked about, stored before asking (same ordering as deciding).
	// A leave with an earlier boundary is late.
	maxEventNs atomic.Int64
	// caughtUp is set once the commands are applied through an end offset
	// observed after assignment: the partition has restored.
	caughtUp atomic.Bool
	revoked  atomic.Bool
}

func newClaim(partition int32, assignedNs, applied int64, marksLimit int) *claim {
	c := &claim{
		partition:  partition,
		assignedNs: assignedNs,
		marks:      newWatermarks(marksLimit),
	}
	c.applied.Store(applied)
	c.deciding.Store(-1)
	c.maxEventNs.Store(-1)
	return c
}

// late reports whether a leave with boundary left, at commands offset
// offset, is late: a signal of the partition with an event time at or
// after left may already have been decided without it. seen is the
// highest such event time.
func (c *claim) late(offset int64, left uint64) (seen uint64, late bool) {
	m := c.maxEventNs.Load()
	if m < 0 || left > uint64(m) || offset < c.judgedBelow {
		return 0, false
	}
	return uint64(m), true
}

// meta is a partition's committed offset metadata: the highest event time
// decided and how far the commands were applied, "<event ns>:<offset>".
func (c *claim) meta() string {
	return strconv.FormatInt(c.maxEventNs.Load(), 10) + ":" + strconv.FormatInt(max(c.applied.Load(), c.judgedBelow), 10)
}

// parseMeta reads what claim.meta wrote; metadata of the older form
// "<event ns>" has judged 0.
func parseMeta(s string) (eventNs, judged int64, err error) {
	ts, off, found := strings.Cut(s, ":")
	if eventNs, err = strconv.ParseInt(ts, 10, 64); err != nil {
		return 0, 0, err
	}
	if found {
		if judged, err = strconv.ParseInt(off, 10, 64); err != nil {
			return 0, 0, err
		}
	}
	return eventNs, judged, nil
}

// claims is the set of partitions this instance owns. Group callbacks add
// and remove; every other goroutine reads.
type claims struct {
	mu struct {
		sync.Mutex
		m map[int32]*claim
	}
}

func (cs *claims) get(p int32) *claim {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.mu.m[p]
}

// put installs c, returning the claim it replaces, if any.
func (cs *claims) put(c *claim) (old *claim) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.mu.m == nil {
		cs.mu.m = make(map[int32]*claim)
	}
	old = cs.mu.m[c.partition]
	cs.mu.m[c.partition] = c
	return old
}

// drop removes and marks revoked the claim of p, returning it.
func (cs *claims) drop(p int32) *claim {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	c := cs.mu.m[p]
	if c != nil {
		c.revoked.Store(true)
		delete(cs.mu.m, p)
	}
	return c
}

// all returns the current claims ordered by partition.
func (cs *claims) all() []*claim {
	cs.mu.Lock()
	out := make([]*claim, 0, len(cs.mu.m))
	for _, c := range cs.mu.m {
		out = append(out, c)
	}
	cs.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].partition < out[j].partition })
	return out
}

func (cs *claims) len() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return len(cs.mu.m)
}
