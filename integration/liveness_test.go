package integration

import (
	"context"
	"errors"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/pkg/fanout"
	"github.com/cohortgate/cohortgate/topics"
)

// Bounds of the liveness tests: a stall must be said within stallTimeout
// (plus the first failure's delay and the watch's tick: stallSlack).
const (
	stallTimeout = 3 * time.Second
	stallSlack   = 2 * time.Second
)

// TestRecreatedOutputStallsVisibly: the cohort topic deleted and created
// again under a running processor. Its producer keeps the old topic ID,
// every produce fails with UNKNOWN_TOPIC_ID and every cycle carrying the
// signal aborts. By promise 10 (README, "What it promises"): within the
// bound the processor says it is not ready, and why (a stall of cause
// aborts, counted), then halts past StallHalt, and a restart (what an
// orchestrator does on the halt) forwards the signal to the new topic.
// Where production resumes by itself (the new topic's ID adopted while
// running), the signal is forwarded instead, and the rule holds as well:
// the test accepts either, never a processor that says ready and makes
// no progress.
func TestRecreatedOutputStallsVisibly(t *testing.T) {
	e := newEnv(t, 1)
	dir := t.TempDir()
	cfg := e.config()
	cfg.CreateTopics = false
	cfg.StallTimeout, cfg.StallHalt = stallTimeout, 3*stallTimeout
	pr := e.start(dir, cfg)
	pr.waitReady(t, 1)
	e.signal(1, time.Now(), "before")
	e.waitDecided()

	e.recreate(e.set.Cohort)
	out := e.watchOutput(e.set.Cohort)
	e.signal(2, time.Now(), "after")
	why := holdsLiveness(t, pr.Ready, 60*time.Second, func() bool { return out.hasValue("after") })
	if why == "" {
		t.Logf("production resumed on the new topic without a stall")
		return
	}
	if st := pr.Partitions(); len(st) != 1 || st[0].Stalled == "" {
		t.Errorf("partitions = %+v, want partition 0 saying it is stalled", st)
	}
	// The first produces take seconds to fail (franz-go retries them): the
	// first cycle may be judged a stall of its own (no cycle ended) before
	// the aborts are. Either way the processor stays not ready until the
	// halt, and says so.
	reasons, err := untilHalted(t, pr, cfg.StallHalt+30*time.Second)
	reasons[why] = true
	named := false
	for r := range reasons {
		if !strings.HasPrefix(r, "stalled") {
			t.Errorf("not ready because %q during the stall", r)
		}
		named = named || strings.Contains(r, "stalled (aborts)") && strings.Contains(r, "UNKNOWN_TOPIC_ID")
	}
	if !named {
		t.Errorf("not ready because %v; want a stall of the aborts naming the produce error", reasons)
	}
	if n := metricValue(t, pr.reg, fanout.MetricStalls, map[string]string{"cause": "aborts"}); n < 1 {
		t.Errorf("%s{cause=aborts} = %v, want the stall counted", fanout.MetricStalls, n)
	}
	var se *fanout.StallError
	if !errors.As(err, &se) || se.Cause != fanout.StallAborts {
		t.Fatalf("Run = %v, want a *fanout.StallError of the aborts", err)
	}
	if ok, why := pr.Ready(); ok || !strings.Contains(why, "halted") {
		t.Errorf("after the halt Ready = %v %q, want halted", ok, why)
	}
	t.Logf("halted: %v", err)
	_ = pr.stop(t)

	again := e.start(dir, cfg)
	eventually(t, 60*time.Second, func() error {
		if !out.hasValue("after") {
			return errors.New("the signal is not forwarded to the new cohort topic after the restart")
		}
		return nil
	})
	if ok, why := again.Ready(); !ok {
		t.Errorf("restarted processor not ready: %s", why)
	}
}

// TestRecreatedInputOrChangelogIsLive: the signals topic, or the
// changelog topic, deleted and created again under a running processor.
// The topics' watch sees the new topic ID and the run starts again under
// it (promise 7), so these recover; the test holds them to the liveness
// rule all the same: the record produced after the change takes effect
// (the signal forwarded, the leave's changelog record written to the new
// topic), or the processor says it is stalled; never ready without
// progress for longer than the bound.
func TestRecreatedInputOrChangelogIsLive(t *testing.T) {
	for _, tc := range []struct {
		name string
		role func(topics.Set) topics.Topic
	}{
		{"signals", func(s topics.Set) topics.Topic { return s.Signals }},
		{"changelog", func(s topics.Set) topics.Topic { return s.Changelog }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 1)
			cfg := e.config()
			cfg.CreateTopics = false
			cfg.StallTimeout, cfg.StallHalt = stallTimeout, fanout.NoStallHalt
			pr := e.start(t.TempDir(), cfg)
			pr.waitReady(t, 1)
			e.signal(1, time.Now(), "before")
			e.waitDecided()

			e.recreate(tc.role(e.set))
			var progressed func() bool
			switch tc.name {
			case "signals":
				out := e.watchOutput(e.set.Cohort)
				e.signal(2, time.Now(), "after")
				progressed = func() bool { return out.hasValue("after") }
			case "changelog":
				out := e.watchOutput(e.set.Changelog)
				e.command(topics.Leave, 7, time.Now())
				progressed = func() bool { return out.hasKey("7") }
			}
			why := holdsLiveness(t, pr.Ready, 90*time.Second, progressed)
			if why != "" {
				t.Logf("stalled visibly: %s", why)
				if n := metricValue(t, pr.reg, fanout.MetricStalls, nil); n < 1 {
					t.Errorf("%s = %v, want the stall counted", fanout.MetricStalls, n)
				}
			}
		})
	}
}

