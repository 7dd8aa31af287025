package integration

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/topics"
)

// The tests of this file are regression tests for hostile input: records
// a real producer can write, each of which broke the promise before. Each
// says what broke (its finding, numbered 1 to 7 in this file); where an
// unsafe switch brings the old behaviour back, the test runs that control
// too and expects the damage.

// TestOpenCommandTransactionHoldsSignals: a transaction left open on a
// commands partition (another producer's, or a killed one's) puts every
// later record of the partition above its last stable offset. A leave
// acknowledged there must still stop the user's signals stamped after it
// (finding 1). Observing the last stable offset, the processor forwarded
// them; the control shows it.
func TestOpenCommandTransactionHoldsSignals(t *testing.T) {
	for _, tc := range []struct {
		name    string
		lso     bool // the unsafe control: observe the last stable offset
		wantHit bool // the user's signal is forwarded
	}{
		{"high watermark", false, false},
		{"control: last stable offset leaks", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 1)
			cfg := e.config()
			cfg.Testing.UnsafeObserveLSO = tc.lso
			pr := e.start(t.TempDir(), cfg)
			pr.waitReady(t, 1)

			txn, err := kgo.NewClient(kgo.SeedBrokers(broker.addrs...), kgo.TransactionalID("it-txn-"+randomID()),
				kgo.TransactionTimeout(60*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer txn.Close()
			if err := txn.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			other := topics.Command{Op: topics.Leave, UserID: 999, AtNs: uint64(time.Now().UnixNano()), HasAt: true}
			if err := txn.ProduceSync(e.ctx(30*time.Second), &kgo.Record{Topic: string(e.set.Commands),
				Key: topics.AppendUserID(nil, 999), Value: topics.AppendCommand(nil, other)}).FirstErr(); err != nil {
				t.Fatal(err)
			}

			const user = 7
			e.command(topics.Leave, user, time.Now()) // acknowledged, behind the open transaction
			e.signal(user, time.Now(), "after-the-leave")
			e.signal(8, time.Now(), "bystander")

			if tc.wantHit {
				eventually(t, 30*time.Second, func() error {
					if !hasValue(e.readAll(e.set.Cohort), "after-the-leave") {
						return fmt.Errorf("the leaked signal is not forwarded yet")
					}
					return nil
				})
				if err := txn.EndTransaction(e.ctx(30*time.Second), kgo.TryAbort); err != nil {
					t.Fatal(err)
				}
				return
			}
			// The partition reports the hold, and holds.
			eventually(t, 30*time.Second, func() error {
				st := pr.Partitions()
				if len(st) != 1 || st[0].OpenTransaction < 500*time.Millisecond {
					return fmt.Errorf("partitions %+v: not held by the open transaction for 500ms yet", st)
				}
				return nil
			})
			if got := metricValue(t, pr.reg, "cohortgate_commands_open_transaction_seconds", nil); got < 0.5 {
				t.Errorf("cohortgate_commands_open_transaction_seconds = %v, want >= 0.5", got)
			}
			if out := e.readAll(e.set.Cohort); len(out) > 0 {
				t.Fatalf("forwarded %d signals while their commands partition was held: %q", len(out), values(out))
			}
			if err := txn.EndTransaction(e.ctx(30*time.Second), kgo.TryCommit); err != nil {
				t.Fatal(err)
			}
			e.waitDecided()
			out := e.readAll(e.set.Cohort)
			if hasValue(out, "after-the-leave") || !hasValue(out, "bystander") {
				t.Fatalf("cohort topic holds %q; want the bystander's signal only", values(out))
			}
			if st := pr.Partitions(); st[0].OpenTransaction != 0 {
				t.Errorf("after the commit, partitions %+v still report a hold", st)
			}
		})
	}
}

