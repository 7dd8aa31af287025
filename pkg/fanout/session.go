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

// session is the signals side of the processor: a consumer-group member
// that consumes signals and produces what they become, in cycles. A cycle
// begins, produces, and ends by committing the signals offsets it was given
// (together with its output when transactional) or by discarding its work.
//
// A session is used by the main loop only; group callbacks run on the
// client's goroutines.
type session interface {
	client() *kgo.Client
	poll(ctx context.Context, max int) kgo.Fetches
	begin() error
	produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error))
	// end finishes the cycle. With commit it flushes and, unless a
	// produce in the cycle failed, commits the signals offsets: one past
	// the last polled record of each partition, except for a partition
	// whose position is held: its first undecided record is committed so
	// that it is fetched again after a crash. Each position's meta is
	// committed as the offset's metadata. committed reports whether the cycle's output and
	// offsets are now durable. On !committed with a nil error, the
	// caller must drop every fetched, undecided record and rewind the
	// fetch positions to the committed offsets. A non-nil
	// error means the outcome is unknown and the session must be closed
	// and replaced.
	end(ctx context.Context, commit bool, pos map[int32]position) (committed bool, err error)
	allowRebalance()
	close()
}

// position is what the main loop wants committed for one partition.
type position struct {
	held bool            // at is the first undecided record; commit it instead of the poll head
	at   kgo.EpochOffset // valid when held
	meta string          // offset metadata: the partition's highest decided event time and judged commands
	// refresh asks for the metadata to be committed even when no record of
	// the partition was polled in the cycle (at its committed offset): a
	// partition without new signals still applies commands, and its next
	// owner must know how far they were judged.
	refresh bool
}

// failures counts produce errors of the current cycle.
type failures struct{ n atomic.Int64 }

func (f *failures) wrap(promise func(*kgo.Record, error)) func(*kgo.Record, error) {
	return func(r *kgo.Record, err error) {
		if err != nil {
			f.n.Add(1)
		}
		promise(r, err)
	}
}

// txnSession forwards in Kafka transactions through franz-go's
// GroupTransactSession (KIP-447: zombies are fenced by group generation).
type txnSession struct {
	s      *kgo.GroupTransactSession
	topic  string
	failed failures
	// endTimeout bounds GroupTransactSession.End. End waits for a forced
	// heartbeat; when the member's session has expired meanwhile (the
	// process was stopped), franz-go's group loop instead waits for
	// AllowRebalance, which only comes after End: without a bound the
	// two wait for each other forever. Past it, the outcome is unknown
	// and the session is replaced.
	endTimeout time.Duration
}

func newTxnSession(topic string, endTimeout time.Duration, opts []kgo.Opt) (*txnSession, error) {
	s, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		return nil, fmt.Errorf("unable to create transactional session: %w", err)
	}
	return &txnSession{s: s, topic: topic, endTimeout: endTimeout}, nil
}

func (t *txnSession) client() *kgo.Client { return t.s.Client() }

func (t *txnSession) poll(ctx context.Context, max int) kgo.Fetches {
	return t.s.PollRecords(ctx, max)
}

func (t *txnSession) begin() error { return t.s.Begin() }

func (t *txnSession) produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	t.s.Produce(ctx, r, t.failed.wrap(promise))
}

// end flushes before ending: GroupTransactSession.End(TryCommit) aborts on
// a rebalance but not on failed produces, and would commit the input
// offsets of output that never landed. Counting failures after our own
// flush closes that gap.
func (t *txnSession) end(ctx context.Context, commit bool, pos map[int32]position) (bool, error) {
	defer t.failed.n.Store(0)
	if commit {
		if err := t.s.Client().Flush(ctx); err != nil {
			return false, fmt.Errorf("unable to flush transaction: %w", err)
		}
	}
	try := kgo.TransactionEndTry(commit && t.failed.n.Load() == 0)
	committed := t.s.Client().CommittedOffsets()[t.topic]
	ctx = kgo.PreTxnCommitFnContext(ctx, func(req *kmsg.TxnOffsetCommitRequest) error {
		rewriteTxnOffsets(req, t.topic, pos, committed)
		return nil
	})
	ctx, cancel := context.WithTimeout(ctx, t.endTimeout)
	defer cancel()
	ok, err := t.s.End(ctx, try)
	if err != nil {
		return false, fmt.Errorf("unable to end transaction: %w", err)
	}
	return ok, nil
}

