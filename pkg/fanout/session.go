package fanout

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// session is the signals side's consumer-group member: it consumes signals
// and produces what they become, in cycles. A cycle begins, produces, and
// ends (see Outcome). With ExactlyOnce a cycle is a Kafka transaction
// (txnSession); without, its offsets are committed after its output is
// acknowledged (plainSession).
//
// A session is used by the signals loop only; group callbacks run on the
// client's goroutines.
type session interface {
	client() *kgo.Client
	poll(ctx context.Context, max int) kgo.Fetches
	begin() error
	// counted wraps promise so that a failure counts against the cycle
	// (end then does not commit); produce takes only such promises. Wrap a
	// long-lived promise once: produce itself allocates nothing per record.
	counted(promise func(*kgo.Record, error)) countedPromise
	produce(ctx context.Context, r *kgo.Record, promise countedPromise)
	// end flushes what the cycle produced and, unless a produce failed
	// or an output is no longer the topic the run found, commits the
	// offsets planCommit makes of pos (by input topic and partition). The
	// error says why the outcome is not Committed or Aborted, or why a
	// cycle with no failed produce was aborted.
	end(ctx context.Context, pos map[string]map[int32]position) (Outcome, error)
	// committed is what the group has committed of the inputs, as far as
	// the session knows: where an abort rewinds to.
	committed() map[string]map[int32]kgo.EpochOffset
	allowRebalance()
	close()
}

// position is what the signals loop wants committed for one partition of
// one input.
type position struct {
	held bool            // at is the first undecided record; commit it instead of the poll head
	at   kgo.EpochOffset // valid when held
	meta string          // offset metadata: see claim.meta
	// refresh asks for the metadata to be committed even when no record of
	// the partition was polled in the cycle (at its committed offset): a
	// partition without new signals still applies commands, and its next
	// owner (or this instance's next start) must know how far they were
	// judged, or it reads them all again.
	refresh bool
	// uncommitted says the group had no committed offset for the
	// partition when the claim's offsets were fetched: a refresh without
	// a committed offset commits offset 0, at or below where consuming
	// starts (an offset below the log's start reads from its start, as
	// no commit does).
	uncommitted bool
}

// planned is what a cycle commits for one partition of one input.
type planned struct {
	at      kgo.EpochOffset
	meta    string
	hasMeta bool // false for a partition without a position (its lane is gone): franz-go's metadata stays
}

// planCommit is what a cycle commits of one input, the same for both kinds
// of session: for each partition polled in the cycle (uncommitted: one past its last
// polled record, which also steps over transaction markers), that offset,
// or, for a partition whose position is held, its first undecided record,
// so that held signals are fetched again after a crash; and for a
// partition not polled whose metadata asks for a refresh, its committed
// offset again, if it has one, or 0 if the group has none
// (position.uncommitted). Every entry carries its position's metadata.
func planCommit(uncommitted, committed map[int32]kgo.EpochOffset, pos map[int32]position) map[int32]planned {
	plan := make(map[int32]planned, len(uncommitted))
	for part, at := range uncommitted {
		ps, ok := pos[part]
		if ps.held {
			at = ps.at
		}
		plan[part] = planned{at: at, meta: ps.meta, hasMeta: ok}
	}
	for part, ps := range pos {
		if _, polled := plan[part]; polled || !ps.refresh {
			continue
		}
		if c, ok := committed[part]; ok {
			plan[part] = planned{at: c, meta: ps.meta, hasMeta: true}
		} else if ps.uncommitted {
			plan[part] = planned{at: kgo.EpochOffset{Epoch: -1, Offset: 0}, meta: ps.meta, hasMeta: true}
		}
	}
	return plan
}

// failures counts produce errors of the current cycle.
type failures struct{ n atomic.Int64 }

// countedPromise is a produce promise that counts its failure in a
// session's failures; only failures.wrap makes one, so no record can be
// produced with a promise that does not count.
type countedPromise struct{ fn func(*kgo.Record, error) }

func (f *failures) wrap(promise func(*kgo.Record, error)) countedPromise {
	return countedPromise{func(r *kgo.Record, err error) {
		if err != nil {
			f.n.Add(1)
		}
		promise(r, err)
	}}
}

