package workload

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/integration/oracle"
	"github.com/cohortgate/cohortgate/topics"
)

// Phases of Produce, as Progress reports them.
const (
	PhaseSignals = "producing" // signals and commands going out
	PhaseFlush   = "flushing"  // the friendly load handed to the client; waiting for acknowledgements
	PhaseHostile = "hostile"   // the friendly load acknowledged; hostile scenes still playing
	PhaseDone    = "done"      // everything acknowledged
)

// Progress is how far Produce got.
type Progress struct {
	Phase    string
	Signals  int // friendly signals handed to the client
	Acked    int // friendly signals acknowledged by Kafka
	Commands int // friendly commands acknowledged by Kafka
	// The hostile mix, acknowledged by Kafka.
	Scenes         int // scenes played to their end
	HostileSignals int // signals (their ids follow the friendly ones)
	HostileRecords int // commands and poison records
	Elapsed        time.Duration
}

// Records returns the records handed to Kafka so far, signals and commands.
func (p Progress) Records() int { return p.Signals + p.Commands + p.HostileSignals + p.HostileRecords }

// SignalIDs returns how many signal ids the load used: 0..SignalIDs-1.
func (p Progress) SignalIDs() int { return p.Signals + p.HostileSignals }

// Rate returns the records per second so far.
func (p Progress) Rate() float64 {
	if p.Elapsed <= 0 {
		return 0
	}
	return float64(p.Records()) / p.Elapsed.Seconds()
}

func (p Progress) String() string {
	s := fmt.Sprintf("%s: %d/%d signals acknowledged, %d commands", p.Phase, p.Acked, p.Signals, p.Commands)
	if p.Scenes > 0 || p.HostileSignals > 0 || p.HostileRecords > 0 {
		s += fmt.Sprintf(", hostile: %d scenes, %d signals, %d other records", p.Scenes, p.HostileSignals, p.HostileRecords)
	}
	return s + fmt.Sprintf(", %.0f records/s, %v", p.Rate(), p.Elapsed.Round(time.Millisecond))
}

// progressEvery bounds how often Produce calls its progress callback.
const progressEvery = time.Second

