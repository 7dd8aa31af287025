package fanout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/pkg/gate"
	"github.com/cohortgate/cohortgate/pkg/membership"
	"github.com/cohortgate/cohortgate/topics"
)

// Store is what the processor needs of durable membership state. A
// *membership.Store satisfies it.
type Store interface {
	NewBatch() *membership.Batch
	Checkpoint(topic string, partition int32) (next int64, ok bool, err error)
	Restore(ctx context.Context, fn func(membership.Member) error) (membership.RestoreStats, error)
	Member(userID uint64) (membership.Member, error)
	Outbox(fn func(seq uint64, value []byte) error) error
	DeleteOutbox(through uint64) error
}

var _ Store = (*membership.Store)(nil)

// Processor gates signals against membership commands and forwards what
// it allows. Make one with New and call Run once.
type Processor struct {
	cfg   Config
	store Store
	gate  *gate.Map
	m     *metrics
	log   *slog.Logger

	claims  claims
	outbox  outbox
	refused refusals // records the broker refused, to settle otherwise when met again

	// signalPartitions is the partition count of both input topics, and
	// changelogPartitions the changelog's; lim the topics' size limits. Run
	// sets them before any goroutine that reads them starts.
	signalPartitions    int32
	changelogPartitions int32
	lim                 limits
	cmds                *kgo.Client  // commands consumer, owned by Run
	recov               *kgo.Client  // changelog reader of window recovery, owned by Run
	adm                 *kadm.Client // admin and offsets, owned by Run
	admCl               *kgo.Client  // adm's client, for requests kadm makes heavier (see listEnds)

	// applierDone is closed when the commands side has exited: on
	// shutdown the signals side then drains the outbox one last time.
	applierDone <-chan struct{}

	restored  atomic.Bool
	started   atomic.Bool // topics checked, clients running
	held      atomic.Int64
	heldBytes atomic.Int64
	halt      context.CancelCauseFunc

	misroute struct {
		sync.Mutex
		last   time.Time
		quiet  int // warnings suppressed since last
		window time.Duration
	}
}

// New checks cfg and makes a Processor over store. It registers the
// processor's metrics with cfg.Registerer.
func New(cfg Config, store Store) (*Processor, error) {
	cfg.Brokers = append([]string(nil), cfg.Brokers...)
	cfg.KafkaOpts = append([]kgo.Opt(nil), cfg.KafkaOpts...)
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("fanout: invalid config:\n%w", err)
	}
	if store == nil {
		return nil, errors.New("fanout: nil store")
	}
	p := &Processor{
		cfg:   cfg,
		store: store,
		gate:  gate.New(),
		log:   cfg.Logger,
	}
	p.outbox.store = store
	p.misroute.window = 10 * time.Second
	m, err := newMetrics(cfg.Registerer, gauges{
		gateMembers: func() float64 { return float64(p.gate.Len()) },
		gateBytes:   func() float64 { return float64(p.gate.MemoryBytes()) },
		heldSignals: func() float64 { return float64(p.held.Load()) },
		heldBytes:   func() float64 { return float64(p.heldBytes.Load()) },
		owned:       func() float64 { return float64(p.claims.len()) },
		restoring:   func() float64 { return float64(p.restoring()) },
		outbox:      func() float64 { return float64(p.outbox.stored.Load()) },
		ready: func() float64 {
			if ok, _ := p.Ready(); ok {
				return 1
			}
			return 0
		},
	})
	if err != nil {
		return nil, fmt.Errorf("fanout: unable to register metrics: %w", err)
	}
	p.m = m
	return p, nil
}

// Ready reports whether the processor forwards: the gate is restored, the
// topics are checked, and every owned partition has caught up with its
// commands. When not ready, why says what it waits for.
func (p *Processor) Ready() (ok bool, why string) {
	switch {
	case !p.restored.Load():
		return false, "restoring membership state from the local store"
	case !p.started.Load():
		return false, "connecting to Kafka and checking topics"
	}
	if n := p.restoring(); n > 0 {
		return false, fmt.Sprintf("%d partition(s) catching up with their commands", n)
	}
	return true, "ready"
}

func (p *Processor) restoring() int {
	n := 0
	for _, c := range p.claims.all() {
		if !c.caughtUp.Load() {
			n++
		}
	}
	return n
}

