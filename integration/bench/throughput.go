package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cohortgate/cohortgate/integration/workload"
	"github.com/cohortgate/cohortgate/topics"
)

// throughputResult is one throughput run. See the package documentation
// for the definitions.
type throughputResult struct {
	Name    string // the run: passthrough, processor-eos, ...
	Round   int    // which repetition, from 1
	Command string // the child's command line, abridged

	Startup  time.Duration // process start to t0
	Window   time.Duration // t0 to t1
	InSignal int64         // signals committed between t0 and t1
	Rate     float64       // InSignal / Window, signals/s

	CPUWindow float64 // the child's CPU-seconds between t0 and t1
	CPUTotal  float64 // the child's CPU-seconds from its start to t1
	PeakRSS   int64   // VmHWM, bytes
	// MachineBusy is how many cores the whole machine kept busy between t0
	// and t1 (/proc/stat): the child, the broker, and anything else.
	MachineBusy float64

	Out     outputCount
	OutRate float64 // forwarded (Out.Distinct) / (t1 - process start): the whole run, start-up included

	// Cycles is how many cycles (transactions, or flush+commit rounds)
	// the child ended between t0 and t1; EndSeconds, for the passthrough,
	// the time it spent ending them. Zero when the child does not say.
	Cycles, EndSeconds float64

	Profile string // path of the CPU profile, if one was taken
	Allocs  string // path of the allocation profile, if one was taken
	Err     string

	binary string // the binary the profile symbolizes against
}

// CycleMs is the mean length of a cycle, t0 to t1, in ms.
func (r throughputResult) CycleMs() float64 { return ratio(r.Window.Seconds()*1e3, r.Cycles) }

// EndMs is the mean time spent ending a cycle (flush and commit), in ms.
func (r throughputResult) EndMs() float64 { return ratio(r.EndSeconds*1e3, r.Cycles) }

// CPUPerMillion is the child's CPU-seconds per million signals, t0 to t1.
func (r throughputResult) CPUPerMillion() float64 {
	return ratio(r.CPUWindow, float64(r.InSignal)/1e6)
}

// PerCPUSecond is signals per CPU-second of the child, t0 to t1.
func (r throughputResult) PerCPUSecond() float64 { return ratio(float64(r.InSignal), r.CPUWindow) }

// sample is one poll of a running child.
type sample struct {
	at        time.Time
	committed int64
	cpu       cpuTicks
	sys       systemCPU
}

// spawned is a child started for a throughput run.
type spawned struct {
	c       *child
	group   string // its consumer group (application.id for Kafka Streams)
	httpURL string // where its /metrics and /debug/pprof are served, if they are
	binary  string // the binary the profile symbolizes against
	command string
}

// throughput does one run of h.in: starts the child with start, measures
// it until it has committed every signal, stops it and counts its output.
// The child's topics, group and directories are named after the instance,
// <name>.r<round>.
func (h *harness) throughput(ctx context.Context, name string, round int, start func(instance, out string) (spawned, error)) throughputResult {
	res := throughputResult{Name: name, Round: round}
	instance := fmt.Sprintf("%s.r%d", name, round)
	out := h.topic(instance + ".out")
	fail := func(err error) throughputResult {
		res.Err = err.Error()
		h.printf("%s: FAILED: %v", name, err)
		return res
	}
	if err := h.createOutput(ctx, name, instance, out); err != nil {
		return fail(err)
	}
	h.printf("%s: starting", instance)
	began := time.Now()
	sp, err := start(instance, out)
	if err != nil {
		return fail(err)
	}
	res.Command, res.binary = sp.command, sp.binary
	defer sp.c.stop(30 * time.Second)

	rctx, cancel := context.WithTimeout(ctx, h.o.runTimeout)
	defer cancel()
	var prof, allocs profileJob
	var cycles0 cycleCount
	first, last, err := h.measure(rctx, instance, sp, func() {
		if sp.httpURL == "" {
			return
		}
		cycles0, _ = scrapeCycles(ctx, sp.httpURL)
		if h.o.profileFor > 0 && round > 0 { // round 0: the agreement phase
			prof = h.startProfile(ctx, instance, "profile", sp.httpURL, profileDelay)
			if strings.HasPrefix(name, "processor") {
				allocs = h.startProfile(ctx, instance, "allocs", sp.httpURL, profileDelay)
			}
		}
	})
	if err != nil {
		return fail(err)
	}
	if sp.httpURL != "" {
		if c, err := scrapeCycles(ctx, sp.httpURL); err == nil {
			res.Cycles, res.EndSeconds = c.cycles-cycles0.cycles, c.endSeconds-cycles0.endSeconds
		}
	}
	res.Startup = first.at.Sub(began)
	res.Window = last.at.Sub(first.at)
	res.InSignal = last.committed - first.committed
	res.Rate = ratio(float64(res.InSignal), res.Window.Seconds())
	res.CPUWindow = (last.cpu - first.cpu).seconds()
	res.CPUTotal = last.cpu.seconds()
	res.MachineBusy = ratio(float64(last.sys.busy-first.sys.busy), userHZ*res.Window.Seconds())
	if rss, err := procPeakRSS(sp.c.pid()); err == nil {
		res.PeakRSS = rss
	}
	res.Profile, res.Allocs = prof.wait(h), allocs.wait(h)
	sp.c.stop(30 * time.Second)
	if res.PeakRSS == 0 && sp.c.rusage != nil {
		res.PeakRSS = sp.c.rusage.Maxrss << 10
	}
	h.printf("%s: %s signals/s over %.1fs (start-up %.1fs), %.2f CPU-s per million signals, peak RSS %s; counting the output",
		instance, thousands(res.Rate), res.Window.Seconds(), res.Startup.Seconds(), res.CPUPerMillion(), mib(res.PeakRSS))

	cctx, ccancel := context.WithTimeout(ctx, 5*time.Minute)
	defer ccancel()
	res.Out, err = h.a.countOutput(cctx, out, h.in.ids)
	if err != nil {
		return fail(fmt.Errorf("counting the output: %w", err))
	}
	res.OutRate = ratio(float64(res.Out.Distinct), last.at.Sub(began).Seconds())
	h.printf("%s: output: %d records, %d distinct signals, %d duplicates (read in %.1fs)",
		instance, res.Out.Records, res.Out.Distinct, res.Out.Duplicates, res.Out.Took.Seconds())
	h.dropTopics(ctx, h.topic(instance+"."), h.topic(instance+"-")) // Kafka Streams names its internal topics <application.id>-…
	return res
}

