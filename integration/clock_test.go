package integration

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cohortgate/cohortgate/pkg/fanout"
	"github.com/cohortgate/cohortgate/topics"
)

// steppedClock is a wall clock that an operator or NTP steps: the true
// time plus an offset the test changes at any instant. The processor's
// monotonic clock is left alone, as a step of the wall clock leaves the
// kernel's monotonic clock alone.
type steppedClock struct {
	offset atomic.Int64 // ns
	reads  atomic.Int64 // readings taken while the offset was not 0
}

func (c *steppedClock) now() time.Time {
	d := time.Duration(c.offset.Load())
	if d != 0 {
		c.reads.Add(1)
	}
	return time.Now().Add(d)
}

// step sets the clock to the true time plus d.
func (c *steppedClock) step(d time.Duration) {
	c.reads.Store(0)
	c.offset.Store(int64(d))
}

// TestClockJumpForwardAndBack: the processor's clock jumps a minute ahead
// for a moment, then NTP steps it back. Observations of the commands made
// during the jump were stamped a minute in the future, so for the next
// minute every signal was decided as soon as it was fetched, without its
// grace: a leave acknowledged a moment after a signal's event time, grace
// 5 s, did not stop the signal. Observations are now stamped by a reading that
// does not follow a forward step at once (clock.go).
func TestClockJumpForwardAndBack(t *testing.T) {
	e := newEnv(t, 1)
	var clk steppedClock
	cfg := e.config()
	cfg.Grace = 5 * time.Second
	cfg.Now = clk.now
	pr := e.start(t.TempDir(), cfg)
	pr.waitReady(t, 1)
	e.signal(1, time.Now().Add(-cfg.Grace), "before-the-jump")
	e.waitDecided()

	clk.step(time.Minute)
	// The aligner reads the clock at every observation (10 ms): wait for
	// enough of them to be sure some were made during the jump.
	eventually(t, 30*time.Second, func() error {
		if n := clk.reads.Load(); n < 50 {
			return fmt.Errorf("the jumped clock was read %d times", n)
		}
		return nil
	})
	clk.step(0)

	sent := time.Now().Truncate(time.Millisecond) // a record's timestamp is in ms
	e.signal(2, sent, "within-the-grace-of-the-leave")
	// The leave comes once the processor has the signal, held or (the
	// bug) already decided, well within the signal's grace.
	eventually(t, 30*time.Second, func() error {
		if metricValue(t, pr.reg, fanout.MetricHeldSignals, nil) >= 1 || hasValue(e.readAll(e.set.Cohort), "within-the-grace-of-the-leave") {
			return nil
		}
		return errors.New("the signal is neither held nor forwarded yet")
	})
	e.command(topics.Leave, 2, sent)
	if acked := time.Since(sent); acked >= cfg.Grace {
		t.Fatalf("the leave was acknowledged %v after the signal's event time, not within its grace %v: the test proves nothing", acked, cfg.Grace)
	}
	e.waitDecided()
	if hasValue(e.readAll(e.set.Cohort), "within-the-grace-of-the-leave") {
		t.Fatalf("a signal was forwarded although its user's leave was acknowledged within its grace of %v, after the clock jumped ahead and back", cfg.Grace)
	}
	if dlq := e.readAll(e.set.DLQ); len(dlq) > 0 {
		t.Fatalf("dead-lettered %d records, e.g. reason %s", len(dlq), header(dlq[0], topics.HeaderReason))
	}
}

