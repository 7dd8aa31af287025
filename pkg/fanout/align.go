package fanout

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Alignment answers one question: may a held signal of a partition be
// decided now? (README rule S5.) A signal with event time t may, once the
// partition's commands are applied up to the end of an observation of the
// commands partition sent at or after max(t + Grace, assignment time).
//
// An observation (sent, end) is the end of a commands partition as the
// broker reported it to a request sent at wall-clock time sent: because
// the broker answers after the request was sent, every command
// acknowledged before sent lies below end. The end is the high watermark,
// not the last stable offset: commands above a transaction left open
// cannot be read until it ends, and the signals wait for them.
//
// The aligner (aligner.run) makes the observations every AlignInterval;
// the commands side advances applied; the signals loop asks alignedThrough
// once per decision pass and compares each held signal's deadline to it
// (decide.go).

// observation is the end of a commands partition observed by a request
// sent at wall-clock sentNs (ns since the Unix epoch).
type observation struct {
	sentNs int64
	end    int64 // exclusive
}

// marksLimit bounds the observations kept per partition: at the default
// AlignInterval, ten seconds of them. Older ones are never needed: a
// deadline older than every kept observation is met by any of them.
const marksLimit = 1024

// alignment is one claimed partition's alignment state.
//
// applied is written by the commands side, the observations and the
// open-transaction state by the aligner; everything is read by the
// signals loop. obs is guarded by its mutex; the rest are atomics.
type alignment struct {
	partition  int32
	assignedNs int64 // wall clock at assignment; signals wait for an observation after it

	// applied is the next commands offset; every command below it is in
	// the gate and in the store (or in the batch about to commit).
	applied atomic.Int64
	// floor is the store's checkpoint at assignment: the store applied
	// every command below it, so the log's end was at least floor, and an
	// end observed below it means the log went backwards, even when the
	// commands are read again from below it (applied < floor).
	floor int64
	// caughtUp is set once the commands are applied through an
	// observation sent after assignment: the partition forwards.
	caughtUp atomic.Bool
	// openTxnSinceNs is the wall clock (ns) at which the aligner first saw
	// the commands partition held by an open transaction (everything below
	// the last stable offset applied, records above it), 0 while it is not.
	openTxnSinceNs atomic.Int64
	// openTxnReportedNs is when the aligner last reported the hold; the
	// aligner's alone.
	openTxnReportedNs int64

	obs struct {
		sync.Mutex
		list  []observation // ascending sentNs and end; len <= limit
		limit int           // marksLimit, but in tests
	}
}

func (a *alignment) init(partition int32, assignedNs, applied int64) {
	a.partition, a.assignedNs = partition, assignedNs
	a.applied.Store(applied)
	a.obs.list, a.obs.limit = make([]observation, 0, 16), marksLimit
}

// observe records an observation. Out-of-order sends (sentNs not after the
// newest) are ignored, so that sentNs stays ascending: a clock stepping
// back by d thus delays decisions by at most d. An end below the newest
// recorded end is not stored: the log went backwards (the topic was
// deleted and recreated), and observe reports it with regressed and the
// previous end so the caller can halt instead of trusting either.
func (a *alignment) observe(o observation) (prevEnd int64, regressed bool) {
	a.obs.Lock()
	defer a.obs.Unlock()
	n := len(a.obs.list)
	if n > 0 {
		last := a.obs.list[n-1]
		if o.end < last.end {
			return last.end, true
		}
		if o.sentNs <= last.sentNs {
			return last.end, false
		}
	}
	if n == a.obs.limit {
		copy(a.obs.list, a.obs.list[1:])
		a.obs.list = a.obs.list[:n-1]
	}
	a.obs.list = append(a.obs.list, o)
	return o.end, false
}

// through returns the latest wall-clock instant T such that every command
// acknowledged before T has been applied, given that commands below applied
// have been applied, considering only observations sent at or after
// notBefore. ok is false when no such observation exists yet.
//
// An observation (sentNs, end) with end <= applied proves completeness up
// to sentNs; observe keeps ends ascending with sentNs, so the answer is the
// newest observation whose end is at most applied.
func (a *alignment) through(applied, notBefore int64) (ns int64, ok bool) {
	a.obs.Lock()
	defer a.obs.Unlock()
	obs := a.obs.list
	lo := sort.Search(len(obs), func(i int) bool { return obs[i].sentNs >= notBefore })
	obs = obs[lo:]
	// First index whose end exceeds applied; the one before it is the answer.
	i := sort.Search(len(obs), func(i int) bool { return obs[i].end > applied })
	if i == 0 {
		return 0, false
	}
	return obs[i-1].sentNs, true
}

// alignedThrough returns the wall-clock instant through which the
// partition's commands are known applied, since its assignment: a held
// signal whose deadline is at or before it may be decided.
func (a *alignment) alignedThrough() (ns int64, ok bool) {
	return a.through(a.applied.Load(), a.assignedNs)
}

