package fanout

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestEndTxnFailureKeepsTheSession: a transaction whose end fails without
// a definite answer — a timeout, the coordinator moving past franz-go's
// retries, a commit that landed while its answer was lost — is ended for
// sure and its outcome read from the group's offsets; the session stays
// and its partitions are not given up, and every signal is forwarded
// exactly once. A fenced producer still ends the session (its partitions
// are revoked). Before, any failed end replaced the session: each row but
// the fence saw its partitions revoked.
func TestEndTxnFailureKeepsTheSession(t *testing.T) {
	for _, tc := range []struct {
		name string
		// fail answers the controlled EndTxn (a commit); helper is a
		// client of the broker, to commit it behind the processor's back.
		fail    func(c *kfake.Cluster, helper *kgo.Client, req *kmsg.EndTxnRequest) (kmsg.Response, error)
		fails   int  // how many commits fail in a row
		fenced  bool // the session must end
		opts    []kgo.Opt
		outcome Outcome // what the healed cycle must be
		// loading is how long after the first failed commit the group's
		// coordinator answers offset fetches that it is loading (a
		// coordinator that moved): heal cannot learn the outcome sooner.
		loading time.Duration
	}{
		{name: "request timed out", fails: 1, outcome: Aborted,
			fail: func(_ *kfake.Cluster, _ *kgo.Client, req *kmsg.EndTxnRequest) (kmsg.Response, error) {
				return endTxnErr(req, kerr.RequestTimedOut), nil
			}},
		{name: "coordinator moving past the retries", fails: 3, outcome: Aborted,
			opts: []kgo.Opt{kgo.RequestRetries(1)},
			fail: func(_ *kfake.Cluster, _ *kgo.Client, req *kmsg.EndTxnRequest) (kmsg.Response, error) {
				return endTxnErr(req, kerr.NotCoordinator), nil
			}},
		// Longer than the end's bound (10s at this session timeout):
		// a heal that gave up then replaced the session.
		{name: "group coordinator loading past the end's bound", fails: 1, outcome: Aborted,
			loading: 13 * time.Second,
			fail: func(_ *kfake.Cluster, _ *kgo.Client, req *kmsg.EndTxnRequest) (kmsg.Response, error) {
				return endTxnErr(req, kerr.RequestTimedOut), nil
			}},
		{name: "commit landed, answer lost", fails: 1, outcome: Committed,
			fail: func(c *kfake.Cluster, helper *kgo.Client, req *kmsg.EndTxnRequest) (kmsg.Response, error) {
				var err error
				c.SleepControl(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					var resp *kmsg.EndTxnResponse
					if resp, err = req.RequestWith(ctx, helper); err == nil {
						err = kerr.ErrorForCode(resp.ErrorCode)
					}
				})
				if err != nil {
					return nil, fmt.Errorf("committing behind the processor's back: %w", err)
				}
				return endTxnErr(req, kerr.RequestTimedOut), nil
			}},
		{name: "fenced", fails: 1, fenced: true,
			fail: func(_ *kfake.Cluster, _ *kgo.Client, req *kmsg.EndTxnRequest) (kmsg.Response, error) {
				return endTxnErr(req, kerr.ProducerFenced), nil
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, set := fakeCluster(t, 2)
			helper, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(string(set.Signals)))
			if err != nil {
				t.Fatal(err)
			}
			defer helper.Close()

			var armed, failed atomic.Int32
			var behind atomic.Bool // the helper's own EndTxn is under way
			var failErr atomic.Value
			var loadingUntil atomic.Int64 // unix nanoseconds: offset fetches refused until then
			loadingAnswers := loadingCoordinator(c, func() bool {
				until := loadingUntil.Load()
				return until != 0 && time.Now().UnixNano() < until
			})
			c.ControlKey(int16(kmsg.EndTxn), func(r kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				req := r.(*kmsg.EndTxnRequest)
				if !req.Commit || req.TransactionalID != "heal-test" || armed.Load() == 0 || behind.Load() || failed.Load() >= int32(tc.fails) {
					return nil, nil, false
				}
				if failed.Add(1) == 1 && tc.loading > 0 {
					loadingUntil.Store(time.Now().Add(tc.loading).UnixNano())
				}
				behind.Store(true)
				defer behind.Store(false)
				resp, err := tc.fail(c, helper, req)
				if err != nil {
					failErr.Store(err)
					return nil, nil, false
				}
				return resp, nil, true
			})

			var mu sync.Mutex
			var revoked, healed int
			var healedAs []Outcome
			ev := EventListener{
				PartitionsRevoked: func(PartitionsInfo) {
					mu.Lock()
					defer mu.Unlock()
					revoked++
				},
				CycleEnd: func(i CycleInfo) {
					if i.Err != nil {
						t.Logf("cycle %v: %v", i.Outcome, i.Err)
					}
					if errors.Is(i.Err, errHealed) {
						mu.Lock()
						defer mu.Unlock()
						healed++
						healedAs = append(healedAs, i.Outcome)
					}
				},
			}
			readyOnFake(t, c, set, Config{
				CreateTopics: true, Partitions: 2,
				ExactlyOnce: true, TransactionalID: "heal-test", Grace: 10 * time.Millisecond,
				CommitInterval: 20 * time.Millisecond, SessionTimeout: 10 * time.Second,
				KafkaOpts: tc.opts, EventListener: ev,
			})

			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			const signals = 200
			produce := func(from, to int) {
				for i := from; i < to; i++ {
					rec := &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: []byte("s" + strconv.Itoa(i)), Timestamp: time.Now()}
					if err := helper.ProduceSync(ctx, rec).FirstErr(); err != nil {
						t.Fatal(err)
					}
				}
			}
			produce(0, signals/2)
			mu.Lock()
			revokedBefore := revoked
			mu.Unlock()
			armed.Store(1)
			produce(signals/2, signals)

			out, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(string(set.Cohort)),
				kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			if err != nil {
				t.Fatal(err)
			}
			defer out.Close()
			seen := make(map[string]int)
			for n := 0; n < signals && ctx.Err() == nil; {
				fs := out.PollFetches(ctx)
				fs.EachRecord(func(rec *kgo.Record) {
					seen[string(rec.Value)]++
					n++
				})
			}
			if e := failErr.Load(); e != nil {
				t.Fatal(e)
			}
			if int(failed.Load()) < tc.fails {
				t.Fatalf("%d commits failed; want %d", failed.Load(), tc.fails)
			}
			if tc.loading > 0 && loadingAnswers.Load() == 0 {
				t.Fatal("no offset fetch was answered that the coordinator is loading: the heal did not wait on it")
			}
			for i := range signals {
				if k := seen["s"+strconv.Itoa(i)]; k != 1 {
					t.Errorf("signal %d forwarded %d times; want once", i, k)
				}
			}
			// Nothing more than those may follow: a duplicate committed
			// after the count was reached.
			short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
			out.PollFetches(short).EachRecord(func(rec *kgo.Record) {
				t.Errorf("forwarded again: %s", rec.Value)
			})
			cancelShort()

			mu.Lock()
			defer mu.Unlock()
			if tc.fenced {
				if revoked == revokedBefore {
					t.Error("a fenced producer kept its session: no partition was revoked")
				}
				return
			}
			if revoked != revokedBefore {
				t.Errorf("partitions revoked %d times after a failed end; want none", revoked-revokedBefore)
			}
			if healed == 0 || healedAs[0] != tc.outcome {
				t.Errorf("healed cycles %v; want the first %v", healedAs, tc.outcome)
			}
		})
	}
}

