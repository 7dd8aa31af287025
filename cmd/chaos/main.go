// Command chaos is cohortgate's chaos harness: it runs the processor binary
// as child processes against a Kafka broker, abuses them (kill -9, scale
// out and in, SIGSTOP past the session timeout, a wiped store) while a
// seeded load is produced, and then judges the five topics with an oracle
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

	"github.com/cohortgate/cohortgate/cmd/internal/cmdline"
	"github.com/cohortgate/cohortgate/integration/workload"
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
	routes         int // gated paths per scenario; every signal goes to each
	sessionTimeout time.Duration
	grace          time.Duration
	maxFutureSkew  time.Duration
	hostile        workload.Hostile // Scenes 0: no hostile mix
	verifyGrace    time.Duration
	settleTimeout  time.Duration
	logLevel       string
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
	fs.StringVar(&scenarioList, "scenarios", "", "comma-separated scenarios to run, in order; empty: "+strings.Join(scenarioNames(scenarios), ",")+
		"; with --cluster: "+strings.Join(scenarioNames(brokerScenarios), ","))
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
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q; flags are written --name=value", fs.Arg(0))
	}
	o.brokers = cmdline.List(brokers)
	o.scenarios = cmdline.List(scenarioList)
	if len(o.scenarios) == 0 {
		o.scenarios = scenarioNames(scenarios)
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
	h, err := newHarness(ctx, o, stdout, stderr)
	if err != nil {
		return err
	}
	defer h.close()
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

func findScenario(name string) (scenario, bool) {
	all := allScenarios()
	i := slices.IndexFunc(all, func(s scenario) bool { return s.name == name })
	if i < 0 {
		return scenario{}, false
	}
	return all[i], true
}
