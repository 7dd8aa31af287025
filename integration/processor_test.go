package integration

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/pkg/fanout"
	"github.com/cohortgate/cohortgate/topics"
)

// base is an event time safely in the past, in whole milliseconds (Kafka's
// timestamp unit), so that signals are never "from the future".
func base() time.Time { return time.Now().Add(-time.Hour).Truncate(time.Millisecond) }

// sig describes a signal a test produces and whether it must be forwarded.
type sig struct {
	user    uint64
	at      time.Duration // event time, after base
	forward bool
}

func (s sig) value() string { return fmt.Sprintf("u%d@%d", s.user, s.at.Milliseconds()) }

// waitApplied waits until one of procs has applied the commands that give
// each user the status, left or active, with episodes closed episodes.
//
// The tests' event times lie an hour in the past, so a leave produced now
// is, by the contract, late for them (README, "What it promises", 2):
// whether it stops such signals depends on it being applied first, which
// is what a test waits for here before producing them.
func waitApplied(t *testing.T, status string, episodes int, users []uint64, procs ...*proc) {
	t.Helper()
	eventually(t, 30*time.Second, func() error {
		for _, u := range users {
			applied := false
			for _, pr := range procs {
				if m, err := pr.Member(u); err == nil && m.Status == status && len(m.History) == episodes {
					applied = true
				}
			}
			if !applied {
				return fmt.Errorf("user %d: not %s with %d closed episodes yet", u, status, episodes)
			}
		}
		return nil
	})
}

// produceSignals produces sigs in order and returns the values that must
// come out, sorted.
func (e *env) produceSignals(t0 time.Time, sigs []sig) []string {
	var want []string
	for _, s := range sigs {
		e.signal(s.user, t0.Add(s.at), s.value())
		if s.forward {
			want = append(want, s.value())
		}
	}
	slices.Sort(want)
	return want
}

// forwardedValues returns the values on the cohort topic, sorted.
func (e *env) forwardedValues() []string {
	var got []string
	for _, r := range e.readAll(e.set.Cohort) {
		got = append(got, string(r.Value))
	}
	slices.Sort(got)
	return got
}

func TestForwardsSignalsUnchanged(t *testing.T) {
	e := newEnv(t, 3)
	pr := e.start(t.TempDir(), e.config())
	pr.waitReady(t, 3)

	t0 := base()
	var sent []*kgo.Record
	for i := range 30 {
		user := uint64(1000 + i%7)
		value := []byte{byte(i), 0, 0xff, '\n', byte(user)}
		hs := []kgo.RecordHeader{{Key: "trace", Value: []byte(strconv.Itoa(i))}, {Key: "empty"}}
		sent = append(sent, e.signal(user, t0.Add(time.Duration(i)*time.Millisecond), string(value), hs...))
	}
	e.waitDecided()
	got := e.readAll(e.set.Cohort)
	if len(got) != len(sent) {
		for _, r := range sent {
			t.Logf("sent partition %d offset %d value %x", r.Partition, r.Offset, r.Value)
		}
		t.Fatalf("forwarded %d records, want %d", len(got), len(sent))
	}
	byValue := make(map[string]*kgo.Record)
	for _, r := range got {
		byValue[string(r.Value)] = r
	}
	for _, s := range sent {
		r, ok := byValue[string(s.Value)]
		switch {
		case !ok:
			t.Fatalf("signal %q not forwarded", s.Value)
		case !bytes.Equal(r.Key, s.Key):
			t.Errorf("key %q, want %q", r.Key, s.Key)
		case !r.Timestamp.Equal(s.Timestamp):
			t.Errorf("timestamp %v, want %v", r.Timestamp, s.Timestamp)
		case !slices.EqualFunc(r.Headers, s.Headers, func(a, b kgo.RecordHeader) bool {
			return a.Key == b.Key && bytes.Equal(a.Value, b.Value)
		}):
			t.Errorf("headers %v, want %v", r.Headers, s.Headers)
		case r.Partition != s.Partition:
			// Both sides use Kafka's default partitioner over the
			// same partition count.
			t.Errorf("record of key %s in cohort partition %d, want %d", r.Key, r.Partition, s.Partition)
		}
	}
}

