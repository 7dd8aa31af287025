package client_test

import (
	"context"
	"encoding/json"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cohortgate/cohortgate/pkg/client"
	"github.com/cohortgate/cohortgate/topics"
)

// BenchmarkBulk: per round, on the embedded broker with a processor in
// this process, one client publishes benchLeaves leaves with
// PublishBatch (published/s), waits for every receipt with its watcher
// (applied/s, publish start to the last receipt), and a fresh client's
// watcher tracks every receipt again from the changelog alone
// (tracked/s). Run with -benchtime=1x -count=3 for three rounds.
//
// COHORTGATE_BENCH_BROKERS=host:port,... runs it against those brokers
// instead, where a processor must be running (bin/processor run on Apache
// Kafka, say), and COHORTGATE_BENCH_LEAVES sets the leaves per round
// (default 20000). Each client keeps up to twice a round's answers
// (Unclaimed): a waiter registered after the watcher read its answer finds
// it kept instead of starting a scan of its own, which at the default bound
// and 100,000 leaves meant tens of thousands of readers and an
// out-of-memory kill. User ids start from the clock, so that every round
// leaves users never seen before, whatever ran on the brokers earlier.
func BenchmarkBulk(b *testing.B) {
	brokers, stop, err := benchBrokers()
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	benchLeaves := 20000
	if s := os.Getenv("COHORTGATE_BENCH_LEAVES"); s != "" {
		if benchLeaves, err = strconv.Atoi(s); err != nil || benchLeaves < 1 {
			b.Fatalf("COHORTGATE_BENCH_LEAVES=%q: want a positive count", s)
		}
	}
	base := uint64(time.Now().UnixMilli()) * 1000000 // apart by more than a round's count every ms
	round := 0
	for b.Loop() {
		round++
		c, err := client.New(client.Brokers(brokers...), client.Unclaimed(2*benchLeaves))
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		reqs := make([]client.Request, benchLeaves)
		for i := range reqs {
			reqs[i] = client.Request{Op: topics.Leave, UserID: base + uint64(round*benchLeaves+i)}
		}
		start := time.Now()
		// Start the watcher before the batch, as ApplyBatch does.
		first, err := c.Leave(ctx, base)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.WaitReceipt(ctx, first); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		res := c.PublishBatch(ctx, reqs)
		published := time.Since(t0)
		sent := make([]client.Published, 0, len(res))
		for _, r := range res {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
			sent = append(sent, r.Published)
		}
		waitAll(b, ctx, c, sent)
		applied := time.Since(t0)
		c.Close()

		fresh, err := client.New(client.Brokers(brokers...), client.Unclaimed(2*benchLeaves))
		if err != nil {
			b.Fatal(err)
		}
		// The fresh watcher starts at the first command's timestamp and
		// reads every answer since, matching each to its waiter.
		t1 := time.Now()
		waitAll(b, ctx, fresh, sent)
		tracked := time.Since(t1)
		fresh.Close()
		cancel()
		n := float64(benchLeaves)
		b.Logf("round %d: %d leaves published in %v (%.0f/s), all applied in %v (%.0f/s), tracked by a fresh watcher in %v (%.0f/s); round %v",
			round, benchLeaves, published.Round(time.Millisecond), n/published.Seconds(),
			applied.Round(time.Millisecond), n/applied.Seconds(),
			tracked.Round(time.Millisecond), n/tracked.Seconds(), time.Since(start).Round(time.Millisecond))
		b.ReportMetric(float64(benchLeaves)/published.Seconds(), "published/s")
		b.ReportMetric(float64(benchLeaves)/applied.Seconds(), "applied/s")
		b.ReportMetric(float64(benchLeaves)/tracked.Seconds(), "tracked/s")
	}
}

// benchBrokers returns COHORTGATE_BENCH_BROKERS, or starts the embedded
// broker and a processor.
func benchBrokers() ([]string, func(), error) {
	if s := os.Getenv("COHORTGATE_BENCH_BROKERS"); s != "" {
		return strings.Split(s, ","), func() {}, nil
	}
	return cohortgate()
}

// waitAll waits for every receipt of sent with ReceiptAsync.
func waitAll(b *testing.B, ctx context.Context, c *client.Client, sent []client.Published) {
	b.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	wg.Add(len(sent))
	for _, p := range sent {
		c.ReceiptAsync(ctx, p, func(rec topics.MemberRecord, err error) {
			if err == nil && (rec.Command == nil || rec.Command.Offset != p.Offset) {
				err = context.Canceled
			}
			if err != nil {
				mu.Lock()
				first = err
				mu.Unlock()
			}
			wg.Done()
		})
	}
	wg.Wait()
	if first != nil {
		b.Fatal(first)
	}
}