// Produce writes plan to set's signals and commands topics with c and
// returns once every record is acknowledged, or at the first error. With
// several routes (set.Routes), every signal goes to every input: the same
// key, value, headers and timestamp, so one leave must gate each copy. It
// calls progress (if not nil) from its own goroutine at most once a
// second, and once at the end.
//
// The friendly load goes out with c.Load: signals asynchronously with the
// wall clock as their timestamp, each command synchronously, stamped with
// at_ns = the wall clock just before it is produced (see the package
// documentation for why). Meanwhile a goroutine of Produce plays the
// plan's hostile scenes with c.Hostile and c.Txn, each at its point of the
// friendly load (or back to back when Rate is 0); Produce returns when
// both are done.
func Produce(ctx context.Context, c *Clients, set topics.Set, plan *Plan, progress func(Progress)) (Progress, error) {
	cfg := plan.Config
	start := time.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		acked atomic.Int64
		fail  firstError
	)
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			fail.set(err)
			return
		}
		acked.Add(1)
	}
	mirrored := func(_ *kgo.Record, err error) { // a copy on a further route; Acked counts signals, not copies
		if err != nil {
			fail.set(err)
		}
	}
	hostile := newPlayer(c, set, cfg)
	hostileDone := make(chan error, 1)
	go func() {
		err := playScenes(ctx, hostile, plan, start)
		if err != nil {
			cancel() // the friendly load stops too
		}
		hostileDone <- err
	}()

	st := Progress{Phase: PhaseSignals}
	report := func() {
		st.Elapsed = time.Since(start)
		st.Acked = int(acked.Load())
		st.Scenes = int(hostile.scenes.Load())
		st.HostileSignals = int(hostile.signals.Load())
		st.HostileRecords = int(hostile.records.Load())
		if progress != nil {
			progress(st)
		}
	}
	lastReport := start
	maybeReport := func() {
		if now := time.Now(); now.Sub(lastReport) >= progressEvery {
			lastReport = now
			report()
		}
	}
	asyncErr := func() error {
		if err := fail.get(); err != nil {
			return fmt.Errorf("workload: producing signals: %w", err)
		}
		return nil
	}

	left := make(map[uint64]int64) // users whose leave Kafka acknowledged, and its boundary
	next := 0                      // next command of the plan
	commands := func(before int) error {
		for ; next < len(plan.Commands) && plan.Commands[next].Before == before; next++ {
			cmd := plan.Commands[next]
			at, err := produceCommand(ctx, c.Load, set, cmd)
			if err != nil {
				return err
			}
			if _, ok := left[cmd.User]; cmd.Op == topics.Leave && !ok {
				left[cmd.User] = at // a second leave is later: the first boundary stays
			} else if cmd.Op == topics.Rejoin {
				delete(left, cmd.User)
			}
			st.Commands++
			maybeReport()
		}
		return nil
	}

	var value []byte
	friendly := func() error {
		for seq, user := range plan.SignalUsers() {
			if err := commands(seq); err != nil {
				return err
			}
			if seq%1024 == 0 {
				if err := asyncErr(); err != nil {
					return err
				}
				if err := ctx.Err(); err != nil {
					return err
				}
				maybeReport()
			}
			if err := pace(ctx, start, seq, cfg.Rate); err != nil {
				return err
			}
			value = AppendValue(value[:0], uint64(seq), cfg.ValueSize)
			r := &kgo.Record{
				Topic:     string(set.Signals),
				Key:       topics.AppendUserID(nil, user),
				Value:     append([]byte(nil), value...),
				Timestamp: time.Now(),
			}
			if from, ok := left[user]; ok && r.Timestamp.UnixMilli()*int64(time.Millisecond) >= from {
				r.Headers = gatedHeaders()
			}
			for _, in := range set.Inputs()[1:] { // copied before r is handed over: the client writes to it
				cp := *r
				cp.Topic = string(in)
				c.Load.Produce(ctx, &cp, mirrored)
			}
			c.Load.Produce(ctx, r, promise)
			st.Signals++
		}
		if err := commands(cfg.Signals); err != nil {
			return err
		}
		st.Phase = PhaseFlush
		report()
		if err := c.Load.Flush(ctx); err != nil {
			return fmt.Errorf("workload: flushing signals: %w", err)
		}
		return asyncErr()
	}
	if err := friendly(); err != nil {
		cancel()
		if herr := <-hostileDone; herr != nil && !errors.Is(herr, context.Canceled) {
			return st, herr // the scene's error is why the friendly load stopped
		}
		return st, err
	}
	st.Phase = PhaseHostile
	for waiting := true; waiting; {
		t := time.NewTimer(progressEvery)
		select {
		case err := <-hostileDone:
			t.Stop()
			if err != nil {
				return st, err
			}
			waiting = false
		case <-t.C:
			report()
		}
	}
	st.Phase = PhaseDone
	report()
	return st, nil
}

// gatedHeaders mark a signal produced after its user's leave was
// acknowledged and stamped at or after its boundary: promise 1 holds for
// it, and the oracle judges its forwarding a leak whatever window covers it.
func gatedHeaders() []kgo.RecordHeader {
	return []kgo.RecordHeader{{Key: oracle.HeaderExpect, Value: []byte(oracle.ExpectGated)}}
}

