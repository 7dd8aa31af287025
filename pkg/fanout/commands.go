package fanout

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
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
//  1. restores, once per claim of a partition the store holds nothing of,
//     the partition's users from the changelog (handover.go), or else
//     recovers the late-leave windows earlier owners wrote to it
//     (recover.go);
//  2. applies every command to one indexed store batch, with the
//     partitions' checkpoints, and attaches recovered windows as their
//     episodes appear;
//  3. updates the gate for every changed user. The gate may run ahead of
//     the store: a crash before the batch commits replays the same
//     commands from the old checkpoint into the same state (application is
//     deterministic), so a signal dropped meanwhile stays dropped;
//  4. reads, per partition, how far the signals side may have decided
//     without these commands, which gives receipts and late-leave windows,
//     and stores them with the changelog records in the batch's outbox;
//  5. commits the batch (one fsync) and, once the sync is over, queues its
//     records for the signals loop and only then advances the applied
//     offsets that release held signals. The sync is waited for by a
//     second goroutine (see run) while this one goes on with the next
//     fetch, so a leave does not wait for the sync of the batch before it.
//
// applyFetched is steps 1 to 5 for records already fetched: what tests
// drive without a broker (commands_test.go, testdata/commands); without
// run's syncer it waits for the sync itself.
type applier struct {
	cfg      *Config
	cl       *kgo.Client // the commands consumer; nil in tests
	store    Store
	gate     *gate.Map
	claims   *claims
	outbox   *outbox
	recover  *recoverer
	handover *restorer // nil: claims are never restored from the changelog
	migrate  *migrator // nil: no claim has tails to re-publish (tests)
	refill   *refiller // nil: no claim refills the changelog (tests)
	// wake is signalled when claims wait to be prepared, so that a poll
	// with nothing to fetch does not keep them waiting; nil in tests.
	wake <-chan struct{}
	// listEnd lists a commands partition's end, for a claim prepared
	// before any of its commands was fetched; nil in tests.
	listEnd    func(ctx context.Context, part int32) (int64, error)
	ev         EventListener
	lim        *liveLimits // nil: Kafka's default for every topic (tests)
	partitions int32       // of both input topics
	kp         keyPartition
	// regate is the processor's pending regates (snapshot.go), nil in
	// tests; snap is the gate snapshot written every
	// Config.GateSnapshotInterval (path empty: none), lastSnap when it
	// was last written or tried and snapDirty whether a batch was applied
	// since. Owned by the applier's goroutine, but regate.
	regate    *regate
	snap      gateSnapshot
	lastSnap  time.Time
	snapDirty bool
	// snapWriting is closed once the snapshot write under way, on a
	// goroutine of its own, has ended; nil if none was started.
	// snapPrepared is closed once the memory of the next snapshot's copy
	// is prepared (gate.Map.PrepareSnapshot), by a goroutine of its own;
	// nil if none is being prepared.
	snapWriting, snapPrepared chan struct{}
	// gateAhead is set while the gate holds a batch the store has not
	// committed (updateGate runs before the commit): a gate snapshot taken
	// then would not equal the store. Owned by the applier's goroutine.
	gateAhead bool
	// steps times each batch's steps; its zero value times nothing.
	steps stepTimer
	// syncs takes each committed batch to the syncer (see run); nil, as
	// in tests that call applyFetched, the batch is published at once.
	syncs chan committed
	// through is, per claim, the offset after the last command this
	// goroutine applied: the claim's applied offset lags it while the
	// batch waits for its sync. Owned by the applier's goroutine.
	through map[*claim]int64
}

// committed is a batch committed but maybe not synced yet, with what to
// publish once it is durable.
type committed struct {
	syncing  *membership.Syncing
	items    []outboxItem
	advanced []claimOffset
	cmds     []appliedCmd
}

func isOffsetOutOfRange(err error) bool { return errors.Is(err, kerr.OffsetOutOfRange) }

// appliedCmd is the outcome of one command, kept until the batch commits.
type appliedCmd struct {
	c      *claim
	r      *kgo.Record
	cmd    topics.Command
	atNs   uint64
	change membership.Change
	// refused is a rejoin refused by rule C7: it changed nothing, but the
	// store remembers its identity, so the user's changelog record is
	// written again to carry it (see settle).
	refused bool
}