// TestLateLeaveWindowSurvivesHandover: a late leave's window, once in the
// changelog, must be in every later record of the user, also those a new
// owner with an empty data directory writes (finding 2). Without recovering
// windows from the changelog, the new owner's record dropped it; the
// control shows it.
func TestLateLeaveWindowSurvivesHandover(t *testing.T) {
	for _, tc := range []struct {
		name       string
		noRecovery bool
	}{
		{"recovered", false},
		{"control: not recovered", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 1)
			const user = 5
			a := e.start(t.TempDir(), e.config())
			a.waitReady(t, 1)
			forwardedAt := time.Now().Truncate(time.Millisecond)
			e.signal(user, forwardedAt, "leaked")
			e.waitDecided()
			if !hasValue(e.readAll(e.set.Cohort), "leaked") {
				t.Fatal("the signal was not forwarded before the leave")
			}
			leftAt := forwardedAt.Add(-time.Second)
			e.command(topics.Leave, user, leftAt) // acknowledged long after the grace
			want := topics.LateLeave{LeftAtNs: uint64(leftAt.UnixNano()), ForwardedThroughNs: uint64(forwardedAt.UnixNano()), Exact: true}
			eventually(t, 30*time.Second, func() error {
				return hasWindow(latestRecord(e, user), want)
			})
			// Another user's signal after the leave: the first owner's last
			// decided event time is then later than the window's end, and
			// its offsets say it judged the leave, so a new owner that
			// merely re-judged the leave could not come up with the window.
			e.signal(user+1, time.Now(), "later")
			e.waitDecided()
			if err := a.stop(t); err != nil {
				t.Fatalf("first owner: %v", err)
			}

			cfg := e.config()
			cfg.Testing.UnsafeNoWindowRecovery = tc.noRecovery
			b := e.start(t.TempDir(), cfg) // a new owner with nothing on disk
			b.waitReady(t, 1)
			e.command(topics.Rejoin, user, time.Now())
			var last topics.MemberRecord
			eventually(t, 30*time.Second, func() error {
				last = latestRecord(e, user)
				if last.Status != "active" {
					return fmt.Errorf("latest record of user %d is %+v; want the rejoin's", user, last)
				}
				return nil
			})
			err := hasWindow(last, want)
			switch {
			case tc.noRecovery && err == nil:
				t.Fatalf("control: the new owner's record kept the window %+v without recovery", want)
			case !tc.noRecovery && err != nil:
				t.Fatal(err)
			}
			if !tc.noRecovery {
				m, err := b.Member(user)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Contains(m.LateLeaves, want) {
					t.Errorf("the new owner's store has windows %+v, want %+v", m.LateLeaves, want)
				}
			}
		})
	}
}

