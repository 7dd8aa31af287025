package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/integration/workload"
	"github.com/cohortgate/cohortgate/topics"
)

// latencyResult is the leave latency under load.
//
// A leave's latency is receipt.applied_at_ns of the changelog record of
// its command (the processor's wall clock when the leave was in force in
// its gate) minus the wall clock when the harness's ProduceSync of the
// command returned (Kafka acknowledged it). Both clocks are this machine's.
// A negative value means the processor applied the leave before the
// acknowledgement reached the producer.
type latencyResult struct {
	Sent, Found int
	Latency     summary
	Negative    int // leaves applied before their acknowledgement was seen
	// FromSend is the same to the gate closing, but from just before the
	// leave was handed to the producer (its at_ns): an upper bound that
	// includes the produce round trip.
	FromSend summary

	TargetRate float64 // signals/s asked of the load generator
	Rate       float64 // signals/s written while the leaves went out
	Grace      time.Duration
	CPU        float64 // the processor's cores while the leaves went out
	// Steps is where the time went, from the processor's own histograms
	// over the leaves' span (stepSeries); nil if they could not be read.
	Steps   []stepFigures
	Command string
	Err        string
}

// errNoEOSRate is returned when the latency phase has no rate to aim at.
var errNoEOSRate = errors.New("no exactly-once rate measured; give --latency-rate")

// latencyPhase starts an exactly-once processor on fresh topics, lets the
// load generator write signals at half the measured exactly-once rate, and
// meanwhile produces leaves of distinct users, one at a time, spread over
// --latency-duration; then reads their receipts from the changelog.
func (h *harness) latencyPhase(ctx context.Context) {
	r := &latencyResult{Grace: h.o.latencyGrace}
	h.res.Latency = r
	if err := h.latency(ctx, r); err != nil {
		r.Err = err.Error()
		h.res.errorf("latency: %v", err)
		h.printf("latency: FAILED: %v", err)
	}
}

func (h *harness) latency(ctx context.Context, r *latencyResult) error {
	r.TargetRate = h.o.latencyRate
	if r.TargetRate == 0 {
		for _, t := range h.res.Throughput {
			if t.Name == runProcessorEOS && t.Err == "" {
				r.TargetRate = t.Rate / 2
			}
		}
	}
	if r.TargetRate == 0 {
		return errNoEOSRate
	}
	if h.o.latencyLeaves > h.o.load.Users {
		return fmt.Errorf("--latency-leaves %d exceeds --users %d: the leaves are of distinct users", h.o.latencyLeaves, h.o.load.Users)
	}
	set := h.topicSet("lat")
	if err := h.createTopics(ctx, set, int32(h.o.partitions)); err != nil {
		return err
	}

	addr, err := freeAddr()
	if err != nil {
		return err
	}
	args := h.processorArgs(h.topic("lat.group"), filepath.Join(h.work, "latency", "data"), addr, set,
		"--grace", h.o.latencyGrace.String())
	r.Command = "processor " + joinArgs(args)
	h.printf("latency: starting the processor (exactly once, grace %v)", h.o.latencyGrace)
	proc, err := h.procs.start("latency-processor", h.logPath("latency-processor"), nil, h.o.processor, args...)
	if err != nil {
		return err
	}
	defer proc.stop(30 * time.Second)
	if err := waitReady(ctx, proc, "http://"+addr+"/readyz", 90*time.Second); err != nil {
		return err
	}

	duration := h.o.latencyFor + 10*time.Second // the leaves start after a warm-up
	lg := []string{"--brokers", joinList(h.o.brokers), "--users", strconv.Itoa(h.o.load.Users),
		"--signals", strconv.Itoa(int(r.TargetRate * duration.Seconds())), "--value-size", strconv.Itoa(h.o.load.ValueSize),
		"--leave-pct", "0", "--rejoin-pct", "0", "--rate", strconv.Itoa(int(r.TargetRate)),
		"--seed", strconv.FormatUint(h.o.load.Seed+1, 10), "--create-topics=false"}
	lg = append(lg, workload.TopicFlags(set)...)
	h.printf("latency: signals at %s/s: loadgen %s", thousands(r.TargetRate), joinArgs(lg))
	gen, err := h.procs.start("latency-loadgen", h.logPath("latency-loadgen"), nil, h.o.loadgen, lg...)
	if err != nil {
		return err
	}
	defer gen.stop(10 * time.Second)
	if err := workload.Sleep(ctx, 5*time.Second); err != nil {
		return err
	}

	before, herr := scrapeHistograms(ctx, "http://"+addr)
	acks, sent, rate, cpu, err := h.produceLeaves(ctx, set, proc, gen)
	if err != nil {
		return err
	}
	r.Sent, r.Rate, r.CPU = len(acks), rate, cpu
	after, err := scrapeHistograms(ctx, "http://"+addr)
	if err = errors.Join(herr, err); err != nil {
		h.printf("latency: the processor's step histograms not read: %v", err)
	} else {
		r.Steps = stepsBetween(before, after)
	}
	gen.stop(10 * time.Second)

	h.printf("latency: %d leaves acknowledged; reading their receipts from %s", len(acks), set.Changelog)
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	applied, err := h.receipts(rctx, string(set.Changelog), acks)
	r.Found = len(applied)
	if err != nil {
		return err
	}
	lat := make([]time.Duration, 0, len(applied))
	fromSend := make([]time.Duration, 0, len(applied))
	for id, at := range applied {
		d := at.Sub(acks[id])
		if d < 0 {
			r.Negative++
		}
		lat = append(lat, d)
		fromSend = append(fromSend, at.Sub(sent[id]))
	}
	r.FromSend = summarize(fromSend)
	r.Latency = summarize(lat)
	h.printf("latency: %d leaves: p50 %v, p99 %v, max %v; signals at %s/s", r.Found,
		r.Latency.P50, r.Latency.P99, r.Latency.Max, thousands(r.Rate))
	return nil
}

