package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
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

// WaitReceipt waits until the processor has answered p and returns the
// changelog record that follows p's own command: the user's state with
// the command (request_id, whether it changed anything or restated the
// state as a duplicate) and the receipt (when it took effect in the gate,
// from which signals offset). A command the processor dead-lettered
// returns a [*RefusedError].
//
// The answer belongs to exactly one command: the record at p's topic,
// partition and offset. A changelog record is p's receipt only when its
// command names that position, and a DLQ record only when its source does;
// an earlier command with the same request id never answers for p. When
// the processor answers p by restating the user's state (a re-delivery of
// an identity already applied, "duplicate": true), the record says so, and
// so does the returned one. A command Kafka put in a partition other than
// its key's ([*MisroutedError]) is followed to the copy the processor
// re-publishes to the key's partition (header cohortgate.misrouted.from),
// and the receipt is that copy's.
//
// It reads the changelog and, where it may, the DLQ from p.Timestamp on,
// read_committed. For a command published elsewhere, fill p's Command
// (UserID and Op at least), Topic, Partition, Offset and Timestamp as Kafka
// acknowledged them.
//
// It waits until ctx is done, or [DefaultWait] when ctx has no deadline,
// and then says what it did not find.
func (c *Client) WaitReceipt(ctx context.Context, p Published) (topics.MemberRecord, error) {
	type result struct {
		rec topics.MemberRecord
		err error
	}
	ch := make(chan result, 1)
	c.ReceiptAsync(ctx, p, func(rec topics.MemberRecord, err error) { ch <- result{rec, err} })
	r := <-ch
	return r.rec, r.err
}

// ReceiptAsync is [Client.WaitReceipt] without blocking: done is called
// once with what WaitReceipt would return, from the receipt watcher's
// goroutine (or a goroutine of its own), and must not block. Waiting for
// many receipts this way costs one map entry each: the Client's one
// watcher tails the changelog and the DLQ and completes the waiters by
// the position of their commands.
//
// The watcher starts at the first receipt waited for, reading from that
// command's record timestamp on. A command stamped before that, or one
// whose answer the watcher read before anyone waited for it and has since
// forgotten ([Unclaimed]), or a misrouted one, is looked for by a scan,
// as exact and slower: on one of at most [Scans] readers, which the
// waits queued for it share.
func (c *Client) ReceiptAsync(ctx context.Context, p Published, done func(topics.MemberRecord, error)) {
	if err := receiptable(p); err != nil {
		err = fmt.Errorf("client: WaitReceipt of %s: %w", describe(p), err)
		c.onReceipt(p, err, 0)
		done(topics.MemberRecord{}, err)
		return
	}
	start := time.Now()
	// A scan queues for one of the client's few readers (Scans): a reader
	// per wait, at a million forgotten answers, held tens of GB.
	scan := func(single bool) {
		ctx, cancel := bounded(ctx)
		c.scans.add(&scanJob{ctx: ctx, p: p, single: single, done: func(rec topics.MemberRecord, err error) {
			cancel()
			c.onReceipt(p, err, time.Since(start))
			done(rec, err)
		}})
	}
	key := topics.AppendUserID(nil, p.Command.UserID)
	want, err := c.partitionOf(ctx, p.Topic, key, false)
	if err != nil || want != p.Partition {
		scan(true) // it checks the partition again, with a fresh count, and follows a misrouted command
		return
	}
	w, err := c.watch(ctx, p.Timestamp)
	if err != nil {
		err = fmt.Errorf("client: WaitReceipt of %s: %w", describe(p), err)
		c.onReceipt(p, err, 0)
		done(topics.MemberRecord{}, err)
		return
	}
	if w == nil {
		scan(false)
		return
	}
	// A context of its own only for a deadline of its own: each is an
	// entry in its parent's children, held until the answer comes.
	cancel := func() {}
	if _, ok := ctx.Deadline(); !ok {
		ctx, cancel = context.WithTimeout(ctx, DefaultWait)
	}
	wt := &waiter{p: p, since: start}
	wt.done = func(rec topics.MemberRecord, err error) {
		cancel()
		done(rec, err)
	}
	if !w.add(wt) {
		cancel()
		scan(false)
		return
	}
	wt.watchContext(ctx, func() {
		w.remove(wt)
		wt.complete(c, answer{}, fmt.Errorf("client: no receipt for the %s on %s yet (is the processor running?): %w",
			describe(p), c.topics.Changelog, context.Cause(ctx)))
	})
}