// TestPoisonRecords: every record Kafka accepts on an input takes effect
// or goes to the DLQ with a stable reason, and the partition moves on
// (finding 3). Before, the first three stopped the processor on every
// restart, the large ones stalled every partition, and the valid signal
// between the producer's and the broker's limit could not be forwarded.
func TestPoisonRecords(t *testing.T) {
	e := newEnv(t, 2)
	// The cohort topic takes less than the signals topic: a valid signal
	// between the two cannot be forwarded.
	const cohortLimit = 200_000
	e.limitCohort(cohortLimit)
	pr := e.start(t.TempDir(), e.config())
	pr.waitReady(t, 2)
	big := bigProducer(t)
	now := time.Now()
	cmd := func(user uint64, value []byte, partition int32) *kgo.Record {
		r := &kgo.Record{Topic: string(e.set.Commands), Key: topics.AppendUserID(nil, user), Value: value, Timestamp: now, Partition: partition}
		if partition < 0 {
			r.Partition = murmur2Partition(r.Key, 2)
		}
		return r
	}
	pad := func(n int) string { return strings.Repeat("x", n) }
	// The user ids of partition 0 and 1 of the inputs.
	var inPart [2][]uint64
	for u := uint64(1); len(inPart[0]) < 8 || len(inPart[1]) < 8; u++ {
		p := murmur2Partition(topics.AppendUserID(nil, u), 2)
		inPart[p] = append(inPart[p], u)
	}
	u := inPart[0]
	cases := []struct {
		name   string
		r      *kgo.Record
		reason topics.Reason // "" when it must take effect
		orig   topics.Reason // for record_too_large: the reason before
		whole  bool          // the DLQ copy holds the whole value
	}{
		{"boundary is the OpenEnd sentinel", cmd(u[0], fmt.Appendf(nil, `{"op":"leave","user_id":%d,"at_ns":%d}`, u[0], uint64(math.MaxUint64)), -1),
			topics.ReasonCommandAtOutOfRange, "", true},
		{"boundary an hour ahead of its record", cmd(u[1], fmt.Appendf(nil, `{"op":"leave","user_id":%d,"at_ns":%d}`, u[1], now.Add(time.Hour).UnixNano()), -1),
			topics.ReasonCommandFutureSkew, "", true},
		{"malformed command of 800 KB", cmd(u[2], []byte(`{"op":"leave","user_id":`+strconv.FormatUint(u[2], 10)+`,"pad":"`+pad(800_000)), -1),
			topics.ReasonCommandJSON, "", true},
		{"misrouted command of 800 KB", cmd(u[3], fmt.Appendf(nil, `{"op":"leave","user_id":%d,"at_ns":%d,"pad":"%s"}`, u[3], now.UnixNano(), pad(800_000)), 1),
			"", "", false},
		{"bad-key signal of 1 MB", &kgo.Record{Topic: string(e.set.Signals), Key: []byte("not-a-user"), Value: []byte(pad(1_048_400)), Timestamp: now},
			topics.ReasonRecordTooLarge, topics.ReasonKeyNotDecimal, false},
		{"valid signal above the cohort topic's limit", &kgo.Record{Topic: string(e.set.Signals), Key: topics.AppendUserID(nil, u[4]), Value: []byte(pad(300_000)), Timestamp: now},
			topics.ReasonRecordTooLarge, "", true},
		{"valid signal under the cohort topic's limit", &kgo.Record{Topic: string(e.set.Signals), Key: topics.AppendUserID(nil, u[5]), Value: []byte(pad(150_000)), Timestamp: now},
			"", "", false},
	}
	for _, tc := range cases {
		if tc.r.Topic == string(e.set.Signals) {
			tc.r.Partition = murmur2Partition(tc.r.Key, 2)
		}
		if err := big.ProduceSync(e.ctx(30*time.Second), tc.r).FirstErr(); err != nil {
			t.Fatalf("%s: produce: %v", tc.name, err)
		}
	}
	// The partitions move on: a leave after the poison is applied, and a
	// signal after it is decided.
	e.command(topics.Leave, u[6], now)
	e.signal(u[7], time.Now(), "after-the-poison")
	e.signal(inPart[1][0], time.Now(), "other-partition")
	e.waitDecided()
	eventually(t, 30*time.Second, func() error {
		if m, err := pr.Member(u[6]); err != nil || m.Status != "left" {
			return fmt.Errorf("user %d after the poison: %+v, %v", u[6], m, err)
		}
		if m, err := pr.Member(u[3]); err != nil || m.Status != "left" {
			return fmt.Errorf("user %d, whose large command was misrouted: %+v, %v", u[3], m, err)
		}
		return nil
	})
	out := e.readAll(e.set.Cohort)
	if !hasValue(out, "after-the-poison") || !hasValue(out, "other-partition") {
		t.Fatalf("signals after the poison not forwarded: %q", values(out))
	}
	if !slices.ContainsFunc(out, func(r *kgo.Record) bool { return len(r.Value) == 150_000 }) {
		t.Errorf("the valid signal of 150 KB was not forwarded")
	}
	var dlq []*kgo.Record
	eventually(t, 30*time.Second, func() error {
		dlq = e.readAll(e.set.DLQ)
		for _, tc := range cases {
			if tc.reason != "" && findDLQ(dlq, tc.r) == nil {
				return fmt.Errorf("%s: not in the DLQ yet", tc.name)
			}
		}
		return nil
	})
	for _, tc := range cases {
		dl := findDLQ(dlq, tc.r)
		if tc.reason == "" {
			if dl != nil {
				t.Errorf("%s: dead-lettered as %s, want it to take effect", tc.name, header(dl, topics.HeaderReason))
			}
			continue
		}
		if got := header(dl, topics.HeaderReason); got != string(tc.reason) {
			t.Errorf("%s: reason %q, want %q", tc.name, got, tc.reason)
		}
		if tc.reason != topics.ReasonRecordTooLarge {
			if !bytes.Equal(dl.Value, tc.r.Value) {
				t.Errorf("%s: the DLQ copy's value differs from the original", tc.name)
			}
			continue
		}
		sum := sha256.Sum256(tc.r.Value)
		if got := header(dl, topics.HeaderOriginalSHA256); got != hex.EncodeToString(sum[:]) {
			t.Errorf("%s: original sha256 %q, want %x", tc.name, got, sum)
		}
		if got := header(dl, topics.HeaderOriginalReason); got != string(tc.orig) {
			t.Errorf("%s: original reason %q, want %q", tc.name, got, tc.orig)
		}
		if got, want := bytes.Equal(dl.Value, tc.r.Value), tc.whole; got != want || !bytes.HasPrefix(tc.r.Value, dl.Value) {
			t.Errorf("%s: DLQ value of %d bytes is a prefix of the original: %v, whole: %v, want whole %v",
				tc.name, len(dl.Value), bytes.HasPrefix(tc.r.Value, dl.Value), got, want)
		}
	}
	select {
	case err := <-pr.done:
		t.Fatalf("the processor stopped: %v", err)
	default:
	}
}

