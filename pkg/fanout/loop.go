package fanout

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/topics"
)

// lane is the main loop's state for one owned signals partition.
type lane struct {
	c      *claim
	q      queue
	paused bool
	// start is where this claim's consuming began (the offset of the first
	// record fetched for it), or -1 before any record: where an abort
	// rewinds a partition the group has no commit for.
	start kgo.EpochOffset
	// judged is the claim's applied offset read just before the outbox was
	// last drained: the changelog records of every command below it are in
	// this cycle or an earlier one. It goes into the offset metadata.
	judged int64
	// pass collects the signals forwarded in the current decision pass,
	// published to the claim's record at its end; mark is that record's
	// count when the cycle began, for taking back an aborted cycle's.
	pass []fwd
	mark uint64
	// committedMeta is the offset metadata last committed for the lane.
	committedMeta string
}

// loop is the signals side: one goroutine that owns a session and the
// lanes. It decides every signal, produces the results and ends a cycle
// every CommitInterval.
type loop struct {
	p     *Processor
	s     session
	lanes map[int32]*lane
	kp    keyPartition

	// inflight are the outbox entries produced in the current cycle; they
	// are deleted from the store once the cycle commits.
	inflight []outboxItem
	promise  func(*kgo.Record, error)

	// passNs is the wall clock, in Unix ns, read once per decideAll pass.
	passNs int64

	// settledRefused are the inputs of this cycle that had been refused
	// before and were settled otherwise: their refusals are forgotten once
	// the cycle commits.
	settledRefused []*kgo.Record

	// refusedOutbox holds the outbox entries (by sequence number) the
	// broker refused, written by promises, read when the entries are
	// produced again: see poison.go.
	refusedOutbox struct {
		sync.Mutex
		m map[uint64]error
	}
}

// errReplaceSession asks Run to close the session and make a new one: the
// outcome of a transaction is unknown.
var errReplaceSession = errors.New("fanout: session must be replaced")

func newLoop(p *Processor, s session) *loop {
	l := &loop{p: p, s: s, lanes: make(map[int32]*lane), kp: newKeyPartition()}
	l.promise = l.acked
	return l
}

// run cycles until ctx is done, then ends the last cycle with a commit so
// that everything decided so far is durable. Produces and the final commit
// run on a context that outlives ctx: shutting down finishes in-flight work.
func (l *loop) run(ctx context.Context) error {
	work := context.WithoutCancel(ctx)
	for {
		if err := l.s.begin(); err != nil {
			return fmt.Errorf("%w: unable to begin: %v", errReplaceSession, err)
		}
		for _, ln := range l.lanes {
			ln.mark = ln.c.fwd.mark()
		}
		deadline := time.Now().Add(l.p.cfg.CommitInterval)
		for ctx.Err() == nil && time.Now().Before(deadline) {
			if err := l.step(ctx, work, deadline); err != nil {
				return err
			}
		}
		if ctx.Err() != nil {
			l.drainLast(work)
		}
		if err := l.end(work); err != nil {
			return err
		}
		l.s.allowRebalance()
		if ctx.Err() != nil {
			return nil
		}
	}
}

// shutdownDrainWait bounds how long the last cycle waits for the commands
// side to stop.
const shutdownDrainWait = 5 * time.Second

// drainLast puts what the commands side applied before it stopped into the
// last cycle: a stop finishes in-flight work, and a changelog record (a
// late-leave window, say) left in the outbox would otherwise wait for this
// instance's next start, while the next owner of its partition, judging
// from the offsets' metadata, does not write it.
func (l *loop) drainLast(ctx context.Context) {
	select {
	case <-l.p.applierDone:
	case <-time.After(shutdownDrainWait):
		l.p.log.Warn("the commands side did not stop in time; its last records go out at the next start")
	}
	l.drainOutbox(ctx)
}

