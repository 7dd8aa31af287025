package oracle

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestReportCounts checks the descriptive counts of a Report on one run
// that has a bit of everything.
func TestReportCounts(t *testing.T) {
	for _, style := range valueStyles {
		t.Run(style.name, func(t *testing.T) { testReportCounts(t, style) })
	}
}

func testReportCounts(t *testing.T, style valueStyle) {
	r := newRun(t, style)
	r.cmd(1, "leave", 100, "a")
	r.cmd(1, "rejoin", 200, "b")
	dup := r.cmd(1, "leave", 150, "c")
	r.rawCommand(dup.Key, dup.Partition, string(dup.Value), dup.Timestamp) // duplicate
	r.cmd(2, "leave", 100, "d")
	refused := r.cmd(2, "rejoin", 50, "e")
	r.deadLetter(testTopics.Commands, refused, reasonRejoinBeforeLeave)
	bad := r.rawCommand([]byte("3"), right("3"), "nope", 10)
	r.deadLetter(testTopics.Commands, bad, reasonCommandJSON)
	mis := r.rawCommand([]byte("4"), wrong("4"), `{"op":"leave","user_id":4,"at_ns":100000000}`, 100)
	r.republish(testTopics.Commands, mis)
	ms := r.rawSignal([]byte("5"), wrong("5"), 10)
	cp := r.republish(testTopics.Signals, ms)
	r.forward(cp, r.sig(6, 10), r.sig(1, 99))
	r.sig(1, 250, gated)
	r.changelog(1, left(200, [2]int64{100, 200}))
	r.changelog(2, left(100))
	r.changelog(4, state{leftAt: 100, windows: [][3]int64{{100, 100, 0}}})

	rep := r.report()
	want := Report{
		SignalsIn: 4, CommandsIn: 9, Applied: 5, DuplicateCommands: 1, Refused: 1, Misrouted: 2, DeadLetters: 2,
		Users: 3, Episodes: 4, Gated: 1, Forwarded: 3, Expected: 3, DLQ: 2, ChangelogUsers: 3, Windows: 1, ConservativeWindows: 1,
	}
	details := rep.Details()
	rep.Examples = nil
	if fmt.Sprintf("%+v", rep) != fmt.Sprintf("%+v", want) {
		t.Fatalf("report\n %+v\nwant\n %+v\n%s", rep, want, details)
	}
	if d := details; !strings.Contains(d, "conservative windows 1 (allowed)") {
		t.Fatalf("details do not show the conservative window:\n%s", d)
	}
}

func TestNewJudgeRefuses(t *testing.T) {
	ok := Config{Topics: testTopics, Partitions: 1}
	for _, tc := range []struct {
		name string
		mut  func(*Config)
		want error
	}{
		{"no partitions", func(c *Config) { c.Partitions = 0 }, ErrPartitions},
		{"a topic without a name", func(c *Config) { c.Topics.DLQ = "" }, ErrTopics},
		{"two topics with one name", func(c *Config) { c.Topics.Cohort = c.Topics.Signals }, ErrTopics},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.mut(&c)
			if _, err := NewJudge(c); !errors.Is(err, tc.want) {
				t.Fatalf("NewJudge: %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := NewJudge(ok); err != nil {
		t.Fatal(err)
	}
}

func TestDecodeChangelog(t *testing.T) {
	example := `{"user_id":42,"status":"left","left_at_ns":1764633600000000000,
 "history":[{"left_at_ns":1700000000000000000,"rejoined_at_ns":1710000000000000000}],
 "late_leaves":[{"left_at_ns":1764633600000000000,"forwarded_through_ns":1764633600400000000,"exact":true}],
 "command":{"op":"leave","at_ns":1764633600000000000,"topic":"membership.commands",
            "partition":3,"offset":17,"request_id":"r-1","changed":true},
 "receipt":{"applied_at_ns":1764633600120000000,"signals_partition":3,"signals_offset":5120}}`
	got, err := decodeChangelog([]byte(example))
	if err != nil {
		t.Fatal(err)
	}
	want := changelogRecord{
		userID: 42, left: true, leftAt: 1764633600000000000,
		history: []episode{{leftAt: 1700000000000000000, rejoinedAt: 1710000000000000000}},
		windows: []window{{leftAt: 1764633600000000000, through: 1764633600400000000, exact: true}},
		command: "membership.commands/3/17",
	}
	if got.userID != want.userID || got.left != want.left || got.leftAt != want.leftAt || got.command != want.command ||
		len(got.history) != 1 || got.history[0] != want.history[0] || len(got.windows) != 1 || got.windows[0] != want.windows[0] {
		t.Fatalf("docs/client.md's example decodes to %+v, want %+v", got, want)
	}
	for _, bad := range []string{
		``, `[]`, `{"user_id":1,"status":"left"}`,
		`{"user_id":1,"status":"active","left_at_ns":5}`,
		`{"user_id":1,"status":"paused"}`,
		`{"user_id":-1,"status":"active"}`,
		`{"user_id":1,"status":"active","history":[{"left_at_ns":5,"rejoined_at_ns":4}]}`,
		`{"user_id":1,"status":"active","late_leaves":[{"left_at_ns":5,"forwarded_through_ns":6}]}`,
		`{"user_id":1,"status":"active","history":[{"left_at_ns":1.5e9,"rejoined_at_ns":4}]}`,
		`{"user_id":1,"status":"active"} {}`,
	} {
		if c, err := decodeChangelog([]byte(bad)); err == nil {
			t.Errorf("decodeChangelog(%q) = %+v, want an error", bad, c)
		}
	}
}

// TestBatchBytes pins the size of a one-record batch: Kafka's 61-byte
// batch header, then the record with zigzag varint lengths.
func TestBatchBytes(t *testing.T) {
	for _, tc := range []struct {
		r    Record
		want int
	}{
		// attributes, ts delta, offset delta, key len+1, value len+1, header count: 8; its length 1.
		{Record{Key: []byte("k"), Value: []byte("v")}, 61 + 1 + 8},
		{Record{Value: []byte("v")}, 61 + 1 + 7},
		{Record{Key: []byte("k"), Value: make([]byte, 100), Headers: []Header{{"h", []byte("x")}}}, 61 + 2 + 3 + 2 + 2 + 100 + 1 + 4},
	} {
		if got := batchBytes(tc.r); got != tc.want {
			t.Errorf("batchBytes(key %q, %d value bytes, %d headers) = %d, want %d", tc.r.Key, len(tc.r.Value), len(tc.r.Headers), got, tc.want)
		}
	}
}

// FuzzDecodeChangelog: the changelog decoder never panics, accepts only
// valid JSON, and what it accepts is a state the model could hold:
// episodes that do not end before they start.
func FuzzDecodeChangelog(f *testing.F) {
	f.Add([]byte(state{leftAt: 100, history: [][2]int64{{10, 20}}, windows: [][3]int64{{100, 120, 1}}, cmd: "3"}.json(7)))
	f.Add([]byte(active().json(1)))
	f.Add([]byte(`{"user_id":1,"status":"left","left_at_ns":null}`))
	f.Add([]byte(`{"user_id":18446744073709551616,"status":"active"}`))
	f.Fuzz(func(t *testing.T, value []byte) {
		c, err := decodeChangelog(value)
		if err != nil {
			return
		}
		if !json.Valid(value) {
			t.Fatalf("accepted invalid JSON %q", value)
		}
		for _, e := range c.history {
			if e.rejoinedAt < e.leftAt || e.open {
				t.Fatalf("%q: history episode %+v", value, e)
			}
		}
	})
}
