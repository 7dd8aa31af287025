package fanout

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ownership answers the consumer group's callbacks: a partition number
// assigned to this instance (of every route's input at once: see
// balancer.go) becomes a claim, whose commands partition the commands
// consumer starts reading; a partition revoked or lost is dropped. The
// callbacks run on franz-go's goroutines.
type ownership struct {
	cfg *Config
	clk *clock // stamps the claims' assignments (monotonic)
	// layout is the topics' layout as found at start: its changelog ID
	// and counts go into the claims' offset metadata.
	layout layout
	// migrating says this run started under other commands or input
	// counts than the store's state was built under (the store was
	// forgotten): partitions without metadata may hold commands of users
	// that moved.
	migrating bool
	store     Store
	claims    *claims
	// regate holds the partitions whose commands must be applied again
	// from an older offset than the store's checkpoint (snapshot.go);
	// nil in tests.
	regate *regate
	cmds   *kgo.Client // the commands consumer
	// leaderEpoch is the commands partition's leader epoch in the commands
	// client's metadata, -1 if not loaded: the kgo client keeps the newest
	// it saw (an older one from a lagging broker is refused, up to five
	// times in a row).
	leaderEpoch func(partition int32) int32
	adm         groupAdmin
	ev          EventListener
	halt        func(error)
	// wake tells the commands side that claims wait to be prepared (see
	// applier.prepare); nil in tests.
	wake chan<- struct{}
	// assignedOnce is set once the group has answered the current
	// session with an assignment (perhaps empty) and its partitions are
	// claimed: before it, the instance owns nothing only because it has
	// not joined yet, and is not ready.
	assignedOnce *atomic.Bool
}

// groupAdmin is what ownership asks of the cluster (a *kadm.Client).
type groupAdmin interface {
	FetchOffsetsForTopics(ctx context.Context, group string, topics ...string) (kadm.OffsetResponses, error)
	ListEndOffsets(ctx context.Context, topics ...string) (kadm.ListedOffsets, error)
}

// assigned claims the new signals partitions and starts consuming their
// commands from the store's checkpoints, or from where the previous owner
// had judged them when that is earlier (0 when no owner committed
// metadata): the commands this instance applied
// beyond it (before a crash, say) may not have had their changelog
// records produced, and applying them again is harmless (each is a
// duplicate) and writes the records anew. Their signals wait (fail
// closed) until the commands are applied through an end offset observed
// after this moment.
func (o *ownership) assigned(ctx context.Context, _ *kgo.Client, m map[string][]int32) {
	start := o.claim(ctx, o.partitions(m))
	if ctx.Err() == nil {
		o.assignedOnce.Store(true) // franz-go calls assigned after every join, even with nothing new
	}
	if len(start) == 0 {
		return
	}
	o.cmds.AddConsumePartitions(map[string]map[int32]kgo.Offset{string(o.cfg.Topics.Commands): start})
	if o.wake != nil {
		select {
		case o.wake <- struct{}{}:
		default: // a wake-up is pending already
		}
	}
	o.ev.PartitionsAssigned(PartitionsInfo{Partitions: slices.Sorted(maps.Keys(start))})
}

