package fanout

import (
	"sync"
	"time"
)

// Time, and which clock measures what. The wall clock (Config.Now) can be
// stepped by an operator or NTP, in either direction, at any instant; the
// monotonic clock (Config.Monotonic) cannot. The processor reads both,
// through one clock, and never compares a wall-clock instant it read at one
// moment with one it read at another:
//
//   - Durations and the order of this run's own events (hold time, how
//     long a transaction has been open, how long a partition's log looked
//     wrong, whether an observation was sent after an assignment) are
//     monotonic.
//   - The instant an observation of a commands partition was sent, which
//     S5 compares with a signal's event time plus grace, is the low
//     reading: the wall clock, but never more than the monotonic time
//     elapsed (plus 1/clockSlew of it) ahead of the previous low
//     reading. A forward step is therefore not followed at once: it is
//     caught up at 1 ms per second, so a step that is undone within a
//     second or so moves no observation into the future, and a step that
//     stays is caught up gradually (a minute's step in about 17 hours),
//     making signals wait longer, never shorter, meanwhile. A backward step
//     makes the low reading stand still until the wall clock passes it
//     again.
//   - The future skew of a signal (S4) is measured against the high
//     reading taken when the signal was fetched: the wall clock, or more
//     where the wall clock stepped back (the high reading then runs on with
//     the monotonic clock, 1/clockSlew slower, until the wall clock catches
//     up). A step back never makes a valid signal look as if it came from
//     the future, and a signal is checked by S4 once, at first sight, never
//     again while it waits out its grace.
//   - A leave's boundary and a signal's event time are the producers'
//     clocks (the records' timestamps, or at_ns); receipts report the wall
//     clock as read.
//
// So no step of the wall clock, in either direction, releases a held signal
// before the commands acknowledged within its grace are applied, beyond the
// slew (a step of d that stays for s shortens grace by at most
// min(d, s/clockSlew)), and none dead-letters a signal whose event time was
// within the future skew of the true time.

// clockSlew is how much slower than the wall clock's own steps the low
// and high readings may follow it: one part in clockSlew of the monotonic
// time elapsed, like NTP's slew of at most 500 ppm.
const clockSlew = 1000

// clock reads the processor's time. It is safe for concurrent use.
type clock struct {
	wall func() time.Time     // Config.Now
	mono func() time.Duration // Config.Monotonic

	mu      sync.Mutex
	started bool
	last    time.Duration // the monotonic time of the previous reading
	low     int64         // ns since the Unix epoch
	high    int64         // ns since the Unix epoch
}

func newClock(wall func() time.Time, mono func() time.Duration) *clock {
	return &clock{wall: wall, mono: mono}
}

// reading is the clock at one instant.
type reading struct {
	// mono is the monotonic time (ns since an arbitrary origin of this
	// run): for durations and the order of this run's events.
	mono int64
	// low is a wall-clock instant (ns since the Unix epoch) that is not
	// ahead of the true time unless the wall clock was ahead for long (see
	// above): the instant an observation was sent.
	low int64
	// high is a wall-clock instant not behind the wall clock: the instant
	// against which a signal's future skew is measured.
	high int64
}

// read returns the clock now. Its low and high readings never decrease.
func (c *clock) read() reading {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.mono()
	w := c.wall().UnixNano()
	if !c.started {
		c.started, c.last, c.low, c.high = true, m, w, w
		return reading{mono: int64(m), low: w, high: w}
	}
	d := max(m-c.last, 0)
	c.last = m
	slew := int64(d) / clockSlew
	c.low = max(c.low, min(w, c.low+int64(d)+slew))
	c.high = max(w, c.high+int64(d)-slew)
	return reading{mono: int64(m), low: c.low, high: c.high}
}

// monoNow returns the monotonic time, ns since the run's origin.
func (c *clock) monoNow() int64 { return int64(c.mono()) }

// monotonicSince returns a monotonic clock whose origin is now.
func monotonicSince() func() time.Duration {
	origin := time.Now()
	return func() time.Duration { return time.Since(origin) }
}