// BenchmarkForgottenReceipts: per round, on the embedded broker with a
// processor in this process, COHORTGATE_BENCH_FORGOTTEN leaves (default
// 5000) are published and their answers read and forgotten by the watcher
// (Unclaimed(1)) before anyone waits for them; then every receipt is
// waited for at once. It reports the waits per second, the scan readers
// made and the most open at once, and how much memory the process took
// from the OS during the waits (runtime's Sys, which does not shrink).
func BenchmarkForgottenReceipts(b *testing.B) {
	brokers, stop, err := benchBrokers()
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	n := 5000
	if s := os.Getenv("COHORTGATE_BENCH_FORGOTTEN"); s != "" {
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			b.Fatalf("COHORTGATE_BENCH_FORGOTTEN=%q: want a positive count", s)
		}
	}
	base := uint64(time.Now().UnixMilli()) * 1000000
	round := 0
	for b.Loop() {
		round++
		var readers openReaders
		c, err := client.New(client.Brokers(brokers...), client.Unclaimed(1), client.KafkaHooks(readers.hooks))
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		reqs := make([]client.Request, n)
		for i := range reqs {
			reqs[i] = client.Request{Op: topics.Leave, UserID: base + uint64(round*n+i)}
		}
		first, err := c.Leave(ctx, base+uint64(round*n+n))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.WaitReceipt(ctx, first); err != nil {
			b.Fatal(err)
		}
		var sent []client.Published
		for _, r := range c.ApplyBatch(ctx, reqs) { // the watcher reads every answer, keeping one
			if r.Err != nil {
				b.Fatal(r.Err)
			}
			sent = append(sent, r.Published)
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		sys0 := ms.Sys
		t0 := time.Now()
		waitAll(b, ctx, c, sent)
		took := time.Since(t0)
		runtime.ReadMemStats(&ms)
		c.Close()
		cancel()
		readers.mu.Lock()
		made, most := readers.made, readers.most
		readers.mu.Unlock()
		b.Logf("round %d: %d forgotten receipts waited for in %v (%.0f/s), %d scan readers made, at most %d open, +%d MiB from the OS",
			round, n, took.Round(time.Millisecond), float64(n)/took.Seconds(), made, most, (ms.Sys-sys0)>>20)
		b.ReportMetric(float64(n)/took.Seconds(), "receipts/s")
		b.ReportMetric(float64(most), "readers-open")
	}
}

// BenchmarkTrack: a fresh client's watcher tracks the receipts of N
// leaves already applied (COHORTGATE_BENCH_LEAVES, default 20000), once
// per iteration (-benchtime=3x: three rounds on the same leaves), and
// reports the median receipts/s. The leaves are published and applied
// before the timer starts; with COHORTGATE_BENCH_SENT=FILE they are
// written there, and read back instead of published again when FILE
// exists, so that two builds can track the same receipts. Run it as
// BenchmarkBulk is, against brokers with a processor running.
func BenchmarkTrack(b *testing.B) {
	brokers, stop, err := benchBrokers()
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	n := 20000
	if s := os.Getenv("COHORTGATE_BENCH_LEAVES"); s != "" {
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			b.Fatalf("COHORTGATE_BENCH_LEAVES=%q: want a positive count", s)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	sent := benchSent(b, ctx, brokers, n, os.Getenv("COHORTGATE_BENCH_SENT"))
	var rates []float64
	for b.Loop() {
		c, err := client.New(client.Brokers(brokers...), client.Unclaimed(2*len(sent)))
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		waitAll(b, ctx, c, sent)
		took := time.Since(t0)
		c.Close()
		rates = append(rates, float64(len(sent))/took.Seconds())
		b.Logf("round %d: %d receipts tracked by a fresh watcher in %v (%.0f/s)", len(rates), len(sent), took.Round(time.Millisecond), rates[len(rates)-1])
	}
	slices.Sort(rates)
	b.ReportMetric(rates[len(rates)/2], "tracked/s")
}

// benchSent returns n leaves published and applied, read from file when
// it exists, else published (and written to file when it is not "").
func benchSent(b *testing.B, ctx context.Context, brokers []string, n int, file string) []client.Published {
	b.Helper()
	if file != "" {
		if data, err := os.ReadFile(file); err == nil {
			var sent []client.Published
			if err := json.Unmarshal(data, &sent); err != nil {
				b.Fatalf("%s: %v", file, err)
			}
			return sent
		}
	}
	c, err := client.New(client.Brokers(brokers...), client.Unclaimed(2*n))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	base := uint64(time.Now().UnixMilli()) * 1000000
	reqs := make([]client.Request, n)
	for i := range reqs {
		reqs[i] = client.Request{Op: topics.Leave, UserID: base + uint64(i)}
	}
	var sent []client.Published
	for _, r := range c.ApplyBatch(ctx, reqs) {
		if r.Err != nil {
			b.Fatal(r.Err)
		}
		sent = append(sent, r.Published)
	}
	if file != "" {
		data, err := json.Marshal(sent)
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(file, data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return sent
}