// claim makes the claims of parts not claimed yet and returns where each
// one's commands are read from; nothing when ctx ends first.
func (o *ownership) claim(ctx context.Context, parts []int32) map[int32]kgo.Offset {
	if len(parts) == 0 {
		return nil
	}
	routes := len(o.cfg.Topics.Routes) + 1
	if o.regate != nil {
		// Where each partition starts depends on the gate's restore: a
		// snapshot older than the store has its commands read again.
		if err := o.regate.wait(ctx); err != nil {
			return nil
		}
	}
	seen, err := o.committedMeta(ctx)
	if err != nil {
		return nil // stopping: the partitions stay unclaimed, their signals held
	}
	mig := o.migration(seen)
	var ends map[int32]int64
	if len(mig.stale) > 0 || o.cfg.Testing.UnsafeSkipCommands {
		if ends, err = o.commandEnds(ctx); err != nil {
			return nil
		}
	}
	now := o.clk.monoNow()
	start := make(map[int32]kgo.Offset, len(parts))
	for _, part := range parts {
		if o.claims.get(part) != nil {
			continue // claimed with another input's partition
		}
		if n := o.layout.partitions(); n > 0 && part >= n && !o.cfg.Testing.UnsafeIgnoreTopology {
			// The group saw the inputs grow before the watcher did: the
			// run ends, and the next one claims under the new count.
			o.halt(&TopologyChangedError{Changes: []string{fmt.Sprintf(
				"the group assigned partition %d, and the layout found at start has %d partitions", part, n)}})
			return nil
		}
		checkpoint, hasCheckpoint, err := o.store.Checkpoint(string(o.cfg.Topics.Commands), part)
		if err != nil {
			o.halt(fmt.Errorf("unable to read the commands checkpoint of partition %d: %w", part, err))
			return nil
		}
		next := checkpoint
		if end, ok := ends[part]; ok && end > next && o.cfg.Testing.UnsafeSkipCommands {
			o.cfg.Logger.Warn("UNSAFE: skipping commands", "partition", part, "from", next, "to", end)
			next = end
		}
		// No metadata: no cycle committed the changelog records of any
		// command of the partition (judged 0), however far the store
		// applied them, since a record whose claim was revoked is dropped
		// for the next owner to write; this instance may be that owner.
		m, inherited := seen[part]
		if m.judged < next && !o.cfg.Testing.UnsafeSkipCommands {
			next = m.judged
		}
		// A gate loaded from a snapshot older than the store learns the
		// users of the partition that changed since from the commands
		// since: read them again (snapshot.go).
		var regateUntil int64
		if o.regate != nil {
			if g, ok := o.regate.get(part); ok {
				next, regateUntil = min(next, g.from), g.until
			}
		}
		c := newClaim(part, routes, now, next)
		c.regateUntil = regateUntil
		c.floor = checkpoint
		if o.leaderEpoch != nil {
			c.raiseEpoch(o.leaderEpoch(part))
		}
		o.layoutClaim(c, m, inherited, checkpoint, hasCheckpoint)
		if inherited {
			c.maxEventNs.Store(m.eventNs)
			c.inheritedMaxNs = m.eventNs
			c.judgedBelow = m.judged
		}
		if len(mig.stale) > 0 && m.commandsParts != o.layout.partitions() {
			// The count changed since this partition's metadata (or it
			// has none): its users' signals were decided under the old
			// count in whichever partitions their keys had then, so a
			// late leave here may have let through a signal any of them
			// decided (its window is then not exact).
			if e := highestEventNs(seen); e > c.inheritedMaxNs {
				c.maxEventNs.Store(e)
				c.inheritedMaxNs = e
			}
		}
		c.tails = mig.tailsOf(part, seen, ends)
		if _, stale := mig.stale[part]; stale {
			c.tailEnd = ends[part]
		}
		// UnsafeSkipCommands's control must forget the leaves: no restore.
		c.restore = !hasCheckpoint && (c.judgedBelow > 0 || len(c.tails) > 0) && !o.cfg.Testing.UnsafeSkipCommands
		c.prepared.Store(!c.restore && len(c.tails) == 0)
		o.claims.put(c)
		start[part] = kgo.NoResetOffset().At(next)
	}
	return start
}

// highestEventNs is the highest event time any partition's metadata in seen
// says was decided, -1 if none.
func highestEventNs(seen map[int32]committedMeta) int64 {
	out := int64(-1)
	for _, m := range seen {
		out = max(out, m.eventNs)
	}
	return out
}

