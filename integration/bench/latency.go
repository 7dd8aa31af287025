package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
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
	// Floor is a plain franz-go consumer's time from the same
	// acknowledgements to its poll of the leaves, in the same run and
	// load (floorWatch): what the processor is judged against.
	Floor summary

	TargetRate float64 // signals/s asked of the load generator
	Rate       float64 // signals/s written while the leaves went out
	Grace      time.Duration
	CPU        float64 // the processor's cores while the leaves went out
	// Steps is where the time went, from the processor's own histograms
	// over the leaves' spans (stepSeries), every round's summed; nil if
	// they could not be read.
	Steps   []stepFigures
	Command string // of the last round
	Err     string
	// Rounds are the repetitions, each with a processor and topics of its
	// own; the figures above pool their leaves.
	Rounds []latencyRound
}

// latencyRound is one repetition of the latency phase.
type latencyRound struct {
	Found     int
	Latency   summary // from the acknowledgement
	Floor     summary // a plain consumer's, from the acknowledgement to its poll (floorWatch)
	Rate, CPU float64
	// RunWait is how long the threads of each process waited on a run
	// queue for a CPU while the leaves went out, in milliseconds a
	// second, summed over threads (procRunWait); nil if not read.
	RunWait *runWait
}

// runWait is the run-queue wait of the processes of a latency round, in
// milliseconds per second of wall clock: the processor's, the load
// generator's and the harness's own (where the floor's consumer runs).
type runWait struct{ Processor, Loadgen, Harness float64 }

// readRunWaits reads procRunWait of the processor, the load generator and
// this process, in that order.
func readRunWaits(proc, gen *child) ([3]time.Duration, error) {
	var w [3]time.Duration
	var errs []error
	for i, pid := range []int{proc.pid(), gen.pid(), os.Getpid()} {
		var err error
		w[i], err = procRunWait(pid)
		errs = append(errs, err)
	}
	return w, errors.Join(errs...)
}

// worstP99 is the highest p99 of the rounds, the one an aim is judged by.
func (r *latencyResult) worstP99() time.Duration {
	var worst time.Duration
	for _, x := range r.Rounds {
		worst = max(worst, x.Latency.P99)
	}
	return worst
}

// errNoEOSRate is returned when the latency phase has no rate to aim at.
var errNoEOSRate = errors.New("no exactly-once rate measured; give --latency-rate")

// latencyPhase runs --latency-rounds rounds, each of which starts an
// exactly-once processor on fresh topics, lets the load generator write
// signals at half the measured exactly-once rate, and meanwhile produces
// its share of --latency-leaves leaves of distinct users, one at a time,
// spread over its share of --latency-duration; then reads their receipts
// from the changelog.
func (h *harness) latencyPhase(ctx context.Context) {
	r := &latencyResult{Grace: h.o.latencyGrace}
	h.res.Latency = r
	if err := h.latencyRounds(ctx, r); err != nil {
		r.Err = err.Error()
		h.res.errorf("latency: %v", err)
		h.printf("latency: FAILED: %v", err)
	}
}

