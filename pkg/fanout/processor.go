package fanout

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/pkg/gate"
	"github.com/cohortgate/cohortgate/topics"
)

// Processor gates signals against membership commands and forwards what
// it allows. Make one with New and call Run once. It holds what its parts
// share and wires them in Run; none of them reaches back into it.
type Processor struct {
	cfg    Config
	store  Store
	gate   *gate.Map
	m      *metrics
	series []routeSeries // the routes' per-signal series
	ev     EventListener // Config.EventListener, the metrics' and the log's
	clk    *clock        // Config.Now and Config.Monotonic: see clock.go

	claims claims
	// regate is what a gate loaded from a snapshot older than the store
	// still owes it (snapshot.go).
	regate  regate
	outbox  outbox
	refused refusals // records the broker refused, to settle otherwise when met again
	lim     limits   // filled by connect
	stall   *stallWatch

	restored  atomic.Bool
	started   atomic.Bool // topics checked, clients running
	joined    atomic.Bool // the group assigned the current session its partitions (ownership.assignedOnce)
	held      atomic.Int64
	heldBytes atomic.Int64

	// partitions is the commands' partition count of the run under way,
	// 0 between runs: Member places a user with it.
	partitions atomic.Int32

	// betweenRuns says why Run is starting again (see Run), nil while a
	// run is under way.
	betweenRuns atomic.Pointer[string]

	// run is the context of the current Run, nil before the first. Once
	// it is done the processor is ending, halted or stopped, and not
	// ready, though it keeps its caught-up partitions until it has left
	// the group, and the flags above stay as they were.
	run atomic.Pointer[runContext]

	// outputs is the check of the run under way's outputs that its
	// sessions ask before each commit (topicids.go), nil between runs.
	outputs atomic.Pointer[outputsCheck]
}

// New checks cfg and makes a Processor over store. It registers the
// processor's metrics with cfg.Registerer.
func New(cfg Config, store Store) (*Processor, error) {
	cfg.Brokers = append([]string(nil), cfg.Brokers...)
	cfg.KafkaOpts = append([]kgo.Opt(nil), cfg.KafkaOpts...)
	cfg.Topics = cfg.Topics.Clone()
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("fanout: invalid config:\n%w", err)
	}
	if store == nil {
		return nil, errors.New("fanout: nil store")
	}
	p := &Processor{cfg: cfg, store: store, gate: gate.New(), clk: newClock(cfg.Now, cfg.Monotonic)}
	p.outbox.store = store
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
		stalled: func() float64 { return p.stall.stalledFor().Seconds() },
		openTxns: func() map[int32]float64 {
			out := make(map[int32]float64)
			for _, st := range p.Partitions() {
				out[st.Partition] = st.OpenTransaction.Seconds()
			}
			return out
		},
	})
	if err != nil {
		return nil, fmt.Errorf("fanout: unable to register metrics: %w", err)
	}
	p.m = m
	var inputs []string
	for _, in := range cfg.Topics.Inputs() {
		inputs = append(inputs, string(in))
	}
	p.series = m.routes(inputs)
	p.stall = newStallWatch(&p.cfg)
	p.ev = TeeEventListener(TeeEventListener(TeeEventListener(m.listener(), MakeLoggingEventListener(cfg.Logger)),
		p.stall.listener()), cfg.EventListener)
	p.stall.ev = p.ev
	return p, nil
}

// runContext is what Ready keeps of a Run.
type runContext struct{ ctx context.Context }

