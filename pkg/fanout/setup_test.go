package fanout

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/topics"
)

// TestProducerDurability: every client the processor makes waits for all
// in-sync replicas and writes idempotently, what a replicated cluster
// with min.insync.replicas needs for no acknowledged record to be lost or
// doubled; the transactional session adds its ID on top.
func TestProducerDurability(t *testing.T) {
	cfg := &Config{Brokers: []string{"127.0.0.1:1"}, TransactionalID: "cohortgate-a"}
	for _, tc := range []struct {
		name string
		opts []kgo.Opt
	}{
		{"at least once", clientOpts(cfg, &limits{}, "cohortgate-signals")},
		{"exactly once", append(clientOpts(cfg, &limits{}, "cohortgate-signals"), kgo.TransactionalID(cfg.TransactionalID))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, err := kgo.NewClient(tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			if acks := cl.OptValue(kgo.RequiredAcks); acks != kgo.AllISRAcks() {
				t.Errorf("RequiredAcks = %v; want all in-sync replicas", acks)
			}
			if off := cl.OptValue(kgo.DisableIdempotentWrite); off != false {
				t.Errorf("DisableIdempotentWrite = %v; want idempotent writes", off)
			}
		})
	}
}

// TestEnsureTopicsSeesWhatItCreated: a start on a cluster without the
// topics creates them and goes on as soon as the broker shows them. It
// used to wait for them through kadm's ListTopics, which answers from the
// client's metadata cache, and the cache still held the absence seen
// before the creation, for kgo.MetadataMinAge: 5s of every such start
// (5 of the 7 s to ready at 10M members). Here the cache keeps entries for an hour, so a wait that
// reads it never ends, and the context's deadline fails the test.
func TestEnsureTopicsSeesWhatItCreated(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.MetadataMinAge(time.Hour), kgo.MetadataMaxAge(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cfg := Config{CreateTopics: true, Partitions: 3, ReplicationFactor: 1, Topics: topics.Defaults()}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	details, err := ensureTopics(ctx, cl, cfg, discard{})
	if err != nil {
		t.Fatalf("ensureTopics: %v", err)
	}
	for _, s := range cfg.Topics.Specs() {
		if n := len(details[string(s.Topic)].Partitions); n != 3 {
			t.Errorf("%s: %d partitions; want 3", s.Topic, n)
		}
	}
}

// discard is a logger that drops everything.
type discard struct{}

func (discard) Info(string, ...any) {}
