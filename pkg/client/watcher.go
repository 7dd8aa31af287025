package client

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/topics"
)

// DefaultUnclaimed bounds how many of the answers it read the receipt
// watcher keeps for waits that come later ([Unclaimed]).
const DefaultUnclaimed = 1 << 16

// watcher tails the changelog and the DLQ once for its Client, from the
// first offsets that may hold a record stamped at or after from, and
// completes every waiter by the position of the command it waits for.
// Its goroutine is the Client's: it ends when Close cancels stop.
//
// Every answer read is kept, up to max answers, for a wait that comes
// later (the processor may answer before Kafka's acknowledgement reaches
// the publisher); the oldest are forgotten first, and forgot is the latest
// record timestamp of a forgotten one: a command stamped at or before it
// may have been forgotten, and is looked for by a scan of its own.
type watcher struct {
	c     *Client
	rd    *kgo.Client
	from  time.Time
	max   int
	stop  context.CancelFunc
	ended chan struct{}

	mu        sync.Mutex
	waiters   map[position][]*waiter
	unclaimed map[position]answer // the answers kept, waited for or not
	order     []position          // unclaimed's keys, oldest first
	stamps    map[position]time.Time
	forgot    time.Time
	parts     map[string]map[int32]bool // partitions read, per topic
	err       error                     // why the watcher stopped, once it has
}

// waiter is one command waited for: done is called once, outside the
// watcher's lock, with its answer or why there is none.
type waiter struct {
	p     Published
	since time.Time
	done  func(topics.MemberRecord, error)
	once  sync.Once
}

func (w *waiter) complete(c *Client, a answer, err error) {
	w.once.Do(func() {
		if err == nil && a.refused != nil {
			r := *a.refused
			r.Published = w.p
			err = &r
		}
		c.onReceipt(w.p, err, time.Since(w.since))
		w.done(a.rec, err)
	})
}

// watch returns the Client's watcher, started if need be to read from
// from on, or nil when a command stamped at from may lie before what the
// running watcher reads (or has forgotten): its receipt needs a scan of
// its own.
func (c *Client) watch(ctx context.Context, from time.Time) (*watcher, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w := c.mu.watcher; w != nil {
		if from.Before(w.from) {
			return nil, nil
		}
		return w, nil
	}
	if c.mu.closed {
		return nil, fmt.Errorf("the client is closed")
	}
	offsets := make(map[string]map[int32]kgo.Offset)
	parts := make(map[string]map[int32]bool)
	for _, topic := range []topics.Topic{c.topics.Changelog, c.topics.DLQ} {
		at, err := c.readFrom(ctx, topic, from)
		switch {
		case topic == c.topics.DLQ && err != nil:
			continue // as in scanReceipt: the DLQ only makes a refusal known sooner
		case err != nil:
			return nil, err
		}
		offsets[string(topic)] = at
		parts[string(topic)] = make(map[int32]bool)
		for p := range at {
			parts[string(topic)][p] = true
		}
	}
	rd, err := c.reader("receipts", kgo.ConsumePartitions(offsets))
	if err != nil {
		return nil, err
	}
	wctx, stop := context.WithCancel(context.Background())
	w := &watcher{c: c, rd: rd, from: from, max: c.unclaimed, stop: stop, ended: make(chan struct{}),
		waiters: make(map[position][]*waiter), unclaimed: make(map[position]answer),
		stamps: make(map[position]time.Time), parts: parts}
	c.mu.watcher = w
	go w.run(wctx)
	return w, nil
}

// add registers wt, or completes it at once with an answer already read.
// It returns false when wt's answer may have been read and forgotten.
func (w *watcher) add(wt *waiter) bool {
	at := positionOf(wt.p)
	w.mu.Lock()
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		wt.complete(w.c, answer{}, err)
		return true
	}
	if a, ok := w.unclaimed[at]; ok {
		w.mu.Unlock()
		wt.complete(w.c, a, nil)
		return true
	}
	if !w.forgot.IsZero() && !wt.p.Timestamp.After(w.forgot) {
		w.mu.Unlock()
		return false
	}
	w.waiters[at] = append(w.waiters[at], wt)
	w.mu.Unlock()
	return true
}

