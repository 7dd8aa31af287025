package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/pkg/fanout"
	"github.com/cohortgate/cohortgate/pkg/membership"
	"github.com/cohortgate/cohortgate/topics"
)

// TestShortcutsEqualReplay is a property test of the promise that every
// shortcut yields what a replay would (DESIGN.md, promise 5) and that the
// boundary holds through them (promises 1 and 2). From a seed it draws a
// history: leaves, late leaves, rejoins (some refused), re-deliveries,
// misrouted commands and signals of a few users, interleaved with the
// shortcuts: a second instance joining with an empty data dir and leaving
// again (handover), restarts on the same data dir from the gate snapshot,
// from an older one (as a crash leaves: its commands since are applied
// again) and by the store scan, new owners with an empty data dir (restore
// from the changelog, the partitions side by side), some stopped in the
// middle of their restores and started again on that data dir, the
// commands, every input and the changelog grown
// together, the changelog grown alone, and a transaction held open on a
// changelog partition by another writer until an owner waits for it.
//
// Then:
//
//  1. every user's record on the last owner equals what a fresh processor
//     (new group, new changelog, empty data dir) computes replaying the
//     commands topic from offset 0, and what the test's own model of the
//     rules computes from the commands it produced; the command
//     identities the two stores remember are the same bytes;
//  2. no signal whose event time lies in one of its user's leave episodes
//     (by the model) reached the cohort topic, unless every leave that
//     puts it there was acknowledged later than the grace after the
//     signal's event time and the user's record has a late-leave window
//     holding it; the same for the replay's cohort topic; the live group
//     forwarded no signal twice, and every window a live changelog record
//     carried is within one of the user's windows at the end.
//
// The harness runs processors in the test's process, so an instance is
// never killed: every stop is a clean one (a restart without the gate
// snapshot takes the path of a start after a kill, the store scan).
//
// COHORTGATE_PROPERTY_SEED=<n> runs the history of seed n alone;
// COHORTGATE_PROPERTY_HISTORIES=<n> runs n histories (default 3, about a
// minute; make chaos runs more), of seeds drawn at random and logged.
func TestShortcutsEqualReplay(t *testing.T) {
	for _, seed := range propertySeeds(t) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("reproduce with COHORTGATE_PROPERTY_SEED=%d go test -race -run TestShortcutsEqualReplay ./integration/", seed)
				}
			})
			runHistory(t, seed, propSteps)
		})
	}
}

// propSteps is how many steps a history draws: a handful of shortcuts
// each, which keeps the default run near a minute on a shared 2-core
// machine.
const propSteps = 36

// propMaxParts is the most partitions a history grows the commands and
// inputs to.
const propMaxParts = 4

// propUsers is how many users a history's commands and signals are for:
// few, so that each user sees many commands and shortcuts.
const propUsers = 8

func propertySeeds(t *testing.T) []uint64 {
	t.Helper()
	if s := os.Getenv("COHORTGATE_PROPERTY_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("COHORTGATE_PROPERTY_SEED=%q: %v", s, err)
		}
		return []uint64{v}
	}
	n := 3
	if s := os.Getenv("COHORTGATE_PROPERTY_HISTORIES"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("COHORTGATE_PROPERTY_HISTORIES=%q: want a positive count", s)
		}
		n = v
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = rand.Uint64() % 1_000_000_000
	}
	t.Logf("property seeds %v", out)
	return out
}

// propCmd is a command the history produced, in the order the owner of
// its user applies them (the test produces one at a time and waits for a
// misrouted one's copy before the next).
type propCmd struct {
	cmd topics.Command
	// known is when the command was acknowledged where its user's owner
	// reads it: the return of the produce, or for a misrouted command when
	// its copy was seen in the partition of its key. The acknowledgement
	// itself is no later.
	known time.Time
	// value is the bytes produced, for re-deliveries.
	value []byte
}

// propSignal is a signal the history produced.
type propSignal struct {
	user uint64
	ts   time.Time // the record timestamp, whole milliseconds
}

// propInstance is one processor of the live group.
type propInstance struct {
	pr   *proc
	name string
	dir  string
	snap string // its gate snapshot path
	// changed counts the run's TopologyChanged events.
	changed atomic.Int32
}