// run applies the fetched commands until ctx is done. A second goroutine,
// the syncer, waits for each batch's sync and only then publishes it
// (applier.publish), while this one goes on with the next fetch: a leave
// queued behind a batch whose sync is under way closes the gate without
// waiting for that sync. Nothing that needs a batch durable (its outbox
// records, the applied offsets that release held signals) happens before
// its sync; the next batch reads its writes, which Pebble makes visible
// before the sync, and a crash meanwhile loses both whole. run returns
// once every batch handed over is published or a sync failed.
func (a *applier) run(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := a.startSyncer(cancel)
	err := a.applyAll(ctx)
	if a.snapWriting != nil {
		// The snapshot at the stop must not race it: it would remove its
		// temporary file, or be renamed over by it.
		<-a.snapWriting
	}
	if a.snapPrepared != nil {
		<-a.snapPrepared // the snapshot at the stop takes what it prepared
	}
	if serr := stop(); serr != nil {
		return serr
	}
	return err
}

// startSyncer starts the syncer, which publishes every batch handed over
// once it is synced; after a failed sync it calls failed and publishes
// nothing more. stop, called once nothing is handed over any more, returns
// when every batch handed over is published, with the sync's error if one
// failed.
func (a *applier) startSyncer(failed func(error)) (stop func() error) {
	a.syncs = make(chan committed, syncQueue)
	synced := make(chan error, 1)
	go func() {
		var err error
		for c := range a.syncs {
			if err != nil {
				_ = c.syncing.Wait() // fails too: the store failed
				continue
			}
			if err = a.publish(c); err != nil {
				failed(err) // stop applying
			}
		}
		synced <- err
	}()
	return func() error {
		close(a.syncs)
		return <-synced
	}
}

// syncQueue bounds how many committed batches may wait for their sync:
// how far the gate and the store's visible state may run ahead of what is
// durable.
const syncQueue = 8

func (a *applier) applyAll(ctx context.Context) error {
	for {
		if err := a.prepareIdle(ctx); err != nil {
			return err
		}
		if a.refill != nil {
			if err := a.refill.due(ctx, a.through); err != nil {
				return err
			}
		}
		a.steps.start()
		fetches := a.poll(ctx)
		if ctx.Err() != nil || fetches.IsClientClosed() {
			return nil
		}
		a.steps.lap(stepWait)
		if err := a.fetchErrors(fetches); err != nil {
			return err
		}
		fetched := fetchedPartitions(fetches)
		a.steps.fetched(fetched)
		if err := a.applyFetched(ctx, fetched); err != nil {
			return err
		}
		a.snapDirty = a.snapDirty || len(fetched) > 0
		a.snapshotDue()
	}
}

// snapshotDue writes the gate snapshot when Config.GateSnapshotInterval
// has passed since the last one and commands were applied since: between
// two batches, the gate equals the store's visible state, which may run
// ahead of what is synced, so the label is lowered to the claims' applied
// offsets (see snapshot.go). Commands wait while the gate is copied (the
// gate takes no Set meanwhile: about 0.3-0.6 s per GiB of its table), not
// while the copy's memory is prepared nor while the copy is written,
// which goroutines of their own do. A write still under way when the next
// is due puts the next off by an interval; a failure is reported and
// retried an interval later; the previous snapshot stays.
func (a *applier) snapshotDue() {
	every := a.cfg.GateSnapshotInterval
	if a.snap.path == "" || every <= 0 || a.gateAhead || !a.snapDirty {
		return
	}
	if a.lastSnap.IsZero() {
		a.lastSnap = time.Now() // a start: the interval counts from the first batch
		return
	}
	if time.Since(a.lastSnap) < every {
		return
	}
	if a.snapWriting != nil {
		select {
		case <-a.snapWriting:
			a.snapWriting = nil
		default:
			a.lastSnap = time.Now()
			return // the last one is still being written
		}
	}
	// The copy's memory is faulted in off this goroutine first (it can
	// take longer than the copy); the snapshot is taken at the first batch
	// boundary after.
	if a.snapPrepared == nil {
		done := make(chan struct{})
		a.snapPrepared = done
		go func() {
			defer close(done)
			a.gate.PrepareSnapshot()
		}()
		return
	}
	select {
	case <-a.snapPrepared:
		a.snapPrepared = nil
	default:
		return
	}
	a.lastSnap, a.snapDirty = time.Now(), false
	f, info, err := a.snap.freeze(a.store, a.gate, func(cps map[int32]int64) {
		for _, c := range a.claims.all() {
			if o, ok := cps[c.partition]; ok {
				cps[c.partition] = min(o, c.applied.Load())
			}
		}
		if a.regate != nil {
			a.regate.lower(cps)
		}
	})
	if err != nil {
		info.Err, info.Running = err, true
		a.ev.SnapshotSaved(info)
		return
	}
	done := make(chan struct{})
	a.snapWriting = done
	go func() {
		defer close(done)
		info, err := a.snap.write(f, info)
		info.Err, info.Running = err, true
		a.ev.SnapshotSaved(info)
	}()
}

