package fanout

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohortgate/cohortgate/pkg/membership"
)

// TestEndStuckOnAMovedCoordinatorHealsEarly: a transaction's end whose
// request never comes back (sent to a coordinator that was then killed,
// stopped or moved) is healed after endFirstTry, not after the whole end
// bound (the session timeout, 45s here): heal's fresh requests find the
// coordinator that answers. Under make test-cluster's broker faults End
// waited out its bound (10s there) on such a request while the heal that
// followed took 0.1 to 1s. The request is held until the cycle is healed;
// before, End waited its 45s and the heal never came within the test's
// 20s. Every signal is still forwarded exactly once.
func TestEndStuckOnAMovedCoordinatorHealsEarly(t *testing.T) {
	c, set := fakeCluster(t, 2)
	helper, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(string(set.Signals)))
	if err != nil {
		t.Fatal(err)
	}
	defer helper.Close()

	var armed, held atomic.Int32
	release := make(chan struct{})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	defer free()
	c.ControlKey(int16(kmsg.TxnOffsetCommit), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := r.(*kmsg.TxnOffsetCommitRequest)
		if req.TransactionalID != "heal-early" || armed.Load() == 0 || !held.CompareAndSwap(0, 1) {
			return nil, nil, false
		}
		c.SleepControl(func() { <-release })
		// Never applied: the client gave up on it long ago.
		resp := req.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewTxnOffsetCommitResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.NotCoordinator.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})

	healed := make(chan CycleInfo, 16)
	ev := EventListener{
		CycleEnd: func(i CycleInfo) {
			if errors.Is(i.Err, errHealed) {
				select {
				case healed <- i:
				default:
				}
			}
		},
	}
	store, err := membership.Open("db", &membership.Options{FS: vfs.NewMem(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	p, err := New(Config{
		Brokers: c.ListenAddrs(), Topics: set, CreateTopics: true, Partitions: 2,
		ExactlyOnce: true, TransactionalID: "heal-early", Grace: 10 * time.Millisecond,
		CommitInterval: 20 * time.Millisecond, SessionTimeout: 45 * time.Second,
		EventListener: ev,
		Logger:        slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry(),
	}, store)
	if err != nil {
		t.Fatal(err)
	}
	r := startRun(p)
	defer func() {
		free()
		if err := r.stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	waitReady(t, p)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const signals = 100
	produce := func(from, to int) {
		for i := from; i < to; i++ {
			rec := &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: []byte("s" + strconv.Itoa(i)), Timestamp: time.Now()}
			if err := helper.ProduceSync(ctx, rec).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	produce(0, signals/2)
	armed.Store(1)
	produce(signals/2, signals)

	select {
	case i := <-healed:
		if held.Load() == 0 {
			t.Fatal("a cycle was healed, but no commit was held")
		}
		if i.Outcome != Aborted {
			t.Errorf("the held cycle healed as %v; want aborted (its offsets never reached the group)", i.Outcome)
		}
		t.Logf("healed: %v", i.Err)
		// The log says where the cycle's time went.
		for _, want := range []string{"failed after 3", "flushed in ", "read from the group's offsets in "} {
			if !strings.Contains(i.Err.Error(), want) {
				t.Errorf("healed cycle's error %q does not say %q", i.Err, want)
			}
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("no cycle healed within 20s of a commit held forever (held: %d); the end waits out its whole bound", held.Load())
	}
	free()

	out, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(string(set.Cohort)),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	seen := make(map[string]int)
	for n := 0; n < signals && ctx.Err() == nil; {
		out.PollFetches(ctx).EachRecord(func(rec *kgo.Record) {
			seen[string(rec.Value)]++
			n++
		})
	}
	for i := range signals {
		if k := seen["s"+strconv.Itoa(i)]; k != 1 {
			t.Errorf("signal %d forwarded %d times; want once", i, k)
		}
	}
}
