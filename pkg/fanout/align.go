package fanout

import (
	"context"
	"fmt"
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
// acknowledged before sent lies below end. sent is the clock's low
// reading (clock.go), so that no step of the wall clock stamps an
// observation later than it was sent. The end is the high watermark,
// not the last stable offset: commands above a transaction left open
// cannot be read until it ends, and the signals wait for them.
//
// The aligner (aligner.run) makes the observations every AlignInterval;
// the commands side advances applied; the signals loop asks alignedThrough
// once per decision pass and compares each held signal's deadline to it
// (rules.go).

// observation is the end of a commands partition observed by a request
// sent at wall-clock sentNs (ns since the Unix epoch, the clock's low
// reading) and monotonic sentMono.
type observation struct {
	sentNs   int64
	sentMono int64
	end      int64 // exclusive
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
	partition    int32
	assignedMono int64 // monotonic time of the assignment; signals wait for an observation after it

	// applied is the next commands offset; every command below it is in
	// the gate and in the store (or in the batch about to commit).
	applied atomic.Int64
	// floor is the store's checkpoint at assignment: the store applied
	// every command below it, so the log's end was at least floor, and an
	// end observed below it means the log went backwards, even when the
	// commands are read again from below it (applied < floor).
	floor int64
	// epoch is the newest leader epoch known for the commands partition,
	// -1 while none is: raised by the commands the commands side reads
	// (each record carries the epoch of the leader that appended it), by
	// the commands client's metadata at the claim, and by the listings the
	// aligner trusts. A listing answered under an older epoch comes from a
	// broker that no longer leads the partition but has not learned it yet
	// (paused, cut off): its end is the one it had, below commands
	// acknowledged since by the new leader, and is never trusted.
	epoch atomic.Int32
	// suspectSince is the monotonic sent time of the first of an unbroken
	// run of observations that contradicted what is known of the partition
	// (see aligner.suspect); suspected says whether the last one did. The
	// aligner's alone.
	suspectSince int64
	suspected    bool
	// prepared is set once the commands side has done what the claim
	// needs before its commands: restored its users from the changelog,
	// recovered its windows, re-published the commands of its users that
	// other partitions still held (migrate.go). Until then the partition
	// does not catch up, however far its commands are applied.
	prepared atomic.Bool
	// readyAfterMono is the monotonic time after which an observation
	// must have been sent to count for the claim, besides assignedMono:
	// when commands of its users were re-published to it, an observation
	// sent after they were acknowledged covers them.
	readyAfterMono atomic.Int64
	// caughtUp is set once the commands are applied through an
	// observation sent after assignment (and readyAfterNs): the partition
	// forwards.
	caughtUp atomic.Bool
	// openTxnSince is the monotonic time at which the aligner first saw
	// the commands partition held by an open transaction (everything below
	// the last stable offset applied, records above it); openTxn says
	// whether it is held now.
	openTxnSince atomic.Int64
	openTxn      atomic.Bool
	// openTxnReported is when the aligner last reported the hold again
	// (monotonic), if openTxnRereported; the aligner's alone.
	openTxnReported   int64
	openTxnRereported bool

	obs struct {
		sync.Mutex
		list  []observation // ascending sentNs and end; len <= limit
		limit int           // marksLimit, but in tests
	}
}

func (a *alignment) init(partition int32, assignedMono, applied int64) {
	a.partition, a.assignedMono = partition, assignedMono
	a.applied.Store(applied)
	a.epoch.Store(-1)
	a.obs.list, a.obs.limit = make([]observation, 0, 16), marksLimit
}

// raiseEpoch makes e the known leader epoch if it is newer.
func (a *alignment) raiseEpoch(e int32) {
	for {
		known := a.epoch.Load()
		if e <= known || a.epoch.CompareAndSwap(known, e) {
			return
		}
	}
}

// newestEnd returns the end of the newest observation, 0 if none.
func (a *alignment) newestEnd() int64 {
	a.obs.Lock()
	defer a.obs.Unlock()
	if n := len(a.obs.list); n > 0 {
		return a.obs.list[n-1].end
	}
	return 0
}

// observe records an observation. One not sent after the newest, by either
// clock, is ignored, so that both stay ascending: the low reading stands
// still while the wall clock is stepped back by d, which thus delays
// decisions by at most d. An end below the newest
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
		if o.sentNs <= last.sentNs || o.sentMono <= last.sentMono {
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
// monotonic notBefore. ok is false when no such observation exists yet.
//
// An observation (sentNs, end) with end <= applied proves completeness up
// to sentNs; observe keeps ends ascending with sentNs, so the answer is the
// newest observation whose end is at most applied.
func (a *alignment) through(applied, notBefore int64) (ns int64, ok bool) {
	a.obs.Lock()
	defer a.obs.Unlock()
	obs := a.obs.list
	lo := sort.Search(len(obs), func(i int) bool { return obs[i].sentMono >= notBefore })
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
// signal whose deadline is at or before it may be decided. Nothing is
// known before the claim is prepared: until its users are restored and
// the commands of other partitions re-published, the gate lacks them,
// however far its own commands partition was applied (an empty one is
// applied through its end at once).
func (a *alignment) alignedThrough() (ns int64, ok bool) {
	if !a.prepared.Load() {
		return 0, false
	}
	return a.through(a.applied.Load(), a.notBefore())
}

// notBefore is the monotonic instant after which an observation counts for
// the partition: its assignment, or later once commands were re-published
// to it (readyAfterMono).
func (a *alignment) notBefore() int64 { return max(a.assignedMono, a.readyAfterMono.Load()) }

// suspectFor is how long the observations of a commands partition may
// contradict what is known of it before the processor halts: a broker
// that led the partition answers from its old state for as long as it
// has not learned that it no longer does (a paused broker, continued,
// for a second or two) and the client's map of leaders is kept up to
// 5 s; a log that truly went back stays back.
const suspectFor = 15 * time.Second

// countResult is what partitionCount answered.
type countResult struct {
	n   int32
	err error
}

// partitionCount asks a broker for topic's partition count, bypassing the
// client's cached metadata.
func partitionCount(ctx context.Context, cl *kgo.Client, topic string) (int32, error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, err
	}
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return 0, fmt.Errorf("metadata of %s: %w", topic, err)
		}
		return int32(len(t.Partitions)), nil
	}
	return 0, fmt.Errorf("metadata without topic %s", topic)
}

