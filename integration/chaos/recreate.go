package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/integration/oracle"
	"github.com/cohortgate/cohortgate/topics"
)

// recreate: the commands topic deleted and created again while the
// processors are stopped, then filled again past their checkpoints, and
// the processors started again the way docs/operations.md and the
// processor's error tell an operator to (pkg/fanout, CommandsRecreatedError: "stop
// every processor and start each one with an empty data directory").
//
// The load runs with a and b (a kill -9 at a third of it) and is decided
// to its end. Both stop. The harness reads the commands topic (read
// committed) and deletes it, creates it again with the same partitions
// and configs, and fills it: first with the records that counted (every
// committed record but the processors' own re-published copies, which the
// next processors write again), so that the users who left are still
// left; then with leaves of fresh users, in each partition until it ends
// past where the old one ended, most of them below the old checkpoint.
// a, started again over its data dir, must refuse to run
// (CommandsRecreatedError: its state reflects commands that are gone),
// not resume at its old checkpoint and skip those leaves. Then every
// instance's data dir is emptied and a and b start again: they rebuild
// the state from the new topic, from offset 0. Last, a signal of each
// fresh user who left, marked gated, and one of as many fresh users who
// did not: the first must be dropped, the second forwarded.
func (r *scenarioRun) recreate(ctx context.Context) error {
	if err := r.waitProduced(ctx, 1.0/3); err != nil {
		return err
	}
	if err := r.killOne(ctx, "while the load is produced"); err != nil {
		return err
	}
	if err := r.settleOrRecover(ctx, "after the kill -9"); err != nil {
		return err
	}
	select {
	case <-r.produceD:
	case <-ctx.Done():
		return ctx.Err()
	}
	// The result stays for execute; a load that failed ends the scenario
	// here rather than in a wait for signals that never came.
	load := <-r.produceC
	r.produceC <- load
	if load.err != nil {
		return fmt.Errorf("producing the load: %w", load.err)
	}
	if err := r.waitDecided(ctx); err != nil {
		return err
	}
	for _, in := range r.insts {
		if in.running() {
			r.logf("stop %s", in.name)
			if err := in.term(60 * time.Second); err != nil {
				r.finding("%v", err)
			}
		}
	}

	commands := string(r.set.Commands)
	oldEnds, err := r.endOffsets(ctx, commands)
	if err != nil {
		return err
	}
	kept, copies, err := r.readCommitted(ctx, commands, oldEnds)
	if err != nil {
		return fmt.Errorf("reading the commands topic before deleting it: %w", err)
	}
	r.logf("commands topic %s: %d committed records to copy, %d re-published copies left out; ends %v", commands, len(kept), copies, oldEnds)
	id, err := r.recreateTopic(ctx, r.set.Commands)
	if err != nil {
		return err
	}
	r.logf("%s created again: topic ID %v", commands, id)
	refill, err := r.refill(ctx, kept, oldEnds)
	if err != nil {
		return err
	}

	a := r.insts[0]
	if err := r.startRefused(ctx, a); err != nil {
		r.finding("%v", err)
	}
	r.logf("the way out: every processor started with an empty data directory")
	for _, in := range r.insts[:r.sc.instances] {
		if err := in.empty(); err != nil {
			return err
		}
		if err := in.start(); err != nil {
			return err
		}
	}
	if err := r.settleOrRecover(ctx, "after starting every processor with an empty data directory"); err != nil {
		return err
	}
	return r.recreatedSignals(ctx, refill)
}

// refillPast is how many leaves each partition of the new commands topic
// gets past the end of the old one.
const refillPast = 3

// freshUsers is the first user id of the fresh users recreate makes
// leave: above any the load uses.
const freshUsers = uint64(1) << 40