// snapshotWait is how long until a gate snapshot made due by commands
// applied since the last one is to be written (snapshotDue), 0 when none
// is pending.
func (a *applier) snapshotWait() time.Duration {
	every := a.cfg.GateSnapshotInterval
	if a.snap.path == "" || every <= 0 || !a.snapDirty || a.lastSnap.IsZero() {
		return 0
	}
	if a.snapPrepared != nil {
		// Check on the memory being prepared now and then, not in a loop.
		return max(every-time.Since(a.lastSnap), 20*time.Millisecond)
	}
	return max(every-time.Since(a.lastSnap), time.Millisecond)
}

// poll polls the commands, until records come, a claim waits to be
// prepared, or a gate snapshot is due.
func (a *applier) poll(ctx context.Context) kgo.Fetches {
	due := a.snapshotWait()
	if a.wake == nil && due <= 0 {
		return a.cl.PollFetches(ctx)
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if due > 0 {
		// A burst of commands and then none: the snapshot they made due
		// is written when its interval ends, not at the next batch.
		t := time.AfterFunc(due, cancel)
		defer t.Stop()
	}
	if a.wake == nil {
		return a.cl.PollFetches(pctx)
	}
	go func() {
		select {
		case <-a.wake:
			cancel()
		case <-pctx.Done():
		}
	}()
	return a.cl.PollFetches(pctx)
}

// prepareIdle prepares the claims that wait for it whose commands
// brought no record yet: a partition with no command left to read still
// has users to restore, or commands of its users in other partitions to
// re-publish; and it recovers the windows of claims that need nothing
// else.
func (a *applier) prepareIdle(ctx context.Context) error {
	var (
		cs   []*claim
		ends []int64
	)
	var recovering []*claim
	for _, c := range a.claims.all() {
		if c.prepared.Load() && !c.recovery.done {
			// A claim with nothing to restore is prepared at once, but
			// its windows are still to be recovered: a read of the
			// changelog to its end, which waits for any transaction
			// open on it (this processor's own cycle among them). Done
			// now, while the commands are idle, rather than by the
			// partition's first command, it stands between no leave
			// and the gate.
			recovering = append(recovering, c)
			continue
		}
		if c.prepared.Load() || a.listEnd == nil {
			continue
		}
		end, err := a.listEnd(ctx, c.partition)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if fatal := notAuthorized("listing the commands' end offsets", err); fatal != nil {
				return fatal
			}
			a.cfg.Logger.Warn("unable to list a commands partition's end; it waits", "partition", c.partition, "err", err)
			continue // the next poll wakes on a fetch, or tries again
		}
		cs, ends = append(cs, c), append(ends, end)
	}
	if err := a.recoverAll(ctx, recovering); err != nil {
		return err
	}
	for _, c := range recovering {
		if err := a.prepare(ctx, c); err != nil {
			return err
		}
	}
	return a.prepareAll(ctx, cs, ends)
}

