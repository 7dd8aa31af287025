package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/integration/workload"
	"github.com/cohortgate/cohortgate/internal/cmdline"
	"github.com/cohortgate/cohortgate/topics"
)

// bench instances: 1, 2 and 3 processors in one consumer
// group on the same load. For each size of the group it measures the time
// from the rebalance that made it to every partition forwarding again, and
// what the whole group spends, in CPU-seconds per million signals, on a
// fixed batch of signals.
//
//  1. --partitions partitions of every topic; a history of --members
//     users (a leave, then a rejoin, of each: 2×members commands, spread
//     over the partitions by murmur2, as bench handover writes them); a
//     seed processor replays them (--handover-replay) and is stopped once
//     its group's committed metadata says every command of every
//     partition was judged, so that the changelog and the offsets an
//     empty owner restores from exist.
//  2. --runs rounds, each growing a group from 1 to --max instances, one
//     at a time: with n-1 instances forwarding, the n-th starts with an
//     empty data dir (it restores the partitions the group gives it from
//     the changelog). The group's sizes are thus interleaved: 1, 2, 3, 1,
//     2, 3, ... The instances run as `bench run` runs processor-eos:
//     bin/processor, exactly once, --grace 0.
//  3. Each step, from the newcomer's start until it is measured, a probe
//     is written to every signals partition every --probe-every (stamped
//     with the wall clock; users above the members, who never left) and
//     the output topic is read read_committed. The step is settled when
//     the group is Stable with n members, each assigned partitions, the
//     newcomer has logged its assignment, and every partition has
//     forwarded a probe written after the last "partitions assigned" line
//     of any instance (the last rebalance, as the harness read it). Its
//     figures: that rebalance → every partition forwarding again (the
//     latest of the partitions' first such probe read; resolution: the
//     probe interval), the longest any probe of the step waited from its
//     write to its read, and the CPU-seconds of all instances from the
//     newcomer's start to then.
//  4. Then --signals signals over the members are written in one
//     transaction, so that the group sees them at once, as a pre-loaded
//     topic (a read_committed consumer stops at an open transaction),
//     followed by one tick per partition. The group's committed offsets
//     and every instance's CPU time (/proc/<pid>/stat) are polled every
//     100 ms: from t0, the first poll at which the group committed into
//     the batch, to t1, the first at which it committed everything; CPU
//     per million signals is the sum of the instances' CPU-seconds over
//     t0–t1 divided by the signals committed in it (as throughput.go does
//     for one child).
//
// At the end of a round every instance stops cleanly (SIGTERM, one at a
// time, the newest first); the next round starts from empty data dirs.
//
// With --cold, a step starts all n instances at once, with empty data
// dirs, into an empty group (the whole group replaced, or started on new
// machines), and stops them after its batch; "the newcomer" above is then
// every one of them.
type instancesOptions struct {
	brokers     []string
	processor   string
	workDir     string
	out         string
	invokedAs   string
	kafkaScript string
	members     int
	signals     int
	valueSize   int
	partitions  int
	max         int
	runs        int
	probeEvery  time.Duration
	timeout     time.Duration
	seedTimeout time.Duration
	keep        bool
	cold        bool
}