func (h *harness) latencyRounds(ctx context.Context, r *latencyResult) error {
	r.TargetRate = h.o.latencyRate
	if r.TargetRate == 0 {
		for _, x := range h.res.summaries() {
			if x.Name == runProcessorEOS && x.Rate.N > 0 {
				r.TargetRate = x.Rate.Median / 2
			}
		}
	}
	if r.TargetRate == 0 {
		return errNoEOSRate
	}
	if h.o.latencyLeaves > h.o.load.Users {
		return fmt.Errorf("--latency-leaves %d exceeds --users %d: the leaves are of distinct users", h.o.latencyLeaves, h.o.load.Users)
	}
	rounds := h.o.latencyRounds
	users := rand.New(rand.NewPCG(h.o.load.Seed, 7)).Perm(h.o.load.Users)[:h.o.latencyLeaves]
	var lat, fromSend, floor []time.Duration
	steps := make(map[string]histogram)
	var rate, cpu float64
	for i := range rounds {
		mine := users[i*len(users)/rounds : (i+1)*len(users)/rounds]
		x, err := h.latency(ctx, r, i+1, mine, h.o.latencyFor/time.Duration(rounds))
		if err != nil {
			return fmt.Errorf("round %d: %w", i+1, err)
		}
		rl := latencyRound{Found: len(x.lat), Latency: summarize(slices.Clone(x.lat)), Floor: summarize(slices.Clone(x.floor)),
			Rate: x.rate, CPU: x.cpu, RunWait: x.runWait}
		r.Rounds = append(r.Rounds, rl)
		h.printf("latency: round %d: %d leaves: p50 %v, p99 %v, max %v; floor p50 %v, p99 %v; signals at %s/s", i+1, rl.Found,
			rl.Latency.P50, rl.Latency.P99, rl.Latency.Max, rl.Floor.P50, rl.Floor.P99, thousands(rl.Rate))
		if w := rl.RunWait; w != nil {
			h.printf("latency: round %d: run-queue wait (ms/s): processor %.0f, load generator %.0f, harness %.0f", i+1, w.Processor, w.Loadgen, w.Harness)
		}
		lat, fromSend, floor = append(lat, x.lat...), append(fromSend, x.fromSend...), append(floor, x.floor...)
		r.Sent, r.Found, r.Negative = r.Sent+x.sent, r.Found+len(x.lat), r.Negative+x.negative
		rate, cpu = rate+x.rate, cpu+x.cpu
		if steps != nil && x.steps != nil {
			for k, v := range x.steps {
				steps[k] = v.plus(steps[k])
			}
		} else {
			steps = nil
		}
	}
	r.Latency, r.FromSend, r.Floor = summarize(lat), summarize(fromSend), summarize(floor)
	r.Rate, r.CPU = rate/float64(rounds), cpu/float64(rounds)
	if steps != nil {
		r.Steps = stepsBetween(nil, steps)
	}
	h.printf("latency: %d leaves in %d rounds: p50 %v, p99 %v (worst round %v), max %v", r.Found, rounds,
		r.Latency.P50, r.Latency.P99, r.worstP99(), r.Latency.Max)
	return nil
}

// latencyOutcome is what one round measured.
type latencyOutcome struct {
	lat, fromSend []time.Duration
	floor         []time.Duration // floorWatch's, of the same leaves
	sent          int
	negative      int
	steps         map[string]histogram // observed over the leaves' span; nil if not read
	rate, cpu     float64
	runWait       *runWait
}

func (h *harness) latency(ctx context.Context, r *latencyResult, round int, users []int, spread time.Duration) (*latencyOutcome, error) {
	name := "lat"
	if round > 1 {
		name += strconv.Itoa(round)
	}
	set := h.topicSet(name)
	if err := h.createTopics(ctx, set, int32(h.o.partitions)); err != nil {
		return nil, err
	}

	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	args := h.processorArgs(h.topic(name+".group"), filepath.Join(h.work, "latency", name, "data"), addr, set,
		"--grace", h.o.latencyGrace.String())
	r.Command = "processor " + joinArgs(args)
	h.printf("latency: round %d: starting the processor (exactly once, grace %v)", round, h.o.latencyGrace)
	proc, err := h.procs.start("latency-processor-"+strconv.Itoa(round), h.logPath("latency-processor-"+strconv.Itoa(round)), nil, h.o.processor, args...)
	if err != nil {
		return nil, err
	}
	defer proc.stop(30 * time.Second)
	if err := waitReady(ctx, proc, "http://"+addr+"/readyz", 90*time.Second); err != nil {
		return nil, err
	}

	duration := spread + 10*time.Second // the leaves start after a warm-up
	lg := []string{"--brokers", joinList(h.o.brokers), "--users", strconv.Itoa(h.o.load.Users),
		"--signals", strconv.Itoa(int(r.TargetRate * duration.Seconds())), "--value-size", strconv.Itoa(h.o.load.ValueSize),
		"--leave-pct", "0", "--rejoin-pct", "0", "--rate", strconv.Itoa(int(r.TargetRate)),
		"--seed", strconv.FormatUint(h.o.load.Seed+uint64(round), 10), "--create-topics=false"}
	lg = append(lg, workload.TopicFlags(set)...)
	bin := h.o.loadgen
	if h.o.latencyNice != 0 {
		// nice execs the load generator: the pid is the generator's, and
		// every thread it makes inherits the niceness.
		lg = append([]string{"-n", strconv.Itoa(h.o.latencyNice), bin}, lg...)
		bin = "nice"
	}
	h.printf("latency: round %d: signals at %s/s: %s %s", round, thousands(r.TargetRate), bin, joinArgs(lg))
	gen, err := h.procs.start("latency-loadgen-"+strconv.Itoa(round), h.logPath("latency-loadgen-"+strconv.Itoa(round)), nil, bin, lg...)
	if err != nil {
		return nil, err
	}
	defer gen.stop(10 * time.Second)
	if err := workload.Sleep(ctx, 5*time.Second); err != nil {
		return nil, err
	}

	floor, err := watchFloor(h.o.brokers, string(set.Commands))
	if err != nil {
		return nil, err
	}
	defer floor.stop()
	x := &latencyOutcome{}
	before, herr := scrapeHistograms(ctx, "http://"+addr)
	waitsBefore, werr := readRunWaits(proc, gen)
	began := time.Now()
	acks, sent, rate, cpu, err := h.produceLeaves(ctx, set, proc, gen, users, spread)
	if err != nil {
		return nil, err
	}
	waitsAfter, err := readRunWaits(proc, gen)
	if werr = errors.Join(werr, err); werr != nil {
		h.printf("latency: round %d: run-queue waits not read: %v", round, werr)
	} else {
		per := func(i int) float64 {
			return float64(waitsAfter[i]-waitsBefore[i]) / float64(time.Millisecond) / time.Since(began).Seconds()
		}
		x.runWait = &runWait{Processor: per(0), Loadgen: per(1), Harness: per(2)}
	}
	floor.wait(ctx, acks, 10*time.Second)
	x.floor = floor.floors(acks)
	x.sent, x.rate, x.cpu = len(acks), rate, cpu
	after, err := scrapeHistograms(ctx, "http://"+addr)
	if err = errors.Join(herr, err); err != nil {
		h.printf("latency: the processor's step histograms not read: %v", err)
	} else {
		x.steps = make(map[string]histogram)
		for _, name := range stepSeries() {
			x.steps[name] = after[name].minus(before[name])
		}
	}
	gen.stop(10 * time.Second)

	h.printf("latency: round %d: %d leaves acknowledged; reading their receipts from %s", round, len(acks), set.Changelog)
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	applied, err := h.receipts(rctx, string(set.Changelog), acks)
	if err != nil {
		return nil, err
	}
	for id, at := range applied {
		d := at.Sub(acks[id])
		if d < 0 {
			x.negative++
		}
		x.lat = append(x.lat, d)
		x.fromSend = append(x.fromSend, at.Sub(sent[id]))
	}
	path := filepath.Join(h.work, "latency", name, "leaves.csv")
	if err := writeLeaves(path, sent, acks, floor, applied); err != nil {
		h.printf("latency: round %d: the leaves' times not written: %v", round, err)
	}
	return x, nil
}

