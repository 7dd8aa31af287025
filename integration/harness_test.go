package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/integration/workload"
	"github.com/cohortgate/cohortgate/pkg/fanout"
	"github.com/cohortgate/cohortgate/pkg/membership"
	"github.com/cohortgate/cohortgate/topics"
)

// env is one test's private slice of the broker: its own topics and group,
// so tests run side by side and again on a long-lived broker.
type env struct {
	t     testing.TB
	set   topics.Set
	group string
	parts int32
	cl    *kgo.Client // produces test input, reads output
	adm   *kadm.Client
}

// newEnv creates the test's topics (inputs with parts partitions) and
// deletes them when the test ends.
func newEnv(t testing.TB, parts int32) *env {
	t.Helper()
	e := bareEnv(t, parts)
	e.createTopics(parts, parts)
	return e
}

// bareEnv is newEnv without creating the topics.
func bareEnv(t testing.TB, parts int32) *env {
	t.Helper()
	id := randomID()
	e := &env{
		t:     t,
		set:   workload.Topics("it-" + id),
		group: "it-" + id,
		parts: parts,
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker.addrs...), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	e.cl, e.adm = cl, kadm.NewClient(cl)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = e.adm.DeleteTopics(ctx, e.names()...)
		_, _ = e.adm.DeleteGroup(ctx, e.group)
		cl.Close()
	})
	return e
}

func (e *env) names() []string {
	var names []string
	for _, s := range e.set.Specs() {
		names = append(names, string(s.Topic))
	}
	return names
}

// createTopics creates the topics with the given input partition counts.
func (e *env) createTopics(commandParts, signalParts int32) {
	e.t.Helper()
	ctx := e.ctx(30 * time.Second)
	for _, s := range e.set.Specs() {
		n := e.parts
		switch {
		case s.Topic == e.set.Commands:
			n = commandParts
		case s.SamePartitionsAsSignals: // every route's input
			n = signalParts
		}
		configs := make(map[string]*string)
		for k, v := range s.Configs {
			configs[k] = kadm.StringPtr(v)
		}
		if _, err := e.adm.CreateTopic(ctx, n, 1, configs, string(s.Topic)); err != nil {
			e.t.Fatalf("create %s: %v", s.Topic, err)
		}
	}
	eventually(e.t, 30*time.Second, func() error {
		td, err := e.adm.ListTopics(ctx, e.names()...)
		if err != nil {
			return err
		}
		for _, n := range e.names() {
			if d, ok := td[n]; !ok || d.Err != nil || len(d.Partitions) == 0 {
				return fmt.Errorf("topic %s not visible yet", n)
			}
		}
		return nil
	})
}

func (e *env) ctx(d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	e.t.Cleanup(cancel)
	return ctx
}

// config is the processor configuration tests start from: this env's
// topics and group, exactly once, and a short grace so tests run quickly.
func (e *env) config() fanout.Config {
	return fanout.Config{
		Brokers:           broker.addrs,
		Group:             e.group,
		Topics:            e.set,
		CreateTopics:      true,
		Partitions:        e.parts,
		ReplicationFactor: 1,
		ExactlyOnce:       true,
		TransactionalID:   "it-" + randomID(),
		Grace:             50 * time.Millisecond,
		CommitInterval:    50 * time.Millisecond,
	}
}

