package fanout

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/topics"
)

func TestRefusals(t *testing.T) {
	var rf refusals
	in := &kgo.Record{Topic: "signals", Partition: 1, Offset: 7, Key: []byte("5"), Value: []byte("v"), Timestamp: time.UnixMilli(1000)}
	if _, ok := rf.take(in); ok {
		t.Fatal("a refusal before any")
	}
	// A forwarded copy is known by content; a DLQ copy by its source.
	fwdCopy := &kgo.Record{Topic: "cohort", Key: in.Key, Value: in.Value, Timestamp: in.Timestamp}
	rf.add(fwdCopy, kerr.InvalidTimestamp)
	rfl, ok := rf.take(in)
	if !ok || rfl.deadLetter || rfl.alone || !errors.Is(rfl.err, kerr.InvalidTimestamp) {
		t.Fatalf("after a refused forward: %+v, %v", rfl, ok)
	}
	if _, ok := rf.take(in); !ok {
		t.Fatal("a refusal is kept until its input is settled for good")
	}
	rf.forget([]*kgo.Record{in})
	if _, ok := rf.take(in); ok {
		t.Fatal("a refusal after forget")
	}
	alone := &kgo.Record{Topic: "cohort", Key: in.Key, Value: in.Value, Timestamp: in.Timestamp, Context: producedAlone{}}
	rf.add(alone, kerr.InvalidTimestamp)
	if rfl, ok := rf.take(in); !ok || !rfl.alone {
		t.Fatalf("after a refused forward produced alone: %+v, %v", rfl, ok)
	}
	rf.forget([]*kgo.Record{in})
	dl := deadLetterRecord("dlq", 1<<20, in, topics.ReasonKeyNotDecimal, errors.New("x"))
	rf.add(dl, kerr.MessageTooLarge)
	if rfl, ok := rf.take(in); !ok || !rfl.deadLetter || refusalReason(rfl.err) != topics.ReasonRecordTooLarge {
		t.Fatalf("after a refused DLQ copy: %+v, %v", rfl, ok)
	}
	rf.forget([]*kgo.Record{in})
	if rf.n.Load() != 0 {
		t.Fatalf("%d refusals left", rf.n.Load())
	}
	for _, err := range []error{kerr.NotLeaderForPartition, kerr.RequestTimedOut, errors.New("io")} {
		if refusedByBroker(err) {
			t.Errorf("%v counted as a refusal of the record itself", err)
		}
	}
}

func TestTrimChangelog(t *testing.T) {
	m := topics.MemberRecord{UserID: 1, Status: "active", LateLeaves: []topics.LateLeave{{LeftAtNs: 1, ForwardedThroughNs: 2}}}
	for i := range 1000 {
		m.History = append(m.History, topics.Episode{LeftAtNs: uint64(10 * i), RejoinedAtNs: uint64(10*i + 5)})
	}
	full := topics.AppendMemberRecord(nil, m)
	v, ok := trimChangelog(full, len(full)/3)
	if !ok || len(v) > len(full)/3 {
		t.Fatalf("trimmed to %d bytes (%v), budget %d", len(v), ok, len(full)/3)
	}
	got, err := topics.DecodeMemberRecord(v)
	if err != nil {
		t.Fatal(err)
	}
	if got.HistoryOmitted+len(got.History) != 1000 || got.History[len(got.History)-1] != m.History[999] || len(got.LateLeaves) != 1 {
		t.Fatalf("kept %d episodes, omitted %d, last %+v, windows %v", len(got.History), got.HistoryOmitted, got.History[len(got.History)-1], got.LateLeaves)
	}
	if _, ok := trimChangelog(full, 10); ok {
		t.Fatal("fit in 10 bytes")
	}
}

func TestRefusedEntry(t *testing.T) {
	set := topics.Defaults()
	lim := limits{byTopic: map[string]int{string(set.Changelog): 500}}
	// A changelog record stamped long ago, refused for its timestamp.
	rec := topics.AppendMemberRecord(nil, topics.MemberRecord{UserID: 1, Status: "active"})
	e, err := refusedEntry(outboxEntry{Topic: string(set.Changelog), Partition: -1, Key: []byte("1"), Value: rec, TimestampNs: 1}, set, lim, kerr.InvalidTimestamp)
	if err != nil || e.Topic != string(set.Changelog) || e.TimestampNs == 1 {
		t.Fatalf("changelog replacement %+v, %v: want the record again, stamped now", e, err)
	}
	// A re-published command refused: a minimal DLQ copy naming it.
	rp := republishRecord(&kgo.Record{Topic: string(set.Commands), Partition: 0, Offset: 9, Key: []byte("1"), Value: []byte(strings.Repeat("x", 100))}, 2)
	e, err = refusedEntry(outboxFrom(rp, 2), set, lim, kerr.MessageTooLarge)
	r := outboxItem{e: e}.record()
	if err != nil || e.Topic != string(set.DLQ) || headerValue(r, topics.HeaderReason) != string(topics.ReasonRecordTooLarge) ||
		headerValue(r, topics.HeaderMisroutedFrom) != "0/9" {
		t.Fatalf("re-published command's replacement: %+v, %v", e, err)
	}
}

// TestRefusedEntryFollowsLimits: a refused entry is sized by the limits
// it is given (read after the refusal), not by refusedBudget alone, and a
// changelog record that cannot fit even without history is an error, not
// a DLQ copy: it holds what the purge job must remove.
func TestRefusedEntryFollowsLimits(t *testing.T) {
	set := topics.Defaults()
	dl := deadLetterRecord(set.DLQ, 1<<20, &kgo.Record{Topic: string(set.Signals), Offset: 4, Key: []byte("bad"),
		Value: []byte(strings.Repeat("x", 100<<10))}, topics.ReasonKeyInvalid, errors.New("bad key"))
	const dlqLimit = 20000
	lim := limits{byTopic: map[string]int{string(set.DLQ): dlqLimit, string(set.Changelog): 300}}
	e, err := refusedEntry(outboxFrom(dl, -1), set, lim, kerr.MessageTooLarge)
	if r := (outboxItem{e: e}).record(); err != nil || !lim.fits(r) || r.Topic != string(set.DLQ) {
		t.Fatalf("DLQ entry's replacement: %d bytes for %s, %v; want a DLQ copy within %d", batchBytes(r), r.Topic, err, dlqLimit)
	}
	windows := make([]topics.LateLeave, 20)
	for i := range windows {
		windows[i] = topics.LateLeave{LeftAtNs: uint64(i) + 1, ForwardedThroughNs: uint64(i) + 2, Exact: true}
	}
	rec := topics.AppendMemberRecord(nil, topics.MemberRecord{UserID: 1, Status: "left", LateLeaves: windows})
	if _, err := refusedEntry(outboxEntry{Topic: string(set.Changelog), Partition: -1, Key: []byte("1"), Value: rec}, set, lim, kerr.MessageTooLarge); err == nil {
		t.Fatal("a changelog record with 20 windows fit 300 bytes")
	}
}
