package fanout

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// fakeStall is a stallWatch on a clock the test moves, with the events
// it reported.
type fakeStall struct {
	*stallWatch
	t      *testing.T
	at     time.Time
	events []StallInfo
}

// newFakeStall watches with StallTimeout after, StallHalt halt, Grace 1s
// and MaxFutureSkew 2s (held stalls count from after+3s).
func newFakeStall(t *testing.T, after, halt time.Duration) *fakeStall {
	cfg := (&Config{StallTimeout: after, StallHalt: halt, Grace: time.Second, MaxFutureSkew: 2 * time.Second}).EnsureDefaults()
	f := &fakeStall{stallWatch: newStallWatch(cfg), t: t, at: time.Now()} // a reading with the monotonic clock
	f.now = func() time.Time { return f.at }
	f.ev = EventListener{Stall: func(i StallInfo) { f.events = append(f.events, i) }}
	return f
}

// advance moves the clock by d in steps of step, doing each step first
// and assessing after it; it returns the first halt.
func (f *fakeStall) advance(d, step time.Duration, each func()) error {
	f.t.Helper()
	for end := f.at.Add(d); f.at.Before(end); {
		f.at = f.at.Add(step)
		if each != nil {
			each()
		}
		if err := f.check(f.at); err != nil {
			return err
		}
	}
	return nil
}

// stalled returns the stall in force, or fails.
func (f *fakeStall) stalled(want StallCause) *Stall {
	f.t.Helper()
	s := f.current()
	if s == nil || s.Cause != want {
		f.t.Fatalf("stall in force = %v, want cause %s", s, want)
	}
	return s
}

func (f *fakeStall) notStalled() {
	f.t.Helper()
	if s := f.current(); s != nil {
		f.t.Fatalf("stalled (%s) %v; want no stall", s.Cause, s)
	}
}

