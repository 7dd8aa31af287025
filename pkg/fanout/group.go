package fanout

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// marksLimit bounds the end-offset observations kept per partition: at the
// default AlignInterval, ten seconds of them. Older ones are never needed:
// see watermarks.
const marksLimit = 1024

func (p *Processor) newSession() (session, error) {
	topic := string(p.cfg.Topics.Signals)
	opts := append(p.clientOpts("cohortgate-signals"),
		kgo.ConsumerGroup(p.cfg.Group),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(p.assigned),
		kgo.OnPartitionsRevoked(p.revoked),
		kgo.OnPartitionsLost(p.revoked),
	)
	if p.cfg.SessionTimeout > 0 {
		opts = append(opts, kgo.SessionTimeout(p.cfg.SessionTimeout))
	}
	// How long the group waits for its members to rejoin a rebalance. A
	// member that crashed during one is removed only when it expires, and
	// until then no partition moves: franz-go's default, a minute, is that
	// long a stall of every partition's signals. The loop rejoins within
	// one cycle (its end bounded by endTimeout), so a little more suffices.
	opts = append(opts, kgo.RebalanceTimeout(p.endTimeout()+5*time.Second))
	if p.cfg.ExactlyOnce {
		return newTxnSession(topic, p.endTimeout(), append(opts, kgo.TransactionalID(p.cfg.TransactionalID)))
	}
	return newPlainSession(topic, append(opts, kgo.DisableAutoCommit()))
}

// endTimeout bounds the end of a transaction: the session timeout
// (franz-go's default, 45s, when unset), at least 10s. By then a member
// that could not heartbeat has lost its partitions anyway.
func (p *Processor) endTimeout() time.Duration {
	d := p.cfg.SessionTimeout
	if d <= 0 {
		d = 45 * time.Second
	}
	return max(d, 10*time.Second)
}

// assigned claims the new signals partitions and starts consuming their
// commands from the store's checkpoints, or from where the previous owner
// had judged them when that is earlier: the commands this instance applied
// beyond it (before a crash, say) may not have had their changelog
// records produced, and applying them again is harmless (each is a
// duplicate) and writes the records anew. Their signals wait (fail
// closed) until the commands are applied through an end offset observed
// after this moment.
func (p *Processor) assigned(ctx context.Context, _ *kgo.Client, m map[string][]int32) {
	parts := m[string(p.cfg.Topics.Signals)]
	if len(parts) == 0 {
		return
	}
	seen := p.committedEventTimes(ctx)
	skipTo := p.unsafeCommandEnds(ctx)
	now := p.cfg.Now().UnixNano()
	start := make(map[int32]kgo.Offset, len(parts))
	for _, part := range parts {
		next, _, err := p.store.Checkpoint(string(p.cfg.Topics.Commands), part)
		if err != nil {
			p.halt(fmt.Errorf("unable to read the commands checkpoint of partition %d: %w", part, err))
			return
		}
		if end, ok := skipTo[part]; ok && end > next {
			p.log.Warn("UNSAFE: skipping commands", "partition", part, "from", next, "to", end)
			next = end
		}
		m, inherited := seen[part]
		if inherited && m.judged < next && !p.cfg.UnsafeSkipCommands {
			next = m.judged
		}
		c := newClaim(part, now, next, marksLimit)
		if inherited {
			c.maxEventNs.Store(m.eventNs)
			c.inheritedMaxNs = m.eventNs
			c.judgedBelow = m.judged
		}
		p.claims.put(c)
		start[part] = kgo.NoResetOffset().At(next)
	}
	p.cmds.AddConsumePartitions(map[string]map[int32]kgo.Offset{string(p.cfg.Topics.Commands): start})
	p.log.Info("partitions assigned; catching up with their commands before forwarding", "partitions", parts)
}

// revoked stops every use of the partitions: their claims go, so the
// commands side ignores their records and the main loop drops what it held.
func (p *Processor) revoked(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	parts := m[string(p.cfg.Topics.Signals)]
	if len(parts) == 0 {
		return
	}
	for _, part := range parts {
		p.claims.drop(part)
		p.m.openTxn.DeleteLabelValues(strconv.Itoa(int(part)))
	}
	p.cmds.RemoveConsumePartitions(map[string][]int32{string(p.cfg.Topics.Commands): parts})
	p.log.Info("partitions released", "partitions", parts)
}

// committedMeta is what a partition's previous owner left in its offset
// metadata; see claim.meta.
type committedMeta struct{ eventNs, judged int64 }

// committedEventTimes reads, from the group's committed offsets, the
// highest event time each partition's previous owner decided and how far
// it had applied the commands. A leave with an earlier boundary is late
// even if this instance never saw the signal, unless the previous owner
// applied it (and judged it) already. Unreadable metadata only weakens
// late-leave detection, so errors are logged, not fatal.
func (p *Processor) committedEventTimes(ctx context.Context) map[int32]committedMeta {
	out := make(map[int32]committedMeta)
	resp, err := p.adm.FetchOffsetsForTopics(ctx, p.cfg.Group, string(p.cfg.Topics.Signals))
	if err != nil {
		p.log.Warn("unable to read committed offsets metadata", "err", err)
		return out
	}
	for part, o := range resp[string(p.cfg.Topics.Signals)] {
		if o.Err != nil || o.Metadata == "" {
			continue
		}
		if ts, judged, err := parseMeta(o.Metadata); err == nil {
			out[part] = committedMeta{ts, judged}
		}
	}
	return out
}

// unsafeCommandEnds returns the commands' end offsets when
// UnsafeSkipCommands is set, and nothing otherwise.
func (p *Processor) unsafeCommandEnds(ctx context.Context) map[int32]int64 {
	out := make(map[int32]int64)
	if !p.cfg.UnsafeSkipCommands {
		return out
	}
	ends, err := p.adm.ListEndOffsets(ctx, string(p.cfg.Topics.Commands))
	if err != nil {
		p.halt(fmt.Errorf("unable to list commands end offsets: %w", err))
		return out
	}
	for part, o := range ends[string(p.cfg.Topics.Commands)] {
		if o.Err == nil {
			out[part] = o.Offset
		}
	}
	return out
}
