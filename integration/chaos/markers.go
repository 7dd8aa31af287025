package main

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// onlyMarkers reports whether partition p of topic holds, from offset
// from up to its end, no record a read_committed consumer is given: only
// transaction markers and aborted records. A processor commits the offset
// after the last record it was given, so a partition that ends in a
// marker (a transaction that re-published a misrouted record there, say)
// keeps its committed offset below the end forever, decided all the same.
// It reads with the markers kept, and answers true only once it has seen
// the marker at end-1; an open transaction (the last stable offset below
// the end) keeps it from getting there, so that is no.
func onlyMarkers(ctx context.Context, brokers []string, topic string, p int32, from, end int64) (bool, error) {
	if from >= end {
		return true, nil
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().At(from)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		kgo.FetchMaxWait(200*time.Millisecond),
	)
	if err != nil {
		return false, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		data, last := false, int64(-1)
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= end {
				return
			}
			if !r.Attrs.IsControl() {
				data = true
			}
			last = max(last, r.Offset)
		})
		switch {
		case data:
			return false, nil
		case last == end-1:
			return true, nil
		}
	}
	return false, nil
}
