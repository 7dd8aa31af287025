package fanout

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestWindowsRecoveredBeforeTheFirstCommand: a new owner recovers its
// predecessors' late-leave windows as soon as it takes a partition, not on
// the partition's first command. That read goes read_committed to the
// changelog's end and waits for any transaction open on the changelog
// (this processor's own cycle, another owner's, a stuck producer's); made
// by the first leave, the wait stood between that leave and the gate.
// Here a transaction is left open on the changelog after the owner took
// its partition: a leave must still close the gate.
func TestWindowsRecoveredBeforeTheFirstCommand(t *testing.T) {
	c, set := fakeCluster(t, 1)
	recovered := make(chan WindowsRecoveredInfo, 4)
	p := readyOnFake(t, c, set, Config{
		CreateTopics: true, Partitions: 1,
		ExactlyOnce: true, TransactionalID: "recover-test", Grace: 10 * time.Millisecond,
		EventListener: EventListener{WindowsRecovered: func(i WindowsRecoveredInfo) {
			select {
			case recovered <- i:
			default:
			}
		}},
	})
	select {
	case <-recovered:
	case <-time.After(20 * time.Second):
		t.Fatal("the windows were not recovered within 20s of the partition's assignment, with no command yet")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stuck, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("stuck-on-the-changelog"))
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close()
	if err := stuck.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	open := &kgo.Record{Topic: string(set.Changelog), Key: []byte("99"), Value: []byte(`{}`)}
	if err := stuck.ProduceSync(ctx, open).FirstErr(); err != nil {
		t.Fatal(err)
	}
	defer stuck.EndTransaction(context.Background(), kgo.TryAbort) //nolint:errcheck // the test is over

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const user = 7
	at := time.Now()
	if err := cl.ProduceSync(ctx, leaveRecord(set, user, at)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	after := uint64(at.Add(time.Second).UnixNano())
	waitFor(t, "the leave in force in the gate while a transaction stays open on the changelog", func() bool {
		return !p.gate.Allows(user, after)
	})
}

// barrierChangelog is an empty changelog whose reads each wait until n
// of them are under way at once, or until a deadline: then it notes
// that they were not side by side.
type barrierChangelog struct {
	n        int
	mu       sync.Mutex
	inside   int
	all      chan struct{}
	alone    bool
	reads    int
	deadline time.Duration
}

func (b *barrierChangelog) read(ctx context.Context, q readRequest) (changelogView, error) {
	b.mu.Lock()
	b.inside++
	b.reads++
	if b.inside == b.n {
		close(b.all)
	}
	b.mu.Unlock()
	select {
	case <-b.all:
	case <-time.After(b.deadline):
		b.mu.Lock()
		b.alone = true
		b.mu.Unlock()
	case <-ctx.Done():
	}
	b.mu.Lock()
	b.inside--
	b.mu.Unlock()
	return (&fakeChangelog{}).read(ctx, q)
}

// TestWindowsRecoveredSideBySide: the claims of one assignment read the
// changelog for their windows side by side. Each read goes to the
// changelog's end read_committed and waits for the transactions open on
// it; one after another, after a broker fault, three partitions took
// 0.5 s each before forwarding again.
func TestWindowsRecoveredSideBySide(t *testing.T) {
	src := &barrierChangelog{n: 3, all: make(chan struct{}), deadline: 2 * time.Second}
	run := newHandoverRunOf(t, src, 3, func(c *Config) { c.RestoreParallel = 3 })
	prepareIdleClaims(t, run, 3)
	if src.reads != 3 {
		t.Errorf("%d changelog reads, want 3 (one a claim)", src.reads)
	}
	if src.alone {
		t.Error("the claims' changelog reads did not run side by side")
	}
}

// TestWindowsRecoveredOneAtATimeWithOneSlot: with RestoreParallel 1 the
// reads go one after another (the bound holds), and every claim is
// still recovered.
func TestWindowsRecoveredOneAtATimeWithOneSlot(t *testing.T) {
	src := &barrierChangelog{n: 2, all: make(chan struct{}), deadline: 200 * time.Millisecond}
	run := newHandoverRunOf(t, src, 2, func(c *Config) { c.RestoreParallel = 1 })
	prepareIdleClaims(t, run, 2)
	if !src.alone {
		t.Error("with one slot, two reads were under way at once")
	}
}

// prepareIdleClaims claims partitions 0 to n-1 with nothing to restore
// (prepared at once), lets the idle applier prepare them, and checks
// that each one's windows were recovered.
func prepareIdleClaims(t *testing.T, run *handoverRun, n int32) {
	t.Helper()
	var cs []*claim
	for p := range n {
		c := run.claimOf(p, 0)
		c.prepared.Store(true)
		cs = append(cs, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := run.a.prepareIdle(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if !c.recovery.done {
			t.Errorf("partition %d: windows not recovered", c.partition)
		}
	}
}
