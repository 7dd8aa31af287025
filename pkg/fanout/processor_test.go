package fanout

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohortgate/cohortgate/pkg/membership"
)

// TestReadyWaitsForTheGroup: a started processor is not ready until the
// consumer group has assigned it its partitions and they have caught up.
// Before, it owned nothing while its join was pending, so it had nothing
// to catch up with and /readyz said ready: a rolling restart would take
// down the next instance before this one forwarded anything, and a start's
// time to ready left out the join (the broker's
// group.initial.rebalance.delay.ms, 3s by default, is spent there). The
// broker here holds the processor's JoinGroup until the test lets it go.
func TestReadyWaitsForTheGroup(t *testing.T) {
	const parts = 2
	c, set := fakeCluster(t, parts)
	joining, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	c.ControlKey(int16(kmsg.JoinGroup), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		once.Do(func() {
			close(joining)
			c.SleepControl(func() { <-release })
		})
		return nil, nil, false // the broker answers as usual
	})
	var releaseOnce sync.Once
	letGo := func() { releaseOnce.Do(func() { close(release) }) }
	defer letGo() // before c.Close, which would wait on the sleeping control

	p := newOnFake(t, c, set, Config{
		CreateTopics: true, Partitions: parts, ExactlyOnce: true, TransactionalID: "ready-test",
	}, memStore(t))
	r := runTillEnd(t, p)

	select {
	case <-joining:
	case <-r.done:
		t.Fatalf("Run returned before joining the group: %v", r.err)
	case <-time.After(30 * time.Second):
		t.Fatal("no JoinGroup within 30s")
	}
	if ok, why := p.Ready(); ok {
		t.Fatalf("ready while its JoinGroup is pending (owns %d partitions)", len(p.Partitions()))
	} else if why != "joining the consumer group" {
		t.Errorf("not ready because %q; want %q", why, "joining the consumer group")
	}

	letGo()
	waitReady(t, p)
	if n := len(p.Partitions()); n != parts {
		t.Errorf("ready owning %d partitions; want %d", n, parts)
	}
}

// failingStore is a Store whose background fails when down is closed, as
// Pebble's does when one of its own jobs meets a fault.
type failingStore struct {
	Store
	down chan struct{}
	err  error
}

func (f *failingStore) Failed() <-chan struct{} { return f.down }
func (f *failingStore) Err() error              { return f.err }

// TestNotReadyOnceStopping: a processor is not ready from the moment it
// is told to stop or halts, though it keeps its caught-up partitions until
// it has ended its cycle and left the group; and not once Run returned.
// Before, a halting processor said ready between the release of its
// partitions and Run's return (it owned none, so none was catching up),
// and a stopped one said ready for ever: /readyz answered 200 from an
// instance that forwarded nothing.
func TestNotReadyOnceStopping(t *testing.T) {
	const parts = 2
	c, set := fakeCluster(t, parts)
	injected := errors.New("injected background failure")
	for _, tc := range []struct {
		name, group string
		// end ends the run; atOnce says whether it is not ready as soon
		// as end returns (a halt reaches Run through the store's watch,
		// later), or only once Run returned.
		end    func(r *run, s *failingStore)
		atOnce bool
		want   string // Ready's why once Run returned
	}{
		{"stopped by its caller", "stopped", func(r *run, _ *failingStore) { r.cancel() }, true, "stopping or stopped"},
		{"halted by its store", "halted", func(_ *run, s *failingStore) { close(s.down) }, false, "halted: store: " + injected.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := &failingStore{Store: memStore(t), down: make(chan struct{}), err: injected}
			p := newOnFake(t, c, set, Config{
				Partitions: parts, Group: tc.group, ExactlyOnce: true, TransactionalID: "stopping-test",
			}, store)
			if ok, why := p.Ready(); ok || why != "not started" {
				t.Errorf("Ready() = %v, %q before Run; want not started", ok, why)
			}
			r := runTillEnd(t, p)
			r.ownErr = true // the test ends the run itself; Ready's why says how
			waitReady(t, p)

			tc.end(r, store)
			if ok, why := p.Ready(); tc.atOnce && ok {
				t.Errorf("ready once told to stop, owning %d partitions (%s)", len(p.Partitions()), why)
			}
			select {
			case <-r.done:
			case <-time.After(30 * time.Second):
				t.Fatal("Run did not return within 30s")
			}
			if ok, why := p.Ready(); ok || why != tc.want {
				t.Errorf("Ready() = %v, %q once Run returned %v; want not ready, %q", ok, why, r.err, tc.want)
			}
		})
	}
}