// rewriteTxnOffsets replaces the offset franz-go would commit for a held
// partition (one past the last polled record) with its first undecided
// record: signals still held for alignment must be fetched again after a
// crash. Other partitions keep franz-go's offset, which also steps over
// transaction markers that never reach the caller.
//
// A partition asking for a refresh of its metadata that franz-go has no
// new offset for is added at its committed offset, if it has one.
func rewriteTxnOffsets(req *kmsg.TxnOffsetCommitRequest, topic string, pos map[int32]position, committed map[int32]kgo.EpochOffset) {
	seen := make(map[int32]bool, len(pos))
	ti := -1
	for i := range req.Topics {
		t := &req.Topics[i]
		if t.Topic != topic {
			continue
		}
		ti = i
		for j := range t.Partitions {
			p := &t.Partitions[j]
			seen[p.Partition] = true
			if o, ok := pos[p.Partition]; ok {
				if o.held {
					p.Offset, p.LeaderEpoch = o.at.Offset, o.at.Epoch
				}
				p.Metadata = kmsg.StringPtr(o.meta)
			}
		}
	}
	for part, o := range pos {
		c, ok := committed[part]
		if seen[part] || !o.refresh || !ok {
			continue
		}
		if ti < 0 {
			req.Topics = append(req.Topics, kmsg.TxnOffsetCommitRequestTopic{Topic: topic})
			ti = len(req.Topics) - 1
		}
		p := kmsg.NewTxnOffsetCommitRequestTopicPartition()
		p.Partition, p.Offset, p.LeaderEpoch, p.Metadata = part, c.Offset, c.Epoch, kmsg.StringPtr(o.meta)
		req.Topics[ti].Partitions = append(req.Topics[ti].Partitions, p)
	}
}

func (t *txnSession) allowRebalance() { t.s.AllowRebalance() }

// close leaves the group. It allows the rebalance first: after an End that
// timed out, franz-go's group loop may be waiting for it, and Close would
// wait for the group loop.
func (t *txnSession) close() { t.s.CloseAllowingRebalance() }

// errOffsetsNotCommitted is a plain session's report that everything
// produced in the cycle was acknowledged but the offset commit failed: the
// records will be processed again by whoever owns them next, at least once
// as promised.
var errOffsetsNotCommitted = errors.New("fanout: output acknowledged, offsets not committed")

// plainSession forwards at least once: offsets are committed only after
// everything produced in the cycle is acknowledged.
type plainSession struct {
	cl     *kgo.Client
	topic  string
	failed failures
}

func newPlainSession(topic string, opts []kgo.Opt) (*plainSession, error) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("unable to create consumer: %w", err)
	}
	return &plainSession{cl: cl, topic: topic}, nil
}

func (p *plainSession) client() *kgo.Client { return p.cl }

func (p *plainSession) poll(ctx context.Context, max int) kgo.Fetches {
	return p.cl.PollRecords(ctx, max)
}

func (p *plainSession) begin() error { return nil }

func (p *plainSession) produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	p.cl.Produce(ctx, r, p.failed.wrap(promise))
}

func (p *plainSession) end(ctx context.Context, commit bool, pos map[int32]position) (bool, error) {
	defer p.failed.n.Store(0)
	if err := p.cl.Flush(ctx); err != nil {
		return false, fmt.Errorf("unable to flush: %w", err)
	}
	offsets := p.cl.UncommittedOffsets()[p.topic]
	if !commit || p.failed.n.Load() > 0 {
		return false, nil // the caller rewinds
	}
	if offsets == nil {
		offsets = make(map[int32]kgo.EpochOffset)
	}
	committed := p.cl.CommittedOffsets()[p.topic]
	for part, o := range pos {
		_, ok := offsets[part]
		switch c, known := committed[part]; {
		case ok && o.held:
			offsets[part] = o.at
		case !ok && o.refresh && known:
			offsets[part] = c // metadata only: see position.refresh
		}
	}
	ctx = kgo.PreCommitFnContext(ctx, func(req *kmsg.OffsetCommitRequest) error {
		for i := range req.Topics {
			for j := range req.Topics[i].Partitions {
				part := &req.Topics[i].Partitions[j]
				if o, ok := pos[part.Partition]; ok && req.Topics[i].Topic == p.topic {
					part.Metadata = kmsg.StringPtr(o.meta)
				}
			}
		}
		return nil
	})
	if len(offsets) == 0 {
		return true, nil
	}
	var commitErr error
	p.cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{p.topic: offsets},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			commitErr = err
			if err == nil {
				commitErr = offsetCommitError(resp)
			}
		})
	if commitErr != nil {
		return false, fmt.Errorf("%w: %w", errOffsetsNotCommitted, commitErr)
	}
	return true, nil
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
