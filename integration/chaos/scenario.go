package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/integration/oracle"
	"github.com/cohortgate/cohortgate/integration/workload"
	"github.com/cohortgate/cohortgate/topics"
)

// scenario is one way of abusing the processors while the load is
// produced.
type scenario struct {
	name string
	// control, when set, makes this a control run: it must show damage,
	// of the kind the text says and shows counts.
	control string
	shows   func(oracle.Report) int
	// informational: a control that may show no damage (the text says
	// why); it never fails the run.
	informational bool
	// brokerFault: the scenario kills brokers, and runs only with
	// --cluster (see faults.go).
	brokerFault bool
	instances   int      // started before the load
	flags       []string // added to every processor's flags
	// mix, when set, is the scenario's own hostile mix, whatever
	// --hostile says: the one its control needs to show its damage.
	mix func(h workload.Hostile) workload.Hostile
	// span is how long the chaos takes, over which the load is spread
	// when --rate is 0.
	span func(o *options) time.Duration
	act  func(r *scenarioRun, ctx context.Context) error
	// alone: the scenario runs only when asked for, and by itself (the
	// soak, which sets the load's size and rate).
	alone bool
	// grows: the scenario grows the topics under the load (grow.go). Its
	// load's producers refresh their metadata every second, as
	// producers that learn of new partitions soon do, and the hostile
	// mix routes by the counts the harness has told it.
	grows bool
	// steps: the scenario steps the processors' wall clocks, which read
	// it through --unsafe-clock-offset-file (ops.go).
	steps bool
}

var scenarios = []scenario{
	{
		name: "kill", instances: 2,
		span: func(o *options) time.Duration { return time.Duration(o.rounds) * killRoundSpan(o) },
		act:  func(r *scenarioRun, ctx context.Context) error { return r.killRounds(ctx, r.h.o.rounds) },
	},
	{
		name: "scale", instances: 1,
		span: fixedSpan(30 * time.Second),
		act:  (*scenarioRun).scale,
	},
	{
		name: "zombie", instances: 2,
		span: func(o *options) time.Duration { return 2*(o.sessionTimeout+8*time.Second) + 10*time.Second },
		act:  (*scenarioRun).zombie,
	},
	{
		name: "wipe", instances: 2,
		span: fixedSpan(30 * time.Second),
		act:  (*scenarioRun).wipe,
	},
	{
		name: "reroute", instances: 2,
		span: fixedSpan(45 * time.Second),
		act:  (*scenarioRun).reroute,
	},
	{
		name: "repartition", instances: 2, grows: true,
		span: fixedSpan(40 * time.Second),
		act:  func(r *scenarioRun, ctx context.Context) error { return r.repartition(ctx, false) },
	},
	{
		name: "recreate", instances: 2,
		span: fixedSpan(20 * time.Second),
		act:  (*scenarioRun).recreate,
	},
	{
		name: "ops", instances: 2, steps: true,
		mix:  opsMix,
		span: fixedSpan(40 * time.Second),
		act:  (*scenarioRun).ops,
	},
	{
		name: soakName, instances: 1, alone: true,
		span: func(o *options) time.Duration { return o.soakDuration },
		act:  (*scenarioRun).soak,
	},
	{
		name: "control-no-txn", instances: 2,
		control: "duplicates: at least once, kill -9 between output and offset commit",
		shows:   func(r oracle.Report) int { return r.Duplicates },
		flags:   []string{"--exactly-once=false"},
		span:    func(o *options) time.Duration { return time.Duration(controlRounds(o)) * killRoundSpan(o) },
		act:     func(r *scenarioRun, ctx context.Context) error { return r.killRounds(ctx, controlRounds(r.h.o)) },
	},
	{
		name: "control-no-sync", instances: 2, informational: true,
		control: "unsynced Pebble writes cannot hurt here: each command batch is written in one Pebble batch with its " +
			"commands checkpoint and outbox, so a crash that loses the unsynced tail of the WAL loses whole batches, and " +
			"state and checkpoint roll back together; the restarted owner re-reads the commands topic (kept forever) from " +
			"that checkpoint into the same state before it forwards a signal of the partition, and a signal the gate " +
			"dropped meanwhile was rightly dropped. kill -9 moreover keeps the OS page cache: only a power cut loses what " +
			"reached the OS. Fsync matters once the commands before a checkpoint are gone from the topic, and then a lost " +
			"checkpoint halts the processor with a commands gap error rather than leaking",
		flags: []string{"--unsafe-no-sync"},
		span:  func(o *options) time.Duration { return time.Duration(controlRounds(o)) * killRoundSpan(o) },
		act:   func(r *scenarioRun, ctx context.Context) error { return r.killRounds(ctx, controlRounds(r.h.o)) },
	},
	{
		name: "control-skip-commands", instances: 2,
		control: "leaked: a wiped instance restarted with --unsafe-skip-commands forgets the leaves before it",
		shows:   func(r oracle.Report) int { return r.Leaked },
		span:    fixedSpan(24 * time.Second),
		act:     (*scenarioRun).skipCommands,
	},
	{
		name: "control-lso", instances: 2,
		control: "leaked: processors that observe the commands' last stable offset (--unsafe-observe-lso) forward, " +
			"while a transaction holds a leave open, the signals of users who left after it",
		shows: func(r oracle.Report) int { return r.Leaked },
		flags: []string{"--unsafe-observe-lso"},
		mix:   ownMix(workload.Shares{workload.KindTxnHeld: 1}, 4),
		span:  fixedSpan(20 * time.Second),
		act:   func(*scenarioRun, context.Context) error { return nil },
	},
	{
		name: "control-no-window-recovery", instances: 1,
		control: "missing windows: after a handover, the new owner (--unsafe-no-window-recovery) writes the records " +
			"of users with late-leave windows without them",
		shows: func(r oracle.Report) int { return r.MissingWindows },
		flags: []string{"--unsafe-no-window-recovery"},
		mix:   ownMix(workload.Shares{workload.KindLateLeave: 1}, 6),
		span:  fixedSpan(30 * time.Second),
		act:   (*scenarioRun).noWindowRecovery,
	},
	{
		name: "control-ignore-topology", instances: 2, grows: true,
		control: "leaked: processors that ignore the topics' growth (--unsafe-ignore-topology) read no leave produced " +
			"to the new commands partitions while the inputs have not grown, and forward their users' signals",
		shows: func(r oracle.Report) int { return r.Leaked },
		flags: []string{"--unsafe-ignore-topology"},
		span:  fixedSpan(30 * time.Second),
		act:   func(r *scenarioRun, ctx context.Context) error { return r.repartition(ctx, true) },
	},
}