// PartitionStatus is the state of one owned partition.
type PartitionStatus struct {
	Partition int32
	// CaughtUp is true once the partition's commands were applied through
	// an end offset observed after its assignment: it forwards.
	CaughtUp bool
	// OpenTransaction is how long the partition's commands have been held
	// by a transaction left open on them (everything below the last stable
	// offset applied, records above it); 0 when they are not. Signals of
	// the partition wait while it lasts.
	OpenTransaction time.Duration
}

// Partitions lists the partitions this instance owns, ordered by number.
func (p *Processor) Partitions() []PartitionStatus {
	now := p.cfg.Now().UnixNano()
	var out []PartitionStatus
	for _, c := range p.claims.all() {
		st := PartitionStatus{Partition: c.partition, CaughtUp: c.caughtUp.Load()}
		if since := c.openTxnSinceNs.Load(); since != 0 {
			st.OpenTransaction = time.Duration(max(now-since, 0))
		}
		out = append(out, st)
	}
	return out
}

// Member returns the user's record as the changelog carries it: status,
// history, late-leave windows, and the command that last changed it with
// its receipt. A user never seen is Active with no history.
func (p *Processor) Member(userID uint64) (topics.MemberRecord, error) {
	m, err := p.store.Member(userID)
	if err != nil {
		return topics.MemberRecord{}, err
	}
	var note topics.Note
	if len(m.Note) > 0 {
		if note, err = topics.DecodeNote(m.Note); err != nil {
			return topics.MemberRecord{}, fmt.Errorf("user %d: %w", userID, err)
		}
	}
	return changelogOf(m, note), nil
}

// Run restores the gate, checks the topics, and processes until ctx is
// done or a fatal error occurs, which it returns. On cancellation it
// finishes and commits in-flight work, leaves the group and returns nil.
func (p *Processor) Run(ctx context.Context) error {
	ctx, halt := context.WithCancelCause(ctx)
	defer halt(nil)
	p.halt = halt
	if err := p.restoreGate(ctx); err != nil {
		return err
	}
	if err := p.connect(ctx); err != nil {
		return err
	}
	defer p.adm.Close()
	defer p.cmds.Close()
	defer p.recov.Close()
	if err := p.loadOutbox(); err != nil {
		return err
	}

	var wg sync.WaitGroup
	run := func(name string, fn func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(ctx); err != nil {
				halt(fmt.Errorf("%s: %w", name, err))
			}
		}()
	}
	applierDone := make(chan struct{})
	p.applierDone = applierDone
	run("commands", func(ctx context.Context) error {
		defer close(applierDone)
		return (&applier{p: p, cl: p.cmds, kp: newKeyPartition()}).run(ctx)
	})
	run("alignment", p.track)
	p.started.Store(true)
	err := p.signals(ctx)
	halt(err)
	wg.Wait()
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return nil
}

// signals runs the signals side, replacing its session whenever the
// outcome of a transaction is unknown.
func (p *Processor) signals(ctx context.Context) error {
	for ctx.Err() == nil {
		s, err := p.newSession()
		if err != nil {
			return err
		}
		err = newLoop(p, s).run(ctx)
		s.close() // leaves the group; the revoke callback drops the claims
		switch {
		case errors.Is(err, errReplaceSession):
			p.log.Warn("replacing the Kafka session", "err", err)
		case err != nil:
			return err
		}
	}
	return nil
}

func (p *Processor) loadOutbox() error {
	var items []outboxItem
	err := p.store.Outbox(func(seq uint64, value []byte) error {
		e, err := decodeOutbox(value)
		if err != nil {
			return fmt.Errorf("outbox entry %d: %w", seq, err)
		}
		items = append(items, outboxItem{seq: seq, e: e})
		return nil
	})
	if err != nil {
		return fmt.Errorf("unable to load the outbox: %w", err)
	}
	if len(items) > 0 {
		p.log.Info("records from before the last stop will be produced again", "outbox", len(items))
	}
	p.outbox.add(items...)
	return nil
}

// warnMisrouted logs a misrouted record, at most once per window.
func (p *Processor) warnMisrouted(r *kgo.Record, want int32) {
	p.misroute.Lock()
	defer p.misroute.Unlock()
	now := time.Now()
	if now.Sub(p.misroute.last) < p.misroute.window {
		p.misroute.quiet++
		return
	}
	p.log.Warn("record in the wrong partition for its key; re-published to the key's murmur2 partition "+
		"(producers must use Kafka's default partitioner; kcat: -X partitioner=murmur2_random)",
		"topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "want", want,
		"suppressed", p.misroute.quiet)
	p.misroute.last, p.misroute.quiet = now, 0
}
