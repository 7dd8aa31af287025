package client

import (
	"bytes"
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
// the publisher, and a command may be waited for twice); the oldest are
// forgotten first, and forgot is the latest record timestamp of a
// forgotten one: a command stamped at or before it may have been
// forgotten, and is looked for by a scan of its own.
//
// What it holds is flat in the answers read: positions are keyed by a
// topic's number, not its name, in maps the garbage collector need not
// scan (their keys and values hold no pointers); the kept answers sit in
// a ring, oldest first, each as its record's value (one allocation the
// collector does not scan), decoded again when a second wait claims it.
// Only an answer no wait has claimed yet is kept decoded as well.
type watcher struct {
	c     *Client
	rd    *kgo.Client
	from  time.Time
	max   int
	stop  context.CancelFunc
	ended chan struct{}

	mu      sync.Mutex
	waiters map[key]*waiter // each position's waiters, chained by next
	topics  map[topics.Topic]int32
	names   []topics.Topic // topic numbers' names; 0 is the commands topic
	kept    ring
	forgot  int64                     // record timestamp (ms) of the latest answer forgotten; 0: none
	parts   map[string]map[int32]bool // partitions read, per topic
	err     error                     // why the watcher stopped, once it has
}

// key is a command's position, its topic by number (watcher.names).
type key struct {
	topic     int32
	partition int32
	offset    int64
}

// keyOf numbers at's topic, giving it a number when add is true; ok is
// false for a topic without one. Called with w.mu held.
func (w *watcher) keyOf(at position, add bool) (key, bool) {
	k := key{partition: at.partition, offset: at.offset}
	if at.topic == w.names[0] {
		return k, true
	}
	n, ok := w.topics[at.topic]
	if !ok {
		if !add {
			return k, false
		}
		n = int32(len(w.names))
		w.names = append(w.names, at.topic)
		w.topics[at.topic] = n
	}
	k.topic = n
	return k, true
}

// waiter is one command waited for: done is called once, outside the
// watcher's lock, with its answer or why there is none.
type waiter struct {
	p     Published
	since time.Time
	done  func(topics.MemberRecord, error)
	once  sync.Once
	next  *waiter // another waiter of the same position; guarded by watcher.mu

	mu       sync.Mutex
	finished bool
	unwatch  func() bool // stops the wait's context.AfterFunc
}

func (w *waiter) complete(c *Client, a answer, err error) {
	w.once.Do(func() {
		w.mu.Lock()
		w.finished = true
		unwatch := w.unwatch
		w.mu.Unlock()
		if unwatch != nil {
			unwatch() // no goroutine of its own for a wait answered in time
		}
		if err == nil && a.refused != nil {
			r := *a.refused
			r.Published = w.p
			err = &r
		}
		c.onReceipt(w.p, err, time.Since(w.since))
		w.done(a.rec, err)
	})
}

// watchContext ends the wait when ctx does, unless it is answered first.
func (w *waiter) watchContext(ctx context.Context, f func()) {
	w.mu.Lock()
	finished := w.finished
	w.mu.Unlock()
	if finished {
		return // answered at once, from an answer kept
	}
	stop := context.AfterFunc(ctx, f)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.finished {
		stop()
		return
	}
	w.unwatch = stop
}

// kept is one answer the watcher keeps: the changelog record's value
// (nil for a refusal), and the answer decoded while no wait has claimed
// it (always, for a refusal).
type kept struct {
	k     key
	stamp int64 // the answer record's timestamp, ms
	value []byte
	a     *answer
}

// ring is the kept answers, oldest first, at most max of them, and where
// each is by its position. The slots grow by doubling up to max.
type ring struct {
	slots []kept
	head  int    // the oldest's slot
	n     int    // answers kept
	first uint64 // the oldest's sequence number
	at    map[key]uint64
}

func (r *ring) get(k key) (*kept, bool) {
	seq, ok := r.at[k]
	if !ok {
		return nil, false
	}
	return &r.slots[(r.head+int(seq-r.first))%len(r.slots)], true
}

// push keeps e, returning the oldest answer when it had to be forgotten
// to stay within limit answers.
func (r *ring) push(e kept, limit int) (old kept, forgot bool) {
	if r.n == len(r.slots) {
		if len(r.slots) < limit {
			grown := make([]kept, min(limit, max(2*len(r.slots), 1024)))
			for i := range r.n {
				grown[i] = r.slots[(r.head+i)%len(r.slots)]
			}
			r.slots, r.head = grown, 0
		} else {
			old, forgot = r.slots[r.head], true
			delete(r.at, old.k)
			r.slots[r.head] = kept{}
			r.head = (r.head + 1) % len(r.slots)
			r.first++
			r.n--
		}
	}
	r.slots[(r.head+r.n)%len(r.slots)] = e
	r.at[e.k] = r.first + uint64(r.n)
	r.n++
	return old, forgot
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
	w := newWatcher(c, from, stop)
	w.rd, w.parts = rd, parts
	c.mu.watcher = w
	go w.run(wctx)
	return w, nil
}

// newWatcher returns a watcher of c's answers from from on, without its
// reader.
func newWatcher(c *Client, from time.Time, stop context.CancelFunc) *watcher {
	return &watcher{c: c, from: from, max: c.unclaimed, stop: stop, ended: make(chan struct{}),
		waiters: make(map[key]*waiter), topics: make(map[topics.Topic]int32),
		names: []topics.Topic{c.topics.Commands}, kept: ring{at: make(map[key]uint64)}}
}

// add registers wt, or completes it at once with an answer already read.
// It returns false when wt's answer may have been read and forgotten.
func (w *watcher) add(wt *waiter) bool {
	w.mu.Lock()
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		wt.complete(w.c, answer{}, err)
		return true
	}
	k, _ := w.keyOf(positionOf(wt.p), true)
	if e, ok := w.kept.get(k); ok {
		a, ok := e.claim()
		w.mu.Unlock()
		if !ok {
			return false // its value no longer decodes: a scan reads it again
		}
		wt.complete(w.c, a, nil)
		return true
	}
	if w.forgot != 0 && wt.p.Timestamp.UnixMilli() <= w.forgot {
		w.mu.Unlock()
		return false
	}
	wt.next = w.waiters[k]
	w.waiters[k] = wt
	w.mu.Unlock()
	return true
}

