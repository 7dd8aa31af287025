package client

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/topics"
)

// DefaultWait bounds [Client.WaitReceipt] and [Client.Status] when their
// context has no deadline of its own.
const DefaultWait = time.Minute

// RefusedError is a command the processor dead-lettered instead of
// applying: a rejoin before the open leave, a boundary too far ahead of
// its record timestamp, ... It unwraps to a *[topics.Error], so
// errors.Is(err, topics.ErrRejoinBeforeLeave) holds for such a refusal.
type RefusedError struct {
	Published Published
	// Reason and Detail are the DLQ record's cohortgate.reason and
	// cohortgate.error headers.
	Reason topics.Reason
	Detail string
}

func (e *RefusedError) Error() string {
	p := e.Published
	return fmt.Sprintf("client: the processor refused the %s of user %d (%s partition %d offset %d): %s: %s",
		p.Command.Op, p.Command.UserID, p.Topic, p.Partition, p.Offset, e.Reason, e.Detail)
}

func (e *RefusedError) Unwrap() error { return &topics.Error{Reason: e.Reason, Detail: e.Detail} }

// WaitReceipt waits until the processor has applied p and returns the
// changelog record that follows it: the user's state with the command
// (request_id, whether it changed anything or was a duplicate) and the
// receipt (when it took effect in the gate, from which signals offset).
// A command the processor dead-lettered returns a [*RefusedError].
//
// It reads the changelog and, where it may, the DLQ from p.Timestamp on,
// read_committed, and matches the changelog record by user, op and request_id, and the
// DLQ record by its source topic, partition and offset. For a command
// published elsewhere, fill p's Command (UserID, Op, RequestID), Topic,
// Partition, Offset and Timestamp as Kafka acknowledged them.
//
// It waits until ctx is done, or [DefaultWait] when ctx has no deadline,
// and then says what it did not find.
func (c *Client) WaitReceipt(ctx context.Context, p Published) (topics.MemberRecord, error) {
	what := fmt.Sprintf("%s of user %d (request_id %s)", p.Command.Op, p.Command.UserID, p.Command.RequestID)
	switch {
	case p.Command.RequestID == "":
		return topics.MemberRecord{}, fmt.Errorf("client: WaitReceipt of %s: no request_id to match", what)
	case p.Timestamp.IsZero():
		return topics.MemberRecord{}, fmt.Errorf("client: WaitReceipt of %s: no record timestamp to read from", what)
	}
	ctx, cancel := bounded(ctx)
	defer cancel()
	offsets := make(map[string]map[int32]kgo.Offset)
	for _, topic := range []topics.Topic{c.topics.Changelog, c.topics.DLQ} {
		from, err := c.readFrom(ctx, topic, p.Timestamp)
		switch {
		case topic == c.topics.DLQ && err != nil:
			// The DLQ only makes a refusal known sooner: without Read
			// on it (or with a DLQ of another name than Topics says), a
			// refusal is not seen, and the wait ends at the deadline.
			continue
		case err != nil:
			return topics.MemberRecord{}, fmt.Errorf("client: WaitReceipt of %s: %w", what, err)
		}
		offsets[string(topic)] = from
	}
	rd, err := c.reader(kgo.ConsumePartitions(offsets))
	if err != nil {
		return topics.MemberRecord{}, fmt.Errorf("client: WaitReceipt of %s: %w", what, err)
	}
	defer rd.Close()
	for {
		fetches := rd.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return topics.MemberRecord{}, fmt.Errorf("client: no receipt for the %s on %s yet (is the processor running?): %w",
				what, c.topics.Changelog, err)
		}
		if err := fetchErr(fetches); err != nil {
			return topics.MemberRecord{}, fmt.Errorf("client: WaitReceipt of %s: %w", what, err)
		}
		var found *topics.MemberRecord
		var refused *RefusedError
		fetches.EachRecord(func(r *kgo.Record) {
			if found != nil || refused != nil {
				return
			}
			switch topics.Topic(r.Topic) {
			case c.topics.Changelog:
				if rec, ok := follows(r, p.Command); ok {
					found = &rec
				}
			case c.topics.DLQ:
				refused = refusal(r, p)
			}
		})
		switch {
		case found != nil:
			return *found, nil
		case refused != nil:
			return topics.MemberRecord{}, refused
		}
	}
}

