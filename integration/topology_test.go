package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/pkg/fanout"
	"github.com/cohortgate/cohortgate/pkg/membership"
	"github.com/cohortgate/cohortgate/topics"
)

// The partition counts and IDs of the topics are part of the state (see
// pkg/fanout/layout.go): these tests change them under a processor, or
// between its runs, as an operator does, and check that no signal of a
// user who left is forwarded and no leave is lost.

// createTopicsWith creates the env's topics, each with the partition
// count parts gives its name (the env's count where it gives none).
func (e *env) createTopicsWith(parts map[topics.Topic]int32) {
	e.t.Helper()
	ctx := e.ctx(30 * time.Second)
	for _, s := range e.set.Specs() {
		n, ok := parts[s.Topic]
		if !ok {
			n = e.parts
		}
		configs := make(map[string]*string)
		for k, v := range s.Configs {
			configs[k] = &v
		}
		if _, err := e.adm.CreateTopic(ctx, n, 1, configs, string(s.Topic)); err != nil {
			e.t.Fatalf("create %s: %v", s.Topic, err)
		}
	}
	e.waitPartitions(parts)
}

// waitPartitions waits until every topic of the env shows the partition
// count parts gives it (the env's count where it gives none).
func (e *env) waitPartitions(parts map[topics.Topic]int32) {
	e.t.Helper()
	eventually(e.t, 30*time.Second, func() error {
		td, err := e.adm.ListTopics(e.ctx(10*time.Second), e.names()...)
		if err != nil {
			return err
		}
		for _, s := range e.set.Specs() {
			want, ok := parts[s.Topic]
			if !ok {
				want = e.parts
			}
			if d, ok := td[string(s.Topic)]; !ok || d.Err != nil || int32(len(d.Partitions)) != want {
				return fmt.Errorf("topic %s: not visible with %d partitions yet", s.Topic, want)
			}
		}
		return nil
	})
}

// grow raises the partition count of each topic to n, as
// `kafka-topics --alter --partitions` does.
func (e *env) grow(n int32, ts ...topics.Topic) {
	e.t.Helper()
	var names []string
	for _, t := range ts {
		names = append(names, string(t))
	}
	resp, err := e.adm.UpdatePartitions(e.ctx(30*time.Second), int(n), names...)
	if err != nil {
		e.t.Fatalf("grow %v to %d partitions: %v", names, n, err)
	}
	for _, r := range resp.Sorted() {
		if r.Err != nil {
			e.t.Fatalf("grow %s to %d partitions: %v", r.Topic, n, r.Err)
		}
	}
}

// usersMoving returns count users whose keys are in partition from of n
// and in partition to of m, from user 1 on. (From n to 2n partitions, a
// key of partition p stays in p or moves to p+n.)
func usersMoving(count int, n, from, m, to int32) []uint64 {
	var out []uint64
	for u := uint64(1); len(out) < count && u < 1<<20; u++ {
		k := topics.AppendUserID(nil, u)
		if murmur2Partition(k, int(n)) == from && murmur2Partition(k, int(m)) == to {
			out = append(out, u)
		}
	}
	if len(out) < count {
		panic(fmt.Sprintf("fewer than %d users in partition %d of %d and %d of %d", count, from, n, to, m))
	}
	return out
}

// userMoving is the first of usersMoving.
func userMoving(n, from, m, to int32) uint64 { return usersMoving(1, n, from, m, to)[0] }

// judgeAll produces a signal in every partition of n and waits until the
// group committed them: every command applied so far was judged, and its
// changelog record committed with the group's offsets.
func (e *env) judgeAll(n int32, tag string) {
	e.t.Helper()
	for p, u := int32(0), uint64(900_000); p < n; u++ {
		if murmur2Partition(topics.AppendUserID(nil, u), int(n)) == p {
			e.signal(u, time.Now(), fmt.Sprint("judge-", tag, "-", p))
			p++
		}
	}
	e.waitDecided()
}

