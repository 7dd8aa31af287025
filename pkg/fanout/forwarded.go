package fanout

import (
	"context"
	"slices"
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
// that really went out: a window with no leaked signal in it sends the
// purge job after contributions never made.
//
// The signals loop takes decisions in passes over a lane; it marks the pass
// busy before asking the gate about any signal and hands over the pass's
// forwarded signals when it ends. They stay pending until the cycle that
// produced them ends: only a cycle whose output is durable makes them
// forwarded; an aborted cycle's signals are decided again (with the gate as
// it is then), and an unknown outcome makes them uncertain. The commands
// side, after changing the gate, calls latest, which first waits for the
// pass in progress (if any) to be handed over, so that every decision taken
// with the gate as it was before the change is known, and then, when one of
// those pending decisions forwarded a signal of the user in the window,
// for its cycle to end. Most leaves find no such signal and do not wait for
// the cycle. The two sides meet only under mu.
type forwarded struct {
	mu struct {
		sync.Mutex
		ring     []fwd // ring[(start+i) % len] for i < n, oldest first
		start, n int   // the ring is allocated on the first publish
		// evictedMaxNs is the latest event time of a signal that fell out
		// of the ring (or whose cycle's outcome is unknown), -1 before
		// any: a leave at or before it may have leaked a signal no longer
		// known.
		evictedMaxNs int64
		busy         bool  // a pass is deciding signals
		pending      []fwd // forwarded by the open cycle's passes, not durable yet
		// passDone is closed when the busy pass is handed over, cycleDone
		// when the open cycle ends; nil when none waits.
		passDone, cycleDone chan struct{}
		// hurry, when set, asks the signals loop to end the open cycle
		// now: a leave waits for it (latest).
		hurry func()
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

// end hands over the signals the pass forwarded, pending until the cycle
// ends, and marks the pass over.
func (f *forwarded) end(pass []fwd) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.pending = append(f.mu.pending, pass...)
	f.mu.busy = false
	if f.mu.passDone != nil {
		close(f.mu.passDone)
		f.mu.passDone = nil
	}
}

// setHurry makes fn what latest calls when it must wait for the open
// cycle to end; fn must not block.
func (f *forwarded) setHurry(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.hurry = fn
}

// settle ends the cycle: with a durable output (Committed, OutputOnly) its
// pending signals were forwarded; Aborted, they were not (they are decided
// again); Unknown, they may have been, and a window reaching back to them
// cannot be exact.
func (f *forwarded) settle(out Outcome) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case out.outputDurable():
		for _, e := range f.mu.pending {
			f.pushLocked(e)
		}
	case out == Aborted:
	default:
		for _, e := range f.mu.pending {
			f.mu.evictedMaxNs = max(f.mu.evictedMaxNs, e.ts)
		}
	}
	f.mu.pending = f.mu.pending[:0]
	if f.mu.cycleDone != nil {
		close(f.mu.cycleDone)
		f.mu.cycleDone = nil
	}
}

func (f *forwarded) pushLocked(e fwd) {
	if f.mu.ring == nil {
		f.mu.ring = make([]fwd, forwardedCap)
	}
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

// latest returns the latest event time of a forwarded signal of user in
// [from, to) (to exclusive), once the decisions taken before the call are
// settled (see forwarded). complete is false when the record cannot tell:
// a signal at or after from may have been forwarded and forgotten since, a
// cycle's outcome is unknown, or the wait timed out (forwardedWait in all).
func (f *forwarded) latest(ctx context.Context, user uint64, from, to int64) (ts int64, found, complete bool) {
	t := time.NewTimer(forwardedWait)
	defer t.Stop()
	wait := func(ch chan struct{}) bool {
		f.mu.Unlock()
		defer f.mu.Lock()
		select {
		case <-ch:
			return true
		case <-t.C:
		case <-ctx.Done():
		}
		return false
	}
	in := func(e fwd) bool { return e.user == user && e.ts >= from && e.ts < to }
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.busy {
		if f.mu.passDone == nil {
			f.mu.passDone = make(chan struct{})
		}
		if !wait(f.mu.passDone) {
			return 0, false, false
		}
	}
	if slices.ContainsFunc(f.mu.pending, in) {
		if f.mu.cycleDone == nil {
			f.mu.cycleDone = make(chan struct{})
		}
		if f.mu.hurry != nil {
			// Waiting for the cycle's timer (CommitInterval) would add
			// up to a whole interval to this leave and to every command
			// queued behind it.
			f.mu.hurry()
		}
		if !wait(f.mu.cycleDone) {
			return 0, false, false
		}
	}
	if f.mu.evictedMaxNs >= from {
		return 0, false, false
	}
	ts = -1
	for i := range f.mu.n {
		if e := f.mu.ring[(f.mu.start+i)%len(f.mu.ring)]; in(e) && e.ts > ts {
			ts = e.ts
		}
	}
	return ts, ts >= 0, true
}
