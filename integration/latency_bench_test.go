package integration

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/pkg/fanout"
	"github.com/cohortgate/cohortgate/topics"
)

// BenchmarkAlignmentLatency measures the forward latency, from a signal's
// event time to its forwarded copy being readable (read_committed), at a
// steady input rate, with no grace and with the default grace. The
// difference is what alignment costs. Run it once per grace:
//
//	go test ./integration -run '^$' -bench AlignmentLatency -benchtime 1x
func BenchmarkAlignmentLatency(b *testing.B) {
	const (
		rate     = 500 // signals per second
		duration = 4 * time.Second
	)
	for _, grace := range []time.Duration{0, fanout.DefaultGrace} {
		b.Run("grace="+grace.String(), func(b *testing.B) {
			for range b.N {
				e := newEnv(b, 3)
				cfg := e.config()
				cfg.Grace = grace
				cfg.CommitInterval = fanout.DefaultCommitInterval
				pr := e.start(b.TempDir(), cfg)
				pr.waitReady(b, 3)
				lat := e.measureLatency(rate, duration)
				slices.Sort(lat)
				q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
				b.ReportMetric(q(0.50), "p50-ms")
				b.ReportMetric(q(0.99), "p99-ms")
				b.ReportMetric(q(1), "max-ms")
				b.ReportMetric(float64(len(lat)), "signals")
			}
		})
	}
}

// measureLatency produces signals stamped with the wall clock at rate per
// second for d, reads the cohort topic meanwhile, and returns each signal's
// latency from event time to being read.
func (e *env) measureLatency(rate int, d time.Duration) []time.Duration {
	e.t.Helper()
	n := int(d.Seconds() * float64(rate))
	ctx, cancel := context.WithTimeout(context.Background(), d+2*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker.addrs...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeTopics(string(e.set.Cohort)), kgo.FetchMaxWait(10*time.Millisecond))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	var (
		mu   sync.Mutex
		seen = make(map[string]time.Duration, n)
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		for {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				return
			}
			now := time.Now()
			mu.Lock()
			fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)] = now.Sub(r.Timestamp) })
			complete := len(seen) >= n
			mu.Unlock()
			if complete {
				return
			}
		}
	}()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for i := range n {
		<-tick.C
		user := uint64(i % 97)
		e.cl.Produce(ctx, &kgo.Record{
			Topic: string(e.set.Signals), Key: topics.AppendUserID(nil, user),
			Value: []byte("l" + strconv.Itoa(i)), Timestamp: time.Now(),
		}, func(_ *kgo.Record, err error) {
			if err != nil {
				e.t.Errorf("produce: %v", err)
			}
		})
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) < n {
		e.t.Fatal(fmt.Errorf("read %d of %d signals", len(seen), n))
	}
	out := make([]time.Duration, 0, n)
	for _, l := range seen {
		out = append(out, l)
	}
	return out
}
