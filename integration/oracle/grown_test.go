package oracle

import (
	"fmt"
	"strconv"
	"testing"
)

// grownRun is a synthetic run whose commands and signals grew from 2 to 4
// partitions, and whose changelog grew too: records are placed by hand.
type grownRun struct {
	j    *Judge
	next map[string]map[int32]int64
	seq  int
}

func newGrownRun(t *testing.T, changelogGrew bool) *grownRun {
	t.Helper()
	j, err := NewJudge(Config{Topics: testTopics, Partitions: 4, Earlier: []int32{2}, ChangelogGrew: changelogGrew})
	if err != nil {
		t.Fatal(err)
	}
	return &grownRun{j: j, next: make(map[string]map[int32]int64)}
}

func (g *grownRun) at(topic string, p int32) Record {
	if g.next[topic] == nil {
		g.next[topic] = make(map[int32]int64)
	}
	o := g.next[topic][p]
	g.next[topic][p]++
	return Record{Partition: p, Offset: o}
}

func (g *grownRun) cmd(user uint64, p int32, op string, atMs int64) Record {
	r := g.at(testTopics.Commands, p)
	r.Key, r.Timestamp = []byte(keyOf(user)), atMs
	r.Value = fmt.Appendf(nil, `{"op":%q,"user_id":%d,"at_ns":%d,"request_id":"r%d"}`, op, user, atMs*1e6, atMs)
	g.j.AddCommand(r)
	return r
}

func (g *grownRun) sig(user uint64, p int32, tsMs int64, hs ...Header) Record {
	r := g.at(testTopics.Signals, p)
	g.seq++
	r.Key, r.Timestamp, r.Value, r.Headers = []byte(keyOf(user)), tsMs, []byte("v"+strconv.Itoa(g.seq)), hs
	g.j.AddSignal(r)
	return r
}

// republish adds the copy of rec in partition p.
func (g *grownRun) republish(topic string, rec Record, p int32) Record {
	cp := g.at(topic, p)
	cp.Key, cp.Value, cp.Timestamp = rec.Key, rec.Value, rec.Timestamp
	cp.Headers = append(append([]Header(nil), rec.Headers...), Header{headerMisroutedFrom, []byte(pos{rec.Partition, rec.Offset}.String())})
	if topic == testTopics.Commands {
		g.j.AddCommand(cp)
	} else {
		g.j.AddSignal(cp)
	}
	return cp
}

func (g *grownRun) forward(recs ...Record) {
	for _, rec := range recs {
		cp := rec
		cp.Offset = g.at(testTopics.Cohort, rec.Partition).Offset
		g.j.AddCohort(cp)
	}
}

// changelog adds a record of user to changelog partition p, following
// the command at offset of partition 1 of a commands topic of parts
// partitions.
func (g *grownRun) changelog(user uint64, p int32, s state, parts, offset int) {
	g.changelogAt(user, p, s, parts, 1, offset)
}

// changelogAt is changelog for the command at cmdPart/offset; s is left
// or active with one closed episode.
func (g *grownRun) changelogAt(user uint64, p int32, s state, parts, cmdPart, offset int) {
	r := g.at(testTopics.Changelog, p)
	r.Key = []byte(keyOf(user))
	status := fmt.Sprintf(`"status":"left","left_at_ns":%d,"history":[]`, s.leftAt*1e6)
	if s.leftAt < 0 {
		status = fmt.Sprintf(`"status":"active","left_at_ns":null,"history":[{"left_at_ns":%d,"rejoined_at_ns":%d}]`,
			s.history[0][0]*1e6, s.history[0][1]*1e6)
	}
	r.Value = fmt.Appendf(nil, `{"user_id":%d,%s,"late_leaves":[],`+
		`"command":{"op":"leave","topic":"commands","partitions":%d,"partition":%d,"offset":%d,"changed":true}}`,
		user, status, parts, cmdPart, offset)
	g.j.AddChangelog(r)
}

// movingUsers returns n users whose partition is 1 of 2 and 3 of 4.
func movingUsers(n int) []uint64 {
	var out []uint64
	for u := uint64(1); len(out) < n && u < 10_000; u++ {
		k := []byte(keyOf(u))
		if partitionOf(k, 2) == 1 && partitionOf(k, 4) == 3 {
			out = append(out, u)
		}
	}
	return out
}

