package integration

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/pkg/fanout"
	"github.com/cohortgate/cohortgate/topics"
)

// Topics are known by their IDs (pkg/fanout/topicids.go): these tests
// delete a topic and create it again under a running processor, as an
// operator may, and check that it notices within seconds and goes on: an
// input restarted from the new topic's beginning, an output produced to
// again, the changelog refilled; the commands topic halts it.

// recreateWithin bounds how long a running processor takes to go on after
// one of its topics was created again: its watcher's interval, a new run's
// start and a group join, with room for a loaded machine.
const recreateWithin = 45 * time.Second

// recreate deletes topic and creates it again with the env's partition
// count and the topic's configs, waits until the broker lists the new
// topic ID, and makes the test's own client forget the old one (franz-go
// never adopts a new ID). It returns the new ID.
func (e *env) recreate(topic topics.Topic) kadm.TopicID {
	e.t.Helper()
	ctx := e.ctx(90 * time.Second)
	name := string(topic)
	before, err := e.adm.ListTopics(ctx, name)
	if err != nil {
		e.t.Fatal(err)
	}
	old := before[name].ID
	resp, err := e.adm.DeleteTopics(ctx, name)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		e.t.Fatalf("delete %s: %v", name, err)
	}
	configs := make(map[string]*string)
	for _, s := range e.set.Specs() {
		if s.Topic == topic {
			for k, v := range s.Configs {
				configs[k] = &v
			}
		}
	}
	var id kadm.TopicID
	eventually(e.t, 30*time.Second, func() error {
		r, err := e.adm.CreateTopic(ctx, e.parts, 1, configs, name)
		if err == nil {
			err = r.Err
		}
		id = r.ID
		return err
	})
	e.cl.PurgeTopicsFromClient(name)
	eventually(e.t, 30*time.Second, func() error {
		td, err := e.adm.ListTopics(ctx, name)
		if err != nil {
			return err
		}
		if d, ok := td[name]; !ok || d.Err != nil || d.ID != id || int32(len(d.Partitions)) != e.parts {
			return fmt.Errorf("%s: not listed as topic ID %v yet", name, id)
		}
		return nil
	})
	if id == old {
		e.t.Fatalf("%s created again under its old ID %v", name, id)
	}
	return id
}

// waitForwarded waits until every value of want is on the cohort topic.
func (e *env) waitForwarded(d time.Duration, want ...string) {
	e.t.Helper()
	eventually(e.t, d, func() error {
		got := e.forwardedValues()
		for _, v := range want {
			if !slices.Contains(got, v) {
				return fmt.Errorf("%s not forwarded yet (%d forwarded)", v, len(got))
			}
		}
		return nil
	})
}

// TestCohortRecreatedWhileRunningResumes: the cohort topic deleted and
// created again under a running processor. franz-go keeps the old topic
// ID and fails every produce with UNKNOWN_TOPIC_ID: every cycle carrying
// a forwarded signal aborted, for ever. The processor now notices the new
// ID and produces to it, with a fresh session.
func TestCohortRecreatedWhileRunningResumes(t *testing.T) {
	e := newEnv(t, 2)
	pr := e.start(t.TempDir(), e.config())
	pr.waitReady(t, 2)
	t0 := time.Now()
	e.command(topics.Leave, 2, t0.Add(-time.Hour))
	e.signal(1, t0, "before")
	e.waitForwarded(30*time.Second, "before")

	e.recreate(e.set.Cohort)
	e.signal(1, t0, "after-1")
	e.signal(2, t0, "left-2")
	e.signal(3, t0, "after-3")
	e.waitForwarded(recreateWithin, "after-1", "after-3")
	e.waitDecided()
	e.assertForwarded([]string{"after-1", "after-3"}, []string{"left-2", "before"})
}

