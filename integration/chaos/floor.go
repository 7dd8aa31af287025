package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf16"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The floor of a broker-fault scenario: what Kafka itself allows under the
// same fault. Beside the processors, in the same run, a plain franz-go
// exactly-once passthrough (a GroupTransactSession: a transactional
// producer and a read_committed consumer, the processors' client settings)
// copies the scenario's first input into a topic of its own, and a reader
// of that topic measures its longest stall exactly as the processors' is
// measured (stallMeter). The scenario's verdict on time is
// stall <= floor + floorSlack.

// floorSlack is how much longer than the floor a scenario's stall may be.
const floorSlack = 3 * time.Second

// floorCommitInterval is how long a passthrough transaction collects
// records: the processor's default CommitInterval.
const floorCommitInterval = 100 * time.Millisecond

// floorRun is a running floor passthrough and its meter.
type floorRun struct {
	meter stallMeter
	topic string
	group string // the passthrough's consumer group
	txnID string // and its transactional ID
	stop  func() // stops the passthrough and its reader, and waits for them
}

// startFloor creates the floor's output topic and starts the passthrough
// from r's first input into it, and its reader; the meter starts now.
func (r *scenarioRun) startFloor(ctx context.Context) (*floorRun, error) {
	o := r.h.o
	f := &floorRun{topic: string(r.set.Cohort) + ".floor", group: r.group + "-floor", txnID: r.group + "-floor"}
	if len(r.insts) > 0 {
		if groups, txns, err := coordinatorPartitions(ctx, r.h.adm); err != nil {
			r.logf("floor: its coordinators may differ from the processors': %v", err)
		} else {
			f.group = sameCoordinator(f.group, r.group, groups)
			f.txnID = sameCoordinator(f.txnID, r.txnID(r.insts[0]), txns)
		}
	}
	configs := make(map[string]*string)
	for _, s := range r.set.Specs() {
		if s.Topic == r.set.Cohort {
			for k, v := range s.Configs {
				configs[k] = kadm.StringPtr(v)
			}
		}
	}
	resp, err := r.h.adm.CreateTopic(ctx, int32(o.partitions), r.h.replication(), configs, f.topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return nil, fmt.Errorf("floor: unable to create topic %s: %w", f.topic, err)
	}
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{}, 2)
	f.meter.start(time.Now())
	go func() {
		defer func() { done <- struct{}{} }()
		_ = watchOutput(fctx, r.h.brokers, f.topic, &f.meter)
	}()
	go func() {
		defer func() { done <- struct{}{} }()
		if err := passthrough(fctx, r.h.brokers, f.group, f.txnID, string(r.set.Signals), f.topic, o.sessionTimeout, r.logf); err != nil {
			r.logf("floor: the passthrough stopped: %v", err)
		}
	}()
	f.stop = func() {
		cancel()
		<-done
		<-done
		if !o.keep {
			cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			_, _ = r.h.adm.DeleteTopics(cctx, f.topic)
			_, _ = r.h.adm.DeleteGroup(cctx, f.group)
			ccancel()
		}
	}
	return f, nil
}

// The floor is a fair measure of a fault only if the fault hits its
// coordinators as it hits the processors': a broker that coordinates the
// processors' group but not the floor's makes their members expire and
// rejoin while the floor goes on. A coordinator is the leader of one
// partition of __consumer_offsets (groups) or __transaction_state
// (transactional IDs), chosen by a hash of the name, so the floor's names
// are chosen to hash to the processors' partitions (the group's, and the
// first instance's transactional ID's): then every fault, and every
// failover after it, moves both together.

// coordinatorPartitions returns the partition counts of the brokers'
// group and transaction state topics, from the configuration of the
// broker that answers.
func coordinatorPartitions(ctx context.Context, adm *kadm.Client) (groups, txns int, err error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("unable to list the brokers: %w", err)
	}
	if len(md.Brokers) == 0 {
		return 0, 0, errors.New("no broker in the metadata")
	}
	rcs, err := adm.DescribeBrokerConfigs(ctx, md.Brokers[0].NodeID)
	if err != nil {
		return 0, 0, fmt.Errorf("unable to read broker %d's configuration: %w", md.Brokers[0].NodeID, err)
	}
	for _, rc := range rcs {
		if rc.Err != nil {
			return 0, 0, fmt.Errorf("unable to read broker %d's configuration: %w", md.Brokers[0].NodeID, rc.Err)
		}
		for _, c := range rc.Configs {
			if c.Value == nil {
				continue
			}
			switch c.Key {
			case "offsets.topic.num.partitions":
				groups, err = strconv.Atoi(*c.Value)
			case "transaction.state.log.num.partitions":
				txns, err = strconv.Atoi(*c.Value)
			}
			if err != nil {
				return 0, 0, fmt.Errorf("broker %d's %s: %w", md.Brokers[0].NodeID, c.Key, err)
			}
		}
	}
	if groups < 1 || txns < 1 {
		return 0, 0, fmt.Errorf("broker %d names no partition count for its coordinators (offsets %d, transactions %d)", md.Brokers[0].NodeID, groups, txns)
	}
	return groups, txns, nil
}

// coordinatorPartition is the partition of a coordinator topic of n
// partitions that holds key, as the broker computes it: the absolute
// value of Java's String.hashCode (0 for MinInt32, as Kafka's Utils.abs
// has it), modulo n.
func coordinatorPartition(key string, n int) int {
	var h int32
	for _, c := range utf16.Encode([]rune(key)) {
		h = 31*h + int32(c)
	}
	switch {
	case h == math.MinInt32:
		h = 0
	case h < 0:
		h = -h
	}
	return int(h) % n
}

