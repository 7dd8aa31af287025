package client

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/topics"
)

// DefaultScans bounds how many readers of their own the receipts the
// watcher cannot serve use at once ([Scans]).
const DefaultScans = 4

// Scans bounds how many readers of their own, at once, look for the
// receipts the receipt watcher cannot serve: a command stamped before the
// watcher's start, one whose answer it has forgotten ([Unclaimed]), or a
// misrouted one (default [DefaultScans]); [Client.Status] keeps as many
// readers of its own, shared by its calls. The waits beyond the bound queue,
// a few hundred bytes each, until a reader is free or their context ends;
// the queued waits for commands in their key's partition share the next
// free reader, which reads from the earliest of their timestamps on.
func Scans(n int) Opt {
	return opt(func(c *cfg) { c.scans = n })
}

// scans runs the receipts the watcher cannot serve on at most max readers
// at once. A reader takes either one misrouted command (scanReceipt
// follows it to its re-published copy) or every queued command of its
// key's partition (a batch: one reader over the changelog and the DLQ,
// completing each by its command's position, as the watcher does).
//
// Its goroutines are the Client's: each exits when the queue is empty or
// Close cancels ctx. Invariant: running <= max; a job is in queue, in one
// batch's waiting, or done.
type scans struct {
	c    *Client
	max  int
	ctx  context.Context // cancelled by Close
	stop context.CancelFunc

	mu      sync.Mutex
	queue   []*scanJob
	running int
	wg      sync.WaitGroup
}

// scanJob is one receipt waited for by a scan. done is called once.
type scanJob struct {
	ctx    context.Context
	p      Published
	single bool // misrouted, or its partition unknown: a scanReceipt of its own
	done   func(topics.MemberRecord, error)
	once   sync.Once

	// guarded by scans.mu
	gone  bool   // completed; skipped when met in the queue
	batch *batch // the batch reading for it, once out of the queue
}

func (j *scanJob) complete(rec topics.MemberRecord, err error) {
	j.once.Do(func() { j.done(rec, err) })
}

// batch is the jobs one shared reader looks for, by their commands'
// positions; cancel, set once the read starts, ends it once none is left.
type batch struct {
	waiting map[position][]*scanJob
	cancel  context.CancelFunc
}

func newScans(c *Client, n int) *scans {
	ctx, stop := context.WithCancel(context.Background())
	return &scans{c: c, max: n, ctx: ctx, stop: stop}
}

// add queues j, starting a reader's goroutine when fewer than max run.
// When j's context ends first, j is completed with why.
func (s *scans) add(j *scanJob) {
	s.mu.Lock()
	if s.ctx.Err() != nil {
		s.mu.Unlock()
		j.complete(topics.MemberRecord{}, fmt.Errorf("client: closed while waiting for a receipt"))
		return
	}
	s.queue = append(s.queue, j)
	if s.running < s.max {
		s.running++
		s.wg.Add(1)
		go s.work()
	}
	s.mu.Unlock()
	context.AfterFunc(j.ctx, func() {
		s.drop(j)
		j.complete(topics.MemberRecord{}, fmt.Errorf("client: no receipt for the %s on %s yet (is the processor running?): %w",
			describe(j.p), s.c.topics.Changelog, context.Cause(j.ctx)))
	})
}

// drop takes j out of the queue or its batch, ending the batch's read
// when j was the last it looked for.
func (s *scans) drop(j *scanJob) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j.gone = true
	b := j.batch
	if b == nil {
		return // skipped when met in the queue
	}
	at := positionOf(j.p)
	b.waiting[at] = slices.DeleteFunc(b.waiting[at], func(x *scanJob) bool { return x == j })
	if len(b.waiting[at]) == 0 {
		delete(b.waiting, at)
	}
	if len(b.waiting) == 0 && b.cancel != nil {
		b.cancel()
	}
}

// work runs queued jobs until the queue is empty or the client closes.
func (s *scans) work() {
	defer s.wg.Done()
	for {
		single, b, from := s.next()
		switch {
		case single != nil:
			// Its own deadline, or Close, whichever comes first.
			ctx, cancel := context.WithCancel(single.ctx)
			stop := context.AfterFunc(s.ctx, cancel)
			rec, err := s.c.scanReceipt(ctx, single.p)
			stop()
			cancel()
			single.complete(rec, err)
		case b != nil:
			s.read(b, from)
		default:
			return
		}
	}
}