// TestJudgeGrown: the commands and signals grew from 2 to 4 partitions.
// A record in its key's partition under 2 only was routed right when
// written: judged where it is, unless it was re-published, then at its
// copy. Leaks and misrouted records are still seen.
func TestJudgeGrown(t *testing.T) {
	users := movingUsers(4)
	if len(users) < 4 {
		t.Fatal("no users that move from partition 1 of 2 to 3 of 4")
	}
	for _, tc := range []struct {
		name  string
		build func(g *grownRun)
		want  counts
	}{
		{"judged under the old count where they are", func(g *grownRun) {
			u := users[0]
			g.forward(g.sig(u, 1, 99))
			g.cmd(u, 1, "leave", 100)
			g.sig(u, 1, 150, gated)
			g.changelog(u, 1, left(100), 2, 0)
		}, counts{Expected: 1}},

		{"re-published under the new count, judged at the copies", func(g *grownRun) {
			u := users[1]
			g.republish(testTopics.Commands, g.cmd(u, 1, "leave", 100), 3)
			g.forward(g.republish(testTopics.Signals, g.sig(u, 1, 99), 3))
			g.republish(testTopics.Signals, g.sig(u, 1, 150, gated), 3)
			g.changelog(u, 3, left(100), 4, 0)
		}, counts{Expected: 1}},

		{"a leak under the old count is a leak", func(g *grownRun) {
			u := users[2]
			g.cmd(u, 1, "leave", 100)
			g.forward(g.sig(u, 1, 150, gated))
			g.changelog(u, 1, left(100), 2, 0)
		}, counts{Leaked: 1}},

		{"both the original and its copy forwarded: a duplicate", func(g *grownRun) {
			s := g.sig(users[3], 1, 10)
			g.forward(s, g.republish(testTopics.Signals, s, 3))
		}, counts{Expected: 1, Duplicates: 1}},

		{"misrouted under both counts: a copy in either partition will do, none is damage", func(g *grownRun) {
			u := users[0] // partition 1 of 2, 3 of 4: 0 and 2 are wrong under both
			g.forward(g.republish(testTopics.Signals, g.sig(u, 0, 10), 1))
			g.forward(g.republish(testTopics.Signals, g.sig(u, 2, 11), 3))
			g.sig(u, 0, 12)
		}, counts{Expected: 2, Unrouted: 1}},

		{"applied where it is under the old count, copied after a rejoin: the copy changes nothing", func(g *grownRun) {
			u := users[2]
			leave := g.cmd(u, 1, "leave", 100)
			g.changelogAt(u, 1, left(100), 2, 1, int(leave.Offset)) // the processor says it applied it there
			g.cmd(u, 3, "rejoin", 200)
			g.changelogAt(u, 3, active([2]int64{100, 200}), 4, 3, 0)
			g.republish(testTopics.Commands, leave, 3)
			g.changelogAt(u, 3, active([2]int64{100, 200}), 4, 3, 1)
			g.forward(g.sig(u, 3, 250))
		}, counts{Expected: 1}},

		{"not applied where it is: judged at its copy, after the rejoin", func(g *grownRun) {
			u := users[2]
			leave := g.cmd(u, 1, "leave", 100)
			g.cmd(u, 3, "rejoin", 200)
			g.changelogAt(u, 3, active([2]int64{100, 200}), 4, 3, 0) // claims an order the rules do not give
			g.republish(testTopics.Commands, leave, 3)
		}, counts{Mismatches: 1}},

		{"a grown changelog: the latest record is the one of the latest command", func(g *grownRun) {
			u := users[1]
			g.cmd(u, 1, "leave", 200)
			g.republish(testTopics.Commands, g.cmd(u, 1, "leave", 100), 3) // read under 4: the earlier boundary wins
			g.changelog(u, 0, left(100), 4, 0)                             // read first, the latest
			g.changelog(u, 1, left(200), 2, 0)
		}, counts{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGrownRun(t, true)
			tc.build(g)
			if got := countsOf(g.j.Report()); got != tc.want {
				t.Fatalf("counts %+v, want %+v", got, tc.want)
			}
		})
	}

	// Without ChangelogGrew, records of one user in two changelog
	// partitions are a mismatch, and without Earlier, records of the old
	// count are misrouted.
	g := newGrownRun(t, false)
	g.cmd(users[0], 1, "leave", 100)
	g.changelog(users[0], 0, left(100), 4, 0)
	g.changelog(users[0], 1, left(100), 2, 0)
	if got := countsOf(g.j.Report()); got.Mismatches != 1 {
		t.Errorf("changelog not grown: counts %+v, want a mismatch", got)
	}
	j, err := NewJudge(Config{Topics: testTopics, Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	j.AddSignal(Record{Partition: 1, Key: []byte(keyOf(users[0])), Value: []byte("v"), Timestamp: 10})
	if got := countsOf(j.Report()); got.Unrouted != 1 {
		t.Errorf("no earlier count: counts %+v, want the record misrouted", got)
	}
	if _, err := NewJudge(Config{Topics: testTopics, Partitions: 4, Earlier: []int32{0}}); err != ErrPartitions {
		t.Errorf("Earlier 0: %v, want ErrPartitions", err)
	}
}
