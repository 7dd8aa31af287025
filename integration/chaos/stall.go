package main

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// stallMeter measures a scenario's longest stall: the longest stretch of
// wall time in which no forwarded signal became visible in the output
// topic. Forward progress is what a read_committed reader of the output
// sees: a signal forwarded in a transaction that is not yet committed (or
// is then aborted) is no progress. So a reader of the scenario's cohort
// topic (watchOutput) notes the wall time at which each fetch brought
// records; the stretches are measured between the first arrival and the
// last, so neither the cold start (the first transactions of new
// transactional IDs on new topics, before any fault; reported apart as
// first) nor the time after the last forwarded signal, when the rest of
// the load is being dropped or nothing is left, is a stall. The faults
// come once part of the load is produced, after the first arrival.
//
// The reader shares the cluster with the processors, so a fault that
// slows it (a leader of the output topic killed) counts too: the stall is
// the one a downstream consumer lives through. Records are timed by
// arrival, not by their timestamps: the processor forwards each signal's
// own (event time) timestamp unchanged, and the output topics use
// CreateTime.
//
// All methods may be called concurrently.
type stallMeter struct {
	mu       sync.Mutex
	started  bool
	begin    time.Time     // the start
	last     time.Time     // the latest arrival
	first    time.Duration // from the start to the first arrival
	longest  time.Duration // the longest stretch between arrivals so far
	endsAt   time.Time     // when the longest stretch ended
	arrivals int64         // records seen
}

// start marks the moment from which progress is expected: the load's start.
// Arrivals before it (none in practice) are ignored.
func (m *stallMeter) start(at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.started, m.begin = true, at
}

// arrived records n records that became visible at t.
func (m *stallMeter) arrived(t time.Time, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.started || n <= 0 {
		return
	}
	if m.arrivals == 0 {
		m.first, m.last = t.Sub(m.begin), t
	}
	if gap := t.Sub(m.last); gap > m.longest {
		m.longest, m.endsAt = gap, t
	}
	if t.After(m.last) {
		m.last = t
	}
	m.arrivals += int64(n)
}

// stall is one reading of a stallMeter.
type stall struct {
	longest  time.Duration // longest stretch between arrivals
	endsAt   time.Time     // when that stretch ended (zero without one)
	first    time.Duration // from the start to the first arrival
	arrivals int64         // records seen since the start
}

func (m *stallMeter) read() stall {
	m.mu.Lock()
	defer m.mu.Unlock()
	return stall{m.longest, m.endsAt, m.first, m.arrivals}
}

// count is how many records have arrived so far.
func (m *stallMeter) count() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.arrivals
}

// watchOutput reads topic from its start as a read_committed consumer and
// reports each fetch's records to m, until ctx ends. A topic deleted and
// created again (ops) leaves a client fetching by the old topic ID for
// ever: when fetches have failed for an unknown topic without a break for
// watchRenew, it reads the topic again with a new client, from the start.
func watchOutput(ctx context.Context, brokers []string, topic string, m *stallMeter) error {
	for ctx.Err() == nil {
		if err := watchOnce(ctx, brokers, topic, m); err != nil {
			return err
		}
	}
	return nil
}

// watchRenew is how long fetches of the output may fail before the
// watcher takes a new client.
const watchRenew = 3 * time.Second

func watchOnce(ctx context.Context, brokers []string, topic string, m *stallMeter) error {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// Arrivals are timed by fetch: a short wait keeps their time
		// close to the commit that made them visible.
		kgo.FetchMaxWait(100*time.Millisecond),
	)
	if err != nil {
		return err
	}
	defer cl.Close()
	var failingSince time.Time
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		if n := fs.NumRecords(); n > 0 {
			m.arrived(time.Now(), n)
		}
		failed := false
		fs.EachError(func(_ string, _ int32, err error) {
			failed = failed || errors.Is(err, kerr.UnknownTopicID) || errors.Is(err, kerr.UnknownTopicOrPartition)
		})
		switch {
		case !failed:
			failingSince = time.Time{}
		case failingSince.IsZero():
			failingSince = time.Now()
		case time.Since(failingSince) >= watchRenew:
			return nil
		}
	}
	return nil
}