// txnSession forwards in Kafka transactions through franz-go's
// GroupTransactSession (KIP-447: zombies are fenced by group generation).
type txnSession struct {
	s      *kgo.GroupTransactSession
	group  string // the consumer group, whose offsets heal reads
	inputs []string
	failed failures
	// endTimeout bounds the flush before an end, and
	// GroupTransactSession.End with endFirstTry. End waits for a forced heartbeat; when the member's
	// session has expired meanwhile (the process was stopped), franz-go's
	// group loop instead waits for AllowRebalance, which only comes
	// after End: without a bound the two wait for each other forever.
	// Past End's bound, or when End fails without a definite answer (the
	// coordinator moving), the transaction is ended for sure and its
	// outcome learned (heal), for as long as the run goes on and
	// endTimeout past its end; only a fenced producer or a definite
	// error then replaces the session.
	endTimeout time.Duration
	// run is the run's context: heal retries until it ends (see heal).
	run context.Context
	// check, when set, is asked before a commit whether the outputs are
	// the topics the run found (outputsCheck): if not, the cycle aborts.
	check func(context.Context) error
	// learned are offsets franz-go's view of what is committed does not
	// have: those of a healed end (heal) that found the transaction
	// committed, and those a committed plan added or rewrote. An abort
	// must not rewind behind them, and a heal compares the group's
	// offsets with them (committed).
	learned map[string]map[int32]kgo.EpochOffset
}

// newTxnSession makes a session of the run whose context is run.
func newTxnSession(run context.Context, group string, inputs []string, endTimeout time.Duration, opts []kgo.Opt) (*txnSession, error) {
	s, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		return nil, fmt.Errorf("unable to create transactional session: %w", err)
	}
	return &txnSession{s: s, group: group, inputs: inputs, endTimeout: endTimeout, run: run}, nil
}

func (t *txnSession) client() *kgo.Client { return t.s.Client() }

func (t *txnSession) poll(ctx context.Context, max int) kgo.Fetches {
	return t.s.PollRecords(ctx, max)
}

func (t *txnSession) begin() error { return t.s.Begin() }

func (t *txnSession) counted(promise func(*kgo.Record, error)) countedPromise {
	return t.failed.wrap(promise)
}

func (t *txnSession) produce(ctx context.Context, r *kgo.Record, promise countedPromise) {
	t.s.Produce(ctx, r, promise.fn)
}