// TestDLQRecreatedWhileRunningResumes is the cohort's test for the DLQ.
func TestDLQRecreatedWhileRunningResumes(t *testing.T) {
	e := newEnv(t, 2)
	pr := e.start(t.TempDir(), e.config())
	pr.waitReady(t, 2)
	bad := func(v string) {
		e.produce(&kgo.Record{Topic: string(e.set.Signals), Key: []byte("not-a-user"), Value: []byte(v), Timestamp: time.Now()})
	}
	bad("bad-before")
	e.waitRecords(e.set.DLQ, 1)

	e.recreate(e.set.DLQ)
	bad("bad-after")
	e.signal(1, time.Now(), "good-after")
	e.waitForwarded(recreateWithin, "good-after")
	rs := e.waitRecords(e.set.DLQ, 1)
	if len(rs) != 1 || string(rs[0].Value) != "bad-after" {
		var vs []string
		for _, r := range rs {
			vs = append(vs, string(r.Value))
		}
		t.Errorf("new DLQ holds %q; want [bad-after]", vs)
	}
}

// latestRecords returns the latest record of each user on the changelog
// (a compacted topic keeps the last one of a key), by user.
func (e *env) latestRecords() map[uint64][]byte {
	e.t.Helper()
	out := make(map[uint64][]byte)
	for _, r := range e.readAll(e.set.Changelog) {
		u, err := topics.ParseUserID(r.Key)
		if err != nil {
			e.t.Fatalf("changelog key %q: %v", r.Key, err)
		}
		out[u] = r.Value
	}
	return out
}

