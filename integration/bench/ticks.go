package main

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/integration/workload"
	"github.com/cohortgate/cohortgate/topics"
)

// tickValue is the value of an end-of-input tick: not a signal of the
// workload (workload.ParseSignalID refuses it), so no count includes it.
const tickValue = "bench-end-of-input-tick"

// writeTicks writes one record to every partition of the signals topic,
// stamped with the wall clock once the grace of the Kafka Streams variant
// (and a second) has passed since the load was written: an end-of-input
// tick.
//
// Why: Joined.withGracePeriod holds each signal until its partition's
// stream time (the largest signal timestamp seen) passes the signal's
// timestamp plus the grace. On a pre-loaded topic nothing comes after the
// last signals, so without the tick the last grace's worth of each
// partition would stay buffered and never reach the output. A live topic
// keeps moving and needs no tick. Every run reads the ticks alike; each is
// keyed by a user above the workload's (users+1, ...), chosen so that
// murmur2 puts it in its partition, and the processor forwards it as the
// signal of a user who never left.
func (h *harness) writeTicks(ctx context.Context, topic string, users uint64) error {
	if err := workload.Sleep(ctx, h.o.streamsGrace+time.Second); err != nil {
		return err
	}
	keys := keysByPartition(h.o.partitions, users+1)
	now := time.Now()
	recs := make([]*kgo.Record, 0, len(keys))
	for p, key := range keys {
		recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(p), Key: key, Value: []byte(tickValue), Timestamp: now})
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.o.brokers...), kgo.ClientID("cohortgate-bench-ticks"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("writing the end-of-input ticks: %w", err)
	}
	return nil
}

// keysByPartition returns, for each of n partitions, the key of the first
// user id from `from` on that murmur2 (Kafka's default partitioner, which
// the processor checks every record against) puts in that partition.
func keysByPartition(n int, from uint64) [][]byte {
	keys := make([][]byte, n)
	part := kgo.StickyKeyPartitioner(nil).ForTopic("")
	for u, found := from, 0; found < n; u++ {
		key := topics.AppendUserID(nil, u)
		p := part.Partition(&kgo.Record{Key: key}, n)
		if keys[p] == nil {
			keys[p], found = key, found+1
		}
	}
	return keys
}
