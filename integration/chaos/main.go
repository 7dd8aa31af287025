// Command chaos is cohortgate's chaos harness: it runs the processor binary
// as child processes against a Kafka broker, abuses them (kill -9, scale
// out and in, SIGSTOP past the session timeout, a wiped store, the topics
// grown under them, the commands topic deleted and created again: see
// grow.go and recreate.go) while a seeded load is produced, and then
// judges the five topics with an oracle
// that shares no code with the processor (integration/oracle). The load
// (integration/workload) is the friendly one plus, by default, the hostile
// mix (--hostile): misrouted, transactional, re-delivered, late,
// same-millisecond, future and poison records. Control runs with safety
// switched off show that the judge can fail: each must show the one kind of
// damage its name promises.
//
// Usage:
//
//	chaos --processor bin/processor --brokers 127.0.0.1:9092 \
//	      --signals 60000 --users 6000 --rounds 10 --scenarios kill,scale
//
// With --cluster integration/kafka/kafka.sh and --brokers pointing at that
// script's three-node cluster (kafka.sh start-cluster), it runs the
// broker-fault scenarios instead (see faults.go): the processors keep
// running while the harness kills -9 partition leaders, the transaction
// coordinator and the active controller, pauses a broker, restarts all
// three one by one, and takes two down at once.
//
// With no --brokers it serves an in-process kfake broker on a free port.
// Each scenario gets fresh topics (named chaos-<run>-<scenario>.*), its own
// group, data dirs and logs, and prints two lines:
//
//	scenario signals_in forwarded expected duplicates lost leaked late hanging dlq seconds stall
//	         poison unrouted unknown changelog win_miss win_spur win_cons contra
//
// (poison: input records the rules dead-letter that the DLQ lacks;
// unrouted: misrouted records never re-published; changelog: users whose
// latest changelog record is wrong; win_*: late-leave windows missing from
// a later record, exact ones holding no forwarded signal, and conservative
// ones; contra: signals the load marked gated outside every episode;
// stall: the longest stretch, in seconds, in which no forwarded signal
// became visible to a read_committed reader of the output, see stallMeter.)
// Late signals and conservative windows are allowed (promise 2); every
// other column is damage. The run ends with a summary and exits 1 if any
// scenario shows damage, any scenario failed to run, or any control run
// (except control-no-sync, see its note) lacks the damage it promises.
//
// Every wait has a deadline and every scenario a hard bound (--timeout).
// Children are killed when the harness exits, on SIGINT and SIGTERM too.
//
// # Soak
//
// --scenarios soak (alone; `make soak`) runs one processor for
// --soak-duration under steady load, no chaos: the friendly load with its
// leaves and rejoins spread over the whole run, and with --hostile one
// hostile scene every --soak-scene-every. The rate is --rate or, with
// --rate 0, half the maximum a probe measures first: a backlog of
// --soak-probe-signals signals on topics of their own, drained by a fresh
// processor; the maximum is the signals its group commits per second. The
// oracle keeps the load's numbered signals in about 5 bytes each
// (integration/oracle, compact.go) and the load draws each signal's user
// as it goes, so an hour at half the maximum (156M signals at 43k/s, up to
// 860M at 240k/s: the probe here measures 87k to 479k signals/s) is
// judged in a few GiB; --soak-max-signals (default none) lowers the rate
// to fit a budget, as CI's three minutes do, and the first line says which
// rate it took and why.
//
// Every --soak-every the harness reads the processor's /metrics: RSS
// (process_resident_memory_bytes), Go heap in use
// (go_memstats_heap_inuse_bytes), goroutines (go_goroutines), gate members,
// held bytes and consumer lag (the cohortgate_ series, summed over their
// labels), prints a progress line, and at the end writes them to
// --soak-out as soak-<run>.csv and soak-<run>.png (one panel a metric, x in
// minutes, the second half's fitted line in red).
//
// Flat means no metric grows without bound once warm. The first half of
// the run is warm-up and is not judged. Over the second half, a
// least-squares line is fitted to each metric; its slope times the whole
// run's length is the growth. A metric is flat when the growth, less two
// standard errors of it (the noise: a heap's sawtooth over a few minutes),
// stays within max(floor, share × the second half's mean): RSS 32 MiB or
// 20%, heap 16 MiB or 20%, goroutines 20 or 20%, held bytes 4 MiB or 50%,
// consumer lag 20000 records or 50%. Gate members are state that grows by
// design (one entry per user who ever left, and the leaves are spread over
// the run): they are flat when they never exceed the users the load can
// make leave (its leavers and its hostile scenes' users). The verdict
// table shows each metric's first, last and maximum, slope, growth, noise
// and bound. The soak fails on a metric that is not flat, on any damage the
// oracle finds, or on a finding, like any scenario. A run of a few minutes
// is mostly warm-up (RSS and heap step up when the first megabyte records
// of the hostile mix arrive): --soak-widen multiplies every floor and
// share, and CI's three minutes use 4, which catches gross growth only.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cohortgate/cohortgate/integration/workload"
	"github.com/cohortgate/cohortgate/internal/cmdline"
)