func TestLeaveStopsForwardingOfThatUserOnly(t *testing.T) {
	e := newEnv(t, 3)
	pr := e.start(t.TempDir(), e.config())
	pr.waitReady(t, 3)

	const leaver, stayer = 101, 202
	t0 := base()
	boundary := t0.Add(10 * time.Second)
	before := e.produceSignals(t0, []sig{
		{leaver, 1 * time.Second, true}, {stayer, 1 * time.Second, true},
		{leaver, 9 * time.Second, true}, {stayer, 9 * time.Second, true},
	})
	e.command(topics.Leave, leaver, boundary)
	waitApplied(t, "left", 0, []uint64{leaver}, pr)
	after := e.produceSignals(t0, []sig{
		{leaver, 10 * time.Second, false}, // at the boundary: inside the episode
		{stayer, 10 * time.Second, true},
		{leaver, 11 * time.Second, false},
		{stayer, 11 * time.Second, true},
		{leaver, 5 * time.Second, true}, // produced after the leave, event time before it
		{leaver, time.Hour, false},
	})
	e.waitDecided()
	want := append(before, after...)
	slices.Sort(want)
	if got := e.forwardedValues(); !slices.Equal(got, want) {
		t.Fatalf("forwarded\n %v\nwant\n %v", got, want)
	}
	m, err := pr.Member(leaver)
	if err != nil {
		t.Fatal(err)
	}
	if m.Status != "left" || m.LeftAtNs == nil || *m.LeftAtNs != uint64(boundary.UnixNano()) {
		t.Fatalf("member %+v, want left at %d", m, boundary.UnixNano())
	}
}

func TestRejoinResumesAndKeepsHistory(t *testing.T) {
	e := newEnv(t, 2)
	pr := e.start(t.TempDir(), e.config())
	pr.waitReady(t, 2)

	const user = 7
	t0 := base()
	left, rejoined := t0.Add(10*time.Second), t0.Add(20*time.Second)
	e.command(topics.Leave, user, left)
	e.command(topics.Rejoin, user, rejoined)
	waitApplied(t, "active", 1, []uint64{user}, pr)
	want := e.produceSignals(t0, []sig{
		{user, 9 * time.Second, true},
		{user, 10 * time.Second, false},
		{user, 19 * time.Second, false},
		{user, 20 * time.Second, true},
		{user, 30 * time.Second, true},
	})
	e.waitDecided()
	if got := e.forwardedValues(); !slices.Equal(got, want) {
		t.Fatalf("forwarded %v, want %v", got, want)
	}
	m, err := pr.Member(user)
	if err != nil {
		t.Fatal(err)
	}
	if m.Status != "active" || m.LeftAtNs != nil || len(m.History) != 1 ||
		m.History[0].LeftAtNs != uint64(left.UnixNano()) || m.History[0].RejoinedAtNs != uint64(rejoined.UnixNano()) {
		t.Fatalf("member %+v, want active with one episode [%d, %d)", m, left.UnixNano(), rejoined.UnixNano())
	}
	if m.Command == nil || m.Command.Op != "rejoin" || !m.Command.Changed || m.Receipt == nil {
		t.Fatalf("member %+v: want the rejoin command and its receipt", m)
	}
}

// TestRestartRebuildsGateFromStore applies a leave, stops the processor,
// and produces the user's signals while it is down. The restarted
// processor reads the commands from its checkpoint, past the leave, so
// only the state rebuilt from the store can stop those signals.
func TestRestartRebuildsGateFromStore(t *testing.T) {
	e := newEnv(t, 2)
	dir := t.TempDir()
	cfg := e.config()
	first := e.start(dir, cfg)
	first.waitReady(t, 2)

	const leaver, stayer = 31, 32
	t0 := base()
	e.command(topics.Leave, leaver, t0)
	eventually(t, 30*time.Second, func() error {
		m, err := first.Member(leaver)
		if err != nil || m.Status != "left" {
			return fmt.Errorf("leave not applied yet: %+v %v", m, err)
		}
		return nil
	})
	if err := first.stop(t); err != nil {
		t.Fatalf("first run: %v", err)
	}

	want := e.produceSignals(t0, []sig{
		{leaver, time.Second, false}, {stayer, time.Second, true},
		{leaver, 2 * time.Second, false}, {stayer, 2 * time.Second, true},
	})
	second := e.start(dir, cfg)
	second.waitReady(t, 2)
	e.waitDecided()
	if got := e.forwardedValues(); !slices.Equal(got, want) {
		t.Fatalf("after restart forwarded %v, want %v", got, want)
	}
}