// Ready reports whether the processor forwards: Run is running and not
// ending, the gate is restored, the topics are checked, the consumer group
// has assigned this instance its partitions (perhaps none, when the group
// has more instances than partitions), and every owned partition has
// caught up with its commands, and no stall lasts (the signals side
// made progress within Config.StallTimeout: see StallCause). When not
// ready, why says what it waits for, or why the processor stopped.
func (p *Processor) Ready() (ok bool, why string) {
	r := p.run.Load()
	switch {
	case p.betweenRuns.Load() != nil:
		return false, *p.betweenRuns.Load()
	case r == nil:
		return false, "not started"
	case r.ctx.Err() != nil:
		if cause := context.Cause(r.ctx); !errors.Is(cause, context.Canceled) {
			return false, "halted: " + cause.Error()
		}
		return false, "stopping or stopped"
	case !p.restored.Load():
		return false, "restoring membership state from the local store"
	case !p.started.Load():
		return false, "connecting to Kafka and checking topics"
	case !p.joined.Load():
		return false, "joining the consumer group"
	}
	if s := p.stall.current(); s != nil {
		return false, fmt.Sprintf("stalled (%s) for %v: %v", s.Cause, p.stall.lasted(s).Round(time.Second), s)
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
	// Inputs are the partition of every route's input, in route order.
	Inputs []InputStatus
	// Waiting says what the partition waits for before it can catch up,
	// when it waits for more than its commands: a restore from the
	// changelog held by an open transaction, commands of its users in
	// other partitions. Empty otherwise.
	Waiting string
	// Stalled says how the partition makes no progress, when a stall
	// lasts that concerns it (its own, or every partition's: see
	// StallCause). Empty otherwise.
	Stalled string
	// Restore says how far the partition's restore from the changelog
	// is, while one runs (an owner with no state for it); nil otherwise.
	Restore *RestoreProgressInfo
}

// InputStatus is an owned partition of one route's input.
type InputStatus struct {
	Topic string
	// Next is one past the highest offset decided since this instance
	// took the partition over, -1 before the first: a command applied now
	// is enforced from it on (the receipts' offsets).
	Next int64
}

// Partitions lists the partitions this instance owns, ordered by number.
func (p *Processor) Partitions() []PartitionStatus {
	now := p.clk.monoNow()
	stall := p.stall.current()
	var out []PartitionStatus
	for _, c := range p.claims.all() {
		st := PartitionStatus{Partition: c.partition, CaughtUp: c.caughtUp.Load(), Waiting: c.waiting()}
		if rp, ok := c.progress.current(); ok {
			st.Restore = &rp
		}
		if stall != nil && (stall.Partition < 0 || stall.Partition == c.partition) {
			st.Stalled = stall.String()
		}
		for i, in := range p.cfg.Topics.Inputs() {
			st.Inputs = append(st.Inputs, InputStatus{Topic: string(in), Next: c.deciding[i].Load()})
		}
		if since := c.openTxnSince.Load(); c.openTxn.Load() {
			st.OpenTransaction = time.Duration(max(now-since, 0))
		}
		out = append(out, st)
	}
	return out
}

// Member returns the user's record as the changelog carries it: status,
// history, late-leave windows, and the command that last changed it with
// its receipt. A user never seen is Active with no history.
//
// Only the owner of a user's partition applies the user's commands; any
// other instance's store holds what it knew when it last owned the
// partition, or nothing. So Member answers only for a partition this
// instance owns and has caught up with its commands, and returns a
// *NotOwnerError otherwise.
func (p *Processor) Member(userID uint64) (topics.MemberRecord, error) {
	if err := p.owns(userID); err != nil {
		return topics.MemberRecord{}, err
	}
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

// owns returns nil when the user's partition is owned and caught up, a
// *NotOwnerError otherwise.
func (p *Processor) owns(userID uint64) error {
	n := p.partitions.Load()
	if n <= 0 {
		return &NotOwnerError{User: userID, Partition: -1}
	}
	part := newKeyPartition().of(topics.AppendUserID(nil, userID), n)
	c := p.claims.get(part)
	switch {
	case c == nil:
		return &NotOwnerError{User: userID, Partition: part}
	case !c.caughtUp.Load():
		return &NotOwnerError{User: userID, Partition: part, CatchingUp: true}
	}
	return nil
}

// Run restores the gate, checks the topics, and processes until ctx is
// done or a fatal error occurs, which it returns. On cancellation it
// finishes and commits in-flight work, leaves the group and returns nil.
//
// The gate is restored while Run connects to Kafka and joins the group,
// which takes what the broker takes (its group.initial.rebalance.delay.ms,
// 3s by default, before the first member of a group is answered): the
// commands side and the aligner start only once the gate is restored.
// Nothing else changes the gate or the store, and only the aligner marks a
// partition caught up, so no signal is decided before the gate is whole.
//
// When the topics change under it (a partition count, a topic ID: see
// layout.go), a run ends with its partitions, and Run starts again under
// the new layout; the change is reported to Config.EventListener.
//
// A change may take several steps (the commands grown, then each input):
// after a change, a start that finds the inputs not co-partitioned with
// the commands waits for them, not ready and saying why, and tries again
// every TopologyInterval. At the first start it is an error.
func (p *Processor) Run(ctx context.Context) error {
	changed := false
	for {
		err := p.runOnce(ctx)
		if ctx.Err() != nil {
			return stoppedWith(err)
		}
		var topo *TopologyChangedError
		var mismatch *PartitionMismatchError
		switch {
		case errors.As(err, &topo):
			changed = true
			p.ev.TopologyChanged(TopologyChangedInfo{Changes: topo.Changes})
			p.setBetweenRuns("the topics changed (" + strings.Join(topo.Changes, "; ") +
				"): every partition is taken again under the new layout")
		case changed && errors.As(err, &mismatch):
			p.setBetweenRuns("waiting for the topics to agree again: " + mismatch.Error())
			p.cfg.Logger.Warn("the topics changed and do not agree yet; every partition waits", "err", mismatch)
			if err := p.waitTopicsAgree(ctx); err != nil {
				return err
			}
		default:
			return err
		}
		p.restored.Store(false)
		p.started.Store(false)
		p.joined.Store(false)
		p.outbox.reset()
	}
}

// stoppedWith is Run's result for a run that ended while Run's context
// was done: a topology change met while stopping is not an error, since no
// run was to follow it anyway; any other error is returned.
func stoppedWith(err error) error {
	if _, ok := errors.AsType[*TopologyChangedError](err); ok {
		return nil
	}
	return err
}

// waitTopicsAgree waits until the inputs are co-partitioned with the
// commands again, listing them every TopologyInterval: a run started
// before would restore the gate only to find them still apart. It
// returns nil when they agree or ctx ends, and an error that a run could
// not go on from either (an authorization failure).
func (p *Processor) waitTopicsAgree(ctx context.Context) error {
	var lim limits
	cl, err := kgo.NewClient(clientOpts(&p.cfg, &lim, "cohortgate-admin")...)
	if err != nil {
		return fmt.Errorf("unable to create admin client: %w", err)
	}
	defer cl.Close()
	names := []string{string(p.cfg.Topics.Commands)}
	for _, in := range p.cfg.Topics.Inputs() {
		names = append(names, string(in))
	}
	t := time.NewTicker(p.cfg.TopologyInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		details, err := listTopics(ctx, cl, names)
		if fatal := notAuthorized("listing the topics", err); fatal != nil {
			return fatal
		}
		if err != nil || len(details) < len(names) {
			continue // missing topics: the run says so, or creates them
		}
		if coPartitioned(p.cfg.Topics, details) == nil {
			return nil
		}
	}
}

// setBetweenRuns says why the processor is not ready while Run starts
// again; "" once a run is under way.
func (p *Processor) setBetweenRuns(why string) {
	if why == "" {
		p.betweenRuns.Store(nil)
		return
	}
	p.betweenRuns.Store(&why)
}

// runOnce is one run of the processor under the topics' layout as it
// finds them, until ctx is done, a fatal error, or the topics change.
//
// It owns eight goroutines (nine with the applier's syncer) and returns
// only after all have exited: the restore, the signals loop (its own),
// the commands side, the aligner, the topics' watcher, the limits'
// watcher, the watch on the store (a failure in Pebble's background halts
// the run) and the stall watch (a stall that outlasts Config.StallHalt
// halts it).
func (p *Processor) runOnce(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	halt := func(err error) { cancel(err) }
	p.run.Store(&runContext{ctx})
	snap := gateSnapshot{path: p.cfg.GateSnapshot, topic: string(p.cfg.Topics.Commands), fs: p.cfg.Testing.SnapshotFS}
	restored := make(chan struct{}) // closed when the restore ends, p.restored set if it succeeded
	// Before any claim can be made: a claim waits for the restore only
	// when a snapshot older than the store may make it read its commands
	// again (see regate); without one, signals are fetched (and held)
	// while the gate is restored.
	p.regate.clear()
	if snap.path != "" && !p.cfg.Testing.UnsafeSkipCommands {
		p.regate.reset()
	}
	p.stall.restoreStarted()
	go func() {
		defer close(restored)
		defer p.stall.restoreEnded()
		defer p.regate.finish()
		rg := &p.regate
		if p.cfg.Testing.UnsafeSkipCommands {
			rg = nil // the commands a regate needs would be skipped: the snapshot must equal the store
		}
		info, err := restoreGate(ctx, p.store, p.gate, snap, rg)
		if err != nil {
			halt(err) // Run returns it, unless it was cancelled before
			return
		}
		p.ev.Restored(info)
		p.restored.Store(true)
	}()
	// afterRestore runs fn once the gate is restored, and not at all if
	// the restore failed or ctx ends first.
	afterRestore := func(fn func(context.Context) error) func(context.Context) error {
		return func(ctx context.Context) error {
			select {
			case <-restored:
			case <-ctx.Done():
				return nil
			}
			if !p.restored.Load() {
				return nil
			}
			return fn(ctx)
		}
	}
	// fail stops the restore and returns the first failure: the restore's
	// when it failed first.
	fail := func(err error) error {
		halt(err)
		<-restored
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
			return cause
		}
		return err
	}
	k, err := connect(ctx, &p.cfg, &p.lim)
	if err != nil {
		return fail(err)
	}
	defer k.close()
	p.partitions.Store(k.signalPartitions)
	defer p.partitions.Store(0)
	p.outputs.Store(&outputsCheck{set: p.cfg.Topics, found: k.outputs,
		list: func(ctx context.Context, names []string) (kadm.TopicDetails, error) {
			return listTopics(ctx, k.admCl, names)
		}})
	defer p.outputs.Store(nil)
	forgotten, err := p.adoptLayout(k.layout, restored)
	if err != nil {
		return fail(err)
	}
	n, err := p.outbox.load()
	if err != nil {
		return fail(err)
	}
	if n > 0 {
		p.cfg.Logger.Info("records from before the last stop will be produced again", "outbox", n)
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
	run("store", func(ctx context.Context) error {
		select {
		case <-p.store.Failed():
			return p.store.Err()
		case <-ctx.Done():
			return nil
		}
	})
	p.stall.reset()
	run("liveness", p.stall.run)
	run("topology", p.newWatcher(k).run)
	run("limits", func(ctx context.Context) error { return k.lim.watch(ctx, p.cfg.TopologyInterval, p.cfg.Logger) })
	applierDone := make(chan struct{})
	wake := make(chan struct{}, 1) // the group callbacks wake the applier
	ap := p.newApplier(k, snap, wake)
	run("commands", func(ctx context.Context) error {
		defer close(applierDone)
		return afterRestore(ap.run)(ctx)
	})
	run("alignment", afterRestore(p.newAligner(ctx, k).run))
	p.started.Store(true)
	p.setBetweenRuns("")
	own := p.newOwnership(k, forgotten, wake, halt)
	err = p.signals(ctx, k, own, applierDone, halt)
	halt(err)
	wg.Wait()
	<-restored
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	// Every goroutine has exited: nothing changes the store or the gate
	// any more, and unless a batch was cut short they are equal; a gate
	// whose restore did not finish is not saved.
	if snap.path != "" && p.restored.Load() && !ap.gateAhead {
		info, err := snap.save(p.store, p.gate, p.regate.lower)
		info.Err = err
		p.ev.SnapshotSaved(info)
	}
	return nil
}

// newWatcher makes the watch on the topics' counts and IDs of a run on k.
func (p *Processor) newWatcher(k *kafka) *watcher {
	return &watcher{interval: p.cfg.TopologyInterval, found: k.layout, topics: p.cfg.Topics,
		outputs: k.outputs, list: func(ctx context.Context, names []string) (kadm.TopicDetails, error) {
			return listTopics(ctx, k.admCl, names)
		},
		log: p.cfg.Logger, off: p.cfg.Testing.UnsafeIgnoreTopology}
}

// newApplier makes the commands side of a run on k, with what it uses
// when it takes a partition: the late-leave windows' recovery, the
// migration of commands, the restore from the changelog and the refill.
// snap is the run's gate snapshot, which it writes while running; wake is how the group callbacks tell it that claims changed.
func (p *Processor) newApplier(k *kafka, snap gateSnapshot, wake chan struct{}) *applier {
	rec := &recoverer{store: p.store, ev: p.ev, log: p.cfg.Logger, topic: p.cfg.Topics.Changelog,
		skip: p.cfg.Testing.UnsafeNoWindowRecovery,
		src: &changelogReader{clients: k.readers, adm: k.adm, raw: k.admCl, topic: string(p.cfg.Topics.Changelog),
			signalPartitions: k.signalPartitions, changelogPartitions: k.changelogPartitions,
			log: p.cfg.Logger}}
	commands := string(p.cfg.Topics.Commands)
	ap := &applier{cfg: &p.cfg, cl: k.cmds, store: p.store, gate: p.gate, claims: &p.claims, outbox: &p.outbox,
		ev: p.ev, lim: k.lim, partitions: k.signalPartitions, kp: newKeyPartition(), steps: p.m.stepTimer(), recover: rec,
		wake: wake, regate: &p.regate, snap: snap,
		listEnd: func(ctx context.Context, part int32) (int64, error) {
			ends, err := listEnds(ctx, k.admCl, commands, []int32{part}, isolationUncommitted)
			if err != nil {
				return 0, err
			}
			l, ok := ends[part]
			if !ok {
				return 0, fmt.Errorf("no end listed for %s partition %d", commands, part)
			}
			return l.end, nil
		},
		migrate: &migrator{cl: k.recov, prod: k.admCl, topic: commands, partitions: k.signalPartitions,
			kp: newKeyPartition(), ev: p.ev, mono: p.clk.monoNow},
		handover: &restorer{cfg: &p.cfg, store: p.store, gate: p.gate, rec: rec, ev: p.ev, budget: newMemBudget(p.cfg.RestoreMemory),
			changelogParts: k.changelogPartitions, layoutParts: k.signalPartitions,
			seek: func(part int32, offset int64) {
				k.cmds.SetOffsets(map[string]map[int32]kgo.EpochOffset{
					commands: {part: {Epoch: -1, Offset: offset}},
				})
			}}}
	ap.refill = &refiller{cfg: &p.cfg, store: p.store, claims: &p.claims, outbox: &p.outbox, kp: newKeyPartition(),
		partitions: k.signalPartitions, hand: ap.handRefill}
	return ap
}

// newAligner makes the aligner of a run on k; ctx is the run's, which a
// failed observation logs only while it lasts.
func (p *Processor) newAligner(ctx context.Context, k *kafka) *aligner {
	commands := string(p.cfg.Topics.Commands)
	var count func(ctx context.Context) (int32, error)
	if !p.cfg.Testing.UnsafeIgnoreTopology {
		count = func(ctx context.Context) (int32, error) { return partitionCount(ctx, k.meta, commands) }
	}
	return &aligner{interval: p.cfg.AlignInterval, clk: p.clk, topic: commands, lso: p.cfg.Testing.UnsafeObserveLSO,
		suspectFor: suspectFor,
		count:      count,
		partitions: k.signalPartitions,
		grown: func(found int32) error {
			return &TopologyChangedError{Changes: []string{fmt.Sprintf(
				"%s: %d partitions, %d when the run started (seen by the commands' observation)", commands, found, k.signalPartitions)}}
		},
		list: func(ctx context.Context, parts []int32, isolation int8) (map[int32]listed, error) {
			return listEnds(ctx, k.admCl, commands, parts, isolation)
		},
		owned: p.claims.alignments,
		regressed: func(partition int32, next, end int64, cause error) error {
			if cause != nil {
				return &CommandsGapError{Topic: commands, Partition: partition, Next: -1, End: -1, Err: cause}
			}
			return &CommandsGapError{Topic: commands, Partition: partition, Next: next, End: end}
		},
		listFailed: func(err error) error {
			if fatal := notAuthorized("listing "+commands+" end offsets", err); fatal != nil {
				return fatal
			}
			if ctx.Err() == nil {
				p.cfg.Logger.Warn("unable to observe commands end offsets", "err", err)
			}
			return nil
		},
		ev: p.ev}
}

// newOwnership makes the group callbacks' side of a run on k: forgotten
// says the store forgot its users for a new layout (adoptLayout), wake
// tells the applier that claims changed, halt ends the run.
func (p *Processor) newOwnership(k *kafka, forgotten bool, wake chan struct{}, halt func(error)) *ownership {
	commands := string(p.cfg.Topics.Commands)
	return &ownership{cfg: &p.cfg, clk: p.clk, layout: k.layout, migrating: forgotten, store: p.store, claims: &p.claims, regate: &p.regate, cmds: k.cmds,
		leaderEpoch: func(part int32) int32 {
			if _, epoch, err := k.cmds.PartitionLeader(commands, part); err == nil {
				return epoch
			}
			return -1
		},
		adm: k.adm, ev: p.ev, halt: halt, wake: wake,
		assignedOnce: &p.joined}
}

// adoptLayout makes the store's state one of the layout found: a store
// built under other commands or input counts forgets its users and
// checkpoints (once the gate's restore from it is over, and with the
// gate), and reports it; a store built from a commands topic that no
// longer exists is refused (CommandsRecreatedError). The layout is then
// the store's label.
func (p *Processor) adoptLayout(found layout, restored <-chan struct{}) (forgotten bool, err error) {
	raw, ok, err := p.store.Label(layoutLabel)
	if err != nil {
		return false, err
	}
	if ok {
		was, err := decodeLayout(raw)
		if err != nil {
			return false, err
		}
		if was.equal(found) {
			return false, nil
		}
		if was.Commands.ID != "" && was.Commands.Name == found.Commands.Name && was.Commands.ID != found.Commands.ID {
			return false, &CommandsRecreatedError{Topic: found.Commands.Name, StoreID: was.Commands.ID, Now: found.Commands.ID}
		}
		if was.countsDiffer(found) {
			<-restored // the gate is read from the store until then
			// A snapshot of the old layout's gate must never be brought
			// to the new store by its commands: users moved between
			// partitions without a command.
			if path := p.cfg.GateSnapshot; path != "" {
				if err := (gateSnapshot{fs: p.cfg.Testing.SnapshotFS}).files().Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
					return false, fmt.Errorf("unable to remove the gate snapshot of the old layout: %w", err)
				}
			}
			if err := p.store.Forget(); err != nil {
				return false, fmt.Errorf("unable to forget the state of the old layout: %w", err)
			}
			p.gate.Clear()
			p.regate.clear()
			forgotten = true
			p.ev.TopologyChanged(TopologyChangedInfo{Changes: was.changes(found), Forgotten: true})
		}
	}
	b := p.store.NewBatch()
	defer b.Close()
	if err := b.SetLabel(layoutLabel, found.encode()); err != nil {
		return forgotten, err
	}
	if err := b.Commit(); err != nil {
		return forgotten, fmt.Errorf("unable to record the topics' layout: %w", err)
	}
	return forgotten, nil
}

// signals runs the signals side, replacing its session whenever the
// outcome of a transaction is unknown.
func (p *Processor) signals(ctx context.Context, k *kafka, own *ownership, applierDone <-chan struct{}, halt func(error)) error {
	for ctx.Err() == nil {
		// The session's producer, its rules and its emitter share the
		// limits of one read: the emitter replaces the session when they
		// change (followLimits).
		lim := k.lim.now()
		rules := signalRules{partitions: k.signalPartitions, skew: p.cfg.MaxFutureSkew, grace: p.cfg.grace(), lim: lim}
		for _, r := range p.cfg.Topics.AllRoutes() {
			rules.outs = append(rules.outs, routeOut{topic: string(r.Out), limit: lim.of(string(r.Out))})
		}
		p.joined.Store(false) // a new session joins anew
		s, err := p.newSession(ctx, own, &lim)
		if err != nil {
			return err
		}
		l := newLoop(&p.cfg, p.clk, s, newEmitter(s, p.cfg.Topics, lim, k.lim, &p.refused, p.m, p.series, p.ev, halt))
		l.claims, l.gate, l.outbox, l.refused = &p.claims, p.gate, &p.outbox, &p.refused
		l.m, l.series, l.ev, l.rules, l.kp, l.halt = p.m, p.series, p.ev, rules, newKeyPartition(), halt
		l.applierDone, l.held, l.heldBytes, l.stall = applierDone, &p.held, &p.heldBytes, p.stall
		err = l.run(ctx)
		p.stall.loopStopped()
		s.close() // leaves the group; the revoke callback drops the claims
		switch {
		case errors.Is(err, errReplaceSession):
			p.cfg.Logger.Warn("replacing the Kafka session", "err", err)
		case err != nil:
			return err
		}
	}
	return nil
}

// newSession makes the signals session of the run whose context is ctx: a
// group member of every route's input whose assignments own answers,
// producing within lim.
func (p *Processor) newSession(ctx context.Context, own *ownership, lim *limits) (session, error) {
	var inputs []string
	for _, in := range p.cfg.Topics.Inputs() {
		inputs = append(inputs, string(in))
	}
	opts := append(clientOpts(&p.cfg, lim, "cohortgate-signals"),
		kgo.ConsumerGroup(p.cfg.Group),
		kgo.ConsumeTopics(inputs...),
		kgo.Balancers(balancerFor(inputs)),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Transaction markers are handed to take, which skips them: they
		// are how it knows a partition's position passed its last marker
		// (its lag, 0 when caught up), which franz-go does not report.
		kgo.KeepControlRecords(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(own.assigned),
		kgo.OnPartitionsRevoked(own.revoked),
		kgo.OnPartitionsLost(own.lost),
	)
	starts := newInputStarts(inputs, own.layout, p.cfg.Logger)
	starts.claims = &p.claims
	opts = append(opts, kgo.OnOffsetsFetched(starts.fetched), kgo.AdjustFetchOffsetsFn(starts.adjust))
	if p.cfg.SessionTimeout > 0 {
		opts = append(opts, kgo.SessionTimeout(p.cfg.SessionTimeout))
	}
	// How long the group waits for its members to rejoin a rebalance. A
	// member that crashed during one is removed only when it expires, and
	// until then no partition moves: franz-go's default, a minute, is that
	// long a stall of every partition's signals. The loop rejoins within
	// one cycle (its end bounded by endTimeout), so a little more suffices.
	opts = append(opts, kgo.RebalanceTimeout(p.endTimeout()+5*time.Second))
	if p.cfg.ExactlyOnce {
		s, err := newTxnSession(ctx, p.cfg.Group, inputs, p.endTimeout(), append(opts, kgo.TransactionalID(p.cfg.TransactionalID)))
		if err != nil {
			return nil, err
		}
		if c := p.outputs.Load(); c != nil {
			s.check = c.verify
		}
		return s, nil
	}
	s, err := newPlainSession(inputs, append(opts, kgo.DisableAutoCommit()))
	if err != nil {
		return nil, err
	}
	if c := p.outputs.Load(); c != nil {
		s.check = c.verify
	}
	return s, nil
}

// endTimeout bounds the end of a transaction: the session timeout
// (franz-go's default, 45s, when unset), at least 10s. By then a member
// that could not heartbeat has lost its partitions anyway.
func (p *Processor) endTimeout() time.Duration {
	d := p.cfg.SessionTimeout
	if d <= 0 {
		d = 45 * time.Second
	}
	return max(d, 10*time.Second)
}
