package fanout

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cohortgate/cohortgate/pkg/gate"
	"github.com/cohortgate/cohortgate/pkg/membership"
)

// A new owner whose store holds nothing of a partition (a new instance, a
// replaced disk) would replay the partition's commands from offset 0
// before forwarding any of its signals: minutes for millions of commands.
// Instead it restores the partition's users from the changelog, the way a
// Kafka Streams task restores a store from its changelog, and consumes
// the commands from where the previous owners had judged them.
//
// Each changelog record carries, in its topics.HeaderRestore header, the
// offset of the command it follows and the user's whole stored state as
// pkg/membership dumps it: state, history, late-leave windows, note, and
// the identity of every command applied to the user or refused. The
// identities are what make the restore exact: without them a command
// delivered again after the handover (a leave re-published after the
// user's rejoin, say) would be applied as a new one and reopen a closed
// episode, which a replay never does (rule C5). A refused rejoin writes a
// record too (commands.go), so that its identity is in the changelog.
//
// Why the restored state equals a replay's. Let J be the judged offset of
// the partition's offset metadata: every command below J that the store
// took (applied, a duplicate, or refused) had its changelog record
// committed with that metadata (claim.meta). So each user's latest record
// follows a command at or after the user's last command below J, and says
// which one (offset o): it is the user's stored state after every command
// of the user through o, because application is deterministic and every
// record is written from the store of an owner that applied all of them.
// The new owner imports that state and applies, from J on, only the
// user's commands after o (claim.reflected): a replay applies the same
// commands to the same state. Late-leave windows, which are not a
// function of the commands, are recovered from every record read and
// attached as a replay's recovery attaches them (recover.go). Receipts in
// the notes are those of the owner that applied the command, where a
// replay's would restate its own clock.
//
// The changelog must hold every user's latest record, or a user would be
// restored as if it had none. The restore is used only when that holds as
// far as the processor can see, and otherwise the partition is replayed
// from offset 0 and the HandoverInfo says why:
//
//   - the offset metadata names the changelog's topic ID, and it is the
//     changelog's now (claim.changelogID: not deleted and created again
//     since the partition's first command);
//   - its cleanup.policy is compact alone (delete would drop records) and
//     no partition read starts above offset 0 (DeleteRecords);
//   - it is read read_committed to its last stable offset, so every record
//     that committed with the metadata is read;
//   - the commands partition reaches the judged offset (it was not
//     created again since);
//   - every user's latest record has a restore header that decodes: a
//     tombstone, a record written by an older version, or one trimmed to
//     fit the topic (history_omitted) has none;
//   - every user with a leave below the judged offset has a record
//     (checkLeavers): compaction removes a tombstone too, after
//     delete.retention.ms, and then nothing in the changelog names the
//     user, who must not be restored as one who never left. This reads
//     the commands partition below the judged offset once more, after the
//     changelog; only a leave of a user without a record is decoded.
//
// Until the restore is done the partition's applied offset stays at 0, so
// its signals wait (fail closed); the state is imported, with the
// commands checkpoint at J, all or nothing (table files ingested
// together, membership.Import), before the gate learns it. A restore cut
// short (the run ends, a crash) imports nothing: the next owner, or this
// one on the same data dir, finds no state of the partition and restores
// it again. The applier runs the restores of the claims that wait for
// one side by side, at most Config.RestoreParallel at once (each reads
// with a reader client of its own and writes on restoreWorkers
// goroutines), and their headers bounded by Config.RestoreMemory: a
// restore waits for its estimate before it reads, takes more as it reads
// while the budget has it, and otherwise spills the headers beyond what
// it took, sorted, to files of the store's (restorespill.go); it applies
// no partition's commands meanwhile. Different partitions have
// different users, so their imports never overlap; each restore's import
// commit, gate and windows are done one restore at a time (finish).

// restoreWorkers is how many goroutines decode and write a restore's
// users, each a range of them: the two cores a processor is sized for.
const restoreWorkers = 2

// restorePart is one restore worker's range of users and what it made of
// them.
type restorePart struct {
	users userRange // the users whose latest headers it takes
	ip    *membership.ImportPart

	// recorded lists every user of the range with a record, ascending;
	// missing counts those whose latest record has no restore header.
	recorded []uint64
	missing  int
	// The users with episodes, gated[i]'s episodes being
	// eps[ends[i-1]:ends[i]], for the gate once the import committed.
	gated []uint64
	ends  []int
	eps   []gate.Episode
	// reflected lists the users whose records follow a command at or
	// after the judged offset.
	reflected []reflectedUser

	why error // the first header that did not decode: replay instead
	err error // a store failure
}