// createOutput creates the output topic of a run; for the processor also
// its DLQ and changelog topics, as it would create them itself: a processor
// that creates topics at start joins its group about 5 s later, which
// would only lengthen the start-up.
func (h *harness) createOutput(ctx context.Context, name, instance, out string) error {
	if !strings.HasPrefix(name, "processor") {
		return h.a.createTopic(ctx, out, int32(h.o.partitions))
	}
	return h.createTopics(ctx, h.processorTopics(instance, out), int32(h.o.partitions))
}

// processorTopics are the topics of a processor run.
func (h *harness) processorTopics(name, out string) topics.Set {
	return topics.Set{
		Commands: topics.Topic(h.in.commands), Signals: topics.Topic(h.in.signals), Cohort: topics.Topic(out),
		DLQ: topics.Topic(h.topic(name + ".dlq")), Changelog: topics.Topic(h.topic(name + ".changelog")),
	}
}

// topicSet names the topics of a phase: <prefix>.commands and so on.
func (h *harness) topicSet(prefix string) topics.Set {
	return workload.Topics(h.topic(prefix))
}

// createTopics creates the topics of set, with partitions each, within 90 s.
func (h *harness) createTopics(ctx context.Context, set topics.Set, partitions int32) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	return workload.CreateTopics(ctx, h.a.adm, set, partitions, -1)
}

// processorArgs is the processor's command line: run, its group, data dir,
// HTTP address and topics, then extra.
func (h *harness) processorArgs(group, dataDir, addr string, set topics.Set, extra ...string) []string {
	args := []string{"run", "--brokers", joinList(h.o.brokers), "--group", group, "--data-dir", dataDir, "--http-addr", addr}
	args = append(args, workload.TopicFlags(set)...)
	return append(args, extra...)
}

// measure polls the child every 100 ms until its group has committed the
// end of every signals partition. It returns the first poll with any
// committed offset (t0) and the last (t1). atStart is called once, at t0.
// Progress is printed once a second.
func (h *harness) measure(ctx context.Context, name string, sp spawned, atStart func()) (first, last sample, err error) {
	total := h.in.signalsEnd.sum()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var lastPrint time.Time
	started := false
	for {
		select {
		case <-ctx.Done():
			return first, last, fmt.Errorf("not done within %v (committed %d of %d signals): %w", h.o.runTimeout, last.committed, total, ctx.Err())
		case <-sp.c.done:
			return first, last, sp.c.failure()
		case <-tick.C:
		}
		s, done, err := h.poll(ctx, sp)
		if err != nil {
			continue // the group may not exist yet; the deadline bounds this
		}
		if !started && s.committed > 0 {
			started, first = true, s
			atStart()
		}
		last = s
		if time.Since(lastPrint) >= time.Second || done {
			lastPrint = time.Now()
			rate, cores := 0.0, 0.0
			if started && s.at.After(first.at) {
				rate = float64(s.committed-first.committed) / s.at.Sub(first.at).Seconds()
				cores = (s.cpu - first.cpu).seconds() / s.at.Sub(first.at).Seconds()
			}
			h.printf("%s: %s/%s signals committed, %s signals/s, %.2f cores", name,
				thousands(float64(s.committed)), thousands(float64(total)), thousands(rate), cores)
		}
		if done {
			return first, last, nil
		}
	}
}

