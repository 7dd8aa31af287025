package fanout

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestLateLeaveHurriesTheCycle: a leave whose window reaches a signal of
// its user forwarded in the open cycle waits for that cycle's outcome
// (forwarded.latest); the signals loop then ends the cycle at once
// instead of at CommitInterval. Here the interval is longer than the
// wait's bound (forwardedWait): without the hurry the leave gives up
// waiting, its window is not exact, and every command behind it waited
// those 5 s.
func TestLateLeaveHurriesTheCycle(t *testing.T) {
	c, set := fakeCluster(t, 1)
	late := make(chan LateLeaveInfo, 1)
	p := readyOnFake(t, c, set, Config{
		CreateTopics: true, Partitions: 1,
		ExactlyOnce: true, TransactionalID: "hurry-test", Grace: 10 * time.Millisecond,
		CommitInterval: 3 * forwardedWait,
		EventListener: EventListener{LateLeave: func(i LateLeaveInfo) {
			select {
			case late <- i:
			default:
			}
		}},
	})

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const user = 7
	at := time.Now()
	sig := &kgo.Record{Topic: string(set.Signals), Key: []byte(strconv.Itoa(user)), Value: []byte("clicked"), Timestamp: at}
	if err := cl.ProduceSync(ctx, sig).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cw := p.claims.get(0)
	if cw == nil {
		t.Fatal("partition 0 not claimed")
	}
	waitFor(t, "the signal forwarded in the open cycle", func() bool {
		cw.fwd.mu.Lock()
		defer cw.fwd.mu.Unlock()
		return len(cw.fwd.mu.pending) > 0
	})
	leftAt := at.Add(-time.Millisecond)
	if err := cl.ProduceSync(ctx, leaveRecord(set, user, leftAt)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	select {
	case i := <-late:
		if !i.Window.Exact {
			t.Errorf("late-leave window %+v not exact: the leave gave up waiting for the open cycle", i.Window)
		}
		if want := uint64(at.UnixMilli()) * 1e6; i.Window.ForwardedThroughNs != want {
			t.Errorf("window forwarded through %d; want the signal's %d", i.Window.ForwardedThroughNs, want)
		}
	case <-ctx.Done():
		t.Fatal("no late leave within 30s")
	}
}