// TestChangelogRecreatedWhileRunningRefills: the changelog deleted and
// created again under a running processor. Its records were what the
// purge job reads; the new one held only the records of commands applied
// after it (and franz-go kept producing to the old ID until the run
// restarted). The processor now refills it with the current record of
// every user of its partitions: each user's latest record is what the
// processor says of the user, boundaries, history and late-leave windows
// included, and a later leave reaches it too.
func TestChangelogRecreatedWhileRunningRefills(t *testing.T) {
	e := newEnv(t, 2)
	pr := e.start(t.TempDir(), e.config())
	pr.waitReady(t, 2)
	t0 := time.Now()
	e.command(topics.Leave, 1, t0.Add(-time.Hour))
	e.command(topics.Leave, 2, t0.Add(-2*time.Hour))
	e.command(topics.Rejoin, 2, t0.Add(-time.Hour))
	e.command(topics.Rejoin, 3, t0.Add(-time.Hour)) // active, never left: a record all the same
	e.signal(4, t0.Add(-time.Minute), "late")
	e.waitDecided()
	e.command(topics.Leave, 4, t0.Add(-2*time.Minute)) // after its signal was forwarded: a window
	users := []uint64{1, 2, 3, 4}
	eventually(t, 30*time.Second, func() error {
		if m, err := pr.Member(4); err != nil || len(m.LateLeaves) == 0 {
			return fmt.Errorf("user 4: %+v, %v; want a late-leave window", m, err)
		}
		return nil
	})
	e.judgeAll(2, "a")
	if got := e.latestRecords(); len(got) < len(users) {
		t.Fatalf("changelog before: %d users, want %d", len(got), len(users))
	}

	e.recreate(e.set.Changelog)
	check := func(users []uint64) error {
		got := e.latestRecords()
		for _, u := range users {
			m, err := pr.Member(u)
			if err != nil {
				return fmt.Errorf("user %d: %v", u, err)
			}
			v, ok := got[u]
			if !ok {
				return fmt.Errorf("user %d: no record on the new changelog", u)
			}
			rec, err := topics.DecodeMemberRecord(v)
			if err != nil {
				t.Fatalf("user %d: %v", u, err)
			}
			if a, b := string(topics.AppendMemberRecord(nil, rec)), string(topics.AppendMemberRecord(nil, m)); a != b {
				return fmt.Errorf("user %d: the new changelog says %s; the processor says %s", u, a, b)
			}
		}
		return nil
	}
	eventually(t, recreateWithin, func() error { return check(users) })

	e.command(topics.Leave, 5, t0)
	users = append(users, 5)
	eventually(t, 30*time.Second, func() error { return check(users) })

	// Once the refill is delivered, the offset metadata names the new
	// changelog: an owner with an empty data directory restores the
	// partitions' users from it, and says of each what the old owner said.
	e.judgeAll(2, "b")
	want := make(map[uint64]string)
	for _, u := range users {
		m, err := pr.Member(u)
		if err != nil {
			t.Fatal(err)
		}
		want[u] = string(topics.AppendMemberRecord(nil, m))
	}
	if err := pr.stop(t); err != nil {
		t.Fatal(err)
	}
	var handovers []fanout.HandoverInfo
	var mu sync.Mutex
	cfg := e.config()
	cfg.EventListener = fanout.EventListener{Handover: func(i fanout.HandoverInfo) {
		mu.Lock()
		handovers = append(handovers, i)
		mu.Unlock()
	}}
	b := e.start(t.TempDir(), cfg)
	b.waitReady(t, 2)
	for _, u := range users {
		m, err := b.Member(u)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(topics.AppendMemberRecord(nil, m)); got != want[u] {
			t.Errorf("user %d on a new owner: %s; want %s", u, got, want[u])
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(handovers) == 0 {
		t.Error("no partition was handed over to the owner with an empty data directory")
	}
	for _, h := range handovers {
		if h.Source != "changelog" {
			t.Errorf("partition %d was not restored from the refilled changelog: %+v", h.Partition, h)
		}
	}
}

// TestChangelogRecreatedWhileStoppedRefills: the same, with the changelog
// deleted and created again while no processor ran.
func TestChangelogRecreatedWhileStoppedRefills(t *testing.T) {
	e := newEnv(t, 2)
	dir := t.TempDir()
	pr := e.start(dir, e.config())
	pr.waitReady(t, 2)
	t0 := time.Now()
	for u := uint64(1); u <= 6; u++ {
		e.command(topics.Leave, u, t0.Add(-time.Hour))
	}
	e.judgeAll(2, "a")
	if err := pr.stop(t); err != nil {
		t.Fatal(err)
	}
	e.recreate(e.set.Changelog)
	pr = e.start(dir, e.config())
	pr.waitReady(t, 2)
	eventually(t, recreateWithin, func() error {
		got := e.latestRecords()
		for u := uint64(1); u <= 6; u++ {
			rec, err := topics.DecodeMemberRecord(got[u])
			if err != nil || rec.Status != "left" {
				return fmt.Errorf("user %d: %q on the new changelog (%v); want left", u, got[u], err)
			}
		}
		return nil
	})
}

// TestSignalsRecreatedWhileRunningStartsOver: the signals topic deleted
// and created again under a running processor, and filled past where the
// old one had been decided. The processor reads the new topic from its
// beginning: every signal of an active user is forwarded, none of a user
// who left.
func TestSignalsRecreatedWhileRunningStartsOver(t *testing.T) {
	e := newEnv(t, 2)
	pr := e.start(t.TempDir(), e.config())
	pr.waitReady(t, 2)
	t0 := time.Now()
	e.command(topics.Leave, 2, t0.Add(-time.Hour))
	for i := range 6 {
		e.signal(uint64(1+i%2*2), t0, fmt.Sprint("old-", i)) // users 1 and 3
	}
	e.waitDecided()

	e.recreate(e.set.Signals)
	var want []string
	for i := range 12 {
		u := uint64(1 + i%3) // 1, 2, 3
		v := fmt.Sprint("new-", u, "-", i)
		e.signal(u, t0, v)
		if u != 2 {
			want = append(want, v)
		}
	}
	e.waitForwarded(recreateWithin, want...)
	e.waitDecided()
	for _, v := range e.forwardedValues() {
		if strings.HasPrefix(v, "new-2-") {
			t.Errorf("%s was forwarded: a signal of a user who had left", v)
		}
	}
}

// TestCommandsRecreatedWhileRunningHalts: the commands topic deleted and
// created again under a running processor halts it, as at a start: its
// state reflects commands that are gone.
func TestCommandsRecreatedWhileRunningHalts(t *testing.T) {
	e := newEnv(t, 2)
	cfg := e.config()
	pr := e.start(t.TempDir(), cfg)
	pr.waitReady(t, 2)
	e.command(topics.Leave, 1, time.Now())
	e.judgeAll(2, "a")
	e.recreate(e.set.Commands)
	select {
	case err := <-pr.done:
		pr.done <- err
		var recreated *fanout.CommandsRecreatedError
		if !errors.As(err, &recreated) || !strings.Contains(err.Error(), "empty data directory") {
			t.Fatalf("Run = %v, want a CommandsRecreatedError naming the way out", err)
		}
	case <-time.After(recreateWithin):
		t.Fatalf("processor did not halt within %v over a recreated commands topic", recreateWithin)
	}
	if ok, why := pr.Ready(); ok || !strings.Contains(why, "deleted and created again") {
		t.Errorf("Ready = %v, %q; want not ready, saying why", ok, why)
	}
}

// TestSignalsRecreatedIgnoresOldOffsets: the signals topic deleted and
// created again, and the group's offsets for it committed again after
// the deletion, as a cycle under way when it was deleted commits them (by
// topic name, landing on the new topic). Read from them, the new topic's
// signals below them were skipped: never forwarded, never dead-lettered.
// The offset metadata now names the inputs' topic IDs, and an offset
// committed for another topic of the name is not used: the new topic is
// read from its beginning.
func TestSignalsRecreatedIgnoresOldOffsets(t *testing.T) {
	e := newEnv(t, 2)
	dir := t.TempDir()
	pr := e.start(dir, e.config())
	pr.waitReady(t, 2)
	t0 := time.Now()
	e.command(topics.Leave, 2, t0.Add(-time.Hour))
	for i := range 8 {
		e.signal(uint64(1+i%2*2), t0, fmt.Sprint("old-", i)) // users 1 and 3
	}
	e.waitDecided()
	if err := pr.stop(t); err != nil {
		t.Fatal(err)
	}
	ctx := e.ctx(60 * time.Second)
	old, err := e.adm.FetchOffsetsForTopics(ctx, e.group, string(e.set.Signals))
	if err != nil {
		t.Fatal(err)
	}
	e.recreate(e.set.Signals)
	var want []string
	for i := range 12 {
		u := uint64(1 + i%3) // 1, 2, 3
		v := fmt.Sprint("new-", u, "-", i)
		e.signal(u, t0, v)
		if u != 2 {
			want = append(want, v)
		}
	}
	resp, err := e.adm.CommitOffsets(ctx, e.group, old.Offsets())
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("committing the old topic's offsets again: %v", err)
	}

	pr = e.start(dir, e.config())
	pr.waitReady(t, 2)
	e.waitForwarded(recreateWithin, want...)
	e.waitDecided()
	for _, v := range e.forwardedValues() {
		if strings.HasPrefix(v, "new-2-") {
			t.Errorf("%s was forwarded: a signal of a user who had left", v)
		}
	}
}

// TestCohortRecreatedUnderOpenCycleRedoes: the cohort topic deleted and
// created again while a cycle that forwarded a signal to it is still
// open. The record was never committed on the old topic, so no reader
// saw it; committing the cycle (its input offsets with it) would lose the
// signal. The cycle must not commit: the signal is forwarded again, to
// the new topic.
func TestCohortRecreatedUnderOpenCycleRedoes(t *testing.T) {
	e := newEnv(t, 1)
	cfg := e.config()
	cfg.CommitInterval = 4 * time.Second // the cycle stays open while the topic is recreated
	pr := e.start(t.TempDir(), cfg)
	pr.waitReady(t, 1)
	ctx := e.ctx(60 * time.Second)
	endOf := func() int64 {
		ends, err := e.adm.ListEndOffsets(ctx, string(e.set.Cohort))
		if err != nil {
			t.Fatal(err)
		}
		o, _ := ends.Lookup(string(e.set.Cohort), 0)
		return o.Offset
	}
	before := endOf()
	e.signal(1, time.Now(), "in-open-cycle")
	eventually(t, 30*time.Second, func() error {
		if endOf() <= before {
			return errors.New("the signal is not on the cohort topic yet (uncommitted)")
		}
		return nil
	})
	e.recreate(e.set.Cohort)
	// Nothing more is produced in the cycle: its client learns of the new
	// topic only from a later metadata refresh.
	e.waitForwarded(recreateWithin, "in-open-cycle")
	e.signal(1, time.Now(), "after")
	e.waitForwarded(recreateWithin, "after")
}