type reflectedUser struct {
	user   uint64
	offset int64
}

// write takes, from a merge of hs's entries, the latest header of each
// user of p's range, decodes it and puts it into p's import part,
// keeping the episodes and the reflected users. After a header that does
// not decode (why) it puts no more, but goes on listing the users and
// counting those without a header; it stops at a store failure (err), or
// when ctx ends (why).
//
// parts is the commands' partition count now: a record that follows a
// command applied under another count reflects no command of this
// partition's log.
func (p *restorePart) write(ctx context.Context, hs *restoreHeaders, parts int32, judged int64, withoutIdentities bool) {
	cs, err := hs.cursors(p.users.from)
	if err != nil {
		p.err = err
		return
	}
	defer func() {
		for _, c := range cs {
			c.close()
		}
	}()
	var (
		d    membership.Dump
		meps []membership.Episode
	)
	errPut := errors.New("a store failure")
	err = mergeRange(ctx, cs, p.users, func(e *latestHeader) error {
		p.recorded = append(p.recorded, e.user)
		if !e.has {
			p.missing++
			return nil
		}
		if p.why != nil {
			return nil
		}
		follows, raw, err := parseRestoreHeader(e.h)
		if err == nil {
			err = d.Decode(raw)
		}
		if err == nil && d.Member.UserID != e.user {
			err = fmt.Errorf("restore header of user %d under a record of user %d", d.Member.UserID, e.user)
		}
		if err != nil {
			p.why = err
			return nil
		}
		if withoutIdentities {
			d = d.WithoutIdentities()
		}
		if err := p.ip.Put(d); err != nil {
			p.err = err
			return errPut
		}
		if follows.parts == parts && follows.offset >= judged {
			p.reflected = append(p.reflected, reflectedUser{e.user, follows.offset})
		}
		if meps = d.Member.Episodes(meps[:0]); len(meps) > 0 {
			p.gated = append(p.gated, e.user)
			p.eps = gateEpisodes(p.eps, meps)
			p.ends = append(p.ends, len(p.eps))
		}
		return nil
	})
	switch {
	case err == nil, errors.Is(err, errPut):
	case ctx.Err() != nil:
		p.why = ctx.Err()
	default:
		p.err = err // a spill file that could not be read
	}
}

// recordedUsers returns the users the parts recorded, ascending (the
// parts' ranges are), users of them, and drops the parts' lists.
func recordedUsers(parts []restorePart, users int) []uint64 {
	all := make([]uint64, 0, users)
	for i := range parts {
		all = append(all, parts[i].recorded...)
		parts[i].recorded = nil
	}
	return all
}

// gate sets p's users' episodes in g.
func (p *restorePart) gate(g *gate.Map) error {
	from := 0
	for i, user := range p.gated {
		if err := g.Set(user, p.eps[from:p.ends[i]]); err != nil {
			return fmt.Errorf("unable to gate user %d: %w", user, err)
		}
		from = p.ends[i]
	}
	return nil
}

// leaveScanner lists the users who left in a commands partition: the
// changelogReader. A windowSource that is none (a test's) is not checked.
type leaveScanner interface {
	leavers(ctx context.Context, q leaversRequest) ([]uint64, error)
}

// checkLeavers returns why the users recorded (ascending, every user
// with a record) cannot be c's state: a user with a leave below the
// judged offset that has no record among them. Such a leave was applied,
// so its
// user had a record; a record that is gone was removed by compaction
// after a tombstone (a record with the user's key and no value, which a
// purge job or an operator wrote), or deleted. Restored without it, the
// user would be one who never left. The commands are the source of
// truth: the partition is replayed instead.
func (a *restorer) checkLeavers(ctx context.Context, c *claim, recorded []uint64) (why, err error) {
	sc, ok := a.rec.src.(leaveScanner)
	if !ok {
		return nil, nil
	}
	// Only the leaves of users without a record are decoded: most
	// users have one, and decoding each leave cost more than the
	// lookup.
	rctx, cancel := context.WithTimeout(ctx, recoveryTimeout)
	defer cancel()
	users, err := sc.leavers(rctx, leaversRequest{topic: string(a.cfg.Topics.Commands), part: c.partition,
		parts: a.layoutParts, below: c.judgedBelow, skew: a.cfg.MaxFutureSkew, recorded: recorded, progress: &c.progress})
	if err != nil {
		return fmt.Errorf("unable to list the users who left below the judged offset %d: %w", c.judgedBelow, err), nil
	}
	if unrecorded := len(users); unrecorded > 0 {
		return fmt.Errorf("%d users who left (a leave below the judged offset %d) have no changelog record: "+
			"removed by compaction after a tombstone, or deleted", unrecorded, c.judgedBelow), nil
	}
	return nil, nil
}