// poll samples the child once: its committed offsets on the signals topic,
// its CPU time and the machine's. done reports that every partition is
// committed through its end.
func (h *harness) poll(ctx context.Context, sp spawned) (s sample, done bool, err error) {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	committed, err := h.a.committed(pctx, sp.group, h.in.signals)
	if err != nil {
		return s, false, err
	}
	s.at = time.Now()
	if s.cpu, err = procCPU(sp.c.pid()); err != nil {
		return s, false, err
	}
	s.sys, _ = readSystemCPU()
	done = true
	for p, end := range h.in.signalsEnd {
		c := committed[p]
		s.committed += min(c, end)
		if c < end {
			done = false
		}
	}
	return s, done, nil
}

// The children of the throughput runs. Each start function is given the
// instance name (<run>.r<round>) and the output topic.

func (h *harness) startPassthrough(transactional bool) func(instance, out string) (spawned, error) {
	return func(instance, out string) (spawned, error) {
		addr, err := freeAddr()
		if err != nil {
			return spawned{}, err
		}
		group := h.topic(instance + ".group")
		args := []string{"passthrough", "--brokers", joinList(h.o.brokers), "--group", group,
			"--input", h.in.signals, "--output", out, "--commit-interval", "100ms",
			"--transactional=" + strconv.FormatBool(transactional), "--transactional-id", h.topic(instance + ".txn"),
			"--http-addr", addr}
		c, err := h.procs.start(instance, h.logPath(instance), nil, h.o.self, args...)
		if err != nil {
			return spawned{}, err
		}
		return spawned{c: c, group: group, httpURL: "http://" + addr, binary: h.o.self,
			command: "bench " + joinArgs(args)}, nil
	}
}

// startProcessor starts bin/processor; grace is its --grace (0 in the
// throughput runs: the signals are in the past).
func (h *harness) startProcessor(exactlyOnce bool, grace time.Duration) func(instance, out string) (spawned, error) {
	return func(instance, out string) (spawned, error) {
		addr, err := freeAddr()
		if err != nil {
			return spawned{}, err
		}
		group := h.topic(instance + ".group")
		args := h.processorArgs(group, filepath.Join(h.work, instance, "data"), addr, h.processorTopics(instance, out),
			"--exactly-once="+strconv.FormatBool(exactlyOnce), "--grace", grace.String(), "--pprof")
		c, err := h.procs.start(instance, h.logPath(instance), nil, h.o.processor, args...)
		if err != nil {
			return spawned{}, err
		}
		return spawned{c: c, group: group, httpURL: "http://" + addr, binary: h.o.processor,
			command: "processor " + joinArgs(args)}, nil
	}
}

// startStreams starts the Kafka Streams app of integration/bench/streams: the plain KTable
// join with grace 0, else the versioned KTable joined with that grace.
func (h *harness) startStreams(grace time.Duration) func(instance, out string) (spawned, error) {
	return func(instance, out string) (spawned, error) {
		appID := h.topic(instance)
		cp := filepath.Join(h.o.streamsDir, "cohortgate-streams-bench.jar") + ":" + filepath.Join(h.o.streamsDir, "lib", "*")
		args := []string{h.o.streamsHeap, "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", cp, "cohortgate.bench.GateApp",
			"--brokers=" + joinList(h.o.brokers), "--application-id=" + appID,
			"--commands-topic=" + h.in.commands, "--signals-topic=" + h.in.signals, "--output-topic=" + out,
			"--state-dir=" + filepath.Join(h.work, instance, "state"),
			"--threads=" + strconv.Itoa(h.o.streamsThr), "--commit-interval-ms=100", "--guarantee=exactly_once_v2"}
		if grace > 0 {
			args = append(args, "--grace-ms="+strconv.FormatInt(grace.Milliseconds(), 10))
			if h.o.streamsHistory > 0 {
				args = append(args, "--history-retention-ms="+strconv.FormatInt(h.o.streamsHistory.Milliseconds(), 10))
			}
		}
		c, err := h.procs.start(instance, h.logPath(instance), nil, h.o.java, args...)
		if err != nil {
			return spawned{}, err
		}
		return spawned{c: c, group: appID, command: "java " + joinArgs(args)}, nil
	}
}