// end flushes before ending: GroupTransactSession.End(TryCommit) aborts on
// a rebalance but not on failed produces, and would commit the input
// offsets of output that never landed. Counting failures after our own
// flush closes that gap.
func (t *txnSession) end(ctx context.Context, pos map[string]map[int32]position) (Outcome, error) {
	defer t.failed.n.Store(0)
	flushing := time.Now()
	// The flush is bounded as End is: records that no broker takes
	// (leaders or in-sync replicas away) would otherwise hold the cycle
	// for as long as the fault lasts, and franz-go's producer may keep
	// retrying them after the brokers are back. Past the bound nothing
	// of the cycle can have committed (its offsets were never sent), so
	// it is aborted in place, as a plain exactly-once client's End bound
	// does, keeping the session and its partitions; only an abort that
	// cannot be made replaces the session.
	fctx, fcancel := context.WithTimeout(ctx, t.endTimeout)
	err := t.s.Client().Flush(fctx)
	fcancel()
	if err != nil {
		if ctx.Err() != nil {
			return Unknown, fmt.Errorf("unable to flush transaction: %w", err)
		}
		aborting := time.Now()
		actx, done := t.healContext(ctx)
		aerr := t.abort(actx)
		done()
		if aerr != nil {
			return Unknown, fmt.Errorf("unable to flush transaction within %v: %w; then unable to abort it: %v", t.endTimeout, err, aerr)
		}
		return Aborted, fmt.Errorf("unable to flush transaction within %v: %w; aborted it in place in %v",
			t.endTimeout, err, time.Since(aborting).Round(time.Millisecond))
	}
	cl := t.s.Client()
	uncommitted, committed := cl.UncommittedOffsets(), t.committed()
	plans := make(map[string]map[int32]planned, len(t.inputs))
	for _, in := range t.inputs {
		plans[in] = planCommit(uncommitted[in], committed[in], pos[in])
	}
	ctx = kgo.PreTxnCommitFnContext(ctx, func(req *kmsg.TxnOffsetCommitRequest) error {
		for _, in := range t.inputs {
			applyPlan(req, in, plans[in])
		}
		return nil
	})
	commit := t.failed.n.Load() == 0
	var vetoed error
	if commit && t.check != nil {
		if vetoed = t.check(ctx); vetoed != nil {
			commit = false
		}
	}
	before := t.committed()
	started := time.Now()
	endCtx, cancel := context.WithTimeout(ctx, min(t.endTimeout, endFirstTry))
	defer cancel()
	done, err := t.s.End(endCtx, kgo.TransactionEndTry(commit))
	switch {
	case err != nil && unconfirmed(err):
		// The end's outcome is unconfirmed (the coordinator moved, a
		// request timed out): end it for sure and learn it from the
		// group's offsets, keeping the session and its partitions. The
		// error says how long each took: where a broker fault's stall
		// goes.
		ended := time.Now()
		out, herr := t.heal(ctx, plans, uncommitted, before)
		r := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
		flushed, took, healed := r(started.Sub(flushing)), r(ended.Sub(started)), r(time.Since(ended))
		if herr != nil {
			return Unknown, fmt.Errorf("unable to end transaction (flushed in %v, then %v ending): %w; then unable to learn its outcome (for %v): %v", flushed, took, err, healed, herr)
		}
		return out, fmt.Errorf("%w: ending the transaction failed after %v (flushed in %v before) (%v); its outcome, %v, was read from the group's offsets in %v", errHealed, took, flushed, err, out, healed)
	case err != nil:
		return Unknown, fmt.Errorf("unable to end transaction: %w", err)
	case !done:
		return Aborted, vetoed
	}
	// franz-go knows only the offsets it planned itself: a partition the
	// plan added (metadata refreshed for commands alone, at offset 0 when
	// the group had none) is committed without its knowing, and a later
	// heal must compare the group's offsets with it.
	t.learn(plans)
	return Committed, nil
}

// applyPlan makes the TxnOffsetCommit franz-go is about to send for topic
// commit exactly plan: franz-go's offsets for the partitions it knows,
// rewritten where the plan says otherwise, and the partitions it does not
// know added.
func applyPlan(req *kmsg.TxnOffsetCommitRequest, topic string, plan map[int32]planned) {
	ti := -1
	for i := range req.Topics {
		if req.Topics[i].Topic == topic {
			ti = i
		}
	}
	if ti < 0 {
		if len(plan) == 0 {
			return
		}
		req.Topics = append(req.Topics, kmsg.TxnOffsetCommitRequestTopic{Topic: topic})
		ti = len(req.Topics) - 1
	}
	t := &req.Topics[ti]
	seen := make(map[int32]bool, len(t.Partitions))
	for j := range t.Partitions {
		p := &t.Partitions[j]
		seen[p.Partition] = true
		if pl, ok := plan[p.Partition]; ok {
			p.Offset, p.LeaderEpoch = pl.at.Offset, pl.at.Epoch
			if pl.hasMeta {
				p.Metadata = kmsg.StringPtr(pl.meta)
			}
		}
	}
	for part, pl := range plan {
		if seen[part] {
			continue
		}
		p := kmsg.NewTxnOffsetCommitRequestTopicPartition()
		p.Partition, p.Offset, p.LeaderEpoch, p.Metadata = part, pl.at.Offset, pl.at.Epoch, kmsg.StringPtr(pl.meta)
		t.Partitions = append(t.Partitions, p)
	}
}

func (t *txnSession) allowRebalance() { t.s.AllowRebalance() }

