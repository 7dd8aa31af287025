package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/topics"
)

// Request is one command of [Client.PublishAsync] or a batch: op, user
// and the options of [Client.Leave] (an [Intent], say).
type Request struct {
	Op     topics.Op
	UserID uint64
	Opts   []CommandOpt
}

// Result is what became of one Request of a batch: Published once Kafka
// acknowledged it, Record its receipt ([Client.ApplyBatch] only), Err
// why either is missing (a [*RefusedError] for a refusal).
type Result struct {
	Published Published
	Record    topics.MemberRecord
	Err       error
}

// PublishAsync publishes r without waiting for Kafka: done is called once
// with what [Client.Leave] would return, from franz-go's goroutine, and
// must not block. Records are batched and pipelined by the producer; a
// full buffer makes PublishAsync wait until there is room or ctx ends.
func (c *Client) PublishAsync(ctx context.Context, r Request, done func(Published, error)) {
	start := time.Now()
	rec, p, err := c.prepare(r.Op, r.UserID, r.Opts)
	if err == nil {
		// The partition count is cached before the first record of a
		// topic is sent: the callback must not ask the brokers.
		_, err = c.partitionOf(ctx, p.Topic, rec.Key, false)
	}
	if err != nil {
		c.onPublished(p, err, time.Since(start))
		done(p, err)
		return
	}
	c.cl.Produce(ctx, rec, func(rec *kgo.Record, err error) {
		if err != nil {
			err = fmt.Errorf("client: unable to publish %s of user %d (request_id %s) to %s: %w",
				r.Op, r.UserID, p.Command.RequestID, p.Topic, err)
			c.onPublished(Published{}, err, time.Since(start))
			done(Published{}, err)
			return
		}
		p.Partition, p.Offset = rec.Partition, rec.Offset
		if err := c.checkPartition(ctx, p, false); err != nil {
			// Elsewhere than the cached count says: the topic may have
			// grown; asking costs a request, so not on this goroutine.
			go func() {
				err := c.checkPartition(ctx, p, true)
				c.onPublished(p, err, time.Since(start))
				done(p, err)
			}()
			return
		}
		c.onPublished(p, nil, time.Since(start))
		done(p, nil)
	})
}

// ApplyAsync publishes r without waiting for Kafka, as [Client.PublishAsync]
// does, and then waits for the processor's answer to it through the
// receipt watcher, as [Client.ReceiptAsync] does: done is called once
// with its Result — Published is the zero value when r was not published
// (Err says why), and filled when only the receipt is missing or a
// refusal —
// from franz-go's or the watcher's goroutine, and must not block. The
// watcher is started before r's record is stamped, so that it reads r's
// answer however early the processor writes it: a stream of ApplyAsync
// calls is [Client.ApplyBatch] without the slice. ctx bounds the publish
// and the wait; without a deadline, [DefaultWait] bounds the wait.
func (c *Client) ApplyAsync(ctx context.Context, r Request, done func(Result)) {
	if _, err := c.watch(ctx, time.UnixMilli(c.now().UnixMilli())); err != nil {
		done(Result{Err: fmt.Errorf("client: %s of user %d: %w", r.Op, r.UserID, err)})
		return
	}
	c.PublishAsync(ctx, r, func(p Published, err error) {
		var misrouted *MisroutedError
		if err != nil && !errors.As(err, &misrouted) {
			done(Result{Err: err})
			return
		}
		// A misrouted command is waited for too: its receipt is that of
		// the copy the processor re-publishes.
		c.ReceiptAsync(ctx, p, func(rec topics.MemberRecord, err error) {
			done(Result{Published: p, Record: rec, Err: err})
		})
	})
}

// PublishBatch publishes every request, pipelined, and returns once Kafka
// answered each: results[i] is what became of reqs[i].
func (c *Client) PublishBatch(ctx context.Context, reqs []Request) []Result {
	return c.batch(ctx, reqs, false)
}

// ApplyBatch publishes every request, pipelined, and waits for the
// processor's answer to each through the receipt watcher: results[i] is
// what became of reqs[i], its receipt or why there is none. It returns
// once every request has its answer, or ctx ends (the missing ones then
// say so); without a deadline, [DefaultWait] bounds the wait.
func (c *Client) ApplyBatch(ctx context.Context, reqs []Request) []Result {
	ctx, cancel := bounded(ctx)
	defer cancel()
	// The watcher starts before the first record is stamped, so that it
	// reads every answer of the batch.
	if _, err := c.watch(ctx, time.UnixMilli(c.now().UnixMilli())); err != nil {
		out := make([]Result, len(reqs))
		for i := range out {
			out[i].Err = fmt.Errorf("client: ApplyBatch: %w", err)
		}
		return out
	}
	return c.batch(ctx, reqs, true)
}

func (c *Client) batch(ctx context.Context, reqs []Request, receipts bool) []Result {
	out := make([]Result, len(reqs))
	var wg sync.WaitGroup
	wg.Add(len(reqs))
	for i, r := range reqs {
		c.PublishAsync(ctx, r, func(p Published, err error) {
			out[i].Published, out[i].Err = p, err
			if err != nil || !receipts {
				wg.Done()
				return
			}
			c.ReceiptAsync(ctx, p, func(rec topics.MemberRecord, err error) {
				out[i].Record, out[i].Err = rec, err
				wg.Done()
			})
		})
	}
	wg.Wait()
	return out
}