// playScenes plays plan's scenes with p, scene i when the friendly load is
// at its Scene.At (paced by the plan's rate; back to back at rate 0), and
// returns at the first error or once all are played.
func playScenes(ctx context.Context, p *player, plan *Plan, start time.Time) error {
	span := time.Duration(0)
	if plan.Config.Rate > 0 {
		span = time.Duration(float64(plan.Config.Signals) / plan.Config.Rate * float64(time.Second))
	}
	for _, s := range plan.Scenes {
		if err := Sleep(ctx, time.Until(start.Add(time.Duration(s.At*float64(span))))); err != nil {
			return err
		}
		if err := p.play(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// firstError keeps the first error reported by any goroutine.
type firstError struct {
	mu  sync.Mutex
	err error
}

func (f *firstError) set(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
}

func (f *firstError) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// produceCommand produces c and waits for its acknowledgement. It returns
// the command's boundary, in ns.
func produceCommand(ctx context.Context, cl *kgo.Client, set topics.Set, c Command) (int64, error) {
	now := time.Now()
	value := topics.AppendCommand(nil, topics.Command{
		Op: c.Op, UserID: c.User, AtNs: uint64(now.UnixNano()), HasAt: true,
		RequestID: strconv.Itoa(c.Index),
	})
	r := &kgo.Record{Topic: string(set.Commands), Key: topics.AppendUserID(nil, c.User), Value: value, Timestamp: now}
	if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		return 0, fmt.Errorf("workload: producing command %d (%s of user %d): %w", c.Index, c.Op, c.User, err)
	}
	return now.UnixNano(), nil
}

// pace sleeps until signal seq is due at rate signals/s from start. A
// rate of 0 never sleeps.
func pace(ctx context.Context, start time.Time, seq int, rate float64) error {
	if rate <= 0 {
		return nil
	}
	due := start.Add(time.Duration(float64(seq) / rate * float64(time.Second)))
	wait := time.Until(due)
	if wait < 2*time.Millisecond {
		return nil // sleeping for less costs more than it paces
	}
	return Sleep(ctx, wait)
}

// Sleep waits d, or until ctx ends, and returns ctx's error then. It is for
// pacing load and chaos, never a way to wait for a condition.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Topics names a run's five topics after prefix: <prefix>.commands,
// <prefix>.signals, <prefix>.cohort, <prefix>.dlq and <prefix>.changelog.
func Topics(prefix string) topics.Set {
	return topics.Set{
		Commands:  topics.Topic(prefix + ".commands"),
		Signals:   topics.Topic(prefix + ".signals"),
		Cohort:    topics.Topic(prefix + ".cohort"),
		DLQ:       topics.Topic(prefix + ".dlq"),
		Changelog: topics.Topic(prefix + ".changelog"),
	}
}

// TopicFlags are the command-line flags naming set's topics, as
// `processor run` and `loadgen` take them; with several routes, every
// route is a --route IN=OUT.
func TopicFlags(set topics.Set) []string {
	flags := []string{"--commands-topic", string(set.Commands), "--dlq-topic", string(set.DLQ), "--changelog-topic", string(set.Changelog)}
	if len(set.Routes) == 0 {
		return append(flags, "--signals-topic", string(set.Signals), "--cohort-topic", string(set.Cohort))
	}
	for _, r := range set.AllRoutes() {
		flags = append(flags, "--route", r.String())
	}
	return flags
}

// CreateTopics creates the topics of set that are missing, as the
// processor would (set.Specs: the commands topic co-partitioned with the
// signals topic and kept forever), with partitions partitions and the
// given replication factor (-1: the broker's default). It then waits until
// every topic is visible and checks that the commands and signals topics
// have the same partition count.
func CreateTopics(ctx context.Context, adm *kadm.Client, set topics.Set, partitions int32, replication int16) error {
	if err := set.Validate(); err != nil {
		return err
	}
	for _, s := range set.Specs() {
		configs := make(map[string]*string, len(s.Configs))
		for k, v := range s.Configs {
			configs[k] = kadm.StringPtr(v)
		}
		resp, err := adm.CreateTopic(ctx, partitions, replication, configs, string(s.Topic))
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("workload: unable to create topic %s: %w", s.Topic, err)
		}
	}
	var names []string
	for _, s := range set.Specs() {
		names = append(names, string(s.Topic))
	}
	return poll(ctx, 60*time.Second, func() error {
		td, err := adm.ListTopics(ctx, names...)
		if err != nil {
			return err
		}
		for _, n := range names {
			if d, ok := td[n]; !ok || d.Err != nil || len(d.Partitions) == 0 {
				return fmt.Errorf("topic %s not visible yet", n)
			}
		}
		for _, in := range set.Inputs() {
			if c, s := len(td[string(set.Commands)].Partitions), len(td[string(in)].Partitions); c != s {
				return &permanentError{fmt.Errorf("workload: commands topic %s has %d partitions, input %s has %d: they must be equal",
					set.Commands, c, in, s)}
			}
		}
		return nil
	})
}

// permanentError stops poll at once.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// poll retries cond until it returns nil, a *permanentError, or d passes
// (or ctx ends); it returns cond's last error then.
func poll(ctx context.Context, d time.Duration, cond func() error) error {
	deadline := time.Now().Add(d)
	wait := 10 * time.Millisecond
	for {
		err := cond()
		var perm *permanentError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &perm):
			return perm.err
		case time.Now().After(deadline):
			return fmt.Errorf("not within %v: %w", d, err)
		}
		if serr := Sleep(ctx, wait); serr != nil { // polling interval of a condition with a deadline
			return fmt.Errorf("%w (last: %v)", serr, err)
		}
		wait = min(wait*2, 500*time.Millisecond)
	}
}