// refill writes kept to the new commands topic, each record to its
// partition in its order, then leaves of fresh users, each in its key's
// partition, until every partition ends refillPast past oldEnds. It
// returns the fresh users who left.
func (r *scenarioRun) refill(ctx context.Context, kept []*kgo.Record, oldEnds map[int32]int64) ([]uint64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.h.brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerBatchMaxBytes(1<<20))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	if len(kept) > 0 {
		if err := cl.ProduceSync(ctx, kept...).FirstErr(); err != nil {
			return nil, fmt.Errorf("copying the commands that counted to the new topic: %w", err)
		}
	}
	ends, err := r.endOffsets(ctx, string(r.set.Commands))
	if err != nil {
		return nil, err
	}
	n := int32(len(oldEnds))
	var leaves []*kgo.Record
	var users []uint64
	now := time.Now()
	u := freshUsers
	for p := range n {
		want := oldEnds[p] + refillPast - ends[p]
		for k := int64(0); k < want; u++ {
			if u > freshUsers+1<<20 {
				return nil, fmt.Errorf("no fresh user found for partition %d", p)
			}
			key := topics.AppendUserID(nil, u)
			if murmurPartition(key, n) != p {
				continue
			}
			c := topics.Command{Op: topics.Leave, UserID: u, AtNs: uint64(now.UnixNano()), HasAt: true, RequestID: "chaos-refill"}
			leaves = append(leaves, &kgo.Record{Topic: string(r.set.Commands), Partition: p, Key: key,
				Value: topics.AppendCommand(nil, c), Timestamp: now})
			users = append(users, u)
			k++
		}
	}
	if err := cl.ProduceSync(ctx, leaves...).FirstErr(); err != nil {
		return nil, fmt.Errorf("producing the refill's leaves: %w", err)
	}
	newEnds, err := r.endOffsets(ctx, string(r.set.Commands))
	if err != nil {
		return nil, err
	}
	r.logf("new commands topic: %d records copied, then %d leaves of fresh users; ends %v (the old one ended at %v)",
		len(kept), len(leaves), newEnds, oldEnds)
	return users, nil
}

// startRefused starts in over its data dir, built from the commands topic
// that is gone, and checks that it refuses to run, saying the way out.
func (r *scenarioRun) startRefused(ctx context.Context, in *instance) error {
	r.logf("start %s over its data dir: it must refuse (the commands topic was created again)", in.name)
	in.expectNextExit()
	if err := in.start(); err != nil {
		return err
	}
	err := eventually(ctx, 60*time.Second, func() error {
		if in.running() {
			return fmt.Errorf("%s still running", in.name)
		}
		return nil
	})
	if err != nil {
		_ = in.term(30 * time.Second)
		return fmt.Errorf("%s, started over its data dir after the commands topic was deleted and created again, did not refuse to run "+
			"(CommandsRecreatedError) within 60s: it may resume at its old checkpoint and skip the leaves below it", in.name)
	}
	tail := in.tail(20)
	if code := in.exitCode(); code == 0 || !strings.Contains(tail, "deleted and created again") || !strings.Contains(tail, "empty data directory") {
		return fmt.Errorf("%s, started over its data dir after the commands topic was created again, exited with status %d "+
			"without saying that the topic was deleted and created again and that the way out is an empty data directory; last lines:\n%s",
			in.name, code, indent(tail))
	}
	r.logf("%s refused, exit status %d", in.name, in.exitCode())
	return nil
}

// recreatedSignals produces, to every input, a signal of each fresh user
// who left (stamped after the leave was acknowledged: marked gated) and
// one of as many fresh users who did not.
func (r *scenarioRun) recreatedSignals(ctx context.Context, left []uint64) error {
	now := time.Now()
	var recs []*kgo.Record
	add := func(u uint64, i int, gated bool) {
		var hs []kgo.RecordHeader
		if gated {
			hs = []kgo.RecordHeader{{Key: oracle.HeaderExpect, Value: []byte(oracle.ExpectGated)}}
		}
		for _, in := range r.set.Inputs() {
			recs = append(recs, &kgo.Record{Topic: string(in), Key: topics.AppendUserID(nil, u),
				Value: []byte("chaos-recreate-" + strconv.Itoa(i)), Timestamp: now, Headers: hs})
		}
	}
	for i, u := range left {
		add(u, i, true)
	}
	for i := range left {
		add(freshUsers+1<<30+uint64(i), len(left)+i, false)
	}
	if err := r.h.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("producing signals of the fresh users: %w", err)
	}
	r.extraSignals.Add(int64(2 * len(left)))
	r.logf("a signal of each of the %d fresh users who left (gated) and of %d who did not", len(left), len(left))
	return nil
}

