package fanout

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/pkg/gate"
	"github.com/cohortgate/cohortgate/pkg/membership"
	"github.com/cohortgate/cohortgate/topics"
)

// applier is the commands side: one goroutine that consumes the commands
// partitions this instance owns, from the store's checkpoints, and applies
// them to the store and the gate. It is the only writer of both.
//
// For each fetch it:
//  1. applies every command to one indexed store batch, with the
//     partitions' checkpoints;
//  2. updates the gate for every changed user. The gate may run ahead of
//     the store: a crash before the batch commits replays the same
//     commands from the old checkpoint into the same state (application is
//     deterministic), so a signal dropped meanwhile stays dropped;
//  3. reads, per partition, how far the signals side may have decided
//     without these commands, which gives receipts and late-leave windows,
//     and stores them with the changelog records in the batch's outbox;
//  4. commits the batch (one fsync) and only then advances the applied
//     offsets that release held signals.
type applier struct {
	p  *Processor
	cl *kgo.Client
	kp keyPartition
}

// applied is the outcome of one command, kept until the batch commits.
type appliedCmd struct {
	c      *claim
	r      *kgo.Record
	cmd    topics.Command
	atNs   uint64
	change membership.Change
}

func (a *applier) run(ctx context.Context) error {
	for {
		fetches := a.cl.PollFetches(ctx)
		if ctx.Err() != nil || fetches.IsClientClosed() {
			return nil
		}
		if err := a.fetchErrors(fetches); err != nil {
			return err
		}
		if err := a.apply(fetches); err != nil {
			return err
		}
	}
}

// fetchErrors turns a lost position on a commands partition into a halt:
// skipping commands would forward signals of users who left.
func (a *applier) fetchErrors(fetches kgo.Fetches) error {
	var fatal error
	fetches.EachError(func(t string, p int32, err error) {
		var loss *kgo.ErrDataLoss
		switch {
		case errors.Is(err, context.Canceled):
		case errors.As(err, &loss), isOffsetOutOfRange(err):
			fatal = &CommandsGapError{Topic: t, Partition: p, Next: -1, End: -1, Err: err}
		case isAuthzFailure(err):
			fatal = notAuthorized(fmt.Sprintf("fetching %s[%d]", t, p), err)
		default:
			a.p.log.Warn("commands fetch error", "topic", t, "partition", p, "err", err)
		}
	})
	return fatal
}

func (a *applier) apply(fetches kgo.Fetches) error {
	b := a.p.store.NewBatch()
	defer b.Close()
	var (
		cmds     []appliedCmd
		items    []pendingOutbox
		advanced []claimOffset
	)
	var applyErr error
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		c := a.p.claims.get(fp.Partition)
		if c == nil || applyErr != nil || len(fp.Records) == 0 {
			return // not ours (any more): its next owner applies it
		}
		// The store's checkpoint is the truth: a claim made while an
		// earlier claim's batch was committing may start below it.
		next := c.applied.Load()
		cp, ok, err := a.p.store.Checkpoint(string(a.p.cfg.Topics.Commands), c.partition)
		if err != nil {
			applyErr = err
			return
		}
		if ok && cp > next {
			next = cp
		}
		for _, r := range fp.Records {
			if r.Offset < next {
				continue // applied already, fetched again after re-assignment
			}
			next = r.Offset + 1
			if r.Attrs.IsControl() {
				continue // a transaction marker: nothing to apply, but step over it
			}
			cmd, out, err := a.one(b, c, r)
			if err != nil {
				applyErr = err
				return
			}
			if cmd != nil {
				cmds = append(cmds, *cmd)
			}
			items = append(items, out...)
		}
		if err := b.SetCheckpoint(string(a.p.cfg.Topics.Commands), c.partition, next); err != nil {
			applyErr = err
			return
		}
		advanced = append(advanced, claimOffset{c, next})
	})
	if applyErr != nil {
		return applyErr
	}
	if len(advanced) == 0 {
		return nil
	}
	if err := a.updateGate(cmds); err != nil {
		return err
	}
	changelog, err := a.settle(b, cmds)
	if err != nil {
		return err
	}
	items = append(items, changelog...)
	stored, err := storeOutbox(b, items)
	if err != nil {
		return err
	}
	if err := b.Commit(); err != nil {
		return fmt.Errorf("unable to commit commands batch: %w", err)
	}
	for _, ca := range advanced {
		ca.c.applied.Store(ca.next)
	}
	a.p.outbox.add(stored...)
	a.count(cmds)
	return nil
}

type claimOffset struct {
	c    *claim
	next int64
}

// pendingOutbox is an outbox entry not yet stored.
type pendingOutbox = outboxEntry

