// Command loadgen writes a seeded, deterministic load of engagement signals
// and membership commands to cohortgate's input topics: the workload the
// chaos harness verifies, for benchmarks and for trying the processor out.
//
// Usage:
//
//	loadgen --brokers 127.0.0.1:9092 --users 100000 --signals 1000000 \
//	        --leave-pct 5 --rejoin-pct 1 --rate 0 --seed 1
//
// It creates the topics if they are missing (as the processor would: the
// commands topic co-partitioned with the signals topic and kept forever),
// prints its progress once a second, and ends with a line giving the
// records written and the records per second. See integration/workload for
// what the load contains and how it is produced.
//
// --hostile adds the hostile mix (misrouted, transactional, re-delivered,
// late, same-millisecond, future and poison records; --hostile-scenes of
// them, weighed by --hostile-shares): give it the processors' --grace and
// --max-future-skew, which its late and future records are stamped beyond.
// It needs Kafka's default max.message.bytes or more on the input topics.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/cohortgate/cohortgate/integration/workload"
	"github.com/cohortgate/cohortgate/internal/cmdline"
	"github.com/cohortgate/cohortgate/topics"
)

func main() { cmdline.Main("loadgen", 1, run) }

type options struct {
	brokers     string
	cfg         workload.Config
	topics      topics.Set
	partitions  int
	replication int
	create      bool
	hostile     bool
	txnID       string
}

