package fanout

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/topics"
)

// emitter produces what the signals loop decides, inside the session's
// current cycle: forwarded signals, DLQ copies, re-published records and
// outbox records, and accounts for each in its promise. It belongs to one
// loop (one session); promises run on franz-go's goroutines.
type emitter struct {
	s      session
	topics topics.Set
	// lim are the limits the session's producer was made with, live the
	// topics' limits as they are: see followLimits.
	lim       limits
	live      *liveLimits
	dlqBudget int
	refused   *refusals
	m         *metrics
	ev        EventListener
	halt      func(error)

	// outs are the routes' outputs, by route index.
	outs []string
	// forwardPromises (by route) and otherPromise are made once, not per
	// record, and counted by the session once (session.counted): a
	// forwarded signal allocates its output record and nothing else.
	forwardPromises []countedPromise
	otherPromise    countedPromise
	// outRecs are forwarded signals' output records, given back by their
	// promise: franz-go no longer touches a record once its promise has
	// run (it may even modify it), so forward reuses it.
	outRecs sync.Pool

	// refusedOutbox holds the outbox entries (by sequence number) the
	// broker refused, written by promises, read when the entries are
	// produced again: see poison.go.
	refusedOutbox struct {
		sync.Mutex
		m map[uint64]error
		// tries counts each entry's refusals (see maxRefusals).
		tries map[uint64]int
	}
	// refusedAny is set by a promise whose record the broker refused:
	// the cycle's end reads the limits again before anything refused is
	// decided again (followLimits).
	refusedAny atomic.Bool
}

// newEmitter makes the emitter of session s, whose producer was made
// with the limits lim, read from live; series are the routes'
// (metrics.routes).
func newEmitter(s session, set topics.Set, lim limits, live *liveLimits, refused *refusals, m *metrics, series []routeSeries, ev EventListener, halt func(error)) *emitter {
	e := &emitter{s: s, topics: set, lim: lim, live: live, dlqBudget: lim.deadLetterBudget(set.DLQ), refused: refused, m: m, ev: ev, halt: halt}
	for i, r := range set.AllRoutes() {
		forwarded := series[i].forwarded
		e.outs = append(e.outs, string(r.Out))
		e.forwardPromises = append(e.forwardPromises, s.counted(func(r *kgo.Record, err error) { e.forwarded(r, err, forwarded) }))
	}
	e.otherPromise = s.counted(e.otherAcked)
	return e
}

// forward produces r's copy to the output of route: key, value, headers
// and timestamp unchanged.
func (e *emitter) forward(ctx context.Context, r *kgo.Record, route int, alone bool) {
	out, _ := e.outRecs.Get().(*kgo.Record)
	if out == nil {
		out = new(kgo.Record)
	}
	*out = kgo.Record{
		Topic:     e.outs[route],
		Key:       r.Key,
		Value:     r.Value,
		Headers:   r.Headers,
		Timestamp: r.Timestamp,
	}
	e.produce(ctx, out, e.forwardPromises[route], alone)
}

// deadLetter sends r, read from source, to the DLQ with the reason and its
// origin in headers: a truncated copy when a whole one would not fit, a
// minimal one when a copy was refused before.
func (e *emitter) deadLetter(ctx context.Context, r *kgo.Record, source string, reason topics.Reason, err error, minimal bool) {
	var dl *kgo.Record
	if minimal {
		dl = minimalDeadLetter(e.topics.DLQ, e.dlqBudget, r, reason, err)
	} else {
		dl = deadLetterRecord(e.topics.DLQ, e.dlqBudget, r, reason, err)
	}
	e.ev.DeadLetter(DeadLetterInfo{Source: source, Reason: topics.Reason(headerValue(dl, topics.HeaderReason)),
		Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Err: err})
	e.produce(ctx, dl, e.otherPromise, false)
}

// republish sends r to the partition want that owns its key in its own
// topic; the verdict saw that it fits there with its extra header.
func (e *emitter) republish(ctx context.Context, r *kgo.Record, want int32, source string, alone bool) {
	e.ev.Misrouted(MisroutedInfo{Source: source, Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Want: want})
	e.produce(ctx, republishRecord(r, want), e.otherPromise, alone)
}

// produceOutbox produces the outbox record it, replaced first when the
// broker refused it before or it does not fit its topic's limit as it is
// (refusedEntry). A changelog record that cannot be made to fit halts the
// processor; it is produced all the same, so that the client refuses it,
// the cycle aborts and the entry stays in the store.
func (e *emitter) produceOutbox(ctx context.Context, it *outboxItem) {
	err := e.takeRefusedOutbox(it.seq)
	if r := it.record(); err == nil && !e.lim.fits(r) {
		err = fmt.Errorf("%w: %d bytes do not fit %s (max.message.bytes %d)", kerr.MessageTooLarge, batchBytes(r), r.Topic, e.lim.of(r.Topic))
		if now, rerr := e.live.fresh(ctx); rerr == nil && !now.equal(e.lim) {
			// Not trimmed against a limit that has changed: produced as
			// it is, the client refuses it, the cycle aborts, and the
			// next session, made with the limits as they are, produces
			// it (followLimits).
			err = nil
		}
	}
	if err != nil {
		ne, ferr := refusedEntry(it.e, e.topics, e.lim, err)
		if ferr != nil {
			e.halt(ferr)
		} else {
			it.e = ne
		}
	}
	e.produce(ctx, it.record(), e.s.counted(e.outboxPromise(it.seq)), false)
}

