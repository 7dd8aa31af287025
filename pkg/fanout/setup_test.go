package fanout

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

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

// TestClientsLookUpMovedLeadersPromptly: a produce or fetch that fails
// because its leader moved (a broker killed, stopped or paused) is
// retried after the next metadata update, and a client may ask for one
// only MetadataMinAge after the last. With franz-go's 5s every failed
// attempt cost up to 5s: under make test-cluster the processor's flushes
// took 5.0, 10.2 and 15.2s through one broker kill, in steps of 5s, where
// a client that looked again found the new leader. Every client of the
// processor asks again within a second; a user's KafkaOpts still decide.
func TestClientsLookUpMovedLeadersPromptly(t *testing.T) {
	for _, tc := range []struct {
		name string
		user []kgo.Opt
		want time.Duration
	}{
		{name: "default", want: metadataMinAge},
		{name: "the user's choice", user: []kgo.Opt{kgo.MetadataMinAge(3 * time.Second)}, want: 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &Config{Brokers: []string{"127.0.0.1:1"}, KafkaOpts: tc.user}
			cl, err := kgo.NewClient(clientOpts(cfg, &limits{}, "cohortgate-signals")...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			if got := cl.OptValue(kgo.MetadataMinAge); got != tc.want {
				t.Errorf("MetadataMinAge = %v; want %v", got, tc.want)
			}
		})
	}
	if metadataMinAge > time.Second {
		t.Errorf("metadataMinAge = %v; want at most 1s", metadataMinAge)
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

// TestConnectWaitsForConfigsOfNewTopics: on a cluster, a topic just created
// is not known to every broker at once, and one that does not know it yet
// answers DescribeConfigs with UNKNOWN_TOPIC_OR_PARTITION. The start read
// the topics' limits once and gave up on that answer, so a processor
// created its topics on a fresh cluster and exited (seen under make
// test-cluster-short). The broker here answers so the first three times.
func TestConnectWaitsForConfigsOfNewTopics(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var unknown atomic.Int32
	c.ControlKey(int16(kmsg.DescribeConfigs), func(r kmsg.Request) (kmsg.Response, error, bool) {
		if unknown.Add(1) > 3 {
			return nil, nil, false // the broker answers as usual from now on
		}
		c.KeepControl()
		req := r.(*kmsg.DescribeConfigsRequest)
		resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
		for _, rr := range req.Resources {
			res := kmsg.NewDescribeConfigsResponseResource()
			res.ResourceType, res.ResourceName = rr.ResourceType, rr.ResourceName
			res.ErrorCode = kerr.UnknownTopicOrPartition.Code
			resp.Resources = append(resp.Resources, res)
		}
		return resp, nil, true
	})
	cfg := Config{Brokers: c.ListenAddrs(), CreateTopics: true, Partitions: 2, ReplicationFactor: 1,
		Topics: topics.Defaults(), Logger: slog.New(slog.DiscardHandler)}
	cfg.EnsureDefaults()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var lim limits
	k, err := connect(ctx, &cfg, &lim)
	if err != nil {
		t.Fatalf("connect gave up while the broker did not know the new topics yet: %v", err)
	}
	k.close()
	if n := unknown.Load(); n < 4 {
		t.Errorf("DescribeConfigs asked %d times; want the 3 refused and one more", n)
	}
}