// TestStallWatch drives each cause of a stall on an injected clock: it
// is reported only past its bound, reported once when it begins and once
// when it ends, and ends with progress.
func TestStallWatch(t *testing.T) {
	const after, step = 10 * time.Second, 50 * time.Millisecond
	refused := errors.New("UNKNOWN_TOPIC_ID")

	t.Run("aborts", func(t *testing.T) {
		f := newFakeStall(t, after, NoStallHalt)
		f.loopStarted()
		n := 0
		abort := func() {
			n++
			if n%4 == 0 { // an empty cycle commits between aborts: no progress
				f.cycleEnded(Committed, false, nil)
				return
			}
			f.ProduceFailed(refused)
			f.cycleEnded(Aborted, true, nil)
		}
		_ = f.advance(after-step, step, abort)
		f.notStalled()
		_ = f.advance(2*step, step, abort)
		s := f.stalled(StallAborts)
		if !errors.Is(s.Err, refused) || !strings.Contains(s.String(), "produce to cohort failed") {
			t.Errorf("stall says %q, want the produce failure", s)
		}
		_ = f.advance(time.Minute, step, abort)
		f.stalled(StallAborts)
		f.cycleEnded(Committed, true, nil) // progress
		_ = f.advance(step, step, nil)
		f.notStalled()
		if len(f.events) != 2 || f.events[0].Ended || !f.events[1].Ended {
			t.Fatalf("events = %v, want a start and an end", f.events)
		}
		if got := f.events[1].Lasted; got < after+time.Minute {
			t.Errorf("ended after %v, want at least %v", got, after+time.Minute)
		}
	})

	t.Run("no cycle stall while the gate is restored", func(t *testing.T) {
		f := newFakeStall(t, after, 2*after)
		f.loopStarted()
		f.restoreStarted()
		if err := f.advance(10*after, step, nil); err != nil {
			t.Fatalf("halted while the gate was restored: %v", err)
		}
		f.notStalled()
		f.restoreEnded()
		_ = f.advance(after-step, step, nil)
		f.notStalled() // counted from the restore's end
		_ = f.advance(2*step, step, nil)
		f.stalled(StallCycle)
	})

	t.Run("a long cycle that aborts stays a stall", func(t *testing.T) {
		f := newFakeStall(t, after, NoStallHalt)
		f.loopStarted()
		_ = f.advance(after+time.Second, step, nil) // its produces take long to fail
		f.stalled(StallCycle)
		f.ProduceFailed(refused)
		f.cycleEnded(Aborted, true, nil)
		if err := f.check(f.at); err != nil {
			t.Fatal(err)
		}
		// Counted from the cycle's beginning: no moment without a stall.
		s := f.stalled(StallAborts)
		if lasted := f.at.Sub(s.Since); lasted < after+time.Second {
			t.Errorf("aborts stall counted from %v ago, want the cycle's beginning", lasted)
		}
		if len(f.events) != 3 || f.events[1].Cause != StallCycle || !f.events[1].Ended || f.events[2].Cause != StallAborts {
			t.Errorf("events = %v, want the cycle stall's start and end, then the aborts'", f.events)
		}
	})

	t.Run("slow cycles that abort stay a stall", func(t *testing.T) {
		f := newFakeStall(t, after, NoStallHalt)
		f.loopStarted()
		// Each cycle takes longer than stallQuiet and less than the bound.
		slow := stallQuiet + time.Second
		for range 4 {
			_ = f.advance(slow, step, nil)
			f.cycleEnded(Aborted, true, nil)
		}
		_ = f.advance(step, step, nil)
		if s := f.stalled(StallAborts); f.at.Sub(s.Since) < 4*slow {
			t.Errorf("stalled since %v ago, want the first slow cycle's beginning", f.at.Sub(s.Since))
		}
	})

	t.Run("sessions replaced one after the other stay a stall", func(t *testing.T) {
		f := newFakeStall(t, after, NoStallHalt)
		for range 6 { // each session joins for 2 s, then its first cycle's end fails
			_ = f.advance(2*time.Second, step, nil)
			f.loopStarted()
			_ = f.advance(step, step, nil)
			f.cycleEnded(Unknown, true, errors.New("unable to end transaction"))
			f.loopStopped()
		}
		_ = f.advance(step, step, nil)
		f.stalled(StallAborts)
	})

	t.Run("aborts of empty cycles are no stall", func(t *testing.T) {
		f := newFakeStall(t, after, NoStallHalt)
		f.loopStarted()
		_ = f.advance(3*after, step, func() { f.cycleEnded(Aborted, false, nil) })
		f.notStalled()
	})

	t.Run("aborts that stop end the stall", func(t *testing.T) {
		f := newFakeStall(t, after, NoStallHalt)
		f.loopStarted()
		_ = f.advance(2*after, step, func() { f.cycleEnded(Aborted, true, nil) })
		f.stalled(StallAborts)
		_ = f.advance(stallQuiet, step, func() { f.cycleEnded(Committed, false, nil) })
		f.notStalled()
	})

	t.Run("fetch", func(t *testing.T) {
		f := newFakeStall(t, after, NoStallHalt)
		f.loopStarted()
		tick := func() {
			f.cycleEnded(Committed, false, nil)
			f.fetchFailed("signals", 3, refused)
			f.fetched("signals", 2) // another partition fetches
		}
		_ = f.advance(after-step, step, tick)
		f.notStalled()
		_ = f.advance(2*step, step, tick)
		s := f.stalled(StallFetch)
		if s.Topic != "signals" || s.Partition != 3 || !errors.Is(s.Err, refused) {
			t.Errorf("stall = %+v, want signals partition 3", s)
		}
		f.fetched("signals", 3)
		_ = f.advance(step, step, func() { f.cycleEnded(Committed, false, nil) })
		f.notStalled()
	})

	t.Run("fetch of a partition given up", func(t *testing.T) {
		f := newFakeStall(t, after, NoStallHalt)
		f.loopStarted()
		_ = f.advance(after/2, step, func() { f.fetchFailed("signals", 3, refused) })
		f.dropped(3)
		_ = f.advance(after, step, func() { f.cycleEnded(Committed, false, nil) })
		f.notStalled()
	})

	t.Run("held", func(t *testing.T) {
		f := newFakeStall(t, after, NoStallHalt)
		f.loopStarted()
		pass := func() {
			f.cycleEnded(Committed, false, nil)
			f.deciding(1, true, false, false, 10)
			f.deciding(2, true, false, true, 10) // exempt: never a stall
			f.deciding(4, true, true, false, 10) // decides: never a stall
		}
		// Grace (1s) and MaxFutureSkew (2s) are waited out before the bound.
		_ = f.advance(after+3*time.Second-step, step, pass)
		f.notStalled()
		_ = f.advance(2*step, step, pass)
		if s := f.stalled(StallHeld); s.Partition != 1 {
			t.Errorf("held stall of partition %d, want 1", s.Partition)
		}
		f.deciding(1, false, true, false, 10)
		_ = f.advance(step, step, nil)
		f.notStalled()
	})

	t.Run("held behind a backlog of commands", func(t *testing.T) {
		f := newFakeStall(t, after, NoStallHalt)
		f.loopStarted()
		applied := int64(0)
		_ = f.advance(3*after, step, func() {
			f.cycleEnded(Committed, false, nil)
			applied++ // the commands side applies a bulk job's leaves
			f.deciding(5, true, false, false, applied)
		})
		f.notStalled()
	})

	t.Run("cycle", func(t *testing.T) {
		f := newFakeStall(t, after, NoStallHalt)
		_ = f.advance(3*after, step, nil) // no loop: nothing expected
		f.notStalled()
		f.loopStarted()
		_ = f.advance(after-step, step, nil)
		f.notStalled()
		_ = f.advance(2*step, step, nil)
		f.stalled(StallCycle)
		f.cycleEnded(Committed, false, nil)
		_ = f.advance(step, step, nil)
		f.notStalled()
		_ = f.advance(after+step, step, nil)
		f.stalled(StallCycle)
		f.loopStopped() // the session is replaced
		_ = f.advance(step, step, nil)
		f.notStalled()
	})

	t.Run("halt", func(t *testing.T) {
		f := newFakeStall(t, after, 3*after)
		f.loopStarted()
		err := f.advance(time.Hour, step, func() {
			f.cycleEnded(Committed, false, nil)
			f.fetchFailed("signals", 0, refused)
		})
		var se *StallError
		if !errors.As(err, &se) || se.Cause != StallFetch || !errors.Is(err, refused) {
			t.Fatalf("halt = %v, want a *StallError of the fetches", err)
		}
		if se.Lasted < 3*after || se.Lasted > 3*after+step {
			t.Errorf("halted after %v, want %v", se.Lasted, 3*after)
		}
	})

	t.Run("no halt", func(t *testing.T) {
		f := newFakeStall(t, after, NoStallHalt)
		f.loopStarted()
		if err := f.advance(time.Hour, time.Second, func() {
			f.cycleEnded(Committed, false, nil)
			f.fetchFailed("signals", 0, refused)
		}); err != nil {
			t.Fatalf("halted with NoStallHalt: %v", err)
		}
		f.stalled(StallFetch)
	})
}