// layoutClaim sets what c's offset metadata says of the layout (see
// offsetMeta), from the previous owners' metadata m (inherited false:
// none).
func (o *ownership) layoutClaim(c *claim, m committedMeta, inherited bool, checkpoint int64, hasCheckpoint bool) {
	lay := o.layout
	c.commandsID, c.layoutParts, c.inheritedParts = lay.Commands.ID, lay.partitions(), lay.partitions()
	c.inputIDs = lay.inputFingerprints()
	if inherited && m.commandsParts > 0 {
		c.inheritedParts = m.commandsParts
	}
	c.changelogID = lay.Changelog.ID
	switch {
	case !inherited || m.judged == 0:
		// Nothing judged: every command's record is written anew, under
		// the changelog as it is.
		c.changelogParts = lay.Changelog.Partitions
	case m.changelogID != lay.Changelog.ID:
		// Commands were judged with their records in another changelog
		// (deleted and created again since), or in one not named: this
		// one may lack users.
		c.changelogID = noChangelogID
		if m.changelogID != noChangelogID {
			// Deleted and created again: this one lacks them all
			// until the partition's owner refills it (refill.go).
			c.refill = &refill{from: m.changelogID, to: lay.Changelog.ID, toParts: lay.Changelog.Partitions}
		}
	case m.changelogParts == lay.Changelog.Partitions, m.legacy && lay.Changelog.Partitions == lay.partitions():
		c.changelogParts = lay.Changelog.Partitions
		c.readSingle = true
	}
}

// committedMeta is a partition's previous owners' offset metadata, as the
// commands topic now is: metadata judged under a commands topic that no
// longer exists (another ID) says nothing of its commands.
type committedMeta = offsetMeta

// migration is what the partitions' metadata says of a change of the
// commands' partition count: which partitions may still hold commands,
// read under the old count, of users that the new count gives to other
// partitions.
type migration struct {
	// stale holds the partitions whose commands were last read under
	// another count, or (when a change is known) that committed no
	// metadata at all: each new owner of a
	// partition re-publishes, before it forwards, the commands of its
	// users that those still hold (migrate.go).
	stale map[int32]struct{}
}

// migration finds the stale partitions of the layout in seen, the
// metadata of every partition that has some.
func (o *ownership) migration(seen map[int32]committedMeta) migration {
	mig := migration{stale: make(map[int32]struct{})}
	n := o.layout.partitions()
	if n == 0 {
		return mig // no layout known (tests of other things)
	}
	known := o.migrating
	for part, m := range seen {
		// Read under another count, however far: commands it judged
		// nothing of (applied, their records not committed yet when the
		// count changed, or written while no instance ran) are as much
		// another partition's now as those it judged.
		if m.commandsParts > 0 && m.commandsParts != n {
			mig.stale[part] = struct{}{}
			known = true
		}
	}
	if !known {
		return mig
	}
	for part := range n {
		if m, ok := seen[part]; !ok || m.commandsParts == 0 {
			mig.stale[part] = struct{}{}
		}
	}
	return mig
}

// tailsOf lists the commands of the stale partitions other than part that
// its new owner must re-publish before it forwards: each from offset 0
// to its end now (migrate.go says why from 0).
func (mig migration) tailsOf(part int32, seen map[int32]committedMeta, ends map[int32]int64) []tail {
	var out []tail
	for p := range mig.stale {
		if p == part {
			continue
		}
		out = append(out, tail{partition: p, parts: seen[p].commandsParts, end: ends[p]})
	}
	slices.SortFunc(out, func(a, b tail) int { return int(a.partition - b.partition) })
	return out
}