// sameCoordinator returns base, or base with the smallest suffix "-N",
// that hashes to the partition of match among n; base if none of the
// first thousand does (then the log of coordinators says so).
func sameCoordinator(base, match string, n int) string {
	want := coordinatorPartition(match, n)
	if coordinatorPartition(base, n) == want {
		return base
	}
	for i := 1; i <= 1000; i++ {
		if name := base + "-" + strconv.Itoa(i); coordinatorPartition(name, n) == want {
			return name
		}
	}
	return base
}

// floorMetadataMinAge is the processor's least time between two metadata
// requests of a client.
const floorMetadataMinAge = 250 * time.Millisecond

// floorEndTimeout bounds one End, as the processor's (its minimum, 10s).
func floorEndTimeout(session time.Duration) time.Duration { return max(session, 10*time.Second) }

// passthrough copies topic in to out exactly once until ctx ends: cycles
// of floorCommitInterval, each a transaction that commits the consumed
// offsets with the copies. An end that fails is retried in place as an
// abort (franz-go's documented retry), and only when that fails too is the
// session replaced. Copies keep key, value, headers and timestamp.
func passthrough(ctx context.Context, brokers []string, group, txnID, in, out string, session time.Duration, logf func(string, ...any)) error {
	endTimeout := floorEndTimeout(session)
	for ctx.Err() == nil {
		s, err := kgo.NewGroupTransactSession(
			kgo.SeedBrokers(brokers...),
			kgo.ClientID("cohortgate-floor"),
			kgo.TransactionalID(txnID),
			kgo.ConsumerGroup(group),
			kgo.ConsumeTopics(in),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.RequiredAcks(kgo.AllISRAcks()),
			kgo.SessionTimeout(session),
			kgo.RebalanceTimeout(endTimeout+5*time.Second),
			// The processor's (pkg/fanout clientOpts): a leader that
			// moved is looked up again within 250ms, not franz-go's 5s.
			kgo.MetadataMinAge(floorMetadataMinAge),
		)
		if err != nil {
			return err
		}
		err = passCycles(ctx, s, out, endTimeout)
		s.CloseAllowingRebalance()
		if err != nil && ctx.Err() == nil {
			logf("floor: replacing the passthrough's session: %v", err)
		}
	}
	return nil
}

// passCycles runs transactions on s until ctx ends or one cannot end.
func passCycles(ctx context.Context, s *kgo.GroupTransactSession, out string, endTimeout time.Duration) error {
	work := context.WithoutCancel(ctx)
	for ctx.Err() == nil {
		if err := s.Begin(); err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		deadline := time.Now().Add(floorCommitInterval)
		for ctx.Err() == nil && time.Now().Before(deadline) {
			pctx, cancel := context.WithDeadline(ctx, deadline)
			fs := s.PollRecords(pctx, 10000)
			cancel()
			if fs.IsClientClosed() {
				return errors.New("client closed")
			}
			fs.EachRecord(func(rec *kgo.Record) {
				s.Produce(work, &kgo.Record{Topic: out, Key: rec.Key, Value: rec.Value, Headers: rec.Headers, Timestamp: rec.Timestamp}, nil)
			})
		}
		ectx, cancel := context.WithTimeout(work, endTimeout)
		_, err := s.End(ectx, kgo.TryCommit)
		cancel()
		if err != nil {
			if aerr := abortInPlace(work, s.Client(), endTimeout); aerr != nil {
				return fmt.Errorf("end: %w; then abort: %v", err, aerr)
			}
		}
		s.AllowRebalance()
	}
	return nil
}

// abortInPlace retries, for at most bound, the abort franz-go documents
// after an End that failed.
func abortInPlace(ctx context.Context, cl *kgo.Client, bound time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	wait := 50 * time.Millisecond
	for {
		err := cl.AbortBufferedRecords(ctx)
		if err == nil {
			err = cl.EndTransaction(ctx, kgo.TryAbort)
		}
		if err == nil {
			return nil
		}
		if ke, ok := errors.AsType[*kerr.Error](err); ok && !ke.Retriable {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// floorLine is r's stall beside its floor, and the verdict on time; empty
// for a scenario without a floor.
func (r result) floorLine() string {
	if r.floor == nil {
		return ""
	}
	f := r.floor
	if f.arrivals == 0 {
		return "floor: the passthrough copied nothing (no verdict on time)"
	}
	verdict := "met"
	if r.stall.longest > f.longest+floorSlack {
		verdict = "NOT met"
	}
	return fmt.Sprintf("stall %.1fs, floor %.1fs (plain exactly-once passthrough, same fault; first copy %.1fs after the load began): stall <= floor + %v %s",
		r.stall.longest.Seconds(), f.longest.Seconds(), f.first.Seconds(), floorSlack, verdict)
}

// floorFirstWait bounds how long the faults wait for the floor's first
// copy.
const floorFirstWait = 60 * time.Second

// waitFirst waits until the floor's reader has seen a copy, or d passes.
func (f *floorRun) waitFirst(ctx context.Context, d time.Duration, logf func(string, ...any)) {
	start := time.Now()
	err := eventually(ctx, d, func() error {
		if f.meter.count() == 0 {
			return errors.New("no copy yet")
		}
		return nil
	})
	if err != nil {
		logf("floor: no copy within %v; the faults begin all the same", d)
		return
	}
	logf("floor: first copy visible after %v; the faults begin", time.Since(start).Round(time.Millisecond))
}