// onReceipt calls the receipt hooks.
func (c *Client) onReceipt(p Published, err error, waited time.Duration) {
	for _, h := range c.hooks {
		if h, ok := h.(HookReceipt); ok {
			h.OnReceipt(p, err, waited)
		}
	}
}

// scanReceipt looks for p's answer with a reader of its own, from
// p.Timestamp on.
func (c *Client) scanReceipt(ctx context.Context, p Published) (topics.MemberRecord, error) {
	what := describe(p)
	key := topics.AppendUserID(nil, p.Command.UserID)
	want, err := c.partitionOf(ctx, p.Topic, key, false)
	if err == nil && want != p.Partition {
		want, err = c.partitionOf(ctx, p.Topic, key, true) // the topic may have grown
	}
	if err != nil {
		return topics.MemberRecord{}, fmt.Errorf("client: WaitReceipt of %s: %w", what, err)
	}
	misrouted := want != p.Partition
	offsets := make(map[string]map[int32]kgo.Offset)
	for _, topic := range []topics.Topic{c.topics.Changelog, c.topics.DLQ, p.Topic} {
		if topic == p.Topic && !misrouted {
			continue
		}
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
		if topic == p.Topic {
			from = map[int32]kgo.Offset{want: from[want]}
		}
		offsets[string(topic)] = from
	}
	rd, err := c.reader("", kgo.ConsumePartitions(offsets))
	if err != nil {
		return topics.MemberRecord{}, fmt.Errorf("client: WaitReceipt of %s: %w", what, err)
	}
	defer rd.Close()
	// target is the command whose answer is p's: p itself, or the copy
	// the processor re-published of it. Answers to other commands of the
	// user are kept until the copy is known, since the changelog may be
	// read ahead of the commands.
	target := positionOf(p)
	seen := make(map[position]answer)
	for {
		fetches := rd.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return topics.MemberRecord{}, fmt.Errorf("client: no receipt for the %s on %s yet (is the processor running?): %w",
				what, c.topics.Changelog, err)
		}
		if err := fetchErr(fetches); err != nil {
			return topics.MemberRecord{}, fmt.Errorf("client: WaitReceipt of %s: %w", what, err)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			switch topics.Topic(r.Topic) {
			case p.Topic:
				if from, ok := republishedFrom(r); ok && from == positionOf(p) && bytes.Equal(r.Key, key) {
					target = position{topic: p.Topic, partition: r.Partition, offset: r.Offset}
				}
			case c.topics.Changelog:
				if at, rec, ok := answers(r, p.Command.UserID); ok {
					seen[at] = answer{rec: rec}
				}
			case c.topics.DLQ:
				if at, reason, detail, ok := refusalOf(r); ok {
					seen[at] = answer{refused: &RefusedError{Published: p, Reason: reason, Detail: detail}}
				}
			}
		})
		if a, ok := seen[target]; ok {
			if a.refused != nil {
				return topics.MemberRecord{}, a.refused
			}
			return a.rec, nil
		}
	}
}

// position is where a command record is: its topic, partition and offset.
// It identifies the command, and so the processor's answer to it.
type position struct {
	topic     topics.Topic
	partition int32
	offset    int64
}

func positionOf(p Published) position {
	return position{topic: p.Topic, partition: p.Partition, offset: p.Offset}
}

// answer is the processor's answer to one command: a changelog record, or
// a refusal.
type answer struct {
	rec     topics.MemberRecord
	refused *RefusedError
}

