package fanout

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A read_committed read to a partition's end knows it is there when it
// gets a record (a control record among them) at the end's offset less
// one. Kafka ends every transaction with a marker, so the last offset
// below a stable end always holds one. A broker that restarted after a
// crash may abort a transaction left open then without writing its marker
// (the embedded broker does: it replays its log and drops what no marker
// ended); nothing past such a tail is fetched, and the read would wait
// until the partition's next record, forever on a partition nobody writes.
// abortedTail tells such a tail from records not fetched yet.

// abortedTail reports whether partition p of topic holds nothing a
// read_committed read delivers from offset from up to end but records of
// aborted transactions and markers, with nothing open below end (the last
// stable offset at or above it): a read that delivered everything below
// from has then read to end. It fetches [from, end) itself, as stored, and
// applies the broker's list of aborted transactions as a consumer does;
// false when a record a consumer would get lies there, or the answer does
// not say (a batch it cannot read, no progress).
func abortedTail(ctx context.Context, cl *kgo.Client, topic string, p int32, from, end int64) (bool, error) {
	if from >= end {
		return true, nil
	}
	adm := kadm.NewClient(cl)
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		return false, fmt.Errorf("looking up the leader of %s partition %d: %w", topic, p, err)
	}
	t, ok := md.Topics[topic]
	if !ok || t.Err != nil {
		return false, fmt.Errorf("looking up the leader of %s partition %d: %v", topic, p, t.Err)
	}
	pd, ok := t.Partitions[p]
	if !ok || pd.Err != nil || pd.Leader < 0 {
		return false, fmt.Errorf("no leader for %s partition %d: %v", topic, p, pd.Err)
	}
	aborting := make(map[int64]bool) // producers whose batches are of an aborted transaction
	for at := from; at < end; {
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID, req.MaxWaitMillis, req.MinBytes, req.MaxBytes = -1, 0, 1, 1<<20
		req.IsolationLevel = 1 // read_committed: the answer lists the aborted transactions
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = topic, t.ID
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch, rp.LogStartOffset = p, at, 1<<20, -1, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl.Broker(int(pd.Leader)))
		if err != nil {
			return false, fmt.Errorf("fetching %s partition %d at offset %d: %w", topic, p, at, err)
		}
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			return false, fmt.Errorf("fetching %s partition %d at offset %d: %w", topic, p, at, err)
		}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			return false, fmt.Errorf("fetching %s partition %d at offset %d: an answer of %d topics", topic, p, at, len(resp.Topics))
		}
		rpr := resp.Topics[0].Partitions[0]
		if err := kerr.ErrorForCode(rpr.ErrorCode); err != nil {
			return false, fmt.Errorf("fetching %s partition %d at offset %d: %w", topic, p, at, err)
		}
		if rpr.LastStableOffset < end {
			return false, nil // a transaction open below end: its marker will come
		}
		next, deliverable := scanTail(rpr.RecordBatches, rpr.AbortedTransactions, aborting, at, end)
		if deliverable || next <= at {
			return false, nil
		}
		at = next
	}
	return true, nil
}

// scanTail reads the record batches of a fetch answer from offset at up to
// end, with the aborted transactions the answer lists and the producers
// whose aborted transaction earlier answers began (aborting, updated). It
// returns the offset after the last batch it read whole, and whether a
// batch below end holds records a read_committed consumer delivers: data
// not of an aborted transaction. Markers are not such records: the
// caller's read has either delivered the records their transactions
// committed, or has not got as far (then it is not waiting at a tail).
func scanTail(b []byte, aborted []kmsg.FetchResponseTopicPartitionAbortedTransaction, aborting map[int64]bool, at, end int64) (next int64, deliverable bool) {
	aborted = slices.Clone(aborted)
	slices.SortFunc(aborted, func(x, y kmsg.FetchResponseTopicPartitionAbortedTransaction) int {
		return cmp.Compare(x.FirstOffset, y.FirstOffset)
	})
	next = at
	// A batch: first offset (8 bytes), length of the rest (4), leader
	// epoch (4), magic (1), then the rest of the header.
	const head, magicAt = 12, 16
	for len(b) >= head {
		length := int64(int32(binary.BigEndian.Uint32(b[8:12])))
		if head+length <= magicAt {
			return next, true // not a batch: assume the worst
		}
		if int64(len(b)) < head+length {
			break // the answer's last batch, cut at its size limit
		}
		raw := b[:head+length]
		b = b[head+length:]
		if raw[magicAt] != 2 {
			return next, true // an old format that says nothing of transactions: assume the worst
		}
		var rb kmsg.RecordBatch
		if err := rb.ReadFrom(raw); err != nil {
			return next, true
		}
		last := rb.FirstOffset + int64(rb.LastOffsetDelta)
		if last < at {
			continue // the batch holding at may begin below it
		}
		if rb.FirstOffset >= end {
			return max(next, rb.FirstOffset), false
		}
		for len(aborted) > 0 && aborted[0].FirstOffset <= last {
			aborting[aborted[0].ProducerID] = true
			aborted = aborted[1:]
		}
		const transactional, control = 0x10, 0x20
		switch {
		case rb.Attributes&control != 0:
			delete(aborting, rb.ProducerID) // its marker ends the producer's transaction
		case rb.Attributes&transactional != 0 && aborting[rb.ProducerID]:
			// of an aborted transaction: not delivered
		default:
			return next, true
		}
		next = last + 1
	}
	return next, false
}
