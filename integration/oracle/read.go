package oracle

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ends are, per partition, the offset up to which a topic is read.
type ends map[int32]int64

// openTransactions waits up to grace for every partition of the named
// topics to have no open transaction (last stable offset = high
// watermark). It returns the last stable offsets it saw last, per topic,
// and one line per partition still open when the grace ran out.
func openTransactions(ctx context.Context, adm *kadm.Client, grace time.Duration, names []string) (map[string]ends, []string, error) {
	deadline := time.Now().Add(grace)
	wait := 50 * time.Millisecond
	for {
		stable, err := adm.ListCommittedOffsets(ctx, names...)
		if err != nil {
			return nil, nil, fmt.Errorf("listing last stable offsets: %w", err)
		}
		hwm, err := adm.ListEndOffsets(ctx, names...)
		if err != nil {
			return nil, nil, fmt.Errorf("listing high watermarks: %w", err)
		}
		lso := make(map[string]ends, len(names))
		for _, n := range names {
			lso[n] = make(ends)
		}
		var open []string
		var listErr error
		hwm.Each(func(o kadm.ListedOffset) {
			s, ok := stable.Lookup(o.Topic, o.Partition)
			switch {
			case o.Err != nil:
				listErr = fmt.Errorf("%s partition %d: high watermark: %w", o.Topic, o.Partition, o.Err)
			case !ok || s.Err != nil:
				listErr = fmt.Errorf("%s partition %d: no last stable offset (%v)", o.Topic, o.Partition, s.Err)
			default:
				lso[o.Topic][o.Partition] = s.Offset
				if s.Offset < o.Offset {
					open = append(open, fmt.Sprintf("%s partition %d: last stable offset %d < high watermark %d",
						o.Topic, o.Partition, s.Offset, o.Offset))
				}
			}
		})
		for _, n := range names {
			if len(lso[n]) == 0 && listErr == nil {
				listErr = fmt.Errorf("topic %s: no partitions listed", n)
			}
		}
		if listErr == nil && (len(open) == 0 || time.Now().After(deadline)) {
			sort.Strings(open)
			return lso, open, nil
		}
		if listErr != nil && time.Now().After(deadline) {
			return nil, nil, listErr
		}
		if err := pause(ctx, wait); err != nil { // polling interval of a condition with a deadline
			return nil, nil, err
		}
		wait = min(wait*2, time.Second)
	}
}

// pause waits d, or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ReadTopic calls fn for every committed record of topic below upTo (per
// partition, the offset to read up to; a partition not in it is not read),
// in offset order per partition (partitions interleave). It reads with
// read_committed and keeps control records, so that a partition ending in
// a transaction marker is seen to end: the record at upTo-1 is always
// visible when upTo is a last stable offset (an aborted transaction's data
// lies before its marker, and an open one's at or after the LSO). Fetch
// errors the client retries (a leader moving, say) are waited out; data
// loss ends the read. opts are the client's options (seed brokers, TLS).
//
// Verify reads with it; so does integration/bench, counting its outputs.
func ReadTopic(ctx context.Context, opts []kgo.Opt, topic string, upTo map[int32]int64, fn func(*kgo.Record)) error {
	start := make(map[int32]kgo.Offset)
	for p, end := range upTo {
		if end > 0 {
			start[p] = kgo.NewOffset().AtStart()
		}
	}
	if len(start) == 0 {
		return nil
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), opts...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: start}),
	)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	done := make(map[int32]bool, len(start))
	for len(done) < len(start) {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("reading %s: %w (%d of %d partitions read to the end)", topic, err, len(done), len(start))
		}
		var fatal error
		fetches.EachError(func(t string, p int32, err error) {
			var loss *kgo.ErrDataLoss
			if errors.As(err, &loss) {
				fatal = fmt.Errorf("reading %s partition %d: %w", t, p, err)
			}
		})
		if fatal != nil {
			return fatal
		}
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			end := upTo[fp.Partition]
			for _, r := range fp.Records {
				if r.Offset >= end-1 {
					done[fp.Partition] = true
				}
				if r.Offset < end && !r.Attrs.IsControl() {
					fn(r)
				}
			}
		})
	}
	return nil
}