// prepareAll prepares the claims cs, whose commands partitions end at
// ends as last seen: it restores those of them that wait for a restore
// from the changelog side by side (handoverAll), then prepares each.
func (a *applier) prepareAll(ctx context.Context, cs []*claim, ends []int64) error {
	var (
		restoring []*claim
		at        []int64
	)
	for i, c := range cs {
		if c.restore && !c.recovery.handedOver && a.handover != nil {
			restoring, at = append(restoring, c), append(at, ends[i])
		}
	}
	if err := a.handoverAll(ctx, restoring, at); err != nil {
		return err
	}
	if err := a.recoverAll(ctx, cs); err != nil {
		return err
	}
	for _, c := range cs {
		if err := a.prepare(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// handoverAll restores the claims cs from the changelog, or leaves each
// to replay its commands (handover.go), at most Config.RestoreParallel
// at once, each on a goroutine of its own that handoverAll joins: until
// it returns, the applier applies nothing. ends are the claims' commands
// ends. It returns the first store failure.
func (a *applier) handoverAll(ctx context.Context, cs []*claim, ends []int64) error {
	if len(cs) == 0 {
		return nil
	}
	for _, c := range cs {
		c.recovery.handedOver = true
	}
	errs := make([]error, len(cs))
	sideBySide(ctx, len(cs), a.cfg.RestoreParallel, func(i int) {
		cs[i].recovery.restored, errs[i] = a.handover.handover(ctx, cs[i], ends[i])
	})
	return errors.Join(errs...)
}

// recoverAll recovers the windows of the claims cs that still need it,
// side by side, at most Config.RestoreParallel at once (recover.go).
func (a *applier) recoverAll(ctx context.Context, cs []*claim) error {
	jobs := make([]recoveryJob, 0, len(cs))
	for _, c := range cs {
		jobs = append(jobs, recoveryJob{part: c.partition, rec: &c.recovery, single: c.readSingle, note: c.note})
	}
	return a.recover.recoverAll(ctx, jobs, a.cfg.RestoreParallel)
}

// prepare does, once per claim, what it needs before its commands are
// applied, after prepareAll tried to restore its users from the changelog
// when its store holds none of them (handover.go): recovers the late-leave
// windows earlier owners wrote (recover.go), unless a restore did; then
// re-publishes its users' commands that other partitions still hold under
// an older partition count (migrate.go). Until it is done, the partition
// does not catch up.
func (a *applier) prepare(ctx context.Context, c *claim) error {
	restored := c.recovery.restored
	if !c.recovery.done {
		if err := a.recover.recover(ctx, c.partition, &c.recovery, c.readSingle, c.note); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	if len(c.tails) > 0 && a.migrate != nil {
		if err := a.migrate.migrate(ctx, c, restored); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
	}
	c.prepared.Store(true)
	return nil
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
			a.cfg.Logger.Warn("commands fetch error", "topic", t, "partition", p, "err", err)
		}
	})
	return fatal
}

// applyFetched applies the records of fetched commands partitions.
func (a *applier) applyFetched(ctx context.Context, fetched []kgo.FetchTopicPartition) error {
	var (
		cs   []*claim
		ends []int64
	)
	for _, fp := range fetched {
		c := a.claims.get(fp.Partition)
		if c != nil && (!c.prepared.Load() || !c.recovery.done) {
			cs, ends = append(cs, c), append(ends, fp.HighWatermark)
		}
	}
	if err := a.prepareAll(ctx, cs, ends); err != nil {
		return err
	}
	if ctx.Err() != nil {
		// The run ends, perhaps in the middle of a restore: nothing is
		// applied, not even a checkpoint at 0 for a claim whose restore
		// was cut short, which would make the store seem to hold its
		// partition and the next start replay it instead of restoring.
		return nil
	}
	a.steps.lap(stepRecover)
	b := a.store.NewBatch()
	defer b.Close()
	var (
		cmds     []appliedCmd
		items    []outboxItem
		advanced []claimOffset
	)
	topic := string(a.cfg.Topics.Commands)
	for _, fp := range fetched {
		c := a.claims.get(fp.Partition)
		if c == nil {
			continue // not ours (any more): its next owner applies it
		}
		// The claim's position, not the store's checkpoint: a claim may
		// start below the checkpoint on purpose, to write the changelog
		// records of commands applied before (see ownership.assigned).
		// Applied again, each is a duplicate.
		next := max(c.applied.Load(), a.through[c])
		for _, r := range fp.Records {
			c.raiseEpoch(r.LeaderEpoch) // a leader of this epoch or later leads the partition now
			if r.Offset < next {
				continue // fetched again after re-assignment
			}
			next = r.Offset + 1
			if r.Attrs.IsControl() {
				continue // a transaction marker: nothing to apply, but step over it
			}
			cmd, out, err := a.one(ctx, b, c, r)
			if err != nil {
				return err
			}
			if cmd != nil {
				cmds = append(cmds, *cmd)
				if err := c.recovery.attachPending(b, cmd.cmd.UserID); err != nil {
					return err
				}
			}
			items = append(items, out...)
		}
		cp, ok, err := a.store.Checkpoint(topic, c.partition)
		if err != nil {
			return err
		}
		if !ok || next > cp {
			if err := b.SetCheckpoint(topic, c.partition, next); err != nil {
				return err
			}
		}
		advanced = append(advanced, claimOffset{c, next})
	}
	if len(advanced) == 0 {
		return nil
	}
	a.steps.lap(stepApply)
	a.gateAhead = true
	if err := a.updateGate(cmds); err != nil {
		return err
	}
	a.steps.lap(stepGate)
	changelog, err := a.settle(ctx, b, cmds)
	if err != nil {
		return err
	}
	items = append(items, changelog...)
	if err := storeOutbox(b, items); err != nil {
		return err
	}
	a.steps.lap(stepSettle)
	syncing, err := b.CommitNoSyncWait()
	if err != nil {
		return fmt.Errorf("unable to commit commands batch: %w", err)
	}
	a.steps.lap(stepCommit)
	// The gate equals the store's visible state again; if the sync fails,
	// Run ends with the failure and writes no snapshot.
	a.gateAhead = false
	a.remember(advanced)
	c := committed{syncing: syncing, items: items, advanced: advanced, cmds: cmds}
	if a.syncs == nil {
		return a.publish(c)
	}
	a.syncs <- c // the syncer takes every batch, even after a failure
	return nil
}

// handRefill hands a committed batch of changelog refill records
// (refill.go) to the syncer, or publishes it when there is none.
func (a *applier) handRefill(syncing *membership.Syncing, items []outboxItem) error {
	c := committed{syncing: syncing, items: items}
	if a.syncs == nil {
		return a.publish(c)
	}
	a.syncs <- c
	return nil
}

// remember notes how far this goroutine applied each claim, forgetting
// claims that are gone.
func (a *applier) remember(advanced []claimOffset) {
	if a.through == nil {
		a.through = make(map[*claim]int64)
	}
	for c := range a.through {
		if a.claims.get(c.partition) != c {
			delete(a.through, c)
		}
	}
	for _, ca := range advanced {
		a.through[ca.c] = ca.next
	}
}

// publish waits for c's sync, then queues its records for the signals loop
// and only then advances the applied offsets that release held signals.
func (a *applier) publish(c committed) error {
	start := time.Now()
	if err := c.syncing.Wait(); err != nil {
		return fmt.Errorf("unable to commit commands batch: %w", err)
	}
	a.steps.observe(stepSync, time.Since(start))
	// The records first, then the offsets: the signals loop reads a
	// claim's applied offset before it takes the outbox, and commits that
	// offset as judged with what it took (loop.drainOutbox). Read the other
	// way round, a cycle could say the commands were judged without their
	// changelog records, and a kill before the next cycle lost them.
	a.outbox.add(c.items...)
	for _, ca := range c.advanced {
		ca.c.applied.Store(ca.next)
		if a.regate != nil && ca.c.regateUntil > 0 {
			a.regate.reached(ca.c.partition, ca.next)
		}
	}
	for _, ac := range c.cmds {
		if ac.refused {
			continue // counted as a dead letter
		}
		result := "noop"
		switch {
		case ac.change.Changed:
			result = "changed"
		case ac.change.Duplicate:
			result = "duplicate"
		}
		a.ev.CommandApplied(CommandInfo{Op: ac.cmd.Op, Result: result})
	}
	return nil
}

// fetchedPartitions lists the partitions of fetches that brought records.
func fetchedPartitions(fetches kgo.Fetches) []kgo.FetchTopicPartition {
	var out []kgo.FetchTopicPartition
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		if len(fp.Records) > 0 {
			out = append(out, fp)
		}
	})
	return out
}

