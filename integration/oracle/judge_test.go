package oracle

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// TestJudge judges synthetic runs, one rule or finding per case, and
// checks every count of the verdict. Times are ms; user 1..9 are users.
func TestJudge(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(r *run)
		want  counts
	}{
		{"a clean run", func(r *run) {
			r.cmd(1, "leave", 100, "a")
			r.cmd(1, "rejoin", 200, "b")
			r.cmd(2, "leave", 150, "c")
			r.forward(r.sig(1, 99), r.sig(1, 200), r.sig(2, 149), r.sig(3, 1000))
			r.sig(1, 100, gated)
			r.sig(1, 199)
			r.sig(2, 150, gated)
			r.changelog(1, left(100))
			r.changelog(1, active([2]int64{100, 200}))
			r.changelog(2, left(150))
		}, counts{Expected: 4}},

		{"S5: an allowed signal lost, another forwarded three times", func(r *run) {
			r.sig(3, 10)
			s := r.sig(3, 11)
			r.forward(s, s, s)
		}, counts{Expected: 2, Lost: 1, Duplicates: 2}},

		{"S5, promise 7: a signal stamped before the boundary is forwarded, whenever it arrives", func(r *run) {
			r.cmd(1, "leave", 100, "a")
			r.forward(r.sig(1, 99))
			r.changelog(1, left(100))
		}, counts{Expected: 1}},

		{"S5: forwarded inside an episode: leaked; covered by a window: late; marked gated: leaked anyway", func(r *run) {
			r.cmd(1, "leave", 100, "a")
			r.cmd(2, "leave", 100, "b")
			r.forward(r.sig(1, 150), r.sig(2, 150), r.sig(2, 300, gated))
			r.changelog(1, left(100))
			r.changelog(2, state{leftAt: 100, windows: [][3]int64{{100, 400, 1}}})
		}, counts{Leaked: 2, Late: 1}},

		{"S5: an empty episode holds nothing", func(r *run) {
			r.cmd(1, "leave", 100, "a")
			r.cmd(1, "rejoin", 100, "b")
			r.forward(r.sig(1, 100))
			r.changelog(1, active([2]int64{100, 100}))
		}, counts{Expected: 1}},

		{"unknown: a cohort record no input holds", func(r *run) {
			r.add(kindCohort, 0, Record{Partition: 1, Key: []byte("1"), Value: []byte("hello")})
		}, counts{Unknown: 1}},

		{"S1: bad keys must be dead-lettered with a key reason, and never forwarded", func(r *run) {
			a := r.rawSignal([]byte("01"), 0, 10)
			b := r.rawSignal(nil, 1, 10)
			c := r.rawSignal([]byte("x"), 2, 10)
			d := r.rawSignal([]byte("18446744073709551616"), 2, 10)
			r.deadLetter(testTopics.Signals, a, "key_leading_zero")
			r.deadLetter(testTopics.Signals, b, "key_empty")
			r.deadLetter(testTopics.Signals, c, "command_json") // wrong reason
			r.forward(d)                                        // and d is not in the DLQ
		}, counts{Poison: 2, Unknown: 1}},

		{"S2: a misrouted signal's copy is judged; one without a copy is not forwarded", func(r *run) {
			a := r.rawSignal([]byte("3"), wrong("3"), 10)
			r.forward(r.republish(testTopics.Signals, a))
			r.rawSignal([]byte("4"), wrong("4"), 10)
		}, counts{Expected: 1, Unrouted: 1}},

		{"S2: forwarding a misrouted record instead of re-publishing it", func(r *run) {
			r.forward(r.rawSignal([]byte("3"), wrong("3"), 10))
		}, counts{Unrouted: 1, Unknown: 1}},

		{"S3: a signal near the cohort limit may be dead-lettered whole or truncated, with its hash", func(r *run) {
			big := bytes.Repeat([]byte("x"), DefaultMaxMessageBytes-1000)
			for i, v := range []string{"a", "b", "c"} {
				r.seq++
				rec := Record{Partition: right("5"), Offset: r.offset(testTopics.Signals, right("5")), Key: []byte("5"),
					Value: append([]byte(v), big...), Timestamp: int64(i)}
				r.add(kindSignal, 0, rec)
				switch v {
				case "a":
					r.forward(rec)
				case "b":
					r.deadLetter(testTopics.Signals, rec, reasonTooLarge, truncated("", rec.Value)...)
				case "c": // the wrong hash: not dead-lettered as the rules say, so lost
					r.deadLetter(testTopics.Signals, rec, reasonTooLarge, truncated("", []byte("other"))...)
				}
			}
		}, counts{Expected: 2, Lost: 1}},

		{"S4: a signal marked beyond the future skew must be dead-lettered", func(r *run) {
			skew := Header{HeaderExpect, []byte(ExpectTimestampSkew)}
			a := r.sig(6, 10, skew)
			r.deadLetter(testTopics.Signals, a, reasonTimestampSkew)
			r.forward(r.sig(6, 11, skew))
		}, counts{Poison: 1, Unknown: 1}},

		{"C1: a command with a bad key must be dead-lettered", func(r *run) {
			a := r.rawCommand([]byte("007"), 0, `{"op":"leave","user_id":7}`, 10)
			r.rawCommand(nil, 1, `{"op":"leave","user_id":7}`, 10)
			r.deadLetter(testTopics.Commands, a, "key_leading_zero")
		}, counts{Poison: 1}},

		{"C2: a misrouted command applies where it is re-published, not where it was found", func(r *run) {
			a := r.rawCommand([]byte("1"), wrong("1"), `{"op":"leave","user_id":1,"at_ns":100000000}`, 100)
			r.forward(r.sig(1, 150)) // before the copy, in offset order of the signals: irrelevant, event time decides
			r.republish(testTopics.Commands, a)
			r.republish(testTopics.Commands, a) // at least once: the second copy is a duplicate
			r.changelog(1, left(100))
			r.rawCommand([]byte("2"), wrong("2"), `{"op":"leave","user_id":2,"at_ns":100000000}`, 100)
			r.forward(r.sig(2, 150))
		}, counts{Expected: 1, Leaked: 1, Unrouted: 1}},

		{"C3: undecodable commands must be dead-lettered with any value reason", func(r *run) {
			a := r.rawCommand([]byte("1"), right("1"), `{"op":"leave","op":"rejoin","user_id":1}`, 10)
			b := r.rawCommand([]byte("1"), right("1"), `{"op":"quit","user_id":1}`, 10)
			c := r.rawCommand([]byte("1"), right("1"), `{"op":"leave","user_id":2}`, 10)
			r.rawCommand([]byte("1"), right("1"), `not json`, 10)
			r.deadLetter(testTopics.Commands, a, reasonCommandJSON)
			r.deadLetter(testTopics.Commands, b, reasonCommandUserMismatch) // another C3 reason: fine
			r.deadLetter(testTopics.Commands, c, reasonRejoinBeforeLeave)   // not a C3 reason
			r.forward(r.sig(1, 20))
		}, counts{Expected: 1, Poison: 2}},

		{"finding 3: poison pills: out-of-range boundaries, an oversize command, a 1 MB bad-key signal", func(r *run) {
			a := r.rawCommand([]byte("1"), right("1"), `{"op":"leave","user_id":1,"at_ns":18446744073709551615}`, 10)
			b := r.rawCommand([]byte("1"), right("1"), `{"op":"leave","user_id":1,"at_ns":9223372036854775808}`, 10)
			big := `{"op":"leave","user_id":1,"pad":"` + strings.Repeat("z", 800<<10)
			c := r.rawCommand([]byte("1"), right("1"), big, 10)
			d := r.rawCommand([]byte("1"), right("1"), big+"!", 10)
			s := Record{Partition: 0, Offset: r.offset(testTopics.Signals, 0), Key: []byte("user-1"), Value: bytes.Repeat([]byte("q"), 1<<20)}
			r.add(kindSignal, 0, s)
			r.deadLetter(testTopics.Commands, a, reasonAtOutOfRange)
			r.deadLetter(testTopics.Commands, b, reasonAtOutOfRange)
			r.deadLetter(testTopics.Commands, c, reasonTooLarge, truncated(reasonCommandJSON, c.Value)...)
			r.deadLetter(testTopics.Commands, d, reasonTooLarge, truncated(reasonCommandJSON, c.Value)...) // d's hash is not c's
			r.deadLetter(testTopics.Signals, s, reasonTooLarge, truncated("key_not_decimal", s.Value)...)
			r.forward(r.sig(1, 20))
		}, counts{Expected: 1, Poison: 1}},

		{"C4, finding 5: a boundary beyond the future skew is dead-lettered and takes no effect", func(r *run) {
			v := fmt.Sprintf(`{"op":"leave","user_id":1,"at_ns":%d}`, int64(100+3_600_000)*1e6)
			a := r.rawCommand([]byte("1"), right("1"), v, 100)
			r.deadLetter(testTopics.Commands, a, reasonFutureSkew)
			r.forward(r.sig(1, 200), r.sig(1, 3_600_200))
		}, counts{Expected: 2}},

		{"C4: a future boundary that was applied anyway loses the user's signals", func(r *run) {
			v := fmt.Sprintf(`{"op":"leave","user_id":1,"at_ns":%d}`, int64(100+3_600_000)*1e6)
			r.rawCommand([]byte("1"), right("1"), v, 100)
			r.sig(1, 200)
			r.changelog(1, left(100+3_600_000))
		}, counts{Expected: 1, Lost: 1, Poison: 1, Mismatches: 1}},

		{"C6, finding 5: the earliest boundary wins; what was forwarded before is late, in a window", func(r *run) {
			r.cmd(1, "leave", 200, "a")
			r.forward(r.sig(1, 150))
			r.cmd(1, "leave", 100, "b")
			r.changelog(1, left(200))
			r.changelog(1, state{leftAt: 100, windows: [][3]int64{{100, 150, 1}}})
		}, counts{Late: 1}},

		{"C5, finding 4: a re-delivered leave after a rejoin changes nothing", func(r *run) {
			r.cmd(1, "leave", 100, "a")
			r.cmd(1, "rejoin", 200, "b")
			c := r.cmd(1, "leave", 150, "c") // clamped to 200
			r.cmd(1, "rejoin", 250, "d")
			r.rawCommand(c.Key, c.Partition, string(c.Value), c.Timestamp) // the same record again
			r.sig(1, 300)                                                  // dropped, as if the re-delivery re-opened a leave
			r.changelog(1, left(250, [2]int64{100, 200}, [2]int64{200, 250}))
		}, counts{Expected: 1, Lost: 1, Mismatches: 1}},

		{"C7: a rejoin before the open leave must be dead-lettered, and changes nothing", func(r *run) {
			r.cmd(1, "leave", 100, "a")
			a := r.cmd(1, "rejoin", 50, "b")
			r.cmd(2, "leave", 100, "c")
			r.cmd(2, "rejoin", 50, "d")
			r.deadLetter(testTopics.Commands, a, reasonRejoinBeforeLeave)
			r.deadLetter(testTopics.Commands, a, reasonRejoinBeforeLeave) // command DLQ records are at least once
			r.changelog(1, left(100))
			r.changelog(2, left(100))
		}, counts{Poison: 1}},

		{"C7, finding 6: leave and rejoin in one millisecond close an empty episode", func(r *run) {
			r.rawCommand([]byte("1"), right("1"), `{"op":"leave","user_id":1}`, 100)
			r.rawCommand([]byte("1"), right("1"), `{"op":"rejoin","user_id":1}`, 100)
			r.forward(r.sig(1, 100), r.sig(1, 101))
			r.changelog(1, active([2]int64{100, 100}))
			r.rawCommand([]byte("2"), right("2"), `{"op":"leave","user_id":2}`, 100)
			r.rawCommand([]byte("2"), right("2"), `{"op":"rejoin","user_id":2}`, 100)
			r.changelog(2, left(100)) // as if the rejoin had been refused
		}, counts{Expected: 2, Poison: 0, Mismatches: 1}},

		{"changelog: every user a command reached needs a record, one whose commands were all dead-lettered none", func(r *run) {
			r.cmd(1, "leave", 100, "a")
			r.cmd(2, "rejoin", 100, "b") // changes nothing, but reached C5
			a := r.rawCommand([]byte("3"), right("3"), `bad`, 100)
			r.deadLetter(testTopics.Commands, a, reasonCommandJSON)
			r.rawChangelog([]byte("4"), `{"user_id":4,"status":"gone"}`)
			r.rawChangelog([]byte("x"), `{}`)
		}, counts{Mismatches: 4}},

		{"changelog: a user's records in two partitions have no order", func(r *run) {
			r.cmd(1, "leave", 100, "a")
			r.changelog(1, left(100))
			r.add(kindChangelog, 0, Record{Partition: (partitionOf([]byte("1"), testParts) + 1) % testParts, Key: []byte("1"),
				Value: []byte(left(100).json(1))})
		}, counts{Mismatches: 1}},

		{"finding 2: a window that vanishes from a later record is missing", func(r *run) {
			r.cmd(1, "leave", 100, "a")
			r.forward(r.sig(1, 120))
			r.changelog(1, state{leftAt: 100, windows: [][3]int64{{100, 120, 1}}, cmd: "1"})
			r.changelog(1, state{leftAt: 100, cmd: "2"}) // a new owner's record, without it
		}, counts{Missing: 1, Leaked: 1}},

		{"finding 2: windows carried back or extended stay covered; restated records are at least once", func(r *run) {
			r.cmd(1, "leave", 100, "a")
			r.forward(r.sig(1, 120), r.sig(1, 90), r.sig(1, 130))
			r.cmd(1, "leave", 80, "b")
			r.changelog(1, state{leftAt: 100, cmd: "1"})
			r.changelog(1, state{leftAt: 100, windows: [][3]int64{{100, 120, 1}}, cmd: "2"})
			r.changelog(1, state{leftAt: 100, cmd: "1"}) // command 1's record written again after a crash
			r.changelog(1, state{leftAt: 80, windows: [][3]int64{{80, 130, 1}}, cmd: "3"})
		}, counts{Late: 3}},

		{"finding 2: the latest record must hold every window, restatement or not", func(r *run) {
			r.cmd(1, "leave", 100, "a")
			r.forward(r.sig(1, 120))
			r.changelog(1, state{leftAt: 100, cmd: "1"})
			r.changelog(1, state{leftAt: 100, windows: [][3]int64{{100, 120, 1}}, cmd: "2"})
			r.changelog(1, state{leftAt: 100, cmd: "1"})
		}, counts{Missing: 1, Leaked: 1}},

		{"windows: an exact window without a forwarded signal of an episode is spurious; a conservative one is allowed", func(r *run) {
			r.cmd(1, "leave", 100, "a")
			r.forward(r.sig(1, 90)) // forwarded, but before the episode
			r.changelog(1, state{leftAt: 100, windows: [][3]int64{{100, 150, 1}, {100, 160, 0}}})
		}, counts{Expected: 1, Spurious: 1, Conservative: 1}},

		{"a signal marked gated outside every episode contradicts the model", func(r *run) {
			r.forward(r.sig(1, 10, gated))
		}, counts{Expected: 1, Contradictions: 1}},
	} {
		for _, style := range valueStyles {
			t.Run(tc.name+"/"+style.name, func(t *testing.T) {
				r := newRun(t, style)
				tc.build(r)
				rep := r.report()
				if got := countsOf(rep); got != tc.want {
					t.Fatalf("counts\n %+v\nwant\n %+v\n%s", got, tc.want, rep.Details())
				}
				if rep.Damage() != tc.want.damage() {
					t.Fatalf("Damage() = %d, want %d", rep.Damage(), tc.want.damage())
				}
				if (rep.Damage() > 0 || rep.Late > 0) != (rep.Details() != "") {
					t.Fatalf("damage %d, late %d, details %q", rep.Damage(), rep.Late, rep.Details())
				}
			})
		}
	}
}