func parse(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	var err error
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.brokers, "brokers", "127.0.0.1:9092", "comma-separated seed brokers (host:port)")
	fs.IntVar(&o.cfg.Users, "users", 100_000, "number of users (ids 1..users)")
	fs.IntVar(&o.cfg.Signals, "signals", 1_000_000, "number of signals")
	fs.IntVar(&o.cfg.ValueSize, "value-size", 100, "bytes per signal value (never less than its id, \"sig-<seq>-\")")
	fs.Float64Var(&o.cfg.LeavePct, "leave-pct", 5, "percentage of users who leave")
	fs.Float64Var(&o.cfg.RejoinPct, "rejoin-pct", 1, "percentage of users who rejoin after leaving (at most --leave-pct)")
	fs.Float64Var(&o.cfg.Rate, "rate", 0, "signals per second; 0 is as fast as the broker takes them")
	fs.Uint64Var(&o.cfg.Seed, "seed", 1, "seed of the plan: the same flags give the same load")
	d := topics.Defaults()
	var commands, signals, cohort, dlq, changelog string
	fs.StringVar(&commands, "commands-topic", string(d.Commands), "topic of leave/rejoin commands")
	fs.StringVar(&signals, "signals-topic", string(d.Signals), "topic of engagement signals")
	fs.StringVar(&cohort, "cohort-topic", string(d.Cohort), "cohort topic (created if missing, not written)")
	fs.StringVar(&dlq, "dlq-topic", string(d.DLQ), "dead-letter topic (created if missing, not written)")
	fs.StringVar(&changelog, "changelog-topic", string(d.Changelog), "changelog topic (created if missing, not written)")
	fs.IntVar(&o.partitions, "partitions", 6, "partitions of topics loadgen creates")
	fs.IntVar(&o.replication, "replication-factor", -1, "replication factor of topics loadgen creates; -1: the broker's default")
	fs.BoolVar(&o.create, "create-topics", true, "create missing topics first")
	h := &o.cfg.Hostile
	var shares string
	fs.BoolVar(&o.hostile, "hostile", false, "add the hostile mix (see integration/workload)")
	fs.IntVar(&h.Scenes, "hostile-scenes", 16, "hostile scenes over the load, with --hostile")
	fs.StringVar(&shares, "hostile-shares", "", "weights of the scene kinds, e.g. txn-held=2,poison=1 (kinds left out: 0); empty: all equal. Kinds: "+kindList())
	fs.DurationVar(&h.Grace, "grace", 2*time.Second, "the processors' --grace: late leaves are stamped further back")
	fs.DurationVar(&h.MaxFutureSkew, "max-future-skew", 5*time.Second, "the processors' --max-future-skew: future records are stamped an hour beyond it")
	fs.DurationVar(&h.Hold, "hold", 0, "longest a held transaction stays open; 0: 2×grace+2s, at least 4s")
	fs.IntVar(&h.LargeBytes, "large-bytes", 0, "bytes of the largest poison records; 0: 1040000 (under Kafka's default max.message.bytes)")
	fs.StringVar(&o.txnID, "transactional-id", "", "transactional ID of the hostile mix's transactional producer; empty: cohortgate-loadgen-<commands topic>")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q; flags are written --name=value", fs.Arg(0))
	}
	o.topics = topics.Set{
		Commands: topics.Topic(commands), Signals: topics.Topic(signals), Cohort: topics.Topic(cohort),
		DLQ: topics.Topic(dlq), Changelog: topics.Topic(changelog),
	}
	var errs []error
	if !o.hostile {
		o.cfg.Hostile = workload.Hostile{}
	} else if o.cfg.Hostile.Shares, err = workload.ParseShares(shares); err != nil {
		errs = append(errs, fmt.Errorf("--hostile-shares: %w", err))
	}
	if o.txnID == "" {
		o.txnID = "cohortgate-loadgen-" + commands
	}
	if o.hostile && o.cfg.Hostile.Scenes < 1 {
		errs = append(errs, fmt.Errorf("--hostile-scenes: %d must be at least 1 with --hostile", o.cfg.Hostile.Scenes))
	}
	// The partition count is the broker's, known only once connected;
	// check the rest of the mix against any count.
	probe := o.cfg
	probe.Partitions = max(probe.Partitions, 1)
	if err := probe.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := o.topics.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("topic flags: %w", err))
	}
	if len(cmdline.List(o.brokers)) == 0 {
		errs = append(errs, errors.New("--brokers: give at least one host:port"))
	}
	if o.partitions < 1 || o.partitions > 1<<20 {
		errs = append(errs, fmt.Errorf("--partitions: %d must be between 1 and 1048576", o.partitions))
	}
	if o.replication == 0 || o.replication < -1 || o.replication > 1<<15-1 {
		errs = append(errs, fmt.Errorf("--replication-factor: %d must be -1 (broker default) or at least 1", o.replication))
	}
	return o, errors.Join(errs...)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parse(args, stderr)
	if err != nil {
		return err
	}
	c, err := workload.NewClients(cmdline.List(o.brokers), o.hostile, o.txnID)
	if err != nil {
		return err
	}
	defer c.Close()
	adm := kadm.NewClient(c.Load)
	if o.create {
		cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		err := workload.CreateTopics(cctx, adm, o.topics, int32(o.partitions), int16(o.replication))
		cancel()
		if err != nil {
			return err
		}
	}
	if o.hostile {
		if o.cfg.Partitions, err = partitionsOf(ctx, adm, o.topics.Commands); err != nil {
			return err
		}
	}
	plan, err := workload.NewPlan(o.cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "loadgen: seed %d: %d signals over %d users, %d leavers, %d commands, %d hostile scenes, to %s and %s\n",
		o.cfg.Seed, o.cfg.Signals, o.cfg.Users, plan.Leavers(), len(plan.Commands), len(plan.Scenes), o.topics.Signals, o.topics.Commands)
	final, err := workload.Produce(ctx, c, o.topics, plan, func(p workload.Progress) {
		fmt.Fprintf(stdout, "loadgen: %v\n", p)
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "loadgen: done: %d records (%d signals, %d commands, %d hostile signals, %d other hostile records) in %v: %.0f records/s\n",
		final.Records(), final.Signals, final.Commands, final.HostileSignals, final.HostileRecords, final.Elapsed.Round(time.Millisecond), final.Rate())
	return nil
}

// partitionsOf returns the partition count of topic.
func partitionsOf(ctx context.Context, adm *kadm.Client, topic topics.Topic) (int, error) {
	td, err := adm.ListTopics(ctx, string(topic))
	if err != nil {
		return 0, fmt.Errorf("describing %s: %w", topic, err)
	}
	d, ok := td[string(topic)]
	if !ok || d.Err != nil || len(d.Partitions) == 0 {
		return 0, fmt.Errorf("topic %s: not found (create it, or drop --create-topics=false)", topic)
	}
	return len(d.Partitions), nil
}

func kindList() string {
	var names []string
	for _, k := range workload.Kinds() {
		names = append(names, string(k))
	}
	return strings.Join(names, ",")
}