// ownMix is a scenario's own hostile mix: scenes of the given shares, with
// the harness's timing (grace, skew, hold).
func ownMix(shares workload.Shares, scenes int) func(workload.Hostile) workload.Hostile {
	return func(h workload.Hostile) workload.Hostile {
		h.Shares, h.Scenes = shares, scenes
		return h
	}
}

func fixedSpan(d time.Duration) func(*options) time.Duration {
	return func(*options) time.Duration { return d }
}

// killRoundSpan is about how long a kill round takes: a random pause, the
// session timeout before the group notices, and the rebalance.
func killRoundSpan(o *options) time.Duration { return o.sessionTimeout + 3*time.Second }

// controlRounds is how many kills a kill control runs: a few suffice to
// show damage (and keep the short run short).
func controlRounds(o *options) int { return max(2, o.rounds/3) }

// scenarioRun is one scenario being run.
type scenarioRun struct {
	h     *harness
	sc    scenario
	set   topics.Set
	group string
	dir   string
	rng   *rand.Rand
	insts []*instance

	plan     *workload.Plan
	produced atomic.Int64     // friendly signals handed to Kafka so far
	produceC chan produceDone // the producer's result
	produceD chan struct{}    // closed when the producer is done
	meter    stallMeter       // forward progress, as the output's reader sees it
	floor    *floorRun        // the broker-fault scenarios' floor (floor.go); nil in others

	soakRes *soakResult // the soak's samples; nil in other scenarios

	clients atomic.Pointer[workload.Clients] // the load's, once made
	// parts is the partition count of the commands and the inputs, which
	// settle wants owned; routing is what the hostile mix routes the
	// commands ([0]) and the inputs ([1]) by. Both grow in grows
	// scenarios.
	parts   atomic.Int32
	routing [2]atomic.Int32
	// grown says how the topics grew, for the oracle (set by the act
	// before it grows the first one): the counts the commands and inputs
	// had before, and whether the changelog grew.
	grown struct {
		earlier   []int32
		changelog bool
	}
	// extraSignals are the signals the act produced itself, beyond the
	// load's, each to every input (recreate.go).
	extraSignals atomic.Int64
	// known is what the act knows of the damage it may find (result.known).
	known string
	// grownAt is when the broker last accepted a growth of a topic (grow.go).
	grownAt time.Time
	// deleted are the committed records of outputs the act deleted and
	// created again, for the oracle (ops.go).
	deleted map[string][]oracle.Record

	mu struct {
		sync.Mutex
		findings []string
	}
}

func (r *scenarioRun) finding(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.h.logf("[%s] FINDING: %s", r.sc.name, msg)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.findings = append(r.mu.findings, msg)
}

func (r *scenarioRun) findings() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.mu.findings...)
}

func (r *scenarioRun) logf(format string, args ...any) {
	r.h.logf("[%s] %s", r.sc.name, fmt.Sprintf(format, args...))
}

