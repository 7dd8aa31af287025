package integration

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/pkg/membership"
	"github.com/cohortgate/cohortgate/topics"
)

// timeline is a seeded schedule of commands and signals in real time. Each
// user alternates leave and rejoin with event times far enough apart that
// the commands of one user are produced in event-time order whatever their
// delays; signals are produced at their event time; a command is produced
// delay after its event time (its boundary), delay drawn from [0, maxDelay].
type timeline struct {
	events []event
	cmds   map[uint64][]event // per user, in event-time order
}

type event struct {
	at      time.Time // event time: a signal's timestamp, a command's at_ns
	produce time.Time // when it is produced
	user    uint64
	op      topics.Op // 0 for a signal
	id      int
}

func (ev event) value() string { return "sig-" + strconv.Itoa(ev.id) }

func newTimeline(seed uint64, start time.Time, span, maxDelay time.Duration, users, signals int) *timeline {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	tl := &timeline{cmds: make(map[uint64][]event)}
	gap := maxDelay + 100*time.Millisecond
	for u := uint64(1); u <= uint64(users); u++ {
		at := start.Add(time.Duration(rng.Int64N(int64(span / 3))))
		for op := topics.Leave; at.Before(start.Add(span)); op = 3 - op {
			delay := time.Duration(rng.Int64N(int64(maxDelay) + 1))
			ev := event{at: at, produce: at.Add(delay), user: u, op: op}
			tl.events = append(tl.events, ev)
			tl.cmds[u] = append(tl.cmds[u], ev)
			at = at.Add(gap + time.Duration(rng.Int64N(int64(span/2))))
		}
	}
	for i := range signals {
		at := start.Add(time.Duration(rng.Int64N(int64(span)))).Truncate(time.Millisecond)
		tl.events = append(tl.events, event{at: at, produce: at, user: 1 + rng.Uint64N(uint64(users)), id: i})
	}
	sort.SliceStable(tl.events, func(i, j int) bool { return tl.events[i].produce.Before(tl.events[j].produce) })
	return tl
}

// inEpisode reports whether ts falls in one of user's leave episodes.
func (tl *timeline) inEpisode(user uint64, ts time.Time) bool {
	cmds := tl.cmds[user]
	for i, c := range cmds {
		if c.op != topics.Leave || ts.Before(c.at) {
			continue
		}
		if i+1 == len(cmds) || ts.Before(cmds[i+1].at) {
			return true
		}
	}
	return false
}

// run produces the timeline in real time: each record when its produce
// time comes (pacing to the wall clock, not synchronization), commands
// synchronously.
func (tl *timeline) run(e *env) {
	e.t.Helper()
	var pending []*kgo.Record
	flush := func() {
		if len(pending) > 0 {
			e.produce(pending...)
			pending = pending[:0]
		}
	}
	for _, ev := range tl.events {
		if d := time.Until(ev.produce); d > 0 {
			flush()
			time.Sleep(d)
		}
		key := topics.AppendUserID(nil, ev.user)
		if ev.op == 0 {
			pending = append(pending, &kgo.Record{Topic: string(e.set.Signals), Key: key, Value: []byte(ev.value()), Timestamp: ev.at})
			continue
		}
		flush()
		cmd := topics.Command{Op: ev.op, UserID: ev.user, AtNs: uint64(ev.at.UnixNano()), HasAt: true}
		e.produce(&kgo.Record{Topic: string(e.set.Commands), Key: key, Value: topics.AppendCommand(nil, cmd)})
	}
	flush()
}

func seeds(t *testing.T) []uint64 {
	if s := os.Getenv("COHORTGATE_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("COHORTGATE_SEED: %v", err)
		}
		return []uint64{v}
	}
	return []uint64{1, 2}
}