// proc is a processor running in the test, over a store in dir.
type proc struct {
	*fanout.Processor
	reg    *prometheus.Registry
	store  *membership.Store
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// start runs a processor over the store in dir; it stops when the test
// ends, if not before.
func (e *env) start(dir string, cfg fanout.Config) *proc {
	e.t.Helper()
	store, err := membership.Open(dir, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.startOn(store, cfg)
}

// startOn is start over an open store, which the processor's stop closes.
func (e *env) startOn(store *membership.Store, cfg fanout.Config) *proc {
	e.t.Helper()
	return e.startThrough(store, store, cfg)
}

// startThrough is startOn with the processor reaching store through
// through, a wrapper of the test's.
func (e *env) startThrough(through fanout.Store, store *membership.Store, cfg fanout.Config) *proc {
	e.t.Helper()
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	if testing.Verbose() {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	if os.Getenv("COHORTGATE_KGO_DEBUG") == "1" {
		cfg.KafkaOpts = append(cfg.KafkaOpts, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelDebug, nil)))
	}
	p, err := fanout.New(cfg, through)
	if err != nil {
		store.Close()
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	pr := &proc{Processor: p, reg: reg, store: store, cancel: cancel, done: make(chan error, 1)}
	go func() { pr.done <- p.Run(ctx) }()
	e.t.Cleanup(func() { pr.stop(e.t) })
	return pr
}

// stop cancels the processor, waits (bounded) for Run to return, and
// closes its store. It returns Run's error.
func (pr *proc) stop(t testing.TB) error {
	pr.once.Do(func() {
		pr.cancel()
		select {
		case pr.err = <-pr.done:
		case <-time.After(60 * time.Second):
			t.Errorf("processor did not stop within 60s")
		}
		pr.store.Close()
	})
	return pr.err
}

// waitReady waits until the processor owns every partition and each has
// caught up with its commands.
func (pr *proc) waitReady(t testing.TB, parts int) {
	t.Helper()
	eventually(t, 60*time.Second, func() error {
		if ok, why := pr.Ready(); !ok {
			return errors.New(why)
		}
		if n := len(pr.Partitions()); n != parts {
			return fmt.Errorf("owns %d of %d partitions", n, parts)
		}
		return nil
	})
}

// signal produces one signal and waits for its acknowledgement.
func (e *env) signal(user uint64, ts time.Time, value string, headers ...kgo.RecordHeader) *kgo.Record {
	e.t.Helper()
	r := &kgo.Record{
		Topic:     string(e.set.Signals),
		Key:       topics.AppendUserID(nil, user),
		Value:     []byte(value),
		Headers:   headers,
		Timestamp: ts,
	}
	e.produce(r)
	return r
}

// command produces a command with an explicit boundary.
func (e *env) command(op topics.Op, user uint64, at time.Time) *kgo.Record {
	e.t.Helper()
	c := topics.Command{Op: op, UserID: user, AtNs: uint64(at.UnixNano()), HasAt: true, RequestID: randomID()}
	r := &kgo.Record{Topic: string(e.set.Commands), Key: topics.AppendUserID(nil, user), Value: topics.AppendCommand(nil, c)}
	e.produce(r)
	return r
}

func (e *env) produce(rs ...*kgo.Record) {
	e.t.Helper()
	if err := e.cl.ProduceSync(e.ctx(30*time.Second), rs...).FirstErr(); err != nil {
		e.t.Fatalf("produce: %v", err)
	}
}

// waitDecided waits until the group's committed offsets pass the last
// record of every partition of every route's input: every signal produced
// so far has been decided, and (exactly once) what it became is committed.
//
// The committed offset of a partition is one past its last record, which
// is below the log end when the partition ends with a transaction marker
// (the processor re-publishes misrouted signals in transactions), so the
// last record is looked up when the log end is not reached.
func (e *env) waitDecided() {
	e.t.Helper()
	e.waitDecidedBy(e.group)
}

// waitDecidedBy is waitDecided for another consumer group.
func (e *env) waitDecidedBy(group string) {
	e.t.Helper()
	for _, in := range e.set.Inputs() {
		e.waitDecidedOf(group, in)
	}
}

// waitDecidedOf is waitDecidedBy for one input.
func (e *env) waitDecidedOf(group string, input topics.Topic) {
	e.t.Helper()
	eventually(e.t, 90*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ends, err := e.adm.ListEndOffsets(ctx, string(input))
		if err != nil {
			return err
		}
		committed, err := e.adm.FetchOffsets(ctx, group)
		if err != nil {
			return err
		}
		var behind []int32
		ends.Each(func(o kadm.ListedOffset) {
			if c, ok := committed.Lookup(o.Topic, o.Partition); o.Offset > 0 && (!ok || c.At < o.Offset) {
				behind = append(behind, o.Partition)
			}
		})
		if len(behind) == 0 {
			return nil
		}
		last := make(map[int32]int64)
		for _, r := range e.readAll(input) {
			last[r.Partition] = max(last[r.Partition], r.Offset)
		}
		for _, p := range behind {
			c, ok := committed.Lookup(string(input), p)
			if l, any := last[p]; any && (!ok || c.At <= l) {
				return fmt.Errorf("%s partition %d: committed %d, last record at %d", input, p, c.At, l)
			}
		}
		return nil
	})
}

// readAll returns every committed record of topic, in partition then
// offset order.
func (e *env) readAll(topic topics.Topic) []*kgo.Record {
	e.t.Helper()
	ctx := e.ctx(60 * time.Second)
	ends := stableEnds(e.t, ctx, e.adm, topic)
	return readCommitted(e.t, ctx, topic, ends, func(opts ...kgo.Opt) (*kgo.Client, error) {
		return kgo.NewClient(append(opts, kgo.SeedBrokers(broker.addrs...))...)
	})
}

// stableEnds waits until no transaction is open on topic (last stable
// offset = high watermark on every partition) and returns those offsets.
// Kafka writes a transaction's markers to each partition in turn: the
// group's offsets can show a commit before the output partition's marker
// is written.
func stableEnds(t testing.TB, ctx context.Context, adm *kadm.Client, topic topics.Topic) kadm.ListedOffsets {
	t.Helper()
	var ends kadm.ListedOffsets
	eventually(t, 60*time.Second, func() error {
		stable, err := adm.ListCommittedOffsets(ctx, string(topic))
		if err != nil {
			return err
		}
		hwm, err := adm.ListEndOffsets(ctx, string(topic))
		if err != nil {
			return err
		}
		var open error
		hwm.Each(func(o kadm.ListedOffset) {
			if s, _ := stable.Lookup(o.Topic, o.Partition); s.Offset != o.Offset {
				open = fmt.Errorf("%s partition %d: last stable offset %d, high watermark %d", topic, o.Partition, s.Offset, o.Offset)
			}
		})
		ends = stable
		return open
	})
	return ends
}

// readCommitted reads topic read_committed from the start up to ends with
// a client newClient makes, and returns its data records in partition then
// offset order.
func readCommitted(t testing.TB, ctx context.Context, topic topics.Topic, ends kadm.ListedOffsets, newClient func(...kgo.Opt) (*kgo.Client, error)) []*kgo.Record {
	t.Helper()
	want := make(map[int32]kgo.Offset)
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = kgo.NewOffset().AtStart()
		}
	})
	if len(want) == 0 {
		return nil
	}
	// Control records are kept so that a partition ending in a
	// transaction marker shows that the reader reached its end.
	cl, err := newClient(kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{string(topic): want}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	byPart := make(map[int32][]*kgo.Record)
	done := make(map[int32]bool)
	for len(done) < len(want) {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("reading %s: %v (have %d of %d partitions)", topic, err, len(done), len(want))
		}
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			end, _ := ends.Lookup(string(topic), p.Partition)
			for _, r := range p.Records {
				if r.Offset >= end.Offset-1 {
					done[p.Partition] = true
				}
				if r.Offset < end.Offset && !r.Attrs.IsControl() {
					byPart[p.Partition] = append(byPart[p.Partition], r)
				}
			}
		})
	}
	var out []*kgo.Record
	for p := int32(0); len(byPart) > 0; p++ {
		out = append(out, byPart[p]...)
		delete(byPart, p)
	}
	return out
}

// eventually retries cond until it returns nil or the deadline passes.
func eventually(t testing.TB, d time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	wait := 5 * time.Millisecond
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v: %v", d, err)
		}
		time.Sleep(wait) // polling interval of a condition with a deadline, not a synchronization
		wait = min(wait*2, 200*time.Millisecond)
	}
}

func randomID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
