package client

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/cohortgate/cohortgate/topics"
)

// TestKeptAnswersCompact: the answers the watcher keeps for later waits
// hold about one heap object each once claimed (the record's value), not
// a decoded record of eight or so, in maps the collector scans: a million
// of them made every collection, and the watcher, slower with each.
func TestKeptAnswersCompact(t *testing.T) {
	const n = 20000
	c, w, sent := testWatcher(t, n)
	values := make([][]byte, n)
	for i, p := range sent {
		values[i] = answerValue(p)
	}
	got := make(chan error, n)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before := heapObjects()
	for _, p := range sent {
		c.ReceiptAsync(ctx, p, func(rec topics.MemberRecord, err error) {
			if err == nil && (rec.Command == nil || rec.Command.Offset != p.Offset || rec.Command.Partition != p.Partition) {
				t.Errorf("receipt %+v for %+v", rec.Command, p)
			}
			got <- err
		})
	}
	feedAnswers(w, sent, values)
	for range n {
		if err := <-got; err != nil {
			t.Fatal(err)
		}
	}
	held := heapObjects() - before
	runtime.KeepAlive(values)
	per := float64(held) / n
	t.Logf("%d heap objects held for %d answers kept, claimed (%.1f each)", held, n, per)
	if per > 2.5 {
		t.Errorf("%d heap objects held for %d answers kept (%.1f each), want at most 2.5 each", held, n, per)
	}
	// A second wait for each still gets its own command's receipt.
	for _, p := range sent[:100] {
		rec, err := c.WaitReceipt(ctx, p)
		if err != nil || rec.Command == nil || rec.Command.Offset != p.Offset || rec.UserID != p.Command.UserID {
			t.Fatalf("second wait: %+v, %v for %+v", rec.Command, err, p)
		}
	}
	runtime.KeepAlive(w)
	c.Close()
}

// heapObjects is how many objects the heap holds after a collection.
func heapObjects() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapObjects)
}

// TestRingForgetsOldest: the kept answers stay within their bound,
// forgetting the oldest first, and each is found by its position across
// the ring's growth and wrap.
func TestRingForgetsOldest(t *testing.T) {
	r := ring{at: make(map[key]uint64)}
	const limit = 3000
	for i := range 5000 {
		old, forgot := r.push(kept{k: key{offset: int64(i)}, stamp: int64(i)}, limit)
		if want := i >= limit; forgot != want || (forgot && old.k.offset != int64(i-limit)) {
			t.Fatalf("push %d: forgot %v (offset %d), want %v", i, forgot, old.k.offset, want)
		}
	}
	if r.n != limit || len(r.at) != limit {
		t.Fatalf("%d kept, %d indexed, want %d", r.n, len(r.at), limit)
	}
	for i := range 5000 {
		e, ok := r.get(key{offset: int64(i)})
		if want := i >= 5000-limit; ok != want || (ok && e.stamp != int64(i)) {
			t.Fatalf("get %d: %v, %+v", i, ok, e)
		}
	}
}

// TestWaitersOfOnePosition: waits for the same command share its
// position; one whose context ends leaves the others waiting, each of
// which gets the answer, and Close fails the waits still open.
func TestWaitersOfOnePosition(t *testing.T) {
	c, w, sent := testWatcher(t, 2)
	type result struct {
		i   int
		rec topics.MemberRecord
		err error
	}
	results := make(chan result, 4)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctxs := []context.Context{ctx, nil, ctx, ctx}
	ctx1, cancel1 := context.WithCancel(ctx)
	ctxs[1] = ctx1
	for i, wctx := range ctxs {
		p := sent[0]
		if i == 3 {
			p = sent[1] // never answered: failed by Close
		}
		c.ReceiptAsync(wctx, p, func(rec topics.MemberRecord, err error) { results <- result{i, rec, err} })
	}
	cancel1()
	if r := <-results; r.i != 1 || r.err == nil {
		t.Fatalf("first result %d, %v; want wait 1's cancellation", r.i, r.err)
	}
	feedAnswers(w, sent[:1], [][]byte{answerValue(sent[0])})
	for range 2 {
		r := <-results
		if r.err != nil || (r.i != 0 && r.i != 2) || r.rec.Command == nil || r.rec.Command.Offset != sent[0].Offset {
			t.Fatalf("wait %d: %+v, %v", r.i, r.rec.Command, r.err)
		}
	}
	w.failAll(errClosedForTest)
	if r := <-results; r.i != 3 || r.err != errClosedForTest {
		t.Fatalf("wait %d: %v, want it failed", r.i, r.err)
	}
	c.Close()
}

var errClosedForTest = errors.New("closed")

// TestFailAllWhileRemoving: the watcher failing its waits (its reader
// failed, or Close) while a wait of the same position ends by its
// context: every wait still gets exactly one answer. (A removal used to
// cut the chain that the failing walked outside the lock: go test -race
// saw it, and a wait was left to its deadline.)
func TestFailAllWhileRemoving(t *testing.T) {
	for range 20 {
		c, w, sent := testWatcher(t, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		results := make(chan error, 3)
		var cancels []context.CancelFunc
		for range 3 {
			wctx, wcancel := context.WithCancel(ctx)
			cancels = append(cancels, wcancel)
			c.ReceiptAsync(wctx, sent[0], func(_ topics.MemberRecord, err error) { results <- err })
		}
		go cancels[2]()
		go cancels[1]()
		w.failAll(errClosedForTest)
		for range 3 {
			// Failed, or ended by its own cancel: not left to the deadline.
			if err := <-results; err != errClosedForTest && !errors.Is(err, context.Canceled) {
				t.Fatalf("a wait ended with %v, want it failed or cancelled", err)
			}
		}
		cancel()
		c.Close()
	}
}