// TestBoundaryWithinGrace produces commands up to half a grace after their
// boundary, interleaved in real time with signals: no signal whose event
// time lies in a leave episode may be forwarded, whatever reached the
// processor first.
func TestBoundaryWithinGrace(t *testing.T) {
	for _, seed := range seeds(t) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			e := newEnv(t, 2)
			cfg := e.config()
			cfg.Grace = time.Second
			pr := e.start(t.TempDir(), cfg)
			pr.waitReady(t, 2)

			tl := newTimeline(seed, time.Now().Add(300*time.Millisecond), 3*time.Second, cfg.Grace/2, 8, 400)
			tl.run(e)
			e.waitDecided()
			forwarded, dropped := 0, 0
			got := make(map[string]bool)
			for _, r := range e.readAll(e.set.Cohort) {
				got[string(r.Value)] = true
			}
			for _, ev := range tl.events {
				if ev.op != 0 {
					continue
				}
				in := tl.inEpisode(ev.user, ev.at)
				switch {
				case in && got[ev.value()]:
					t.Errorf("signal %s of user %d at %v forwarded inside a leave episode", ev.value(), ev.user, ev.at.Format(time.StampMicro))
				case !in && !got[ev.value()]:
					t.Errorf("signal %s of user %d at %v not forwarded, but no episode holds it", ev.value(), ev.user, ev.at.Format(time.StampMicro))
				case in:
					dropped++
				default:
					forwarded++
				}
			}
			t.Logf("seed %d: %d forwarded, %d dropped inside episodes", seed, forwarded, dropped)
			if dropped == 0 || forwarded == 0 {
				t.Fatalf("timeline exercised nothing: %d forwarded, %d dropped", forwarded, dropped)
			}
		})
	}
}

// TestBoundaryBeyondGraceIsRecorded produces commands up to five graces
// late. Signals in an episode may then slip through, but never silently:
// each one must lie in a late-leave window recorded for its user.
func TestBoundaryBeyondGraceIsRecorded(t *testing.T) {
	for _, seed := range seeds(t) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			e := newEnv(t, 2)
			cfg := e.config()
			cfg.Grace = 200 * time.Millisecond
			pr := e.start(t.TempDir(), cfg)
			pr.waitReady(t, 2)

			tl := newTimeline(seed, time.Now().Add(300*time.Millisecond), 3*time.Second, 5*cfg.Grace, 8, 400)
			tl.run(e)
			e.waitDecided()
			got := make(map[string]bool)
			for _, r := range e.readAll(e.set.Cohort) {
				got[string(r.Value)] = true
			}
			leaked, late := 0, 0
			for u := range tl.cmds {
				m, err := pr.Member(u)
				if err != nil {
					t.Fatal(err)
				}
				late += len(m.LateLeaves)
				for _, ev := range tl.events {
					if ev.op != 0 || ev.user != u || !got[ev.value()] || !tl.inEpisode(u, ev.at) {
						continue
					}
					leaked++
					ts := uint64(ev.at.UnixNano())
					if !slices.ContainsFunc(m.LateLeaves, func(w topics.LateLeave) bool {
						return w.LeftAtNs <= ts && ts <= w.ForwardedThroughNs
					}) {
						t.Errorf("signal %s of user %d at %d leaked outside every recorded late-leave window %+v", ev.value(), u, ts, m.LateLeaves)
					}
				}
			}
			t.Logf("seed %d: %d signals slipped through, all inside %d recorded late-leave windows", seed, leaked, late)
		})
	}
}

// TestSignalOfClosedEpisodeIsDropped sends a signal stamped inside an
// episode that was already closed by a rejoin when the signal arrived.
func TestSignalOfClosedEpisodeIsDropped(t *testing.T) {
	e := newEnv(t, 1)
	pr := e.start(t.TempDir(), e.config())
	pr.waitReady(t, 1)
	const user = 5
	t0 := base()
	e.command(topics.Leave, user, t0.Add(10*time.Second))
	e.command(topics.Rejoin, user, t0.Add(20*time.Second))
	eventually(t, 30*time.Second, func() error {
		m, err := pr.Member(user)
		if err != nil || len(m.History) != 1 {
			return fmt.Errorf("rejoin not applied yet: %+v %v", m, err)
		}
		return nil
	})
	want := e.produceSignals(t0, []sig{
		{user, 15 * time.Second, false}, // late, for the closed episode
		{user, 25 * time.Second, true},
		{user, 5 * time.Second, true},
	})
	e.waitDecided()
	if got := e.forwardedValues(); !slices.Equal(got, want) {
		t.Fatalf("forwarded %v, want %v", got, want)
	}
}