func parseInstancesOptions(args []string, stderr io.Writer) (*instancesOptions, error) {
	fs := flag.NewFlagSet("bench instances", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &instancesOptions{}
	var brokers string
	fs.StringVar(&brokers, "brokers", os.Getenv("KAFKA_BROKERS"), "seed brokers (default $KAFKA_BROKERS)")
	fs.StringVar(&o.processor, "processor", "bin/processor", "the processor binary")
	fs.StringVar(&o.workDir, "work-dir", "bin/instances-work", "data dirs and logs; each run in a directory of its own")
	fs.StringVar(&o.out, "out", "BENCHMARKS.md", "file the section is appended to; empty: none")
	fs.StringVar(&o.invokedAs, "invoked-as", "", "the command that ran this one, for the report")
	fs.StringVar(&o.kafkaScript, "kafka-script", "integration/kafka/kafka.sh", "the broker script, asked for the broker version")
	fs.IntVar(&o.members, "members", 1_000_000, "users in the history: each left and rejoined (2 commands)")
	fs.IntVar(&o.signals, "signals", 5_000_000, "signals of each step's batch")
	fs.IntVar(&o.valueSize, "value-size", 100, "bytes per signal value")
	fs.IntVar(&o.partitions, "partitions", 6, "partitions of every topic")
	fs.IntVar(&o.max, "max", 3, "the largest group: steps of 1..max instances")
	fs.IntVar(&o.runs, "runs", 3, "rounds of 1..max instances")
	fs.DurationVar(&o.probeEvery, "probe-every", 50*time.Millisecond, "interval of the probes, one per partition")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Minute, "bound of each wait of a step (settling, the batch)")
	fs.DurationVar(&o.seedTimeout, "seed-timeout", 60*time.Minute, "bound of the seed's replay of the history")
	fs.BoolVar(&o.keep, "keep", false, "keep the topics and the group")
	fs.BoolVar(&o.cold, "cold", false, "start each step's n instances at once into an empty group, instead of growing one group")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	o.brokers = cmdline.List(brokers)
	var errs []error
	if len(o.brokers) == 0 {
		errs = append(errs, errors.New("--brokers: none (set KAFKA_BROKERS)"))
	}
	if o.members < 1 || o.signals < 1 || o.valueSize < 1 {
		errs = append(errs, errors.New("--members, --signals and --value-size must be at least 1"))
	}
	if o.max < 1 || o.max > o.partitions {
		errs = append(errs, fmt.Errorf("--max: %d instances for %d partitions: each needs a partition", o.max, o.partitions))
	}
	if o.runs < 1 {
		errs = append(errs, errors.New("--runs: must be at least 1"))
	}
	if o.probeEvery < time.Millisecond {
		errs = append(errs, errors.New("--probe-every: must be at least 1ms"))
	}
	return o, errors.Join(errs...)
}

func instances(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseInstancesOptions(args, stderr)
	if err != nil {
		return err
	}
	ib := &instancesBench{o: o, out: stdout, rep: &instancesReport{Started: time.Now(), Options: o}}
	return ib.run(ctx)
}

// instancesBench is the state of one `bench instances`.
type instancesBench struct {
	o     *instancesOptions
	out   io.Writer
	rep   *instancesReport
	procs procs
	a     *admin
	set   topics.Set
	group string
	id    string // of this run: names its topics, group, transactional ids and work dir
	work  string
	keys  [][]byte // per partition, the key of a user who never left: probes and ticks
	seq   uint64   // the next signal id of the batches
	log   groupLog
}

func (ib *instancesBench) printf(format string, args ...any) {
	fmt.Fprintf(ib.out, "instances %7.1fs  %s\n", time.Since(ib.rep.Started).Seconds(), fmt.Sprintf(format, args...))
}

func (ib *instancesBench) run(ctx context.Context) error {
	o := ib.o
	defer ib.procs.stopAll(30 * time.Second)
	var err error
	if ib.a, err = newAdmin(o.brokers); err != nil {
		return err
	}
	defer ib.a.close()
	ib.id = "instances-" + strconv.FormatInt(time.Now().Unix(), 10)
	ib.set = workload.Topics(ib.id)
	ib.group = ib.id
	ib.work, err = filepath.Abs(filepath.Join(o.workDir, ib.id))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(ib.work, 0o755); err != nil {
		return err
	}
	ib.keys = keysByPartition(o.partitions, uint64(o.members)+1)
	ib.rep.Machine = readMachine()
	vctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	ib.rep.Broker = ib.a.brokerVersion(vctx, o.kafkaScript) + " at " + joinList(o.brokers)
	cancel()
	ib.printf("work dir %s; broker %s; %s", ib.work, ib.rep.Broker, ib.rep.Machine.LoadAvg)

	cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	err = workload.CreateTopics(cctx, ib.a.adm, ib.set, int32(o.partitions), -1)
	cancel()
	if err != nil {
		return err
	}
	if !o.keep {
		defer func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_ = ib.a.deleteTopics(dctx, string(ib.set.Commands), string(ib.set.Signals), string(ib.set.Cohort),
				string(ib.set.DLQ), string(ib.set.Changelog))
			_, _ = ib.a.adm.DeleteGroup(dctx, ib.group)
		}()
	}

	if err := ib.seed(ctx); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	for round := 1; round <= o.runs && ctx.Err() == nil; round++ {
		ib.round(ctx, round)
	}
	ib.rep.Took = time.Since(ib.rep.Started)
	ib.rep.LoadAvgEnd = readLoadAvg()
	md := ib.rep.markdown()
	fmt.Fprintln(ib.out)
	fmt.Fprint(ib.out, md)
	if o.out != "" {
		if err := appendReport(o.out, md, ""); err != nil { // no trend row: the trend table is of the throughput runs
			return err
		}
		ib.printf("section appended to %s; logs in %s", o.out, ib.work)
	}
	if failed := ib.rep.failures(); failed > 0 {
		return fmt.Errorf("%d step(s) failed; see the report", failed)
	}
	return ctx.Err()
}