// run runs one scenario to its row, within --timeout.
func (h *harness) run(parent context.Context, sc scenario) result {
	start := time.Now()
	ctx, cancel := context.WithTimeoutCause(parent, h.o.timeout,
		fmt.Errorf("scenario %s: not done within --timeout %v", sc.name, h.o.timeout))
	defer cancel()
	prefix := "chaos-" + h.runID + "-" + sc.name
	r := &scenarioRun{
		h: h, sc: sc, group: prefix,
		dir: filepath.Join(h.root, sc.name),
		set: routed(workload.Topics(prefix), h.o.routes),
		rng: rand.New(rand.NewPCG(h.o.seed, nameHash(sc.name))),
	}
	res := result{sc: sc}
	res.rep, res.err = r.execute(ctx)
	res.stall = r.meter.read()
	if r.floor != nil {
		fl := r.floor.meter.read()
		res.floor = &fl
	}
	if res.err != nil && context.Cause(ctx) != nil {
		res.err = fmt.Errorf("%w (%v)", res.err, context.Cause(ctx))
	}
	res.seconds = time.Since(start).Seconds()
	if res.err != nil {
		for _, in := range r.insts {
			if in.running() {
				r.logf("%s: dumping its goroutines into %s", in.name, in.logPath)
				in.dumpGoroutines()
			}
		}
	}
	res.findings = r.findings()
	res.known = r.known
	if r.soakRes != nil {
		h.finishSoak(r, r.soakRes)
		res.soak = r.soakRes
	}
	for _, in := range r.insts {
		in.shutdown()
		h.forget(in)
	}
	res.warnings = make(map[string]int)
	for _, in := range r.insts {
		in.warnings(res.warnings)
	}
	if pass, _ := res.verdict(); !pass {
		var b strings.Builder
		for _, in := range r.insts {
			fmt.Fprintf(&b, "== %s (%s), last 40 lines:\n%s\n", in.name, in.logPath, in.tail(40))
		}
		res.logs = b.String()
	}
	if !h.o.keep {
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(parent), 30*time.Second)
		_, _ = h.adm.DeleteTopics(cctx, r.topicNames()...)
		_, _ = h.adm.DeleteGroup(cctx, r.group)
		ccancel()
		_ = os.RemoveAll(r.dir)
	}
	return res
}

