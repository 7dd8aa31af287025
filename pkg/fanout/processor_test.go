package fanout

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohortgate/cohortgate/pkg/membership"
	"github.com/cohortgate/cohortgate/topics"
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
	set := topics.Defaults()
	var names []string
	for _, s := range set.Specs() {
		names = append(names, string(s.Topic))
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parts, names...))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
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

	store, err := membership.Open("db", &membership.Options{FS: vfs.NewMem(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	p, err := New(Config{
		Brokers: c.ListenAddrs(), Topics: set, CreateTopics: true, Partitions: parts,
		ExactlyOnce: true, TransactionalID: "ready-test",
		Logger: slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry(),
	}, store)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() {
		letGo()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("Run did not return within 30s of its cancellation")
		}
	}()

	select {
	case <-joining:
	case err := <-done:
		t.Fatalf("Run returned before joining the group: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no JoinGroup within 30s")
	}
	if ok, why := p.Ready(); ok {
		t.Fatalf("ready while its JoinGroup is pending (owns %d partitions)", len(p.Partitions()))
	} else if why != "joining the consumer group" {
		t.Errorf("not ready because %q; want %q", why, "joining the consumer group")
	}

	letGo()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, why := p.Ready()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready 30s after the join was let through: %s", why)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := len(p.Partitions()); n != parts {
		t.Errorf("ready owning %d partitions; want %d", n, parts)
	}
}
