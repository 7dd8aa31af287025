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
	f.end(pass) // the first (ts 1000) falls out
	if _, _, complete := f.latest(context.Background(), 9, 1000, 1<<62); complete {
		t.Fatal("complete after the signal at the boundary was evicted")
	}
	if latest, found, complete := f.latest(context.Background(), 9, 1001, 1<<62); !complete || !found || latest != int64(1000+forwardedCap) {
		t.Fatalf("after the evicted one: %d, %v, %v", latest, found, complete)
	}
}

// TestForwardedTakeBack: an aborted cycle's signals were not forwarded.
func TestForwardedTakeBack(t *testing.T) {
	f := newForwarded()
	f.begin()
	f.end([]fwd{{user: 1, ts: 10}})
	mark := f.mark()
	f.begin()
	f.end([]fwd{{user: 1, ts: 20}, {user: 1, ts: 30}})
	f.takeBack(mark)
	if latest, found, _ := f.latest(context.Background(), 1, 0, 1<<62); !found || latest != 10 {
		t.Fatalf("after taking back the cycle: %d, %v; want 10", latest, found)
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
	deadline := time.Now().Add(10 * time.Second)
	for {
		f.mu.Lock()
		waiting := f.mu.waiter != nil
		f.mu.Unlock()
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("latest did not wait for the busy pass")
		}
		time.Sleep(time.Millisecond) // polling a condition with a deadline
	}
	f.end([]fwd{{user: 1, ts: 42}})
	select {
	case latest := <-got:
		if latest != 42 {
			t.Fatalf("latest = %d, want the pass's 42", latest)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("latest did not return after the pass ended")
	}
}