// endOffsets returns the end (high watermark) of each partition of topic.
func (r *scenarioRun) endOffsets(ctx context.Context, topic string) (map[int32]int64, error) {
	listed, err := r.h.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	ends := make(map[int32]int64)
	var errs []error
	listed.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			errs = append(errs, fmt.Errorf("%s partition %d: %w", o.Topic, o.Partition, o.Err))
			return
		}
		ends[o.Partition] = o.Offset
	})
	return ends, errors.Join(errs...)
}

// readCommitted reads topic read_committed up to ends and returns its
// records as new records for the same partitions (key, value, timestamp,
// headers), leaving out the processors' re-published copies, whose number
// it returns too.
func (r *scenarioRun) readCommitted(ctx context.Context, topic string, ends map[int32]int64) ([]*kgo.Record, int, error) {
	start := make(map[int32]kgo.Offset)
	for p, end := range ends {
		if end > 0 {
			start[p] = kgo.NewOffset().AtStart()
		}
	}
	if len(start) == 0 {
		return nil, 0, nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.h.brokers...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: start}))
	if err != nil {
		return nil, 0, err
	}
	defer cl.Close()
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var out []*kgo.Record
	copies := 0
	done := make(map[int32]bool)
	for len(done) < len(start) {
		fs := cl.PollFetches(rctx)
		if err := rctx.Err(); err != nil {
			return nil, 0, fmt.Errorf("%d of %d partitions read to their end: %w", len(done), len(start), err)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			ferr = errors.Join(ferr, fmt.Errorf("%s partition %d: %w", t, p, err))
		})
		if ferr != nil {
			return nil, 0, ferr
		}
		fs.EachRecord(func(rec *kgo.Record) {
			if rec.Offset+1 >= ends[rec.Partition] {
				done[rec.Partition] = true
			}
			if rec.Offset >= ends[rec.Partition] || rec.Attrs.IsControl() {
				return
			}
			for _, h := range rec.Headers {
				if h.Key == topics.HeaderMisroutedFrom {
					copies++
					return
				}
			}
			out = append(out, &kgo.Record{Topic: topic, Partition: rec.Partition, Key: rec.Key, Value: rec.Value,
				Timestamp: rec.Timestamp, Headers: rec.Headers})
		})
	}
	return out, copies, nil
}

// recreateTopic deletes topic and creates it again with the partitions,
// replication and configs it was created with, and returns its new ID.
func (r *scenarioRun) recreateTopic(ctx context.Context, topic topics.Topic) (kadm.TopicID, error) {
	name := string(topic)
	r.logf("delete %s and create it again", name)
	resp, err := r.h.adm.DeleteTopics(ctx, name)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return kadm.TopicID{}, fmt.Errorf("deleting %s: %w", name, err)
	}
	configs := make(map[string]*string)
	for _, s := range r.set.Specs() {
		if s.Topic == topic {
			for k, v := range s.Configs {
				configs[k] = &v
			}
		}
	}
	// A broker refuses the creation while the deletion is under way.
	var id kadm.TopicID
	err = eventually(ctx, 60*time.Second, func() error {
		resp, err := r.h.adm.CreateTopic(ctx, int32(r.h.o.partitions), r.h.replication(), configs, name)
		if err == nil {
			err = resp.Err
		}
		id = resp.ID
		return err
	})
	if err != nil {
		return id, fmt.Errorf("creating %s again: %w", name, err)
	}
	// The client answers a listing from its metadata cache for a while.
	return id, eventually(ctx, 60*time.Second, func() error {
		td, err := r.h.adm.ListTopics(ctx, name)
		if err != nil {
			return err
		}
		if d, ok := td[name]; !ok || d.Err != nil || d.ID != id || len(d.Partitions) != r.h.o.partitions {
			return fmt.Errorf("%s: not listed as topic ID %v with %d partitions yet", name, id, r.h.o.partitions)
		}
		return nil
	})
}

// murmurPartition is the partition Kafka's default partitioner (murmur2)
// gives key among n.
func murmurPartition(key []byte, n int32) int32 {
	return int32(kgo.StickyKeyPartitioner(nil).ForTopic("").Partition(&kgo.Record{Key: key}, int(n)))
}