// produce produces r; alone, in a record batch of its own: what was
// buffered before is flushed first, and r right after. A broker refuses a
// whole batch for one bad record; alone, r is known to be refused for
// itself. Only records refused before take that slow path.
func (e *emitter) produce(ctx context.Context, r *kgo.Record, promise countedPromise, alone bool) {
	if !alone {
		e.s.produce(ctx, r, promise)
		return
	}
	_ = e.s.client().Flush(ctx) // a failure shows in the promises
	if p, ok := r.Context.(pinned); ok {
		p.alone = true
		r.Context = p
	} else {
		r.Context = producedAlone{context.Background()}
	}
	e.s.produce(ctx, r, promise)
	_ = e.s.client().Flush(ctx)
}

// forwarded accounts for a forwarded signal in its route's counter, then
// gives its output record back to forward. An allocation per forwarded
// signal, and the collection of it, were the largest per-signal cost of
// the processor beyond the passthrough's (BenchmarkForward, and the CPU
// ratio to passthrough-eos in make bench).
func (e *emitter) forwarded(r *kgo.Record, err error, forwarded prometheus.Counter) {
	defer e.reuse(r)
	if err != nil {
		e.failed(r, err, true)
		return
	}
	forwarded.Inc()
	if r.Offset%latencySample == 0 {
		e.m.forwardLatency.Observe(time.Since(r.Timestamp).Seconds())
	}
}

// reuse clears r, so that a pooled record keeps no fetched signal alive,
// and pools it.
func (e *emitter) reuse(r *kgo.Record) {
	*r = kgo.Record{}
	e.outRecs.Put(r)
}

// latencySample is how many forwarded signals share one observation of the
// forward latency: those whose output offset is a multiple of it are
// observed. A clock read per signal cost about 5% of the processor's CPU at
// a million signals per second; output offsets are independent of the
// latency, so the histogram stays a fair sample. The hold histogram
// samples the decided signals the same way, by input offset (a histogram
// observation per signal was about 1.5% of the processor's CPU).
const latencySample = 8

// otherAcked accounts for a DLQ copy or a re-published copy of a signal.
func (e *emitter) otherAcked(r *kgo.Record, err error) {
	if err != nil {
		e.failed(r, err, true)
	}
}

// outboxPromise returns the promise of the outbox entry seq.
func (e *emitter) outboxPromise(seq uint64) func(*kgo.Record, error) {
	return func(r *kgo.Record, err error) {
		if err == nil {
			return
		}
		if refusedByBroker(err) {
			e.refusedOutbox.Lock()
			if e.refusedOutbox.m == nil {
				e.refusedOutbox.m = make(map[uint64]error)
				e.refusedOutbox.tries = make(map[uint64]int)
			}
			e.refusedOutbox.m[seq] = err
			e.refusedOutbox.tries[seq]++
			tries := e.refusedOutbox.tries[seq]
			e.refusedOutbox.Unlock()
			if tries >= maxRefusals {
				e.halt(fmt.Errorf("the broker refused an outbox record for %s for the %d%s time, its max.message.bytes read at %d since the last: %w",
					r.Topic, tries, ordinal(tries), e.lim.of(r.Topic), err))
			}
		}
		e.failed(r, err, false)
	}
}

// takeRefusedOutbox returns the refusal of the outbox entry seq and
// forgets it, or nil.
func (e *emitter) takeRefusedOutbox(seq uint64) error {
	e.refusedOutbox.Lock()
	defer e.refusedOutbox.Unlock()
	err := e.refusedOutbox.m[seq]
	delete(e.refusedOutbox.m, seq)
	return err
}

// failed accounts for a record the broker did not take. The session counts
// the failure and ends the cycle without committing; a refusal of a
// signal's output is remembered (signalOutput); a missing ACL halts the
// processor, since retrying cannot heal it.
func (e *emitter) failed(r *kgo.Record, err error, signalOutput bool) {
	if fatal := notAuthorized("producing to "+r.Topic, err); fatal != nil {
		e.halt(fatal)
	}
	refused := refusedByBroker(err)
	if refused {
		e.refusedAny.Store(true)
	}
	if refused && signalOutput {
		if tries := e.refused.add(r, err); tries >= maxRefusals {
			e.halt(fmt.Errorf("the broker refused a record for %s for the %d%s time, its max.message.bytes read at %d since the last: %w",
				r.Topic, tries, ordinal(tries), e.lim.of(r.Topic), err))
		}
	}
	e.ev.ProduceFailed(ProduceFailedInfo{Topic: r.Topic, Err: err, Refused: refused})
}

// ordinal is the suffix of n in "1st", "2nd", "3rd", "4th".
func ordinal(n int) string {
	switch {
	case n%100 >= 11 && n%100 <= 13:
		return "th"
	case n%10 == 1:
		return "st"
	case n%10 == 2:
		return "nd"
	case n%10 == 3:
		return "rd"
	}
	return "th"
}

// followLimits makes the topics' limits, when they differ from those the
// session's producer was made with, replace the session: franz-go sizes a
// partition's record batches when its producer first meets it, so a
// limit raised would go on refusing what the topic takes, and one lowered
// would go on building batches the topic refuses. After a cycle in which
// the broker refused a record, the limits are read first: a refused
// record is never settled again against a limit read before its refusal.
// Refusals for size are forgotten with the session: they were refused
// under the old limits.
func (e *emitter) followLimits(ctx context.Context) error {
	now := e.live.now()
	if e.refusedAny.Swap(false) {
		// On a failure the limits stay as last read, and a record refused
		// again counts towards maxRefusals.
		now, _ = e.live.fresh(ctx)
	}
	if now.equal(e.lim) {
		return nil
	}
	e.refused.forgetTooLarge()
	return fmt.Errorf("%w: the topics' max.message.bytes changed", errReplaceSession)
}