// one applies the command in r, returning what it did (nil when the record
// is not a command) and the outbox entries it needs. Only a store failure
// is an error; bad input becomes a DLQ entry.
func (a *applier) one(b *membership.Batch, c *claim, r *kgo.Record) (*appliedCmd, []pendingOutbox, error) {
	dlq := func(reason topics.Reason, err error) []pendingOutbox {
		a.p.m.dlq.WithLabelValues(sourceCmds, string(reason)).Inc()
		return []pendingOutbox{outboxFrom(deadLetterRecord(a.p.cfg.Topics.DLQ, r, reason, err), -1)}
	}
	if _, err := topics.ParseUserID(r.Key); err != nil {
		return nil, dlq(topics.ReasonOf(err), err), nil
	}
	if want := a.kp.of(r.Key, a.p.signalPartitions); want != r.Partition {
		a.p.m.misrouted.WithLabelValues(sourceCmds).Inc()
		a.p.warnMisrouted(r, want)
		return nil, []pendingOutbox{outboxFrom(republishRecord(r, want), want)}, nil
	}
	cmd, err := topics.DecodeCommand(r.Key, r.Value)
	if err != nil {
		return nil, dlq(topics.ReasonOf(err), err), nil
	}
	at := cmd.AtNs
	if !cmd.HasAt {
		at = uint64(r.Timestamp.UnixNano())
	}
	op := membership.OpLeave
	if cmd.Op == topics.Rejoin {
		op = membership.OpRejoin
	}
	change, err := b.Apply(membership.Command{Op: op, UserID: cmd.UserID, AtNs: at, RequestID: cmd.RequestID})
	switch {
	case errors.Is(err, membership.ErrRejoinBeforeLeave):
		return nil, dlq(topics.ReasonRejoinBeforeLeave, err), nil
	case err != nil:
		return nil, nil, fmt.Errorf("unable to apply %s of user %d (commands partition %d offset %d): %w",
			cmd.Op, cmd.UserID, r.Partition, r.Offset, err)
	}
	return &appliedCmd{c: c, r: r, cmd: cmd, atNs: at, change: change}, nil, nil
}

// updateGate installs, for every user a command changed, the episodes the
// user has after the last of this batch's commands.
func (a *applier) updateGate(cmds []appliedCmd) error {
	last := make(map[uint64]int, len(cmds))
	for i, ac := range cmds {
		if ac.change.Changed {
			last[ac.cmd.UserID] = i
		}
	}
	var eps []membership.Episode
	var geps []gate.Episode
	for user, i := range last {
		eps = cmds[i].change.After.Episodes(eps[:0])
		geps = gateEpisodes(geps[:0], eps)
		if err := a.p.gate.Set(user, geps); err != nil {
			return fmt.Errorf("unable to gate user %d: %w", user, err)
		}
	}
	return nil
}

// gateEpisodes appends eps, converted, to dst.
func gateEpisodes(dst []gate.Episode, eps []membership.Episode) []gate.Episode {
	for _, e := range eps {
		dst = append(dst, gate.Episode{LeftAtNs: e.LeftAtNs, RejoinedAtNs: e.RejoinedAtNs})
	}
	return dst
}

// settle runs after the gate holds the batch's commands. For each command
// it reads how far the signals side may have decided without it, giving
// the receipt (enforced from signals offset deciding onward) and, for a
// leave whose boundary lies at or before an event time already asked
// about, the late-leave window. It returns the changelog records.
func (a *applier) settle(b *membership.Batch, cmds []appliedCmd) ([]pendingOutbox, error) {
	now := a.p.cfg.Now().UnixNano()
	out := make([]pendingOutbox, 0, len(cmds))
	for i := range cmds {
		ac := &cmds[i]
		rc := topics.Receipt{
			AppliedAtNs:      now,
			SignalsPartition: ac.c.partition,
			SignalsOffset:    ac.c.deciding.Load(),
		}
		if ac.change.Changed && ac.cmd.Op == topics.Leave {
			left := ac.change.After.LeftAtNs
			if seen, late := ac.c.late(ac.r.Offset, left); late {
				a.late(ac, left, seen)
				if err := b.RecordLateLeave(ac.cmd.UserID, membership.LateLeave{LeftAtNs: left, ThroughNs: seen}); err != nil {
					return nil, err
				}
			}
		}
		note := topics.Note{Command: commandRef(a.p.cfg.Topics.Commands, ac), Receipt: &rc}
		if err := b.SetNote(ac.cmd.UserID, topics.AppendNote(nil, note)); err != nil {
			return nil, err
		}
		m, err := b.Member(ac.cmd.UserID)
		if err != nil {
			return nil, err
		}
		cl := changelogOf(m, note)
		out = append(out, outboxEntry{
			Topic:       string(a.p.cfg.Topics.Changelog),
			Partition:   -1,
			Key:         topics.AppendUserID(nil, ac.cmd.UserID),
			Value:       topics.AppendMemberRecord(nil, cl),
			TimestampNs: ac.r.Timestamp.UnixNano(),
		})
	}
	return out, nil
}

func (a *applier) late(ac *appliedCmd, left, seen uint64) {
	a.p.m.lateLeaves.Inc()
	a.p.log.Warn("late leave: signals at or after the boundary may have been forwarded",
		"partition", ac.c.partition, "offset", ac.r.Offset,
		"left_at_ns", left, "forwarded_through_ns", seen,
		"window", time.Duration(seen-left).String())
}

func commandRef(t topics.Topic, ac *appliedCmd) *topics.CommandRef {
	return &topics.CommandRef{
		Op:        ac.cmd.Op.String(),
		AtNs:      ac.atNs,
		Topic:     string(t),
		Partition: ac.r.Partition,
		Offset:    ac.r.Offset,
		RequestID: ac.cmd.RequestID,
		Changed:   ac.change.Changed,
	}
}

func (a *applier) count(cmds []appliedCmd) {
	for _, ac := range cmds {
		result := "noop"
		if ac.change.Changed {
			result = "changed"
		}
		a.p.m.commands.WithLabelValues(ac.cmd.Op.String(), result).Inc()
	}
}