// nameHash gives each scenario its own chaos sequence for one seed.
func nameHash(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// routed adds n-1 routes to set: <signals>.<k> into <cohort>.<k>, k = 2..n.
func routed(set topics.Set, n int) topics.Set {
	for k := 2; k <= n; k++ {
		set.Routes = append(set.Routes, topics.Route{
			In:  topics.Topic(fmt.Sprintf("%s.%d", set.Signals, k)),
			Out: topics.Topic(fmt.Sprintf("%s.%d", set.Cohort, k)),
		})
	}
	return set
}

func (r *scenarioRun) topicNames() []string {
	var names []string
	for _, s := range r.set.Specs() {
		names = append(names, string(s.Topic))
	}
	return names
}

// produceDone is the producer's result.
type produceDone struct {
	final workload.Progress
	err   error
}

// execute sets the scenario up, produces the load while the chaos acts,
// waits until every signal is decided, stops the processors and verifies.
func (r *scenarioRun) execute(ctx context.Context) (oracle.Report, error) {
	o := r.h.o
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return oracle.Report{}, err
	}
	if err := workload.CreateTopics(ctx, r.h.adm, r.set, int32(o.partitions), r.h.replication()); err != nil {
		return oracle.Report{}, err
	}
	r.parts.Store(int32(o.partitions))
	for i := range r.routing {
		r.routing[i].Store(int32(o.partitions))
	}
	rate := o.rate
	if rate == 0 {
		span := max(r.sc.span(o), time.Duration(float64(o.signals)/10000*float64(time.Second)))
		rate = float64(o.signals) / span.Seconds()
	}
	hostile := o.hostile
	if r.sc.mix != nil {
		hostile = r.sc.mix(hostile)
	}
	wc := workload.Config{
		Seed: o.seed, Users: o.users, Signals: o.signals, ValueSize: o.valueSize,
		LeavePct: o.leavePct, RejoinPct: o.rejoinPct, Rate: rate, Partitions: o.partitions, Hostile: hostile,
	}
	if r.sc.grows {
		wc.Routing = func(commands bool) int32 {
			if commands {
				return r.routing[0].Load()
			}
			return r.routing[1].Load()
		}
	}
	plan, err := workload.NewPlan(wc)
	if err != nil {
		return oracle.Report{}, err
	}
	if r.sc.name == soakName {
		leadWith(plan.Scenes, workload.KindPoison)
	}
	r.plan = plan
	r.logf("topics %s.*, group %s; %d signals over %d users, %d commands, %d hostile scenes, at %.0f signals/s; logs in %s",
		strings.TrimSuffix(string(r.set.Signals), ".signals"), r.group, o.signals, o.users, len(plan.Commands), len(plan.Scenes), rate, r.dir)

	for i := range max(r.sc.instances, 3) {
		r.insts = append(r.insts, r.newInstance(string(rune('a'+i))))
	}
	for _, in := range r.insts[:r.sc.instances] {
		if err := in.start(); err != nil {
			return oracle.Report{}, err
		}
	}
	if r.sc.brokerFault {
		// Started before the processors settle, so that its group and
		// transactional ID are ready too when the load begins.
		f, err := r.startFloor(ctx)
		if err != nil {
			return oracle.Report{}, err
		}
		defer f.stop()
		r.floor = f
	}
	if err := r.settle(ctx, 120*time.Second); err != nil {
		return oracle.Report{}, fmt.Errorf("processors did not get ready: %w", err)
	}

	watchCtx, stopWatching := context.WithCancel(ctx)
	watched := make(chan error, 1)
	r.meter.start(time.Now())
	go func() { watched <- watchOutput(watchCtx, r.h.brokers, string(r.set.Cohort), &r.meter) }()
	defer func() {
		stopWatching()
		<-watched
	}()
	r.produce(ctx, plan)
	if r.floor != nil {
		// The faults wait for the floor's first copy, so that its cold
		// start does not hide one.
		r.floor.waitFirst(ctx, floorFirstWait, r.logf)
	}
	actErr := r.sc.act(r, ctx)
	if actErr != nil {
		return oracle.Report{}, fmt.Errorf("chaos: %w", actErr)
	}
	var load produceDone
	select {
	case load = <-r.produceC:
		if load.err != nil {
			return oracle.Report{}, fmt.Errorf("producing the load: %w", load.err)
		}
	case <-ctx.Done():
		return oracle.Report{}, fmt.Errorf("producing the load: %w", ctx.Err())
	}

	r.logf("load produced; waiting until every signal is decided")
	decideStart := time.Now()
	if err := r.waitDecided(ctx); err != nil {
		return oracle.Report{}, err
	}
	r.logf("every signal decided %v after the load ended; stopping the processors", time.Since(decideStart).Round(time.Millisecond))
	if st := r.meter.read(); st.arrivals > 0 {
		r.logf("longest stall: %v, ending at %s (%d records seen, the first %v after the load began)",
			st.longest.Round(time.Millisecond), st.endsAt.Format("15:04:05.000"), st.arrivals, st.first.Round(time.Millisecond))
	}
	if r.floor != nil {
		st := r.floor.meter.read()
		r.logf("floor (plain exactly-once passthrough): longest stall %v, ending at %s (%d records seen, the first %v after the load began)",
			st.longest.Round(time.Millisecond), st.endsAt.Format("15:04:05.000"), st.arrivals, st.first.Round(time.Millisecond))
	}
	for _, in := range r.insts {
		if in.running() {
			if err := in.term(60 * time.Second); err != nil {
				r.finding("%v", err)
			}
		}
	}

	r.logf("verifying")
	vo := &oracle.Options{Grace: o.verifyGrace, MaxFutureSkew: o.maxFutureSkew,
		Earlier: r.grown.earlier, ChangelogGrew: r.grown.changelog, Deleted: r.deleted}
	if r.sc.name == soakName {
		vo.ReadTimeout = soakJudgeSpan(o.soakDuration) // each topic of an hour's load: up to ~900M records
		// The oracle's table is a few GiB that live to the end: collect
		// when the heap grows by a fifth of it, not by all of it again.
		defer debug.SetGCPercent(debug.SetGCPercent(20))
	}
	rep, err := oracle.Verify(ctx, r.h.brokers, oracleTopics(r.set), vo)
	if err != nil {
		return rep, err
	}
	r.logf("oracle: %d signals judged in %v; this process's peak RSS %s", rep.SignalsIn, rep.Took.Round(time.Second), peakRSS())
	extra := int(r.extraSignals.Load())
	if want := (load.final.SignalIDs() + extra) * len(r.set.Inputs()); rep.SignalsIn != want {
		return rep, fmt.Errorf("the inputs hold %d signals, the load and the chaos produced %d (%d and %d to each of %d inputs)",
			rep.SignalsIn, want, load.final.SignalIDs(), extra, len(r.set.Inputs()))
	}
	r.notice(rep)
	return rep, nil
}

// oracleTopics names set's topics for the oracle.
func oracleTopics(set topics.Set) oracle.Topics {
	t := oracle.Topics{Commands: string(set.Commands), Signals: string(set.Signals), Cohort: string(set.Cohort),
		DLQ: string(set.DLQ), Changelog: string(set.Changelog)}
	for _, r := range set.Routes {
		t.Routes = append(t.Routes, oracle.Route{Signals: string(r.In), Cohort: string(r.Out)})
	}
	return t
}

