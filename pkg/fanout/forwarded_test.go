package fanout

import (
	"context"
	"testing"
	"time"
)

func TestForwardedLatest(t *testing.T) {
	f := newForwarded()
	f.begin()
	f.end([]fwd{{user: 1, ts: 100}, {user: 2, ts: 150}, {user: 1, ts: 180}, {user: 1, ts: 300}})
	f.settle(Committed)
	ctx := context.Background()
	for _, tc := range []struct {
		name            string
		user            uint64
		from, to        int64
		latest          int64
		found, complete bool
	}{
		{"latest in the episode", 1, 100, 250, 180, true, true},
		{"open episode", 1, 100, 1 << 62, 300, true, true},
		{"before the boundary only", 2, 160, 1 << 62, -1, false, true},
		{"another user", 3, 0, 1 << 62, -1, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			latest, found, complete := f.latest(ctx, tc.user, tc.from, tc.to)
			if found != tc.found || complete != tc.complete || (found && latest != tc.latest) {
				t.Fatalf("latest(%d, %d, %d) = %d, %v, %v; want %d, %v, %v",
					tc.user, tc.from, tc.to, latest, found, complete, tc.latest, tc.found, tc.complete)
			}
		})
	}
}

// TestForwardedEviction: once a signal at or after the boundary has fallen
// out of the record, the record cannot tell, and says so.
func TestForwardedEviction(t *testing.T) {
	f := newForwarded()
	pass := make([]fwd, forwardedCap+1)
	for i := range pass {
		pass[i] = fwd{user: 9, ts: int64(1000 + i)}
	}
	f.begin()
	f.end(pass)
	f.settle(Committed) // the first (ts 1000) falls out
	if _, _, complete := f.latest(context.Background(), 9, 1000, 1<<62); complete {
		t.Fatal("complete after the signal at the boundary was evicted")
	}
	if latest, found, complete := f.latest(context.Background(), 9, 1001, 1<<62); !complete || !found || latest != int64(1000+forwardedCap) {
		t.Fatalf("after the evicted one: %d, %v, %v", latest, found, complete)
	}
}

// TestForwardedSettle: a cycle's signals count as forwarded only once its
// output is durable. A window recorded against an aborted cycle's signals
// was spurious (a chaos kill run: an exact window holding no forwarded
// signal); one recorded against an unknown outcome cannot be exact.
func TestForwardedSettle(t *testing.T) {
	for _, tc := range []struct {
		out             Outcome
		latest          int64
		found, complete bool
	}{
		{Committed, 30, true, true},
		{OutputOnly, 30, true, true},
		{Aborted, 10, true, true},
		{Unknown, 0, false, false},
	} {
		t.Run(tc.out.String(), func(t *testing.T) {
			f := newForwarded()
			f.begin()
			f.end([]fwd{{user: 1, ts: 10}})
			f.settle(Committed)
			f.begin()
			f.end([]fwd{{user: 1, ts: 20}, {user: 1, ts: 30}})
			f.settle(tc.out)
			latest, found, complete := f.latest(context.Background(), 1, 0, 1<<62)
			if found != tc.found || complete != tc.complete || (found && latest != tc.latest) {
				t.Fatalf("after %v: %d, %v, %v; want %d, %v, %v", tc.out, latest, found, complete, tc.latest, tc.found, tc.complete)
			}
		})
	}
}