// history is one drawn history and the live group running it.
type history struct {
	t     *testing.T
	e     *env
	rng   *rand.Rand
	cfg   fanout.Config // the live group's, but for TransactionalID and GateSnapshot
	parts int32         // the commands' and inputs' partition count
	clog  int32         // the changelog's
	prod  *kgo.Client   // produces to the partition a record names
	a, b  *propInstance // a always runs between steps; b during a handover
	txn   *kgo.Client   // holds a transaction open on the changelog, or nil
	cmds  []propCmd
	sigs  []propSignal
	steps []string // what happened, for failure messages
	seq   int      // names instances and request ids
	// older holds, by data dir, a gate snapshot an earlier clean stop of
	// that dir wrote: put back before a restart, it is what a crash
	// leaves, a snapshot older than the store. Forgotten when the topics
	// grow (the store forgets its state, and the processor the file).
	older map[string][]byte
}

func runHistory(t *testing.T, seed uint64, steps int) {
	const parts = 2
	e := newEnv(t, parts)
	h := &history{t: t, e: e, rng: rand.New(rand.NewPCG(seed, seed^0x5eed)), parts: parts, clog: parts}
	h.cfg = e.config()
	h.cfg.TopologyInterval = 100 * time.Millisecond
	h.newProducer()
	t.Cleanup(func() {
		if h.txn != nil {
			h.txn.Close()
		}
		h.prod.Close()
		if t.Failed() {
			t.Logf("history of seed %d:\n  %s", seed, strings.Join(h.steps, "\n  "))
		}
	})
	h.a = h.startInstance(t.TempDir())
	h.settle()

	for range steps {
		h.step()
	}
	h.finish()
}

func (h *history) logf(format string, args ...any) {
	h.steps = append(h.steps, fmt.Sprintf(format, args...))
}

// newProducer (re)makes the client that produces the history's records,
// each to the partition it names: made again after a growth, so that its
// metadata knows the new partitions.
func (h *history) newProducer() {
	if h.prod != nil {
		h.prod.Close()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker.addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		h.t.Fatal(err)
	}
	h.prod = cl
}

func (h *history) produce(rs ...*kgo.Record) {
	h.t.Helper()
	if err := h.prod.ProduceSync(h.e.ctx(30*time.Second), rs...).FirstErr(); err != nil {
		h.t.Fatalf("produce: %v", err)
	}
}

func (h *history) partitionOf(user uint64) int32 {
	return murmur2Partition(topics.AppendUserID(nil, user), int(h.parts))
}

func (h *history) startInstance(dir string) *propInstance {
	h.seq++
	in := &propInstance{name: fmt.Sprintf("i%d", h.seq), dir: dir, snap: filepath.Join(dir+"-snap", "gate.snapshot")}
	if err := os.MkdirAll(filepath.Dir(in.snap), 0o755); err != nil {
		h.t.Fatal(err)
	}
	cfg := h.cfg
	cfg.TransactionalID = h.cfg.TransactionalID + "-" + in.name
	cfg.GateSnapshot = in.snap
	cfg.EventListener.TopologyChanged = func(fanout.TopologyChangedInfo) { in.changed.Add(1) }
	in.pr = h.e.start(dir, cfg)
	return in
}

func (h *history) stopInstance(in *propInstance) {
	h.t.Helper()
	if err := in.pr.stop(h.t); err != nil {
		h.t.Fatalf("%s: %v", in.name, err)
	}
	b, err := os.ReadFile(in.snap)
	if err != nil {
		return // none written (a restore cut short), or removed
	}
	if _, ok := h.older[in.dir]; !ok || h.rng.IntN(3) == 0 {
		if h.older == nil {
			h.older = make(map[string][]byte)
		}
		h.older[in.dir] = b
	}
}

func (h *history) running() []*propInstance {
	out := []*propInstance{h.a}
	if h.b != nil {
		out = append(out, h.b)
	}
	return out
}

// settle waits until the running instances own every partition between
// them and each is ready.
func (h *history) settle() {
	h.t.Helper()
	h.wait(90*time.Second, func() error {
		owned := 0
		for _, in := range h.running() {
			owned += len(in.pr.Partitions())
			if ok, why := in.pr.Ready(); !ok {
				return fmt.Errorf("%s: %s", in.name, why)
			}
			if h.b != nil && len(in.pr.Partitions()) == 0 && h.parts > 1 {
				return fmt.Errorf("%s owns no partition yet", in.name)
			}
		}
		if owned != int(h.parts) {
			return fmt.Errorf("the instances own %d of %d partitions", owned, h.parts)
		}
		return nil
	})
}

