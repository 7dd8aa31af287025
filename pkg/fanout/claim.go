package fanout

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cohortgate/cohortgate/pkg/membership"
)

// claim is this instance's ownership of partition p of the commands and of
// every route's input, from one assignment to its revocation. A later assignment of the same
// partition makes a new claim, so stale work can recognise itself by
// pointer.
//
// Fields set at creation are immutable. The atomics are shared between the
// commands side (writes applied, in the alignment), the aligner (writes
// the alignment's observations) and the signals loop (writes deciding and
// maxEventNs); every cross-goroutine hand-off relies on their sequentially
// consistent ordering, documented at each use.
type claim struct {
	alignment // partition, assignedNs, applied, caughtUp: see align.go

	// judgedBelow is the commands offset below which an earlier owner had
	// applied every command, and produced the changelog records of every
	// one, when it committed the decisions that seeded maxEventNs (from the
	// offset metadata): it judged those commands late or not itself, so
	// replaying them here is neither late nor recorded again. Set before
	// the claim is shared.
	judgedBelow int64
	// inheritedMaxNs is the highest event time earlier owners decided (from
	// the offset metadata: the partition's, or every partition's when the
	// commands' count changed since the partition's), -1 if none: a leave
	// after it cannot have leaked a signal they forwarded. Set before the
	// claim is shared.
	inheritedMaxNs int64
	// fwd remembers the signals this claim forwarded, for exact late-leave
	// windows.
	fwd *forwarded
	// changelogID is the topic ID of the changelog that has held every
	// record of the partition's users since the partition's first
	// command, as far as the owners know (handover.go), or noChangelogID
	// when that is not known; changelogParts its partition count all
	// along, 0 when it changed or is not known (see offsetMeta). Offset
	// metadata carries them to the next owner. Set before the claim is
	// shared.
	changelogID    string
	changelogParts int32
	// refill is the claim's refill of a changelog created again since
	// its previous owners' metadata, nil when none is needed (refill.go).
	// Set before the claim is shared.
	refill *refill
	// readSingle says the previous owners' metadata vouches that every
	// changelog record of the partition's users is in the changelog
	// partition their key gives now (readRequest.single). Set before the
	// claim is shared.
	readSingle bool
	// commandsID is the commands topic's ID, layoutParts its partition
	// count now; inheritedParts is the count under which the commands
	// below judgedBelow were last read (the previous owners', or
	// layoutParts when no other is known) and tailEnd the commands' end
	// when the partition was claimed under a new count, -1 otherwise: the
	// metadata names the new count once the commands below tailEnd have
	// been read under it (see claim.meta). Set before the claim is shared.
	commandsID                  string
	layoutParts, inheritedParts int32
	tailEnd                     int64
	// inputIDs are the fingerprints of the routes' inputs' topic IDs in
	// the layout, for the offset metadata. Set before the claim is shared.
	inputIDs []string
	// restore says the claim starts with an empty store on a partition
	// whose earlier owners judged commands, or whose users may have moved
	// in from other partitions: the commands side may restore it from the
	// changelog (handover.go). Set before the claim is shared.
	restore bool
	// regateUntil is, when the gate was loaded from a snapshot older than
	// the store, the store's checkpoint of the partition then: the gate
	// takes every user a command below it touches from the store, changed
	// or not (updateGate); 0 otherwise. Set before the claim is shared.
	regateUntil int64
	// tails are the commands other partitions may hold, read under an
	// older count, of users this partition owns now: re-published here
	// before the partition forwards (migrate.go). Set before the claim is
	// shared.
	tails []tail

	// deciding is, per route, one past the highest offset of the route's
	// input whose gate decision may have been taken; -1 before the first.
	// The signals loop stores it BEFORE asking the gate, so a command
	// applied to the gate before it is read is enforced for every offset
	// >= the value read.
	deciding []atomic.Int64
	// offsets is, per route, what the group's offset fetch for this
	// claim's assignment found of the route's input partition
	// (offsetsUnknown until it answered; set by inputStarts.adjust on the
	// group's goroutine, read by the signals loop). Once it answered, a
	// cycle may commit the claim's metadata on a partition it has not
	// fetched a record of: at the group's committed offset, or at 0 when
	// the group had none (a position at or below where consuming starts).
	offsets []atomic.Int32
	// maxEventNs is the highest event time (ns) of a signal of p the gate
	// was asked about, stored before asking (same ordering as deciding).
	// A leave with an earlier boundary may be late.
	maxEventNs atomic.Int64
	revoked    atomic.Bool
	// waitingFor is what the commands side says the claim waits for.
	waitingFor atomic.Pointer[string]

	// Owned by the commands side (recover.go).
	recovery recovery
	// progress is how far the claim's restore from the changelog is
	// (handover.go); anyone may read it.
	progress restoreProgress
	// reflected is, after a restore from the changelog, the commands
	// offset each user's restored record reflects, for the users whose
	// record reflects commands at or above judgedBelow: those commands
	// are in the restored state already, and are not applied again.
	// Owned by the commands side (handover.go).
	reflected map[uint64]int64
}