// TestRedeliveredLeaveAfterRejoin: leave@100, rejoin@200, leave@150
// (clamped to 200), rejoin@250, then the leave@150 delivered again. It
// re-opened a leave at 250 and the user's signals were dropped (finding
// 4); it is a duplicate.
func TestRedeliveredLeaveAfterRejoin(t *testing.T) {
	e := newEnv(t, 1)
	pr := e.start(t.TempDir(), e.config())
	pr.waitReady(t, 1)
	const user = 3
	t0 := time.Now().Add(-time.Minute)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	e.command(topics.Leave, user, at(100))
	e.command(topics.Rejoin, user, at(200))
	again := e.command(topics.Leave, user, at(150))
	e.command(topics.Rejoin, user, at(250))
	e.produce(&kgo.Record{Topic: again.Topic, Key: again.Key, Value: again.Value}) // the same command again
	e.signal(user, time.Now(), "after")
	e.waitDecided()
	m, err := pr.Member(user)
	if err != nil {
		t.Fatal(err)
	}
	ns := func(ms int) uint64 { return uint64(at(ms).UnixNano()) }
	wantHistory := []topics.Episode{{LeftAtNs: ns(100), RejoinedAtNs: ns(200)}, {LeftAtNs: ns(200), RejoinedAtNs: ns(250)}}
	if m.Status != "active" || !slices.Equal(m.History, wantHistory) || m.Command == nil || !m.Command.Duplicate {
		t.Fatalf("user %d: %+v; want active with history %v, the last command a duplicate", user, m, wantHistory)
	}
	if !hasValue(e.readAll(e.set.Cohort), "after") {
		t.Fatal("the signal of the active user was dropped")
	}
}

// TestBoundariesFromTheFuture: a leave stamped an hour ahead of its record
// made the user left while its signals were forwarded for that hour, and a
// correct leave then changed nothing (finding 5). It goes to the DLQ; and
// leaving while left keeps the earliest boundary.
func TestBoundariesFromTheFuture(t *testing.T) {
	e := newEnv(t, 1)
	pr := e.start(t.TempDir(), e.config())
	pr.waitReady(t, 1)
	const user = 4
	future := e.command(topics.Leave, user, time.Now().Add(time.Hour))
	now := time.Now()
	e.command(topics.Leave, user, now)
	earlier := now.Add(-500 * time.Millisecond)
	e.command(topics.Leave, user, earlier)
	e.command(topics.Leave, user, now.Add(100*time.Millisecond)) // later: changes nothing
	eventually(t, 30*time.Second, func() error {
		m, err := pr.Member(user)
		if err != nil {
			return err
		}
		if m.Status != "left" || m.LeftAtNs == nil || *m.LeftAtNs != uint64(earlier.UnixNano()) {
			return fmt.Errorf("user %d: %+v; want left at %d, the earliest boundary", user, m, earlier.UnixNano())
		}
		return nil
	})
	eventually(t, 30*time.Second, func() error {
		dl := findDLQ(e.readAll(e.set.DLQ), future)
		if dl == nil || header(dl, topics.HeaderReason) != string(topics.ReasonCommandFutureSkew) {
			return fmt.Errorf("the future leave is not in the DLQ as %s", topics.ReasonCommandFutureSkew)
		}
		return nil
	})
}