// wait is eventually for the history's conditions. A transaction held
// open on the changelog is aborted once an instance says it waits for it
// (a claim reads the changelog before it applies its first command): until
// then the held records keep that partition's commands, and its signals,
// waiting.
func (h *history) wait(d time.Duration, cond func() error) {
	h.t.Helper()
	eventually(h.t, d, func() error {
		if h.txn != nil {
			for _, in := range h.running() {
				for _, st := range in.pr.Partitions() {
					if h.txn != nil && strings.Contains(st.Waiting, "open on them") {
						h.logf("  %s partition %d waits for the open changelog transaction: aborted", in.name, st.Partition)
						h.endTxn()
					}
				}
			}
		}
		return cond()
	})
}

func (h *history) endTxn() {
	if err := h.txn.EndTransaction(h.e.ctx(30*time.Second), kgo.TryAbort); err != nil {
		h.t.Fatalf("aborting the open changelog transaction: %v", err)
	}
	h.txn.Close()
	h.txn = nil
}

// step draws and runs one step.
func (h *history) step() {
	h.t.Helper()
	switch r := h.rng.IntN(100); {
	case r < 30:
		h.signals()
	case r < 45:
		h.command(0, topics.Leave, time.Time{})
	case r < 53:
		// A late leave: its boundary before signals of the user already
		// forwarded, once every signal so far was decided.
		h.judge(h.cfg.Group)
		h.lateLeave()
	case r < 66:
		h.command(0, topics.Rejoin, time.Time{})
	case r < 74:
		h.redeliver()
	default:
		h.shortcut()
	}
}

// signals produces a few signals of random users, most stamped now, some
// a little in the past.
func (h *history) signals() {
	n := 1 + h.rng.IntN(6)
	var rs []*kgo.Record
	for range n {
		user := 1 + h.rng.Uint64N(propUsers)
		ts := time.Now()
		if h.rng.IntN(4) == 0 {
			ts = ts.Add(-time.Duration(h.rng.IntN(500)) * time.Millisecond)
		}
		ts = ts.Truncate(time.Millisecond)
		h.sigs = append(h.sigs, propSignal{user: user, ts: ts})
		rs = append(rs, &kgo.Record{Topic: string(h.e.set.Signals), Partition: h.partitionOf(user),
			Key: topics.AppendUserID(nil, user), Value: []byte("s" + strconv.Itoa(len(h.sigs)-1)), Timestamp: ts})
	}
	h.produce(rs...)
	h.logf("%d signals", n)
}

// lateLeave produces a leave whose boundary is before a signal of its
// user produced in the last 1.5 s (most often forwarded by now), or, when
// there is none, a leave of a random user stamped up to 1.5 s ago.
func (h *history) lateLeave() {
	var recent []propSignal
	for i := len(h.sigs) - 1; i >= 0 && time.Since(h.sigs[i].ts) < 1500*time.Millisecond; i-- {
		recent = append(recent, h.sigs[i])
	}
	if len(recent) == 0 {
		h.command(1+h.rng.Uint64N(propUsers), topics.Leave, time.Now().Add(-time.Duration(100+h.rng.IntN(1400))*time.Millisecond))
		return
	}
	s := recent[h.rng.IntN(len(recent))]
	h.command(s.user, topics.Leave, s.ts.Add(-time.Duration(h.rng.IntN(100))*time.Millisecond))
}

// command produces a command of user with boundary at (a random user and
// now when user is 0); a rejoin is sometimes stamped before the user's
// leave (refused, rule C7). One in five is produced to a partition other
// than its key's.
func (h *history) command(user uint64, op topics.Op, at time.Time) {
	late := time.Since(at) > 50*time.Millisecond
	if user == 0 {
		user, at, late = 1+h.rng.Uint64N(propUsers), time.Now(), false
	}
	what := op.String()
	if late {
		what = "late " + what
	}
	if op == topics.Rejoin && h.rng.IntN(5) == 0 {
		if m := modelOf(h.cmds, user, time.Time{}); m.left {
			at = time.Unix(0, int64(m.leftAt)).Add(-time.Millisecond)
			what = "refused rejoin"
		}
	}
	h.seq++
	c := topics.Command{Op: op, UserID: user, AtNs: uint64(at.UnixNano()), HasAt: true, RequestID: "r" + strconv.Itoa(h.seq)}
	h.send(c, topics.AppendCommand(nil, c), what)
}

// redeliver produces an earlier command again, the same bytes.
func (h *history) redeliver() {
	if len(h.cmds) == 0 {
		h.signals()
		return
	}
	c := h.cmds[h.rng.IntN(len(h.cmds))]
	h.send(c.cmd, c.value, "re-delivered "+c.cmd.Op.String())
}