// aligner is the goroutine that observes the commands partitions' end
// offsets every interval, marks partitions caught up and notes open
// transactions. It owns nothing but its ticker.
type aligner struct {
	interval time.Duration
	now      func() time.Time
	topic    string
	// lso observes the last stable offset instead of the high watermark:
	// Config.UnsafeObserveLSO.
	lso bool
	// list lists end offsets (see listEnds).
	list func(ctx context.Context, parts []int32, isolation int8) (map[int32]int64, error)
	// owned returns the alignments of the partitions owned now.
	owned func() []*alignment
	// regressed makes the error that halts the processor when a commands
	// partition's log end went below where it was (see CommandsGapError).
	regressed func(partition int32, next, end int64) error
	// listFailed says what a failed listing means: the error that halts
	// the processor (an authorization failure), or nil to observe again
	// next tick.
	listFailed func(err error) error
	ev         EventListener
}

// run observes until ctx is done or a commands partition's log went
// backwards (returned as regressed made it).
func (al *aligner) run(ctx context.Context) error {
	t := time.NewTicker(al.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := al.tick(ctx); err != nil {
			return err
		}
	}
}

// tick makes one round of observations.
func (al *aligner) tick(ctx context.Context) error {
	as := al.owned()
	if len(as) == 0 {
		return nil
	}
	// Applied offsets are read before sending: an applied offset never
	// exceeds the end the broker reports afterwards, so a report below it
	// proves the log went backwards.
	before := make([]int64, len(as))
	parts := make([]int32, len(as))
	for i, a := range as {
		before[i], parts[i] = a.applied.Load(), a.partition
	}
	sent := al.now().UnixNano()
	isolation := isolationUncommitted // the high watermark
	if al.lso {
		isolation = isolationCommitted
	}
	ends, err := al.list(ctx, parts, isolation)
	if err != nil {
		return al.listFailed(err)
	}
	var behind []int32 // partitions that may be held by an open transaction
	for i, a := range as {
		end, ok := ends[a.partition]
		if !ok {
			continue
		}
		prev, regressed := a.observe(observation{sentNs: sent, end: end})
		if regressed || end < before[i] || end < a.floor {
			next := max(before[i], a.floor)
			if regressed && prev > next {
				next = prev
			}
			return al.regressed(a.partition, next, end)
		}
		al.markCaughtUp(a)
		if before[i] < end {
			behind = append(behind, a.partition)
		} else {
			al.noteOpenTxn(a, end, end, before[i], sent)
		}
	}
	if len(behind) == 0 {
		return nil
	}
	// Only a partition whose commands are behind its high watermark can
	// be held by an open transaction: its last stable offset says whether
	// it is.
	stable, err := al.list(ctx, behind, isolationCommitted)
	if err != nil {
		return nil // observed again next tick
	}
	for i, a := range as {
		if lso, ok := stable[a.partition]; ok {
			al.noteOpenTxn(a, lso, ends[a.partition], before[i], sent)
		}
	}
	return nil
}

func (al *aligner) markCaughtUp(a *alignment) {
	if a.caughtUp.Load() {
		return
	}
	if _, ok := a.alignedThrough(); ok {
		a.caughtUp.Store(true)
		al.ev.CaughtUp(CaughtUpInfo{Partition: a.partition, Applied: a.applied.Load(),
			Took: time.Duration(al.now().UnixNano() - a.assignedNs)})
	}
}

// openTxnReportEvery is how often a partition still held by an open
// transaction is reported again, after the first report at one second.
const openTxnReportEvery = 10 * time.Second

// noteOpenTxn records whether a's commands partition is held by an open
// transaction: everything below the last stable offset lso applied, and
// records above it, up to the high watermark hwm, that a read_committed
// consumer cannot see until the transaction ends.
func (al *aligner) noteOpenTxn(a *alignment, lso, hwm, applied, nowNs int64) {
	since := a.openTxnSinceNs.Load()
	held := lso < hwm && applied >= lso
	info := OpenTransactionInfo{Partition: a.partition, LastStableOffset: lso, HighWatermark: hwm}
	switch {
	case held && since == 0:
		a.openTxnSinceNs.Store(nowNs)
		al.ev.OpenTransaction(info)
	case held:
		if d := time.Duration(nowNs - since); d >= time.Second && time.Duration(nowNs-a.openTxnReportedNs) >= openTxnReportEvery {
			a.openTxnReportedNs = nowNs
			info.Held = d
			al.ev.OpenTransaction(info)
		}
	case since != 0:
		a.openTxnSinceNs.Store(0)
		a.openTxnReportedNs = 0
		info.Held, info.Ended = time.Duration(nowNs-since), true
		al.ev.OpenTransaction(info)
	}
}

// Isolation levels of a ListOffsets request: read_uncommitted lists the
// high watermark, read_committed the last stable offset.
const (
	isolationUncommitted int8 = 0
	isolationCommitted   int8 = 1
)

// listEnds lists the end offsets of topic's partitions parts at the given
// isolation level with cl. It sends one ListOffsets request to each
// partition leader and no metadata request, unlike kadm's listings: the
// aligner asks every AlignInterval, and an embedded broker's single loop
// fell behind its group timers under kadm's metadata requests. A partition
// that reports an error is left out; an authorization failure is returned.
func listEnds(ctx context.Context, cl *kgo.Client, topic string, parts []int32, isolation int8) (map[int32]int64, error) {
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
	for _, shard := range cl.RequestSharded(ctx, req) {
		if shard.Err != nil {
			if firstErr == nil {
				firstErr = shard.Err
			}
			continue
		}
		for _, t := range shard.Resp.(*kmsg.ListOffsetsResponse).Topics {
			for _, rp := range t.Partitions {
				if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
					if isAuthzFailure(err) {
						return nil, err
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
	return out, nil
}
