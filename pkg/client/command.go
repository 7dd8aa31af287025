package client

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/topics"
)

// MaxAhead is how far an explicit boundary ([At]) may lie ahead of the
// command's record timestamp: the processor's default --max-future-skew.
// The processor dead-letters a command whose boundary is further ahead
// (command_future_skew), so the client refuses to publish it.
const MaxAhead = 5 * time.Second

// maxBoundary is the latest boundary the processor takes: 2^63-1 ns after
// the Unix epoch, in 2262 (command_at_out_of_range above it).
var maxBoundary = time.Unix(0, math.MaxInt64)

// CommandOpt configures one [Client.Leave] or [Client.Rejoin].
type CommandOpt interface{ applyCommand(*commandCfg) }

type commandOpt func(*commandCfg)

func (o commandOpt) applyCommand(c *commandCfg) { o(c) }

type commandCfg struct {
	requestID string
	at        time.Time
	hasAt     bool
	err       error // an option given wrong, reported by the publish
}

// RequestID sets the command's request_id, echoed into the changelog; at
// most [topics.MaxRequestIDBytes] bytes of UTF-8. Empty, or not given: a
// random one.
//
// A request id names one intent — one decision that this user leaves, or
// rejoins — and is reused only to retry that same intent, always with the
// same [At]: the processor takes a command's identity to be (op, user,
// boundary, request id) and applies an identity once, so a retry with the
// same request id and boundary is a no-op, while the same request id with
// a new boundary is a new command. A request id shared by two intents
// makes the second one a re-delivery of the first when their boundaries
// meet (a leave, a rejoin and a leave again in one millisecond: the last
// leave changes nothing). [Intent] sets both from a key of the caller's.
func RequestID(id string) CommandOpt {
	return commandOpt(func(c *commandCfg) { c.requestID = id })
}

// At sets the command's boundary (at_ns) to t, with nanosecond precision,
// instead of letting the record timestamp stand in. t may lie in the past
// (a leave that took effect earlier: the earliest boundary wins) but not
// more than [MaxAhead] ahead of the client's clock, nor before the Unix
// epoch.
func At(t time.Time) CommandOpt {
	return commandOpt(func(c *commandCfg) { c.at, c.hasAt = t, true })
}

// Intent gives a command the identity of one decision of the caller's:
// request id key, boundary at. It is the way to retry: keep key and at
// with the decision (a ticket, a job, a row in the caller's database) and
// publish with the same Intent as often as it takes — after a timeout, a
// crash, a redeploy — and the processor applies the command once; every
// later copy's receipt says "duplicate": true. A job that makes many users
// leave may use one Intent for all of them: the identity includes the op
// and the user.
//
// key must be non-empty and at most [topics.MaxRequestIDBytes] bytes of
// UTF-8; at is when the decision took effect (its boundary, see [At]), not
// when it is published, so it stays the same on every retry. A new
// decision about the same user — leaving again after a rejoin — takes a
// new key.
func Intent(key string, at time.Time) CommandOpt {
	return commandOpt(func(c *commandCfg) {
		switch {
		case key == "":
			c.err = errors.New("Intent: empty key: a retry must name the decision it repeats")
		case at.IsZero():
			c.err = fmt.Errorf("Intent %q: zero time: the boundary must be the decision's, the same on every retry", key)
		}
		c.requestID, c.at, c.hasAt = key, at, true
	})
}

// Published is a command Kafka acknowledged: what [Client.WaitReceipt]
// needs to find the processor's receipt.
type Published struct {
	// Command is the command as published; its RequestID is never empty.
	Command topics.Command
	// Topic, Partition and Offset say where Kafka put the record.
	Topic     topics.Topic
	Partition int32
	Offset    int64
	// Timestamp is the record timestamp, in Kafka's millisecond precision.
	Timestamp time.Time
}

// BoundaryNs returns the command's boundary in nanoseconds since the Unix
// epoch: its at_ns, or its record timestamp when it has none.
func (p Published) BoundaryNs() uint64 {
	if p.Command.HasAt {
		return p.Command.AtNs
	}
	return uint64(p.Timestamp.UnixMilli()) * uint64(time.Millisecond)
}

// MisroutedError is a command Kafka acknowledged in a partition other
// than the one Kafka's default partitioner gives its key: the caller's
// *kgo.Client does not place keys by murmur2. The processor re-publishes
// it to the key's partition, and the command counts only from then.
type MisroutedError struct {
	Published Published
	// Want is the partition of the command's key.
	Want int32
}

func (e *MisroutedError) Error() string {
	p := e.Published
	return fmt.Sprintf("client: %s of user %d landed in %s partition %d, but Kafka's default partitioner (murmur2) puts key %d in partition %d; "+
		"the processor re-publishes it there and it counts only from then: give the *kgo.Client franz-go's default partitioner or kgo.StickyKeyPartitioner(nil)",
		p.Command.Op, p.Command.UserID, p.Topic, p.Partition, p.Command.UserID, e.Want)
}

