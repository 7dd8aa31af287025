package fanout

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/topics"
)

// Record sizes as a broker measures them against a topic's
// max.message.bytes: the record batch the record travels in. A record is
// sized as if alone in a batch, with the widest timestamp and offset deltas
// it could have inside a larger one, so that a record found to fit fits in
// any batch franz-go builds (which also refuses, before compressing, a
// record whose batch would exceed its ProducerBatchMaxBytes).
const (
	batchOverhead = 61 // v2 record batch header
	// recordOverhead is the widest fixed part of one v2 record: length
	// varint (5), attributes (1), timestamp delta varlong (10), offset
	// delta varint (5), key and value length varints (5 each), header
	// count varint (5).
	recordOverhead = 5 + 1 + 10 + 5 + 5 + 5 + 5
	// headerOverhead is the widest fixed part of one header: its key and
	// value length varints.
	headerOverhead = 5 + 5
)

// DefaultMaxMessageBytes is Kafka's default max.message.bytes (1 MiB plus
// the batch overhead), assumed for a topic whose setting cannot be read.
const DefaultMaxMessageBytes = 1048588

// maxDeadLetterBytes bounds a DLQ copy whatever the DLQ topic allows: it is
// kept in the store's outbox (JSON, so base64: 4/3 of it) until produced.
const maxDeadLetterBytes = 8 << 20

// batchBytes is the most bytes r can take in a record batch.
func batchBytes(r *kgo.Record) int {
	n := batchOverhead + recordOverhead + len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += headerOverhead + len(h.Key) + len(h.Value)
	}
	return n
}

// limits are the largest record batch each topic takes, from the topics'
// max.message.bytes, as read at one instant (see liveLimits); a signals
// session's producer is configured with the limits read when it was made,
// so that what the broker would take the client takes too.
type limits struct {
	byTopic map[string]int
}

// equal reports whether l and o give every topic the same limit.
func (l limits) equal(o limits) bool { return maps.Equal(l.byTopic, o.byTopic) }

// liveLimits are the topics' limits as last read: at start, then every
// interval (watch), and again whenever a record is refused or found too
// large (since), so that no record is trimmed or dead-lettered against a
// limit read before it was met. A limit changed while the processor runs
// replaces the signals session (emitter.followLimits): franz-go sizes a
// partition's batches once, when its producer first meets it. Safe for
// concurrent use.
type liveLimits struct {
	read func(context.Context) (limits, error)
	mono func() int64 // the processor's monotonic clock, ns (Config.Monotonic)
	cur  atomic.Pointer[limits]
	mu   struct {
		sync.Mutex // serialises reads
		// readAt is when (mono) the read that set cur began; failedAt,
		// when the last read that failed did, 0 if none since (a
		// failure is not retried sooner than limitsRetry).
		readAt, failedAt int64
	}
}

// limitsReadTimeout bounds one read of the limits; limitsRetry is how long
// a failed read holds off the next one.
const (
	limitsReadTimeout = 10 * time.Second
	limitsRetry       = time.Second
)

// newLiveLimits starts from first, read at readAt (mono), and reads again
// with read.
func newLiveLimits(first limits, readAt int64, mono func() int64, read func(context.Context) (limits, error)) *liveLimits {
	l := &liveLimits{read: read, mono: mono}
	l.cur.Store(&first)
	l.mu.readAt = readAt
	return l
}

// now returns the limits last read.
func (l *liveLimits) now() limits { return *l.cur.Load() }

// since returns limits read at t (mono) or later, reading them now if the
// last read began before t. On a failure it returns the error and the
// limits last read, which the caller must not settle a record against.
func (l *liveLimits) since(ctx context.Context, t int64) (limits, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.readAt >= t {
		return l.now(), nil
	}
	start := l.mono()
	if l.mu.failedAt != 0 && time.Duration(start-l.mu.failedAt) < limitsRetry {
		return l.now(), fmt.Errorf("the topics' max.message.bytes could not be read %v ago", time.Duration(start-l.mu.failedAt).Round(time.Millisecond))
	}
	rctx, cancel := context.WithTimeout(ctx, limitsReadTimeout)
	n, err := l.read(rctx)
	cancel()
	if err != nil {
		l.mu.failedAt = start
		return l.now(), err
	}
	l.cur.Store(&n)
	l.mu.readAt, l.mu.failedAt = start, 0
	return n, nil
}

// fresh returns limits read now.
func (l *liveLimits) fresh(ctx context.Context) (limits, error) { return l.since(ctx, l.mono()) }

// watch reads the limits every interval until ctx is done. A failed read
// is logged and tried again; a missing ACL ends it with the error.
func (l *liveLimits) watch(ctx context.Context, interval time.Duration, log interface{ Warn(string, ...any) }) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if _, err := l.fresh(ctx); err != nil && ctx.Err() == nil {
			if errors.Is(err, ErrNotAuthorized) {
				return err
			}
			log.Warn("unable to read the topics' max.message.bytes", "err", err)
		}
	}
}

// of returns topic's limit, DefaultMaxMessageBytes when it is not known.
func (l limits) of(topic string) int {
	if n, ok := l.byTopic[topic]; ok && n > 0 {
		return n
	}
	return DefaultMaxMessageBytes
}

// fits reports whether r fits its topic.
func (l limits) fits(r *kgo.Record) bool { return batchBytes(r) <= l.of(r.Topic) }

// deadLetterBudget is the largest DLQ copy the processor makes.
func (l limits) deadLetterBudget(dlq topics.Topic) int {
	return min(l.of(string(dlq)), maxDeadLetterBytes)
}

// userBytes is the bytes of r's key, value and headers.
func userBytes(r *kgo.Record) int64 {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return int64(n)
}