// ProduceFailed tells f's watch of a produce failure, as the processor's
// listener does.
func (f *fakeStall) ProduceFailed(err error) {
	f.listener().ProduceFailed(ProduceFailedInfo{Topic: "cohort", Err: err})
}

// TestStallMetrics checks that the metrics listener counts a stall once,
// by cause, when it begins.
func TestStallMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, gauges{})
	if err != nil {
		t.Fatal(err)
	}
	f := newFakeStall(t, time.Second, NoStallHalt)
	f.ev = m.listener()
	f.loopStarted()
	_ = f.advance(5*time.Second, 100*time.Millisecond, nil)
	f.cycleEnded(Committed, false, nil)
	_ = f.advance(time.Second, 100*time.Millisecond, func() { f.cycleEnded(Committed, false, nil) })
	for _, c := range []struct {
		cause StallCause
		want  float64
	}{{StallCycle, 1}, {StallAborts, 0}, {StallFetch, 0}, {StallHeld, 0}} {
		var got dto.Metric
		if err := m.stalls.WithLabelValues(string(c.cause)).Write(&got); err != nil {
			t.Fatal(err)
		}
		if v := got.GetCounter().GetValue(); v != c.want {
			t.Errorf("%s{cause=%s} = %v, want %v", MetricStalls, c.cause, v, c.want)
		}
	}
}

func TestStallConfig(t *testing.T) {
	c := (&Config{Brokers: []string{"b:9"}}).EnsureDefaults()
	if c.StallTimeout != DefaultStallTimeout || c.StallHalt != DefaultStallHalt {
		t.Fatalf("defaults %v %v", c.StallTimeout, c.StallHalt)
	}
	c.StallHalt = c.StallTimeout / 2
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "StallHalt") {
		t.Fatalf("Validate = %v, want StallHalt refused below StallTimeout", err)
	}
	c.StallHalt = NoStallHalt
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}
