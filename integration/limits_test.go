package integration

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/topics"
)

// The tests of this file change a topic's max.message.bytes while the
// processor runs: it must follow, never settling a record against the
// limit it read before.

// setLimit sets topic's max.message.bytes and waits until the broker
// applies it: a record just above it is refused and one just below is
// taken (see waitRefusedAbove). Each probe is produced in a transaction
// that is then aborted, so no reader of committed records sees it.
func (e *env) setLimit(topic topics.Topic, limit int) {
	e.t.Helper()
	c := kadm.AlterConfig{Op: kadm.SetConfig, Name: "max.message.bytes", Value: kadm.StringPtr(strconv.Itoa(limit))}
	resp, err := e.adm.AlterTopicConfigs(e.ctx(30*time.Second), []kadm.AlterConfig{c}, string(topic))
	if err == nil {
		err = resp[0].Err
	}
	if err != nil {
		e.t.Fatalf("alter %s: %v", topic, err)
	}
	e.waitRefusedAbove(topic, limit)
	ctx := e.ctx(30 * time.Second)
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker.addrs...), kgo.TransactionalID("it-probe-"+randomID()),
		kgo.ProducerBatchMaxBytes(int32(2*limit+1024)), kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	value := make([]byte, limit-200) // leaves room for the batch's and the record's overheads
	eventually(e.t, 30*time.Second, func() error {
		if err := cl.BeginTransaction(); err != nil {
			return err
		}
		// Keyed: a compacted topic (the changelog) refuses a record
		// without a key, and Kafka's refusal left the abort hanging.
		err := cl.ProduceSync(ctx, &kgo.Record{Topic: string(topic), Key: []byte("limit-probe"), Value: value}).FirstErr()
		if end := cl.EndTransaction(ctx, kgo.TryAbort); end != nil {
			return fmt.Errorf("abort of the probe: %w", end)
		}
		if errors.Is(err, kerr.MessageTooLarge) {
			return fmt.Errorf("a record of %d bytes is still refused under the limit of %d", len(value), limit)
		}
		return err
	})
}

// bigProducer is a client that produces records of up to limit bytes.
func (e *env) bigProducer(limit int) *kgo.Client {
	e.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker.addrs...), kgo.ProducerBatchMaxBytes(int32(limit)),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(cl.Close)
	return cl
}

// TestLimitRaisedWhileRunning raises the cohort topic's limit from 1 MiB
// to 3 MiB while the processor runs: a valid signal of 1.5 MiB of an
// active user is forwarded, not dead-lettered as record_too_large
// against the limit read at start (its offset committed, the signal lost).
func TestLimitRaisedWhileRunning(t *testing.T) {
	e := newEnv(t, 1)
	e.setLimit(e.set.Signals, 4<<20)
	pr := e.start(t.TempDir(), e.config())
	pr.waitReady(t, 1)
	t0 := base()
	e.signal(1, t0, "small") // the producer has met the cohort topic at its old limit
	e.waitDecided()

	e.setLimit(e.set.Cohort, 3<<20)
	value := make([]byte, 3<<19)
	_, _ = rand.Read(value) // compression cannot bring it under the old limit
	big := &kgo.Record{Topic: string(e.set.Signals), Key: topics.AppendUserID(nil, 2), Value: value, Timestamp: t0.Add(time.Millisecond)}
	if err := e.bigProducer(4<<20).ProduceSync(e.ctx(30*time.Second), big).FirstErr(); err != nil {
		t.Fatalf("produce the large signal: %v", err)
	}
	e.waitDecided()

	if dl := findDLQ(e.readAll(e.set.DLQ), big); dl != nil {
		t.Fatalf("the 1.5 MiB signal went to the DLQ (%s: %s) under a limit of 3 MiB",
			header(dl, topics.HeaderReason), header(dl, topics.HeaderError))
	}
	var forwarded int
	for _, r := range e.readAll(e.set.Cohort) {
		if bytes.Equal(r.Value, value) {
			forwarded++
		}
	}
	if forwarded != 1 {
		t.Fatalf("the 1.5 MiB signal was forwarded %d times, want once", forwarded)
	}
}