// committed is what the group has committed as far as this session knows:
// franz-go's view, raised to what a healed end learned. Offsets only move
// forward while a partition is owned, so the greater one is the newer.
func (t *txnSession) committed() map[string]map[int32]kgo.EpochOffset {
	c := t.s.Client().CommittedOffsets()
	if c == nil {
		c = make(map[string]map[int32]kgo.EpochOffset)
	}
	for topic, parts := range t.learned {
		for p, at := range parts {
			if cur, ok := c[topic][p]; ok && cur.Offset >= at.Offset {
				continue
			}
			if c[topic] == nil {
				c[topic] = make(map[int32]kgo.EpochOffset)
			}
			c[topic][p] = at
		}
	}
	return c
}

// close leaves the group. It allows the rebalance first: after an End that
// timed out, franz-go's group loop may be waiting for it, and Close would
// wait for the group loop.
func (t *txnSession) close() { t.s.CloseAllowingRebalance() }

// plainSession forwards at least once: offsets are committed only after
// everything produced in the cycle is acknowledged.
type plainSession struct {
	cl     *kgo.Client
	inputs []string
	failed failures
	check  func(context.Context) error // see txnSession.check
}

func newPlainSession(inputs []string, opts []kgo.Opt) (*plainSession, error) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("unable to create consumer: %w", err)
	}
	return &plainSession{cl: cl, inputs: inputs}, nil
}

func (p *plainSession) client() *kgo.Client { return p.cl }

func (p *plainSession) poll(ctx context.Context, max int) kgo.Fetches {
	return p.cl.PollRecords(ctx, max)
}

func (p *plainSession) begin() error { return nil }

func (p *plainSession) counted(promise func(*kgo.Record, error)) countedPromise {
	return p.failed.wrap(promise)
}

func (p *plainSession) produce(ctx context.Context, r *kgo.Record, promise countedPromise) {
	p.cl.Produce(ctx, r, promise.fn)
}

func (p *plainSession) end(ctx context.Context, pos map[string]map[int32]position) (Outcome, error) {
	defer p.failed.n.Store(0)
	if err := p.cl.Flush(ctx); err != nil {
		return Unknown, fmt.Errorf("unable to flush: %w", err)
	}
	if p.failed.n.Load() > 0 {
		return Aborted, nil
	}
	if p.check != nil {
		if err := p.check(ctx); err != nil {
			return Aborted, err
		}
	}
	uncommitted, committed := p.cl.UncommittedOffsets(), p.cl.CommittedOffsets()
	plans := make(map[string]map[int32]planned, len(p.inputs))
	offsets := make(map[string]map[int32]kgo.EpochOffset, len(p.inputs))
	for _, in := range p.inputs {
		plan := planCommit(uncommitted[in], committed[in], pos[in])
		if len(plan) == 0 {
			continue
		}
		plans[in] = plan
		offsets[in] = make(map[int32]kgo.EpochOffset, len(plan))
		for part, pl := range plan {
			offsets[in][part] = pl.at
		}
	}
	if len(offsets) == 0 {
		return Committed, nil
	}
	ctx = kgo.PreCommitFnContext(ctx, func(req *kmsg.OffsetCommitRequest) error {
		for i := range req.Topics {
			plan := plans[req.Topics[i].Topic]
			for j := range req.Topics[i].Partitions {
				part := &req.Topics[i].Partitions[j]
				if pl, ok := plan[part.Partition]; ok && pl.hasMeta {
					part.Metadata = kmsg.StringPtr(pl.meta)
				}
			}
		}
		return nil
	})
	var commitErr error
	p.cl.CommitOffsetsSync(ctx, offsets,
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			commitErr = err
			if err == nil {
				commitErr = offsetCommitError(resp)
			}
		})
	if commitErr != nil {
		return OutputOnly, fmt.Errorf("offsets not committed: %w", commitErr)
	}
	return Committed, nil
}

func (p *plainSession) allowRebalance() { p.cl.AllowRebalance() }
func (p *plainSession) close()          { p.cl.Close() }

func (p *plainSession) committed() map[string]map[int32]kgo.EpochOffset {
	return p.cl.CommittedOffsets()
}

func offsetCommitError(resp *kmsg.OffsetCommitResponse) error {
	if resp == nil {
		return nil
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return fmt.Errorf("topic %s partition %d: %w", t.Topic, p.Partition, err)
			}
		}
	}
	return nil
}

