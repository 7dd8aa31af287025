package fanout

import (
	"context"
	"sync"
	"time"
)

// forwardedCap is how many forwarded signals a claim remembers for
// late-leave windows: 2 MiB a partition. At a thousand signals a second a
// partition that is minutes; at a hundred thousand, about a second, after
// which a late leave's window is bounded rather than exact.
const forwardedCap = 1 << 17

// forwardedWait bounds how long the commands side waits for the signals
// loop to publish the decisions it is taking; past it, a window is recorded
// as not exact.
const forwardedWait = 5 * time.Second

// fwd is one forwarded signal: its user and event time (ns).
type fwd struct {
	user uint64
	ts   int64
}

// forwarded remembers the signals a claim forwarded, newest last, so that a
// late leave's window can name the latest event time of the user's signals
// that really went out (issue 13: a window with no leaked signal in it
// sends the purge job after contributions never made).
//
// The signals loop takes decisions in passes over a lane; it marks the pass
// busy before asking the gate about any signal and publishes the pass's
// forwarded signals when it ends. The commands side, after changing the
// gate, calls latest, which first waits for the pass in progress (if any)
// to be published: every decision taken with the gate as it was before the
// change is then in the record. The two sides meet only under mu, once a
// pass and once a late leave.
type forwarded struct {
	mu struct {
		sync.Mutex
		ring     []fwd  // ring[(start+i) % len] for i < n, oldest first
		start, n int    // the ring is allocated on the first publish
		appended uint64 // signals ever published
		// evictedMaxNs is the latest event time of a signal that fell out
		// of the ring (or was taken back by an abort), -1 before any: a
		// leave at or before it may have leaked a signal no longer known.
		evictedMaxNs int64
		busy         bool          // a pass is deciding signals
		waiter       chan struct{} // closed when the busy pass is published; nil when none waits
	}
}

func newForwarded() *forwarded {
	f := &forwarded{}
	f.mu.evictedMaxNs = -1
	return f
}

// begin marks a decision pass started. Call it before the pass asks the
// gate about any signal.
func (f *forwarded) begin() {
	f.mu.Lock()
	f.mu.busy = true
	f.mu.Unlock()
}

// end publishes the signals the pass forwarded and marks it over.
func (f *forwarded) end(pass []fwd) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range pass {
		f.pushLocked(e)
	}
	f.mu.busy = false
	if f.mu.waiter != nil {
		close(f.mu.waiter)
		f.mu.waiter = nil
	}
}

func (f *forwarded) pushLocked(e fwd) {
	if f.mu.ring == nil {
		f.mu.ring = make([]fwd, forwardedCap)
	}
	f.mu.appended++
	if f.mu.n < len(f.mu.ring) {
		f.mu.ring[(f.mu.start+f.mu.n)%len(f.mu.ring)] = e
		f.mu.n++
		return
	}
	old := f.mu.ring[f.mu.start]
	f.mu.evictedMaxNs = max(f.mu.evictedMaxNs, old.ts)
	f.mu.ring[f.mu.start] = e
	f.mu.start = (f.mu.start + 1) % len(f.mu.ring)
}

// mark returns how many signals were ever published, for takeBack.
func (f *forwarded) mark() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.appended
}

// takeBack forgets the signals published after mark: their cycle aborted,
// so they were not forwarded and will be decided again. Those already
// pushed out of the ring count as evicted.
func (f *forwarded) takeBack(mark uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.mu.appended > mark {
		f.mu.appended--
		if f.mu.n == 0 {
			continue // pushed out of the ring already: evictedMaxNs covers them
		}
		f.mu.n--
	}
}

// latest returns the latest event time of a forwarded signal of user in
// [from, to) (to exclusive), after waiting for the pass in progress to be
// published. complete is false when the record cannot tell: a signal at or
// after from may have been forwarded and forgotten since, or the wait for
// the pass timed out.
func (f *forwarded) latest(ctx context.Context, user uint64, from, to int64) (ts int64, found, complete bool) {
	f.mu.Lock()
	if f.mu.busy {
		if f.mu.waiter == nil {
			f.mu.waiter = make(chan struct{})
		}
		ch := f.mu.waiter
		f.mu.Unlock()
		t := time.NewTimer(forwardedWait)
		defer t.Stop()
		select {
		case <-ch:
		case <-t.C:
			return 0, false, false
		case <-ctx.Done():
			return 0, false, false
		}
		f.mu.Lock()
	}
	defer f.mu.Unlock()
	if f.mu.evictedMaxNs >= from {
		return 0, false, false
	}
	ts = -1
	for i := range f.mu.n {
		e := f.mu.ring[(f.mu.start+i)%len(f.mu.ring)]
		if e.user == user && e.ts >= from && e.ts < to && e.ts > ts {
			ts = e.ts
		}
	}
	return ts, ts >= 0, true
}
