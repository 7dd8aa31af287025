package fanout

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/pkg/gate"
	"github.com/cohortgate/cohortgate/pkg/membership"
	"github.com/cohortgate/cohortgate/topics"
)

// loop is the signals side: one goroutine that owns a session and the
// lanes (one per route's input and owned partition). It decides every
// signal (rules.go), produces what they become (emit.go), produces what
// the commands side queued in the outbox, and ends a cycle every
// CommitInterval (end, with the session's Outcome).
type loop struct {
	cfg     *Config
	clk     *clock // reads the fetch and pass times: see clock.go
	s       session
	out     *emitter
	claims  *claims
	gate    *gate.Map
	outbox  *outbox
	refused *refusals
	m       *metrics
	series  []routeSeries // by route
	ev      EventListener
	rules   signalRules
	kp      keyPartition
	halt    func(error)
	// applierDone is closed when the commands side has exited: see
	// drainLast.
	applierDone <-chan struct{}
	// held and heldBytes publish what the lanes hold, for the metrics.
	held, heldBytes *atomic.Int64
	// stall is told what progress the loop makes (stall.go).
	stall *stallWatch

	inputs []string       // the routes' inputs, by route index
	route  map[string]int // input topic → route index
	parts  map[int32]*part
	// inflight are the outbox records produced in the current cycle; they
	// are deleted from the store once its output is durable.
	inflight []outboxItem
	// settledRefused are the signals of this cycle that had been refused
	// before and were settled otherwise: their refusals are forgotten once
	// the cycle's output is durable.
	settledRefused []*kgo.Record
	// passMono is the monotonic clock, read once per decision pass for
	// the hold histogram.
	passMono int64
	// carried says the current cycle produced a record: only such a
	// cycle's abort is a failure to progress.
	carried bool
	// hurry is set when the commands side waits for the open cycle to
	// end (forwarded.latest: a leave of a user with a signal forwarded
	// in it): the cycle ends after the step in progress instead of at
	// CommitInterval, its poll cut short (pollCancel).
	hurry atomic.Bool
	// pollCancel cancels the poll in progress; nil between polls.
	pollCancel atomic.Pointer[context.CancelFunc]
}

// newLoop makes the loop of session s.
func newLoop(cfg *Config, clk *clock, s session, out *emitter) *loop {
	l := &loop{cfg: cfg, clk: clk, s: s, out: out, route: make(map[string]int), parts: make(map[int32]*part)}
	for i, in := range cfg.Topics.Inputs() {
		l.inputs = append(l.inputs, string(in))
		l.route[string(in)] = i
	}
	return l
}

// part is the loop's state for one owned partition number: its claim,
// shared by a lane per route.
type part struct {
	c     *claim
	lanes []*lane // by route
	// judged is the claim's applied offset read just before the outbox was
	// last drained: the changelog records of every command below it are in
	// this cycle or an earlier one. It goes into the offset metadata.
	judged int64
	// pass collects the signals forwarded in the current decision pass,
	// on every route, handed to the claim's record at its end; the
	// cycle's outcome settles them (forwarded.settle).
	pass []fwd
}

// lane is the loop's state for one owned partition of one route's input.
type lane struct {
	q      queue
	paused bool
	// start is where this claim's consuming began (the offset of the first
	// record fetched for it), or -1 before any record: where an abort
	// rewinds a partition the group has no commit for.
	start kgo.EpochOffset
	// committedMeta is the offset metadata last committed for the lane.
	committedMeta string
}