// restorer restores claims from the changelog for the commands side,
// which owns it.
type restorer struct {
	cfg *Config
	// changelogParts and layoutParts are the changelog's and the
	// commands' partition counts now: a restore reads one changelog
	// partition only when the claim's users' records have been written
	// under one count all along, equal to the commands' (readsAll).
	changelogParts, layoutParts int32
	store                       Store
	gate                        *gate.Map
	rec                         *recoverer // its source reads the changelog
	ev                          EventListener
	// seek moves the commands consumer of part to offset; nil in tests.
	seek func(part int32, offset int64)
	// finish is held by a restore from its import's commit to its
	// windows' recovery: the store's batches and ingests of restores
	// side by side go one at a time.
	finish sync.Mutex
	// budget bounds the headers the restores side by side hold
	// (Config.RestoreMemory); nil: no bound (tests).
	budget *memBudget
	// spillLimit, when above 0, is the headers a restore holds before
	// it spills, whatever it took of budget: tests make it tiny.
	spillLimit int64
}

// handover restores claim c from the changelog if it can, and otherwise
// leaves it to replay its commands from offset 0; restored says which.
// end is the commands partition's high watermark as last seen. Only a
// store failure is an error.
func (a *restorer) handover(ctx context.Context, c *claim, end int64) (restored bool, err error) {
	start := time.Now()
	info := HandoverInfo{Partition: c.partition, Source: "changelog", From: c.judgedBelow}
	c.progress.report = a.ev.RestoreProgress
	c.progress.begin(c.partition)
	why, err := a.restore(ctx, c, end, &info)
	c.progress.end()
	if err != nil {
		return false, err
	}
	if why != nil {
		if ctx.Err() != nil {
			return false, nil
		}
		a.ev.Handover(HandoverInfo{Partition: c.partition, Source: "replay", Reason: why})
		return false, nil
	}
	info.Took = time.Since(start)
	a.ev.Handover(info)
	return true, nil
}

