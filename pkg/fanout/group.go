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
	// changelogID is the changelog's topic ID as found at start.
	changelogID string
	store       Store
	claims      *claims
	cmds        *kgo.Client // the commands consumer
	// leaderEpoch is the commands partition's leader epoch in the commands
	// client's metadata, -1 if not loaded: the kgo client keeps the newest
	// it saw (an older one from a lagging broker is refused, up to five
	// times in a row).
	leaderEpoch func(partition int32) int32
	adm         groupAdmin
	ev          EventListener
	halt        func(error)
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
	o.ev.PartitionsAssigned(PartitionsInfo{Partitions: slices.Sorted(maps.Keys(start))})
}

// claim makes the claims of parts not claimed yet and returns where each
// one's commands are read from; nothing when ctx ends first.
func (o *ownership) claim(ctx context.Context, parts []int32) map[int32]kgo.Offset {
	if len(parts) == 0 {
		return nil
	}
	routes := len(o.cfg.Topics.Routes) + 1
	seen, err := o.committedMeta(ctx)
	if err != nil {
		return nil // stopping: the partitions stay unclaimed, their signals held
	}
	skipTo := o.unsafeCommandEnds(ctx)
	now := o.cfg.Now().UnixNano()
	start := make(map[int32]kgo.Offset, len(parts))
	for _, part := range parts {
		if o.claims.get(part) != nil {
			continue // claimed with another input's partition
		}
		checkpoint, hasCheckpoint, err := o.store.Checkpoint(string(o.cfg.Topics.Commands), part)
		if err != nil {
			o.halt(fmt.Errorf("unable to read the commands checkpoint of partition %d: %w", part, err))
			return nil
		}
		next := checkpoint
		if end, ok := skipTo[part]; ok && end > next {
			o.cfg.Logger.Warn("UNSAFE: skipping commands", "partition", part, "from", next, "to", end)
			next = end
		}
		// No metadata: no cycle committed the changelog records of any
		// command of the partition (judged 0), however far the store
		// applied them, since a record whose claim was revoked is dropped
		// for the next owner to write; this instance may be that owner.
		m, inherited := seen[part]
		if m.judged < next && !o.cfg.UnsafeSkipCommands {
			next = m.judged
		}
		c := newClaim(part, routes, now, next)
		c.floor = checkpoint
		if o.leaderEpoch != nil {
			c.raiseEpoch(o.leaderEpoch(part))
		}
		c.changelogID = o.changelogID
		if inherited {
			c.maxEventNs.Store(m.eventNs)
			c.inheritedMaxNs = m.eventNs
			c.judgedBelow = m.judged
			if m.judged > 0 && m.changelogID != o.changelogID {
				// Commands were judged with their records in another
				// changelog (deleted and created again since), or in one
				// not named: this one may lack users.
				c.changelogID = noChangelogID
			}
		}
		// UnsafeSkipCommands's control must forget the leaves: no restore.
		c.restore = !hasCheckpoint && c.judgedBelow > 0 && !o.cfg.UnsafeSkipCommands
		o.claims.put(c)
		start[part] = kgo.NoResetOffset().At(next)
	}
	return start
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

// committedMeta is what a partition's previous owner left in its offset
// metadata; see claim.meta.
type committedMeta struct {
	eventNs, judged int64
	changelogID     string
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
			if ts, judged, id, err := parseMeta(off.Metadata); err == nil {
				m, seen := out[part]
				if !seen {
					m = committedMeta{ts, judged, id}
				}
				if m.changelogID != id {
					// Inputs disagree (one committed before the changelog
					// changed): the changelog is not known.
					id = noChangelogID
				}
				out[part] = committedMeta{max(m.eventNs, ts), max(m.judged, judged), id}
			}
		}
	}
	return out, nil
}

// unsafeCommandEnds returns the commands' end offsets when
// UnsafeSkipCommands is set, and nothing otherwise.
func (o *ownership) unsafeCommandEnds(ctx context.Context) map[int32]int64 {
	out := make(map[int32]int64)
	if !o.cfg.UnsafeSkipCommands {
		return out
	}
	ends, err := o.adm.ListEndOffsets(ctx, string(o.cfg.Topics.Commands))
	if err != nil {
		o.halt(fmt.Errorf("unable to list commands end offsets: %w", err))
		return out
	}
	for part, off := range ends[string(o.cfg.Topics.Commands)] {
		if off.Err == nil {
			out[part] = off.Offset
		}
	}
	return out
}
