package fanout

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/topics"
)

// TestBatchBytesBoundsKafka checks batchBytes against the v2 record
// encoding: a record alone in a batch takes the batch header (61 bytes)
// plus its own encoding, which batchBytes must never undercount.
func TestBatchBytesBoundsKafka(t *testing.T) {
	for _, r := range []*kgo.Record{
		{},
		{Key: []byte("42"), Value: []byte("v")},
		{Key: bytes.Repeat([]byte("k"), 300), Value: bytes.Repeat([]byte("v"), 70000),
			Headers: []kgo.RecordHeader{{Key: "a", Value: []byte("b")}, {Key: strings.Repeat("h", 200), Value: bytes.Repeat([]byte("x"), 200)}}},
	} {
		// Encoded exactly as Kafka does, with the widest deltas.
		n := 1 + 10 + 5 + varintLen(len(r.Key)) + len(r.Key) + varintLen(len(r.Value)) + len(r.Value) + varintLen(len(r.Headers))
		for _, h := range r.Headers {
			n += varintLen(len(h.Key)) + len(h.Key) + varintLen(len(h.Value)) + len(h.Value)
		}
		exact := 61 + varintLen(n) + n
		if got := batchBytes(r); got < exact {
			t.Errorf("batchBytes = %d, below the encoded %d bytes", got, exact)
		}
	}
}

// varintLen is the length of n as a zig-zag varint.
func varintLen(n int) int {
	u := uint64(n) << 1
	l := 1
	for u >= 0x80 {
		u >>= 7
		l++
	}
	return l
}

// TestDeadLetterRecord: a DLQ copy is whole when it fits; too large, it is
// a truncated copy that fits, names the original (size, SHA-256, reason)
// and keeps the head of the value, the key (cut) and the headers when
// they fit.
func TestDeadLetterRecord(t *testing.T) {
	orig := &kgo.Record{Topic: "in", Partition: 3, Offset: 17, Key: []byte("not-a-user"), Value: bytes.Repeat([]byte("v"), 10_000),
		Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("t-1")}}}
	cause := errors.New("bad key")
	whole := deadLetterRecord("dlq", 1<<20, orig, topics.ReasonKeyNotDecimal, cause)
	if !bytes.Equal(whole.Value, orig.Value) || headerValue(whole, topics.HeaderReason) != string(topics.ReasonKeyNotDecimal) ||
		headerValue(whole, "trace") != "t-1" || headerValue(whole, topics.HeaderSourceOffset) != "17" {
		t.Fatalf("whole copy: %d bytes of value, headers %v", len(whole.Value), whole.Headers)
	}
	sum := sha256.Sum256(orig.Value)
	for _, tc := range []struct {
		name       string
		budget     int
		reason     topics.Reason
		wantReason string // cohortgate.original.reason
		whole      bool
	}{
		{"larger than the budget", 4_000, topics.ReasonKeyNotDecimal, string(topics.ReasonKeyNotDecimal), false},
		{"too large to forward, fits the DLQ", 1 << 20, topics.ReasonRecordTooLarge, "", true},
		{"too large to forward and for the DLQ", 3_000, topics.ReasonRecordTooLarge, "", false},
		{"no room for any value", 600, topics.ReasonKeyNotDecimal, string(topics.ReasonKeyNotDecimal), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dl := deadLetterRecord("dlq", tc.budget, orig, tc.reason, cause)
			if got := batchBytes(dl); got > tc.budget && len(dl.Value) > 0 {
				t.Errorf("copy of %d bytes exceeds its budget %d", got, tc.budget)
			}
			for k, want := range map[string]string{
				topics.HeaderReason:          string(topics.ReasonRecordTooLarge),
				topics.HeaderOriginalReason:  tc.wantReason,
				topics.HeaderOriginalSize:    strconv.Itoa(len(orig.Key) + len(orig.Value) + len("trace") + len("t-1")),
				topics.HeaderOriginalSHA256:  hex.EncodeToString(sum[:]),
				topics.HeaderSourcePartition: "3",
				topics.HeaderSourceOffset:    "17",
				topics.HeaderError:           cause.Error(),
			} {
				if got := headerValue(dl, k); got != want {
					t.Errorf("header %s = %q, want %q", k, got, want)
				}
			}
			if !bytes.HasPrefix(orig.Value, dl.Value) || (len(dl.Value) == len(orig.Value)) != tc.whole {
				t.Errorf("value of %d bytes: a prefix %v, whole %v; want whole %v",
					len(dl.Value), bytes.HasPrefix(orig.Value, dl.Value), len(dl.Value) == len(orig.Value), tc.whole)
			}
			if headerValue(dl, "trace") != "t-1" {
				t.Errorf("the original's small header was dropped")
			}
		})
	}
	// Headers too large to keep are counted, and the key is cut.
	huge := &kgo.Record{Topic: "in", Key: bytes.Repeat([]byte("k"), 5000), Value: []byte("v"),
		Headers: []kgo.RecordHeader{{Key: "h", Value: bytes.Repeat([]byte("x"), 50_000)}}}
	dl := deadLetterRecord("dlq", 20_000, huge, topics.ReasonKeyNotDecimal, cause)
	if len(dl.Key) != topics.MaxTruncatedKey || headerValue(dl, topics.HeaderOriginalHeaders) != "1" || headerValue(dl, "h") != "" {
		t.Fatalf("key of %d bytes, original headers %q, h kept: %v", len(dl.Key), headerValue(dl, topics.HeaderOriginalHeaders), headerValue(dl, "h") != "")
	}
}

