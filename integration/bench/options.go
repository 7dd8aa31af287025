package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cohortgate/cohortgate/integration/workload"
	"github.com/cohortgate/cohortgate/internal/cmdline"
)

// runOptions are the flags of `bench run`.
type runOptions struct {
	brokers     []string
	processor   string // binary
	loadgen     string // binary
	self        string // this binary, for `bench passthrough`
	streamsDir  string // integration/bench/streams/target: the jar and lib/
	java        string
	streamsHeap string
	streamsThr  int
	// streamsGrace is the grace of the versioned Kafka Streams variant
	// (Joined.withGracePeriod); streamsHistory its table's history
	// retention (0: the app's default, the grace plus a minute).
	streamsGrace, streamsHistory time.Duration
	goTool                       string // for `go tool pprof`
	kafkaScript                  string // integration/kafka/kafka.sh, for the broker version

	load       workload.Config
	partitions int
	runs       []string
	rounds     int // each run is repeated this many times, interleaved
	phases     []string

	agree      workload.Config // the small load of the agreement phase
	agreeGrace time.Duration   // the processor's --grace there

	latencyLeaves int
	latencyRounds int
	latencyFor    time.Duration
	latencyRate   float64 // 0: half the exactly-once run's rate
	latencyGrace  time.Duration
	latencyNice   int // niceness of the load generator in the latency phase

	restoreSizes    []int
	rebuildCommands int

	gateResults string
	out         string
	workDir     string
	prefix      string
	runTimeout  time.Duration
	keepTopics  bool
	profileFor  time.Duration
	invokedAs   string // the command that ran this one, for the report
}

// allRuns are the throughput runs, in the order they run.
var allRuns = []string{runPassthrough, runPassthroughEOS, runProcessorALO, runProcessorEOS, runStreams, runStreamsGrace}

const (
	runPassthrough    = "passthrough"
	runPassthroughEOS = "passthrough-eos"
	runProcessorALO   = "processor-alo"
	runProcessorEOS   = "processor-eos"
	runStreams        = "streams"
	runStreamsGrace   = "streams-grace"
)

// allPhases are the phases of a run, in order.
var allPhases = []string{"agreement", "throughput", "latency", "restore", "rebuild"}