// assertNotForwarded fails the test if a value in banned reached the
// cohort topic, or one in want did not.
func (e *env) assertForwarded(want, banned []string) {
	e.t.Helper()
	got := e.forwardedValues()
	for _, v := range banned {
		if slices.Contains(got, v) {
			e.t.Errorf("%s was forwarded: a signal of a user who had left", v)
		}
	}
	for _, v := range want {
		if !slices.Contains(got, v) {
			e.t.Errorf("%s was not forwarded: a signal of an active user", v)
		}
	}
}

// TestGrownChangelogRestores: commands and signals with 2 partitions,
// the changelog created with 1; a user leaves, its record lands in
// changelog partition 0; the changelog is grown to 2. A new owner with an
// empty data directory then finds as many changelog partitions as
// commands, and read only changelog partition p: it restored no user and
// forwarded the signals of the user who left. The offset metadata now
// says under which changelog count the records were written, and a
// restore reads every partition when it changed.
func TestGrownChangelogRestores(t *testing.T) {
	e := bareEnv(t, 2)
	e.createTopicsWith(map[topics.Topic]int32{e.set.Changelog: 1})
	cfg := e.config()
	cfg.CreateTopics = false
	a := e.start(t.TempDir(), cfg)
	a.waitReady(t, 2)
	u := userMoving(2, 1, 2, 1) // signals partition 1; its record in changelog partition 0 of 1
	t0 := time.Now()
	e.command(topics.Leave, u, t0)
	e.judgeAll(2, "a")
	if err := a.stop(t); err != nil {
		t.Fatalf("a: %v", err)
	}
	e.grow(2, e.set.Changelog)
	e.waitPartitions(nil)

	b := e.start(t.TempDir(), cfg)
	b.waitReady(t, 2)
	if m, err := b.Member(u); err != nil || m.Status != "left" {
		t.Fatalf("user %d on the new owner: %+v, %v; want left (restored from changelog partition 0)", u, m, err)
	}
	e.signal(u, t0.Add(time.Second), "after-leave")
	e.signal(u+1_000_000, t0.Add(time.Second), "active")
	e.waitDecided()
	e.assertForwarded([]string{"active"}, []string{"after-leave"})
}

