package client

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
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
// It reads the changelog and the DLQ from p.Timestamp on, read_committed,
// and matches the changelog record by user, op and request_id, and the
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
	from := kgo.NewOffset().AfterMilli(p.Timestamp.UnixMilli())
	rd, err := c.reader(kgo.ConsumeTopics(string(c.topics.Changelog), string(c.topics.DLQ)), kgo.ConsumeResetOffset(from))
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
		if topic, err := fetchErr(fetches); err != nil {
			if topic == string(c.topics.DLQ) && errors.Is(err, kerr.TopicAuthorizationFailed) {
				// Read on the DLQ is optional: without it a refusal
				// is not seen, and the wait ends at the deadline.
				rd.PurgeTopicsFromConsuming(string(c.topics.DLQ))
				continue
			}
			return topics.MemberRecord{}, fmt.Errorf("client: WaitReceipt of %s: reading %s and %s: %w", what, c.topics.Changelog, c.topics.DLQ, err)
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

// fetchErr returns the first error of fetches, and its topic, that is not
// the reader being stopped or an informational data-loss notice.
func fetchErr(fetches kgo.Fetches) (topic string, err error) {
	fetches.EachError(func(t string, part int32, e error) {
		var loss *kgo.ErrDataLoss
		switch {
		case err != nil, errors.Is(e, context.Canceled), errors.Is(e, context.DeadlineExceeded),
			errors.Is(e, kgo.ErrClientClosed), errors.As(e, &loss):
			return
		}
		topic, err = t, fmt.Errorf("%s partition %d: %w", t, part, e)
	})
	return topic, err
}