// listed is a partition's end as a broker listed it, with the leader
// epoch it answered under (-1 when it did not say: ListOffsets before v4).
type listed struct {
	end   int64
	epoch int32
}

// aligner is the goroutine that observes the commands partitions' end
// offsets every interval, marks partitions caught up and notes open
// transactions. It owns nothing but its ticker.
type aligner struct {
	interval time.Duration
	clk      *clock
	topic    string
	// lso observes the last stable offset instead of the high watermark:
	// Config.Testing.UnsafeObserveLSO.
	lso bool
	// suspectFor is suspectFor, but in tests.
	suspectFor time.Duration
	// list lists end offsets (see listEnds).
	list func(ctx context.Context, parts []int32, isolation int8) (map[int32]listed, error)
	// count asks a broker for the commands' partition count now (see
	// partitionCount); nil in tests that do not grow the topic.
	count func(ctx context.Context) (int32, error)
	// partitions is the commands' partition count of the run's layout;
	// grown makes the error that ends the run when count finds another.
	partitions int32
	grown      func(found int32) error
	// owned returns the alignments of the partitions owned now.
	owned func() []*alignment
	// regressed makes the error that halts the processor when a commands
	// partition's log went back (see CommandsGapError): its end below
	// next, or, with cause, its leader epoch.
	regressed func(partition int32, next, end int64, cause error) error
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
	// proves the log went backwards, or the broker is not the leader.
	before := make([]int64, len(as))
	parts := make([]int32, len(as))
	for i, a := range as {
		before[i], parts[i] = a.applied.Load(), a.partition
	}
	now := al.clk.read()
	sent := now.low
	isolation := isolationUncommitted // the high watermark
	if al.lso {
		isolation = isolationCommitted
	}
	// An observation says that every command acknowledged before sent
	// is at or below the ends it lists, which holds only for partitions
	// that existed at sent: a leave written to a partition the topic grew
	// by (by a producer that knows the new count) is in none of them, and
	// the topics' watcher may notice the growth only an interval later.
	// So the count is asked after sent, beside the ends, and a count that
	// differs ends the run before anything is observed: nothing is
	// released on ends that miss a partition.
	counted := make(chan countResult, 1)
	if al.count != nil {
		go func() {
			n, err := al.count(ctx)
			counted <- countResult{n, err}
		}()
	}
	ends, err := al.list(ctx, parts, isolation)
	if al.count != nil {
		c := <-counted
		switch {
		case c.err != nil && err == nil:
			err = c.err
		case c.err == nil && c.n != al.partitions:
			return al.grown(c.n)
		}
	}
	if err != nil {
		return al.listFailed(err)
	}
	var behind []int32 // partitions that may be held by an open transaction
	for i, a := range as {
		l, ok := ends[a.partition]
		if !ok {
			continue
		}
		least := max(before[i], a.floor, a.newestEnd())
		if known := a.epoch.Load(); l.epoch >= 0 && l.epoch < known {
			if err := al.suspect(a, now.mono, l, least, known); err != nil {
				return err
			}
			continue
		}
		if l.end < least {
			if err := al.suspect(a, now.mono, l, least, -1); err != nil {
				return err
			}
			continue
		}
		if a.suspected {
			al.ev.SuspectEnd(SuspectEndInfo{Partition: a.partition, End: l.end, Epoch: l.epoch,
				Lasted: time.Duration(now.mono - a.suspectSince), Cleared: true})
			a.suspected = false
		}
		a.raiseEpoch(l.epoch)
		a.observe(observation{sentNs: sent, sentMono: now.mono, end: l.end})
		al.markCaughtUp(a)
		if before[i] < l.end {
			behind = append(behind, a.partition)
		} else {
			al.noteOpenTxn(a, l.end, l.end, before[i], now.mono)
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
		if lso, ok := stable[a.partition]; ok && (lso.epoch < 0 || lso.epoch >= a.epoch.Load()) {
			al.noteOpenTxn(a, lso.end, ends[a.partition].end, before[i], now.mono)
		}
	}
	return nil
}

// suspect handles an observation l of a's commands partition, sent at
// monotonic sentMono, that contradicts what is known of it: its end below least (the
// commands applied, the store's checkpoint, an end observed before), or,
// with knownEpoch >= 0, a leader epoch older than knownEpoch. It is not
// recorded: the partition's signals wait on the observations before it
// (and a partition not caught up yet keeps waiting), so an answer from a
// broker that no longer leads costs time, never a leave. One that lasts
// suspectFor is the log itself gone back (the topic deleted and created
// again, or data lost), and halts the processor.
func (al *aligner) suspect(a *alignment, sentMono int64, l listed, least int64, knownEpoch int32) error {
	if !a.suspected {
		a.suspected, a.suspectSince = true, sentMono
		al.ev.SuspectEnd(SuspectEndInfo{Partition: a.partition, End: l.end, Epoch: l.epoch,
			Least: least, KnownEpoch: knownEpoch})
	}
	lasted := time.Duration(sentMono - a.suspectSince)
	if lasted < al.suspectFor {
		return nil
	}
	if knownEpoch >= 0 {
		return al.regressed(a.partition, least, l.end, fmt.Errorf(
			"its leader epoch went back from %d to %d and stayed back for %v (log end %d, local checkpoint %d)",
			knownEpoch, l.epoch, lasted.Round(time.Millisecond), l.end, least))
	}
	return al.regressed(a.partition, least, l.end, nil)
}

func (al *aligner) markCaughtUp(a *alignment) {
	if a.caughtUp.Load() || !a.prepared.Load() {
		return
	}
	if _, ok := a.alignedThrough(); ok {
		a.caughtUp.Store(true)
		al.ev.CaughtUp(CaughtUpInfo{Partition: a.partition, Applied: a.applied.Load(),
			Took: time.Duration(al.clk.monoNow() - a.assignedMono)})
	}
}

// openTxnReportEvery is how often a partition still held by an open
// transaction is reported again, after the first report at one second.
const openTxnReportEvery = 10 * time.Second

// noteOpenTxn records whether a's commands partition is held by an open
// transaction: everything below the last stable offset lso applied, and
// records above it, up to the high watermark hwm, that a read_committed
// consumer cannot see until the transaction ends. nowMono is monotonic.
func (al *aligner) noteOpenTxn(a *alignment, lso, hwm, applied, nowMono int64) {
	was, since := a.openTxn.Load(), a.openTxnSince.Load()
	held := lso < hwm && applied >= lso
	info := OpenTransactionInfo{Partition: a.partition, LastStableOffset: lso, HighWatermark: hwm}
	switch {
	case held && !was:
		a.openTxnSince.Store(nowMono)
		a.openTxn.Store(true)
		a.openTxnRereported = false
		al.ev.OpenTransaction(info)
	case held:
		if d := time.Duration(nowMono - since); d >= time.Second &&
			(!a.openTxnRereported || time.Duration(nowMono-a.openTxnReported) >= openTxnReportEvery) {
			a.openTxnReported, a.openTxnRereported = nowMono, true
			info.Held = d
			al.ev.OpenTransaction(info)
		}
	case was:
		a.openTxn.Store(false)
		info.Held, info.Ended = time.Duration(nowMono-since), true
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
// Each end comes with the leader epoch the broker answered under.
func listEnds(ctx context.Context, cl *kgo.Client, topic string, parts []int32, isolation int8) (map[int32]listed, error) {
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
	out := make(map[int32]listed, len(parts))
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
				out[rp.Partition] = listed{end: rp.Offset, epoch: rp.LeaderEpoch}
			}
		}
	}
	if len(out) == 0 && firstErr != nil {
		return nil, firstErr
	}
	return out, nil
}