func (h *history) send(c topics.Command, value []byte, what string) {
	h.t.Helper()
	own := h.partitionOf(c.UserID)
	part := own
	if h.rng.IntN(5) == 0 {
		part = h.wrongPartition(c.UserID)
	}
	misrouted := part != own
	r := &kgo.Record{Topic: string(h.e.set.Commands), Partition: part, Key: topics.AppendUserID(nil, c.UserID), Value: value}
	h.produce(r)
	known := time.Now()
	if misrouted {
		h.logf("(misrouted, to partition %d/%d offset %d)", part, h.parts, r.Offset)
		// The leave counts from its copy (README, rule C2); the next
		// command waits for it, so that the owner applies the commands in
		// the order produced.
		h.waitCopy(r, own)
		known = time.Now()
		what = "misrouted " + what
	}
	h.cmds = append(h.cmds, propCmd{cmd: c, known: known, value: value})
	h.logf("%s of user %d at %d (partition %d/%d offset %d)", what, c.UserID, c.AtNs, part, h.parts, r.Offset)
}

// wrongPartition returns a partition other than user's to produce a
// command of user to, or user's own when there is none to take.
//
// Not one that is the user's partition under a count the history may grow
// to (propMaxParts): a replay under that count reads such a command where
// it lies, in the user's partition, before the commands the user had
// before it, which the live owner applied first (as its rule-C2 copy
// under the old count). No processor can tell, reading the log, that a
// record was written under another count; migrate.go says so. The test
// leaves that case out rather than fail on it.
func (h *history) wrongPartition(user uint64) int32 {
	key := topics.AppendUserID(nil, user)
	own := h.partitionOf(user)
	var out []int32
	for p := range h.parts {
		ok := p != own
		for k := h.parts + 1; k <= propMaxParts && ok; k++ {
			ok = murmur2Partition(key, int(k)) != p
		}
		if ok {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return own
	}
	return out[h.rng.IntN(len(out))]
}

// waitCopy waits until the record r, produced to a partition other than
// its key's, was re-published to own.
func (h *history) waitCopy(r *kgo.Record, own int32) {
	h.t.Helper()
	from := fmt.Sprintf("%d/%d", r.Partition, r.Offset)
	h.wait(60*time.Second, func() error {
		for _, c := range h.e.readAll(h.e.set.Commands) {
			if c.Partition == own && header(c, topics.HeaderMisroutedFrom) == from {
				return nil
			}
		}
		return fmt.Errorf("no copy of the misrouted command at %s in partition %d yet", from, own)
	})
}

// shortcut runs one of the shortcuts the promise is about.
func (h *history) shortcut() {
	h.t.Helper()
	if h.b != nil {
		// A handover is under way: the second instance leaves the group.
		h.logf("handover ends: %s stops", h.b.name)
		h.stopInstance(h.b)
		h.b = nil
		h.settle()
		return
	}
	switch h.rng.IntN(9) {
	case 0:
		h.b = h.startInstance(h.t.TempDir())
		h.logf("handover: %s joins with an empty data dir", h.b.name)
		h.settle()
		h.logf("  %s owns %v, %s owns %v", h.a.name, owned(h.a.pr), h.b.name, owned(h.b.pr))
	case 1:
		h.logf("restart of %s on its data dir (clean stop: gate snapshot)", h.a.name)
		h.stopInstance(h.a)
		h.a = h.startInstance(h.a.dir)
		h.settle()
	case 2:
		h.logf("restart of %s on its data dir without its gate snapshot (the store scan)", h.a.name)
		h.stopInstance(h.a)
		if err := os.Remove(h.a.snap); err != nil && !errors.Is(err, os.ErrNotExist) {
			h.t.Fatal(err)
		}
		h.a = h.startInstance(h.a.dir)
		h.settle()
	case 3:
		old := h.a.name
		h.stopInstance(h.a)
		h.a = h.startInstance(h.t.TempDir())
		h.logf("new owner %s with an empty data dir replaces %s", h.a.name, old)
		h.settle()
	case 4:
		if h.parts >= propMaxParts {
			h.signals()
			return
		}
		n := min(h.parts+1+h.rng.Int32N(h.parts), propMaxParts)
		before := h.changes()
		h.older = nil
		if h.clog < n {
			h.logf("commands, signals and changelog grown to %d partitions (from %d, changelog %d)", n, h.parts, h.clog)
			h.e.grow(n, h.e.set.Commands, h.e.set.Signals, h.e.set.Changelog)
			h.clog = n
		} else {
			h.logf("commands and signals grown to %d partitions (from %d; the changelog has %d)", n, h.parts, h.clog)
			h.e.grow(n, h.e.set.Commands, h.e.set.Signals)
		}
		h.parts = n
		h.grown(before)
	case 5:
		if h.clog >= 6 {
			h.signals()
			return
		}
		before := h.changes()
		h.older = nil
		h.clog++
		h.logf("changelog grown alone to %d partitions", h.clog)
		h.e.grow(h.clog, h.e.set.Changelog)
		h.grown(before)
	case 6:
		if h.txn != nil {
			h.signals()
			return
		}
		h.openTxn()
	case 7:
		h.interruptedRestore()
	case 8:
		h.stopInstance(h.a)
		if old, ok := h.older[h.a.dir]; ok {
			h.logf("restart of %s on its data dir with an older gate snapshot (what a crash leaves)", h.a.name)
			if err := os.WriteFile(h.a.snap, old, 0o644); err != nil {
				h.t.Fatal(err)
			}
		} else {
			h.logf("restart of %s on its data dir (clean stop: gate snapshot)", h.a.name)
		}
		h.a = h.startInstance(h.a.dir)
		h.settle()
	}
}

// interruptedRestore replaces the owner with one on an empty data dir,
// which restores its partitions from the changelog side by side, stops it
// in the middle of its takeover (while a restore says it runs, when the
// poll catches one), and starts it again on the same data dir: what a
// crash during a restore leaves (nothing of the partitions whose
// restores it cut short) must restore again to the replay's state.
func (h *history) interruptedRestore() {
	h.t.Helper()
	old := h.a.name
	h.stopInstance(h.a)
	dir := h.t.TempDir()
	h.a = h.startInstance(dir)
	where := "before any restore said it ran"
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		restoring := 0
		for _, st := range h.a.pr.Partitions() {
			if st.Restore != nil {
				restoring++
			}
		}
		if restoring > 0 {
			where = fmt.Sprintf("while %d restore(s) ran", restoring)
			break
		}
		if ok, _ := h.a.pr.Ready(); ok {
			where = "after its restores (it was ready)"
			break
		}
		time.Sleep(time.Millisecond) // polling for a moment to interrupt, with a deadline
	}
	h.stopInstance(h.a)
	h.logf("new owner %s with an empty data dir replaces %s, stopped %s; started again on its data dir", h.a.name, old, where)
	h.a = h.startInstance(dir)
	h.settle()
}