// TestLeaveAndRejoinInOneMillisecond: both without at_ns, so their record
// timestamps, equal, are the boundaries. The rejoin went to the DLQ as
// rejoin_before_leave and the user stayed left (finding 6); it closes the
// empty episode, and the user's signals flow.
func TestLeaveAndRejoinInOneMillisecond(t *testing.T) {
	e := newEnv(t, 1)
	pr := e.start(t.TempDir(), e.config())
	pr.waitReady(t, 1)
	const user = 6
	ts := time.Now().Truncate(time.Millisecond)
	key := topics.AppendUserID(nil, user)
	e.produce(
		&kgo.Record{Topic: string(e.set.Commands), Key: key, Value: []byte(`{"op":"leave","user_id":6}`), Timestamp: ts},
		&kgo.Record{Topic: string(e.set.Commands), Key: key, Value: []byte(`{"op":"rejoin","user_id":6}`), Timestamp: ts},
	)
	e.signal(user, time.Now(), "after")
	e.waitDecided()
	m, err := pr.Member(user)
	if err != nil {
		t.Fatal(err)
	}
	t0 := uint64(ts.UnixNano())
	if m.Status != "active" || !slices.Equal(m.History, []topics.Episode{{LeftAtNs: t0, RejoinedAtNs: t0}}) {
		t.Fatalf("user %d: %+v; want active with the empty episode [%d, %d)", user, m, t0, t0)
	}
	if dlq := e.readAll(e.set.DLQ); len(dlq) > 0 {
		t.Fatalf("dead-lettered %d records, e.g. reason %s", len(dlq), header(dlq[0], topics.HeaderReason))
	}
	if !hasValue(e.readAll(e.set.Cohort), "after") {
		t.Fatal("the signal after the rejoin was dropped")
	}
}

// TestClockStepBackwards: when the processor's clock steps back by d, an
// observation is trusted only once the clock passes the newest one, so a
// held signal waits at most about d longer (finding 7), never for good.
func TestClockStepBackwards(t *testing.T) {
	e := newEnv(t, 1)
	const step = 2 * time.Second
	var stepped atomicDuration
	cfg := e.config()
	cfg.Now = func() time.Time { return time.Now().Add(-stepped.load()) }
	pr := e.start(t.TempDir(), cfg)
	pr.waitReady(t, 1)
	e.signal(1, time.Now(), "before-the-step")
	e.waitDecided()
	stepped.store(step)
	sent := time.Now()
	e.signal(1, sent, "after-the-step")
	// Bounded by the step, the grace and the alignment's own latency; a
	// stalled partition would never get there.
	eventually(t, step+cfg.Grace+20*time.Second, func() error {
		if !hasValue(e.readAll(e.set.Cohort), "after-the-step") {
			return fmt.Errorf("held %v after the clock stepped back by %v", time.Since(sent).Round(time.Millisecond), step)
		}
		return nil
	})
	t.Logf("forwarded %v after it was produced, the clock stepped back by %v", time.Since(sent).Round(time.Millisecond), step)
}

