package fanout

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// CommandsGapError halts the processor: commands of a partition cannot be
// read from where the store says the next one is. Forwarding on would mean
// forwarding signals of users whose leave was skipped.
type CommandsGapError struct {
	Topic     string
	Partition int32
	Next      int64 // the store's checkpoint (next offset to apply), -1 if unknown
	End       int64 // the log end observed, -1 if unknown
	Err       error
}

func (e *CommandsGapError) Error() string {
	var what string
	switch {
	case e.End >= 0 && e.Next >= 0:
		what = fmt.Sprintf("log end %d is below the local checkpoint %d", e.End, e.Next)
	case e.Err != nil:
		what = e.Err.Error()
	default:
		what = "the position is not in the log"
	}
	return fmt.Sprintf("commands topic %s partition %d: %s; the topic was probably deleted and recreated, "+
		"or lost data. The local state no longer matches it. Way out: stop every processor, then either "+
		"restore the topic, or start each processor with an empty data directory (state is rebuilt from "+
		"the commands topic as it is now)", e.Topic, e.Partition, what)
}

func (e *CommandsGapError) Unwrap() error { return e.Err }

func isOffsetOutOfRange(err error) bool { return errors.Is(err, kerr.OffsetOutOfRange) }

// track observes, every AlignInterval, the high watermark of every owned
// commands partition, stamped with the wall-clock time the request was
// sent. These observations release held signals (see watermarks) and mark
// a partition caught up after assignment.
//
// The high watermark, not the last stable offset: a leave acknowledged
// after a record of a transaction still open lies above the last stable
// offset, and an observation of that would release signals the leave must
// stop (issue 13, finding 1). Observed at the high watermark, a partition
// behind an open transaction holds its signals until the transaction ends
// (fail closed), and the tracker, which also reads the last stable offset,
// says how long (claim.openTxnSinceNs).
func (p *Processor) track(ctx context.Context) error {
	t := time.NewTicker(p.cfg.AlignInterval)
	defer t.Stop()
	topic := string(p.cfg.Topics.Commands)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		cs := p.claims.all()
		if len(cs) == 0 {
			continue
		}
		// Applied offsets are read before sending: an applied offset
		// never exceeds the end the broker reports afterwards, so a
		// report below it proves the log went backwards.
		before := make([]int64, len(cs))
		for i, c := range cs {
			before[i] = c.applied.Load()
		}
		sent := p.cfg.Now().UnixNano()
		parts := make([]int32, len(cs))
		for i, c := range cs {
			parts[i] = c.partition
		}
		isolation := isolationUncommitted // the high watermark
		if p.cfg.UnsafeObserveLSO {
			isolation = isolationCommitted
		}
		ends, err := p.listEnds(ctx, topic, parts, isolation)
		if err != nil {
			if fatal := notAuthorized("listing "+topic+" end offsets", err); fatal != nil {
				return fatal
			}
			if ctx.Err() == nil {
				p.log.Warn("unable to observe commands end offsets", "err", err)
			}
			continue
		}
		var behind []int32 // partitions that may be held by an open transaction
		for i, c := range cs {
			end, ok := ends[c.partition]
			if !ok {
				continue
			}
			prev, regressed := c.marks.observe(observation{sentNs: sent, end: end})
			if regressed || end < before[i] {
				next := before[i]
				if regressed && prev > next {
					next = prev
				}
				return &CommandsGapError{Topic: topic, Partition: c.partition, Next: next, End: end}
			}
			p.markCaughtUp(c)
			if before[i] < end {
				behind = append(behind, c.partition)
			} else {
				p.noteOpenTxn(c, end, end, before[i], sent)
			}
		}
		if len(behind) == 0 {
			continue
		}
		// Only a partition whose commands are behind its high watermark
		// can be held by an open transaction: its last stable offset
		// says whether it is.
		stable, err := p.listEnds(ctx, topic, behind, isolationCommitted)
		if err != nil {
			continue // observed again next tick
		}
		for i, c := range cs {
			if lso, ok := stable[c.partition]; ok {
				p.noteOpenTxn(c, lso, ends[c.partition], before[i], sent)
			}
		}
	}
}