// grown waits until every running instance saw the topics grow and took
// every partition again under the new layout.
func (h *history) grown(before map[*propInstance]int32) {
	h.t.Helper()
	h.e.waitPartitions(map[topics.Topic]int32{h.e.set.Commands: h.parts, h.e.set.Signals: h.parts, h.e.set.Changelog: h.clog})
	h.newProducer()
	h.wait(60*time.Second, func() error {
		for _, in := range h.running() {
			if in.changed.Load() == before[in] {
				return fmt.Errorf("%s has not seen the topics change yet", in.name)
			}
		}
		return nil
	})
	h.settle()
}

// changes returns how many topology changes each running instance saw.
func (h *history) changes() map[*propInstance]int32 {
	out := make(map[*propInstance]int32)
	for _, in := range h.running() {
		out[in] = in.changed.Load()
	}
	return out
}

// openTxn opens a transaction on a changelog partition, as another
// transactional writer (or the gap before a commit's markers) does, and
// leaves it open until an instance's restore waits for it.
func (h *history) openTxn() {
	h.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker.addrs...), kgo.TransactionalID("hostile-"+randomID()),
		kgo.TransactionTimeout(5*time.Minute), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		h.t.Fatal(err)
	}
	if err := cl.BeginTransaction(); err != nil {
		h.t.Fatal(err)
	}
	part := h.rng.Int32N(h.clog)
	r := &kgo.Record{Topic: string(h.e.set.Changelog), Partition: part, Key: []byte("999999"), Value: []byte(`{}`)}
	if err := cl.ProduceSync(h.e.ctx(30*time.Second), r).FirstErr(); err != nil {
		h.t.Fatal(err)
	}
	h.txn = cl
	h.logf("a transaction held open on changelog partition %d", part)
}