// step polls once and decides what it can.
func (l *loop) step(ctx, work context.Context, deadline time.Time) error {
	l.syncLanes()
	wait := time.Until(deadline)
	if l.holding() && wait > l.p.cfg.AlignInterval {
		wait = l.p.cfg.AlignInterval // held signals: look again soon
	}
	pollCtx, cancel := context.WithTimeout(ctx, wait)
	fetches := l.s.poll(pollCtx, l.p.cfg.MaxPollRecords)
	cancel()
	if fetches.IsClientClosed() {
		return fmt.Errorf("%w: client closed", errReplaceSession)
	}
	l.take(fetches)
	l.decideAll(work)
	l.drainOutbox(work)
	l.backpressure()
	return nil
}

// take appends fetched signals to their lanes and reports fetch errors.
// Lanes are synced first: the poll may have run the assignment callback.
func (l *loop) take(fetches kgo.Fetches) {
	l.syncLanes()
	fetches.EachError(func(t string, p int32, err error) {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return
		}
		if fatal := notAuthorized(fmt.Sprintf("fetching %s[%d]", t, p), err); fatal != nil {
			l.p.halt(fatal)
			return
		}
		l.p.log.Warn("fetch error", "topic", t, "partition", p, "err", err)
	})
	now := time.Now().UnixNano()
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		if len(fp.Records) == 0 {
			return
		}
		ln := l.lanes[fp.Partition]
		if ln == nil {
			// Fetched for a partition whose claim is gone: the new
			// owner fetches it again from the committed offset.
			return
		}
		if ln.start.Offset < 0 {
			first := fp.Records[0]
			ln.start = kgo.EpochOffset{Epoch: first.LeaderEpoch, Offset: first.Offset}
		}
		for _, r := range fp.Records {
			ln.q.push(r, now)
		}
		l.p.m.signalsIn.Add(float64(len(fp.Records)))
		last := fp.Records[len(fp.Records)-1].Offset
		l.p.m.lag.WithLabelValues(strconv.Itoa(int(fp.Partition))).Set(float64(max(fp.HighWatermark-last-1, 0)))
	})
}

// syncLanes makes the lanes match the claims: a lane whose claim was
// revoked or replaced is dropped with everything it held.
func (l *loop) syncLanes() {
	for p, ln := range l.lanes {
		if cur := l.p.claims.get(p); cur != ln.c {
			l.dropLane(p, ln)
		}
	}
	for _, c := range l.p.claims.all() {
		if l.lanes[c.partition] == nil {
			l.lanes[c.partition] = &lane{c: c, start: kgo.EpochOffset{Epoch: -1, Offset: -1}, judged: c.judgedBelow, mark: c.fwd.mark()}
		}
	}
}

func (l *loop) dropLane(p int32, ln *lane) {
	if ln.paused {
		l.s.client().ResumeFetchPartitions(map[string][]int32{string(l.p.cfg.Topics.Signals): {p}})
	}
	ln.q.reset()
	delete(l.lanes, p)
	l.p.m.lag.DeleteLabelValues(strconv.Itoa(int(p)))
}

func (l *loop) holding() bool {
	for _, ln := range l.lanes {
		if ln.q.len() > 0 {
			return true
		}
	}
	return false
}

// decideAll decides, lane by lane, every signal at the head of its lane
// that can be decided now. A signal that must wait blocks those behind it:
// offsets are committed in order.
func (l *loop) decideAll(ctx context.Context) {
	now := l.p.cfg.Now().UnixNano()
	// One wall-clock read per pass for the hold histogram: per signal, the
	// clock was a measurable share of the processor's CPU.
	l.passNs = time.Now().UnixNano()
	for _, ln := range l.lanes {
		if ln.q.len() == 0 {
			continue
		}
		c := ln.c
		c.fwd.begin() // before any gate read of the pass: see forwarded
		through, known := c.marks.through(c.applied.Load(), c.assignedNs)
		for {
			h, ok := ln.q.peek()
			if !ok || !l.decide(ctx, ln, h, now, through, known) {
				break
			}
			ln.q.pop()
		}
		c.fwd.end(ln.pass)
		ln.pass = ln.pass[:0]
	}
	l.p.held.Store(int64(l.heldCount()))
}