type claimOffset struct {
	c    *claim
	next int64
}

// one applies the command in r by its verdict (rules.go), returning what
// it did (nil when the record is not a command the store takes) and the
// outbox entries it needs. Only a store failure is an error; bad input
// becomes a DLQ entry.
func (a *applier) one(ctx context.Context, b *membership.Batch, c *claim, r *kgo.Record) (*appliedCmd, []outboxItem, error) {
	var lim limits
	if a.lim != nil {
		lim = a.lim.now()
	}
	dlq := func(reason topics.Reason, err error) []outboxItem {
		dl := deadLetterRecord(a.cfg.Topics.DLQ, lim.deadLetterBudget(a.cfg.Topics.DLQ), r, reason, err)
		a.ev.DeadLetter(DeadLetterInfo{Source: SourceCommands, Reason: topics.Reason(headerValue(dl, topics.HeaderReason)),
			Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Err: err})
		return []outboxItem{{e: outboxFrom(dl, -1)}}
	}
	rules := commandRules{partitions: a.partitions, skew: a.cfg.MaxFutureSkew}
	v := rules.decide(a.kp, r, lim)
	if v.act == actDeadLetter && v.reason == topics.ReasonRecordTooLarge && a.lim != nil {
		// Not dead-lettered against a limit read before it was fetched:
		// the topic's may have been raised since. When the limits cannot
		// be read, the last read stands.
		lim, _ = a.lim.fresh(ctx)
		v = rules.decide(a.kp, r, lim)
	}
	switch v.act {
	case actDeadLetter:
		return nil, dlq(v.reason, v.err), nil
	case actRepublish:
		a.ev.Misrouted(MisroutedInfo{Source: SourceCommands, Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Want: v.want})
		return nil, []outboxItem{{e: outboxFrom(republishCommand(r, v.want), v.want)}}, nil
	}
	cmd, at := v.cmd, v.atNs
	if through, ok := c.reflected[cmd.UserID]; ok && r.Offset <= through {
		return nil, nil, nil // in the state restored from the user's changelog record (handover.go)
	}
	op := membership.OpLeave
	if cmd.Op == topics.Rejoin {
		op = membership.OpRejoin
	}
	change, err := b.Apply(membership.Command{Op: op, UserID: cmd.UserID, AtNs: at, RequestID: cmd.RequestID})
	if reason, ok := storeRefusal(err); ok {
		return &appliedCmd{c: c, r: r, cmd: cmd, atNs: at, change: change, refused: true}, dlq(reason, err), nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("unable to apply %s of user %d (commands partition %d offset %d): %w",
			cmd.Op, cmd.UserID, r.Partition, r.Offset, err)
	}
	return &appliedCmd{c: c, r: r, cmd: cmd, atNs: at, change: change}, nil, nil
}