// TestReprocessingIsDeterministic runs two processors, each with a fresh
// store and its own group and output topics, over the same input from
// offset 0. Their cohort, DLQ and changelog topics must be identical,
// except for the receipts, which record when and where a command took
// effect in that run.
func TestReprocessingIsDeterministic(t *testing.T) {
	e := newEnv(t, 3)
	t0 := base()
	rng := rand.New(rand.NewPCG(7, 7))
	var recs []*kgo.Record
	for i := range 600 {
		user := 1 + rng.Uint64N(40)
		at := t0.Add(time.Duration(i) * 10 * time.Millisecond)
		switch {
		case i%37 == 0:
			op := topics.Op(1 + rng.IntN(2))
			c := topics.Command{Op: op, UserID: user, AtNs: uint64(at.UnixNano()), HasAt: true, RequestID: strconv.Itoa(i)}
			recs = append(recs, &kgo.Record{Topic: string(e.set.Commands), Key: topics.AppendUserID(nil, user), Value: topics.AppendCommand(nil, c)})
		case i%101 == 0:
			recs = append(recs, &kgo.Record{Topic: string(e.set.Signals), Key: []byte("bad-" + strconv.Itoa(i)), Value: []byte("x"), Timestamp: at})
		default:
			recs = append(recs, &kgo.Record{Topic: string(e.set.Signals), Key: topics.AppendUserID(nil, user), Value: []byte("s" + strconv.Itoa(i)), Timestamp: at})
		}
	}
	e.produce(recs...)

	type outputs struct{ cohort, dlq, changelog []*kgo.Record }
	var runs [2]outputs
	for i := range runs {
		cfg := e.config()
		cfg.Group = e.group + "-run" + strconv.Itoa(i)
		cfg.Topics.Cohort = topics.Topic(string(e.set.Cohort) + strconv.Itoa(i))
		cfg.Topics.DLQ = topics.Topic(string(e.set.DLQ) + strconv.Itoa(i))
		cfg.Topics.Changelog = topics.Topic(string(e.set.Changelog) + strconv.Itoa(i))
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, _ = e.adm.DeleteTopics(ctx, string(cfg.Topics.Cohort), string(cfg.Topics.DLQ), string(cfg.Topics.Changelog))
			_, _ = e.adm.DeleteGroup(ctx, cfg.Group)
		})
		pr := e.start(t.TempDir(), cfg)
		e.waitDecidedBy(cfg.Group)
		if err := pr.stop(t); err != nil {
			t.Fatal(err)
		}
		runs[i] = outputs{e.readAll(cfg.Topics.Cohort), e.readAll(cfg.Topics.DLQ), e.readAll(cfg.Topics.Changelog)}
	}
	if len(runs[0].cohort) == 0 || len(runs[0].dlq) == 0 || len(runs[0].changelog) == 0 {
		t.Fatalf("nothing to compare: %d forwarded, %d dead letters, %d changelog records",
			len(runs[0].cohort), len(runs[0].dlq), len(runs[0].changelog))
	}
	sameRecords(t, "cohort", runs[0].cohort, runs[1].cohort, func(v []byte) []byte { return v })
	// Dead letters from the two input topics reach a DLQ partition from two
	// goroutines, so only their order per source is fixed.
	sameRecords(t, "dlq", bySource(runs[0].dlq), bySource(runs[1].dlq), func(v []byte) []byte { return v })
	// The restore header holds the note, whose receipt is the run's own.
	for _, r := range slices.Concat(runs[0].changelog, runs[1].changelog) {
		for i, h := range r.Headers {
			if h.Key == topics.HeaderRestore {
				r.Headers[i].Value = withoutReceipt(t, h.Value)
			}
		}
	}
	sameRecords(t, "changelog", runs[0].changelog, runs[1].changelog, func(v []byte) []byte {
		m, err := topics.DecodeMemberRecord(v)
		if err != nil {
			t.Fatalf("changelog value %q: %v", v, err)
		}
		m.Receipt = nil
		return topics.AppendMemberRecord(nil, m)
	})
	t.Logf("identical: %d forwarded, %d dead letters, %d changelog records", len(runs[0].cohort), len(runs[0].dlq), len(runs[0].changelog))
}

// withoutReceipt returns a restore header as a string that leaves out
// the receipt of the note the dump holds: the commands offset, the
// member, the note's command and the identities.
func withoutReceipt(t *testing.T, h []byte) []byte {
	t.Helper()
	// [version 2][partitions u32][offset u64][dump], as topics.HeaderRestore says.
	const prefix = 1 + 4 + 8
	if len(h) < prefix || h[0] != 2 {
		t.Fatalf("restore header of %d bytes, not version 2", len(h))
	}
	d, err := membership.DecodeDump(h[prefix:])
	if err != nil {
		t.Fatalf("restore header: %v", err)
	}
	note, err := topics.DecodeNote(d.Member.Note)
	if err != nil {
		t.Fatalf("restore header's note: %v", err)
	}
	d.Member.Note = nil
	ids := dumpIdentities(h, d)
	return fmt.Appendf(nil, "%x %+v %+v %x", h[:prefix], d.Member, note.Command, ids)
}