// decide settles one signal, reporting false when it must wait.
//
// The order of the checks is the contract (README rules S1 to S5): a key
// that is not a user id, a record in the wrong partition, one too large to
// forward and an event time out of range or implausibly far ahead are
// settled at once (DLQ or re-publish); everything else waits until the
// commands of its partition are known complete through event time + grace
// and then goes through the gate.
func (l *loop) decide(ctx context.Context, ln *lane, h held, nowNs, through int64, known bool) bool {
	r, c := h.r, ln.c
	rfl, refused := l.p.refused.take(r)
	if refused {
		l.settledRefused = append(l.settledRefused, r)
	}
	switch {
	case refused && rfl.deadLetter:
		l.p.log.Warn("DLQ copy refused by the broker; dead-lettering a minimal copy", "topic", r.Topic,
			"partition", r.Partition, "offset", r.Offset, "err", rfl.err)
		dl := minimalDeadLetter(l.p.cfg.Topics.DLQ, r, refusalReason(rfl.err), rfl.err)
		l.p.m.dlq.WithLabelValues(sourceSignals, headerValue(dl, topics.HeaderReason)).Inc()
		l.s.produce(ctx, dl, l.otherAcked)
		return true
	case refused && rfl.alone:
		l.p.log.Warn("record refused by the broker on its own; dead-lettered instead", "topic", r.Topic,
			"partition", r.Partition, "offset", r.Offset, "err", rfl.err)
		l.deadLetter(ctx, r, sourceSignals, refusalReason(rfl.err), rfl.err)
		return true
	}
	user, err := topics.ParseUserID(r.Key)
	if err != nil {
		l.deadLetter(ctx, r, sourceSignals, topics.ReasonOf(err), err)
		return true
	}
	if want := l.kp.of(r.Key, l.p.signalPartitions); want != r.Partition {
		l.republish(ctx, r, want, sourceSignals, refused)
		return true
	}
	// A forwarded copy is r's key, value and headers: r's size.
	if cohort := string(l.p.cfg.Topics.Cohort); batchBytes(r) > l.p.lim.of(cohort) {
		err := fmt.Errorf("signal of %d bytes does not fit %s (max.message.bytes %d)", userBytes(r), cohort, l.p.lim.of(cohort))
		l.deadLetter(ctx, r, sourceSignals, topics.ReasonRecordTooLarge, err)
		return true
	}
	ms := r.Timestamp.UnixMilli()
	if ms < 0 {
		err := fmt.Errorf("event time %d ms is before the Unix epoch", ms)
		l.deadLetter(ctx, r, sourceSignals, topics.ReasonTimestampOutOfRange, err)
		return true
	}
	if skew := l.p.cfg.MaxFutureSkew.Nanoseconds(); ms > (nowNs+skew)/int64(time.Millisecond) {
		err := fmt.Errorf("event time %d ms is %v ahead of this processor's clock (max %v)",
			ms, time.Duration(ms-nowNs/int64(time.Millisecond))*time.Millisecond, l.p.cfg.MaxFutureSkew)
		l.deadLetter(ctx, r, sourceSignals, topics.ReasonTimestampSkew, err)
		return true
	}
	ts := ms * int64(time.Millisecond)
	if !known || max(ts+l.p.cfg.grace().Nanoseconds(), c.assignedNs) > through {
		return false
	}
	// Publish what may be decided before asking the gate; see claim.
	if r.Offset+1 > c.deciding.Load() {
		c.deciding.Store(r.Offset + 1)
	}
	if ts > c.maxEventNs.Load() {
		c.maxEventNs.Store(ts)
	}
	l.p.m.holdSeconds.Observe(float64(l.passNs-h.fetchedNs) / 1e9)
	if !l.p.gate.Allows(user, uint64(ts)) {
		l.p.m.dropped.WithLabelValues(dropLeft).Inc()
		return true
	}
	ln.pass = append(ln.pass, fwd{user: user, ts: ts})
	out := &kgo.Record{
		Topic:     string(l.p.cfg.Topics.Cohort),
		Key:       r.Key,
		Value:     r.Value,
		Headers:   r.Headers,
		Timestamp: r.Timestamp,
	}
	if refused {
		l.produceAlone(ctx, out, l.promise)
	} else {
		l.s.produce(ctx, out, l.promise)
	}
	return true
}

