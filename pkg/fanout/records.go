package fanout

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"strconv"
	"time"

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

// truncateDeadLetter returns a DLQ copy of orig that fits budget bytes, with
// reason record_too_large: the original key (at most topics.MaxTruncatedKey
// bytes), the original headers if they take at most a quarter of the
// budget, the headers of dl (the full copy deadLetterRecord made) but for
// its reason, headers identifying the original (origReason is the reason
// it was dead-lettered for, "" for a valid record too large to forward),
// and as much of the value's head as fits. budget must leave room for the
// headers (a few KiB); whatever it is, the value is cut to nothing before
// anything else is dropped.
func truncateDeadLetter(dl, orig *kgo.Record, origReason topics.Reason, budget int) *kgo.Record {
	sum := sha256.Sum256(orig.Value)
	hs := []kgo.RecordHeader{
		{Key: topics.HeaderReason, Value: []byte(topics.ReasonRecordTooLarge)},
		{Key: topics.HeaderOriginalReason, Value: []byte(origReason)},
		{Key: topics.HeaderOriginalSize, Value: strconv.AppendInt(nil, userBytes(orig), 10)},
		{Key: topics.HeaderOriginalSHA256, Value: hex.AppendEncode(nil, sum[:])},
	}
	for _, h := range dl.Headers[len(orig.Headers):] {
		switch h.Key {
		case topics.HeaderReason:
		case topics.HeaderError:
			if len(h.Value) > 1024 {
				h.Value = h.Value[:1024]
			}
			hs = append(hs, h)
		default:
			hs = append(hs, h)
		}
	}
	out := &kgo.Record{Topic: dl.Topic, Key: orig.Key, Timestamp: dl.Timestamp}
	if len(out.Key) > topics.MaxTruncatedKey {
		out.Key = out.Key[:topics.MaxTruncatedKey]
	}
	origHeaders := 0
	for _, h := range orig.Headers {
		origHeaders += headerOverhead + len(h.Key) + len(h.Value)
	}
	if origHeaders <= budget/4 {
		out.Headers = append(append(make([]kgo.RecordHeader, 0, len(orig.Headers)+len(hs)), orig.Headers...), hs...)
	} else {
		out.Headers = append(hs, kgo.RecordHeader{Key: topics.HeaderOriginalHeaders, Value: strconv.AppendInt(nil, int64(len(orig.Headers)), 10)})
	}
	room := budget - batchBytes(out)
	out.Value = orig.Value[:max(0, min(room, len(orig.Value)))]
	return out
}

// refusedBudget is the largest DLQ copy made after a refusal, when the
// DLQ topic takes that much: large enough for headers and a head of value.
const refusedBudget = 64 << 10

// minimalDeadLetter is the DLQ copy of r after a copy was refused: at most
// refusedBudget bytes and at most budget (the DLQ topic's limit, see
// limits.deadLetterBudget), stamped now rather than with r's timestamp,
// which the DLQ topic may be the one refusing.
func minimalDeadLetter(dlq topics.Topic, budget int, r *kgo.Record, reason topics.Reason, err error) *kgo.Record {
	dl := deadLetterRecord(dlq, min(budget, refusedBudget), r, reason, err)
	dl.Timestamp = time.Now()
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

// republishCommand is republishRecord for a command: one without at_ns is
// re-published with its boundary, the original's record timestamp,
// written into at_ns. A copy's own timestamp is the original's only where
// the topic keeps the producer's: a topic with
// message.timestamp.type=LogAppendTime stamps each copy when the broker
// appends it, and two copies of one command (the outbox producing a copy
// again after a crash, or a migration's and rule C2's copies) would be two
// commands with two boundaries and two identities (rule C5): the second
// copy of a rejoin could close a leave that came after the first. With
// at_ns pinned, every copy has the original's identity, whatever its
// timestamp. Elsewhere the boundary is the same number either way. A value
// that is no command, or whose boundary rule C4 refuses, is copied
// unchanged, for its own partition to dead-letter.
func republishCommand(r *kgo.Record, want int32) *kgo.Record {
	out := republishRecord(r, want)
	cmd, err := topics.DecodeCommand(r.Key, r.Value)
	ms := r.Timestamp.UnixMilli()
	if err != nil || cmd.HasAt || ms < 0 || ms > math.MaxInt64/int64(time.Millisecond) {
		return out
	}
	cmd.HasAt, cmd.AtNs = true, uint64(ms)*uint64(time.Millisecond)
	out.Value = topics.AppendCommand(nil, cmd)
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