// produceLeaves produces --latency-leaves leaves of distinct users, evenly
// spread over --latency-duration, each waiting for its acknowledgement. It
// returns the acknowledgement and send times by request id, the signals
// rate the load generator kept meanwhile and the processor's cores.
func (h *harness) produceLeaves(ctx context.Context, set topics.Set, proc, gen *child) (acks, sent map[string]time.Time, rate, cores float64, err error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.o.brokers...), kgo.ClientID("cohortgate-bench-leaves"),
		kgo.ProducerLinger(0))
	if err != nil {
		return nil, nil, 0, 0, err
	}
	defer cl.Close()
	n := h.o.latencyLeaves
	users := rand.New(rand.NewPCG(h.o.load.Seed, 7)).Perm(h.o.load.Users)[:n]
	acks, sent = make(map[string]time.Time, n), make(map[string]time.Time, n)

	endsBefore, err := h.a.endOffsets(ctx, string(set.Signals))
	if err != nil {
		return nil, nil, 0, 0, err
	}
	cpuBefore, _ := procCPU(proc.pid())
	start := time.Now()
	every := h.o.latencyFor / time.Duration(n)
	var lastPrint time.Time
	for i, u := range users {
		if err := workload.Sleep(ctx, time.Until(start.Add(time.Duration(i)*every))); err != nil {
			return nil, nil, 0, 0, err
		}
		if gen.exited() {
			return nil, nil, 0, 0, gen.failure()
		}
		if proc.exited() {
			return nil, nil, 0, 0, proc.failure()
		}
		user := uint64(u) + 1
		id := h.topic("lat-" + strconv.Itoa(i))
		now := time.Now()
		rec := &kgo.Record{
			Topic: string(set.Commands), Key: topics.AppendUserID(nil, user), Timestamp: now,
			Value: topics.AppendCommand(nil, topics.Command{Op: topics.Leave, UserID: user,
				AtNs: uint64(now.UnixNano()), HasAt: true, RequestID: id}),
		}
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := cl.ProduceSync(pctx, rec).FirstErr()
		acked := time.Now()
		cancel()
		if err != nil {
			return nil, nil, 0, 0, fmt.Errorf("producing leave %d: %w", i, err)
		}
		acks[id], sent[id] = acked, now
		if time.Since(lastPrint) >= time.Second {
			lastPrint = time.Now()
			h.printf("latency: %d/%d leaves acknowledged", i+1, n)
		}
	}
	elapsed := time.Since(start)
	cpuAfter, _ := procCPU(proc.pid())
	endsAfter, err := h.a.endOffsets(ctx, string(set.Signals))
	if err != nil {
		return nil, nil, 0, 0, err
	}
	rate = float64(endsAfter.sum()-endsBefore.sum()) / elapsed.Seconds()
	return acks, sent, rate, (cpuAfter - cpuBefore).seconds() / elapsed.Seconds(), nil
}

// receipts reads the changelog from the start until it has the receipt of
// every request id in acks, and returns when each leave was applied.
func (h *harness) receipts(ctx context.Context, changelog string, acks map[string]time.Time) (map[string]time.Time, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.o.brokers...), kgo.ClientID("cohortgate-bench-receipts"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeTopics(changelog),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	out := make(map[string]time.Time, len(acks))
	for len(out) < len(acks) {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return out, fmt.Errorf("found %d of %d receipts: %w", len(out), len(acks), err)
		}
		fs.EachRecord(func(rec *kgo.Record) {
			m, err := topics.DecodeMemberRecord(rec.Value)
			if err != nil || m.Command == nil || m.Receipt == nil || m.Command.Op != "leave" {
				return
			}
			id := m.Command.RequestID
			if _, ok := acks[id]; !ok || !out[id].IsZero() {
				return
			}
			out[id] = time.Unix(0, m.Receipt.AppliedAtNs)
		})
	}
	return out, nil
}

// waitReady polls url until it answers 200, the child exits, or d passes.
func waitReady(ctx context.Context, c *child, url string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	var last string
	for {
		if c.exited() {
			return c.failure()
		}
		resp, err := client.Get(url)
		if err == nil {
			var b strings.Builder
			buf := make([]byte, 256)
			n, _ := resp.Body.Read(buf)
			b.Write(buf[:n])
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = strings.TrimSpace(b.String())
		}
		if err := workload.Sleep(ctx, 100*time.Millisecond); err != nil {
			return fmt.Errorf("%s not ready within %v (last: %q)", c.name, d, last)
		}
	}
}