// TestLiveLimitsSince: since reads the limits again only when the last
// read began before the instant asked for; a failed read returns the
// limits last read with the error, and is not tried again sooner than
// limitsRetry.
func TestLiveLimitsSince(t *testing.T) {
	var clock int64 = 1000 // ns
	var reads int
	var fail error
	l := newLiveLimits(limits{byTopic: map[string]int{"t": 100}}, clock, func() int64 { return clock }, func(context.Context) (limits, error) {
		reads++
		if fail != nil {
			return limits{}, fail
		}
		return limits{byTopic: map[string]int{"t": 100 * (reads + 1)}}, nil
	})
	ctx := context.Background()
	if got, err := l.since(ctx, clock-1); err != nil || got.of("t") != 100 || reads != 0 {
		t.Fatalf("since an instant before the first read: limit %d, %v, %d reads; want 100 without a read", got.of("t"), err, reads)
	}
	clock += int64(time.Second)
	if got, err := l.fresh(ctx); err != nil || got.of("t") != 200 || reads != 1 || l.now().of("t") != 200 {
		t.Fatalf("fresh: limit %d, %v, %d reads; want 200 from a read", got.of("t"), err, reads)
	}
	if got, err := l.since(ctx, clock); err != nil || got.of("t") != 200 || reads != 1 {
		t.Fatalf("since the last read began: limit %d, %v, %d reads; want 200 without a read", got.of("t"), err, reads)
	}
	fail = errors.New("broker away")
	clock += int64(time.Second)
	if got, err := l.fresh(ctx); !errors.Is(err, fail) || got.of("t") != 200 || reads != 2 {
		t.Fatalf("a failed read: limit %d, %v, %d reads; want 200 and the error", got.of("t"), err, reads)
	}
	clock += int64(limitsRetry / 2)
	if _, err := l.fresh(ctx); err == nil || reads != 2 {
		t.Fatalf("right after a failure: %v, %d reads; want an error without a read", err, reads)
	}
	clock += int64(limitsRetry)
	fail = nil
	if got, err := l.fresh(ctx); err != nil || got.of("t") != 400 || reads != 3 {
		t.Fatalf("a retry after limitsRetry: limit %d, %v, %d reads; want 400 from a read", got.of("t"), err, reads)
	}
}
