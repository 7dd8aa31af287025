package fanout

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

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
	inputs []string
	failed failures
	// endTimeout bounds GroupTransactSession.End. End waits for a forced
	// heartbeat; when the member's session has expired meanwhile (the
	// process was stopped), franz-go's group loop instead waits for
	// AllowRebalance, which only comes after End: without a bound the
	// two wait for each other forever. Past it, the outcome is unknown
	// and the session is replaced.
	endTimeout time.Duration
	// check, when set, is asked before a commit whether the outputs are
	// the topics the run found (outputsCheck): if not, the cycle aborts.
	check func(context.Context) error
}

func newTxnSession(inputs []string, endTimeout time.Duration, opts []kgo.Opt) (*txnSession, error) {
	s, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		return nil, fmt.Errorf("unable to create transactional session: %w", err)
	}
	return &txnSession{s: s, inputs: inputs, endTimeout: endTimeout}, nil
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
	if err := t.s.Client().Flush(ctx); err != nil {
		return Unknown, fmt.Errorf("unable to flush transaction: %w", err)
	}
	cl := t.s.Client()
	uncommitted, committed := cl.UncommittedOffsets(), cl.CommittedOffsets()
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
	ctx, cancel := context.WithTimeout(ctx, t.endTimeout)
	defer cancel()
	done, err := t.s.End(ctx, kgo.TransactionEndTry(commit))
	switch {
	case err != nil:
		return Unknown, fmt.Errorf("unable to end transaction: %w", err)
	case !done:
		return Aborted, vetoed
	}
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
