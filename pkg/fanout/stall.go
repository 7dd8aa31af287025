package fanout

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// stallWatch says when the signals side loops without progress (README,
// "What it promises", 10): the processor is then not ready, and it halts
// when the stall outlasts Config.StallHalt. It knows four stalls, each a
// streak that begins with a failure and ends with progress:
//
//   - aborts: cycles that carry a record abort (or end with an unknown
//     outcome), and none that carries one commits. An empty cycle that
//     commits between them is no progress: after an abort the rewound
//     records may not be fetched again within the next cycle.
//   - fetch: fetches of an owned input partition fail, and none brings
//     records.
//   - held: a caught-up partition holds signals, decides none, and its
//     commands applied do not move (signals waiting while a backlog of
//     commands is applied, a bulk leave job's, wait on progress). A
//     signal waits out Grace, and one stamped ahead of the clock up to
//     MaxFutureSkew more: that wait is no stall, so this one counts from
//     StallTimeout past both. Signals held by a transaction left open on
//     the partition's commands are not a stall of the processor: the
//     broker aborts such a transaction within transaction.max.timeout.ms,
//     and the wait is reported on its own (OpenTransaction).
//   - cycle: no cycle ended, though a cycle ends every CommitInterval
//     even with nothing to do (a poll, a flush or an end that does not
//     return); not while the gate is restored, which the group's
//     assignment waits for (restoreStarted).
//
// Failures of the first two come in bursts (a fetch is retried within
// franz-go's retry backoff, under 3 s; an aborted cycle's records come
// back within a few cycles), so a streak with no failure for
// stallQuiet also ends (for aborts, once a cycle has ended since the
// last: a slow cycle that will abort again is not quiet): nothing is
// being tried, so nothing is stuck trying. Whatever then waits without
// being tried is a held or a cycle stall.
//
// Durations are measured on the monotonic clock (now reads
// Config.Monotonic): a step of the wall clock neither starts nor ends a
// stall.
//
// The signals loop reports what happens (loopStarted, cycleEnded,
// fetchFailed, fetched, deciding, dropped, loopStopped) and the
// processor's events report produce failures (listener); the watch's own
// goroutine (run, check) assesses every tick, reports a stall's start and
// end to the EventListener and publishes it for Ready (current). All but
// check are safe for concurrent use.
type stallWatch struct {
	after     time.Duration // Config.StallTimeout: aborts, fetch, cycle
	heldAfter time.Duration // after + Grace + MaxFutureSkew: held
	haltAfter time.Duration // Config.StallHalt; negative: never
	now       func() time.Time
	ev        EventListener // set before run

	// produceErr is the latest produce failure, the reason a cycle
	// aborts, which its end does not say.
	produceErr atomic.Pointer[ProduceFailedInfo]

	mu struct {
		sync.Mutex
		aborts streak
		fetch  map[inputPartition]*streak
		held   map[int32]*streak
		// cycle is when the last cycle ended (or the loop started);
		// zero while no loop runs (a session joining its group).
		cycle time.Time
		// restoring says the gate is being restored: the group's
		// assignment waits for it, and with it the cycle's end (see
		// restoreStarted).
		restoring bool
	}

	// reported is the stall last reported to the listener; run's alone.
	reported *Stall
	// cur is the stall in force, nil when none: what Ready says.
	cur atomic.Pointer[Stall]
}

// stallQuiet ends a streak of aborts or fetch failures with no failure
// for this long: franz-go retries a failed fetch within its retry
// backoff (250 ms growing to 2.5 s), and an aborted cycle's records are
// fetched again at once.
const stallQuiet = 5 * time.Second

// inputPartition is one partition of one route's input.
type inputPartition struct {
	topic     string
	partition int32
}

// streak is a run of failures: since the first, last the latest, err
// what the latest said; for held, applied is the commands offset applied
// when it began. The zero streak is none.
type streak struct {
	since, last time.Time
	err         error
	applied     int64
}

func (s *streak) fail(now time.Time, err error) {
	if s.since.IsZero() {
		s.since = now
	}
	s.last, s.err = now, err
}