// judge produces a signal stamped now in every partition and waits until
// group decided every signal: every command acknowledged before was
// applied by then.
func (h *history) judge(group string) {
	h.t.Helper()
	var rs []*kgo.Record
	for p, u := int32(0), uint64(900_000); p < h.parts; u++ {
		if murmur2Partition(topics.AppendUserID(nil, u), int(h.parts)) == p {
			rs = append(rs, &kgo.Record{Topic: string(h.e.set.Signals), Partition: p, Key: topics.AppendUserID(nil, u),
				Value: []byte("judge"), Timestamp: time.Now()})
			p++
		}
	}
	h.produce(rs...)
	h.wait(90*time.Second, func() error { return h.decided(group) })
}

// decided returns nil once group committed offsets past the last record
// of every signals partition. A processor re-publishes the signals it
// finds misrouted (those produced before a growth, for a replay under the
// new count) in transactions, so a partition may end with a transaction
// marker, one past the committed offset: its last record is looked up
// then, as env.waitDecided does.
func (h *history) decided(group string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := h.e.adm.ListEndOffsets(ctx, string(h.e.set.Signals))
	if err != nil {
		return err
	}
	committed, err := h.e.adm.FetchOffsets(ctx, group)
	if err != nil {
		return err
	}
	behind := make(map[int32]int64)
	ends.Each(func(o kadm.ListedOffset) {
		if c, ok := committed.Lookup(o.Topic, o.Partition); o.Offset > 0 && (!ok || c.At < o.Offset) {
			behind[o.Partition] = c.At // -1 when none
		}
	})
	if len(behind) == 0 {
		return nil
	}
	last := make(map[int32]int64)
	for _, r := range h.e.readAll(h.e.set.Signals) {
		last[r.Partition] = max(last[r.Partition], r.Offset)
	}
	for p, c := range behind {
		if l, any := last[p]; any && c <= l {
			return fmt.Errorf("signals partition %d: committed %d, last record at %d", p, c, l)
		}
	}
	return nil
}

// quiesce judges until the commands topic stops growing across a judge:
// the copies of misrouted commands that group's instances re-publish are
// applied too.
func (h *history) quiesce(group string) {
	h.t.Helper()
	prev := ""
	for range 8 {
		h.judge(group)
		ends, err := h.e.adm.ListEndOffsets(h.e.ctx(30*time.Second), string(h.e.set.Commands))
		if err != nil {
			h.t.Fatal(err)
		}
		now := fmt.Sprint(ends.Offsets())
		if now == prev {
			return
		}
		prev = now
	}
	h.t.Fatalf("the commands topic still grows after 8 rounds of judging")
}

// propState is a user's state as the test compares it: what is defined to
// be a function of the commands alone.
//
// Left out: the late-leave windows, which record what an owner had
// forwarded when a leave came late (a fresh replay decides every signal
// after every command and records none; they are checked against the
// forwarded signals instead), and the note (the command the record
// follows and its receipt): the receipt is the run's clock, and a replay
// re-publishes every misrouted command it finds once more, so the last
// command it applied to a user may be another copy, at another offset, of
// a command the live group applied earlier.
type propState struct {
	Status  string
	LeftAt  uint64
	History []topics.Episode
}

func stateOf(m topics.MemberRecord) propState {
	s := propState{Status: m.Status, History: m.History}
	if m.LeftAtNs != nil {
		s.LeftAt = *m.LeftAtNs
	}
	if len(s.History) == 0 {
		s.History = nil
	}
	return s
}