// TestSignalBetweenClientAndBrokerLimits: a valid signal above franz-go's
// default batch limit (1,000,012 bytes) but within Kafka's default
// max.message.bytes (1,048,588) was accepted by the broker and could never
// be forwarded: every cycle aborted on it, for every partition (finding 3).
// The producer now takes what the topic takes.
func TestSignalBetweenClientAndBrokerLimits(t *testing.T) {
	e := newEnv(t, 1)
	pr := e.start(t.TempDir(), e.config())
	pr.waitReady(t, 1)
	big := bigProducer(t)
	value := strings.Repeat("y", 1_020_000)
	if err := big.ProduceSync(e.ctx(30*time.Second), &kgo.Record{Topic: string(e.set.Signals), Key: topics.AppendUserID(nil, 1), Value: []byte(value)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	e.signal(2, time.Now(), "after")
	e.waitDecided()
	out := e.readAll(e.set.Cohort)
	if !hasValue(out, value) || !hasValue(out, "after") {
		t.Fatalf("forwarded %d records, want the large signal and the one after it", len(out))
	}
}

// bigProducer returns a client that produces records up to 2 MiB,
// uncompressed, each to the Partition it names.
func bigProducer(t *testing.T) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker.addrs...), kgo.ProducerBatchMaxBytes(2<<20),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// atomicDuration is a duration shared with a clock function.
type atomicDuration struct{ ns atomic.Int64 }

func (a *atomicDuration) load() time.Duration   { return time.Duration(a.ns.Load()) }
func (a *atomicDuration) store(d time.Duration) { a.ns.Store(int64(d)) }

func hasValue(rs []*kgo.Record, v string) bool {
	return slices.ContainsFunc(rs, func(r *kgo.Record) bool { return string(r.Value) == v })
}

func values(rs []*kgo.Record) []string {
	var out []string
	for _, r := range rs {
		v := string(r.Value)
		if len(v) > 40 {
			v = v[:40] + "…"
		}
		out = append(out, v)
	}
	return out
}

func header(r *kgo.Record, key string) string {
	if r == nil {
		return ""
	}
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// findDLQ returns the DLQ record of the input record r (produced, so its
// partition and offset are set), or nil.
func findDLQ(dlq []*kgo.Record, r *kgo.Record) *kgo.Record {
	for _, d := range dlq {
		if header(d, topics.HeaderSourceTopic) == r.Topic &&
			header(d, topics.HeaderSourcePartition) == strconv.Itoa(int(r.Partition)) &&
			header(d, topics.HeaderSourceOffset) == strconv.FormatInt(r.Offset, 10) {
			return d
		}
	}
	return nil
}

// latestRecord returns the user's latest changelog record, or the zero
// record when there is none.
func latestRecord(e *env, user uint64) topics.MemberRecord {
	var last topics.MemberRecord
	key := topics.AppendUserID(nil, user)
	for _, r := range e.readAll(e.set.Changelog) {
		if !bytes.Equal(r.Key, key) {
			continue
		}
		if m, err := topics.DecodeMemberRecord(r.Value); err == nil {
			last = m
		}
	}
	return last
}

func hasWindow(m topics.MemberRecord, want topics.LateLeave) error {
	if !slices.Contains(m.LateLeaves, want) {
		return fmt.Errorf("record %+v has windows %+v; want %+v", m.Command, m.LateLeaves, want)
	}
	return nil
}

// TestBrokerRefusals: a record can be refused for a reason of its own that
// no check before producing sees, here a cohort and a changelog topic that
// take no timestamp older than an hour (message.timestamp.before.max.ms).
// A refused forward must not abort every cycle forever (finding 3): the
// signal goes to the DLQ as record_refused, and the changelog record is
// produced again stamped now. kfake does not enforce the setting, so this
// runs on Apache Kafka only.
func TestBrokerRefusals(t *testing.T) {
	if !broker.real {
		t.Skip("kfake does not enforce message.timestamp.before.max.ms; runs with KAFKA_BROKERS (make test-kafka)")
	}
	e := newEnv(t, 1)
	hour := kadm.StringPtr(strconv.Itoa(int(time.Hour / time.Millisecond)))
	for _, topic := range []topics.Topic{e.set.Cohort, e.set.Changelog} {
		if _, err := e.adm.AlterTopicConfigs(e.ctx(30*time.Second), []kadm.AlterConfig{{
			Name: "message.timestamp.before.max.ms", Value: hour,
		}}, string(topic)); err != nil {
			t.Fatal(err)
		}
	}
	pr := e.start(t.TempDir(), e.config())
	pr.waitReady(t, 1)
	old := time.Now().Add(-2 * time.Hour)
	refused := e.signal(1, old, "two-hours-old")
	key := topics.AppendUserID(nil, 2)
	e.produce(&kgo.Record{Topic: string(e.set.Commands), Key: key, Value: []byte(`{"op":"leave","user_id":2}`), Timestamp: old})
	e.signal(3, time.Now(), "fresh")
	e.waitDecided()
	if out := e.readAll(e.set.Cohort); !hasValue(out, "fresh") || hasValue(out, "two-hours-old") {
		t.Fatalf("cohort topic holds %q; want the fresh signal only", values(out))
	}
	eventually(t, 30*time.Second, func() error {
		dl := findDLQ(e.readAll(e.set.DLQ), refused)
		if got := header(dl, topics.HeaderReason); got != string(topics.ReasonRecordRefused) {
			return fmt.Errorf("the refused signal's DLQ reason is %q, want %s", got, topics.ReasonRecordRefused)
		}
		if rec := latestRecord(e, 2); rec.Status != "left" {
			return fmt.Errorf("user 2's changelog record is %+v; want it produced again, stamped now", rec)
		}
		return nil
	})
	select {
	case err := <-pr.done:
		t.Fatalf("the processor stopped: %v", err)
	default:
	}
}
