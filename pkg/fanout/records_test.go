package fanout

import (
	"bytes"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/topics"
)

// TestRepublishedCommandKeepsItsBoundary: every copy of a command has the
// original's boundary, whatever timestamp the broker gives the copy (a
// topic with message.timestamp.type=LogAppendTime stamps each copy when
// it appends it); what is no valid command is copied unchanged.
func TestRepublishedCommandKeepsItsBoundary(t *testing.T) {
	ts := time.UnixMilli(1764633600123)
	key := topics.AppendUserID(nil, 42)
	cmd := func(c topics.Command) []byte { return topics.AppendCommand(nil, c) }
	tests := []struct {
		name  string
		value []byte
		ts    time.Time
		same  bool // the copy's value is the original's
	}{
		{"no at_ns", cmd(topics.Command{Op: topics.Rejoin, UserID: 42, RequestID: "r"}), ts, false},
		{"at_ns", cmd(topics.Command{Op: topics.Leave, UserID: 42, AtNs: 7, HasAt: true}), ts, true},
		{"not a command", []byte(`{"op":"leave"`), ts, true},
		{"another user", cmd(topics.Command{Op: topics.Leave, UserID: 43}), ts, true},
		{"timestamp before the epoch", cmd(topics.Command{Op: topics.Leave, UserID: 42}), time.UnixMilli(-1), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			orig := &kgo.Record{Topic: "commands", Partition: 1, Offset: 9, Key: key, Value: tc.value, Timestamp: tc.ts}
			cp := republishCommand(orig, 0)
			if cp.Partition != 0 || headerValue(cp, topics.HeaderMisroutedFrom) != "1/9" {
				t.Fatalf("copy to partition %d from %q", cp.Partition, headerValue(cp, topics.HeaderMisroutedFrom))
			}
			if got := bytes.Equal(cp.Value, orig.Value); got != tc.same {
				t.Fatalf("copy's value %s, original's %s", cp.Value, orig.Value)
			}
			if tc.same {
				return
			}
			want, _, err := boundary(mustDecode(t, orig), orig.Timestamp, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			// The broker stamps the copy later; its boundary stays.
			for _, later := range []time.Duration{0, time.Second, time.Hour} {
				stamped := *cp
				stamped.Timestamp = orig.Timestamp.Add(later)
				c := mustDecode(t, &stamped)
				got, _, err := boundary(c, stamped.Timestamp, 5*time.Second)
				if err != nil || got != want {
					t.Fatalf("copy stamped %v later: boundary %d (%v), want the original's %d", later, got, err, want)
				}
				o := mustDecode(t, orig)
				if c.Op != o.Op || c.UserID != o.UserID || c.RequestID != o.RequestID {
					t.Fatalf("copy %+v of %+v", c, o)
				}
			}
		})
	}
}

func mustDecode(t *testing.T, r *kgo.Record) topics.Command {
	t.Helper()
	c, err := topics.DecodeCommand(r.Key, r.Value)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