// finish ends the history and checks the two properties.
func (h *history) finish() {
	h.t.Helper()
	if h.txn != nil {
		h.logf("the open changelog transaction aborted at the end")
		h.endTxn()
	}
	if h.b != nil {
		h.stopInstance(h.b)
		h.b = nil
	}
	h.settle()
	h.quiesce(h.cfg.Group)
	live := h.members(h.a.pr)
	h.stopInstance(h.a)
	liveIDs := identities(h.t, h.a.dir)
	forwarded := h.e.readAll(h.e.set.Cohort)

	// The replay: a fresh group, changelog, cohort and DLQ, an empty data
	// dir, the same commands and signals topics from offset 0.
	cfg := h.cfg
	suffix := "-replay"
	cfg.Group += suffix
	cfg.TransactionalID += suffix
	cfg.Partitions = h.parts
	cfg.Topics.Cohort = topics.Topic(string(cfg.Topics.Cohort) + suffix)
	cfg.Topics.DLQ = topics.Topic(string(cfg.Topics.DLQ) + suffix)
	cfg.Topics.Changelog = topics.Topic(string(cfg.Topics.Changelog) + suffix)
	h.t.Cleanup(func() {
		ctx := h.e.ctx(30 * time.Second)
		_, _ = h.e.adm.DeleteTopics(ctx, string(cfg.Topics.Cohort), string(cfg.Topics.DLQ), string(cfg.Topics.Changelog))
		_, _ = h.e.adm.DeleteGroup(ctx, cfg.Group)
	})
	dir := h.t.TempDir()
	replay := h.e.start(dir, cfg)
	replay.waitReady(h.t, int(h.parts))
	h.quiesce(cfg.Group)
	replayed := h.members(replay)
	if err := replay.stop(h.t); err != nil {
		h.t.Fatalf("replay: %v", err)
	}
	replayIDs := identities(h.t, dir)

	// (1) The live owner's state equals the replay's and the model's.
	commands := h.e.readAll(h.e.set.Commands)
	for u := uint64(1); u <= propUsers; u++ {
		failed := h.t.Failed()
		got, want := stateOf(live[u]), stateOf(replayed[u])
		model := modelOf(h.cmds, u, time.Time{}).state()
		if !reflect.DeepEqual(got, want) {
			h.t.Errorf("user %d: live %+v, replay %+v (model %+v)", u, got, want, model)
		} else if !reflect.DeepEqual(got, model) {
			h.t.Errorf("user %d: live and replay %+v, the test's model of the rules %+v", u, got, model)
		}
		if !bytes.Equal(liveIDs[u], replayIDs[u]) {
			h.t.Errorf("user %d: the live store remembers the command identities %x, the replay's %x", u, liveIDs[u], replayIDs[u])
		}
		if !failed && h.t.Failed() {
			key := topics.AppendUserID(nil, u)
			for _, r := range commands {
				if bytes.Equal(r.Key, key) {
					h.t.Logf("  user %d: commands partition %d offset %d %s %s", u, r.Partition, r.Offset, r.Value, header(r, topics.HeaderMisroutedFrom))
				}
			}
		}
	}

	// (2) No signal in a leave episode was forwarded, but for late leaves
	// with a window: by the live group, nor by the replay.
	inEpisode, late := h.checkForwarded("live", forwarded, live, true)
	h.checkForwarded("replay", h.e.readAll(cfg.Topics.Cohort), replayed, false)

	// A window, once recorded, is in every later record of its user
	// (promise 2): each one any live record carried is within one of the
	// user's windows now (moving left_at back carries a window to the new
	// boundary).
	for _, r := range h.e.readAll(h.e.set.Changelog) {
		m, err := topics.DecodeMemberRecord(r.Value)
		if err != nil || m.UserID < 1 || m.UserID > propUsers {
			continue // not a record of the history's users (the open transaction's was aborted)
		}
		for _, w := range m.LateLeaves {
			if !slices.ContainsFunc(live[m.UserID].LateLeaves, func(v topics.LateLeave) bool {
				return v.LeftAtNs <= w.LeftAtNs && w.ForwardedThroughNs <= v.ForwardedThroughNs
			}) {
				h.t.Errorf("user %d: window %+v of changelog partition %d offset %d is in none of the user's windows now %+v",
					m.UserID, w, r.Partition, r.Offset, live[m.UserID].LateLeaves)
			}
		}
	}
	h.t.Logf("%d steps, %d commands, %d signals, %d forwarded, %d of them in an episode, %d of those after a late leave and in a window",
		len(h.steps), len(h.cmds), len(h.sigs), len(forwarded), inEpisode, late)
}

// checkForwarded checks the history's signals among forwarded against
// the model: one whose event time lies in an episode of its user is an
// error, unless every leave that puts it there was acknowledged later
// than the grace after its event time and members' record of the user has
// a window holding it. once: a signal forwarded twice is an error too
// (a replay forwards a signal twice when a live instance had
// re-published it, misrouted after a growth, and the replay re-publishes
// the original again: each copy is a record of the input).
func (h *history) checkForwarded(who string, forwarded []*kgo.Record, members map[uint64]topics.MemberRecord, once bool) (inEpisode, late int) {
	h.t.Helper()
	seen := make(map[string]bool)
	for _, r := range forwarded {
		v := string(r.Value)
		if !strings.HasPrefix(v, "s") {
			continue // a judge
		}
		i, err := strconv.Atoi(v[1:])
		if err != nil || i >= len(h.sigs) {
			h.t.Errorf("%s: unknown value %q on the cohort topic", who, v)
			continue
		}
		if once && seen[v] {
			h.t.Errorf("%s: signal %s forwarded twice", who, v)
		}
		seen[v] = true
		s := h.sigs[i]
		ts := uint64(s.ts.UnixNano())
		if !modelOf(h.cmds, s.user, time.Time{}).holds(ts) {
			continue
		}
		inEpisode++
		if modelOf(h.cmds, s.user, s.ts.Add(h.cfg.Grace)).holds(ts) {
			h.t.Errorf("%s: signal %s of user %d at %d forwarded inside a leave episode whose leave was acknowledged within the grace",
				who, v, s.user, ts)
			continue
		}
		if !slices.ContainsFunc(members[s.user].LateLeaves, func(w topics.LateLeave) bool {
			return w.LeftAtNs <= ts && ts <= w.ForwardedThroughNs
		}) {
			h.t.Errorf("%s: signal %s of user %d at %d forwarded inside a leave episode, outside every late-leave window %+v",
				who, v, s.user, ts, members[s.user].LateLeaves)
			continue
		}
		late++
	}
	return inEpisode, late
}