// TestClockStepBackPastSkew: a correctly stamped signal waiting out its
// grace was judged against --max-future-skew again on every pass, so once
// the clock stepped back by more than the skew it went to the DLQ as
// timestamp_future_skew; one fetched after the step went there at once.
// A signal is now judged by S4 once, when fetched, against a reading that
// does not follow a backward step: both are forwarded, later.
func TestClockStepBackPastSkew(t *testing.T) {
	e := newEnv(t, 1)
	var clk steppedClock
	cfg := e.config()
	cfg.Grace = 2 * time.Second
	cfg.MaxFutureSkew = time.Second
	cfg.Now = clk.now
	pr := e.start(t.TempDir(), cfg)
	pr.waitReady(t, 1)
	e.signal(1, time.Now(), "held-when-the-clock-stepped")
	const step = 3 * time.Second
	clk.step(-step)
	e.signal(2, time.Now(), "fetched-after-the-step")
	eventually(t, step+cfg.Grace+30*time.Second, func() error {
		if dlq := e.readAll(e.set.DLQ); len(dlq) > 0 {
			t.Fatalf("dead-lettered %d records after the clock stepped back by %v, e.g. %q for %s",
				len(dlq), step, dlq[0].Value, header(dlq[0], topics.HeaderReason))
		}
		out := e.readAll(e.set.Cohort)
		for _, v := range []string{"held-when-the-clock-stepped", "fetched-after-the-step"} {
			if !hasValue(out, v) {
				return fmt.Errorf("%s not forwarded yet", v)
			}
		}
		return nil
	})
}

// TestClockStepsKeepThePromise is a property test of the clocks: from a
// seed it draws a history of signals and leaves of a few users,
// interleaved with steps of the processor's wall clock, forwards and
// backwards, some undone a moment later and some kept. Then:
//
//  1. no signal reached the cohort topic whose user's leave, with a
//     boundary at or before its event time, was acknowledged within the
//     grace after that event time (promise 1), whatever the clock did;
//  2. every signal whose user never left at or before its event time was
//     forwarded, and none went to the DLQ: a step of the clock loses no
//     valid signal.
//
// The test's clock is the true time: signals and leaves are stamped with
// it, and a leave's acknowledgement is known to be no later than the
// moment its produce returned.
//
// COHORTGATE_CLOCK_SEED=<n> runs the history of seed n alone;
// COHORTGATE_CLOCK_HISTORIES=<n> runs n histories (default 2).
func TestClockStepsKeepThePromise(t *testing.T) {
	for _, seed := range clockSeeds(t) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("reproduce with COHORTGATE_CLOCK_SEED=%d go test -race -run TestClockStepsKeepThePromise ./integration/", seed)
				}
			})
			runClockHistory(t, seed)
		})
	}
}

func clockSeeds(t *testing.T) []uint64 {
	if s := os.Getenv("COHORTGATE_CLOCK_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("COHORTGATE_CLOCK_SEED=%q: %v", s, err)
		}
		return []uint64{seed}
	}
	n := 2
	if s := os.Getenv("COHORTGATE_CLOCK_HISTORIES"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("COHORTGATE_CLOCK_HISTORIES=%q: want a positive number", s)
		}
		n = v
	}
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = rand.Uint64()
	}
	return seeds
}

// clockSignal is a signal the history produced.
type clockSignal struct {
	user  uint64
	ts    time.Time
	value string
}

// clockLeave is a leave the history produced: its boundary and the moment
// its produce returned, after its acknowledgement.
type clockLeave struct {
	user    uint64
	at      time.Time
	ackedBy time.Time
}

const (
	clockGrace  = 400 * time.Millisecond
	clockSkew   = time.Second
	clockEvents = 160
	clockUsers  = 40
	// clockSlewTaken bounds how much of the grace a kept forward step
	// takes over a history of a few seconds: 1 ms per second.
	clockSlewTaken = 10 * time.Millisecond
)