// Isolation levels of a ListOffsets request: read_uncommitted lists the
// high watermark, read_committed the last stable offset.
const (
	isolationUncommitted int8 = 0
	isolationCommitted   int8 = 1
)

// listEnds lists the end offsets of topic's partitions parts at the given
// isolation level. It sends one ListOffsets request to each partition
// leader and no metadata request, unlike kadm's listings: the tracker asks
// every AlignInterval, and a broker answers a metadata request for every
// listing otherwise. A partition that reports an error is left out; an
// authorization failure is returned.
func (p *Processor) listEnds(ctx context.Context, topic string, parts []int32, isolation int8) (map[int32]int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	req.IsolationLevel = isolation
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for _, part := range parts {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition = part
		rp.Timestamp = -1 // the end
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	out := make(map[int32]int64, len(parts))
	var firstErr error
	for _, shard := range p.admCl.RequestSharded(ctx, req) {
		if shard.Err != nil {
			if firstErr == nil {
				firstErr = shard.Err
			}
			continue
		}
		for _, t := range shard.Resp.(*kmsg.ListOffsetsResponse).Topics {
			for _, rp := range t.Partitions {
				if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
					if isAuthzFailure(err) && firstErr == nil {
						firstErr = err
					}
					continue
				}
				out[rp.Partition] = rp.Offset
			}
		}
	}
	if len(out) == 0 && firstErr != nil {
		return nil, firstErr
	}
	if firstErr != nil && isAuthzFailure(firstErr) {
		return nil, firstErr
	}
	return out, nil
}

// openTxnWarnEvery is how often a partition still held by an open
// transaction is logged again.
const openTxnWarnEvery = 10 * time.Second

// noteOpenTxn records whether claim c's commands partition is held by an
// open transaction: everything below the last stable offset lso applied,
// and records above it, up to the high watermark hwm, that a read_committed
// consumer cannot see until the transaction ends. It logs when a hold
// starts to matter, every openTxnWarnEvery while it lasts, and when it
// ends.
func (p *Processor) noteOpenTxn(c *claim, lso, hwm, applied, nowNs int64) {
	since := c.openTxnSinceNs.Load()
	held := lso < hwm && applied >= lso
	defer func() {
		if c.revoked.Load() {
			return // its series is gone with the partition
		}
		var d float64
		if s := c.openTxnSinceNs.Load(); s != 0 {
			d = time.Duration(nowNs - s).Seconds()
		}
		p.m.openTxn.WithLabelValues(strconv.Itoa(int(c.partition))).Set(d)
	}()
	switch {
	case held && since == 0:
		c.openTxnSinceNs.Store(nowNs)
	case held:
		if d := time.Duration(nowNs - since); d >= time.Second && time.Duration(nowNs-c.openTxnWarnedNs) >= openTxnWarnEvery {
			c.openTxnWarnedNs = nowNs
			p.log.Warn("commands partition held by an open transaction; its signals wait until it ends",
				"partition", c.partition, "held", d.Round(time.Millisecond).String(), "last_stable_offset", lso, "high_watermark", hwm)
		}
	case since != 0:
		c.openTxnSinceNs.Store(0)
		c.openTxnWarnedNs = 0
		if d := time.Duration(nowNs - since); d >= time.Second {
			p.log.Info("commands partition no longer held by an open transaction", "partition", c.partition,
				"held", d.Round(time.Millisecond).String())
		}
	}
}

func (p *Processor) markCaughtUp(c *claim) {
	if c.caughtUp.Load() {
		return
	}
	if _, ok := c.marks.through(c.applied.Load(), c.assignedNs); ok {
		c.caughtUp.Store(true)
		p.log.Info("partition caught up with its commands; forwarding",
			"partition", c.partition, "applied", c.applied.Load(),
			"took", time.Duration(p.cfg.Now().UnixNano()-c.assignedNs).String())
	}
}
