package client

import (
	"context"
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