func runClockHistory(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	e := newEnv(t, 2)
	var clk steppedClock
	cfg := e.config()
	cfg.Grace = clockGrace
	cfg.MaxFutureSkew = clockSkew
	cfg.Now = clk.now
	pr := e.start(t.TempDir(), cfg)
	pr.waitReady(t, 2)

	var (
		signals []clockSignal
		leaves  []clockLeave
		steps   []string
	)
	undo := time.Time{} // when a transient step is undone; zero: none pending
	for i := range clockEvents {
		now := time.Now()
		if !undo.IsZero() && now.After(undo) {
			clk.step(0)
			steps = append(steps, "back to true time")
			undo = time.Time{}
		}
		switch x := rng.IntN(100); {
		case x < 6 && undo.IsZero():
			// A step of up to five times the grace, either way; half of
			// them undone within half a second.
			d := time.Duration(rng.Int64N(int64(10*clockGrace))) - 5*clockGrace
			clk.step(d)
			if rng.IntN(2) == 0 {
				undo = now.Add(time.Duration(rng.Int64N(int64(500 * time.Millisecond))))
				steps = append(steps, fmt.Sprintf("%v for a moment", d.Round(time.Millisecond)))
			} else {
				steps = append(steps, fmt.Sprintf("%v, kept", d.Round(time.Millisecond)))
			}
		case x < 30:
			// Mostly the leave of the user of a signal produced a moment
			// ago, at that signal's event time: acknowledged after the
			// signal was fetched, within its grace, the case the clock
			// must not break. Otherwise anyone's, up to half the grace ago.
			u := uint64(1 + rng.IntN(clockUsers))
			at := now.Add(-time.Duration(rng.Int64N(int64(clockGrace / 2))))
			if n := len(signals); n > 0 && rng.IntN(10) < 7 {
				s := signals[n-1-rng.IntN(min(n, 3))]
				u, at = s.user, s.ts
			}
			e.command(topics.Leave, u, at)
			leaves = append(leaves, clockLeave{user: u, at: at, ackedBy: time.Now()})
		default:
			u := uint64(1 + rng.IntN(clockUsers))
			// A record's timestamp is in ms.
			ts := now.Add(-time.Duration(rng.Int64N(int64(clockGrace)))).Truncate(time.Millisecond)
			v := fmt.Sprintf("signal-%d", i)
			e.signal(u, ts, v)
			signals = append(signals, clockSignal{user: u, ts: ts, value: v})
		}
		// Events a few ms apart: the grace spans dozens of them.
		time.Sleep(time.Duration(rng.Int64N(int64(15 * time.Millisecond))))
	}
	t.Logf("clock steps: %v", steps)
	e.waitDecided()

	if dlq := e.readAll(e.set.DLQ); len(dlq) > 0 {
		t.Errorf("dead-lettered %d records, e.g. %q for %s", len(dlq), dlq[0].Value, header(dlq[0], topics.HeaderReason))
	}
	out := e.readAll(e.set.Cohort)
	var forbidden, critical, required, free int
	for _, s := range signals {
		left, stops, late := false, false, false
		for _, l := range leaves {
			if l.user != s.user || l.at.After(s.ts) {
				continue
			}
			left = true
			// ackedBy is an upper bound of the acknowledgement: a leave
			// returned by then was acknowledged within the grace, less
			// what a forward step that stays may take from it (README,
			// Clocks: a step kept for s, at most s/1000; a history lasts
			// a few seconds).
			if !l.ackedBy.After(s.ts.Add(clockGrace - clockSlewTaken)) {
				stops = true
				// Produced after the signal: the processor held it.
				late = late || l.at.Equal(s.ts)
			}
		}
		forwarded := hasValue(out, s.value)
		switch {
		case stops:
			forbidden++
			if late {
				critical++
			}
			if forwarded {
				t.Errorf("%s of user %d (event time %s) was forwarded although a leave at or before it was acknowledged within the grace",
					s.value, s.user, s.ts.Format(time.StampMicro))
			}
		case !left:
			required++
			if !forwarded {
				t.Errorf("%s of user %d, who never left before it, was not forwarded", s.value, s.user)
			}
		default:
			free++
		}
	}
	t.Logf("%d signals: %d a leave within the grace had to stop (%d by a leave produced after them), %d had to be forwarded, %d either (leave acknowledged after the grace); %d leaves",
		len(signals), forbidden, critical, required, free, len(leaves))
}