// TestChangelogLimitLoweredWhileRunning lowers the changelog topic's
// limit below a user's next record while the processor runs: the record
// leaves out its oldest episodes to fit the new limit (it fitted the old
// one, so trimming it to that changed nothing and the broker refused it
// in every cycle), and the signals after it are decided.
func TestChangelogLimitLoweredWhileRunning(t *testing.T) {
	e := newEnv(t, 1)
	pr := e.start(t.TempDir(), e.config())
	pr.waitReady(t, 1)
	const user, episodes, limit = 9, 300, 2000
	t0 := base()
	var last *kgo.Record
	for i := range episodes {
		at := t0.Add(time.Duration(i) * 10 * time.Millisecond)
		e.command(topics.Leave, user, at)
		last = e.command(topics.Rejoin, user, at.Add(5*time.Millisecond))
	}
	before := waitLatestOf(e, user, last.Offset)
	// A committed cycle whose offset metadata says the commands were
	// judged: the next session does not replay them all.
	e.signal(1, time.Now(), "before")
	e.waitDecided()
	if before.HistoryOmitted != 0 || len(before.History) != episodes {
		t.Fatalf("before the change: %d episodes, %d omitted; want %d, none omitted", len(before.History), before.HistoryOmitted, episodes)
	}

	e.setLimit(e.set.Changelog, limit)
	leave := e.command(topics.Leave, user, t0.Add(episodes*10*time.Millisecond))
	e.signal(1, time.Now(), "after")
	rec := waitLatestOf(e, user, leave.Offset)
	if rec.Status != "left" || rec.HistoryOmitted == 0 || rec.HistoryOmitted+len(rec.History) != episodes {
		t.Fatalf("latest record: status %s, %d episodes and %d omitted; want left, %d in all, some omitted",
			rec.Status, len(rec.History), rec.HistoryOmitted, episodes)
	}
	e.waitDecided()
}

// waitLatestOf waits until user's latest changelog record on the shared
// broker follows the command at offset and returns it.
func waitLatestOf(e *env, user uint64, offset int64) topics.MemberRecord {
	e.t.Helper()
	var rec topics.MemberRecord
	eventually(e.t, 30*time.Second, func() error {
		r := latestRecord(e, user)
		if r.Command == nil || r.Command.Offset < offset {
			return fmt.Errorf("user %d: no changelog record of the command at offset %d yet", user, offset)
		}
		rec = r
		return nil
	})
	return rec
}

// TestDLQLimitLoweredWhileRunning lowers the DLQ topic's limit below the
// size of a minimal DLQ copy (64 KiB) while the processor runs: a bad
// signal's copy fits the new limit, and the signals after it are
// forwarded. Before, the copy was cut to the limit read at start, then
// to 64 KiB, and refused in every cycle.
func TestDLQLimitLoweredWhileRunning(t *testing.T) {
	e := newEnv(t, 1)
	pr := e.start(t.TempDir(), e.config())
	pr.waitReady(t, 1)
	const limit = 20000
	e.setLimit(e.set.DLQ, limit)

	value := make([]byte, 100<<10)
	_, _ = rand.Read(value)
	bad := &kgo.Record{Topic: string(e.set.Signals), Key: []byte("not-a-user"), Value: value, Timestamp: base()}
	e.produce(bad)
	after := e.signal(1, base(), "after")
	e.waitDecided()

	dl := findDLQ(e.readAll(e.set.DLQ), bad)
	if dl == nil {
		t.Fatal("no DLQ record of the bad signal")
	}
	if n := len(dl.Key) + len(dl.Value); n > limit {
		t.Errorf("its DLQ copy takes %d bytes, over the limit of %d", n, limit)
	}
	if got := e.forwardedValues(); len(got) != 1 || got[0] != string(after.Value) {
		t.Errorf("forwarded %v, want [after]", shorten(got))
	}
}

