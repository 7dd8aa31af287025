package client_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/cohortgate/cohortgate/pkg/fanout"
	"github.com/cohortgate/cohortgate/pkg/membership"
	"github.com/cohortgate/cohortgate/topics"
)

// partitions is the partition count of every topic the examples and tests
// run on.
const partitions = 6

// cohortgate starts what the examples and tests publish to: an embedded
// Kafka-protocol broker (franz-go's kfake) and a cohortgate processor on
// it, and returns once the processor owns every partition and has caught
// up, or after 60s with an error. stop ends both and removes the
// processor's store.
func cohortgate() (brokers []string, stop func(), err error) {
	set := topics.Defaults()
	// Seeded, not created by the processor: its consumer group then finds
	// the signals topic at once instead of at the next metadata refresh.
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions,
		string(set.Commands), string(set.Signals), string(set.Cohort), string(set.DLQ), string(set.Changelog)))
	if err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp("", "cohortgate-client-")
	if err != nil {
		cluster.Close()
		return nil, nil, err
	}
	store, err := membership.Open(dir, nil)
	if err != nil {
		cluster.Close()
		os.RemoveAll(dir)
		return nil, nil, err
	}
	proc, err := fanout.New(fanout.Config{
		Brokers:         cluster.ListenAddrs(),
		Topics:          set,
		CreateTopics:    true,
		Partitions:      partitions,
		ExactlyOnce:     true,
		TransactionalID: "client-test",
		Grace:           10 * time.Millisecond,
		CommitInterval:  20 * time.Millisecond,
	}, store)
	if err != nil {
		store.Close()
		cluster.Close()
		os.RemoveAll(dir)
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var runErr error
	go func() { runErr = proc.Run(ctx); close(done) }()
	stop = func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
		}
		store.Close()
		cluster.Close()
		os.RemoveAll(dir)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		ok, why := proc.Ready()
		if ok && len(proc.Partitions()) == partitions {
			return cluster.ListenAddrs(), stop, nil
		}
		select {
		case <-done:
			stop()
			return nil, nil, fmt.Errorf("processor stopped before it was ready: %v", runErr)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return nil, nil, errors.New("processor not ready after 60s: " + why)
		}
	}
}