// acked accounts for a forwarded signal. Failures are counted by the
// session, which ends the cycle without committing.
func (l *loop) acked(r *kgo.Record, err error) {
	if err != nil {
		if refusedByBroker(err) {
			l.p.refused.add(r, err)
		}
		l.produceFailed(r, err)
		return
	}
	l.p.m.forwarded.Inc()
	if r.Offset%latencySample == 0 {
		l.p.m.forwardLatency.Observe(time.Since(r.Timestamp).Seconds())
	}
}

// latencySample is how many forwarded signals share one observation of the
// forward latency: those whose output offset is a multiple of it are
// observed. A clock read per signal cost about 5% of the processor's CPU at
// a million signals per second; output offsets are independent of the
// latency, so the histogram stays a fair sample.
const latencySample = 8

// deadLetter sends r to the DLQ with the reason and its origin in headers,
// as a truncated copy when a whole one would not fit the DLQ.
func (l *loop) deadLetter(ctx context.Context, r *kgo.Record, source string, reason topics.Reason, err error) {
	dl := deadLetterRecord(l.p.cfg.Topics.DLQ, l.p.lim.deadLetterBudget(l.p.cfg.Topics.DLQ), r, reason, err)
	l.p.m.dlq.WithLabelValues(source, headerValue(dl, topics.HeaderReason)).Inc()
	l.s.produce(ctx, dl, l.otherAcked)
}

// republish sends r to the partition that owns its key in its own topic,
// or to the DLQ when it no longer fits that topic with its extra header;
// alone after a refusal (see poison.go).
func (l *loop) republish(ctx context.Context, r *kgo.Record, want int32, source string, alone bool) {
	rp := republishRecord(r, want)
	if !l.p.lim.fits(rp) {
		l.deadLetter(ctx, r, source, topics.ReasonRecordTooLarge, fmt.Errorf("misrouted record of %d bytes does not fit %s again with its header (max.message.bytes %d)",
			userBytes(r), r.Topic, l.p.lim.of(r.Topic)))
		return
	}
	l.p.m.misrouted.WithLabelValues(source).Inc()
	l.p.warnMisrouted(r, want)
	if alone {
		l.produceAlone(ctx, rp, l.otherAcked)
		return
	}
	l.s.produce(ctx, rp, l.otherAcked)
}

// produceAlone produces r in a record batch of its own: what was buffered
// before is flushed first, and r right after. A broker refuses a whole
// batch for one bad record; alone, r is known to be refused for itself.
// Only records refused before take this slow path.
func (l *loop) produceAlone(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	if err := l.s.client().Flush(ctx); err != nil {
		l.p.log.Warn("flush before producing a record alone", "err", err)
	}
	if p, ok := r.Context.(pinned); ok {
		p.alone = true
		r.Context = p
	} else {
		r.Context = producedAlone{context.Background()}
	}
	l.s.produce(ctx, r, promise)
	if err := l.s.client().Flush(ctx); err != nil {
		l.p.log.Warn("flush after producing a record alone", "err", err)
	}
}

// otherAcked accounts for a DLQ copy or a re-published copy of a signal.
func (l *loop) otherAcked(r *kgo.Record, err error) {
	if err != nil {
		if refusedByBroker(err) {
			l.p.refused.add(r, err)
		}
		l.produceFailed(r, err)
	}
}