// TestBadInputGoesToDLQ sends valid, invalid, valid, valid records down one
// partition of each input topic: the partition keeps moving, the valid
// records take effect, the invalid one lands in the DLQ with its reason
// and origin.
func TestBadInputGoesToDLQ(t *testing.T) {
	e := newEnv(t, 1)
	pr := e.start(t.TempDir(), e.config())
	pr.waitReady(t, 1)
	t0 := base()

	sigTopic := string(e.set.Signals)
	e.produce(
		&kgo.Record{Topic: sigTopic, Key: []byte("1"), Value: []byte("s1"), Timestamp: t0},
		&kgo.Record{Topic: sigTopic, Key: []byte("01"), Value: []byte("bad key"), Timestamp: t0},
		&kgo.Record{Topic: sigTopic, Key: []byte("2"), Value: []byte("s2"), Timestamp: t0},
		&kgo.Record{Topic: sigTopic, Key: []byte("3"), Value: []byte("s3"), Timestamp: t0},
	)
	cmdTopic := string(e.set.Commands)
	e.produce(
		&kgo.Record{Topic: cmdTopic, Key: []byte("11"), Value: []byte(`{"op":"leave","user_id":11}`)},
		&kgo.Record{Topic: cmdTopic, Key: []byte("12"), Value: []byte(`{"op":"leave","user_id":13}`)},
		&kgo.Record{Topic: cmdTopic, Key: []byte("14"), Value: []byte(`{"op":"leave","user_id":14}`)},
		&kgo.Record{Topic: cmdTopic, Key: []byte("15"), Value: []byte(`{"op":"leave","user_id":15}`)},
	)
	e.waitDecided()
	if got, want := e.forwardedValues(), []string{"s1", "s2", "s3"}; !slices.Equal(got, want) {
		t.Fatalf("forwarded %v, want %v", got, want)
	}
	var dlq []*kgo.Record
	eventually(t, 30*time.Second, func() error {
		dlq = e.readAll(e.set.DLQ)
		if len(dlq) < 2 {
			return fmt.Errorf("%d DLQ records, want 2", len(dlq))
		}
		return nil
	})
	if len(dlq) != 2 {
		t.Fatalf("%d DLQ records, want 2", len(dlq))
	}
	wantDLQ := map[string]struct{ reason, topic, offset string }{
		"bad key":                     {string(topics.ReasonKeyLeadingZero), sigTopic, "1"},
		`{"op":"leave","user_id":13}`: {string(topics.ReasonCommandUserMismatch), cmdTopic, "1"},
	}
	for _, r := range dlq {
		w, ok := wantDLQ[string(r.Value)]
		if !ok {
			t.Fatalf("unexpected DLQ record %q", r.Value)
		}
		h := headers(r)
		if h[topics.HeaderReason] != w.reason || h[topics.HeaderSourceTopic] != w.topic ||
			h[topics.HeaderSourcePartition] != "0" || h[topics.HeaderSourceOffset] != w.offset || h[topics.HeaderError] == "" {
			t.Errorf("DLQ record %q headers %v, want reason %s from %s/0/%s", r.Value, h, w.reason, w.topic, w.offset)
		}
	}
	for _, user := range []uint64{11, 14, 15} {
		eventually(t, 30*time.Second, func() error {
			m, err := pr.Member(user)
			if err != nil || m.Status != "left" {
				return fmt.Errorf("user %d: %+v %v", user, m, err)
			}
			return nil
		})
	}
}

func headers(r *kgo.Record) map[string]string {
	out := make(map[string]string)
	for _, h := range r.Headers {
		out[h.Key] = string(h.Value)
	}
	return out
}

func TestMismatchedPartitionsRefuseToStart(t *testing.T) {
	e := bareEnv(t, 3)
	e.createTopics(2, 3)
	cfg := e.config()
	cfg.CreateTopics = false
	pr := e.start(t.TempDir(), cfg)
	select {
	case err := <-pr.done:
		pr.done <- err // for stop
		var mismatch *fanout.PartitionMismatchError
		if !errors.As(err, &mismatch) || mismatch.CommandPartitions != 2 || len(mismatch.Inputs) != 1 ||
			mismatch.Inputs[0] != (fanout.TopicPartitions{Topic: e.set.Signals, Partitions: 3}) {
			t.Fatalf("Run = %v, want a PartitionMismatchError of 2 vs 3", err)
		}
		t.Logf("refused with: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("processor did not refuse to start within 60s")
	}
}
