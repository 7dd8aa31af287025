package fanout

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohortgate/cohortgate/pkg/membership"
	"github.com/cohortgate/cohortgate/topics"
)

// fakeCluster starts a broker holding the default topics with parts
// partitions each, closed when the test ends.
func fakeCluster(t *testing.T, parts int32) (*kfake.Cluster, topics.Set) {
	t.Helper()
	set := topics.Defaults()
	var names []string
	for _, s := range set.Specs() {
		names = append(names, string(s.Topic))
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parts, names...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, set
}

// memStore opens an empty membership store in memory, closed when the
// test ends (after a run started later is stopped: cleanups run last
// registered first).
func memStore(t *testing.T) *membership.Store {
	t.Helper()
	s, err := membership.Open("db", &membership.Options{FS: vfs.NewMem(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// newOnFake makes a Processor of cfg and store on the fake cluster c
// holding set: cfg's Brokers and Topics are theirs.
func newOnFake(t *testing.T, c *kfake.Cluster, set topics.Set, cfg Config, store Store) *Processor {
	t.Helper()
	cfg.Brokers, cfg.Topics = c.ListenAddrs(), set
	p, err := New(cfg, store)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// runTillEnd runs p until the test ends, and then stops it: an error Run
// returns fails the test, unless the test set the run's ownErr.
func runTillEnd(t *testing.T, p *Processor) *run {
	r := startRun(p)
	t.Cleanup(func() {
		if err := r.stop(); err != nil && !r.ownErr {
			t.Errorf("Run: %v", err)
		}
	})
	return r
}

// readyOnFake makes a Processor of cfg on c holding set, with a store in
// memory, and runs it until the test ends (newOnFake, runTillEnd), once it
// is ready.
func readyOnFake(t *testing.T, c *kfake.Cluster, set topics.Set, cfg Config) *Processor {
	t.Helper()
	p := newOnFake(t, c, set, cfg, memStore(t))
	runTillEnd(t, p)
	waitReady(t, p)
	return p
}

// run is a Processor's Run in a goroutine of a test's.
type run struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when Run has returned err
	err    error
	// ownErr says that the test checks err itself (a run it ends with an
	// error on purpose), so runTillEnd's stop does not report it.
	ownErr bool
}

// startRun runs p until stop.
func startRun(p *Processor) *run {
	ctx, cancel := context.WithCancel(context.Background())
	r := &run{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = p.Run(ctx)
	}()
	return r
}

// stop cancels the run and returns Run's error, or one saying that Run did
// not return within 30s.
func (r *run) stop() error {
	r.cancel()
	select {
	case <-r.done:
		return r.err
	case <-time.After(30 * time.Second):
		return errors.New("Run did not return within 30s of its cancellation")
	}
}

// waitReady waits up to 30s for p to be ready.
func waitReady(t *testing.T, p *Processor) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, why := p.Ready()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready within 30s: %s", why)
		}
		time.Sleep(10 * time.Millisecond) // polling interval of a condition with a deadline
	}
}

// leaveRecord is a leave of user at at, on set's commands topic, keyed as
// a producer using the default partitioner keys it.
func leaveRecord(set topics.Set, user uint64, at time.Time) *kgo.Record {
	return &kgo.Record{Topic: string(set.Commands), Key: []byte(strconv.FormatUint(user, 10)), Timestamp: at,
		Value: topics.AppendCommand(nil, topics.Command{Op: topics.Leave, UserID: user, AtNs: uint64(at.UnixNano()), HasAt: true})}
}

// loadingCoordinator makes c's group coordinator answer every offset fetch
// with COORDINATOR_LOAD_IN_PROGRESS while loading says so (a coordinator
// that moved), and returns how many it answered so.
func loadingCoordinator(c *kfake.Cluster, loading func() bool) *atomic.Int32 {
	var answered atomic.Int32
	c.ControlKey(int16(kmsg.OffsetFetch), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !loading() {
			return nil, nil, false
		}
		answered.Add(1)
		return offsetFetchErr(r.(*kmsg.OffsetFetchRequest), kerr.CoordinatorLoadInProgress), nil, true
	})
	return &answered
}