// errReplaceSession asks Run to close the session and make a new one: the
// outcome of a transaction is unknown.
var errReplaceSession = errors.New("fanout: session must be replaced")

// unconfirmed reports whether err, from GroupTransactSession.End, leaves
// the transaction's outcome unknown but the producer usable: a timeout, a
// transport error, or a retriable Kafka error that outlived franz-go's
// retries (the coordinator moving: NOT_COORDINATOR,
// COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
// REQUEST_TIMED_OUT). A Kafka error that is a definite answer — the
// producer fenced (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH), not
// authorized, a topic recreated under the transaction — is not: the
// session is replaced, as a zombie's must be.
func unconfirmed(err error) bool {
	switch {
	case errors.Is(err, kerr.UnknownTopicID):
		return false // a topic recreated: see outputsCheck and the topology watch
	case errors.Is(err, kerr.ConcurrentTransactions):
		return true // another operation on the transaction outlived franz-go's retries
	}
	if ke, ok := errors.AsType[*kerr.Error](err); ok {
		return ke.Retriable || ke.Code == kerr.UnknownServerError.Code
	}
	return true
}

// endFirstTry bounds GroupTransactSession.End before heal takes over
// (endTimeout, when shorter, bounds it instead). A healthy End is three
// round trips (TxnOffsetCommit, a heartbeat, EndTxn), well under a
// second. One that has not returned by then waits on a request to a
// coordinator that moved or stopped, or on the heartbeat a group loop
// waiting for AllowRebalance does not send (see endTimeout): heal's fresh
// requests, retried every second at most, find the new coordinator as
// soon as it answers, where End's went on waiting for the rest of its
// bound.
const endFirstTry = 3 * time.Second

// healBackoff is the first wait between two attempts of heal; it doubles
// up to healBackoffMax.
const (
	healBackoff    = 50 * time.Millisecond
	healBackoffMax = time.Second
)

// heal ends for sure a transaction whose end failed unconfirmed, and
// learns from the group's committed offsets whether it committed. It
// aborts (abort), then reads the offsets the group holds for what the
// cycle planned, waiting for transactional commits still being written
// (RequireStable). It retries both while the coordinators move, for as
// long as the run goes on: a replaced session would wait for the same
// coordinators (to join the group, to fetch its offsets) after giving its
// partitions up, and its new producer would leave the outcome unknown
// still. A member the group expels meanwhile (its heartbeats go on while
// heal waits; a rebalance waits for it at most the rebalance timeout)
// loses its partitions, which franz-go reports and the session survives.
// A heal that does not end is a cycle stall (stallWatch): the processor
// says it is not ready, then halts. Once the run ends, heal has endTimeout
// more: a stop must not wait for an outage. On a definite error, or past
// that, the outcome stays unknown and the session is replaced.
//
// plans is what the cycle asked to commit; head, the fetch positions
// before the end (where consuming goes on when it committed); before, the
// committed offsets before it. The outcome is Committed when every
// planned partition holds its plan and at least one plan moved an offset,
// Aborted when every one still holds its offset from before (or when no
// plan moved an offset: then no signal was forwarded in the cycle, and its
// outbox records, idempotent by key, are produced again), and Unknown
// otherwise.
func (t *txnSession) heal(ctx context.Context, plans map[string]map[int32]planned, head, before map[string]map[int32]kgo.EpochOffset) (Outcome, error) {
	ctx, done := t.healContext(ctx)
	defer done()
	if err := t.abort(ctx); err != nil {
		return Unknown, err
	}
	cl := t.s.Client()
	adm := kadm.NewClient(cl)
	var got kadm.OffsetResponses
	err := retryUnconfirmed(ctx, "read the group's offsets", func() (err error) {
		got, err = adm.FetchOffsets(kadm.RequireStable(ctx), t.group)
		if err == nil {
			err = plannedError(got, plans)
		}
		return err
	})
	if err != nil {
		return Unknown, err
	}
	out := judgeHealed(plans, before, got)
	switch out {
	case Committed:
		t.learn(plans)
		// franz-go rewound consuming to what it thinks is committed; the
		// held signals follow the poll head.
		cl.SetOffsets(head)
	case Unknown:
		return Unknown, errors.New("the group's offsets match neither the cycle's plan nor what was committed before it")
	}
	return out, nil
}