// claim returns e's answer to a wait, decoding it again when an earlier
// wait claimed it; a changelog answer's decoded copy is dropped once
// claimed (the value stays). Called with w.mu held.
func (e *kept) claim() (answer, bool) {
	if e.a != nil {
		a := *e.a
		if e.value != nil {
			e.a = nil
		}
		return a, true
	}
	rec, err := topics.DecodeMemberRecord(e.value)
	if err != nil {
		return answer{}, false
	}
	return answer{rec: rec}, true
}

// remove forgets wt (its caller stopped waiting).
func (w *watcher) remove(wt *waiter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	k, ok := w.keyOf(positionOf(wt.p), false)
	if !ok {
		return
	}
	first := w.waiters[k]
	switch {
	case first == nil:
		return // answered, or failed: its chain is no longer the watcher's
	case first == wt && wt.next == nil:
		delete(w.waiters, k)
	case first == wt:
		w.waiters[k] = wt.next
	default:
		x := first
		for x.next != nil && x.next != wt {
			x = x.next
		}
		if x.next != wt {
			return
		}
		x.next = wt.next
	}
	wt.next = nil
}

// partitionCheck is how often the watcher looks for partitions added to
// the changelog or the DLQ.
const partitionCheck = 5 * time.Second

func (w *watcher) run(ctx context.Context) {
	defer close(w.ended)
	defer w.rd.Close()
	checked := time.Now()
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
		w.take(fetches)
	}
	w.failAll(fmt.Errorf("client: closed while waiting for a receipt"))
}

// take completes the waiters of the answers in fetches and keeps every
// answer for a later wait. The waiters are completed outside the lock.
func (w *watcher) take(fetches kgo.Fetches) {
	type done struct {
		w *waiter
		a answer
	}
	var completed []done
	w.mu.Lock()
	fetches.EachRecord(func(r *kgo.Record) {
		at, a, ok := w.c.answerOf(r)
		if !ok {
			return
		}
		k, _ := w.keyOf(at, true)
		claimed := false
		if wt := w.waiters[k]; wt != nil {
			delete(w.waiters, k)
			for ; wt != nil; wt = wt.next {
				completed = append(completed, done{wt, a})
			}
			claimed = true
		}
		w.keep(k, a, r, claimed) // for a later wait for the same command
	})
	w.mu.Unlock()
	for _, d := range completed {
		d.w.complete(w.c, d.a, nil)
	}
}

// keep holds answer a, read from record r, for a wait that comes later,
// forgetting the oldest past max: a refusal decoded, a changelog answer
// as r's value, and decoded as well while unclaimed. Called with w.mu
// held.
func (w *watcher) keep(k key, a answer, r *kgo.Record, claimed bool) {
	e := kept{k: k, stamp: r.Timestamp.UnixMilli()}
	if a.refused == nil {
		e.value = bytes.Clone(r.Value)
	}
	if a.refused != nil || !claimed {
		e.a = &a
	}
	if old, ok := w.kept.get(k); ok { // read twice: the latest answer stands
		*old = e
		return
	}
	if old, forgot := w.kept.push(e, w.max); forgot && old.stamp > w.forgot {
		w.forgot = old.stamp
	}
}

// failAll completes every waiter with err; a stopped watcher (closed)
// also fails those that come later.
func (w *watcher) failAll(err error) {
	w.mu.Lock()
	var all []*waiter
	for _, wt := range w.waiters {
		for ; wt != nil; wt = wt.next {
			all = append(all, wt)
		}
	}
	w.waiters = make(map[key]*waiter)
	w.mu.Unlock()
	for _, wt := range all {
		wt.complete(w.c, answer{}, err)
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