// seed writes the history and has one processor replay it; see the type's
// comment, step 1.
func (ib *instancesBench) seed(ctx context.Context) error {
	o := ib.o
	began := time.Now()
	commands := 2 * o.members
	ib.printf("writing the history: %d commands (a leave and a rejoin of %d users) over %d partitions", commands, o.members, o.partitions)
	if err := produceCommands(ctx, o.brokers, string(ib.set.Commands), commands); err != nil {
		return err
	}
	ib.rep.HistoryWrite = time.Since(began)
	ib.printf("history written in %.1fs; the seed processor replays it from offset 0", ib.rep.HistoryWrite.Seconds())

	began = time.Now()
	seed, err := ib.start("seed", 0, "--handover-replay")
	if err != nil {
		return err
	}
	defer seed.stop(60 * time.Second)
	p := ib.newProber(ctx, "seed")
	defer p.close()
	// The probes keep the seed's transactions, and so its commits of the
	// judged offsets, going once the replay is done.
	err = ib.a.waitJudged(ctx, ib.group, ib.set, o.seedTimeout, func(judged, total int64, _ string) {
		ib.printf("seed: %s of %s commands judged (%.0f%%), %.1f CPU-s", thousands(float64(judged)), thousands(float64(total)),
			100*ratio(float64(judged), float64(total)), cpuOf(seed))
	})
	if err != nil {
		if seed.exited() {
			return seed.failure()
		}
		return err
	}
	ib.rep.SeedTook, ib.rep.SeedCPU = time.Since(began), cpuOf(seed)
	if err := p.close(); err != nil {
		return err
	}
	seed.stop(60 * time.Second)
	end, err := ib.a.endOffsets(ctx, string(ib.set.Changelog))
	if err != nil {
		return err
	}
	ib.rep.Changelog = end.sum()
	ib.printf("seed: every command judged in %.1fs (%.1f CPU-s); changelog: %d records", ib.rep.SeedTook.Seconds(), ib.rep.SeedCPU, ib.rep.Changelog)
	return nil
}

// round grows the group from 1 to --max instances, a step each, then
// stops them all; with --cold, each step starts its group of n and stops
// it. A failed step ends the round.
func (ib *instancesBench) round(ctx context.Context, round int) {
	var group []*child
	stop := func() {
		for _, c := range slices.Backward(group) {
			c.stop(60 * time.Second)
		}
		group = nil
	}
	defer stop()
	for n := 1; n <= ib.o.max && ctx.Err() == nil; n++ {
		s := instancesStep{Round: round, N: n}
		if ib.o.cold {
			stop()
		}
		err := ib.step(ctx, &s, &group)
		if err != nil {
			s.Err = err.Error()
			ib.printf("round %d, %d instance(s): FAILED: %v", round, n, err)
		}
		ib.rep.Steps = append(ib.rep.Steps, s)
		if err != nil {
			return
		}
		ib.printf("round %d, %d instance(s): forwarding again %v after the last assignment (worst probe wait %v, %d partition(s) restored from the changelog, %d replayed, %.1f CPU-s); batch: %s signals/s, %.2f CPU-s per million signals, peak RSS %s",
			round, n, s.ForwardAgain.Round(time.Millisecond), s.WorstWait.Round(time.Millisecond), s.Restored, s.Replayed, s.SettleCPU,
			thousands(s.Rate()), s.CPUPerMillion(), mib(s.PeakRSS))
	}
}