// next takes the queue's first job when it is misrouted, or else every
// queued job of its key's partition into a batch, from the earliest of
// their timestamps; nothing, and one reader fewer running, when the queue
// is empty or the client closed.
func (s *scans) next() (*scanJob, *batch, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	live := s.queue[:0]
	for _, j := range s.queue {
		if !j.gone {
			live = append(live, j)
		}
	}
	clear(s.queue[len(live):])
	s.queue = live
	if len(s.queue) == 0 || s.ctx.Err() != nil {
		s.running--
		return nil, nil, time.Time{}
	}
	if j := s.queue[0]; j.single {
		s.queue = s.queue[1:]
		j.gone = true // out of the queue: its AfterFunc finds no batch
		return j, nil, time.Time{}
	}
	b := &batch{waiting: make(map[position][]*scanJob)}
	var from time.Time
	rest := s.queue[:0]
	for _, j := range s.queue {
		if j.single {
			rest = append(rest, j)
			continue
		}
		at := positionOf(j.p)
		b.waiting[at] = append(b.waiting[at], j)
		j.batch = b
		if from.IsZero() || j.p.Timestamp.Before(from) {
			from = j.p.Timestamp
		}
	}
	clear(s.queue[len(rest):])
	s.queue = rest
	return nil, b, from
}

// read looks for every job of b with one reader of the changelog and the
// DLQ from from on, until none is left.
func (s *scans) read(b *batch, from time.Time) {
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	s.mu.Lock()
	if len(b.waiting) == 0 {
		s.mu.Unlock()
		return
	}
	b.cancel = cancel
	s.mu.Unlock()
	rd, err := s.batchReader(ctx, from)
	if err != nil {
		s.failBatch(b, err)
		return
	}
	defer rd.Close()
	type found struct {
		j *scanJob
		a answer
	}
	for {
		fetches := rd.PollFetches(ctx)
		if ctx.Err() != nil {
			s.failBatch(b, fmt.Errorf("client: closed while waiting for a receipt"))
			return
		}
		if err := fetchErr(fetches); err != nil {
			s.failBatch(b, fmt.Errorf("client: receipt scan: %w", err))
			return
		}
		var done []found
		s.mu.Lock()
		fetches.EachRecord(func(r *kgo.Record) {
			at, a, ok := s.c.answerOf(r)
			if !ok {
				return
			}
			for _, j := range b.waiting[at] {
				j.gone = true
				done = append(done, found{j, a})
			}
			delete(b.waiting, at)
		})
		left := len(b.waiting)
		s.mu.Unlock()
		for _, d := range done {
			if d.a.refused != nil {
				r := *d.a.refused
				r.Published = d.j.p
				d.j.complete(topics.MemberRecord{}, &r)
				continue
			}
			d.j.complete(d.a.rec, nil)
		}
		if left == 0 {
			return
		}
	}
}

// batchReader makes the reader of a batch: the changelog and, where it
// may, the DLQ, from the first offsets that may hold a record stamped at
// or after from.
func (s *scans) batchReader(ctx context.Context, from time.Time) (*kgo.Client, error) {
	offsets := make(map[string]map[int32]kgo.Offset)
	for _, topic := range []topics.Topic{s.c.topics.Changelog, s.c.topics.DLQ} {
		at, err := s.c.readFrom(ctx, topic, from)
		switch {
		case topic == s.c.topics.DLQ && err != nil:
			continue // as in scanReceipt: the DLQ only makes a refusal known sooner
		case err != nil:
			return nil, fmt.Errorf("client: receipt scan: %w", err)
		}
		offsets[string(topic)] = at
	}
	rd, err := s.c.reader("", kgo.ConsumePartitions(offsets))
	if err != nil {
		return nil, fmt.Errorf("client: receipt scan: %w", err)
	}
	return rd, nil
}

// failBatch completes every job still in b with err.
func (s *scans) failBatch(b *batch, err error) {
	s.mu.Lock()
	var left []*scanJob
	for at, js := range b.waiting {
		for _, j := range js {
			j.gone = true
			left = append(left, j)
		}
		delete(b.waiting, at)
	}
	s.mu.Unlock()
	for _, j := range left {
		j.complete(topics.MemberRecord{}, fmt.Errorf("client: WaitReceipt of %s: %w", describe(j.p), err))
	}
}

// close fails the queued jobs and waits for the readers' goroutines,
// which fail the jobs they read for.
func (s *scans) close() {
	s.mu.Lock()
	s.stop()
	queued := s.queue
	s.queue = nil
	s.mu.Unlock()
	for _, j := range queued {
		j.complete(topics.MemberRecord{}, fmt.Errorf("client: closed while waiting for a receipt"))
	}
	s.wg.Wait()
}