// TestCommandsGrownWhileRunning: the commands topic grown while the
// processor runs. Producers (this test's client, with fresh metadata) put
// half the users' commands in partitions no claim read: never applied,
// and the users' signals forwarded, while /readyz said ready. The
// processor now notices within its TopologyInterval, takes every
// partition again, and waits, not ready and saying why, until the inputs
// are grown too; then a leave in a new partition stops its user, and so
// does a leave applied before the growth whose user moved.
func TestCommandsGrownWhileRunning(t *testing.T) {
	e := newEnv(t, 2)
	cfg := e.config()
	cfg.TopologyInterval = 100 * time.Millisecond
	var changes []string
	cfg.EventListener.TopologyChanged = func(i fanout.TopologyChangedInfo) { changes = append(changes, i.Changes...) }
	a := e.start(t.TempDir(), cfg)
	a.waitReady(t, 2)
	t0 := time.Now()
	moved := userMoving(2, 1, 4, 3) // left before the growth, in partition 1; its partition is 3 after
	e.command(topics.Leave, moved, t0)
	e.judgeAll(2, "before")

	e.grow(4, e.set.Commands)
	eventually(t, 30*time.Second, func() error {
		ok, why := a.Ready()
		if ok || !strings.Contains(why, "co-partitioned") {
			return fmt.Errorf("ready %v (%s); want not ready: the inputs and the commands disagree", ok, why)
		}
		return nil
	})
	fresh, err := kgo.NewClient(kgo.SeedBrokers(broker.addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	newcomer := userMoving(2, 0, 4, 2) // leaves after the growth: its command lands in partition 2
	c := topics.Command{Op: topics.Leave, UserID: newcomer, AtNs: uint64(t0.UnixNano()), HasAt: true, RequestID: "n"}
	r := &kgo.Record{Topic: string(e.set.Commands), Key: topics.AppendUserID(nil, newcomer), Value: topics.AppendCommand(nil, c)}
	if err := fresh.ProduceSync(e.ctx(30*time.Second), r).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if r.Partition != 2 {
		t.Fatalf("the leave of user %d landed in partition %d, want 2 (of 4)", newcomer, r.Partition)
	}
	// Signals produced now, to the 2 partitions the inputs still have:
	// held while the topics disagree, decided under 4 partitions after.
	e.signal(newcomer, t0.Add(time.Second), "newcomer-after-leave")
	e.signal(moved, t0.Add(time.Second), "moved-after-leave")
	e.signal(usersMoving(2, 2, 0, 4, 2)[1], t0.Add(time.Second), "active")

	e.grow(4, e.set.Signals)
	a.waitReady(t, 4)
	e.judgeAll(4, "after")
	e.assertForwarded([]string{"active"}, []string{"newcomer-after-leave", "moved-after-leave"})
	if len(changes) == 0 {
		t.Error("no TopologyChanged event")
	}
	for _, u := range []uint64{newcomer, moved} {
		if m, err := a.Member(u); err != nil || m.Status != "left" {
			t.Errorf("user %d: %+v, %v; want left", u, m, err)
		}
	}
}

// TestGrownBetweenRunsMigrates: commands and signals grown together from
// 2 to 4 partitions while no processor runs (so the start check passes).
// A user's key moved from partition 1 to 3: its leave, applied before, is
// in partition 1 and in the changelog; another user's leave was written
// to partition 1 while nothing ran, and applied by nobody. An empty new
// owner used to restore partition 1, replay partition 3 from 0 and find
// neither: both users active, their signals forwarded. Under the new
// count every partition's owner restores its users from the changelog,
// wherever their records are, and re-publishes its users' commands that
// other partitions hold beyond their judged offsets before it forwards.
// The same holds for the first owner restarted on its own data directory
// (which forgets its state, built under 2 partitions).
func TestGrownBetweenRunsMigrates(t *testing.T) {
	for _, own := range []bool{false, true} {
		name := "empty data directory"
		if own {
			name = "its own data directory"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, 2)
			cfg := e.config()
			dir := t.TempDir()
			a := e.start(dir, cfg)
			a.waitReady(t, 2)
			t0 := time.Now()
			users := usersMoving(3, 2, 1, 4, 3)
			judged, unjudged, active := users[0], users[1], users[2]
			e.command(topics.Leave, judged, t0)
			e.judgeAll(2, "a")
			if err := a.stop(t); err != nil {
				t.Fatalf("a: %v", err)
			}
			e.command(topics.Leave, unjudged, t0) // to partition 1 of 2: the test's client knows 2
			e.grow(4, e.set.Commands, e.set.Signals, e.set.Changelog)
			e.waitPartitions(map[topics.Topic]int32{e.set.Commands: 4, e.set.Signals: 4, e.set.Changelog: 4})

			if !own {
				dir = t.TempDir()
			}
			b := e.start(dir, cfg)
			b.waitReady(t, 4)
			fresh, err := kgo.NewClient(kgo.SeedBrokers(broker.addrs...))
			if err != nil {
				t.Fatal(err)
			}
			defer fresh.Close()
			for _, s := range []struct {
				user  uint64
				value string
			}{{judged, "judged-after-leave"}, {unjudged, "unjudged-after-leave"}, {active, "active"}} {
				r := &kgo.Record{Topic: string(e.set.Signals), Key: topics.AppendUserID(nil, s.user), Value: []byte(s.value),
					Timestamp: t0.Add(time.Second)}
				if err := fresh.ProduceSync(e.ctx(30*time.Second), r).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			e.waitDecided()
			e.assertForwarded([]string{"active"}, []string{"judged-after-leave", "unjudged-after-leave"})
			for _, u := range []uint64{judged, unjudged} {
				if m, err := b.Member(u); err != nil || m.Status != "left" {
					t.Errorf("user %d: %+v, %v; want left", u, m, err)
				}
			}
		})
	}
}

// TestCommandsRecreatedWhileStoppedHalts: the commands topic deleted and
// created again while the processor is stopped, then refilled past the
// old checkpoint. The processor resumed at its old offset and skipped the
// leaves below it (no halt: the log end was above the checkpoint, and the
// leader epoch it saw is not kept across a restart). The store now keeps
// the commands topic's ID with its checkpoints: the restart refuses with
// a clear error, and an instance with an empty data directory replays the
// new topic from offset 0 (its offset metadata names the old ID).
func TestCommandsRecreatedWhileStoppedHalts(t *testing.T) {
	e := newEnv(t, 2)
	cfg := e.config()
	dir := t.TempDir()
	a := e.start(dir, cfg)
	a.waitReady(t, 2)
	t0 := time.Now()
	for u := uint64(1); u <= 10; u++ {
		e.command(topics.Leave, u, t0)
	}
	e.judgeAll(2, "a")
	if err := a.stop(t); err != nil {
		t.Fatalf("a: %v", err)
	}

	ctx := e.ctx(60 * time.Second)
	if _, err := e.adm.DeleteTopics(ctx, string(e.set.Commands)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		td, err := e.adm.ListTopics(ctx, string(e.set.Commands))
		if err != nil {
			return err
		}
		if td.Has(string(e.set.Commands)) {
			return errors.New("commands topic still listed")
		}
		return nil
	})
	configs := make(map[string]*string)
	for _, spec := range e.set.Specs() {
		if spec.Topic == e.set.Commands {
			for k, v := range spec.Configs {
				configs[k] = &v
			}
		}
	}
	eventually(t, 30*time.Second, func() error {
		_, err := e.adm.CreateTopic(ctx, 2, 1, configs, string(e.set.Commands))
		return err
	})
	e.waitPartitions(nil)
	// Leaves of other users, past the old checkpoints, by a client that
	// knows the new topic's ID.
	fresh, err := kgo.NewClient(kgo.SeedBrokers(broker.addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	for u := uint64(101); u <= 140; u++ {
		c := topics.Command{Op: topics.Leave, UserID: u, AtNs: uint64(t0.UnixNano()), HasAt: true, RequestID: "r"}
		r := &kgo.Record{Topic: string(e.set.Commands), Key: topics.AppendUserID(nil, u), Value: topics.AppendCommand(nil, c)}
		if err := fresh.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	store, err := membership.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := fanout.New(cfg, store)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err = p.Run(runCtx)
	store.Close()
	var recreated *fanout.CommandsRecreatedError
	if !errors.As(err, &recreated) {
		t.Fatalf("Run on the old data directory = %v; want a CommandsRecreatedError", err)
	}
	if !strings.Contains(err.Error(), "empty data directory") {
		t.Errorf("error %q does not say the way out", err)
	}

	b := e.start(t.TempDir(), cfg)
	b.waitReady(t, 2)
	for u := uint64(101); u <= 140; u++ {
		if m, err := b.Member(u); err != nil || m.Status != "left" {
			t.Errorf("user %d on an empty data directory: %+v, %v; want left (the new topic replayed)", u, m, err)
		}
	}
}

// TestRestoreWaitsForOpenTransactionOnChangelog: a new owner restored its
// users from the changelog read to its last stable offset. A transaction
// left open on the changelog (here a second transactional writer; on
// Apache Kafka also the gap between a commit of the group's offsets and
// its markers on the changelog) hid the records the previous owner had
// committed with its judged offset: the restore forgot a leave, and the
// user's signals were forwarded. The read now goes to the high watermark
// and waits, saying so in /v1/partitions, until the transaction ends.
func TestRestoreWaitsForOpenTransactionOnChangelog(t *testing.T) {
	e := newEnv(t, 1)
	cfg := e.config()
	a := e.start(t.TempDir(), cfg)
	a.waitReady(t, 1)
	// A first command has a read the changelog's windows before the
	// transaction opens (that read would wait for it too).
	e.command(topics.Leave, 7, time.Now())
	e.judgeAll(1, "first")

	// The open transaction begins before the leave's record: it holds the
	// last stable offset below the record, as a commit's missing markers
	// would.
	hostile, err := kgo.NewClient(kgo.SeedBrokers(broker.addrs...), kgo.TransactionalID("hostile-"+randomID()),
		kgo.TransactionTimeout(5*time.Minute), kgo.DefaultProduceTopic(string(e.set.Changelog)))
	if err != nil {
		t.Fatal(err)
	}
	defer hostile.Close()
	ctx := e.ctx(60 * time.Second)
	if err := hostile.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := hostile.ProduceSync(ctx, &kgo.Record{Key: []byte("999999"), Value: []byte(`{}`)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	u := uint64(42)
	t0 := time.Now()
	e.command(topics.Leave, u, t0)
	e.judgeAll(1, "a")
	if err := a.stop(t); err != nil {
		t.Fatalf("a: %v", err)
	}

	b := e.start(t.TempDir(), cfg)
	eventually(t, 30*time.Second, func() error {
		for _, st := range b.Partitions() {
			if strings.Contains(st.Waiting, "open on them") {
				return nil
			}
		}
		return fmt.Errorf("partitions %+v: none says it waits for the open transaction", b.Partitions())
	})
	e.signal(u, t0.Add(time.Second), "after-leave")
	if ok, why := b.Ready(); ok {
		t.Fatalf("ready (%s) while the changelog's records are held", why)
	}
	if err := hostile.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	b.waitReady(t, 1)
	e.waitDecided()
	e.assertForwarded(nil, []string{"after-leave"})
	if m, err := b.Member(u); err != nil || m.Status != "left" {
		t.Errorf("user %d: %+v, %v; want left", u, m, err)
	}
}

// TestGrowthEqualsReplay: the commands, signals and changelog grow from
// 2 to 4 partitions while a processor runs, and a user's key moves from
// partition 1 to 3. Its state on the running processor must equal what a
// replay of the commands from offset 0 (a new group, an empty data dir)
// computes.
//
//   - A leave before the growth and a rejoin after it: the running
//     processor restored the user from the changelog (left) and applied
//     the rejoin: active, one closed episode. A replay read partition 3
//     first (the rejoin, of an active user: nothing) and re-published the
//     leave from partition 1 after it (rule C2): left, no episode. The
//     migration copied only the commands beyond the judged offset; it now
//     copies every command of a moved user from offset 0.
//   - A leave in partition 1, then a rejoin produced to partition 0 and
//     applied as its copy in partition 1: read from offset 0 of every old
//     partition, the rejoin was copied from partition 0 before the leave
//     from partition 1, and the replay met the rejoin first (left, no
//     episode). A record misrouted under the count it was read under is
//     now copied only from where it was applied.
//
// (Found by TestShortcutsEqualReplay.)
func TestGrowthEqualsReplay(t *testing.T) {
	for _, tc := range []struct {
		name          string
		before, after func(e *env, u uint64, t0 time.Time, fresh *kgo.Client)
	}{
		{"leave before, rejoin after", func(e *env, u uint64, t0 time.Time, _ *kgo.Client) {
			e.command(topics.Leave, u, t0)
		}, func(e *env, u uint64, t0 time.Time, fresh *kgo.Client) {
			c := topics.Command{Op: topics.Rejoin, UserID: u, AtNs: uint64(t0.Add(time.Second).UnixNano()), HasAt: true, RequestID: "after"}
			r := &kgo.Record{Topic: string(e.set.Commands), Key: topics.AppendUserID(nil, u), Value: topics.AppendCommand(nil, c)}
			if err := fresh.ProduceSync(e.ctx(30*time.Second), r).FirstErr(); err != nil {
				e.t.Fatal(err)
			}
			if r.Partition != 3 {
				e.t.Fatalf("the rejoin of user %d landed in partition %d, want 3 (of 4)", u, r.Partition)
			}
		}},
		{"misrouted rejoin before", func(e *env, u uint64, t0 time.Time, _ *kgo.Client) {
			e.command(topics.Leave, u, t0)
			c := topics.Command{Op: topics.Rejoin, UserID: u, AtNs: uint64(t0.Add(time.Second).UnixNano()), HasAt: true, RequestID: "misrouted"}
			r := &kgo.Record{Topic: string(e.set.Commands), Partition: 0, Key: topics.AppendUserID(nil, u), Value: topics.AppendCommand(nil, c)}
			manual, err := kgo.NewClient(kgo.SeedBrokers(broker.addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			if err != nil {
				e.t.Fatal(err)
			}
			defer manual.Close()
			if err := manual.ProduceSync(e.ctx(30*time.Second), r).FirstErr(); err != nil {
				e.t.Fatal(err)
			}
			from := fmt.Sprintf("%d/%d", r.Partition, r.Offset)
			eventually(e.t, 30*time.Second, func() error {
				for _, rec := range e.readAll(e.set.Commands) {
					if rec.Partition == 1 && header(rec, topics.HeaderMisroutedFrom) == from {
						return nil
					}
				}
				return fmt.Errorf("the rejoin at %s not re-published to partition 1 yet", from)
			})
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 2)
			cfg := e.config()
			cfg.TopologyInterval = 100 * time.Millisecond
			a := e.start(t.TempDir(), cfg)
			a.waitReady(t, 2)
			u := userMoving(2, 1, 4, 3)
			t0 := time.Now().Truncate(time.Millisecond)
			tc.before(e, u, t0, nil)
			e.judgeAll(2, "before")
			e.grow(4, e.set.Commands, e.set.Signals, e.set.Changelog)
			e.waitPartitions(map[topics.Topic]int32{e.set.Commands: 4, e.set.Signals: 4, e.set.Changelog: 4})
			a.waitReady(t, 4)
			fresh, err := kgo.NewClient(kgo.SeedBrokers(broker.addrs...))
			if err != nil {
				t.Fatal(err)
			}
			defer fresh.Close()
			if tc.after != nil {
				tc.after(e, u, t0, fresh)
			}
			want := []topics.Episode{{LeftAtNs: uint64(t0.UnixNano()), RejoinedAtNs: uint64(t0.Add(time.Second).UnixNano())}}
			eventually(t, 30*time.Second, func() error {
				m, err := a.Member(u)
				if err != nil || m.Status != "active" || !slices.Equal(m.History, want) {
					return fmt.Errorf("user %d on the live owner: %+v, %v; want active with history %v", u, m, err, want)
				}
				return nil
			})
			if err := a.stop(t); err != nil {
				t.Fatalf("a: %v", err)
			}

			// The replay: its own group, changelog and outputs, an empty
			// data dir.
			rcfg := e.config()
			rcfg.Group += "-replay"
			rcfg.Partitions = 4
			rcfg.Topics.Cohort += "-replay"
			rcfg.Topics.DLQ += "-replay"
			rcfg.Topics.Changelog += "-replay"
			t.Cleanup(func() {
				ctx := e.ctx(30 * time.Second)
				_, _ = e.adm.DeleteTopics(ctx, string(rcfg.Topics.Cohort), string(rcfg.Topics.DLQ), string(rcfg.Topics.Changelog))
				_, _ = e.adm.DeleteGroup(ctx, rcfg.Group)
			})
			b := e.start(t.TempDir(), rcfg)
			b.waitReady(t, 4)
			// The replay re-publishes what it finds misrouted; a signal of
			// partition 3 it decided after the commands stopped growing
			// means that it applied every copy.
			prev := ""
			for round := 0; ; round++ {
				if round == 8 {
					t.Fatal("the commands topic still grows after 8 rounds")
				}
				s := &kgo.Record{Topic: string(e.set.Signals), Key: topics.AppendUserID(nil, u), Value: []byte("judge"), Timestamp: time.Now()}
				if err := fresh.ProduceSync(e.ctx(30*time.Second), s).FirstErr(); err != nil {
					t.Fatal(err)
				}
				e.waitDecidedBy(rcfg.Group)
				ends, err := e.adm.ListEndOffsets(e.ctx(30*time.Second), string(e.set.Commands))
				if err != nil {
					t.Fatal(err)
				}
				if now := fmt.Sprint(ends.Offsets()); now != prev {
					prev = now
					continue
				}
				break
			}
			m, err := b.Member(u)
			if err != nil {
				t.Fatal(err)
			}
			if m.Status != "active" || !slices.Equal(m.History, want) {
				t.Errorf("user %d replayed: %s with history %v; the live owner had it active with history %v",
					u, m.Status, m.History, want)
			}
		})
	}
}

// TestGrowthMigratesUnjudgedPartition: a processor ran under 2
// partitions and committed offset metadata for partition 1 that judged
// no command (there was none yet). While no processor ran, a user of
// partition 1 left, and the commands, signals and changelog grew to 4,
// the user's key moving to partition 3. A partition whose metadata
// judged nothing under the old count was not taken for one whose
// commands must be copied to their users' new partitions: partition 3
// was ready with the user active, and the leave reached it only when
// partition 1's owner re-published it (rule C2), as if it had been
// misrouted, after signals of the user may have been forwarded. (Found
// by TestShortcutsEqualReplay, where the leave was applied just before a
// growth and its changelog record had not committed yet.)
func TestGrowthMigratesUnjudgedPartition(t *testing.T) {
	e := newEnv(t, 2)
	cfg := e.config()
	a := e.start(t.TempDir(), cfg)
	a.waitReady(t, 2)
	e.judgeAll(2, "a")
	if err := a.stop(t); err != nil {
		t.Fatalf("a: %v", err)
	}
	u := userMoving(2, 1, 4, 3)
	t0 := time.Now()
	e.command(topics.Leave, u, t0) // to partition 1 of 2: the test's client knows 2
	e.grow(4, e.set.Commands, e.set.Signals, e.set.Changelog)
	e.waitPartitions(map[topics.Topic]int32{e.set.Commands: 4, e.set.Signals: 4, e.set.Changelog: 4})

	b := e.start(t.TempDir(), cfg)
	b.waitReady(t, 4)
	// Ready means partition 3 caught up with its commands: the leave must
	// be among them, not on its way.
	if m, err := b.Member(u); err != nil || m.Status != "left" {
		t.Fatalf("user %d once partition 3 is ready: %+v, %v; want left", u, m, err)
	}
}

// TestGrowthKeepsLateLeaveWindows: a signal of a user is forwarded from
// partition 1 of 2; the commands, signals and changelog grow to 4, the
// user's key moving to partition 3; then the user leaves late, its
// boundary before the signal. The new partition 3 had no offset metadata,
// so its claim took no earlier owner for having decided anything, found
// no forwarded signal of the user in its own record, and recorded no
// window: the forwarded signal leaked silently (promise 2). A claim made
// under a count that changed since its partition's metadata now inherits
// the highest event time any partition decided, and records the window,
// not exact. (Found by TestShortcutsEqualReplay.)
func TestGrowthKeepsLateLeaveWindows(t *testing.T) {
	e := newEnv(t, 2)
	cfg := e.config()
	cfg.TopologyInterval = 100 * time.Millisecond
	a := e.start(t.TempDir(), cfg)
	a.waitReady(t, 2)
	u := userMoving(2, 1, 4, 3)
	t0 := time.Now().Truncate(time.Millisecond)
	e.signal(u, t0.Add(100*time.Millisecond), "before-growth")
	e.waitDecided()
	e.assertForwarded([]string{"before-growth"}, nil)

	e.grow(4, e.set.Commands, e.set.Signals, e.set.Changelog)
	e.waitPartitions(map[topics.Topic]int32{e.set.Commands: 4, e.set.Signals: 4, e.set.Changelog: 4})
	a.waitReady(t, 4)
	fresh, err := kgo.NewClient(kgo.SeedBrokers(broker.addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	c := topics.Command{Op: topics.Leave, UserID: u, AtNs: uint64(t0.UnixNano()), HasAt: true, RequestID: "late"}
	r := &kgo.Record{Topic: string(e.set.Commands), Key: topics.AppendUserID(nil, u), Value: topics.AppendCommand(nil, c)}
	if err := fresh.ProduceSync(e.ctx(30*time.Second), r).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if r.Partition != 3 {
		t.Fatalf("the leave of user %d landed in partition %d, want 3 (of 4)", u, r.Partition)
	}
	ts := uint64(t0.Add(100 * time.Millisecond).UnixNano())
	eventually(t, 30*time.Second, func() error {
		m, err := a.Member(u)
		if err != nil || m.Status != "left" {
			return fmt.Errorf("user %d: %+v, %v; want left", u, m, err)
		}
		if !slices.ContainsFunc(m.LateLeaves, func(w topics.LateLeave) bool {
			return w.LeftAtNs <= ts && ts <= w.ForwardedThroughNs
		}) {
			t.Fatalf("user %d left at %d after its signal at %d was forwarded; windows %+v hold none of it", u, t0.UnixNano(), ts, m.LateLeaves)
		}
		return nil
	})
}