func main() { cmdline.Main("chaos", 2, run) }

// options are the harness's flags.
type options struct {
	processor      string
	cluster        string        // kafka.sh of the cluster at brokers; empty: no broker faults
	bounceSpan     time.Duration // how long one broker fault takes, to spread the load over
	brokers        []string
	scenarios      []string
	signals        int
	users          int
	valueSize      int
	leavePct       float64
	rejoinPct      float64
	rounds         int
	unsettledKills float64
	seed           uint64
	rate           float64
	timeout        time.Duration
	keep           bool
	workDir        string
	partitions     int
	routes         int  // gated paths per scenario; every signal goes to each
	inputsFirst    bool // repartition grows the inputs before the commands
	sessionTimeout time.Duration
	grace          time.Duration
	maxFutureSkew  time.Duration
	hostile        workload.Hostile // Scenes 0: no hostile mix
	verifyGrace    time.Duration
	settleTimeout  time.Duration
	logLevel       string

	// The soak (--scenarios soak).
	soakDuration     time.Duration
	soakEvery        time.Duration
	soakSceneEvery   time.Duration
	soakProbeSignals int
	soakMaxSignals   int
	soakOut          string
	soakRedraw       string
	soakWiden        float64
}

func parse(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var brokers, scenarioList, shares string
	var hostile bool
	fs.StringVar(&o.processor, "processor", "bin/processor", "the processor binary to run (`make build` makes it)")
	fs.StringVar(&brokers, "brokers", "", "comma-separated seed brokers; empty: an in-process kfake broker on a free port")
	fs.StringVar(&o.cluster, "cluster", "", "path of integration/kafka/kafka.sh whose three-node cluster (start-cluster) --brokers name: runs the broker-fault scenarios, with replication factor 3")
	fs.DurationVar(&o.bounceSpan, "bounce-span", 30*time.Second, "with --cluster: about how long a broker takes to be killed, restarted and back in sync (10-15s idle, 30-40s on a busy machine); the load is spread over the faults by it")
	fs.StringVar(&scenarioList, "scenarios", "", "comma-separated scenarios to run, in order; empty: "+strings.Join(defaultScenarios(), ",")+
		"; with --cluster: "+strings.Join(scenarioNames(brokerScenarios), ",")+"; "+soakName+" runs only alone and when asked for")
	fs.IntVar(&o.signals, "signals", 60_000, "signals per scenario")
	fs.IntVar(&o.users, "users", 6_000, "users per scenario")
	fs.IntVar(&o.valueSize, "value-size", 100, "bytes per signal value")
	fs.Float64Var(&o.leavePct, "leave-pct", 5, "percentage of users who leave")
	fs.Float64Var(&o.rejoinPct, "rejoin-pct", 1, "percentage of users who rejoin after leaving")
	fs.IntVar(&o.rounds, "rounds", 10, "kill -9 rounds of the kill scenario (the kill controls run a third as many, at least 2)")
	fs.Float64Var(&o.unsettledKills, "unsettled-kills", 1.0/3, "fraction of kill rounds after which the next kill may come before the group has settled (a kill during a rebalance)")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the loads and of the chaos (which instance, when)")
	fs.Float64Var(&o.rate, "rate", 0, "signals per second; 0: spread the load over the scenario's chaos")
	fs.DurationVar(&o.timeout, "timeout", 15*time.Minute, "hard bound on each scenario")
	fs.BoolVar(&o.keep, "keep", false, "keep data dirs, logs, topics and groups for debugging")
	fs.StringVar(&o.workDir, "work-dir", "", "where data dirs and logs go; empty: a new temporary directory")
	fs.IntVar(&o.partitions, "partitions", 6, "partitions of every topic")
	fs.IntVar(&o.routes, "routes", 1, "gated paths (--route IN=OUT) of the processors; every signal is written to each input, and the oracle judges each output")
	fs.BoolVar(&o.inputsFirst, "grow-inputs-first", false, "repartition and its control grow every input before the commands topic, not after it (docs/operations.md, \"Growing the topics\")")
	fs.DurationVar(&o.sessionTimeout, "session-timeout", 6*time.Second, "the processors' --session-timeout (Kafka's minimum is 6s)")
	fs.DurationVar(&o.grace, "grace", 200*time.Millisecond, "the processors' --grace")
	fs.DurationVar(&o.maxFutureSkew, "max-future-skew", 5*time.Second, "the processors' --max-future-skew")
	fs.BoolVar(&hostile, "hostile", true, "add the hostile mix to each scenario's load (see integration/workload)")
	fs.IntVar(&o.hostile.Scenes, "hostile-scenes", 16, "hostile scenes per scenario, with --hostile (control-lso and control-no-window-recovery play their own mix)")
	fs.StringVar(&shares, "hostile-shares", "", "weights of the scene kinds, e.g. txn-held=2,poison=1 (kinds left out: 0); empty: all equal")
	fs.DurationVar(&o.hostile.Hold, "hostile-hold", 0, "longest a held transaction stays open; 0: 2×grace+2s, at least 4s")
	fs.DurationVar(&o.verifyGrace, "verify-grace", 30*time.Second, "how long open transactions may take to end before they count as hanging")
	fs.DurationVar(&o.settleTimeout, "settle-timeout", 60*time.Second, "how long the group may take to settle after a chaos step before the processors count as stuck (dumped and restarted, a finding)")
	fs.StringVar(&o.logLevel, "log-level", "info", "the processors' --log-level")
	fs.DurationVar(&o.soakDuration, "soak-duration", 10*time.Minute, "soak: how long the steady load runs (--signals is rate × this)")
	fs.DurationVar(&o.soakEvery, "soak-every", 10*time.Second, "soak: how often the processor's /metrics is sampled")
	fs.DurationVar(&o.soakSceneEvery, "soak-scene-every", 30*time.Second, "soak: one hostile scene per this much of the load, with --hostile (instead of --hostile-scenes)")
	fs.IntVar(&o.soakProbeSignals, "soak-probe-signals", 2_000_000, "soak with --rate 0: the backlog whose drain rate is the measured maximum")
	fs.IntVar(&o.soakMaxSignals, "soak-max-signals", 0, "soak: the most signals the load may have, 0 for no cap; the rate is lowered to fit")
	fs.StringVar(&o.soakOut, "soak-out", "bin/soak", "soak: where the CSV and the PNG go (soak-<run>.csv, .png)")
	fs.Float64Var(&o.soakWiden, "soak-widen", 1, "soak: multiply the floor and the share of every flatness bound (a run of a few minutes is mostly warm-up)")
	fs.StringVar(&o.soakRedraw, "soak-redraw", "", "soak: judge a kept CSV again and draw its PNG beside it, with no broker and no processor; give the run's load flags")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q; flags are written --name=value", fs.Arg(0))
	}
	o.brokers = cmdline.List(brokers)
	o.scenarios = cmdline.List(scenarioList)
	if len(o.scenarios) == 0 {
		o.scenarios = defaultScenarios()
		if o.cluster != "" {
			o.scenarios = scenarioNames(brokerScenarios)
		}
	}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	o.hostile.Grace, o.hostile.MaxFutureSkew = o.grace, o.maxFutureSkew
	if !hostile {
		o.hostile.Scenes = 0
	} else if o.hostile.Scenes < 1 {
		bad("--hostile-scenes: %d must be at least 1 with --hostile", o.hostile.Scenes)
	}
	var err error
	if o.hostile.Shares, err = workload.ParseShares(shares); err != nil {
		bad("--hostile-shares: %v", err)
	}
	if err := (workload.Config{Users: 1, Partitions: max(o.partitions, 1), Hostile: o.hostile}).Validate(); err != nil {
		bad("hostile mix: %v", err)
	}
	for _, s := range o.scenarios {
		sc, ok := findScenario(s)
		switch {
		case !ok:
			bad("--scenarios: unknown scenario %q; want some of %s", s, strings.Join(scenarioNames(allScenarios()), ","))
		case sc.brokerFault && o.cluster == "":
			bad("--scenarios: %s kills brokers: it needs --cluster and the cluster's --brokers", s)
		}
	}
	if o.bounceSpan < time.Second {
		bad("--bounce-span: %v must be at least 1s", o.bounceSpan)
	}
	if o.cluster != "" {
		if _, err := os.Stat(o.cluster); err != nil {
			bad("--cluster: %v", err)
		}
		if len(o.brokers) == 0 {
			bad("--cluster: needs --brokers, the cluster's brokers")
		}
	}
	if slices.Contains(o.scenarios, soakName) {
		if len(o.scenarios) > 1 {
			bad("--scenarios: %s runs alone", soakName)
		}
		if o.soakDuration < 30*time.Second || o.soakEvery < time.Second || o.soakEvery > o.soakDuration/3 {
			bad("--soak-duration %v, --soak-every %v: want at least 30s, and at least three samples of 1s or more", o.soakDuration, o.soakEvery)
		}
		if !(o.soakWiden >= 1) {
			bad("--soak-widen: %v must be at least 1", o.soakWiden)
		}
		if o.soakSceneEvery <= 0 || o.soakProbeSignals < 1000 || o.soakMaxSignals < 0 {
			bad("--soak-scene-every and --soak-probe-signals (at least 1000) must be positive, --soak-max-signals at least 0")
		}
		// The load, the wait for its last decisions and the oracle all
		// fall within one scenario's bound: reading an hour's ~180M
		// records back and judging them takes minutes.
		o.timeout = max(o.timeout, o.soakDuration+soakJudgeSpan(o.soakDuration))
	}
	if o.signals < 1 || o.users < 1 {
		bad("--signals and --users: must be at least 1")
	}
	if o.rounds < 1 {
		bad("--rounds: %d must be at least 1", o.rounds)
	}
	if o.partitions < 1 || o.partitions > 1000 {
		bad("--partitions: %d must be 1..1000", o.partitions)
	}
	if o.routes < 1 || o.routes > 8 {
		bad("--routes: %d must be 1..8", o.routes)
	}
	if o.timeout < 10*time.Second {
		bad("--timeout: %v must be at least 10s", o.timeout)
	}
	if o.sessionTimeout < time.Second {
		bad("--session-timeout: %v must be at least 1s", o.sessionTimeout)
	}
	if !(o.unsettledKills >= 0 && o.unsettledKills <= 1) {
		bad("--unsettled-kills: %v must be between 0 and 1", o.unsettledKills)
	}
	if o.rate < 0 {
		bad("--rate: %v must be >= 0", o.rate)
	}
	if o.soakRedraw != "" {
		return o, errors.Join(errs...) // no processor runs
	}
	if _, err := os.Stat(o.processor); err != nil {
		bad("--processor: %v (build it with `make build`)", err)
	} else if abs, err := filepath.Abs(o.processor); err == nil {
		o.processor = abs
	}
	return o, errors.Join(errs...)
}