// tail is one partition's commands that may still hold commands, read
// under an older count, of users the claiming partition owns now.
type tail struct {
	partition int32
	parts     int32 // the commands' count its commands were last read under; 0 if unknown
	end       int64 // its end when the claim was made
}

// newClaim makes the claim of partition, for routes routes.
func newClaim(partition int32, routes int, assignedNs, applied int64) *claim {
	c := &claim{inheritedMaxNs: -1, tailEnd: -1, fwd: newForwarded(), deciding: make([]atomic.Int64, routes),
		offsets: make([]atomic.Int32, routes)}
	c.alignment.init(partition, assignedNs, applied)
	c.prepared.Store(true) // ownership.claim says otherwise when it must
	for i := range c.deciding {
		c.deciding[i].Store(-1)
	}
	c.maxEventNs.Store(-1)
	return c
}

// What the group's offset fetch found of a claim's input partition (see
// claim.offsets).
const (
	offsetsUnknown   int32 = iota // not answered yet
	offsetsCommitted              // the group has a committed offset
	offsetsNone                   // the group has none: consuming starts at the beginning
)

// note says what the claim waits for before it can catch up ("" when
// nothing), for PartitionStatus.Waiting.
func (c *claim) note(what string) {
	if what == "" {
		c.waitingFor.Store(nil)
		return
	}
	c.waitingFor.Store(&what)
}

func (c *claim) waiting() string {
	if w := c.waitingFor.Load(); w != nil {
		return *w
	}
	return ""
}

// publishDeciding records, before the gate is asked about the signal at
// offset of route's input with event time tsNs, that it may be decided:
// see deciding.
func (c *claim) publishDeciding(route int, offset, tsNs int64) {
	if d := &c.deciding[route]; offset+1 > d.Load() {
		d.Store(offset + 1)
	}
	if tsNs > c.maxEventNs.Load() {
		c.maxEventNs.Store(tsNs)
	}
}

// offsetMeta is a partition's committed offset metadata, which carries to
// its next owner what the commands of the partition were judged under:
//
//	<event ns>:<judged>:<changelog ID>:<changelog partitions>:<commands ID>:<commands partitions>:<inputs>
//
// eventNs is the highest event time decided; judged the commands offset
// below which every command's changelog record committed with it (the
// applied offset read before the outbox was last drained into the cycle
// being committed), which lets the next owner skip them, or restore the
// partition's users from their records (handover.go). changelogID is the
// topic ID of the changelog that has held every record of the partition's
// users since its first command, noChangelogID when that is not known, and
// changelogParts its partition count all along, 0 ("*") when it changed
// or is not known: a restore may then read no single changelog partition.
// commandsID is the commands topic's ID ("" when not known) and
// commandsParts the partition count under which the commands below judged
// were last read, 0 when not known. inputs are the fingerprints of the
// routes' inputs' topic IDs, in route order, comma-separated ("-" for one
// not known): offsets committed for an input that has been deleted and
// created again since are not positions in the new one (inputStarts).
//
// Older forms ("<event ns>", "<event ns>:<judged>", with the changelog ID)
// read with the fields they lack unknown; the first two fields keep their
// place, so a reader of the older forms reads the newer one.
type offsetMeta struct {
	eventNs, judged int64
	changelogID     string
	changelogParts  int32
	commandsID      string
	commandsParts   int32
	inputs          []string // fingerprints (topicFingerprint), nil when not carried
	// legacy says the metadata is of an older form, without the counts:
	// the version that wrote it read one changelog partition whenever the
	// changelog had as many partitions as the commands.
	legacy bool
}

func (m offsetMeta) String() string {
	clParts := "*"
	if m.changelogParts > 0 {
		clParts = strconv.Itoa(int(m.changelogParts))
	}
	cmdID := m.commandsID
	if cmdID == "" {
		cmdID = "-"
	}
	out := strconv.FormatInt(m.eventNs, 10) + ":" + strconv.FormatInt(m.judged, 10) + ":" + m.changelogID +
		":" + clParts + ":" + cmdID + ":" + strconv.Itoa(int(m.commandsParts))
	if len(m.inputs) > 0 {
		out += ":" + strings.Join(m.inputs, ",")
	}
	return out
}

// meta is the claim's offset metadata with judged the applied offset read
// before the outbox was last drained: see offsetMeta. The commands count
// it names is the layout's once the claim has read the commands its
// partition held when it was claimed (tailEnd): until then they were last
// read under the count inherited.
func (c *claim) meta(judged int64) string {
	j := max(judged, c.judgedBelow)
	parts := c.layoutParts
	if j < c.tailEnd {
		parts = c.inheritedParts
	}
	clID, clParts := c.changelogMeta()
	return offsetMeta{eventNs: c.maxEventNs.Load(), judged: j, changelogID: clID,
		changelogParts: clParts, commandsID: c.commandsID, commandsParts: parts, inputs: c.inputIDs}.String()
}