func parseRunOptions(args []string, stderr io.Writer) (*runOptions, error) {
	o := &runOptions{}
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var brokers, runs, phases, sizes string
	fs.StringVar(&brokers, "brokers", "127.0.0.1:9092", "comma-separated seed brokers of the Kafka broker every run uses")
	fs.StringVar(&o.processor, "processor", "bin/processor", "the processor binary")
	fs.StringVar(&o.loadgen, "loadgen", "bin/loadgen", "the load generator binary (integration/loadgen)")
	fs.StringVar(&o.self, "self", "", "this binary, run as `bench passthrough`; empty: os.Executable")
	fs.StringVar(&o.streamsDir, "streams-dir", "integration/bench/streams/target", "the Kafka Streams app's build output (the jar and lib/)")
	fs.StringVar(&o.java, "java", "java", "the java command for the Kafka Streams app")
	fs.StringVar(&o.streamsHeap, "streams-heap", "-Xmx1g", "JVM heap flags of the Kafka Streams app")
	fs.IntVar(&o.streamsThr, "streams-threads", 1, "num.stream.threads of the Kafka Streams app")
	fs.DurationVar(&o.streamsGrace, "streams-grace", 2*time.Second, "grace of the versioned Kafka Streams variant (streams-grace): Joined.withGracePeriod")
	fs.DurationVar(&o.streamsHistory, "streams-history", 0, "history retention of streams-grace's versioned table; 0: the app's default (the grace plus a minute)")
	fs.StringVar(&o.goTool, "go", "go", "the go command, for `go tool pprof`")
	fs.StringVar(&o.kafkaScript, "kafka-script", "integration/kafka/kafka.sh", "the broker script, asked for the broker version; empty: guess from API versions")

	fs.IntVar(&o.load.Users, "users", 100_000, "users of the workload")
	fs.IntVar(&o.load.Signals, "signals", 3_000_000, "signals pre-loaded; every run reads them all, --rounds times, so Kafka Streams' runs bound the length of the phase")
	fs.IntVar(&o.load.ValueSize, "value-size", 100, "bytes per signal value")
	fs.Float64Var(&o.load.LeavePct, "leave-pct", 5, "percentage of users who leave")
	fs.Float64Var(&o.load.RejoinPct, "rejoin-pct", 1, "percentage of users who rejoin")
	fs.Uint64Var(&o.load.Seed, "seed", 1, "seed of the workload")
	fs.IntVar(&o.partitions, "partitions", 6, "partitions of every topic")
	fs.StringVar(&runs, "runs", joinList(allRuns), "throughput runs to do, comma-separated")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds of the throughput runs: each round does every run once, in order, so that the machine's noise falls on all of them")
	fs.StringVar(&phases, "phases", joinList(allPhases), "phases to do, comma-separated")

	fs.IntVar(&o.agree.Users, "agree-users", 2_000, "users of the agreement phase's load")
	fs.IntVar(&o.agree.Signals, "agree-signals", 400_000, "signals of the agreement phase's load")
	fs.Float64Var(&o.agree.LeavePct, "agree-leave-pct", 20, "percentage of users who leave, agreement phase")
	fs.Float64Var(&o.agree.RejoinPct, "agree-rejoin-pct", 5, "percentage of users who rejoin, agreement phase")
	fs.DurationVar(&o.agreeGrace, "agree-grace", 2*time.Second, "the processor's --grace in the agreement phase")

	fs.IntVar(&o.latencyLeaves, "latency-leaves", 1200, "leaves whose latency is measured")
	fs.IntVar(&o.latencyRounds, "latency-rounds", 3, "rounds of the latency phase, each with a processor and topics of its own; the leaves and their duration are shared out among them")
	fs.DurationVar(&o.latencyFor, "latency-duration", 24*time.Second, "over how long the leaves are spread, all rounds together")
	fs.Float64Var(&o.latencyRate, "latency-rate", 0, "signals/s flowing meanwhile; 0: half the measured exactly-once rate")
	fs.IntVar(&o.latencyNice, "latency-loadgen-nice", 0, "niceness of the load generator in the latency phase (nice -n): above 0 the processor, the broker and the floor get the cores first, which shows what of a leave's latency is cores shared with the load")
	fs.DurationVar(&o.latencyGrace, "latency-grace", 0, "the processor's --grace in the latency phase; 0: no alignment hold, so the figure is the leave's way to the gate alone")

	fs.StringVar(&sizes, "restore-sizes", "1000000,10000000", "members of the stores restored, comma-separated")
	fs.IntVar(&o.rebuildCommands, "rebuild-commands", 200_000, "commands in the partition rebuilt from the commands topic alone")

	fs.StringVar(&o.gateResults, "gate-results", "", "output of the pkg/gate `go test -bench` run to include; empty: none")
	fs.StringVar(&o.out, "out", "BENCHMARKS.md", "file the results are appended to")
	fs.StringVar(&o.workDir, "work-dir", "bin/bench-work", "logs, profiles, data dirs and the cache of built stores")
	fs.StringVar(&o.prefix, "topic-prefix", "", "prefix of every topic and group of this run; empty: bench-<unix time>")
	fs.DurationVar(&o.runTimeout, "run-timeout", 20*time.Minute, "bound of each throughput run")
	fs.BoolVar(&o.keepTopics, "keep-topics", false, "keep this run's topics (they are deleted at the end)")
	fs.DurationVar(&o.profileFor, "profile-seconds", 10*time.Second, "length of the CPU profiles taken during the passthrough and exactly-once runs; 0: none")
	fs.StringVar(&o.invokedAs, "invoked-as", "", "the command that ran this one (make passes `make bench ...`), written in the report; empty: bench run and its flags")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q; flags are written --name=value", fs.Arg(0))
	}
	o.brokers = cmdline.List(brokers)
	o.runs = cmdline.List(runs)
	o.phases = cmdline.List(phases)
	var errs []error
	if len(o.brokers) == 0 {
		errs = append(errs, errors.New("--brokers: give at least one host:port"))
	}
	for _, r := range o.runs {
		if !slices.Contains(allRuns, r) {
			errs = append(errs, fmt.Errorf("--runs: unknown run %q (known: %s)", r, joinList(allRuns)))
		}
	}
	for _, p := range o.phases {
		if !slices.Contains(allPhases, p) {
			errs = append(errs, fmt.Errorf("--phases: unknown phase %q (known: %s)", p, joinList(allPhases)))
		}
	}
	for _, s := range cmdline.List(sizes) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			errs = append(errs, fmt.Errorf("--restore-sizes: %q is not a positive count", s))
			continue
		}
		o.restoreSizes = append(o.restoreSizes, n)
	}
	if err := o.load.Validate(); err != nil {
		errs = append(errs, err)
	}
	o.agree.ValueSize, o.agree.Seed = o.load.ValueSize, o.load.Seed
	if err := o.agree.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("agreement load: %w", err))
	}
	if o.rounds < 1 {
		errs = append(errs, errors.New("--rounds: must be at least 1"))
	}
	if o.streamsGrace <= 0 {
		errs = append(errs, errors.New("--streams-grace: must be above 0"))
	}
	if o.load.Signals < 1 {
		errs = append(errs, errors.New("--signals: must be at least 1"))
	}
	if o.partitions < 1 {
		errs = append(errs, errors.New("--partitions: must be at least 1"))
	}
	if o.latencyRounds < 1 || o.latencyLeaves < o.latencyRounds || o.latencyFor < time.Duration(o.latencyRounds)*time.Second {
		errs = append(errs, errors.New("--latency-rounds must be at least 1, --latency-leaves at least one per round and --latency-duration at least 1s per round"))
	}
	if o.rebuildCommands < 2 {
		errs = append(errs, errors.New("--rebuild-commands: must be at least 2"))
	}
	if o.runTimeout < 10*time.Second {
		errs = append(errs, errors.New("--run-timeout: must be at least 10s"))
	}
	if o.prefix == "" {
		o.prefix = "bench-" + strconv.FormatInt(time.Now().Unix(), 10)
	}
	return o, errors.Join(errs...)
}

func (o *runOptions) hasPhase(p string) bool { return slices.Contains(o.phases, p) }

func joinList(l []string) string { return strings.Join(l, ",") }