// errFailed is run's error when the harness ran and found damage: exit
// status 1, after the table that says what (other errors exit 2).
var errFailed = &cmdline.Failed{Code: 1}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parse(args, stderr)
	if err != nil {
		return err
	}
	if o.soakRedraw != "" {
		return redrawSoak(o, stdout)
	}
	h, err := newHarness(ctx, o, stdout, stderr)
	if err != nil {
		return err
	}
	defer h.close()
	if slices.Contains(o.scenarios, soakName) {
		if err := h.prepareSoak(ctx); err != nil {
			return err
		}
	}
	var results []result
	h.header()
	for _, name := range o.scenarios {
		sc, _ := findScenario(name)
		res := h.run(ctx, sc)
		results = append(results, res)
		h.row(res)
		if ctx.Err() != nil {
			fmt.Fprintf(stderr, "chaos: interrupted: %v\n", context.Cause(ctx))
			break
		}
	}
	if !h.summary(results) {
		return errFailed
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return nil
}

func scenarioNames(list []scenario) []string {
	var out []string
	for _, s := range list {
		out = append(out, s.name)
	}
	return out
}

// defaultScenarios are the scenarios run when --scenarios is not given:
// all but those that run alone.
func defaultScenarios() []string {
	var out []string
	for _, s := range scenarios {
		if !s.alone {
			out = append(out, s.name)
		}
	}
	return out
}

func findScenario(name string) (scenario, bool) {
	all := allScenarios()
	i := slices.IndexFunc(all, func(s scenario) bool { return s.name == name })
	if i < 0 {
		return scenario{}, false
	}
	return all[i], true
}