// endTxnErr is the broker's answer to req failing with err.
func endTxnErr(req *kmsg.EndTxnRequest, err *kerr.Error) *kmsg.EndTxnResponse {
	resp := req.ResponseKind().(*kmsg.EndTxnResponse)
	resp.ErrorCode = err.Code
	return resp
}

// offsetFetchErr is the group coordinator's answer to req failing with err
// for every group asked.
func offsetFetchErr(req *kmsg.OffsetFetchRequest, err *kerr.Error) *kmsg.OffsetFetchResponse {
	resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
	resp.ErrorCode = err.Code
	for _, g := range req.Groups {
		rg := kmsg.NewOffsetFetchResponseGroup()
		rg.Group, rg.ErrorCode = g.Group, err.Code
		resp.Groups = append(resp.Groups, rg)
	}
	return resp
}

// TestHealEndsWithTheRun: a heal retries for as long as the run goes on,
// but a stop does not wait for the outage that holds it: once the run is
// cancelled the heal has the end's bound (10s here) more, and Run
// returns. Here the group's coordinator never answers an offset fetch
// again after a commit failed, so only the stop ends the heal.
func TestHealEndsWithTheRun(t *testing.T) {
	c, set := fakeCluster(t, 2)
	helper, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(string(set.Signals)))
	if err != nil {
		t.Fatal(err)
	}
	defer helper.Close()
	var armed, failed atomic.Int32
	loadingAnswers := loadingCoordinator(c, func() bool { return failed.Load() > 0 })
	c.ControlKey(int16(kmsg.EndTxn), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := r.(*kmsg.EndTxnRequest)
		if !req.Commit || armed.Load() == 0 || failed.Load() > 0 {
			return nil, nil, false
		}
		failed.Add(1)
		return endTxnErr(req, kerr.RequestTimedOut), nil, true
	})
	p := newOnFake(t, c, set, Config{
		CreateTopics: true, Partitions: 2,
		ExactlyOnce: true, TransactionalID: "heal-stop-test", Grace: 10 * time.Millisecond,
		CommitInterval: 20 * time.Millisecond, SessionTimeout: 10 * time.Second,
	}, memStore(t))
	r := startRun(p)
	waitReady(t, p)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	armed.Store(1)
	for i := 0; loadingAnswers.Load() == 0; i++ {
		if ctx.Err() != nil {
			r.stop()
			t.Fatal("no heal waited on the group's coordinator within 60s")
		}
		rec := &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: []byte("s"), Timestamp: time.Now()}
		if err := helper.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	stopped := time.Now()
	err = r.stop()
	if err != nil && strings.Contains(err.Error(), "did not return") {
		t.Fatalf("a heal held the stop: %v", err)
	}
	t.Logf("Run returned %v after its cancellation: %v", time.Since(stopped).Round(time.Millisecond), err)
}