// describe names p's command in errors.
func describe(p Published) string {
	return fmt.Sprintf("%s of user %d (request_id %s, %s partition %d offset %d)",
		p.Command.Op, p.Command.UserID, p.Command.RequestID, p.Topic, p.Partition, p.Offset)
}

// receiptable says why p cannot be waited for, or nil.
func receiptable(p Published) error {
	switch {
	case p.Topic == "":
		return errors.New("no topic: the command's position (topic, partition, offset) identifies its receipt")
	case p.Partition < 0 || p.Offset < 0:
		return fmt.Errorf("partition %d offset %d is not a record's position", p.Partition, p.Offset)
	case p.Timestamp.IsZero():
		return errors.New("no record timestamp to read from")
	}
	return nil
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

// answerOf is what record r, of the changelog or the DLQ of c's topics,
// answers, and the position of the command it answers; ok is false for a
// record of another topic or one that answers no command.
func (c *Client) answerOf(r *kgo.Record) (at position, a answer, ok bool) {
	switch topics.Topic(r.Topic) {
	case c.topics.Changelog:
		pos, rec, ok := answersAny(r)
		return pos, answer{rec: rec}, ok
	case c.topics.DLQ:
		pos, reason, detail, ok := refusalOf(r)
		return pos, answer{refused: &RefusedError{Reason: reason, Detail: detail}}, ok
	}
	return position{}, answer{}, false
}

// answersAny decodes changelog record r and returns the position of the
// command it follows; ok is false for a record that follows no command or
// does not decode.
func answersAny(r *kgo.Record) (position, topics.MemberRecord, bool) {
	id, err := topics.ParseUserID(r.Key)
	if err != nil {
		return position{}, topics.MemberRecord{}, false
	}
	return answers(r, id)
}

// answers decodes changelog record r of user and returns the position of
// the command it follows; ok is false for a record of another user, one
// that follows no command, or one that does not decode.
func answers(r *kgo.Record, user uint64) (position, topics.MemberRecord, bool) {
	if id, err := topics.ParseUserID(r.Key); err != nil || id != user {
		return position{}, topics.MemberRecord{}, false
	}
	rec, err := topics.DecodeMemberRecord(r.Value)
	if err != nil || rec.Command == nil || rec.UserID != user {
		return position{}, topics.MemberRecord{}, false
	}
	at := position{topic: topics.Topic(rec.Command.Topic), partition: rec.Command.Partition, offset: rec.Command.Offset}
	return at, rec, true
}

// refusalOf returns the source position and the reason of DLQ record r;
// ok is false for a record that names no source.
func refusalOf(r *kgo.Record) (at position, reason topics.Reason, detail string, ok bool) {
	var part, off, topic bool
	for _, kv := range r.Headers {
		switch kv.Key {
		case topics.HeaderSourceTopic:
			at.topic, topic = topics.Topic(kv.Value), true
		case topics.HeaderSourcePartition:
			n, err := strconv.ParseInt(string(kv.Value), 10, 32)
			at.partition, part = int32(n), err == nil
		case topics.HeaderSourceOffset:
			n, err := strconv.ParseInt(string(kv.Value), 10, 64)
			at.offset, off = n, err == nil
		case topics.HeaderReason:
			reason = topics.Reason(kv.Value)
		case topics.HeaderError:
			detail = string(kv.Value)
		}
	}
	return at, reason, detail, part && off && topic
}

// republishedFrom returns where commands record r was found misrouted,
// when r is the processor's re-published copy of it.
func republishedFrom(r *kgo.Record) (position, bool) {
	for _, kv := range r.Headers {
		if kv.Key != topics.HeaderMisroutedFrom {
			continue
		}
		ps, os, ok := strings.Cut(string(kv.Value), "/")
		p, err1 := strconv.ParseInt(ps, 10, 32)
		o, err2 := strconv.ParseInt(os, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			return position{}, false
		}
		return position{topic: topics.Topic(r.Topic), partition: int32(p), offset: o}, true
	}
	return position{}, false
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