// remove forgets wt (its caller stopped waiting).
func (w *watcher) remove(wt *waiter) {
	at := positionOf(wt.p)
	w.mu.Lock()
	defer w.mu.Unlock()
	ws := w.waiters[at]
	for i, x := range ws {
		if x == wt {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(w.waiters, at)
	} else {
		w.waiters[at] = ws
	}
}

// partitionCheck is how often the watcher looks for partitions added to
// the changelog or the DLQ.
const partitionCheck = 5 * time.Second

func (w *watcher) run(ctx context.Context) {
	defer close(w.ended)
	defer w.rd.Close()
	checked := time.Now()
	type done struct {
		w *waiter
		a answer
	}
	for ctx.Err() == nil {
		if time.Since(checked) > partitionCheck {
			w.addPartitions(ctx)
			checked = time.Now()
		}
		pctx, cancel := context.WithTimeout(ctx, partitionCheck)
		fetches := w.rd.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			break
		}
		if err := fetchErr(fetches); err != nil {
			w.failAll(fmt.Errorf("client: receipt watcher: %w", err))
			continue
		}
		var completed []done
		w.mu.Lock()
		fetches.EachRecord(func(r *kgo.Record) {
			at, a, ok := w.c.answerOf(r)
			if !ok {
				return
			}
			if ws, ok := w.waiters[at]; ok {
				delete(w.waiters, at)
				for _, wt := range ws {
					completed = append(completed, done{wt, a})
				}
			}
			w.keep(at, a, r.Timestamp) // for a later wait for the same command
		})
		w.mu.Unlock()
		for _, d := range completed {
			d.w.complete(w.c, d.a, nil)
		}
	}
	w.failAll(fmt.Errorf("client: closed while waiting for a receipt"))
}

// keep holds an answer read, for a wait that comes later (the processor
// may answer before Kafka's acknowledgement reaches the publisher, and a
// command may be waited for twice), forgetting the oldest past max.
// Called with w.mu held.
func (w *watcher) keep(at position, a answer, stamp time.Time) {
	if _, ok := w.unclaimed[at]; !ok {
		w.order = append(w.order, at)
	}
	w.unclaimed[at], w.stamps[at] = a, stamp
	for len(w.order) > w.max {
		old := w.order[0]
		w.order = w.order[1:]
		if s := w.stamps[old]; s.After(w.forgot) {
			w.forgot = s
		}
		delete(w.unclaimed, old)
		delete(w.stamps, old)
	}
}

// failAll completes every waiter with err; a stopped watcher (closed)
// also fails those that come later.
func (w *watcher) failAll(err error) {
	w.mu.Lock()
	all := w.waiters
	w.waiters = make(map[position][]*waiter)
	w.mu.Unlock()
	for _, ws := range all {
		for _, wt := range ws {
			wt.complete(w.c, answer{}, err)
		}
	}
}

// addPartitions reads, from their start, partitions added to the
// changelog or the DLQ since the watcher began: a grown changelog's new
// partitions may hold any user's records.
func (w *watcher) addPartitions(ctx context.Context) {
	var topicNames []string
	for t := range w.parts {
		topicNames = append(topicNames, t)
	}
	td, err := kadm.NewClient(w.c.cl).ListTopics(ctx, topicNames...)
	if err != nil {
		return // tried again at the next check
	}
	add := make(map[string]map[int32]kgo.Offset)
	for t, known := range w.parts {
		d, ok := td[t]
		if !ok || d.Err != nil {
			continue
		}
		for p := range d.Partitions {
			if !known[p] {
				known[p] = true
				if add[t] == nil {
					add[t] = make(map[int32]kgo.Offset)
				}
				add[t][p] = kgo.NewOffset().AtStart()
			}
		}
	}
	if len(add) > 0 {
		w.rd.AddConsumePartitions(add)
	}
}

// close stops the watcher and waits for its goroutine.
func (w *watcher) close() {
	w.mu.Lock()
	w.err = fmt.Errorf("client: closed while waiting for a receipt")
	w.mu.Unlock()
	w.stop()
	<-w.ended
}
