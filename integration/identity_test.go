package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/pkg/membership"
	"github.com/cohortgate/cohortgate/topics"
)

// commandWithID produces a command with an explicit boundary and request id.
func (e *env) commandWithID(op topics.Op, user uint64, at time.Time, requestID string) {
	e.t.Helper()
	c := topics.Command{Op: op, UserID: user, AtNs: uint64(at.UnixNano()), HasAt: true, RequestID: requestID}
	e.produce(&kgo.Record{Topic: string(e.set.Commands), Key: topics.AppendUserID(nil, user), Value: topics.AppendCommand(nil, c)})
}

// waitRecords waits until topic holds n committed records and returns them.
func (e *env) waitRecords(topic topics.Topic, n int) []*kgo.Record {
	e.t.Helper()
	var rs []*kgo.Record
	eventually(e.t, 60*time.Second, func() error {
		if rs = e.readAll(topic); len(rs) < n {
			return fmt.Errorf("%s holds %d records, want %d", topic, len(rs), n)
		}
		return nil
	})
	return rs
}

// TestResentLeavesCostConstantBytes: a service that re-sent a user's
// leave with a fresh request id each time made every identity stay for
// ever, and every later changelog record restate them all: n re-sends
// wrote O(n²) bytes, a record stopped fitting 1 MB at 65,536 and the
// processor halted on every start at ~786k. The store keeps a user's last
// 64 identities: the changelog record of the 300th re-send is no larger
// than that of the 100th.
func TestResentLeavesCostConstantBytes(t *testing.T) {
	e := newEnv(t, 1)
	pr := e.start(t.TempDir(), e.config())
	pr.waitReady(t, 1)
	const user, sends = 77, 300
	at := time.Now()
	for i := range sends {
		e.commandWithID(topics.Leave, user, at, fmt.Sprintf("make-sure-%04d", i))
	}
	rs := e.waitRecords(e.set.Changelog, sends)
	size := func(r *kgo.Record) int {
		n := len(r.Value)
		for _, h := range r.Headers {
			n += len(h.Key) + len(h.Value)
		}
		return n
	}
	first, hundredth, last := size(rs[0]), size(rs[99]), size(rs[sends-1])
	t.Logf("changelog record of one user after 1, 100 and %d re-sent leaves: %d, %d, %d bytes", sends, first, hundredth, last)
	// Request ids of one width; the offsets in the record (in its value
	// and its note) gain a digit or two. Kept identities would add 16
	// bytes per send, 3,200 between the two.
	if last > hundredth+16 {
		t.Fatalf("the changelog record grows with re-sent leaves: %d bytes at send 100, %d at send %d", hundredth, last, sends)
	}
	if m, err := pr.Member(user); err != nil || m.Status != "left" {
		t.Fatalf("user %d: %+v, %v; want left", user, m, err)
	}
}

// TestRefusedRejoinRetriedIsRefusedAgain: a rejoin refused by rule C7
// (before the open leave), retried as docs/client.md recommends (same
// request id and boundary), got a changelog record saying "duplicate": true —
// applied before — and no dead letter, for a command that was never
// applied. A refused command is refused on every retry, and says so.
func TestRefusedRejoinRetriedIsRefusedAgain(t *testing.T) {
	e := newEnv(t, 1)
	pr := e.start(t.TempDir(), e.config())
	pr.waitReady(t, 1)
	const user = 78
	t0 := time.Now()
	e.commandWithID(topics.Leave, user, t0, "leave-1")
	e.commandWithID(topics.Rejoin, user, t0.Add(-time.Second), "rejoin-1")
	e.waitRecords(e.set.DLQ, 1)
	e.commandWithID(topics.Rejoin, user, t0.Add(-time.Second), "rejoin-1") // the retry
	dlq := e.waitRecords(e.set.DLQ, 2)
	for i, r := range dlq {
		if got := headers(r)[topics.HeaderReason]; got != string(topics.ReasonRejoinBeforeLeave) {
			t.Errorf("dead letter %d: reason %q, want %q", i, got, topics.ReasonRejoinBeforeLeave)
		}
	}
	for _, r := range e.readAll(e.set.Changelog) {
		m, err := topics.DecodeMemberRecord(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		if m.Command != nil && m.Command.Op == "rejoin" {
			t.Errorf("changelog record %s names the refused rejoin as its command", r.Value)
		}
	}
	if m, err := pr.Member(user); err != nil || m.Status != "left" {
		t.Fatalf("user %d: %+v, %v; want left", user, m, err)
	}
}

// TestHistoryFullStaysLeft: a user who left and rejoined as many times as
// a user's history keeps (MaxHistory, 2 here) leaves once more; the
// rejoin that would close one episode more goes to the DLQ as
// history_full, the user stays left, and its signals stay gated.
func TestHistoryFullStaysLeft(t *testing.T) {
	e := newEnv(t, 1)
	store, err := membership.Open(t.TempDir(), &membership.Options{MaxHistory: 2})
	if err != nil {
		t.Fatal(err)
	}
	pr := e.startOn(store, e.config())
	pr.waitReady(t, 1)
	const user = 79
	t0 := time.Now().Add(-time.Minute)
	for i := range 2 {
		e.commandWithID(topics.Leave, user, t0.Add(time.Duration(2*i)*time.Second), fmt.Sprint("leave-", i))
		e.commandWithID(topics.Rejoin, user, t0.Add(time.Duration(2*i+1)*time.Second), fmt.Sprint("rejoin-", i))
	}
	e.commandWithID(topics.Leave, user, t0.Add(10*time.Second), "leave-2")
	e.commandWithID(topics.Rejoin, user, t0.Add(11*time.Second), "rejoin-2")
	dlq := e.waitRecords(e.set.DLQ, 1)
	if got := headers(dlq[0])[topics.HeaderReason]; got != string(topics.ReasonHistoryFull) {
		t.Fatalf("dead letter: reason %q, want %q", got, topics.ReasonHistoryFull)
	}
	if m, err := pr.Member(user); err != nil || m.Status != "left" || len(m.History) != 2 {
		t.Fatalf("user %d: %+v, %v; want left with 2 episodes", user, m, err)
	}
	e.signal(user, time.Now(), "after-the-refused-rejoin")
	e.waitDecided()
	for _, r := range e.readAll(e.set.Cohort) {
		if string(r.Value) == "after-the-refused-rejoin" {
			t.Fatal("a signal of the user who stayed left was forwarded")
		}
	}
}