// outboxAcked returns the promise of the outbox entry seq.
func (l *loop) outboxAcked(seq uint64) func(*kgo.Record, error) {
	return func(r *kgo.Record, err error) {
		if err == nil {
			return
		}
		if refusedByBroker(err) {
			l.refusedOutbox.Lock()
			if l.refusedOutbox.m == nil {
				l.refusedOutbox.m = make(map[uint64]error)
			}
			l.refusedOutbox.m[seq] = err
			l.refusedOutbox.Unlock()
		}
		l.produceFailed(r, err)
	}
}

// takeRefusedOutbox returns the refusal of the outbox entry seq and
// forgets it, or nil.
func (l *loop) takeRefusedOutbox(seq uint64) error {
	l.refusedOutbox.Lock()
	defer l.refusedOutbox.Unlock()
	err := l.refusedOutbox.m[seq]
	delete(l.refusedOutbox.m, seq)
	return err
}

// produceFailed accounts for a record the broker did not take. The session
// counts the failure and ends the cycle without committing; a missing ACL
// halts the processor, since retrying cannot heal it.
func (l *loop) produceFailed(r *kgo.Record, err error) {
	if fatal := notAuthorized("producing to "+r.Topic, err); fatal != nil {
		l.p.halt(fatal)
	}
	l.p.m.produceErrors.Inc()
	l.p.log.Warn("produce failed", "topic", r.Topic, "err", err)
}

// drainOutbox produces what the commands side queued (changelog records,
// DLQ records of bad commands, misrouted commands) inside this cycle. The
// applied offsets are read first: the commands side queues a batch's
// entries before it advances them, so every entry of a command below the
// offset read is taken now or was before. A changelog entry whose claim is
// gone is not produced (see outboxItem.claim); it is deleted with the
// cycle all the same.
func (l *loop) drainOutbox(ctx context.Context) {
	for _, ln := range l.lanes {
		ln.judged = ln.c.applied.Load()
	}
	items := l.p.outbox.take()
	for i := range items {
		it := &items[i]
		if it.stale(l.p.cfg.Topics.Changelog) {
			continue
		}
		if err := l.takeRefusedOutbox(it.seq); err != nil {
			l.p.log.Warn("outbox record refused by the broker; producing a replacement", "topic", it.e.Topic, "err", err)
			it.e = refusedEntry(it.e, l.p.cfg.Topics, l.p.lim, err)
		}
		l.s.produce(ctx, it.record(), l.outboxAcked(it.seq))
	}
	l.inflight = append(l.inflight, items...)
}

// backpressure pauses fetching of a lane holding more than HoldMaxBytes and
// resumes it below half.
func (l *loop) backpressure() {
	topic := string(l.p.cfg.Topics.Signals)
	var heldBytes int64
	for p, ln := range l.lanes {
		heldBytes += ln.q.bytes
		switch {
		case !ln.paused && ln.q.bytes > l.p.cfg.HoldMaxBytes:
			l.s.client().PauseFetchPartitions(map[string][]int32{topic: {p}})
			ln.paused = true
		case ln.paused && ln.q.bytes < l.p.cfg.HoldMaxBytes/2:
			l.s.client().ResumeFetchPartitions(map[string][]int32{topic: {p}})
			ln.paused = false
		}
	}
	l.p.heldBytes.Store(heldBytes)
}

func (l *loop) heldCount() int {
	n := 0
	for _, ln := range l.lanes {
		n += ln.q.len()
	}
	return n
}

