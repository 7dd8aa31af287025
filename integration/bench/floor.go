package main

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/topics"
)

// floorWatch is the leave latency's floor: a plain franz-go consumer of
// the commands topic, with the processor's commands consumer's settings
// (read_committed, no group), reading the round's commands topic (fresh,
// holding only the leaves) beside the processor, under the same load. A leave's floor is the time from its
// acknowledgement to the return of the poll that hands it to this
// consumer: what Kafka and the client take before any processing, which
// no processor can beat.
type floorWatch struct {
	cl     *kgo.Client
	done   chan struct{}
	mu     sync.Mutex
	polled map[string]time.Time // by request id
}

// watchFloor starts consuming topic from its start. The caller must call
// stop.
func watchFloor(brokers []string, topic string) (*floorWatch, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ClientID("cohortgate-bench-floor"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	f := &floorWatch{cl: cl, done: make(chan struct{}), polled: make(map[string]time.Time)}
	go f.run()
	return f, nil
}

func (f *floorWatch) run() {
	defer close(f.done)
	for {
		fs := f.cl.PollFetches(context.Background())
		at := time.Now()
		if fs.IsClientClosed() {
			return
		}
		f.mu.Lock()
		fs.EachRecord(func(r *kgo.Record) {
			c, err := topics.DecodeCommand(r.Key, r.Value)
			if err != nil || c.RequestID == "" {
				return
			}
			if _, seen := f.polled[c.RequestID]; !seen {
				f.polled[c.RequestID] = at
			}
		})
		f.mu.Unlock()
	}
}

// wait waits until every id of acks was polled, or d passes.
func (f *floorWatch) wait(ctx context.Context, acks map[string]time.Time, d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		f.mu.Lock()
		n := 0
		for id := range acks {
			if _, ok := f.polled[id]; ok {
				n++
			}
		}
		f.mu.Unlock()
		if n == len(acks) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// floors returns, for each acknowledged leave that was polled, the time
// from its acknowledgement to its poll.
func (f *floorWatch) floors(acks map[string]time.Time) []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []time.Duration
	for id, acked := range acks {
		if at, ok := f.polled[id]; ok {
			out = append(out, at.Sub(acked))
		}
	}
	return out
}

// polledAt is when the poll that handed the leave of request id returned.
func (f *floorWatch) polledAt(id string) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	at, ok := f.polled[id]
	return at, ok
}

// stop closes the consumer and waits for its goroutine.
func (f *floorWatch) stop() {
	f.cl.Close()
	<-f.done
}