// TestDLQRefusingEveryCopyHalts lowers the DLQ topic's limit below any
// DLQ copy while the processor runs: after a bounded number of refusals
// it halts, naming the topic, instead of producing the copy again in
// every cycle while no partition moves.
func TestDLQRefusingEveryCopyHalts(t *testing.T) {
	e := newEnv(t, 1)
	pr := e.start(t.TempDir(), e.config())
	pr.waitReady(t, 1)
	e.setLimit(e.set.DLQ, 300)
	// Every copy keeps the key (up to 1 KiB): none fits 300 bytes, and
	// random, compression cannot make it.
	key := make([]byte, 1000)
	_, _ = rand.Read(key)
	key[0] = 'k'
	e.produce(&kgo.Record{Topic: string(e.set.Signals), Key: key, Value: []byte("bad"), Timestamp: base()})
	select {
	case err := <-pr.done:
		pr.done <- err // for stop
		if err == nil || !strings.Contains(err.Error(), string(e.set.DLQ)) || !strings.Contains(err.Error(), "3rd time") {
			t.Fatalf("Run returned %v; want the DLQ's refusals named", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the processor did not halt within 60s")
	}
}

// TestChangelogRecordThatCannotFitHalts lowers the changelog topic's
// limit below a record with no history at all: the processor halts
// naming the user and the limit (failing closed) instead of sending the
// record, which holds the user's boundary, to the DLQ, where the purge
// job would never read it.
func TestChangelogRecordThatCannotFitHalts(t *testing.T) {
	e := newEnv(t, 1)
	pr := e.start(t.TempDir(), e.config())
	pr.waitReady(t, 1)
	e.setLimit(e.set.Changelog, 300)
	e.command(topics.Leave, 7, base())
	select {
	case err := <-pr.done:
		pr.done <- err // for stop
		if err == nil || !strings.Contains(err.Error(), "user 7") || !strings.Contains(err.Error(), "max.message.bytes 300") {
			t.Fatalf("Run returned %v; want the user's record and the limit named", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the processor did not halt within 60s")
	}
	if dl := e.readAll(e.set.DLQ); len(dl) != 0 {
		t.Errorf("%d DLQ records; the changelog record must not go there", len(dl))
	}
}

// TestChangelogLimitRaisedWhileRunning raises the changelog topic's limit
// while the processor runs: the next record of a user whose records were
// trimmed holds the whole history again, not one trimmed against the
// limit read at start.
func TestChangelogLimitRaisedWhileRunning(t *testing.T) {
	e := newEnv(t, 1)
	e.setLimit(e.set.Changelog, 2000)
	pr := e.start(t.TempDir(), e.config())
	pr.waitReady(t, 1)
	const user, episodes = 9, 60
	t0 := base()
	var last *kgo.Record
	for i := range episodes {
		at := t0.Add(time.Duration(i) * 10 * time.Millisecond)
		e.command(topics.Leave, user, at)
		last = e.command(topics.Rejoin, user, at.Add(5*time.Millisecond))
	}
	if before := waitLatestOf(e, user, last.Offset); before.HistoryOmitted == 0 {
		t.Fatalf("before the change: %d episodes, none omitted; want some omitted under 2000 bytes", len(before.History))
	}
	e.signal(1, time.Now(), "before")
	e.waitDecided()

	e.setLimit(e.set.Changelog, 1<<20)
	leave := e.command(topics.Leave, user, t0.Add(episodes*10*time.Millisecond))
	rec := waitLatestOf(e, user, leave.Offset)
	if rec.Status != "left" || rec.HistoryOmitted != 0 || len(rec.History) != episodes {
		t.Fatalf("latest record: status %s, %d episodes and %d omitted; want left, %d episodes, none omitted",
			rec.Status, len(rec.History), rec.HistoryOmitted, episodes)
	}
}

// TestDLQLimitRaisedWhileRunning raises the DLQ topic's limit while the
// processor runs: a bad signal of 1.5 MiB goes to the DLQ whole, with its
// own reason, not cut to the limit read at start (record_too_large).
func TestDLQLimitRaisedWhileRunning(t *testing.T) {
	e := newEnv(t, 1)
	e.setLimit(e.set.Signals, 4<<20)
	pr := e.start(t.TempDir(), e.config())
	pr.waitReady(t, 1)
	e.signal(1, base(), "small")
	e.waitDecided()

	e.setLimit(e.set.DLQ, 3<<20)
	value := make([]byte, 3<<19)
	_, _ = rand.Read(value)
	bad := &kgo.Record{Topic: string(e.set.Signals), Key: []byte("not-a-user"), Value: value, Timestamp: base()}
	if err := e.bigProducer(4<<20).ProduceSync(e.ctx(30*time.Second), bad).FirstErr(); err != nil {
		t.Fatalf("produce the large signal: %v", err)
	}
	e.waitDecided()
	dl := findDLQ(e.readAll(e.set.DLQ), bad)
	if dl == nil {
		t.Fatal("no DLQ copy of the bad signal")
	}
	if !bytes.Equal(dl.Value, value) || header(dl, topics.HeaderReason) == string(topics.ReasonRecordTooLarge) {
		t.Fatalf("DLQ copy of the bad signal: %d of %d bytes, reason %s; want it whole, with its own reason",
			len(dl.Value), len(value), header(dl, topics.HeaderReason))
	}
}