// healContext bounds a heal, or an abort in place, by the run (see heal):
// it ends endTimeout after the run ends. done releases it.
func (t *txnSession) healContext(ctx context.Context) (_ context.Context, done func()) {
	ctx, cancel := context.WithCancel(ctx)
	// The timer may outlive the heal by endTimeout at most; cancelling a
	// context twice is harmless.
	stopWatch := context.AfterFunc(t.run, func() { time.AfterFunc(t.endTimeout, cancel) })
	return ctx, func() { stopWatch(); cancel() }
}

// abort ends the open transaction with an abort for sure, franz-go's
// documented retry after an end that failed: the buffered records are
// failed once those in flight are answered, and the producer ID is
// reloaded at its epoch, which aborts whatever is still open (a commit
// that landed stays). It retries while the coordinator moves, until ctx
// ends.
func (t *txnSession) abort(ctx context.Context) error {
	cl := t.s.Client()
	return retryUnconfirmed(ctx, "abort", func() error {
		err := cl.AbortBufferedRecords(ctx)
		if err == nil {
			err = cl.EndTransaction(ctx, kgo.TryAbort)
		}
		return err
	})
}

// retryUnconfirmed calls try until it succeeds, fails definitely (not
// unconfirmed), or ctx ends, waiting healBackoff between attempts, doubled
// each time up to healBackoffMax. The error says what could not be done.
func retryUnconfirmed(ctx context.Context, what string, try func() error) error {
	wait := healBackoff
	for {
		err := try()
		if err == nil {
			return nil
		}
		if !unconfirmed(err) {
			return fmt.Errorf("unable to %s: %w", what, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("unable to %s: %w", what, err)
		case <-time.After(wait):
		}
		wait = min(2*wait, healBackoffMax)
	}
}

// plannedError is the first error the group's offsets (got) carry for a
// partition of plans. Those of other partitions do not matter to the
// verdict: with RequireStable, a partition of another member whose
// transaction is open (a coordinator moving holds every member's) answers
// UNSTABLE_OFFSET_COMMIT until that transaction ends, and waiting on it
// replaced the session.
func plannedError(got kadm.OffsetResponses, plans map[string]map[int32]planned) error {
	for topic, plan := range plans {
		for p := range plan {
			if o, ok := got.Lookup(topic, p); ok && o.Err != nil {
				return fmt.Errorf("topic %s partition %d: %w", topic, p, o.Err)
			}
		}
	}
	return nil
}

// judgeHealed is heal's verdict from the offsets the group holds (got);
// see heal.
func judgeHealed(plans map[string]map[int32]planned, before map[string]map[int32]kgo.EpochOffset, got kadm.OffsetResponses) Outcome {
	var asPlanned, asBefore, moved, n int
	for topic, plan := range plans {
		for p, pl := range plan {
			n++
			at := int64(-1)
			var meta string
			if o, ok := got.Lookup(topic, p); ok {
				at, meta = o.At, o.Metadata
			}
			prev := int64(-1)
			if b, ok := before[topic][p]; ok {
				prev = b.Offset
			}
			if pl.at.Offset != prev {
				moved++
			}
			switch {
			case at == pl.at.Offset && (!pl.hasMeta || meta == pl.meta):
				asPlanned++
				if pl.at.Offset == prev {
					asBefore++
				}
			case at == prev:
				asBefore++
			}
		}
	}
	switch {
	case moved > 0 && asPlanned == n:
		return Committed
	case asBefore == n:
		return Aborted
	}
	return Unknown
}

// learn records the cycle's plans as committed: see txnSession.learned.
func (t *txnSession) learn(plans map[string]map[int32]planned) {
	if t.learned == nil {
		t.learned = make(map[string]map[int32]kgo.EpochOffset)
	}
	for topic, plan := range plans {
		if t.learned[topic] == nil {
			t.learned[topic] = make(map[int32]kgo.EpochOffset)
		}
		for p, pl := range plan {
			t.learned[topic][p] = pl.at
		}
	}
}