// updateGate installs, for every user a command changed, the episodes the
// user has after the last of this batch's commands; and for every user a
// command below its claim's regateUntil touched (changed or not: to the
// store such a command is most often a duplicate), the episodes the store
// holds after it, which the gate loaded from an older snapshot may lack. A
// refused command's change holds no state to take.
func (a *applier) updateGate(cmds []appliedCmd) error {
	last := make(map[uint64]int, len(cmds))
	for i, ac := range cmds {
		if ac.change.Changed || !ac.refused && ac.r.Offset < ac.c.regateUntil {
			last[ac.cmd.UserID] = i
		}
	}
	var eps []membership.Episode
	var geps []gate.Episode
	for user, i := range last {
		eps = cmds[i].change.After.Episodes(eps[:0])
		geps = gateEpisodes(geps[:0], eps)
		if err := a.gate.Set(user, geps); err != nil {
			return fmt.Errorf("unable to gate user %d: %w", user, err)
		}
	}
	return nil
}

// settle runs after the gate holds the batch's commands. For each command
// it reads how far the signals side may have decided without it, giving
// the receipt (enforced from signals offset deciding onward) and, for a
// leave that opened an episode or moved one's boundary back after signals
// of the user in it were forwarded, the late-leave window. It returns the
// changelog records, but none for a command an earlier owner of the
// partition had judged (below judgedBelow): its record is in the changelog
// already, and one written from the state of a replay that has not caught
// up would hide windows and episodes that record has.
func (a *applier) settle(ctx context.Context, b *membership.Batch, cmds []appliedCmd) ([]outboxItem, error) {
	now := a.cfg.Now().UnixNano()
	out := make([]outboxItem, 0, len(cmds))
	// last is, per user, the batch's last command of the user: its
	// change's After holds the user's episodes as the whole batch leaves
	// them (settle writes notes and windows, never episodes), which spares
	// recordLate a read of the user.
	last := make(map[uint64]int, len(cmds))
	for i := range cmds {
		last[cmds[i].cmd.UserID] = i
	}
	for i := range cmds {
		ac := &cmds[i]
		rc := topics.Receipt{
			AppliedAtNs:      now,
			SignalsPartition: ac.c.partition,
			SignalsOffset:    ac.c.deciding[0].Load(),
		}
		if len(ac.c.deciding) > 1 {
			rc.Inputs = make([]topics.InputOffset, len(ac.c.deciding))
			for i, in := range a.cfg.Topics.Inputs() {
				rc.Inputs[i] = topics.InputOffset{Topic: string(in), Offset: ac.c.deciding[i].Load()}
			}
			rc.SignalsOffset = rc.Inputs[0].Offset
		}
		if ac.change.Changed && ac.cmd.Op == topics.Leave {
			if err := a.recordLate(ctx, b, ac, cmds[last[ac.cmd.UserID]].change.After); err != nil {
				return nil, err
			}
		}
		note := topics.Note{Command: commandRef(a.cfg.Topics.Commands, a.partitions, ac), Receipt: &rc}
		if !ac.refused {
			if err := b.SetNote(ac.cmd.UserID, topics.AppendNote(nil, note)); err != nil {
				return nil, err
			}
		}
		if ac.r.Offset < ac.c.judgedBelow {
			continue
		}
		// One read of the user gives the record and its restore header.
		m, dump, err := b.MemberDump(appendRestoreHeader(nil, a.partitions, ac.r.Offset), ac.cmd.UserID)
		if err != nil {
			return nil, err
		}
		if ac.refused && len(m.Note) > 0 {
			// The record restates the user as the last command that
			// took effect left it; only its restore header is new.
			if note, err = topics.DecodeNote(m.Note); err != nil {
				return nil, fmt.Errorf("note of user %d: %w", ac.cmd.UserID, err)
			}
		}
		cl := changelogOf(m, note)
		out = append(out, outboxItem{owner: &ac.c.revoked, e: outboxEntry{
			Topic:       string(a.cfg.Topics.Changelog),
			Partition:   -1,
			Key:         topics.AppendUserID(nil, ac.cmd.UserID),
			Value:       topics.AppendMemberRecord(nil, cl),
			Headers:     []outboxHeader{{Key: topics.HeaderRestore, Value: dump}},
			TimestampNs: ac.r.Timestamp.UnixNano(),
		}})
	}
	return out, nil
}