// end ends the cycle. Held signals pin their partition's committed offset.
func (l *loop) end(ctx context.Context) error {
	pos := make(map[int32]position, len(l.lanes))
	for p, ln := range l.lanes {
		ps := position{meta: ln.c.meta(ln.judged)}
		// Refresh only a partition this claim has fetched from: its
		// committed offset was read when the assignment began, and no
		// offset commit may race that read (the new owner's offset fetch
		// waits for pending transactional commits to end). A lane whose
		// claim is gone must not be committed at all.
		ps.refresh = ps.meta != ln.committedMeta && ln.start.Offset >= 0 && !ln.c.revoked.Load()
		if h, ok := ln.q.peek(); ok {
			ps.held, ps.at = true, kgo.EpochOffset{Epoch: h.r.LeaderEpoch, Offset: h.r.Offset}
		}
		pos[p] = ps
	}
	committed, err := l.s.end(ctx, true, pos)
	if fatal := notAuthorized("ending a transaction", err); fatal != nil {
		l.p.m.txns.WithLabelValues(outcomeUnsure).Inc()
		return fatal
	}
	switch {
	case errors.Is(err, errOffsetsNotCommitted):
		// Output acknowledged, offsets not committed: the signals are
		// processed again by their next owner (at least once).
		l.p.m.txns.WithLabelValues(outcomeAbort).Inc()
		l.p.log.Warn("offset commit failed; signals will be processed again", "err", err)
		l.p.refused.forget(l.settledRefused)
		l.settledRefused = l.settledRefused[:0]
		l.delivered()
		return nil
	case err != nil:
		l.p.m.txns.WithLabelValues(outcomeUnsure).Inc()
		l.settledRefused = l.settledRefused[:0]
		l.p.outbox.putBack(l.inflight)
		l.inflight = l.inflight[:0]
		return fmt.Errorf("%w: %v", errReplaceSession, err)
	case !committed:
		l.p.m.txns.WithLabelValues(outcomeAbort).Inc()
		l.p.log.Info("cycle aborted; its signals will be fetched again")
		l.p.outbox.putBack(l.inflight)
		l.inflight = l.inflight[:0]
		for _, ln := range l.lanes {
			ln.c.fwd.takeBack(ln.mark) // not forwarded: decided again
		}
		l.settledRefused = l.settledRefused[:0] // decided again, refusals kept
		l.rewind()
		return nil
	}
	l.p.m.txns.WithLabelValues(outcomeCommit).Inc()
	l.p.refused.forget(l.settledRefused)
	l.settledRefused = l.settledRefused[:0]
	for p, ln := range l.lanes {
		if ps, ok := pos[p]; ok {
			ln.committedMeta = ps.meta
		}
	}
	l.delivered()
	return nil
}

// rewind drops every undecided signal and moves the fetch positions of
// all lanes back to the group's committed offsets, so that the aborted
// cycle's signals are fetched and decided again.
func (l *loop) rewind() {
	l.syncLanes() // a revocation may have ended the cycle: only rewind what is still ours
	topic := string(l.p.cfg.Topics.Signals)
	for _, ln := range l.lanes {
		ln.q.reset()
	}
	set := rewindOffsets(l.lanes, l.s.client().CommittedOffsets()[topic])
	l.s.client().SetOffsets(map[string]map[int32]kgo.EpochOffset{topic: set})
}

// rewindOffsets returns where each lane's partition must be consumed from
// again after an abort: its committed offset, or, for a partition the
// client knows no commit of, where the lane's consuming began. A lane that
// has fetched nothing is left alone: its committed offset may still be
// being fetched, and a SetOffsets then would win over it (a partition
// taken over from another instance would start again at 0, forwarding its
// whole history a second time).
func rewindOffsets(lanes map[int32]*lane, committed map[int32]kgo.EpochOffset) map[int32]kgo.EpochOffset {
	set := make(map[int32]kgo.EpochOffset, len(lanes))
	for p, ln := range lanes {
		if o, ok := committed[p]; ok {
			set[p] = o
		} else if ln.start.Offset >= 0 {
			set[p] = ln.start
		}
	}
	return set
}

// delivered clears the outbox entries produced in a cycle whose output is
// durable.
func (l *loop) delivered() {
	n := len(l.inflight)
	if n == 0 {
		return
	}
	if err := l.p.outbox.delivered(l.inflight[n-1].seq); err != nil {
		// Delivered but still stored: produced again after a restart.
		// Changelog records are idempotent by key; DLQ records carry
		// their source offset.
		l.p.log.Warn("unable to clear delivered outbox entries", "err", err)
	}
	l.inflight = l.inflight[:0]
}