// notice logs what the processors logged about the damage, if any.
func (r *scenarioRun) notice(rep oracle.Report) {
	r.logf("verified in %v: %d commands (%d applied, %d duplicates, %d refused), %d users with %d episodes, %d misrouted, %d dead letters, %d gated signals",
		rep.Took.Round(time.Millisecond), rep.CommandsIn, rep.Applied, rep.DuplicateCommands, rep.Refused, rep.Users, rep.Episodes,
		rep.Misrouted, rep.DeadLetters, rep.Gated)
	for _, in := range r.insts {
		for _, line := range in.grepLog(5, "level=ERROR", "late leave", "panic", "DATA RACE") {
			r.logf("%s log: %s", in.name, line)
		}
	}
}

func (r *scenarioRun) newInstance(name string) *instance {
	o := r.h.o
	in := &instance{
		name:    name,
		ports:   &r.h.ports,
		bin:     o.processor,
		dir:     filepath.Join(r.dir, name),
		logPath: filepath.Join(r.dir, name+".log"),
		args: append(append(append([]string{
			"--brokers", strings.Join(r.h.brokers, ","),
			"--group", r.group,
		}, workload.TopicFlags(r.set)...),
			"--partitions", fmt.Sprint(o.partitions),
			"--replication-factor", fmt.Sprint(r.h.replication()),
			"--session-timeout", o.sessionTimeout.String(),
			"--grace", o.grace.String(),
			"--max-future-skew", o.maxFutureSkew.String(),
			"--log-level", o.logLevel,
		), r.sc.flags...),
		onExit: func(in *instance, unexpected bool, err error) {
			if unexpected {
				r.finding("%s exited on its own (%v); last lines:\n%s", in.name, err, indent(in.tail(15)))
			}
		},
	}
	if r.sc.brokerFault {
		// A transactional ID the harness knows, to find its coordinator.
		in.args = append(in.args, "--transactional-id", r.txnID(in))
	}
	if r.sc.steps {
		in.args = append(in.args, r.offsetFlag()...)
	}
	r.h.adopt(in)
	return in
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

// produce starts producing the plan in the background.
func (r *scenarioRun) produce(ctx context.Context, plan *workload.Plan) {
	r.produceC = make(chan produceDone, 1)
	r.produceD = make(chan struct{})
	go func() {
		defer close(r.produceD)
		var opts []kgo.Opt
		if r.sc.grows {
			opts = append(opts, kgo.MetadataMinAge(100*time.Millisecond), kgo.MetadataMaxAge(time.Second))
		}
		c, err := workload.NewClients(r.h.brokers, len(plan.Scenes) > 0, r.group+"-load", opts...)
		if err != nil {
			r.produceC <- produceDone{err: err}
			return
		}
		defer c.Close()
		r.clients.Store(c)
		defer r.clients.Store(nil)
		var last time.Time
		final, err := workload.Produce(ctx, c, r.set, plan, func(p workload.Progress) {
			r.produced.Store(int64(p.Signals))
			if time.Since(last) >= 10*time.Second {
				last = time.Now()
				r.logf("load: %v", p)
			}
		})
		r.produced.Store(int64(final.Signals))
		if err == nil {
			r.logf("load: %v", final)
		}
		r.produceC <- produceDone{final, err}
	}()
}

// producing reports whether the load is still being produced.
func (r *scenarioRun) producing() bool { return !isClosed(r.produceD) }

// waitProduced waits until at least frac of the signals were produced (or
// the load ended).
func (r *scenarioRun) waitProduced(ctx context.Context, frac float64) error {
	want := int64(frac * float64(r.h.o.signals))
	for r.produced.Load() < want && r.producing() {
		if err := workload.Sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// permanent is an error that stops eventually at once.
type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

// eventually retries cond every so often until it returns nil or a
// permanent error, d passes or ctx ends.
func eventually(ctx context.Context, d time.Duration, cond func() error) error {
	deadline := time.Now().Add(d)
	wait := 20 * time.Millisecond
	for {
		err := cond()
		var perm permanent
		switch {
		case err == nil:
			return nil
		case errors.As(err, &perm):
			return perm.error
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v: %w", d, err)
		}
		if serr := workload.Sleep(ctx, wait); serr != nil {
			return fmt.Errorf("%w (last: %v)", serr, err)
		}
		wait = min(wait*2, 250*time.Millisecond)
	}
}

// settle waits until the answering instances own every partition exactly
// once between them, each caught up with its commands, every one of them
// is ready, and each owns a partition (when there are enough): an
// instance that owns none may still be joining, and a kill then would
// land in the middle of a rebalance that the scenario meant to be over.
func (r *scenarioRun) settle(ctx context.Context, d time.Duration) error {
	return eventually(ctx, d, func() error {
		owner := make(map[int32]string)
		answering := 0
		var idle []string
		for _, in := range r.insts {
			if in.diedOnItsOwn() {
				return permanent{fmt.Errorf("%s exited on its own (see findings)", in.name)}
			}
			if !in.answering() {
				continue
			}
			answering++
			if err := in.ready(ctx); err != nil {
				return err
			}
			parts, err := in.partitions(ctx)
			if err != nil {
				return err
			}
			if len(parts) == 0 {
				idle = append(idle, in.name)
			}
			for p, forwarding := range parts {
				if prev, ok := owner[p]; ok {
					return fmt.Errorf("partition %d owned by %s and %s", p, prev, in.name)
				}
				if !forwarding {
					return fmt.Errorf("%s: partition %d restoring", in.name, p)
				}
				owner[p] = in.name
			}
		}
		if answering == 0 {
			return errors.New("no processor running")
		}
		parts := int(r.parts.Load())
		if len(owner) != parts {
			return fmt.Errorf("%d of %d partitions owned: %v", len(owner), parts, owner)
		}
		if len(idle) > 0 && answering <= parts {
			return fmt.Errorf("%s own no partition yet", strings.Join(idle, ", "))
		}
		return nil
	})
}

// settleOrRecover waits for the group to settle. If it does not in time,
// it records a finding, takes a goroutine dump of every running processor
// (which ends it), starts them all again and waits once more: the
// scenario goes on to its verdict, and the dump shows where they were
// stuck.
func (r *scenarioRun) settleOrRecover(ctx context.Context, when string) error {
	settleTimeout := r.h.o.settleTimeout
	err := r.settle(ctx, settleTimeout)
	if err == nil || ctx.Err() != nil {
		return err
	}
	var running []*instance
	for _, in := range r.insts {
		if in.running() {
			running = append(running, in)
		}
	}
	var stacks strings.Builder
	for _, in := range running {
		in.dumpGoroutines()
		if s := in.stacks(); s != "" {
			fmt.Fprintf(&stacks, "\n%s, where it waited:\n%s", in.name, indent(s))
		}
	}
	r.finding("%s: the group did not settle within %v: %v; took goroutine dumps (in the logs) and restarted %d processors%s",
		when, settleTimeout, err, len(running), stacks.String())
	for _, in := range running {
		if err := in.start(); err != nil {
			return err
		}
	}
	if err := r.settle(ctx, 2*settleTimeout); err != nil {
		return fmt.Errorf("%s: the group did not settle, even after restarting every processor: %w", when, err)
	}
	return nil
}

// waitDecided waits until the group's committed offsets reach the end of
// every partition of every input, or a tail of it that holds only
// transaction markers (see onlyMarkers): every signal has been decided, and what it
// became is committed. It restarts, with a finding, any processor that
// died on its own meanwhile.
func (r *scenarioRun) waitDecided(ctx context.Context) error {
	deadline, ok := ctx.Deadline()
	d := 10 * time.Minute
	if ok {
		d = time.Until(deadline)
	}
	lastLog := time.Now()
	var lastMarkerCheck time.Time
	return eventually(ctx, d, func() error {
		for _, in := range r.insts {
			if in.diedOnItsOwn() {
				r.logf("%s had exited on its own; restarting it", in.name)
				if err := in.start(); err != nil {
					return err
				}
			}
		}
		checkMarkers := time.Since(lastMarkerCheck) >= 5*time.Second
		if checkMarkers {
			lastMarkerCheck = time.Now()
		}
		committed, end, lagging, markerErr, err := r.signalsCommitted(ctx, checkMarkers)
		if err != nil {
			return err
		}
		lag := end - committed
		if lag == 0 {
			// Every signal is decided; a command may not be yet (one
			// re-published from the wrong partition at the end of the load,
			// say, whose dead letter the oracle wants).
			behind, markerErr, err := r.commandsJudged(ctx, checkMarkers)
			if err != nil {
				return err
			}
			if len(behind) == 0 {
				return nil
			}
			if markerErr != nil {
				r.logf("reading the tails of the commands partitions: %v", markerErr)
			}
			if time.Since(lastLog) >= 15*time.Second {
				lastLog = time.Now()
				r.logf("every signal decided; waiting for commands to be judged (partition: judged of end: %s)", strings.Join(behind, ", "))
			}
			return fmt.Errorf("commands not judged (%s)", strings.Join(behind, ", "))
		}
		if markerErr != nil {
			r.logf("reading the tails of the signals partitions: %v", markerErr)
		}
		if time.Since(lastLog) >= 15*time.Second {
			lastLog = time.Now()
			r.logf("waiting for %d signals to be decided (partition: committed of end: %s)", lag, strings.Join(lagging, ", "))
		}
		return fmt.Errorf("%d signals undecided (%s)", lag, strings.Join(lagging, ", "))
	})
}

// commandsJudged returns the commands partitions not judged to their end
// yet: the offset metadata the group commits with the inputs says how far
// each partition's commands were judged, their records (changelog, dead
// letters) committed in the same transaction (docs/operations.md, "Handover"), as
// "<event ns>:<judged offset>[:<changelog topic id>]". A partition judged
// up to a tail of transaction markers (see onlyMarkers) is judged; one no
// input has metadata for is left alone (no signal of it was committed, so
// no processor says anything about it).
func (r *scenarioRun) commandsJudged(ctx context.Context, checkMarkers bool) (behind []string, markerErr, err error) {
	commands := string(r.set.Commands)
	ends, err := r.h.adm.ListEndOffsets(ctx, commands)
	if err != nil {
		return nil, nil, err
	}
	offsets, err := r.h.adm.FetchOffsets(ctx, r.group)
	if err != nil {
		return nil, nil, err
	}
	judged := make(map[int32]int64)
	for _, in := range r.set.Inputs() {
		for p, o := range offsets[string(in)] {
			if at, ok := judgedOffset(o.Metadata); ok {
				judged[p] = max(judged[p], at)
			}
		}
	}
	ends.Each(func(o kadm.ListedOffset) {
		at, ok := judged[o.Partition]
		if !ok || at >= o.Offset {
			return
		}
		if checkMarkers {
			only, err := onlyMarkers(ctx, r.h.brokers, o.Topic, o.Partition, at, o.Offset)
			markerErr = errors.Join(markerErr, err)
			if only {
				return
			}
		}
		behind = append(behind, fmt.Sprintf("%s/%d: %d of %d", o.Topic, o.Partition, at, o.Offset))
	})
	return behind, markerErr, nil
}

// judgedOffset parses the judged offset out of the processor's offset
// metadata, "<event ns>:<judged offset>[:<changelog topic id>]".
func judgedOffset(meta string) (int64, bool) {
	parts := strings.Split(meta, ":")
	if len(parts) < 2 {
		return 0, false
	}
	at, err := strconv.ParseInt(parts[1], 10, 64)
	return at, err == nil
}

// signalsCommitted returns how far the group has committed the inputs
// (each partition's committed offset, at most its end, summed), the sum of
// their end offsets, and the partitions still behind. With checkMarkers, a
// partition behind only by a tail of transaction markers (see onlyMarkers)
// counts as committed to its end; errors reading those tails come back in
// markerErr, which leaves the partition behind.
func (r *scenarioRun) signalsCommitted(ctx context.Context, checkMarkers bool) (committed, end int64, lagging []string, markerErr, err error) {
	var inputs []string
	for _, in := range r.set.Inputs() {
		inputs = append(inputs, string(in))
	}
	ends, err := r.h.adm.ListEndOffsets(ctx, inputs...)
	if err != nil {
		return 0, 0, nil, nil, err
	}
	offsets, err := r.h.adm.FetchOffsets(ctx, r.group)
	if err != nil {
		return 0, 0, nil, nil, err
	}
	ends.Each(func(o kadm.ListedOffset) {
		c, ok := offsets.Lookup(o.Topic, o.Partition)
		at := int64(0)
		if ok {
			at = min(max(c.At, 0), o.Offset)
		}
		end += o.Offset
		if at < o.Offset && ok && c.At >= 0 && checkMarkers {
			only, err := onlyMarkers(ctx, r.h.brokers, o.Topic, o.Partition, c.At, o.Offset)
			if only {
				at = o.Offset // a tail of transaction markers: decided
			}
			markerErr = errors.Join(markerErr, err)
		}
		committed += at
		if at < o.Offset {
			lagging = append(lagging, fmt.Sprintf("%s/%d: %d of %d", o.Topic, o.Partition, c.At, o.Offset))
		}
	})
	return committed, end, lagging, markerErr, nil
}

// pick returns one of the running instances at random.
func (r *scenarioRun) pick() *instance {
	var live []*instance
	for _, in := range r.insts {
		if in.running() {
			live = append(live, in)
		}
	}
	if len(live) == 0 {
		return nil
	}
	return live[r.rng.IntN(len(live))]
}

// killRounds kills a random instance with SIGKILL at a random moment,
// restarts it over the same data dir, and does that n times. After most
// restarts it waits for the group to settle; after a fraction of them
// (--unsettled-kills) only for the restarted processor to answer, so that
// the next kill may land while partitions are still being handed over.
func (r *scenarioRun) killRounds(ctx context.Context, n int) error {
	during := 0
	for i := range n {
		pause := time.Duration(200+r.rng.IntN(2300)) * time.Millisecond
		if err := workload.Sleep(ctx, pause); err != nil {
			return err
		}
		victim := r.pick()
		if victim == nil {
			return errors.New("no processor running to kill")
		}
		if r.producing() {
			during++
		}
		r.logf("round %d/%d: kill -9 %s (%d signals produced)", i+1, n, victim.name, r.produced.Load())
		if err := victim.kill(); err != nil {
			return err
		}
		if err := victim.start(); err != nil {
			return err
		}
		if r.rng.Float64() >= r.h.o.unsettledKills {
			if err := r.settleOrRecover(ctx, fmt.Sprintf("round %d, after restarting %s", i+1, victim.name)); err != nil {
				return err
			}
		} else if err := eventually(ctx, 60*time.Second, func() error { return victim.ready(ctx) }); err != nil {
			return fmt.Errorf("round %d: %w", i+1, err)
		}
	}
	r.logf("%d of %d kills landed while the load was being produced", during, n)
	return nil
}

// scale runs 1 → 3 → 1 instances: two more join at a third of the load,
// and leave (SIGTERM) at two thirds.
func (r *scenarioRun) scale(ctx context.Context) error {
	if err := r.waitProduced(ctx, 1.0/3); err != nil {
		return err
	}
	r.logf("scale out to 3 (%d signals produced)", r.produced.Load())
	for _, in := range r.insts[1:3] {
		if err := in.start(); err != nil {
			return err
		}
	}
	if err := r.settleOrRecover(ctx, "after scaling out"); err != nil {
		return err
	}
	if err := r.waitProduced(ctx, 2.0/3); err != nil {
		return err
	}
	r.logf("scale in to 1 (%d signals produced)", r.produced.Load())
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, in := range r.insts[1:3] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = in.term(60 * time.Second)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			r.finding("%v", err)
		}
	}
	if err := r.settleOrRecover(ctx, "after scaling in"); err != nil {
		return err
	}
	return nil
}

// zombie stops one instance with SIGSTOP until the other owns every
// partition (its session expired), then continues it: its transaction
// must be fenced. Twice, once for each instance.
func (r *scenarioRun) zombie(ctx context.Context) error {
	for i, at := range []float64{0.25, 0.6} {
		if err := r.waitProduced(ctx, at); err != nil {
			return err
		}
		victim, other := r.insts[1-i%2], r.insts[i%2]
		r.logf("SIGSTOP %s (%d signals produced)", victim.name, r.produced.Load())
		if _, err := victim.signal(syscall.SIGSTOP, false); err != nil {
			return err
		}
		stopped := time.Now()
		err := eventually(ctx, r.h.o.sessionTimeout+60*time.Second, func() error {
			parts, err := other.partitions(ctx)
			if err != nil {
				return err
			}
			if len(parts) != r.h.o.partitions {
				return fmt.Errorf("%s owns %d of %d partitions", other.name, len(parts), r.h.o.partitions)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("%s did not take over from the stopped %s: %w", other.name, victim.name, err)
		}
		r.logf("%s owns every partition %v after the SIGSTOP; SIGCONT %s", other.name, time.Since(stopped).Round(time.Millisecond), victim.name)
		if _, err := victim.signal(syscall.SIGCONT, false); err != nil {
			return err
		}
		if err := r.settleOrRecover(ctx, "after SIGCONT of the zombie "+victim.name); err != nil {
			return err
		}
	}
	return nil
}

// wipe stops an instance, deletes its membership store and starts it
// again, so that it rebuilds its state from the commands topic: b at a
// third of the load, a at two thirds.
func (r *scenarioRun) wipe(ctx context.Context) error {
	for i, at := range []float64{1.0 / 3, 2.0 / 3} {
		if err := r.waitProduced(ctx, at); err != nil {
			return err
		}
		if err := r.restartWiped(ctx, r.insts[1-i]); err != nil {
			return err
		}
	}
	return nil
}

// skipCommands wipes b half-way through the load and restarts it with
// --unsafe-skip-commands: it forgets every leave before it.
func (r *scenarioRun) skipCommands(ctx context.Context) error {
	if err := r.waitProduced(ctx, 0.5); err != nil {
		return err
	}
	b := r.insts[1]
	b.addFlags("--unsafe-skip-commands")
	return r.restartWiped(ctx, b)
}

func (r *scenarioRun) restartWiped(ctx context.Context, in *instance) error {
	r.logf("stop %s, wipe its membership store, start it again (%d signals produced)", in.name, r.produced.Load())
	if err := in.term(60 * time.Second); err != nil {
		r.finding("%v", err)
	}
	if err := in.wipe(); err != nil {
		return err
	}
	if err := in.start(); err != nil {
		return err
	}
	return r.settleOrRecover(ctx, "after restarting the wiped "+in.name)
}