// step starts the n-th instance beside the n-1 of *group (with --cold,
// n instances into an empty group), measures the rebalance and then the
// batch; see the type's comment, steps 3 and 4.
func (ib *instancesBench) step(ctx context.Context, s *instancesStep, group *[]*child) error {
	o := ib.o
	cpu0 := 0.0
	for _, c := range *group {
		cpu0 += cpuOf(c)
	}
	mark := ib.log.mark()
	p := ib.newProber(ctx, fmt.Sprintf("r%d-n%d", s.Round, s.N))
	defer p.close()
	began := time.Now()
	newcomers := []int{s.N}
	if ib.o.cold {
		newcomers = newcomers[:0]
		for k := 1; k <= s.N; k++ {
			newcomers = append(newcomers, k)
		}
	}
	for _, k := range newcomers {
		name := fmt.Sprintf("r%d-i%d", s.Round, k)
		if ib.o.cold {
			name = fmt.Sprintf("r%d-n%d-i%d", s.Round, s.N, k)
		}
		c, err := ib.start(name, k)
		if err != nil {
			return err
		}
		*group = append(*group, c)
	}
	ib.printf("round %d: instance(s) %v started; waiting for the group of %d to settle", s.Round, newcomers, s.N)

	wctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last time.Time
	for settled := false; !settled; {
		select {
		case <-wctx.Done():
			return fmt.Errorf("not settled within %v: %s", o.timeout, ib.unsettled(ctx, s.N, newcomers, mark, p))
		case <-tick.C:
		}
		for _, c := range *group {
			if c.exited() {
				return c.failure()
			}
		}
		var ok bool
		if last, ok = ib.log.lastAssigned(mark, newcomers); !ok {
			continue // a newcomer has no partitions yet
		}
		if ok, _ = ib.groupStable(wctx, s.N); !ok {
			continue
		}
		_, settled = p.log.firstAfter(last, o.partitions)
	}
	if err := p.close(); err != nil {
		return err
	}
	first, _ := p.log.firstAfter(last, o.partitions)
	for _, at := range first {
		s.ForwardAgain = max(s.ForwardAgain, at.Sub(last))
	}
	if rel, ok := ib.log.firstReleased(mark); ok {
		s.FromRelease = last.Add(s.ForwardAgain).Sub(rel)
	}
	s.WorstWait = p.log.worstWait()
	s.Settle = time.Since(began)
	for _, c := range *group {
		s.SettleCPU += cpuOf(c)
	}
	s.SettleCPU -= cpu0
	s.Restored, s.Replayed = ib.log.handovers(mark)
	return ib.batch(ctx, s, *group)
}

// batch writes the step's signals in one transaction and measures the
// group through them; see the type's comment, step 4.
func (ib *instancesBench) batch(ctx context.Context, s *instancesStep, group []*child) error {
	o := ib.o
	before, err := ib.a.endOffsets(ctx, string(ib.set.Signals))
	if err != nil {
		return err
	}
	began := time.Now()
	if err := ib.writeBatch(ctx, fmt.Sprintf("%s-batch-r%d-n%d", ib.id, s.Round, s.N)); err != nil {
		return err
	}
	if err := ib.writeTicks(ctx); err != nil {
		return err
	}
	end, err := ib.a.endOffsets(ctx, string(ib.set.Signals))
	if err != nil {
		return err
	}
	ib.printf("round %d, %d instance(s): %d signals written in one transaction in %.1fs; the group works through them",
		s.Round, s.N, o.signals, time.Since(began).Seconds())

	wctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	type sample struct {
		at        time.Time
		committed int64 // into the batch, summed over the partitions
		cpu       float64
	}
	var first, last sample
	started := false
	for done := false; !done; {
		select {
		case <-wctx.Done():
			return fmt.Errorf("the batch was not committed within %v (%d of %d)", o.timeout, last.committed, end.sum()-before.sum())
		case <-tick.C:
		}
		committed, err := ib.a.committed(wctx, ib.group, string(ib.set.Signals))
		if err != nil {
			continue // retried on the next tick; the deadline bounds it
		}
		cur := sample{at: time.Now()}
		for _, c := range group {
			if c.exited() {
				return c.failure()
			}
			cur.cpu += cpuOf(c)
		}
		done = true
		for p, e := range end {
			cur.committed += max(0, min(committed[p], e)-before[p])
			done = done && committed[p] >= e
		}
		if !started && cur.committed > 0 {
			started, first = true, cur
		}
		last = cur
	}
	s.Signals = last.committed - first.committed
	s.Window = last.at.Sub(first.at)
	s.CPU = last.cpu - first.cpu
	for _, c := range group {
		if rss, err := procPeakRSS(c.pid()); err == nil {
			s.PeakRSS = max(s.PeakRSS, rss)
		}
	}
	return nil
}

