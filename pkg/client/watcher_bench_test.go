package client

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/topics"
)

// BenchmarkWatcher measures the receipt watcher's own work, without a
// broker: ReceiptAsync registering n waiters and the watcher matching n
// changelog answers (6 partitions, fetches of 1,000 records) to them, in
// two orders — every waiter first (each answer finds its waiter), every
// answer first (each waiter finds its answer kept). n is
// COHORTGATE_BENCH_RECEIPTS (default 100,000); the records are made with
// the timer stopped. It reports receipts/s and receipts per CPU-second of
// the process (GC included): flat in n is the aim.
//
//	COHORTGATE_BENCH_RECEIPTS=1000000 go test -run '^$' -bench BenchmarkWatcher -benchtime=1x -count=3 ./pkg/client/
func BenchmarkWatcher(b *testing.B) {
	n := 100000
	if s := os.Getenv("COHORTGATE_BENCH_RECEIPTS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			b.Fatalf("COHORTGATE_BENCH_RECEIPTS=%q: want a positive count", s)
		}
	}
	for _, order := range []string{"waiters-first", "answers-first"} {
		b.Run(fmt.Sprintf("%s/n=%d", order, n), func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				c, w, sent := testWatcher(b, n)
				values := make([][]byte, n)
				for i, p := range sent {
					values[i] = answerValue(p)
				}
				var got atomic.Int64
				done := func(rec topics.MemberRecord, err error) {
					if err != nil {
						b.Error(err)
					}
					got.Add(1)
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
				b.StartTimer()
				t0, cpu0 := time.Now(), cpuTime(b)
				if order == "waiters-first" {
					for _, p := range sent {
						c.ReceiptAsync(ctx, p, done)
					}
				}
				feedAnswers(w, sent, values)
				if order == "answers-first" {
					for _, p := range sent {
						c.ReceiptAsync(ctx, p, done)
					}
				}
				took, cpu := time.Since(t0), cpuTime(b)-cpu0
				b.StopTimer()
				if got.Load() != int64(n) {
					b.Fatalf("%d of %d receipts", got.Load(), n)
				}
				b.ReportMetric(float64(n)/took.Seconds(), "receipts/s")
				b.ReportMetric(float64(n)/cpu.Seconds(), "receipts/cpu-s")
				cancel()
				c.Close()
				b.StartTimer()
			}
		})
	}
}

// cpuTime is the CPU time the process has used, user and system: on a
// shared machine, receipts per CPU-second vary less than per second.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// testWatcher returns a client that makes no connection, with a watcher
// that reads nothing but what feedAnswers gives it, and n commands
// published, as Kafka would have acknowledged them.
func testWatcher(tb testing.TB, n int) (*Client, *watcher, []Published) {
	tb.Helper()
	c, err := New(Brokers("127.0.0.1:1"), Unclaimed(2*n))
	if err != nil {
		tb.Fatal(err)
	}
	const parts = 6
	c.mu.partitions[c.topics.Commands] = parts
	stamp := time.UnixMilli(time.Now().UnixMilli())
	w := newWatcher(c, stamp, func() {})
	close(w.ended)
	c.mu.watcher = w
	next := make([]int64, parts)
	sent := make([]Published, n)
	for i := range sent {
		user := uint64(1e12) + uint64(i)
		part, err := c.partitionOf(context.Background(), c.topics.Commands, topics.AppendUserID(nil, user), false)
		if err != nil {
			tb.Fatal(err)
		}
		sent[i] = Published{
			Command:   topics.Command{Op: topics.Leave, UserID: user, RequestID: "r-" + strconv.Itoa(i)},
			Topic:     c.topics.Commands,
			Partition: part,
			Offset:    next[part],
			Timestamp: stamp,
		}
		next[part] += 2 // a transaction's marker after each
	}
	return c, w, sent
}

// feedAnswers gives w the changelog answers to sent, values, partition by
// partition in fetches of 1,000 records, as a reader would. The records
// are reused from fetch to fetch: the watcher keeps none.
func feedAnswers(w *watcher, sent []Published, values [][]byte) {
	byPart := make(map[int32][]int)
	for i, p := range sent {
		byPart[p.Partition] = append(byPart[p.Partition], i)
	}
	const per = 1000
	step := per / len(byPart)
	recs := make([]kgo.Record, per)
	changelog := string(w.c.topics.Changelog)
	for start := 0; ; start += step {
		var f kgo.Fetch
		f.Topics = []kgo.FetchTopic{{Topic: changelog}}
		n := 0
		for part, is := range byPart {
			if start >= len(is) {
				continue
			}
			fp := kgo.FetchPartition{Partition: part}
			for _, i := range is[start:min(len(is), start+step)] {
				p := &sent[i]
				r := &recs[n]
				n++
				*r = kgo.Record{Topic: changelog, Partition: p.Partition, Offset: p.Offset,
					Key: topics.AppendUserID(r.Key[:0], p.Command.UserID), Value: values[i],
					Timestamp: p.Timestamp.Add(time.Millisecond)}
				fp.Records = append(fp.Records, r)
			}
			f.Topics[0].Partitions = append(f.Topics[0].Partitions, fp)
		}
		if n == 0 {
			return
		}
		w.take(kgo.Fetches{f})
	}
}

// answerValue is the changelog value the processor writes for leave p.
func answerValue(p Published) []byte {
	at := uint64(p.Timestamp.UnixNano())
	rec := topics.MemberRecord{
		UserID: p.Command.UserID, Status: "left", LeftAtNs: &at,
		Command: &topics.CommandRef{Op: "leave", AtNs: at, Topic: string(p.Topic), Partitions: 6,
			Partition: p.Partition, Offset: p.Offset, RequestID: p.Command.RequestID, Changed: true},
		Receipt: &topics.Receipt{AppliedAtNs: int64(at) + 1e6, SignalsPartition: p.Partition, SignalsOffset: 12345},
	}
	return topics.AppendMemberRecord(nil, rec)
}