// refill is a claim's pending refill of the changelog.
type refill struct {
	// from is the changelog ID the partition's metadata named: the
	// changelog deleted since; to and toParts are the changelog's ID and
	// partition count now. Immutable.
	from, to string
	toParts  int32
	// queued is set by the commands side once the records are in the
	// outbox. Owned by the commands side.
	queued bool
	// last is the outbox sequence number of the refill's last record,
	// refillNone when it had none, 0 until they are stored; delivered is
	// the outbox's delivered watermark. Stored by the commands side
	// (delivered first), read by the signals loop for the metadata.
	last      atomic.Uint64
	delivered atomic.Pointer[atomic.Uint64]
}

// changelogMeta is the changelog ID and partition count the claim's
// offset metadata names (see offsetMeta): while a refill is pending, the
// changelog it refills from, so that a next owner refills again; once it
// is delivered, the new changelog, which holds every user's record.
func (c *claim) changelogMeta() (string, int32) {
	switch r := c.refill; {
	case r == nil:
		return c.changelogID, c.changelogParts
	case r.done():
		return r.to, r.toParts
	default:
		return r.from, 0
	}
}

// refillNone is refill.last for a refill without records.
const refillNone = ^uint64(0)

// done reports whether the refill's records were delivered.
func (r *refill) done() bool {
	switch last := r.last.Load(); last {
	case 0:
		return false
	case refillNone:
		return true
	default:
		d := r.delivered.Load()
		return d != nil && d.Load() >= last
	}
}

// noChangelogID is the changelog topic ID of offset metadata that does not
// know which changelog holds the partition's records.
const noChangelogID = "-"

// parseMeta reads what offsetMeta.String wrote, and the older forms.
func parseMeta(s string) (offsetMeta, error) {
	m := offsetMeta{changelogID: noChangelogID}
	f := strings.Split(s, ":")
	var err error
	if m.eventNs, err = strconv.ParseInt(f[0], 10, 64); err != nil {
		return offsetMeta{}, err
	}
	if len(f) > 1 {
		if m.judged, err = strconv.ParseInt(f[1], 10, 64); err != nil {
			return offsetMeta{}, err
		}
	}
	if len(f) > 2 && f[2] != "" {
		m.changelogID = f[2]
	}
	m.legacy = len(f) <= 5
	if !m.legacy {
		if f[3] != "*" {
			n, err := strconv.ParseInt(f[3], 10, 32)
			if err != nil || n < 0 {
				return offsetMeta{}, fmt.Errorf("changelog partitions %q", f[3])
			}
			m.changelogParts = int32(n)
		}
		if f[4] != "-" {
			m.commandsID = f[4]
		}
		n, err := strconv.ParseInt(f[5], 10, 32)
		if err != nil || n < 0 {
			return offsetMeta{}, fmt.Errorf("commands partitions %q", f[5])
		}
		m.commandsParts = int32(n)
		if len(f) > 6 && f[6] != "" {
			m.inputs = strings.Split(f[6], ",")
		}
	}
	return m, nil
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

// lateWindow works out the late-leave window of a leave at commands offset
// offset whose episode, as the batch leaves it, is [left, end) (end is
// membership.OpenEnd while open). fwd is what the claim's record of
// forwarded signals knows of the user in [left, end): the latest event time
// forwarded, whether there was one, and whether the record is complete
// back to left.
//
// A leave an earlier owner applied (offset < judgedBelow) was judged by it.
// Otherwise the window is exact when no earlier owner decided a signal at
// or after left and the record is complete: the latest forwarded signal of
// the user in the episode, or no window when there is none. Else it is the
// bound [left, min(latest event time decided on the partition, end-1)],
// not exact, when a signal at or after left was decided at all.
func (c *claim) lateWindow(offset int64, left, end uint64, fwd fwdResult) (membership.LateLeave, bool) {
	if offset < c.judgedBelow || end == left {
		return membership.LateLeave{}, false // recorded by an earlier owner; or an empty episode holds nothing
	}
	if int64(left) > c.inheritedMaxNs && fwd.complete {
		if !fwd.found {
			return membership.LateLeave{}, false
		}
		return membership.LateLeave{LeftAtNs: left, ForwardedThroughNs: uint64(fwd.latest), Exact: true}, true
	}
	seen := c.maxEventNs.Load()
	if seen < 0 || uint64(seen) < left {
		return membership.LateLeave{}, false
	}
	return membership.LateLeave{LeftAtNs: left, ForwardedThroughNs: min(uint64(seen), end-1)}, true
}

// fwdResult is what forwarded.latest found.
type fwdResult struct {
	latest          int64
	found, complete bool
}

// alignments returns the alignments of the current claims, for the
// aligner.
func (cs *claims) alignments() []*alignment {
	all := cs.all()
	out := make([]*alignment, len(all))
	for i, c := range all {
		out[i] = &c.alignment
	}
	return out
}