// blockedRestore is a Store whose Restore (the scan of the gate's restore)
// waits until release is closed; restoring is closed when it is called.
type blockedRestore struct {
	Store
	restoring, release chan struct{}
}

func (b *blockedRestore) Restore(ctx context.Context, fn func(membership.Member) error) (membership.RestoreStats, error) {
	close(b.restoring)
	select {
	case <-b.release:
	case <-ctx.Done():
		return membership.RestoreStats{}, ctx.Err()
	}
	return b.Store.Restore(ctx, fn)
}

// TestJoinWhileRestoring: a start joins the consumer group while the gate
// is being restored, so that what the broker makes a join wait (3s by
// default for a group's first member) and the restore overlap instead of
// adding up; and no signal is decided before the restore ends. Here the
// store's scan waits until the broker has seen the processor's JoinGroup
// (a start that restores first never sends it: the test fails at its
// deadline) and the signals loop holds the two signals queued before the
// start, undecided (an aligner started before the gate is whole marks the
// partition caught up at once, and they are decided then: the test fails
// at its deadline). Then the signal of a user who left before it must be
// dropped, and the other user's forwarded.
func TestJoinWhileRestoring(t *testing.T) {
	c, set := fakeCluster(t, 1)
	joining := make(chan struct{})
	var once sync.Once
	c.ControlKey(int16(kmsg.JoinGroup), func(kmsg.Request) (kmsg.Response, error, bool) {
		once.Do(func() { close(joining) })
		return nil, nil, false // the broker answers as usual
	})
	ms := memStore(t)
	const left, stays = 7, 8
	now := time.Now()
	if _, err := ms.Leave(left, uint64(now.Add(-time.Hour).UnixNano())); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(string(set.Signals)))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, user := range []uint64{left, stays} { // in this order, in the one partition
		r := &kgo.Record{Key: []byte(strconv.FormatUint(user, 10)), Value: []byte("clicked"), Timestamp: now}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	store := &blockedRestore{Store: ms, restoring: make(chan struct{}), release: make(chan struct{})}
	var releaseOnce sync.Once
	letGo := func() { releaseOnce.Do(func() { close(store.release) }) }
	p := newOnFake(t, c, set, Config{
		CreateTopics: true, Partitions: 1,
		ExactlyOnce: true, TransactionalID: "restore-test", Grace: 10 * time.Millisecond,
		// An aligner started too early then marks the partition caught
		// up before the signals are fetched.
		AlignInterval: time.Millisecond,
	}, store)
	r := runTillEnd(t, p)
	defer letGo() // before the run's stop, which would wait on the restore

	for _, step := range []struct {
		what string
		ch   chan struct{}
	}{{"the restore's scan", store.restoring}, {"a JoinGroup while the scan waits", joining}} {
		select {
		case <-step.ch:
		case <-r.done:
			t.Fatalf("Run returned before %s: %v", step.what, r.err)
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: not within 20s", step.what)
		}
	}
	for deadline := time.Now().Add(20 * time.Second); p.held.Load() != 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the signals loop holds %d of the 2 signals while the gate is restoring: decided before it was whole", p.held.Load())
		}
	}
	if ok, why := p.Ready(); ok || why != "restoring membership state from the local store" {
		t.Fatalf("Ready() = %v, %q while restoring", ok, why)
	}

	letGo()
	out, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(string(set.Cohort)),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	for {
		fs := out.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("user %d's signal not forwarded: %v", stays, ctx.Err())
		}
		var forwarded bool
		fs.EachRecord(func(r *kgo.Record) {
			switch string(r.Key) {
			case strconv.Itoa(left):
				t.Errorf("user %d's signal forwarded though they left before it", left)
			case strconv.Itoa(stays):
				forwarded = true
			}
		})
		if forwarded {
			return
		}
	}
}

// TestStoppedWith: a run that a topology change ended while Run was
// being stopped is a clean stop (a stop right after a changelog growth
// returned "the topics changed under the running processor"); any other
// error is still Run's.
func TestStoppedWith(t *testing.T) {
	topo := fmt.Errorf("run: %w", &TopologyChangedError{Changes: []string{"changelog partitions 2 → 4"}})
	other := errors.New("store failed")
	for _, tc := range []struct {
		err, want error
	}{{nil, nil}, {topo, nil}, {other, other}} {
		if got := stoppedWith(tc.err); got != tc.want {
			t.Errorf("stoppedWith(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
