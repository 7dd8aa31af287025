package fanout

import (
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/topics"
)

// deadLetterRecord copies r to the DLQ topic: original key, value, headers
// and timestamp, plus headers saying why and where it came from. A copy
// larger than budget bytes (see batchBytes), and any copy for reason
// record_too_large, is a truncated copy (truncateDeadLetter): a poison
// record's DLQ copy must never be too large to produce.
func deadLetterRecord(dlq topics.Topic, budget int, r *kgo.Record, reason topics.Reason, err error) *kgo.Record {
	hs := make([]kgo.RecordHeader, 0, len(r.Headers)+5)
	hs = append(hs, r.Headers...)
	hs = append(hs,
		kgo.RecordHeader{Key: topics.HeaderReason, Value: []byte(reason)},
		kgo.RecordHeader{Key: topics.HeaderError, Value: []byte(errorText(err))},
		kgo.RecordHeader{Key: topics.HeaderSourceTopic, Value: []byte(r.Topic)},
		kgo.RecordHeader{Key: topics.HeaderSourcePartition, Value: strconv.AppendInt(nil, int64(r.Partition), 10)},
		kgo.RecordHeader{Key: topics.HeaderSourceOffset, Value: strconv.AppendInt(nil, r.Offset, 10)},
	)
	dl := &kgo.Record{
		Topic:     string(dlq),
		Key:       r.Key,
		Value:     r.Value,
		Headers:   hs,
		Timestamp: r.Timestamp,
	}
	switch {
	case reason == topics.ReasonRecordTooLarge:
		return truncateDeadLetter(dl, r, "", budget)
	case batchBytes(dl) > budget:
		return truncateDeadLetter(dl, r, reason, budget)
	}
	return dl
}

func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// republishRecord copies r, unchanged but for a header naming where it was
// found, to partition want of its own topic: the partition Kafka's default
// partitioner assigns its key, where its user's other records are.
func republishRecord(r *kgo.Record, want int32) *kgo.Record {
	hs := make([]kgo.RecordHeader, 0, len(r.Headers)+1)
	hs = append(hs, r.Headers...)
	hs = append(hs, kgo.RecordHeader{
		Key:   topics.HeaderMisroutedFrom,
		Value: strconv.AppendInt(append(strconv.AppendInt(nil, int64(r.Partition), 10), '/'), r.Offset, 10),
	})
	out := &kgo.Record{
		Topic:     r.Topic,
		Key:       r.Key,
		Value:     r.Value,
		Headers:   hs,
		Timestamp: r.Timestamp,
	}
	pin(out, want)
	return out
}

// headerValue returns the value of r's header key, or "".
func headerValue(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