// run cycles until ctx is done, then ends the last cycle with a commit so
// that everything decided so far is durable. Produces and the final commit
// run on a context that outlives ctx: shutting down finishes in-flight work.
func (l *loop) run(ctx context.Context) error {
	work := context.WithoutCancel(ctx)
	l.stall.loopStarted()
	for {
		if err := l.s.begin(); err != nil {
			return fmt.Errorf("%w: unable to begin: %v", errReplaceSession, err)
		}
		deadline := time.Now().Add(l.cfg.CommitInterval)
		for ctx.Err() == nil && time.Now().Before(deadline) && !l.hurry.Load() {
			if err := l.step(ctx, work, deadline); err != nil {
				return err
			}
		}
		// A stop that comes while this cycle ends gets one more cycle:
		// only one that drained what the commands side applied last
		// commits how far it judged them, and without it the next start
		// reads those commands again.
		stopping := ctx.Err() != nil
		if stopping {
			l.drainLast(work)
		}
		if err := l.end(work); err != nil {
			return err
		}
		// A hurry asked for before the end was for the cycle it ended:
		// the signals a waiter looks for are pending only until then.
		l.hurry.Store(false)
		l.s.allowRebalance()
		if stopping {
			return nil
		}
		if err := l.out.followLimits(work); err != nil {
			return err
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
	case <-l.applierDone:
	case <-time.After(shutdownDrainWait):
		l.cfg.Logger.Warn("the commands side did not stop in time; its last records go out at the next start")
	}
	l.drainOutbox(ctx)
}

// step polls once and decides what it can.
func (l *loop) step(ctx, work context.Context, deadline time.Time) error {
	l.syncParts()
	wait := time.Until(deadline)
	if l.holding() && wait > l.cfg.AlignInterval {
		wait = l.cfg.AlignInterval // held signals: look again soon
	}
	pollCtx, cancel := context.WithTimeout(ctx, wait)
	// Published before the hurry is read: a hurry asked for meanwhile
	// either sees this cancel or is seen here.
	l.pollCancel.Store(&cancel)
	if l.hurry.Load() {
		cancel()
	}
	fetches := l.s.poll(pollCtx, l.cfg.MaxPollRecords)
	l.pollCancel.Store(nil)
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
// Parts are synced first: the poll may have run the assignment callback.
func (l *loop) take(fetches kgo.Fetches) {
	l.syncParts()
	fetches.EachError(func(t string, p int32, err error) {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return
		}
		if fatal := notAuthorized(fmt.Sprintf("fetching %s[%d]", t, p), err); fatal != nil {
			l.halt(fatal)
			return
		}
		if errors.Is(err, kerr.InconsistentGroupProtocol) {
			// Retrying cannot help: the group's members run other
			// routes, and go on while this instance stays out.
			var inputs []string
			for _, in := range l.cfg.Topics.Inputs() {
				inputs = append(inputs, string(in))
			}
			l.halt(&RoutesDifferError{Group: l.cfg.Group, Inputs: inputs, Protocol: routesProtocol(inputs), Err: err})
			return
		}
		l.cfg.Logger.Warn("fetch error", "topic", t, "partition", p, "err", err)
		if _, owned := l.route[t]; owned && l.parts[p] != nil {
			l.stall.fetchFailed(t, p, err)
		}
	})
	now := l.clk.read()
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		if len(fp.Records) == 0 {
			return
		}
		route, ok := l.route[fp.Topic]
		pt := l.parts[fp.Partition]
		if !ok || pt == nil {
			// Fetched for a partition whose claim is gone: the new
			// owner fetches it again from the committed offset.
			return
		}
		l.stall.fetched(fp.Topic, fp.Partition)
		ln := pt.lanes[route]
		in := 0
		for _, r := range fp.Records {
			if r.Attrs.IsControl() {
				continue // a transaction marker: no signal, but a position
			}
			if ln.start.Offset < 0 {
				ln.start = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset}
			}
			ln.q.push(r, now)
			in++
		}
		l.series[route].in.Add(float64(in))
		// The last record, a marker included, is the position: a
		// partition ending with a marker is caught up at 0, not 1.
		last := fp.Records[len(fp.Records)-1].Offset
		l.m.lag.WithLabelValues(fp.Topic, strconv.Itoa(int(fp.Partition))).Set(float64(max(fp.HighWatermark-last-1, 0)))
	})
}