// bySource orders DLQ records by partition, then source topic, partition
// and offset.
func bySource(rs []*kgo.Record) []*kgo.Record {
	out := slices.Clone(rs)
	key := func(r *kgo.Record) string {
		h := headers(r)
		off, _ := strconv.ParseInt(h[topics.HeaderSourceOffset], 10, 64)
		return fmt.Sprintf("%08d/%s/%s/%020d", r.Partition, h[topics.HeaderSourceTopic], h[topics.HeaderSourcePartition], off)
	}
	slices.SortStableFunc(out, func(a, b *kgo.Record) int { return cmpString(key(a), key(b)) })
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// sameRecords compares two reads of a topic record by record (partition,
// key, normalized value, headers but the DLQ's error text, timestamp).
func sameRecords(t *testing.T, what string, a, b []*kgo.Record, norm func([]byte) []byte) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%s: %d records in the first run, %d in the second", what, len(a), len(b))
	}
	for i := range a {
		x, y := a[i], b[i]
		same := x.Partition == y.Partition && bytes.Equal(x.Key, y.Key) &&
			bytes.Equal(norm(x.Value), norm(y.Value)) && x.Timestamp.Equal(y.Timestamp) &&
			slices.EqualFunc(x.Headers, y.Headers, func(h, k kgo.RecordHeader) bool {
				return h.Key == k.Key && bytes.Equal(h.Value, k.Value)
			})
		if !same {
			t.Fatalf("%s record %d differs:\n first: p%d %s %s %v %v\nsecond: p%d %s %s %v %v", what, i,
				x.Partition, x.Key, x.Value, x.Headers, x.Timestamp, y.Partition, y.Key, y.Value, y.Headers, y.Timestamp)
		}
	}
}

// TestHoldIsBounded holds signals for a long grace with a small memory cap
// per partition and small fetches: the held bytes must stay within the cap
// plus what was in flight when fetching paused, and every signal must come
// out once the grace has passed.
func TestHoldIsBounded(t *testing.T) {
	const (
		holdCap  = 4 << 10
		fetchMax = 2 << 10
		signals  = 300 // of ~100 bytes: about 8 times the cap
	)
	e := newEnv(t, 1)
	cfg := e.config()
	cfg.Grace = 3 * time.Second
	cfg.HoldMaxBytes = holdCap
	cfg.KafkaOpts = append(cfg.KafkaOpts, kgo.FetchMaxPartitionBytes(fetchMax), kgo.FetchMaxBytes(fetchMax))
	pr := e.start(t.TempDir(), cfg)
	pr.waitReady(t, 1)

	// One record per produce, so one record per record batch: a broker
	// returns at least one whole batch per fetch, whatever the fetch limit,
	// so the bound below is the cap plus what a fetch can carry.
	// Each stamped when it is produced: stamped all at once, a slow broker
	// (one synchronous produce each) let the grace pass before they were
	// fetched, and nothing was held at all.
	var want []string
	for i := range signals {
		v := fmt.Sprintf("held-%03d-%s", i, strconv.Itoa(i*7919)+"-padding-padding-padding-padding-padding-padding-padding-padding")
		want = append(want, v)
		e.produce(&kgo.Record{Topic: string(e.set.Signals), Key: []byte("1"), Value: []byte(v), Timestamp: time.Now()})
	}
	slices.Sort(want)

	var peak float64
	eventually(t, 60*time.Second, func() error {
		peak = max(peak, metricValue(t, pr.reg, "cohortgate_held_bytes", nil))
		if n := metricValue(t, pr.reg, "cohortgate_signals_forwarded_total", nil); n < signals {
			return fmt.Errorf("%v of %d forwarded; held bytes peaked at %v", n, signals, peak)
		}
		return nil
	})
	if bound := float64(holdCap + 2*fetchMax); peak > bound || peak == 0 {
		t.Fatalf("held bytes peaked at %v, want within (0, %v]", peak, bound)
	}
	e.waitDecided()
	if got := e.forwardedValues(); !slices.Equal(got, want) {
		t.Fatalf("forwarded %d signals, want each of %d once", len(got), len(want))
	}
	t.Logf("held bytes peaked at %v with a cap of %d", peak, holdCap)
}
