package fanout

import (
	"testing"
	"time"
)

// fakeClock is a monotonic clock the test advances and a wall clock that
// is the monotonic time plus an offset the test steps.
type fakeClock struct {
	mono   time.Duration
	offset time.Duration
}

func (f *fakeClock) clock() *clock {
	return newClock(func() time.Time { return time.Unix(1000, 0).Add(f.mono + f.offset) },
		func() time.Duration { return f.mono })
}

func TestClockReadings(t *testing.T) {
	const s = int64(time.Second)
	base := time.Unix(1000, 0).UnixNano()
	type step struct {
		advance, offset time.Duration // then read
		low, high       int64         // want, relative to base
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"no step: both are the wall clock", []step{
			{0, 0, 0, 0}, {time.Second, 0, s, s}, {time.Second, 0, 2 * s, 2 * s}}},
		{"a forward step is slewed into low, followed by high", []step{
			{0, 0, 0, 0},
			{time.Second, time.Minute, s + s/clockSlew, 61 * s},
			{time.Second, time.Minute, 2*s + 2*s/clockSlew, 62 * s},
			// undone: low is the wall clock again, never having led the
			// true time by more than the slew; high runs on, slower,
			// until the wall clock catches up
			{time.Second, 0, 3 * s, 63*s - s/clockSlew}}},
		{"a backward step: low stands still, high runs on", []step{
			{0, 0, 0, 0},
			{time.Second, -10 * time.Second, 0, s - s/clockSlew},
			{5 * time.Second, -10 * time.Second, 0, 6*s - 6*s/clockSlew},
			// the wall clock passes low again and leads it
			{10 * time.Second, -10 * time.Second, 6 * s, 16*s - 16*s/clockSlew}}},
		{"the monotonic clock standing still moves neither", []step{
			{0, 0, 0, 0}, {0, time.Hour, 0, 3600 * s}, {0, 0, 0, 3600 * s}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f fakeClock
			c := f.clock()
			for i, st := range tc.steps {
				f.mono += st.advance
				f.offset = st.offset
				r := c.read()
				if r.mono != int64(f.mono) || r.low-base != st.low || r.high-base != st.high {
					t.Fatalf("reading %d (monotonic %v, wall offset %v) = mono %d, low %+d, high %+d; want %d, %+d, %+d",
						i, f.mono, f.offset, r.mono, r.low-base, r.high-base, int64(f.mono), st.low, st.high)
				}
			}
		})
	}
}

// TestClockLowNeverAhead: whatever the wall clock does, the low
// reading is never ahead of the true time (the monotonic one here) by more
// than the slew of the time the wall clock spent ahead of it, and the high
// reading never behind the wall clock.
func TestClockLowNeverAhead(t *testing.T) {
	var f fakeClock
	c := f.clock()
	base := time.Unix(1000, 0).UnixNano()
	var ahead time.Duration // monotonic time spent with the wall clock ahead
	offsets := []time.Duration{0, time.Minute, -time.Minute, 3 * time.Second, 0, -time.Second, time.Hour, 0}
	for i := range 10_000 {
		d := time.Duration(i%7+1) * time.Millisecond
		f.mono += d
		if i%500 == 0 {
			f.offset = offsets[(i/500)%len(offsets)]
		}
		if f.offset > 0 {
			ahead += d // the step may have come at the start of d
		}
		r := c.read()
		if lead := time.Duration(r.low - base - int64(f.mono)); lead > ahead/clockSlew {
			t.Fatalf("reading %d: low leads the true time by %v after %v with the wall clock ahead", i, lead, ahead)
		}
		if wall := base + int64(f.mono+f.offset); r.high < wall {
			t.Fatalf("reading %d: high %d behind the wall clock %d", i, r.high, wall)
		}
	}
}