func newStallWatch(cfg *Config) *stallWatch {
	// Instants are the monotonic time as a time.Time from one origin, so
	// that streaks compare with Sub; only differences mean anything.
	origin, mono := time.Now(), cfg.Monotonic
	w := &stallWatch{after: cfg.StallTimeout, heldAfter: cfg.StallTimeout + cfg.grace() + cfg.MaxFutureSkew,
		haltAfter: cfg.StallHalt, now: func() time.Time { return origin.Add(mono()) }}
	w.mu.fetch = make(map[inputPartition]*streak)
	w.mu.held = make(map[int32]*streak)
	return w
}

// listener is what the watch hears of the processor's events: the
// produce failures that abort cycles.
func (w *stallWatch) listener() EventListener {
	return EventListener{ProduceFailed: func(i ProduceFailedInfo) { w.produceErr.Store(&i) }}
}

// loopStarted: a signals loop begins its first cycle.
func (w *stallWatch) loopStarted() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.mu.cycle = w.now()
}

// loopStopped: the signals loop returned (its session is replaced, or the
// run ends); until the next one starts no cycle is expected, and what it
// held and fetched is gone. A streak of aborts goes on: sessions replaced
// one after the other (each ending with an unknown outcome) are no
// progress.
func (w *stallWatch) loopStopped() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.mu.cycle = time.Time{}
	clear(w.mu.fetch)
	clear(w.mu.held)
}

// restoreStarted: the gate's restore begins. Until it ends no cycle
// stall counts: a claim waits for the restore (see regate), and while
// the group's assignment waits the session cannot end a cycle. That is
// no loop without progress but the restore's own, minutes long at 100M
// members, which the processor reports as it goes and during which it is
// not ready; a halt there would restart it into the same restore, again
// and again.
func (w *stallWatch) restoreStarted() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.mu.restoring = true
}

// restoreEnded: the gate's restore ended; a cycle stall counts from now.
func (w *stallWatch) restoreEnded() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.mu.restoring = false
	if !w.mu.cycle.IsZero() {
		w.mu.cycle = w.now()
	}
}

// reset forgets every streak: a run begins (before its goroutines). A
// gate restore the run began before it is still one.
func (w *stallWatch) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.mu.cycle, w.mu.aborts = time.Time{}, streak{}
	clear(w.mu.fetch)
	clear(w.mu.held)
}

// cycleEnded: a cycle ended with out; carried says it produced a record.
// An aborts streak counts from the beginning of its first cycle (the end
// of the one before): a cycle whose produces take long to fail was a
// cycle stall until it ended, and is the same stall once it has.
func (w *stallWatch) cycleEnded(out Outcome, carried bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now, began := w.now(), w.mu.cycle
	w.mu.cycle = now
	switch {
	case !carried:
	case out == Aborted || out == Unknown:
		if pf := w.produceErr.Swap(nil); err == nil && pf != nil {
			err = fmt.Errorf("produce to %s failed: %w", pf.Topic, pf.Err)
		}
		if w.mu.aborts.since.IsZero() && !began.IsZero() {
			w.mu.aborts.since = began
		}
		w.mu.aborts.fail(now, err)
	default:
		w.mu.aborts = streak{}
	}
	w.produceErr.Store(nil) // what failed in this cycle was read
}

// fetchFailed: a fetch of an owned input partition failed.
func (w *stallWatch) fetchFailed(topic string, partition int32, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := inputPartition{topic, partition}
	s := w.mu.fetch[k]
	if s == nil {
		s = new(streak)
		w.mu.fetch[k] = s
	}
	s.fail(w.now(), err)
}

// fetched: a fetch brought records of an owned input partition.
func (w *stallWatch) fetched(topic string, partition int32) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.mu.fetch, inputPartition{topic, partition})
}