// writeBatch writes --signals signals over the members in one
// transaction: the group sees none of them until it commits, then all.
func (ib *instancesBench) writeBatch(ctx context.Context, txnID string) error {
	o := ib.o
	cl, err := kgo.NewClient(kgo.SeedBrokers(o.brokers...), kgo.ClientID("cohortgate-bench-batch"),
		kgo.DefaultProduceTopic(string(ib.set.Signals)), kgo.TransactionalID(txnID),
		kgo.TransactionTimeout(5*time.Minute))
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := cl.BeginTransaction(); err != nil {
		return err
	}
	var fail firstErr
	for range o.signals {
		seq := ib.seq
		ib.seq++
		// Users 1..members, in an order that visits every partition alike.
		user := 1 + (seq*0x9E3779B97F4A7C15)%uint64(o.members)
		cl.Produce(ctx, &kgo.Record{Key: topics.AppendUserID(nil, user), Value: workload.AppendValue(nil, seq, o.valueSize)},
			func(_ *kgo.Record, err error) { fail.set(err) })
	}
	fctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := cl.Flush(fctx); err != nil {
		return err
	}
	commit := kgo.TryCommit
	if fail.get() != nil {
		commit = kgo.TryAbort
	}
	if err := cl.EndTransaction(fctx, commit); err != nil {
		return err
	}
	return fail.get()
}

// writeTicks writes one record per partition after the batch, outside
// any transaction: an instance commits the offset past the batch's commit
// marker only once it has read a record after it.
func (ib *instancesBench) writeTicks(ctx context.Context) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(ib.o.brokers...), kgo.ClientID("cohortgate-bench-ticks"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	defer cl.Close()
	recs := make([]*kgo.Record, 0, len(ib.keys))
	for p, key := range ib.keys {
		recs = append(recs, &kgo.Record{Topic: string(ib.set.Signals), Partition: int32(p), Key: key, Value: []byte(tickValue)})
	}
	return cl.ProduceSync(ctx, recs...).FirstErr()
}

// start starts the instance name, number n of its step (0: the seed),
// with an empty data dir, in the group.
func (ib *instancesBench) start(name string, n int, extra ...string) (*child, error) {
	dir := filepath.Join(ib.work, name)
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	args := []string{"run", "--brokers", joinList(ib.o.brokers), "--group", ib.group, "--data-dir", dir, "--http-addr", addr,
		"--transactional-id", ib.id + "-" + name, "--exactly-once=true", "--grace", "0"}
	args = append(args, workload.TopicFlags(ib.set)...)
	args = append(args, extra...)
	if ib.rep.Command == "" && n > 0 {
		ib.rep.Command = "processor " + joinArgs(args)
	}
	return ib.procs.start(name, filepath.Join(ib.work, name+".log"), ib.log.onLine(n), ib.o.processor, args...)
}

// groupStable reports whether the group is Stable with n members, each
// assigned at least one signals partition and all of them assigned.
func (ib *instancesBench) groupStable(ctx context.Context, n int) (bool, string) {
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	gs, err := ib.a.adm.DescribeGroups(dctx, ib.group)
	if err != nil {
		return false, err.Error()
	}
	g, ok := gs[ib.group]
	if !ok || g.Err != nil {
		return false, fmt.Sprintf("group not described: %v", g.Err)
	}
	if g.State != "Stable" || len(g.Members) != n {
		return false, fmt.Sprintf("group %s with %d member(s)", g.State, len(g.Members))
	}
	assigned := make(map[int32]bool)
	for _, m := range g.Members {
		ca, ok := m.Assigned.AsConsumer()
		if !ok {
			return false, "a member's assignment is not a consumer's"
		}
		mine := 0
		for _, t := range ca.Topics {
			if t.Topic == string(ib.set.Signals) {
				for _, p := range t.Partitions {
					assigned[p], mine = true, mine+1
				}
			}
		}
		if mine == 0 {
			return false, "a member has no signals partition"
		}
	}
	if len(assigned) != ib.o.partitions {
		return false, fmt.Sprintf("%d of %d partitions assigned", len(assigned), ib.o.partitions)
	}
	return true, "stable"
}