// readFrom returns, for each partition of topic, an offset at or below
// that of every record stamped at or after t, however the records' writes
// and transactions interleave with the two requests it makes.
//
// It lists the end offsets (high watermarks) first, at t0, and then the
// first offsets stamped at or after t, at t1 (both read_uncommitted, so
// records in open transactions count). A record stamped at or after t that
// was below the high watermark at t1 is at or after the second answer; one
// that was not is at or after the high watermark at t1, which is at or
// after the first answer. The minimum of the two is at or below both.
// (Listing by time under read_committed, or the end after the time,
// leaves a gap: a transaction that commits between the two requests.)
func (c *Client) readFrom(ctx context.Context, topic topics.Topic, t time.Time) (map[int32]kgo.Offset, error) {
	adm := kadm.NewClient(c.cl)
	ends, err := adm.ListEndOffsets(ctx, string(topic))
	if err != nil {
		return nil, fmt.Errorf("listing the end offsets of %s: %w", topic, err)
	}
	after, err := adm.ListOffsetsAfterMilli(ctx, t.UnixMilli(), string(topic))
	if err != nil {
		return nil, fmt.Errorf("listing the offsets of %s after %s: %w", topic, t.UTC().Format(time.RFC3339Nano), err)
	}
	from := make(map[int32]kgo.Offset)
	var errs []error
	ends.Each(func(e kadm.ListedOffset) {
		if e.Err != nil {
			errs = append(errs, fmt.Errorf("%s partition %d: %w", topic, e.Partition, e.Err))
			return
		}
		o := e.Offset
		if a, ok := after.Lookup(string(topic), e.Partition); ok && a.Err == nil && a.Offset < o {
			o = a.Offset
		}
		from[e.Partition] = kgo.NewOffset().At(o)
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(from) == 0 {
		return nil, fmt.Errorf("topic %s has no partitions (does it exist? the processor creates it at start)", topic)
	}
	return from, nil
}

// follows reports whether changelog record r follows cmd, and decodes it.
func follows(r *kgo.Record, cmd topics.Command) (topics.MemberRecord, bool) {
	if id, err := topics.ParseUserID(r.Key); err != nil || id != cmd.UserID {
		return topics.MemberRecord{}, false
	}
	rec, err := topics.DecodeMemberRecord(r.Value)
	if err != nil || rec.Command == nil {
		return topics.MemberRecord{}, false
	}
	ok := rec.UserID == cmd.UserID && rec.Command.Op == cmd.Op.String() && rec.Command.RequestID == cmd.RequestID
	return rec, ok
}

// refusal returns the refusal DLQ record r says of p, or nil when r is a
// copy of another record.
func refusal(r *kgo.Record, p Published) *RefusedError {
	h := make(map[string]string, len(r.Headers))
	for _, kv := range r.Headers {
		h[kv.Key] = string(kv.Value)
	}
	if h[topics.HeaderSourceTopic] != string(p.Topic) ||
		h[topics.HeaderSourcePartition] != strconv.FormatInt(int64(p.Partition), 10) ||
		h[topics.HeaderSourceOffset] != strconv.FormatInt(p.Offset, 10) {
		return nil
	}
	return &RefusedError{Published: p, Reason: topics.Reason(h[topics.HeaderReason]), Detail: h[topics.HeaderError]}
}

// bounded gives ctx DefaultWait as its deadline when it has none.
func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, DefaultWait)
}

// fetchErr returns the first error of fetches that is not the reader
// being stopped or an informational data-loss notice.
func fetchErr(fetches kgo.Fetches) error {
	var first error
	fetches.EachError(func(topic string, part int32, err error) {
		var loss *kgo.ErrDataLoss
		switch {
		case first != nil, errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
			errors.Is(err, kgo.ErrClientClosed), errors.As(err, &loss):
			return
		}
		first = fmt.Errorf("%s partition %d: %w", topic, part, err)
	})
	return first
}