// syncParts makes the parts match the claims: a part whose claim was
// revoked or replaced is dropped with everything its lanes held.
func (l *loop) syncParts() {
	for p, pt := range l.parts {
		if cur := l.claims.get(p); cur != pt.c {
			l.dropPart(p, pt)
		}
	}
	for _, c := range l.claims.all() {
		if l.parts[c.partition] == nil {
			c.fwd.setHurry(l.hurryCycle)
			pt := &part{c: c, judged: c.judgedBelow, lanes: make([]*lane, len(l.inputs))}
			for i := range pt.lanes {
				pt.lanes[i] = &lane{start: kgo.EpochOffset{Epoch: -1, Offset: -1}}
			}
			l.parts[c.partition] = pt
		}
	}
}

// hurryCycle asks for the open cycle to end after the step in progress.
func (l *loop) hurryCycle() {
	l.hurry.Store(true)
	if cancel := l.pollCancel.Load(); cancel != nil {
		(*cancel)()
	}
}

func (l *loop) dropPart(p int32, pt *part) {
	for route, ln := range pt.lanes {
		if ln.paused {
			l.s.client().ResumeFetchPartitions(map[string][]int32{l.inputs[route]: {p}})
		}
		ln.q.reset()
		l.m.lag.DeleteLabelValues(l.inputs[route], strconv.Itoa(int(p)))
	}
	delete(l.parts, p)
	l.stall.dropped(p)
}

func (l *loop) holding() bool {
	for _, pt := range l.parts {
		for _, ln := range pt.lanes {
			if ln.q.len() > 0 {
				return true
			}
		}
	}
	return false
}

// decideAll decides, lane by lane, every signal at the head of its lane
// that can be decided now. A signal that must wait blocks those behind it
// in its lane: offsets are committed in order. The lanes of one partition
// share its claim's alignment and record of forwarded signals.
func (l *loop) decideAll(ctx context.Context) {
	// One clock read per pass for the hold histogram: per signal, the
	// clock was a measurable share of the processor's CPU.
	l.passMono = l.clk.monoNow()
	for p, pt := range l.parts {
		c := pt.c
		// Waiting is not the loop's to answer for while the partition
		// catches up (Ready says so) or while a transaction left open on
		// its commands holds it (the broker bounds that).
		exempt := !c.caughtUp.Load() || c.openTxn.Load()
		if !pt.holding() {
			l.stall.deciding(p, false, false, exempt, 0)
			continue
		}
		c.fwd.begin() // before any gate read of the pass: see forwarded
		var av alignView
		av.through, av.known = c.alignedThrough()
		decided := false
		for route, ln := range pt.lanes {
			for {
				h, ok := ln.q.peek()
				if !ok || !l.decide(ctx, pt, route, h, av) {
					break
				}
				ln.q.pop()
				decided = true
			}
		}
		c.fwd.end(pt.pass)
		pt.pass = pt.pass[:0]
		l.stall.deciding(p, pt.holding(), decided, exempt, c.applied.Load())
	}
	l.held.Store(int64(l.heldCount()))
}

func (pt *part) holding() bool {
	for _, ln := range pt.lanes {
		if ln.q.len() > 0 {
			return true
		}
	}
	return false
}

// decide settles one signal of route by its verdict (rules.go), reporting
// false when it must wait.
func (l *loop) decide(ctx context.Context, pt *part, route int, h held, av alignView) bool {
	r, c := h.r, pt.c
	rfl, refused := l.refused.take(r)
	v := l.rules.decide(l.kp, r, route, rfl, refused, h.seenNs, av)
	v = l.recheck(ctx, r, route, h.fetchedMono, v, refused)
	if v.act == actHold {
		return false
	}
	if refused {
		l.settledRefused = append(l.settledRefused, r)
	}
	switch v.act {
	case actDeadLetter:
		l.carried = true
		l.out.deadLetter(ctx, r, SourceSignals, v.reason, v.err, v.minimal)
	case actRepublish:
		l.carried = true
		l.out.republish(ctx, r, v.want, SourceSignals, v.alone)
	case actGate:
		c.publishDeciding(route, r.Offset, v.tsNs) // before asking the gate: see claim
		// A fair sample of the hold: input offsets are independent of it.
		if r.Offset%latencySample == 0 {
			l.m.holdSeconds.Observe(float64(l.passMono-h.fetchedMono) / 1e9)
		}
		if !l.gate.Allows(v.user, uint64(v.tsNs)) {
			l.series[route].droppedLeft.Inc()
			return true
		}
		pt.pass = append(pt.pass, fwd{user: v.user, ts: v.tsNs})
		l.carried = true
		l.out.forward(ctx, r, route, v.alone)
	}
	return true
}