// members returns every user's record from pr, which owns every partition.
func (h *history) members(pr *proc) map[uint64]topics.MemberRecord {
	h.t.Helper()
	out := make(map[uint64]topics.MemberRecord)
	eventually(h.t, 30*time.Second, func() error {
		for u := uint64(1); u <= propUsers; u++ {
			m, err := pr.Member(u)
			if err != nil {
				return err
			}
			out[u] = m
		}
		return nil
	})
	return out
}

// identities returns the command identities the store in dir remembers
// for each user, as its dump holds them.
func identities(t *testing.T, dir string) map[uint64][]byte {
	t.Helper()
	store, err := membership.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	out := make(map[uint64][]byte)
	if err := store.Export(func(u uint64, d []byte) error {
		dump, err := membership.DecodeDump(d)
		if err != nil {
			return fmt.Errorf("user %d: %w", u, err)
		}
		out[u] = bytes.Clone(dumpIdentities(d, dump))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// propModel is the test's own reading of the rules (README, "The rules,
// precisely", C5 to C7), sharing no code with the processor: a user's
// state after its commands in the order applied.
type propModel struct {
	left    bool
	leftAt  uint64
	history []topics.Episode
	ids     []propIdentity // the last 64, oldest first
}

type propIdentity struct {
	op   topics.Op
	at   uint64
	rid  string
	user uint64
}

// modelOf is user's model after the history's commands known by before
// (all of them when before is zero).
func modelOf(cmds []propCmd, user uint64, before time.Time) propModel {
	var m propModel
	for _, c := range cmds {
		if !before.IsZero() && c.known.After(before) {
			break
		}
		if c.cmd.UserID == user {
			m.apply(c.cmd)
		}
	}
	return m
}

func (m *propModel) apply(c topics.Command) {
	id := propIdentity{op: c.Op, at: c.AtNs, rid: c.RequestID, user: c.UserID}
	if slices.Contains(m.ids, id) {
		return // C5: a command seen (applied, idle or refused) changes nothing
	}
	m.ids = append(m.ids, id)
	if len(m.ids) > 64 {
		m.ids = m.ids[1:]
	}
	n := len(m.history)
	switch c.Op {
	case topics.Leave: // C6
		b := c.AtNs
		if n > 0 {
			b = max(b, m.history[n-1].RejoinedAtNs)
		}
		switch {
		case !m.left:
			m.left, m.leftAt = true, b
		case b < m.leftAt:
			m.leftAt = b
		}
		if n > 0 && m.history[n-1].LeftAtNs == m.leftAt && m.history[n-1].RejoinedAtNs == m.leftAt {
			m.history = m.history[:n-1] // the empty episode reopened
		}
	case topics.Rejoin: // C7
		if !m.left || c.AtNs < m.leftAt {
			return // nothing changes, or refused
		}
		m.history = append(m.history, topics.Episode{LeftAtNs: m.leftAt, RejoinedAtNs: c.AtNs})
		m.left, m.leftAt = false, 0
	}
}

// holds reports whether event time ts lies in one of m's episodes.
func (m propModel) holds(ts uint64) bool {
	if m.left && ts >= m.leftAt {
		return true
	}
	for _, e := range m.history {
		if e.LeftAtNs <= ts && ts < e.RejoinedAtNs {
			return true
		}
	}
	return false
}

func (m propModel) state() propState {
	s := propState{Status: "active", History: m.history}
	if m.left {
		s.Status, s.LeftAt = "left", m.leftAt
	}
	return s
}