// writeLeaves writes one row per leave, in the order they were sent, with
// the four clock readings of its way (ns since the epoch, this machine's
// clock; 0 where one is missing): sent to the broker, acknowledged, polled
// by the floor's consumer, in force in the processor's gate. A tail the
// processor has and the floor has not, leave by leave, is the processor's;
// one both have is the broker's or the machine's.
func writeLeaves(path string, sent, acks map[string]time.Time, floor *floorWatch, applied map[string]time.Time) error {
	ids := make([]string, 0, len(sent))
	for id := range sent {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b string) int { return sent[a].Compare(sent[b]) })
	ns := func(t time.Time) string {
		if t.IsZero() {
			return "0"
		}
		return strconv.FormatInt(t.UnixNano(), 10)
	}
	var b strings.Builder
	b.WriteString("request_id,sent_ns,acked_ns,floor_polled_ns,applied_ns\n")
	for _, id := range ids {
		polled, _ := floor.polledAt(id)
		fmt.Fprintf(&b, "%s,%s,%s,%s,%s\n", id, ns(sent[id]), ns(acks[id]), ns(polled), ns(applied[id]))
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// produceLeaves produces a leave of each of users (workload indexes, so
// user ids minus one), evenly spread over spread, each waiting for its
// acknowledgement. It returns the acknowledgement and send times by
// request id, the signals rate the load generator kept meanwhile and the
// processor's cores.
func (h *harness) produceLeaves(ctx context.Context, set topics.Set, proc, gen *child, users []int, spread time.Duration) (acks, sent map[string]time.Time, rate, cores float64, err error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.o.brokers...), kgo.ClientID("cohortgate-bench-leaves"),
		kgo.ProducerLinger(0))
	if err != nil {
		return nil, nil, 0, 0, err
	}
	defer cl.Close()
	n := len(users)
	acks, sent = make(map[string]time.Time, n), make(map[string]time.Time, n)

	endsBefore, err := h.a.endOffsets(ctx, string(set.Signals))
	if err != nil {
		return nil, nil, 0, 0, err
	}
	cpuBefore, _ := procCPU(proc.pid())
	start := time.Now()
	every := spread / time.Duration(n)
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
		id := h.topic("lat-" + strconv.Itoa(u))
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