// drainOutbox produces what the commands side queued (changelog records,
// DLQ records of bad commands, misrouted commands) inside this cycle. The
// applied offsets are read first: the commands side queues a batch's
// records before it advances them, so every record of a command below the
// offset read is taken now or was before. A changelog record whose claim
// is gone is not produced (see outboxItem.owner); it is deleted with the
// cycle all the same.
func (l *loop) drainOutbox(ctx context.Context) {
	for _, pt := range l.parts {
		pt.judged = pt.c.applied.Load()
	}
	items := l.outbox.take()
	for i := range items {
		if !items[i].stale(l.cfg.Topics.Changelog) {
			l.carried = true
			l.out.produceOutbox(ctx, &items[i])
		}
	}
	l.inflight = append(l.inflight, items...)
}

// backpressure pauses fetching of a lane holding more than HoldMaxBytes and
// resumes it below half.
func (l *loop) backpressure() {
	var heldBytes int64
	for p, pt := range l.parts {
		for route, ln := range pt.lanes {
			heldBytes += ln.q.bytes
			switch {
			case !ln.paused && ln.q.bytes > l.cfg.HoldMaxBytes:
				l.s.client().PauseFetchPartitions(map[string][]int32{l.inputs[route]: {p}})
				ln.paused = true
			case ln.paused && ln.q.bytes < l.cfg.HoldMaxBytes/2:
				l.s.client().ResumeFetchPartitions(map[string][]int32{l.inputs[route]: {p}})
				ln.paused = false
			}
		}
	}
	l.heldBytes.Store(heldBytes)
}

func (l *loop) heldCount() int {
	n := 0
	for _, pt := range l.parts {
		for _, ln := range pt.lanes {
			n += ln.q.len()
		}
	}
	return n
}

// end ends the cycle, and is the one place that acts on its Outcome: the
// outbox records it produced are delivered (deleted from the store) or
// put back for the next cycle; refusals it settled are forgotten or kept;
// an aborted cycle's forwarded signals are taken back from the claims'
// records and its signals fetched again; an unknown outcome replaces the
// session.
func (l *loop) end(ctx context.Context) error {
	pos := l.positions()
	out, err := l.s.end(ctx, pos)
	if fatal := notAuthorized("ending a transaction", err); fatal != nil {
		l.ev.CycleEnd(CycleInfo{Outcome: Unknown, Err: err})
		return fatal
	}
	l.ev.CycleEnd(CycleInfo{Outcome: out, Err: err})
	l.stall.cycleEnded(out, l.carried, err)
	l.carried = false
	for _, pt := range l.parts {
		pt.c.fwd.settle(out)
	}
	if out.outputDurable() {
		l.refused.forget(l.settledRefused)
		l.delivered()
	} else {
		l.outbox.putBack(l.inflight)
	}
	l.inflight, l.settledRefused = l.inflight[:0], l.settledRefused[:0]
	switch out {
	case Committed:
		for p, pt := range l.parts {
			for route, ln := range pt.lanes {
				if ps, ok := pos[l.inputs[route]][p]; ok {
					ln.committedMeta = ps.meta
				}
			}
		}
	case Aborted:
		l.rewind()
	case Unknown:
		return fmt.Errorf("%w: %v", errReplaceSession, err)
	}
	return nil
}