// unsettled says why a step did not settle, for its error.
func (ib *instancesBench) unsettled(ctx context.Context, n int, newcomers []int, mark int, p *prober) string {
	last, ok := ib.log.lastAssigned(mark, newcomers)
	if !ok {
		return fmt.Sprintf("not every one of the instances %v logged an assignment with partitions", newcomers)
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if ok, why := ib.groupStable(dctx, n); !ok {
		return why
	}
	first, _ := p.log.firstAfter(last, ib.o.partitions)
	var missing []string
	for part := range int32(ib.o.partitions) {
		if _, ok := first[part]; !ok {
			missing = append(missing, strconv.Itoa(int(part)))
		}
	}
	return "no probe written after the last assignment forwarded on partition(s) " + strings.Join(missing, ",")
}

// cpuOf is c's CPU-seconds so far, or 0 if it cannot be read (the process
// ended).
func cpuOf(c *child) float64 {
	t, err := procCPU(c.pid())
	if err != nil {
		return 0
	}
	return t.seconds()
}

// groupLog is what the instances' logs said: their assignments and how
// they took over partitions. Lines arrive from the children's output
// goroutines; the step reads it.
type groupLog struct {
	mu     sync.Mutex
	events []groupEvent // guarded by mu, in the order they were read
}

// groupEvent is one log line of interest.
type groupEvent struct {
	at       time.Time
	instance int // n of the instance in its round (0: the seed)
	kind     eventKind
}

type eventKind int

const (
	assignedSome eventKind = iota // "partitions assigned" with partitions
	assignedNone                  // the same, empty
	restored                      // a partition's users restored from the changelog
	released                      // "partitions released": a rebalance took partitions away
	replayed                      // a partition's commands replayed from offset 0
)

// onLine returns the line callback of instance n.
func (l *groupLog) onLine(n int) func(string) {
	return func(line string) {
		if k, ok := classifyLine(line); ok {
			l.mu.Lock()
			l.events = append(l.events, groupEvent{at: time.Now(), instance: n, kind: k})
			l.mu.Unlock()
		}
	}
}

// classifyLine says which event a processor log line is, if any.
func classifyLine(line string) (eventKind, bool) {
	switch {
	case assignedLine.MatchString(line):
		if strings.Contains(line, "partitions=[]") {
			return assignedNone, true
		}
		return assignedSome, true
	case releasedLine.MatchString(line):
		return released, true
	case handoverLine.MatchString(line):
		if strings.Contains(line, "replaying") {
			return replayed, true
		}
		return restored, true
	}
	return 0, false
}

// releasedLine matches the processor's log line when a rebalance takes
// partitions from it.
var releasedLine = regexp.MustCompile(`msg="partitions released"`)

// mark is where the events of a step start.
func (l *groupLog) mark() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.events)
}

// lastAssigned returns the time of the latest assignment with partitions
// since mark, provided every one of the newcomers (instance numbers) has
// had one: before that, the group's last rebalance has not happened.
func (l *groupLog) lastAssigned(mark int, newcomers []int) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var last time.Time
	seen := make(map[int]bool, len(newcomers))
	for _, e := range l.events[mark:] {
		if e.kind == assignedSome {
			last = e.at
			seen[e.instance] = true
		}
	}
	for _, n := range newcomers {
		if !seen[n] {
			return time.Time{}, false
		}
	}
	return last, true
}

// firstReleased returns the time of the first "partitions released" line
// since mark: the rebalance's first move, if it took any partition from a
// running instance.
func (l *groupLog) firstReleased(mark int) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.events[mark:] {
		if e.kind == released {
			return e.at, true
		}
	}
	return time.Time{}, false
}

// handovers counts the partitions taken over since mark by restore from
// the changelog and by replay.
func (l *groupLog) handovers(mark int) (restoredN, replayedN int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.events[mark:] {
		switch e.kind {
		case restored:
			restoredN++
		case replayed:
			replayedN++
		}
	}
	return restoredN, replayedN
}

// prober writes a probe to every signals partition every interval and
// reads the output topic, read_committed, from where it ended when the
// prober started; see the type's comment of instancesOptions, step 3. Its
// two goroutines end with close.
type prober struct {
	log    probeLog
	cancel context.CancelFunc
	wg     sync.WaitGroup
	fail   firstErr
	once   sync.Once
}