// deciding: a decision pass went over an owned partition. It holds
// signals or not, decided at least one or not, has applied its commands
// below applied; exempt says its waiting is not the processor's (not
// caught up yet: Ready says so already; held by a transaction left open
// on its commands).
func (w *stallWatch) deciding(partition int32, holding, decided, exempt bool, applied int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !holding || decided || exempt {
		delete(w.mu.held, partition)
		return
	}
	if s, ok := w.mu.held[partition]; !ok || s.applied != applied {
		w.mu.held[partition] = &streak{since: w.now(), applied: applied}
	}
}

// dropped: the partition is no longer owned.
func (w *stallWatch) dropped(partition int32) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.mu.held, partition)
	for k := range w.mu.fetch {
		if k.partition == partition {
			delete(w.mu.fetch, k)
		}
	}
}

// assess returns the stall in force at now, nil when none: of several, the
// longest. Streaks ended by quiet are forgotten.
func (w *stallWatch) assess(now time.Time) *Stall {
	w.mu.Lock()
	defer w.mu.Unlock()
	var worst *Stall
	consider := func(s *Stall) {
		if worst == nil || s.Since.Before(worst.Since) {
			worst = s
		}
	}
	if a := &w.mu.aborts; !a.since.IsZero() {
		switch {
		case now.Sub(a.last) >= stallQuiet && w.mu.cycle.After(a.last):
			*a = streak{}
		case now.Sub(a.since) >= w.after:
			consider(&Stall{Cause: StallAborts, Partition: -1, Since: a.since, Err: a.err})
		}
	}
	for k, s := range w.mu.fetch {
		switch {
		case now.Sub(s.last) >= stallQuiet:
			delete(w.mu.fetch, k)
		case now.Sub(s.since) >= w.after:
			consider(&Stall{Cause: StallFetch, Topic: k.topic, Partition: k.partition, Since: s.since, Err: s.err})
		}
	}
	for p, s := range w.mu.held {
		if now.Sub(s.since) >= w.heldAfter {
			consider(&Stall{Cause: StallHeld, Partition: p, Since: s.since})
		}
	}
	if c := w.mu.cycle; !c.IsZero() && !w.mu.restoring && now.Sub(c) >= w.after {
		consider(&Stall{Cause: StallCycle, Partition: -1, Since: c})
	}
	return worst
}

// check assesses at now, reports a stall that began or ended (or changed)
// since the last check, publishes it, and returns a *StallError when it
// has lasted haltAfter.
func (w *stallWatch) check(now time.Time) error {
	s := w.assess(now)
	if was := w.reported; was != nil && (s == nil || !s.same(was)) {
		w.ev.Stall(StallInfo{Stall: *was, Lasted: now.Sub(was.Since), Ended: true})
		w.reported = nil
	}
	if s != nil && w.reported == nil {
		w.ev.Stall(StallInfo{Stall: *s, Lasted: now.Sub(s.Since)})
	}
	w.reported = s
	w.cur.Store(s)
	if s != nil && w.haltAfter >= 0 && now.Sub(s.Since) >= w.haltAfter {
		return &StallError{Stall: *s, Lasted: now.Sub(s.Since)}
	}
	return nil
}

// current is the stall in force, nil when none.
func (w *stallWatch) current() *Stall { return w.cur.Load() }

// stalledFor is how long the stall in force has lasted, 0 when none.
func (w *stallWatch) stalledFor() time.Duration {
	if s := w.cur.Load(); s != nil {
		return w.lasted(s)
	}
	return 0
}

// lasted is how long s has lasted.
func (w *stallWatch) lasted(s *Stall) time.Duration { return w.now().Sub(s.Since) }

// run checks every tick until ctx ends or a stall has lasted haltAfter,
// whose *StallError it returns. A stall in force when it returns is no
// longer: the run it watched is over.
func (w *stallWatch) run(ctx context.Context) error {
	t := time.NewTicker(stallTick(w.after))
	defer t.Stop()
	defer w.cur.Store(nil)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := w.check(w.now()); err != nil {
			return err
		}
	}
}

// stallTick is how often the watch assesses: a tenth of the bound, at most
// a second, so a stall is seen within that much past its bound.
func stallTick(after time.Duration) time.Duration {
	return min(max(after/10, 10*time.Millisecond), time.Second)
}