// positions are what the cycle asks to commit, per input topic and
// partition: the claim's offset metadata, and the lane's first held
// signal, which pins the committed offset.
func (l *loop) positions() map[string]map[int32]position {
	pos := make(map[string]map[int32]position, len(l.inputs))
	for _, in := range l.inputs {
		pos[in] = make(map[int32]position, len(l.parts))
	}
	for p, pt := range l.parts {
		meta := pt.c.meta(pt.judged)
		for route, ln := range pt.lanes {
			ps := position{meta: meta}
			// Refresh only a partition whose offsets the group has
			// answered for this claim (it fetched a record, or the offset
			// fetch told the claim): its committed offset was read then,
			// and no offset commit may race that read (the new owner's
			// offset fetch waits for pending transactional commits to
			// end). A partition that sees commands and no signal (a bulk
			// leave) is refreshed all the same: without it, the next
			// start would read its commands again from the offset judged
			// before. A lane whose claim is gone must not be committed at
			// all.
			fetched := pt.c.offsets[route].Load()
			ps.refresh = ps.meta != ln.committedMeta && (ln.start.Offset >= 0 || fetched != offsetsUnknown) && !pt.c.revoked.Load()
			ps.uncommitted = fetched == offsetsNone
			if h, ok := ln.q.peek(); ok {
				ps.held, ps.at = true, kgo.EpochOffset{Epoch: h.r.LeaderEpoch, Offset: h.r.Offset}
			}
			pos[l.inputs[route]][p] = ps
		}
	}
	return pos
}

// rewind drops every undecided signal and moves the fetch positions of
// all lanes back to the group's committed offsets, so that the aborted
// cycle's signals are fetched and decided again.
func (l *loop) rewind() {
	l.syncParts() // a revocation may have ended the cycle: only rewind what is still ours
	committed := l.s.committed()
	set := make(map[string]map[int32]kgo.EpochOffset, len(l.inputs))
	for route, in := range l.inputs {
		lanes := make(map[int32]*lane, len(l.parts))
		for p, pt := range l.parts {
			pt.lanes[route].q.reset()
			lanes[p] = pt.lanes[route]
		}
		set[in] = rewindOffsets(lanes, committed[in])
	}
	l.s.client().SetOffsets(set)
}

// rewindOffsets returns where each lane's partition of one input must be
// consumed from again after an abort: its committed offset, or, for a
// partition the client knows no commit of, where the lane's consuming
// began. A lane that has fetched nothing is left alone: its committed
// offset may still be being fetched, and a SetOffsets then would win over
// it (a partition taken over from another instance would start again at 0,
// forwarding its whole history a second time).
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

// delivered deletes from the store the outbox records produced in a cycle
// whose output is durable.
func (l *loop) delivered() {
	n := len(l.inflight)
	if n == 0 {
		return
	}
	err := l.outbox.delivered(l.inflight[n-1].seq)
	switch {
	case errors.Is(err, membership.ErrFailed):
		// The store can no longer write: the commands side would halt at
		// its next batch; halting now says so without waiting for one.
		l.halt(fmt.Errorf("unable to clear delivered outbox entries: %w", err))
	case err != nil:
		// Delivered but still stored: produced again after a restart.
		// Changelog records are idempotent by key; DLQ records carry
		// their source offset.
		l.cfg.Logger.Warn("unable to clear delivered outbox entries", "err", err)
	}
}

// recheck settles again a verdict (of r, read from the input of route at
// fetchedMono, the monotonic clock's ns) whose output the topics' limits shape: a signal too
// large to forward, one whose DLQ copy is cut to the DLQ's limit, a
// misrouted one too large to re-publish. Such a verdict stands only if
// the session's limits are those of a read made after r was fetched;
// otherwise r waits for the next session (emitter.followLimits replaces
// this one at the cycle's end), and while the limits cannot be read it
// waits too. A refused record was refused under the session's limits,
// which followLimits compared with the topics' since: its verdict stands.
func (l *loop) recheck(ctx context.Context, r *kgo.Record, route int, fetchedMono int64, v verdict, refused bool) verdict {
	e := l.out
	switch {
	case refused:
		return v
	case v.act == actDeadLetter && v.reason != topics.ReasonRecordTooLarge:
		if batchBytes(deadLetterRecord(e.topics.DLQ, math.MaxInt, r, v.reason, v.err)) <= e.dlqBudget {
			return v // a whole copy
		}
	case v.act != actDeadLetter:
		return v
	}
	if now, err := e.live.since(ctx, fetchedMono); err != nil || !now.equal(e.lim) {
		return verdict{act: actHold} // a failure is logged by the watcher (liveLimits.watch)
	}
	return v
}