// newProber starts probing; tag tells this prober's probes from others'.
func (ib *instancesBench) newProber(ctx context.Context, tag string) *prober {
	ctx, cancel := context.WithCancel(ctx)
	p := &prober{cancel: cancel, log: probeLog{read: make(map[probeID]time.Time)}}
	prefix := "probe-" + ib.id + "-" + tag + "-"
	start, err := ib.a.endOffsets(ctx, string(ib.set.Cohort))
	if err != nil {
		p.fail.set(err)
		return p
	}
	from := make(map[int32]kgo.Offset, len(start))
	for part, off := range start {
		from[part] = kgo.NewOffset().At(off)
	}
	w, err := kgo.NewClient(kgo.SeedBrokers(ib.o.brokers...), kgo.ClientID("cohortgate-bench-probe"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		p.fail.set(err)
		return p
	}
	r, err := kgo.NewClient(append(readerOpts(ib.o.brokers), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(100*time.Millisecond), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{string(ib.set.Cohort): from}))...)
	if err != nil {
		w.Close()
		p.fail.set(err)
		return p
	}
	p.wg.Add(2)
	go func() { // the writer
		defer p.wg.Done()
		defer w.Close()
		tick := time.NewTicker(ib.o.probeEvery)
		defer tick.Stop()
		for seq := 0; ; seq++ {
			at := time.Now()
			p.log.sent(at)
			for part, key := range ib.keys {
				w.Produce(ctx, &kgo.Record{Topic: string(ib.set.Signals), Partition: int32(part), Key: key,
					Value: []byte(prefix + strconv.Itoa(seq) + "-" + strconv.Itoa(part)), Timestamp: at},
					func(_ *kgo.Record, err error) {
						if ctx.Err() == nil {
							p.fail.set(err)
						}
					})
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	go func() { // the reader
		defer p.wg.Done()
		defer r.Close()
		for ctx.Err() == nil {
			fetches := r.PollFetches(ctx)
			now := time.Now()
			fetches.EachRecord(func(rec *kgo.Record) {
				rest, ok := strings.CutPrefix(string(rec.Value), prefix)
				if !ok {
					return
				}
				seqText, partText, _ := strings.Cut(rest, "-")
				seq, err1 := strconv.Atoi(seqText)
				part, err2 := strconv.Atoi(partText)
				if err1 == nil && err2 == nil {
					p.log.readAt(probeID{seq: seq, part: int32(part)}, now)
				}
			})
		}
	}()
	return p
}

// close stops the prober and returns the first error it met. It may be
// called more than once.
func (p *prober) close() error {
	p.once.Do(func() {
		p.cancel()
		p.wg.Wait()
	})
	return p.fail.get()
}

// probeLog is when each probe was written and read. Its methods may be
// called from any goroutine.
type probeLog struct {
	mu    sync.Mutex
	sends []time.Time           // guarded by mu; by seq: when the probes of seq were written
	read  map[probeID]time.Time // guarded by mu; when a probe was read from the output
}

// probeID names a probe: its sequence number and partition.
type probeID struct {
	seq  int
	part int32
}

// sent records the write of the next seq's probes.
func (l *probeLog) sent(at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sends = append(l.sends, at)
}

func (l *probeLog) readAt(id probeID, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, dup := l.read[id]; !dup {
		l.read[id] = at
	}
}

// firstAfter returns, for each partition, when the first probe written
// at or after from was read, and whether every one of the partitions
// 0..partitions-1 has one.
func (l *probeLog) firstAfter(from time.Time, partitions int) (map[int32]time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	first := make(map[int32]time.Time, partitions)
	for id, at := range l.read {
		if id.seq >= len(l.sends) || l.sends[id.seq].Before(from) {
			continue
		}
		if f, ok := first[id.part]; !ok || at.Before(f) {
			first[id.part] = at
		}
	}
	return first, len(first) == partitions
}

// worstWait is the longest any probe read waited from its write to its
// read.
func (l *probeLog) worstWait() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var worst time.Duration
	for id, at := range l.read {
		if id.seq < len(l.sends) {
			worst = max(worst, at.Sub(l.sends[id.seq]))
		}
	}
	return worst
}