// Leave publishes a leave of userID and returns once Kafka acknowledged
// it: from then on, the processor stops forwarding the user's signals
// with event times at or after the boundary (see the README's promise for
// the grace). The returned error says what failed; a [*MisroutedError]
// comes with the Published it describes.
func (c *Client) Leave(ctx context.Context, userID uint64, opts ...CommandOpt) (Published, error) {
	return c.publish(ctx, topics.Leave, userID, opts)
}

// Rejoin publishes a rejoin of userID and returns once Kafka acknowledged
// it. The processor closes the user's open leave at the boundary; a
// boundary before that leave's is refused (rejoin_before_leave, see
// [RefusedError]), and a rejoin of an active user changes nothing.
func (c *Client) Rejoin(ctx context.Context, userID uint64, opts ...CommandOpt) (Published, error) {
	return c.publish(ctx, topics.Rejoin, userID, opts)
}

func (c *Client) publish(ctx context.Context, op topics.Op, userID uint64, opts []CommandOpt) (Published, error) {
	start := time.Now()
	rec, p, err := c.prepare(op, userID, opts)
	if err != nil {
		c.onPublished(p, err, time.Since(start))
		return p, err
	}
	if err := c.cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		err = fmt.Errorf("client: unable to publish %s of user %d (request_id %s) to %s: %w", op, userID, p.Command.RequestID, p.Topic, err)
		c.onPublished(p, err, time.Since(start))
		return Published{}, err
	}
	p.Partition, p.Offset = rec.Partition, rec.Offset
	err = c.checkPartition(ctx, p, true)
	c.onPublished(p, err, time.Since(start))
	return p, err
}

// prepare makes the record of a command, and the Published it becomes
// once Kafka places it (Partition and Offset to fill).
func (c *Client) prepare(op topics.Op, userID uint64, opts []CommandOpt) (*kgo.Record, Published, error) {
	var o commandCfg
	for _, opt := range opts {
		opt.applyCommand(&o)
	}
	what := fmt.Sprintf("%s of user %d", op, userID)
	if o.err != nil {
		return nil, Published{}, fmt.Errorf("client: %s: %w", what, o.err)
	}
	// The record timestamp, as Kafka keeps it: the boundary when there is
	// no at_ns, and what an explicit one is checked against.
	stamp := time.UnixMilli(c.now().UnixMilli())
	if stamp.Before(time.Unix(0, 0)) {
		return nil, Published{}, fmt.Errorf("client: %s: the clock says %s, before the Unix epoch", what, stamp.UTC().Format(time.RFC3339Nano))
	}
	cmd := topics.Command{Op: op, UserID: userID, RequestID: o.requestID}
	if o.hasAt {
		switch {
		case o.at.Before(time.Unix(0, 0)) || o.at.After(maxBoundary):
			return nil, Published{}, fmt.Errorf("client: %s: At %s is not between the Unix epoch and 2262 (command_at_out_of_range)",
				what, o.at.UTC().Format(time.RFC3339Nano))
		case o.at.Sub(stamp) > MaxAhead:
			return nil, Published{}, fmt.Errorf("client: %s: At %s is %v ahead of the record timestamp %s, more than %v: the processor would dead-letter it (command_future_skew)",
				what, o.at.UTC().Format(time.RFC3339Nano), o.at.Sub(stamp), stamp.UTC().Format(time.RFC3339Nano), MaxAhead)
		}
		cmd.AtNs, cmd.HasAt = uint64(o.at.UnixNano()), true
	}
	if cmd.RequestID == "" {
		cmd.RequestID = rand.Text()
	}
	if err := cmd.Validate(); err != nil {
		return nil, Published{}, fmt.Errorf("client: %s: %w", what, err)
	}

	topic := c.topics.Commands
	key := topics.AppendUserID(nil, userID)
	rec := &kgo.Record{Topic: string(topic), Key: key, Value: topics.AppendCommand(nil, cmd), Timestamp: stamp}
	return rec, Published{Command: cmd, Topic: topic, Timestamp: stamp}, nil
}

// checkPartition returns a [*MisroutedError] when p is not in its key's
// partition. With refresh false it uses only the cached partition count,
// and a record elsewhere is checked again with a fresh count by the
// caller: a publish callback must not block.
func (c *Client) checkPartition(ctx context.Context, p Published, refresh bool) error {
	what := fmt.Sprintf("%s of user %d", p.Command.Op, p.Command.UserID)
	key := topics.AppendUserID(nil, p.Command.UserID)
	want, err := c.partitionOf(ctx, p.Topic, key, false)
	if err == nil && want != p.Partition && refresh {
		want, err = c.partitionOf(ctx, p.Topic, key, true) // the topic may have grown
	}
	if err != nil {
		return fmt.Errorf("client: %s is in %s partition %d offset %d, but its partition could not be checked: %w",
			what, p.Topic, p.Partition, p.Offset, err)
	}
	if want != p.Partition {
		return &MisroutedError{Published: p, Want: want}
	}
	return nil
}

// onPublished calls the publish hooks.
func (c *Client) onPublished(p Published, err error, took time.Duration) {
	for _, h := range c.hooks {
		if h, ok := h.(HookPublished); ok {
			h.OnPublished(p, err, took)
		}
	}
}