// holdsLiveness watches a processor's readiness (Processor.Ready, or
// /readyz) until progressed reports true (it returns "") or the processor
// says it is not ready because it is stalled (it returns why), and fails
// the test if it says it is ready, without progress, for longer than
// stallTimeout+stallSlack (README, "What it promises", 10), or if neither
// happens within deadline.
func holdsLiveness(t *testing.T, ready func() (bool, string), deadline time.Duration, progressed func() bool) string {
	t.Helper()
	start := time.Now()
	var readySince time.Time // zero while not ready
	for wait := 5 * time.Millisecond; ; wait = min(wait*2, 100*time.Millisecond) {
		if progressed() {
			return ""
		}
		ok, why := ready()
		now := time.Now()
		switch {
		case !ok && strings.HasPrefix(why, "stalled"):
			t.Logf("not ready after %v: %s", now.Sub(start).Round(time.Millisecond), why)
			return why
		case !ok:
			readySince = time.Time{}
		case readySince.IsZero():
			readySince = now
		}
		if ok && now.Sub(readySince) > stallTimeout+stallSlack {
			t.Fatalf("ready for %v without progress: the liveness rule is broken", now.Sub(readySince).Round(time.Millisecond))
		}
		if now.Sub(start) > deadline {
			t.Fatalf("neither progress nor a stall within %v (ready %v: %s)", deadline, ok, why)
		}
		time.Sleep(wait) // polling interval of a condition with a deadline, not a synchronization
	}
}

// TestBinaryStallAnswers503ThenExits is TestRecreatedOutputStallsVisibly
// through `processor run` and its flags, as an orchestrator sees it:
// /readyz answers 503 naming the stall, /metrics counts it and
// /v1/partitions names it on the partition, and past --stall-halt the
// process exits non-zero (a pod's container is restarted).
func TestBinaryStallAnswers503ThenExits(t *testing.T) {
	e := newEnv(t, 1)
	b := e.runBinary(t.TempDir(), "--create-topics=false",
		"--stall-timeout", stallTimeout.String(), "--stall-halt", (3 * stallTimeout).String())
	b.waitReady(t)
	e.signal(1, time.Now(), "before")
	e.waitDecided()

	e.recreate(e.set.Cohort)
	out := e.watchOutput(e.set.Cohort)
	e.signal(2, time.Now(), "after")
	readyz := func() (bool, string) {
		code, body, err := b.get("/readyz")
		if err != nil {
			t.Fatalf("/readyz: %v", err)
		}
		return code == http.StatusOK, strings.TrimSpace(body)
	}
	why := holdsLiveness(t, readyz, 60*time.Second, func() bool { return out.hasValue("after") })
	if why == "" {
		t.Logf("production resumed on the new topic without a stall")
		return
	}
	if code, body, err := b.get("/v1/partitions"); err != nil || code != http.StatusOK || !strings.Contains(body, `"stalled"`) {
		t.Errorf("/v1/partitions %d %v: %s; want the partition's stall", code, err, body)
	}
	m := b.metrics(t)
	if n := m[fanout.MetricStalls].get("cause=aborts") + m[fanout.MetricStalls].get("cause=cycle"); n < 1 {
		t.Errorf("%s = %v, want the stall counted", fanout.MetricStalls, m[fanout.MetricStalls])
	}
	if s := m[fanout.MetricStalledSeconds].get(""); s <= 0 {
		t.Errorf("%s = %v, want the stall's length", fanout.MetricStalledSeconds, s)
	}
	select {
	case err := <-b.exited:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() == 0 || !strings.Contains(b.stderr.String(), "no progress for") {
			t.Fatalf("processor exited with %v; want a non-zero exit saying it made no progress", err)
		}
		t.Logf("exited with %v", err)
	case <-time.After(3*stallTimeout + 60*time.Second):
		t.Fatalf("processor still running %v after a stall that lasts", 3*stallTimeout+60*time.Second)
	}
}

// untilHalted waits, up to deadline, for pr's Run to return, failing the
// test if pr says it is ready meanwhile. It returns Run's error (kept for
// pr.stop) and every reason pr gave for not being ready before it halted.
func untilHalted(t *testing.T, pr *proc, deadline time.Duration) (map[string]bool, error) {
	t.Helper()
	reasons := make(map[string]bool)
	end := time.Now().Add(deadline)
	for wait := 5 * time.Millisecond; ; wait = min(wait*2, 100*time.Millisecond) {
		select {
		case err := <-pr.done:
			pr.done <- err
			return reasons, err
		default:
		}
		ok, why := pr.Ready()
		switch {
		case ok:
			t.Fatalf("ready again while the stall lasts")
		case !strings.HasPrefix(why, "halted"):
			reasons[why] = true
		}
		if time.Now().After(end) {
			t.Fatalf("no halt within %v of a stall that lasts", deadline)
		}
		time.Sleep(wait) // polling interval of a condition with a deadline, not a synchronization
	}
}

// output is what a consumer of one topic read so far (read_committed).
type output struct {
	mu   sync.Mutex
	recs []*kgo.Record
}

func (o *output) hasValue(v string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, r := range o.recs {
		if string(r.Value) == v {
			return true
		}
	}
	return false
}

func (o *output) hasKey(k string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, r := range o.recs {
		if string(r.Key) == k {
			return true
		}
	}
	return false
}

// watchOutput consumes topic from its start, read_committed, until the
// test ends.
func (e *env) watchOutput(topic topics.Topic) *output {
	e.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker.addrs...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeTopics(string(topic)), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		e.t.Fatal(err)
	}
	o := &output{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			o.mu.Lock()
			fs.EachRecord(func(r *kgo.Record) { o.recs = append(o.recs, r) })
			o.mu.Unlock()
		}
	}()
	e.t.Cleanup(func() {
		cancel()
		<-done
		cl.Close()
	})
	return o
}