// restore restores claim c from the changelog, returning why not when it
// did not (and changed nothing then).
func (a *restorer) restore(ctx context.Context, c *claim, end int64, info *HandoverInfo) (why, err error) {
	switch {
	case end < c.judgedBelow:
		// The commands topic was deleted and created again, or lost
		// records: the changelog reflects commands it no longer has.
		return fmt.Errorf("the commands partition ends at offset %d, below the judged offset %d", end, c.judgedBelow), nil
	case a.cfg.Testing.HandoverReplay:
		return errors.New("configured to replay (HandoverReplay)"), nil
	case a.rec.skip:
		return errors.New("late-leave window recovery is off (UnsafeNoWindowRecovery)"), nil
	case c.changelogID == noChangelogID:
		return errors.New("the offset metadata does not name the changelog that holds the records of every " +
			"command judged (written by an older version, or the changelog was created again since)"), nil
	}
	// The headers a read keeps are bounded across restores side by side:
	// it takes about one changelog record per command judged before it
	// reads, more as it reads while the budget has it, and spills those
	// beyond to files when it has not.
	n := c.judgedBelow * restoreBytesPerRecord
	if a.budget != nil {
		n = min(n, a.budget.capacity)
	}
	release, err := a.budget.acquire(ctx, n, func(held int64) {
		c.progress.setPhase(fmt.Sprintf("waiting for memory: restores side by side hold about %d MiB of "+
			"their headers, the bound is %d MiB", held>>20, a.budget.capacity>>20))
	})
	if err != nil {
		return fmt.Errorf("waiting for memory to read the changelog: %w", err), nil
	}
	var more int64 // taken of the budget while reading
	giveBack := sync.OnceFunc(func() {
		release()
		if more > 0 {
			a.budget.give(more)
		}
	})
	defer giveBack() // after view.done below: the headers are dropped first
	to := spillTo{partition: c.partition}
	switch {
	case a.spillLimit > 0:
		to.limit, to.fs, to.dir = a.spillLimit, a.store.FS(), a.store.TempDir()
	case a.budget != nil:
		to.limit, to.fs, to.dir = max(n, 1), a.store.FS(), a.store.TempDir()
		to.more = func(m int64) bool {
			if !a.budget.more(m) {
				return false
			}
			more += m
			return true
		}
	}
	start := time.Now()
	rctx, cancel := context.WithTimeout(ctx, recoveryTimeout)
	view, err := a.rec.src.read(rctx, readRequest{part: c.partition, latest: true, single: c.readSingle, note: c.note,
		progress: &c.progress, spill: to})
	cancel()
	if err != nil {
		return fmt.Errorf("unable to read the changelog: %w", err), nil
	}
	defer view.done() // on every return: no sort outlives the restore, its memory is given back, its files removed
	info.Read = time.Since(start)
	if view.restore.failed != nil {
		return nil, fmt.Errorf("unable to spill the changelog's restore headers: %w", view.restore.failed)
	}
	if view.lossy != nil {
		return view.lossy, nil
	}

	if view.restore.err != nil {
		return view.restore.err, nil
	}
	hs := view.restore
	if err := hs.prepare(ctx, func(done, total int64, finished bool) {
		switch {
		case done == 0 && !finished:
			c.progress.reading(phaseMerge, total, -1)
		case finished:
			c.progress.advance(done, 0)
			c.progress.reportNow()
		default:
			c.progress.advance(done, 0)
		}
	}); err != nil {
		if ctx.Err() != nil {
			return ctx.Err(), nil
		}
		return nil, fmt.Errorf("unable to merge the changelog's spilled restore headers: %w", err)
	}
	// Merging the headers, decoding them and writing the tables is most
	// of the work after the read: each of restoreWorkers goroutines does
	// it for a range of users, into a part of the import of its own,
	// joined before the import commits.
	c.progress.setPhase(phaseWrite)
	im := a.store.NewImport()
	defer im.Close()
	bounds := hs.split(max(1, min(restoreWorkers, hs.n/restoreChunk)))
	parts := make([]restorePart, len(bounds)+1)
	var wg sync.WaitGroup
	for i := range parts {
		p := &parts[i]
		p.users.all = i == len(bounds)
		if i > 0 {
			p.users.from = bounds[i-1]
		}
		if !p.users.all {
			p.users.to = bounds[i]
		}
		p.ip = im.Part()
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.write(ctx, hs, a.layoutParts, c.judgedBelow, a.cfg.Testing.UnsafeRestoreWithoutIdentities)
		}()
	}
	wg.Wait()
	missing, users := 0, 0
	for i := range parts {
		if p := &parts[i]; p.err != nil {
			return nil, p.err
		}
		missing += parts[i].missing
		users += len(parts[i].recorded)
	}
	if missing > 0 {
		return fmt.Errorf("%d users' latest changelog records carry no restore header (written by an older "+
			"version, trimmed to fit with history_omitted, or tombstones)", missing), nil
	}
	for i := range parts {
		if p := &parts[i]; p.why != nil {
			return fmt.Errorf("a user's restore header does not decode: %w", p.why), nil
		}
	}
	info.Written = time.Since(start) - info.Read
	// The headers are in the import now: the leavers' check and the gate
	// go without them, and other restores may take their memory.
	hs.done()
	giveBack()
	checking := time.Now()
	if why, err := a.checkLeavers(ctx, c, recordedUsers(parts, users)); why != nil || err != nil {
		return why, err
	}
	info.Checked = time.Since(checking)
	c.progress.setPhase(phaseGate)
	a.finish.Lock()
	defer a.finish.Unlock()
	if err := im.SetCheckpoint(string(a.cfg.Topics.Commands), c.partition, c.judgedBelow); err != nil {
		return nil, err
	}
	if err := im.Commit(); err != nil {
		return nil, fmt.Errorf("unable to store the users restored from the changelog: %w", err)
	}
	info.Ingested = time.Since(start) - info.Read - info.Checked - info.Written
	reflected := make(map[uint64]int64)
	gated := 0
	for i := range parts {
		gated += len(parts[i].gated)
	}
	a.gate.Grow(gated)
	for i := range parts {
		p := &parts[i]
		for _, r := range p.reflected {
			reflected[r.user] = r.offset
		}
		if err := p.gate(a.gate); err != nil {
			return nil, err
		}
	}
	info.Gated = time.Since(start) - info.Read - info.Checked - info.Written - info.Ingested
	c.recovery.done = true
	if err := a.rec.attachAll(view.windows, &c.recovery); err != nil {
		return nil, err
	}
	c.reflected = reflected
	info.Users, info.Records, info.Windows, info.Reflected = users, view.stats.records, view.stats.windows, len(reflected)
	info.Spilled = hs.spilled()
	// The signals wait for applied to pass the commands' end, so it
	// moves only now that the store and the gate hold the users.
	c.applied.Store(c.judgedBelow)
	if a.seek != nil {
		a.seek(c.partition, c.judgedBelow)
	}
	return nil, nil
}
