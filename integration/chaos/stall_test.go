package main

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestStallMeter: the longest stall is the longest stretch from an
// arrival to the next; the wait for the first is told apart, and empty
// fetches and arrivals before the start do not count.
func TestStallMeter(t *testing.T) {
	t0 := time.Unix(1_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	type arrival struct {
		ms, n int
	}
	for _, tc := range []struct {
		name     string
		arrivals []arrival
		longest  time.Duration
		endsAt   time.Time
		first    time.Duration
		count    int64
	}{
		{"nothing arrived", nil, 0, time.Time{}, 0, 0},
		{"the wait for the first is apart", []arrival{{900, 1}, {1000, 5}, {1250, 2}}, 250 * time.Millisecond, at(1250), 900 * time.Millisecond, 8},
		{"a gap in the middle", []arrival{{100, 1}, {200, 1}, {3200, 4}, {3300, 1}}, 3 * time.Second, at(3200), 100 * time.Millisecond, 7},
		{"empty fetches are no progress", []arrival{{100, 1}, {1000, 0}, {2100, 1}}, 2 * time.Second, at(2100), 100 * time.Millisecond, 2},
		{"an arrival timed before the last one", []arrival{{500, 1}, {400, 1}, {1500, 1}}, time.Second, at(1500), 500 * time.Millisecond, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m stallMeter
			m.arrived(at(-5), 3) // before the start: ignored
			m.start(t0)
			for _, a := range tc.arrivals {
				m.arrived(at(a.ms), a.n)
			}
			got := m.read()
			if got.longest != tc.longest || !got.endsAt.Equal(tc.endsAt) || got.first != tc.first || got.arrivals != tc.count || m.count() != tc.count {
				t.Fatalf("read = %+v; want longest %v ending at %v, first after %v, %d arrivals", got, tc.longest, tc.endsAt, tc.first, tc.count)
			}
		})
	}
}

// TestWatchOutput: the reader reports committed records only, and a
// stretch without any as a stall at least as long as the stretch.
func TestWatchOutput(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var m stallMeter
	start := time.Now()
	m.start(start)
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- watchOutput(wctx, c.ListenAddrs(), "out", &m) }()

	p, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	produce := func(commit kgo.TransactionEndTry, n int) {
		t.Helper()
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for range n {
			if err := p.ProduceSync(ctx, &kgo.Record{Topic: "out", Value: []byte("v")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}
	waitCount := func(want int64) {
		t.Helper()
		for m.count() < want {
			if ctx.Err() != nil {
				t.Fatalf("%d of %d records seen", m.count(), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	produce(kgo.TryCommit, 2)
	waitCount(2)
	produce(kgo.TryAbort, 5) // never visible
	const gap = 400 * time.Millisecond
	time.Sleep(gap) // the stretch without progress to be measured
	produce(kgo.TryCommit, 1)
	waitCount(3)
	gapEnd := time.Now()
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := m.read()
	if got.arrivals != 3 {
		t.Fatalf("%d records seen; want 3, the aborted ones not", got.arrivals)
	}
	if got.longest < gap || got.longest > gapEnd.Sub(start) {
		t.Fatalf("longest stall %v; want between %v and %v", got.longest, gap, gapEnd.Sub(start))
	}
}