// recordLate records the late-leave window of the leave ac, if it is late: see
// claim.lateWindow. The episode is taken from m, the user as the whole
// batch leaves it, so that a rejoin later in the batch bounds the window.
func (a *applier) recordLate(ctx context.Context, b *membership.Batch, ac *appliedCmd, m membership.Member) error {
	user, left := ac.cmd.UserID, ac.change.After.LeftAtNs
	end, ok := episodeEnd(m, left)
	if !ok {
		return nil // a later leave of the batch moved the boundary before it: recorded there
	}
	var fr fwdResult
	if int64(left) > ac.c.inheritedMaxNs {
		to := int64(math.MaxInt64)
		if end != membership.OpenEnd {
			to = int64(end)
		}
		fr.latest, fr.found, fr.complete = ac.c.fwd.latest(ctx, user, int64(left), to)
	}
	w, late := ac.c.lateWindow(ac.r.Offset, left, end, fr)
	if !late {
		return nil
	}
	a.ev.LateLeave(LateLeaveInfo{Partition: ac.c.partition, Offset: ac.r.Offset, UserID: user,
		Window: topics.LateLeave{LeftAtNs: w.LeftAtNs, ForwardedThroughNs: w.ForwardedThroughNs, Exact: w.Exact}})
	return b.RecordLateLeave(user, w)
}

func commandRef(t topics.Topic, parts int32, ac *appliedCmd) *topics.CommandRef {
	return &topics.CommandRef{
		Op:         ac.cmd.Op.String(),
		AtNs:       ac.atNs,
		Topic:      string(t),
		Partitions: parts,
		Partition:  ac.r.Partition,
		Offset:     ac.r.Offset,
		RequestID:  ac.cmd.RequestID,
		Changed:    ac.change.Changed,
		Duplicate:  ac.change.Duplicate,
	}
}