// TestForwardedWaitsForTheCycle: a late leave recorded while the cycle that
// forwarded a signal of the user in its window is open waits for the
// cycle's outcome: aborted, the signal was not forwarded (and is decided
// again, with the leave in the gate); committed, it was.
func TestForwardedWaitsForTheCycle(t *testing.T) {
	for _, tc := range []struct {
		out   Outcome
		found bool
	}{{Aborted, false}, {Committed, true}} {
		t.Run(tc.out.String(), func(t *testing.T) {
			f := newForwarded()
			f.begin()
			f.end([]fwd{{user: 1, ts: 42}})
			type result struct {
				latest          int64
				found, complete bool
			}
			got := make(chan result)
			go func() {
				latest, found, complete := f.latest(context.Background(), 1, 40, 1<<62)
				got <- result{latest, found, complete}
			}()
			waitFor(t, "latest to wait for the cycle", func() bool {
				f.mu.Lock()
				defer f.mu.Unlock()
				return f.mu.cycleDone != nil
			})
			f.settle(tc.out)
			select {
			case r := <-got:
				if r.found != tc.found || !r.complete || (r.found && r.latest != 42) {
					t.Fatalf("latest after %v = %+v, want found %v", tc.out, r, tc.found)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("latest did not return after the cycle ended")
			}
		})
	}
}

// TestForwardedNoWaitWithoutTheUser: a leave of a user the open cycle
// forwarded nothing of (in the window) does not wait for the cycle.
func TestForwardedNoWaitWithoutTheUser(t *testing.T) {
	f := newForwarded()
	f.begin()
	f.end([]fwd{{user: 2, ts: 42}, {user: 1, ts: 10}})
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, found, complete := f.latest(context.Background(), 1, 40, 1<<62); found || !complete {
			t.Errorf("latest = found %v, complete %v; want nothing, complete", found, complete)
		}
	}()
	select {
	case <-done:
	case <-time.After(forwardedWait / 2):
		t.Fatal("latest waited for a cycle that forwarded nothing of the user in the window")
	}
}

// waitFor polls cond until it holds or 10s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // polling a condition with a deadline
	}
}

// TestForwardedWaitsForThePass: latest, called while a pass decides, sees
// what that pass forwarded: the pass may have asked the gate before the
// leave was in it.
func TestForwardedWaitsForThePass(t *testing.T) {
	f := newForwarded()
	f.begin()
	got := make(chan int64)
	go func() {
		latest, _, _ := f.latest(context.Background(), 1, 0, 1<<62)
		got <- latest
	}()
	// The caller must be waiting before the pass ends for this to test
	// anything; a waiter registers itself under the lock.
	waitFor(t, "latest to wait for the busy pass", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.mu.passDone != nil
	})
	f.end([]fwd{{user: 1, ts: 42}})
	waitFor(t, "latest to wait for the cycle", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.mu.cycleDone != nil
	})
	f.settle(Committed)
	select {
	case latest := <-got:
		if latest != 42 {
			t.Fatalf("latest = %d, want the pass's 42", latest)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("latest did not return after the pass ended")
	}
}

// TestForwardedHurriesTheCycle: a leave that must wait for the open cycle
// asks the signals loop to end it now (hurry), instead of waiting for its
// CommitInterval to run out, and one of a user the cycle forwarded nothing
// of does not. The hurry here ends the cycle as the loop would; without
// it, latest waits forwardedWait and cannot tell.
func TestForwardedHurriesTheCycle(t *testing.T) {
	f := newForwarded()
	hurried := 0
	f.setHurry(func() {
		hurried++
		go f.settle(Committed) // the loop ends the cycle on its own goroutine
	})
	f.begin()
	f.end([]fwd{{user: 1, ts: 42}})
	if _, _, complete := f.latest(context.Background(), 2, 40, 1<<62); !complete || hurried != 0 {
		t.Fatalf("a leave of another user: complete %v, hurried %d times; want complete, no hurry", complete, hurried)
	}
	start := time.Now()
	latest, found, complete := f.latest(context.Background(), 1, 40, 1<<62)
	if !found || !complete || latest != 42 {
		t.Fatalf("latest = %d, %v, %v; want 42, found, complete", latest, found, complete)
	}
	if hurried != 1 {
		t.Errorf("hurried %d times; want once", hurried)
	}
	if waited := time.Since(start); waited >= forwardedWait {
		t.Errorf("waited %v: the cycle was not hurried", waited)
	}
}