// commandEnds lists the end offsets of the commands partitions, retrying
// until it can or ctx ends.
func (o *ownership) commandEnds(ctx context.Context) (map[int32]int64, error) {
	wait := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		ends, err := o.adm.ListEndOffsets(ctx, string(o.cfg.Topics.Commands))
		if err == nil {
			out := make(map[int32]int64)
			for part, off := range ends[string(o.cfg.Topics.Commands)] {
				if off.Err == nil {
					out[part] = off.Offset
				}
			}
			return out, nil
		}
		if fatal := notAuthorized("listing "+string(o.cfg.Topics.Commands)+" end offsets", err); fatal != nil {
			o.halt(fatal)
			return nil, fatal
		}
		o.cfg.Logger.Warn("unable to list the commands' end offsets; the partitions wait", "attempt", attempt, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// lost is revoked for the partitions of a failed group session (franz-go
// calls it when a join, a sync or a heartbeat fails): until the group
// answers again the instance owns nothing because the group did not
// agree, not because it has nothing to own, and it is not ready.
func (o *ownership) lost(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
	o.assignedOnce.Store(false)
	o.revoked(ctx, cl, m)
}

// revoked stops every use of the partitions: their claims go, so the
// commands side ignores their records and the signals loop drops what it
// held.
func (o *ownership) revoked(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	parts := o.partitions(m)
	if len(parts) == 0 {
		return
	}
	for _, part := range parts {
		o.claims.drop(part)
	}
	o.cmds.RemoveConsumePartitions(map[string][]int32{string(o.cfg.Topics.Commands): parts})
	o.ev.PartitionsRevoked(PartitionsInfo{Partitions: parts})
}

// partitions returns the partition numbers m holds of any route's input,
// ascending. The balancer moves a number on every input at once; should a
// callback ever hold it for some inputs only, the number is claimed or
// dropped as a whole all the same.
func (o *ownership) partitions(m map[string][]int32) []int32 {
	var parts []int32
	for _, in := range o.cfg.Topics.Inputs() {
		parts = append(parts, m[string(in)]...)
	}
	slices.Sort(parts)
	return slices.Compact(parts)
}

// committedMeta reads, from the group's committed offsets, the highest
// event time each partition's previous owner decided and how far it had
// judged the commands. A leave with an earlier boundary may be late even
// if this instance never saw the signal, unless the previous owner judged
// it already. Every route's input carries the claim's metadata, each as of
// the cycle that last committed it; every one was true when committed and
// both values only grow, so the highest of each holds.
//
// It retries until it reads every partition, or ctx ends (its error then).
// Metadata it could not read must not pass for none: a claim starts its
// commands at the judged offset because the records of the commands an
// instance applied beyond it (before a kill, say) may never have been
// produced, and only a replay writes them again.
func (o *ownership) committedMeta(ctx context.Context) (map[int32]committedMeta, error) {
	wait := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		out, err := o.readMeta(ctx)
		if err == nil {
			return out, nil
		}
		o.cfg.Logger.Warn("unable to read the committed offsets metadata; its partitions wait", "attempt", attempt, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 2*time.Second)
	}
}

func (o *ownership) readMeta(ctx context.Context) (map[int32]committedMeta, error) {
	out := make(map[int32]committedMeta)
	var inputs []string
	for _, in := range o.cfg.Topics.Inputs() {
		inputs = append(inputs, string(in))
	}
	resp, err := o.adm.FetchOffsetsForTopics(ctx, o.cfg.Group, inputs...)
	if err != nil {
		return nil, err
	}
	for _, in := range inputs {
		for part, off := range resp[in] {
			if off.Err != nil {
				return nil, fmt.Errorf("%s partition %d: %w", in, part, off.Err)
			}
			if off.Metadata == "" {
				continue
			}
			m, err := parseMeta(off.Metadata)
			if err != nil {
				continue
			}
			if m.commandsID != "" && o.layout.Commands.ID != "" && m.commandsID != o.layout.Commands.ID {
				// Judged on a commands topic deleted since: its offsets
				// and records say nothing of this one's commands.
				m = committedMeta{eventNs: m.eventNs, changelogID: noChangelogID}
			}
			if old, seen := out[part]; seen {
				m = mergeMeta(old, m)
			}
			out[part] = m
		}
	}
	return out, nil
}

// mergeMeta merges the metadata two inputs carry for one partition, each
// as of the cycle that last committed it: every one was true when
// committed and the event time and the judged offset only grow, so the
// highest of each holds, with the layout of the newer; inputs that name
// other changelogs (one committed before the changelog changed) leave it
// unknown.
func mergeMeta(a, b committedMeta) committedMeta {
	newer := a
	if b.judged > a.judged || b.judged == a.judged && b.commandsParts > a.commandsParts {
		newer = b
	}
	newer.eventNs = max(a.eventNs, b.eventNs)
	if a.changelogID != b.changelogID {
		newer.changelogID, newer.changelogParts = noChangelogID, 0
	}
	return newer
}
